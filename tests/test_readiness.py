"""Honest readiness (issue 16, point 8): under `--strict-readiness` (the default, as in Triton),
/v2/health/ready turns false while a loaded model has no live instance, because its supervisor is
restarting the only one, and true again once the instance is back. Without strict readiness the
server stays ready, and only the model's own readiness shows the gap.

The instance is killed for real: the `errors` Python model exits its stub process on MODE 9, and
the stub takes a second or more to come back (a new process that imports numpy)."""
import shutil
import time

import pytest
import requests

from test_python_backend import MODELS, stub_env
from helpers import Server

CRASH = {"inputs": [{"name": "MODE", "datatype": "INT32", "shape": [1], "data": [9]}]}


@pytest.fixture
def repo(tmp_path):
    shutil.copytree(MODELS / "errors", tmp_path / "models" / "errors")
    return tmp_path / "models"


def watch(server: Server, seconds: float):
    """Polls server and model readiness until both have been seen false and then true again, or
    for `seconds`; returns the sequence of distinct (server_ready, model_ready) states seen."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = (requests.get(f"{server.base}/v2/health/ready", timeout=5).status_code == 200,
                 requests.get(f"{server.base}/v2/models/errors/ready", timeout=5).status_code == 200)
        if not seen or seen[-1] != state:
            seen.append(state)
        if len(seen) >= 3 and state == (True, True):
            break
        time.sleep(0.01)
    return seen


@pytest.mark.parametrize("strict", [True, False])
def test_ready_turns_false_while_the_only_instance_restarts(repo, tmp_path, strict):
    server = Server(repo, args=[f"--strict-readiness={str(strict).lower()}"], log_dir=tmp_path,
                    env=stub_env()).start(timeout=120)
    try:
        answer = requests.post(f"{server.base}/v2/models/errors/infer", json=CRASH, timeout=60)
        assert answer.status_code == 500, answer.text
        seen = watch(server, 60)
        if strict:
            assert (False, False) in seen and seen[-1] == (True, True), seen
        else:
            assert all(s for s, _ in seen), seen
            assert (True, False) in seen and seen[-1] == (True, True), seen
        ok = requests.post(f"{server.base}/v2/models/errors/infer",
                           json={"inputs": [{"name": "MODE", "datatype": "INT32", "shape": [1], "data": [5]}]},
                           timeout=60)
        assert ok.status_code == 200 and ok.json()["outputs"][0]["data"] == [50], ok.text
    finally:
        assert server.stop() == 0, server.log_tail()

