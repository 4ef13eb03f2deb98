"""Starting and stopping the real `tritium` binary for the integration tests, and small helpers
for speaking the KServe v2 HTTP protocol by hand where tritonclient would refuse to send
something malformed.

Nothing here builds the server: CI runs `cargo build` first. The binary is $TRITIUM_BIN or
target/debug/tritium.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parents[1]
BUNDLED_REPO = REPO_ROOT / "model_repository"
EXAMPLES_REPO = REPO_ROOT / "examples" / "triton_client_models"


def tritium_bin() -> Path:
    path = Path(os.environ.get("TRITIUM_BIN", REPO_ROOT / "target" / "debug" / "tritium"))
    if not path.is_file() or not os.access(path, os.X_OK):
        raise FileNotFoundError(f"no tritium binary at {path}: run `cargo build` (or set TRITIUM_BIN)")
    return path


def run_to_exit(args, timeout=30):
    """Runs tritium with `args` until it exits; (exit code, output)."""
    p = subprocess.run([str(tritium_bin()), *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def free_ports(n: int) -> list:
    """n distinct ports that were free a moment ago (all held open together while choosing)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def copy_bundled_repo(dest: Path, models=None) -> Path:
    """Copies the bundled model repository (or only `models`) to dest; fails when the model files
    that scripts/setup.sh makes are missing."""
    if not any(BUNDLED_REPO.rglob("*.onnx")):
        raise FileNotFoundError(f"{BUNDLED_REPO} has no .onnx files: run scripts/setup.sh first")
    dest.mkdir(parents=True, exist_ok=True)
    for src in sorted(BUNDLED_REPO.iterdir()):
        if not src.is_dir() or (models is not None and src.name not in models):
            continue
        shutil.copytree(src, dest / src.name)
    return dest


def copy_examples_repo(dest: Path, folders=("core", "decoupled", "densenet")) -> list:
    """Copies folders of the repository for Triton's client examples to dest (one model
    repository each) and returns their paths; fails when scripts/setup.sh has not made the
    model files."""
    if not any(EXAMPLES_REPO.rglob("*.onnx")):
        raise FileNotFoundError(f"{EXAMPLES_REPO} has no .onnx files: run scripts/setup.sh first")
    out = []
    for folder in folders:
        shutil.copytree(EXAMPLES_REPO / folder, dest / folder)
        out.append(dest / folder)
    return out


class Server:
    """One running tritium process on free ports, with its log in `log_path`."""

    def __init__(self, repo: Path, args=(), log_dir: Path = None, exit_timeout_secs: int = 10, env=None):
        # An object-storage URL (s3://…) stays a string: a Path would fold its "//".
        self.repo = repo if isinstance(repo, str) and "://" in repo else Path(repo)
        self.env = env
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self.exit_timeout_secs = exit_timeout_secs
        self.args = list(args)
        self.log_path = Path(log_dir or self.repo.parent) / f"tritium-{self.http_port}.log"
        self.proc = None
        self._client = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def base(self) -> str:
        return f"http://{self.http_url}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def command(self) -> list:
        return [str(tritium_bin()), "--model-repository", str(self.repo),
                "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
                "--metrics-address", "127.0.0.1",
                "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
                "--metrics-port", str(self.metrics_port),
                "--exit-timeout-secs", str(self.exit_timeout_secs), *self.args]

    def start(self, wait_for: str = "ready", timeout: float = 60.0, headers=None) -> "Server":
        """Starts the process and waits until GET /v2/health/<wait_for> (sent with `headers`,
        where health is a restricted API) answers 200."""
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=REPO_ROOT, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tritium exited with {self.proc.returncode} before it was "
                                   f"{wait_for}:\n{self.log_tail()}")
            try:
                probe = requests.get(f"{self.base}/v2/health/{wait_for}", headers=headers, timeout=1)
                if probe.status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.kill()
        raise TimeoutError(f"tritium was not {wait_for} within {timeout}s:\n{self.log_tail()}")

    @property
    def client(self):
        """A tritonclient.http client, made once; concurrency 64 for async_infer."""
        if self._client is None:
            import tritonclient.http as httpclient
            self._client = httpclient.InferenceServerClient(self.http_url, concurrency=64,
                                                            network_timeout=120.0)
        return self._client

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM) -> int:
        """Sends `sig`, waits up to the exit timeout (plus slack) and returns the exit code;
        kills the process and raises if it does not exit in time. Calling it again returns the
        same exit code."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=self.exit_timeout_secs + 10)
            except subprocess.TimeoutExpired:
                self.kill()
                raise TimeoutError(f"tritium did not exit within {self.exit_timeout_secs + 10}s "
                                   f"of {sig!r}:\n{self.log_tail()}")
        if not self._log.closed:
            self._log.close()
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # Raw protocol helpers.
    def get(self, path, **kw):
        return requests.get(self.base + path, timeout=kw.pop("timeout", 30), **kw)

    def post(self, path, body=None, **kw):
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        return requests.post(self.base + path, data=body, timeout=kw.pop("timeout", 60), **kw)

    def index(self) -> list:
        r = self.post("/v2/repository/index")
        assert r.status_code == 200, r.text
        return r.json()


def identity_config(name: str, max_batch_size: int = 0, count: int = 1, delay_ms: int = 0, extra: str = "") -> str:
    """config.pbtxt of a built-in `identity` model (FP32 INPUT0 -> OUTPUT0, any length) with
    `count` instances, `execute_delay_ms` when `delay_ms` is set, and `extra` text appended (a
    `dynamic_batching` block, say): the slow or echo models the tests build."""
    text = f"""
name: "{name}"
backend: "identity"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
"""
    if delay_ms:
        text += f'parameters {{ key: "execute_delay_ms" value: {{ string_value: "{delay_ms}" }} }}\n'
    return text + extra


def binary_request(header: dict, blobs) -> tuple:
    """Body and headers of a binary-tensor-extension request: the JSON header, then the blobs."""
    h = json.dumps(header).encode()
    return h + b"".join(blobs), {"Inference-Header-Content-Length": str(len(h)),
                                 "Content-Type": "application/octet-stream"}


def split_binary_response(resp) -> tuple:
    """(json header, binary tail) of a response that may use the binary tensor extension."""
    n = resp.headers.get("Inference-Header-Content-Length")
    if n is None:
        return resp.json(), b""
    n = int(n)
    return json.loads(resp.content[:n]), resp.content[n:]


def error_text(resp) -> str:
    """The `error` of a KServe error body; fails the test when the body is not that shape."""
    body = resp.json()
    assert set(body) == {"error"}, f"error body should be {{'error': ...}}, got {body!r}"
    return body["error"]


def wait_until(predicate, timeout=20.0, what="condition", interval=0.05):
    """Polls `predicate` until it returns something truthy, and returns that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
