"""Model repositories on object storage: the real binary started with
`--model-repository=s3://127.0.0.1:PORT/bucket/path` against a real S3-compatible server (moto's,
started here on loopback), the models uploaded with boto3, served to tritonclient over HTTP and
gRPC; explicit load and unload; poll mode picking up a new version under load and a deleted
model, never loading a half-uploaded one; and the errors of a bad URL, a missing bucket, refused
credentials and an unreachable endpoint, each naming the repository.
"""
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import BUNDLED_REPO, Server, copy_bundled_repo, free_ports, run_to_exit, wait_until

BUCKET = "models"
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


class Moto:
    """moto's S3 server on a free loopback port (`env`: extra settings, e.g. enforcing auth)."""

    def __init__(self, tmp: Path, env=None):
        self.port = free_ports(1)[0]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / f"moto-{self.port}.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        wait_until(self._up, timeout=30, what="moto's S3 server")
        self.s3 = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                               aws_secret_access_key="testing", region_name="us-east-1")

    def _up(self):
        assert self.proc.poll() is None, "moto exited"
        try:
            requests.get(self.endpoint, timeout=1)
            return True
        except requests.RequestException:
            return False

    def url(self, path="repo", bucket=BUCKET) -> str:
        return f"s3://127.0.0.1:{self.port}/{bucket}/{path}"

    def upload(self, model: str, prefix="repo", as_name=None, bucket=BUCKET):
        """Uploads a bundled model folder under `prefix`/`as_name`."""
        src = BUNDLED_REPO / model
        for f in sorted(src.rglob("*")):
            if f.is_file():
                rel = f.relative_to(src).as_posix()
                self.s3.upload_file(str(f), bucket, f"{prefix}/{as_name or model}/{rel}")

    def delete_model(self, model: str, prefix="repo"):
        listed = self.s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/{model}/")
        for o in listed.get("Contents", []):
            self.s3.delete_object(Bucket=BUCKET, Key=o["Key"])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    if not any(BUNDLED_REPO.rglob("*.onnx")):
        pytest.fail(f"{BUNDLED_REPO} has no .onnx files: run scripts/setup.sh first")
    m = Moto(tmp_path_factory.mktemp("moto"))
    m.s3.create_bucket(Bucket=BUCKET)
    yield m
    m.stop()


@pytest.fixture
def s3_server(tmp_path, monkeypatch):
    """Starts tritium on `repo` (a URL, or a list of repositories) with the test keys in its
    environment; every server is stopped (exit code 0) when the test ends."""
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("TRITON_AWS_MOUNT_DIRECTORY", str(tmp_path / "mount"))
    started = []

    def start(repo, args=(), wait_for="ready") -> Server:
        repos = repo if isinstance(repo, list) else [repo]
        extra = [a for r in repos[1:] for a in ("--model-repository", str(r))]
        srv = Server(repos[0], args=[*extra, *args], log_dir=tmp_path)
        started.append(srv)
        return srv.start(wait_for=wait_for, timeout=120)

    yield start
    for srv in started:
        assert srv.stop() == 0, srv.log_tail()


