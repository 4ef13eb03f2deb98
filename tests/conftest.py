"""Fixtures that run the real `tritium` binary on a copy of the bundled model repository.

- `server`: one server per test module on the whole bundled repository (control mode none),
  started once, ready, and stopped with SIGTERM at the end; the stop must exit 0.
- `start_server(repo=None, args=(), wait_for="ready", headers=None)`: starts more servers with
  extra flags and/or a custom repository (headers: for the readiness probe, where health is restricted) (explicit mode, poll mode, broken configs); each is stopped the same
  way when the test ends.
- `repo_copy(models=None)`: a fresh copy of the bundled repository (or of some of its models) in
  the test's tmp dir, to edit before starting a server on it.

Nothing is built here: CI runs `cargo build` and `scripts/setup.sh` first.
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import Server, copy_bundled_repo  # noqa: E402


def _stop_and_check(srv: Server):
    code = srv.stop()
    assert code == 0, f"tritium exited with {code} after SIGTERM:\n{srv.log_tail()}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("server")
    repo = copy_bundled_repo(base / "models")
    srv = Server(repo, log_dir=base).start()
    yield srv
    _stop_and_check(srv)


@pytest.fixture
def repo_copy(tmp_path):
    counter = [0]

    def make(models=None) -> Path:
        counter[0] += 1
        return copy_bundled_repo(tmp_path / f"models{counter[0]}", models)

    return make


@pytest.fixture
def start_server(tmp_path, repo_copy):
    started = []

    def start(repo=None, args=(), wait_for="ready", timeout=60.0, headers=None) -> Server:
        srv = Server(repo if repo is not None else repo_copy(), args=args, log_dir=tmp_path)
        started.append(srv)
        return srv.start(wait_for=wait_for, timeout=timeout, headers=headers)

    yield start
    failures = []
    for srv in started:
        try:
            _stop_and_check(srv)
        except (AssertionError, TimeoutError) as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)
