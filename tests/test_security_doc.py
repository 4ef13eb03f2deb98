"""docs/security.md is checked by the tests (issue 16, point 10): every flag it names is a flag
of the server, with the default it states; every test it names exists; and the refusal texts
quoted in its tables are what the running server answers — each probe below sends one bad
input and the doc's quote (its `<...>` placeholders standing for any text) must match the
answer exactly. Changing an answer without the page, or the page without the answer, fails."""
import ast
import re
import socket

import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from helpers import REPO_ROOT, Server, copy_bundled_repo, run_to_exit

DOC = (REPO_ROOT / "docs" / "security.md").read_text()
TESTS = REPO_ROOT / "tests"


def quotes():
    """Every `code span` of the page, unescaped of nothing (the page writes texts as sent)."""
    return re.findall(r"`([^`\n]+)`", DOC)


def matches(quote, actual):
    pattern = "".join(".+?" if re.fullmatch(r"<[^>]+>", part) else re.escape(part)
                      for part in re.split(r"(<[^>]+>)", quote))
    return re.fullmatch(pattern, actual, re.S) is not None


def quoted(actual, lead):
    """The page's quote that begins like `lead` must match `actual`."""
    candidates = [q for q in quotes() if q.startswith(lead)]
    assert candidates, f"docs/security.md no longer quotes the answer beginning {lead!r}"
    assert any(matches(q, actual) for q in candidates), (
        f"docs/security.md quotes {candidates} but the server answers {actual!r}")


def test_every_flag_named_exists_with_the_default_stated():
    _, out = run_to_exit(["--help"])
    flags = set(re.findall(r"(--[a-z0-9-]+)", out))
    named = set(re.findall(r"(--[a-z][a-z0-9-]+)", DOC))
    missing = sorted(f for f in named if f not in flags)
    assert not missing, f"docs/security.md names flags the server lacks: {missing}"
    defaults, flag = {}, None
    for line in out.splitlines():
        start = re.match(r"\s+(?:-\w, )?(--[a-z0-9-]+)", line)
        if start:
            flag = start.group(1)
        default = re.search(r"\[default: ([^\]]+)\]", line)
        if default and flag:
            defaults[flag] = default.group(1)
    units = {"MiB": 1 << 20, "s": 1}
    rows = [r for r in DOC.splitlines() if r.startswith("| ") and "`--" in r]
    checked = 0
    for row in rows:
        for flag, value, unit in re.findall(r"`(--[a-z0-9-]+)` \(([0-9]+)(?: (MiB|s))?[;,):]", row):
            assert defaults.get(flag) == str(int(value) * units.get(unit, 1)), (flag, value, unit, defaults.get(flag))
            checked += 1
    assert checked >= 7, f"only {checked} defaults found in the page's tables"


def test_every_test_named_exists():
    functions = {}
    for path in TESTS.glob("test_*.py"):
        functions[path.name] = {n.name for n in ast.walk(ast.parse(path.read_text()))
                                if isinstance(n, ast.FunctionDef)}
    files = set(re.findall(r"(test_[a-z0-9_]+\.py)", DOC))
    assert files and files <= set(functions), sorted(files - set(functions))
    everywhere = set().union(*functions.values())
    for file, name in re.findall(r"(test_[a-z0-9_]+\.py)::(test_[a-z0-9_]+)", DOC):
        assert name in functions[file], f"{file}::{name}"
    names = set(re.findall(r"\b(test_[a-z0-9_]+)\b(?!\.py)", DOC))
    # `test_binary_*` names a family: some test must begin so.
    unknown = sorted(n for n in names if n not in everywhere and f"{n}.py" not in functions
                     and not (n.endswith("_") and any(f.startswith(n) for f in everywhere)))
    assert not unknown, f"docs/security.md names tests that do not exist: {unknown}"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    base = tmp_path_factory.mktemp("security_doc")
    repo = copy_bundled_repo(base / "models", ["identity_fp32"])
    s = Server(repo, log_dir=base, args=[
        "--model-control-mode=explicit", "--load-model=identity_fp32", "--http-max-input-size=4096",
        "--grpc-max-message-size=65536", "--http-body-read-timeout=1",
        "--http-restricted-api=trace:tok=yes", "--grpc-restricted-protocol=trace:tok=yes"]).start()
    yield s
    assert s.stop() == 0, s.log_tail()


def raw_http(srv, data, wait=10):
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=wait) as s:
        s.sendall(data)
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            got += chunk
    return got.decode(errors="replace")


def test_the_quoted_http_answers_are_the_servers(srv):
    r = requests.post(f"{srv.base}/v2/repository/index", data=b" " * 5000,
                      headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 400
    quoted(r.text, '{"error":"request body size')
    r = requests.get(f"{srv.base}/v2/trace/setting", timeout=10)
    assert r.status_code == 403
    quoted(r.text, '{"error":"This API is restricted')
    head = raw_http(srv, b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n")
    quoted(head.split("\r\n")[0].split(" ", 1)[1], "431 ")
    stalled = raw_http(srv, b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    assert stalled.startswith("HTTP/1.1 408"), stalled[:200]
    quoted(stalled.split("\r\n\r\n", 1)[1], '{"error":"the request body did not arrive')


def test_the_quoted_grpc_answers_are_the_servers(srv):
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        big = grpcclient.InferInput("INPUT0", [1, 32768], "FP32")
        big.set_data_from_numpy(__import__("numpy").zeros((1, 32768), "float32"))
        with pytest.raises(InferenceServerException) as e:
            c.infer("identity_fp32", [big])
        assert e.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        quoted(e.value.message(), "Received message larger than max")
        with pytest.raises(InferenceServerException) as e:
            c.get_trace_settings()
        assert e.value.status() == "StatusCode.UNAVAILABLE"
        quoted(e.value.message(), "This protocol is restricted")
    finally:
        c.close()


def test_the_quoted_load_refusals_are_the_servers(srv):
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        poll = "failed to load '<m>', failed to poll from model repository: "
        for name, key, lead in [("../x", "file:1/model.onnx", "invalid model name"),
                                ("m", "file:../x", poll + "Invalid file parameter"),
                                ("m", "file:/etc/x", poll + "Invalid file parameter")]:
            with pytest.raises(InferenceServerException) as e:
                c.load_model(name, config="{}", files={key: b"a"})
            quoted(e.value.message(), lead)
        with pytest.raises(InferenceServerException) as e:
            c.load_model("m", files={"file:1/model.onnx": b"a"})
        quoted(e.value.message(), poll + "Load parameter")
        with pytest.raises(InferenceServerException) as e:
            c.load_model("nope")
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
        quoted(e.value.message(), "failed to load '<m>', failed to poll from model repository")
    finally:
        c.close()