def add_sub_inputs(module, n=16):
    a = np.arange(n, dtype=np.float32).reshape(1, n)
    b = np.ones((1, n), dtype=np.float32)
    inputs = [module.InferInput("INPUT0", [1, n], "FP32"), module.InferInput("INPUT1", [1, n], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a + b


def check_add_sub(srv: Server, model="add_sub", version=""):
    inputs, want = add_sub_inputs(httpclient)
    got = srv.client.infer(model, inputs, model_version=version).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(got, want)


def states(srv: Server) -> dict:
    return {(m["name"], m.get("version", "")): m.get("state", "") for m in srv.index()}


def test_serves_s3_and_local_repositories_together(moto, s3_server, tmp_path):
    for m in ("add_sub", "identity_fp32"):
        moto.upload(m, prefix="serve")
    local = copy_bundled_repo(tmp_path / "local", ["identity"])
    srv = s3_server([moto.url("serve"), local])
    assert states(srv) == {("add_sub", "1"): "READY", ("identity_fp32", "1"): "READY", ("identity", "1"): "READY"}
    check_add_sub(srv)
    grpc = grpcclient.InferenceServerClient(srv.grpc_url)
    inputs, want = add_sub_inputs(grpcclient)
    np.testing.assert_array_equal(grpc.infer("add_sub", inputs).as_numpy("OUTPUT0"), want)
    assert grpc.is_model_ready("identity_fp32") and grpc.is_model_ready("identity")
    grpc.close()
    # The models were copied into the mount directory, one folder per repository.
    mirrored = tmp_path / "mount" / f"s3___127.0.0.1_{moto.port}_models_serve"
    assert (mirrored / "add_sub" / "1" / "model.onnx").read_bytes() == \
        (BUNDLED_REPO / "add_sub" / "1" / "model.onnx").read_bytes()


def test_with_namespacing_an_s3_repository_is_a_namespace_named_by_its_url(moto, s3_server, tmp_path):
    moto.upload("add_sub", prefix="ns")
    local = copy_bundled_repo(tmp_path / "local", ["add_sub"])
    srv = s3_server([moto.url("ns"), local], args=["--model-namespacing=true"])
    r = srv.post("/v2/models/add_sub/infer", {"inputs": []})
    assert r.status_code == 400 and "There are 2 identifiers of model 'add_sub'" in r.text, r.text
    log = srv.log_path.read_text()
    assert f"successfully loaded '{moto.url('ns')}::add_sub'" in log, log[-3000:]
    assert f"successfully loaded '{local}::add_sub'" in log


def test_version_policy_applies_as_for_a_local_repository(moto, s3_server):
    src = BUNDLED_REPO / "add_sub"
    config = (src / "config.pbtxt").read_text() + "\nversion_policy: { specific: { versions: [1, 3] } }\n"
    moto.s3.put_object(Bucket=BUCKET, Key="policy/add_sub/config.pbtxt", Body=config.encode())
    for v in ("1", "2", "3"):
        moto.s3.upload_file(str(src / "1" / "model.onnx"), BUCKET, f"policy/add_sub/{v}/model.onnx")
    srv = s3_server(moto.url("policy"))
    assert states(srv) == {("add_sub", "1"): "READY", ("add_sub", "3"): "READY"}
    check_add_sub(srv, version="3")


def test_explicit_load_reads_the_bucket_at_each_load(moto, s3_server):
    moto.upload("add_sub", prefix="explicit")
    srv = s3_server(moto.url("explicit"), args=["--model-control-mode=explicit"])
    assert states(srv) == {("add_sub", ""): ""}
    assert not srv.client.is_model_ready("add_sub")
    srv.client.load_model("add_sub")
    check_add_sub(srv)
    srv.client.unload_model("add_sub")
    wait_until(lambda: not srv.client.is_model_ready("add_sub"), what="add_sub unloaded")
    # A version uploaded since is there at the next load.
    moto.s3.upload_file(str(BUNDLED_REPO / "add_sub" / "1" / "model.onnx"), BUCKET, "explicit/add_sub/2/model.onnx")
    srv.client.load_model("add_sub")
    assert srv.client.is_model_ready("add_sub", "2")
    check_add_sub(srv, version="2")
    # A model the bucket does not have: Triton's message, naming the model.
    with pytest.raises(Exception, match="failed to load 'nothere'"):
        srv.client.load_model("nothere")


def test_poll_picks_up_a_new_version_under_load_and_a_deleted_model(moto, s3_server):
    for m in ("add_sub", "add_sub_nobatch"):
        moto.upload(m, prefix="poll")
    srv = s3_server(moto.url("poll"), args=["--model-control-mode=poll", "--repository-poll-secs=1"])
    stop = threading.Event()
    done, failed = [0], []

    def load():
        client = httpclient.InferenceServerClient(srv.http_url)
        inputs, want = add_sub_inputs(httpclient)
        while not stop.is_set():
            try:
                got = client.infer("add_sub", inputs).as_numpy("OUTPUT0")
                np.testing.assert_array_equal(got, want)
                done[0] += 1
            except Exception as e:  # noqa: BLE001 - every failure counts
                failed.append(f"{type(e).__name__}: {e}")  # repr hides tritonclient's message
        client.close()

    sender = threading.Thread(target=load)
    sender.start()
    try:
        time.sleep(1)
        moto.s3.upload_file(str(BUNDLED_REPO / "add_sub" / "1" / "model.onnx"), BUCKET, "poll/add_sub/2/model.onnx")
        wait_until(lambda: states(srv).get(("add_sub", "2")) == "READY", timeout=60, what="add_sub version 2")
        before = done[0]
        wait_until(lambda: done[0] > before + 5, timeout=30, what="requests on version 2")
    finally:
        stop.set()
        sender.join()
    assert failed == [], failed[:3]
    assert done[0] > 10
    assert srv.client.get_model_metadata("add_sub")["versions"] == ["2"]
    # A model deleted from the bucket is unloaded.
    moto.delete_model("add_sub_nobatch", prefix="poll")
    wait_until(lambda: not srv.client.is_model_ready("add_sub_nobatch"), timeout=30, what="add_sub_nobatch unloaded")
    check_add_sub(srv)


def test_a_half_uploaded_model_loads_only_once_its_listing_settles(moto, s3_server):
    moto.upload("add_sub", prefix="half")
    srv = s3_server(moto.url("half"), args=["--model-control-mode=poll", "--repository-poll-secs=1"])
    # The new model arrives one object at a time, each within a poll interval of the last: no
    # two polls list it the same, so it is never copied or loaded half-way (its config alone
    # would load as a failure, UNAVAILABLE).
    src = BUNDLED_REPO / "add_sub"
    parts = [("config.pbtxt", (src / "config.pbtxt").read_bytes().replace(b'"add_sub"', b'"late"')),
             ("1/notes.txt", b"uploading"), ("1/more.txt", b"still uploading"),
             ("1/model.onnx", (src / "1" / "model.onnx").read_bytes())]
    for key, body in parts:
        moto.s3.put_object(Bucket=BUCKET, Key=f"half/late/{key}", Body=body)
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            assert not any(name == "late" for name, _ in states(srv)), states(srv)
            time.sleep(0.1)
    wait_until(lambda: srv.client.is_model_ready("late"), timeout=30, what="the settled model")
    check_add_sub(srv, model="late")
    assert "'late' changed; waiting for its upload to settle" in srv.log_path.read_text()


def test_a_failed_poll_keeps_the_models_serving(tmp_path, s3_server):
    own = Moto(tmp_path)
    try:
        own.s3.create_bucket(Bucket=BUCKET)
        own.upload("add_sub")
        srv = s3_server(own.url(), args=["--model-control-mode=poll", "--repository-poll-secs=1"])
        check_add_sub(srv)
    finally:
        own.stop()
    # The endpoint is gone: polls fail, naming the repository, and the model keeps serving.
    wait_until(lambda: f"poll: model repository {own.url()}: cannot list" in srv.log_path.read_text(),
               timeout=60, what="a failed poll")
    assert srv.client.is_model_ready("add_sub")
    check_add_sub(srv)


def test_bad_repositories_fail_at_start_naming_the_repository(moto, tmp_path, monkeypatch):
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    nothing = free_ports(1)[0]
    cases = [
        ("s3://host:port/bucket/path", "is not a valid object-storage URL"),
        ("s3://127.0.0.1:9000", "no bucket name"),
        (moto.url(bucket="no-such-bucket"), "NoSuchBucket"),
        (f"s3://127.0.0.1:{nothing}/{BUCKET}/repo", "cannot list"),
    ]
    for url, why in cases:
        code, out = run_to_exit(["--model-repository", url, "--http-port", "0", "--grpc-port", "0",
                                 "--metrics-port", "0"], timeout=90)
        assert code != 0, out
        assert url in out and why in out, out
        assert "panicked" not in out, out
    # Refused credentials, from the environment or from Triton's credential file: a server
    # that checks them answers InvalidAccessKeyId.
    strict = Moto(tmp_path, env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    creds = tmp_path / "creds.json"
    creds.write_text('{"s3": {"": {"key_id": "from-file", "secret_key": "x", "region": "us-east-1"}}}')
    try:
        code, out = run_to_exit(["--model-repository", strict.url()], timeout=90)
        assert code != 0 and strict.url() in out and "InvalidAccessKeyId" in out, out
        monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(creds))
        code, out = run_to_exit(["--model-repository", strict.url()], timeout=90)
        assert code != 0 and strict.url() in out and "InvalidAccessKeyId" in out, out
        assert "S3 credentials from credential file" in out, out
    finally:
        strict.stop()
    # A credential file that is not JSON.
    creds.write_text("not json")
    code, out = run_to_exit(["--model-repository", moto.url()], timeout=90)
    assert code != 0 and str(creds) in out, out


def test_keys_from_tritons_credential_file_alone(moto, s3_server, tmp_path, monkeypatch):
    moto.upload("add_sub", prefix="creds")
    creds = tmp_path / "creds.json"
    creds.write_text('{"s3": {"s3://127.0.0.1": {"key_id": "testing", "secret_key": "testing", "region": "us-east-1"}}}')
    start = s3_server  # sets the environment's keys; this test takes them away again
    for k in KEYS:
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(creds))
    srv = start(moto.url("creds"))
    check_add_sub(srv)
    assert "S3 credentials from credential file, region us-east-1" in srv.log_path.read_text()
