"""Triton's launch line, unchanged (issue 28): every flag of `tritonserver` 2.51's `--help` is known
to `tritium`, the flags with behaviour do what Triton's do, flags that only tune something
Tritium lacks are logged once at start. (TLS and restricted APIs: test_grpc_tls.py and
test_restricted_api.py.)
"""
import json
import re
import socket
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import Server, free_ports, identity_config, run_to_exit, tritium_bin, wait_until

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tritonserver-2.51-help.txt"


def triton_flags():
    return [m.group(1) for m in re.finditer(r"^  --([a-z0-9-]+)", FIXTURE.read_text(), re.M)]


def add_model(repo: Path, name: str, config: str):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)


def add_broken(repo: Path, name="broken"):
    add_model(repo, name, identity_config(name) + "not_a_field: 3\n")


def test_help_explains_every_triton_flag():
    flags = triton_flags()
    assert len(flags) == 87
    code, out = run_to_exit(["--help"])
    assert code == 0, out
    missing = [f for f in flags if not re.search(rf"--{re.escape(f)}\b", out)]
    assert not missing, f"tritium --help does not mention: {missing}"
    # Where Tritium keeps a different default, --help says so.
    assert "Triton's is 8" in out


def test_id_is_the_server_name(start_server, repo_copy):
    srv = start_server(repo_copy(["identity"]), args=["--id", "foo"])
    meta = srv.get("/v2").json()
    assert meta["name"] == "foo" and meta["version"] != "2.51.0", meta
    grpc = grpcclient.InferenceServerClient(srv.grpc_url)
    assert grpc.get_server_metadata().name == "foo"
    grpc.close()


def test_sagemaker_and_vertex_ai_on_one_port_are_refused(tmp_path):
    code, out = run_to_exit(["--model-repository", str(tmp_path), "--allow-sagemaker=true",
                             "--allow-vertex-ai=true", "--allow-http=false", "--allow-grpc=false",
                             "--allow-metrics=false"])
    assert code != 0 and "cannot share port 8080" in out, out


def test_bad_values_are_refused_with_tritons_syntax(tmp_path):
    for flag in ["--exit-on-error=yes", "--host-policy=cpu,cpu-cores=3-1", "--rate-limit=sometimes",
                 "--cuda-memory-pool-byte-size=64", "--model-config-name=a b",
                 "--http-header-forward-pattern=(", "--model-load-thread-count=0"]:
        code, out = run_to_exit(["--model-repository", str(tmp_path), flag])
        assert code == 2 and "error: invalid value" in out, (flag, out)


def test_flags_without_effect_are_logged_once_at_start(start_server, repo_copy):
    flags = ["--pinned-memory-pool-byte-size=268435456", "--cuda-memory-pool-byte-size=0:67108864",
             "--rate-limit-resource=R1:4", "--grpc-infer-allocation-pool-size=16",
             "--grpc-keepalive-permit-without-calls=0", "--grpc-http2-max-ping-strikes=0",
             "--enable-peer-access=false", "--repoagent-directory=/x", "--buffer-manager-thread-count=2",
             "--min-supported-compute-capability=6.0", "--model-load-gpu-limit=0:0.5",
             "--cuda-virtual-address-size=0:1073741824",
             "--grpc-http2-max-pings-without-data=0", "--grpc-http2-min-recv-ping-interval-without-data=1000",
             "--cache-directory=/x", "--host-policy=cpu,numa-node=0",
             "--grpc-max-connection-age-grace=100"]
    srv = start_server(repo_copy(["identity"]), args=flags)
    log = srv.log_tail(200_000)
    for flag in flags:
        name = flag.split("=")[0]
        lines = [l for l in log.splitlines() if "has no effect" in l and re.search(rf"\] {re.escape(name)}[ =]", l)]
        assert len(lines) == 1, (flag, lines)


def test_exit_on_error_stops_the_server_unless_false(start_server, repo_copy, tmp_path):
    repo = repo_copy(["identity"])
    add_broken(repo)
    srv = Server(repo, log_dir=tmp_path)
    with pytest.raises(RuntimeError, match="exited with 1"):
        srv.start()
    assert "failed to load all models" in srv.log_tail() and "'broken'" in srv.log_tail()
    srv = start_server(repo, args=["--exit-on-error=false"], wait_for="live")
    index = wait_until(lambda: (i := {e["name"]: e for e in srv.index()}) and i.get("identity", {}).get("state") == "READY" and i)
    assert index["broken"]["state"] == "UNAVAILABLE" and "not_a_field" in index["broken"]["reason"], index
    assert srv.get("/v2/health/ready").status_code == 400, "strict readiness: not every model loaded"


def test_a_failed_load_after_start_never_stops_the_server(start_server, repo_copy):
    repo = repo_copy(["identity"])
    srv = start_server(repo, args=["--model-control-mode=explicit", "--load-model=identity"])
    add_broken(repo)
    assert srv.post("/v2/repository/models/broken/load").status_code in (400, 500)
    assert srv.alive() and srv.get("/v2/models/identity/ready").status_code == 200


def test_model_config_name_picks_configs_name_pbtxt(start_server, repo_copy):
    repo = repo_copy(["identity_fp32", "identity"])
    (repo / "identity_fp32" / "configs").mkdir()
    custom = (repo / "identity_fp32" / "config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 4")
    (repo / "identity_fp32" / "configs" / "h100.pbtxt").write_text(custom)
    srv = start_server(repo, args=["--model-config-name=h100"])
    assert srv.get("/v2/models/identity_fp32/config").json()["max_batch_size"] == 4
    # A model without configs/h100.pbtxt reads its config.pbtxt.
    assert srv.get("/v2/models/identity/config").json()["name"] == "identity"


def test_disable_auto_complete_config(start_server, repo_copy):
    repo = repo_copy(["autocomplete_add", "identity"])
    srv = start_server(repo)
    assert srv.get("/v2/models/autocomplete_add/ready").status_code == 200, "completed from the ONNX file by default"
    srv.stop()
    srv = start_server(repo, args=["--disable-auto-complete-config", "--exit-on-error=false"], wait_for="live")
    e = wait_until(lambda: (x := {i["name"]: i for i in srv.index()}.get("autocomplete_add"))
                   and x.get("state") == "UNAVAILABLE" and x)
    assert "config.pbtxt" in e["reason"] and "missing" in e["reason"], e


def _load_span(log: str, names) -> float:
    """Seconds between the first and last 'successfully loaded' of `names` (default log format)."""
    times = []
    for line in log.splitlines():
        m = re.search(r"successfully loaded '([^']+)'", line)
        if m and m.group(1) in names:
            times.append(_stamp(line))
    assert len(times) == len(names), log[-3000:]
    return max(times) - min(times)


def _stamp(line: str) -> float:
    # default format: I1204 14:03:22.123456 <pid> file.rs:12] ...
    hms = line.split()[1]
    h, m, s = hms.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def test_model_load_thread_count_bounds_parallel_loads(start_server, tmp_path):
    names = [f"slow_load_{i}" for i in range(4)]
    repo = tmp_path / "slowloads"
    for n in names:
        add_model(repo, n, identity_config(n) + 'parameters { key: "load_delay_ms" value: { string_value: "400" } }\n')
    one = start_server(repo, args=["--model-load-thread-count=1"])
    span_one = _load_span(one.log_tail(200_000), names)
    one.stop()
    four = start_server(repo, args=["--model-load-thread-count=4"])
    span_four = _load_span(four.log_tail(200_000), names)
    print(f"4 models loading 0.4 s each: last-first load span {span_one:.2f} s with 1 thread, {span_four:.2f} s with 4")
    # One at a time: each of the last three waits for the one before (0.4 s each).
    assert span_one >= 1.15, span_one
    assert span_four < span_one - 0.5, (span_four, span_one)


def test_model_load_retry_count(start_server, repo_copy):
    repo = repo_copy(["identity"])
    add_broken(repo)
    srv = start_server(repo, args=["--model-load-retry-count=2", "--exit-on-error=false"], wait_for="live")
    wait_until(lambda: any(e["name"] == "broken" and e.get("state") == "UNAVAILABLE" for e in srv.index()))
    retries = re.findall(r"failed to load 'broken'.*retrying \((\d) of 2\)", srv.log_tail(200_000))
    assert retries == ["1", "2"], retries


def test_cpu_metrics_can_be_turned_off(start_server, repo_copy):
    on = start_server(repo_copy(["identity"]))
    assert "nv_cpu_utilization" in requests.get(on.metrics_url, timeout=10).text
    off = start_server(repo_copy(["identity"]), args=["--allow-cpu-metrics=false", "--allow-gpu-metrics=false"])
    text = requests.get(off.metrics_url, timeout=10).text
    assert "nv_cpu_" not in text and "nv_gpu_" not in text, text
    assert "nv_inference_count" in text, "the model families stay"


def test_reuse_http_port_lets_two_servers_share_it(start_server, repo_copy, tmp_path):
    first = start_server(repo_copy(["identity"]), args=["--reuse-http-port=true", "--allow-grpc=false",
                                                        "--allow-metrics=false"])
    second = Server(repo_copy(["identity"]), log_dir=tmp_path,
                    args=["--reuse-http-port=true", "--allow-grpc=false", "--allow-metrics=false"])
    second.http_port = first.http_port
    try:
        # Readiness on the shared port may be the first's answer: wait for the second's own log.
        second.start()
        wait_until(lambda: "started HTTPService" in second.log_tail() and "successfully loaded" in second.log_tail())
        assert second.alive() and first.alive()
    finally:
        assert second.stop() == 0
    # A server without the flag cannot take the port.
    code, out = run_to_exit(["--model-repository", str(tmp_path), "--http-address=127.0.0.1",
                             f"--http-port={first.http_port}", "--allow-grpc=false", "--allow-metrics=false"])
    assert code == 1 and "cannot start the HTTP endpoint" in out, out


def _h2_frames(sock, until: float):
    """Reads HTTP/2 frames until `until` or the connection closes; yields (type, flags, payload)."""
    buf = b""
    while time.monotonic() < until:
        sock.settimeout(max(0.05, until - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return
        if not chunk:
            return
        buf += chunk
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            yield buf[3], buf[4], buf[9:9 + length]
            buf = buf[9 + length:]


def _h2_connect(port: int):
    """A raw HTTP/2 connection that has sent the preface and an empty SETTINGS frame."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + struct.pack(">I", 0)[1:] + b"\x04\x00" + b"\x00\x00\x00\x00")
    return s


def test_grpc_max_connection_age_sends_goaway(start_server, repo_copy):
    srv = start_server(repo_copy(["identity"]), args=["--grpc-max-connection-age=500"])
    s = _h2_connect(srv.grpc_port)
    start = time.monotonic()
    goaway = next((time.monotonic() - start for t, _, _ in _h2_frames(s, start + 5) if t == 0x7), None)
    s.close()
    assert goaway is not None and 0.3 < goaway < 3, goaway


PING, ACK = 0x6, 0x1


def _pings(sock, seconds: float, answer: bool):
    """(times of the server's pings, time the connection closed or None) over `seconds`; with
    `answer` each ping gets its ACK."""
    start, pings = time.monotonic(), []
    for t, flags, payload in _h2_frames(sock, start + seconds):
        if t == PING and not flags & ACK:
            pings.append(time.monotonic() - start)
            if answer:
                sock.sendall(struct.pack(">I", 8)[1:] + bytes([PING, ACK]) + b"\x00\x00\x00\x00" + payload)
    closed = time.monotonic() - start if time.monotonic() < start + seconds - 0.05 else None
    sock.close()
    return pings, closed


def test_grpc_keepalive_pings_a_quiet_connection_and_closes_it_when_unanswered(start_server, repo_copy):
    """`--grpc-keepalive-time`: the server pings a connection that was quiet that long (with or
    without calls, as `--grpc-keepalive-permit-without-calls=true`); `--grpc-keepalive-timeout`: a ping left
    unanswered that long closes the connection, an answered one keeps it. By default (2 hours)
    no ping comes."""
    repo = repo_copy(["identity"])
    srv = start_server(repo, args=["--grpc-keepalive-time=300", "--grpc-keepalive-timeout=600",
                                   "--grpc-keepalive-permit-without-calls=true"])
    assert "permit-without-calls" not in srv.log_tail(200_000), "true is what the server does: nothing to log"
    pings, closed = _pings(_h2_connect(srv.grpc_port), 4, answer=False)
    assert len(pings) == 1 and 0.2 < pings[0] < 1.5, pings
    assert closed is not None and 0.5 < closed - pings[0] < 2.5, (pings, closed)
    pings, closed = _pings(_h2_connect(srv.grpc_port), 2.5, answer=True)
    assert closed is None and len(pings) >= 3, (pings, closed)
    plain = start_server(repo)
    pings, closed = _pings(_h2_connect(plain.grpc_port), 1.5, answer=False)
    assert pings == [] and closed is None, (pings, closed)


def test_grpc_max_connection_age_grace_cuts_calls_that_outlive_it(start_server, tmp_path):
    repo = tmp_path / "slowgrpc"
    add_model(repo, "slow", identity_config("slow", delay_ms=3000))
    x = np.ones(2, dtype=np.float32)

    def call(srv):
        c = grpcclient.InferenceServerClient(srv.grpc_url)
        inp = grpcclient.InferInput("INPUT0", [2], "FP32")
        inp.set_data_from_numpy(x)
        start = time.monotonic()
        try:
            c.infer("slow", [inp], client_timeout=20)
            return "ok", time.monotonic() - start
        except Exception as e:  # the connection was closed under the call
            return str(e), time.monotonic() - start
        finally:
            c.close()

    # Past the age, the call in flight may finish during the grace only: cut at ~age + grace.
    cut = start_server(repo, args=["--grpc-max-connection-age=300", "--grpc-max-connection-age-grace=700"])
    outcome, took = call(cut)
    print(f"age 0.3 s + grace 0.7 s: a 3 s call ends after {took:.2f} s: {outcome[:80]}")
    assert outcome != "ok" and 0.8 < took < 2.5, (outcome, took)
    # Without a grace the GOAWAY lets the call finish.
    free = start_server(repo, args=["--grpc-max-connection-age=300"])
    outcome, took = call(free)
    assert outcome == "ok" and took >= 2.9, (outcome, took)


def test_header_forwarding_reaches_the_backend(start_server, tmp_path):
    repo = tmp_path / "echo"
    add_model(repo, "echo", """
name: "echo"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
parameters { key: "echo_parameters_output" value: { string_value: "PARAMS" } }
""")
    # Triton's patterns ignore case and match anywhere in the name.
    srv = start_server(repo, args=["--http-header-forward-pattern=^MY_HEADER_", "--grpc-header-forward-pattern=y-header"])
    x = np.ones(3, dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [3], "FP32")
    inp.set_data_from_numpy(x)
    res = srv.client.infer("echo", [inp], headers={"My_Header_1": "v1", "other": "no", "my_header_2": "v2"},
                           parameters={"own": 5})
    params = json.loads(res.as_numpy("PARAMS")[0])
    assert params == {"my_header_1": "v1", "my_header_2": "v2", "own": 5}, params
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    ginp = grpcclient.InferInput("INPUT0", [3], "FP32")
    ginp.set_data_from_numpy(x)
    res = g.infer("echo", [ginp], headers={"my-header-a": "A", "x-other": "no"})
    assert json.loads(res.as_numpy("PARAMS")[0]) == {"my-header-a": "A"}
    g.close()
    # Without the flag nothing is forwarded; a reserved name is refused as Triton refuses it.
    r = srv.post("/v2/models/echo/infer", {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]},
                 headers={"my_header_x": "1"})
    assert r.status_code == 200
    plain = start_server(repo)
    res = plain.client.infer("echo", [inp], headers={"my_header_1": "v1"})
    assert json.loads(res.as_numpy("PARAMS")[0]) == {}


def test_header_forwarding_refuses_reserved_names(start_server, tmp_path):
    repo = tmp_path / "echo2"
    add_model(repo, "e", identity_config("e"))
    srv = start_server(repo, args=["--http-header-forward-pattern=.*"])
    r = srv.post("/v2/models/e/infer", {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]},
                 headers={"priority": "1"})
    assert r.status_code == 400 and "reserved for Triton usage" in r.json()["error"], r.text


def _instance_threads(pid: int):
    """(thread name, allowed cores) of each instance thread of `pid`."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        name = (task / "comm").read_text().strip()
        if name.startswith("inst-"):
            status = (task / "status").read_text()
            out.append((name, re.search(r"Cpus_allowed_list:\s*(\S+)", status).group(1)))
    return out


def test_host_policy_pins_instance_threads(start_server, tmp_path):
    import os
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores to tell the policies apart")
    first, second = str(cores[0]), str(cores[1])
    repo = tmp_path / "pinned"
    add_model(repo, "pinned", identity_config("pinned", count=2))
    add_model(repo, "free", identity_config("free"))
    add_model(repo, "other", identity_config("other").replace(
        "instance_group [ { kind: KIND_CPU count: 1 } ]",
        'instance_group [ { kind: KIND_CPU count: 1 host_policy: "mine" } ]'))
    srv = start_server(repo, args=[f"--host-policy=cpu,cpu-cores={first}", f"--host-policy=mine,cpu-cores={second}"])
    threads = _instance_threads(srv.proc.pid)
    by_model = {}
    for name, cores in threads:
        by_model.setdefault(name.split("-", 1)[1].split("_")[0], []).append(cores)
    assert by_model["pinned"] == [first, first], threads
    assert by_model["free"] == [first], "KIND_CPU instances take the 'cpu' policy"
    assert by_model["other"] == [second], "a group's host_policy names its own"
    plain = start_server(repo)
    assert all(c != first for _, c in _instance_threads(plain.proc.pid)), "no policy: no pinning"


def _namespaced_repos(tmp_path):
    """Two repositories that both hold `m` and `ens` (Triton's model namespacing test shape):
    r1's `m` reads INPUT0, r2's reads IN_B, so an ensemble step that reached the other
    repository's `m` would not load. r2's `ens_b` runs `m` (its own), `ens_cross` runs `only1`
    (only r1 has it)."""
    def identity(repo, name, inp="INPUT0", out="OUTPUT0"):
        add_model(repo, name, f'name: "{name}"\nbackend: "identity"\nmax_batch_size: 0\n'
                              f'input [ {{ name: "{inp}" data_type: TYPE_FP32 dims: [ -1 ] }} ]\n'
                              f'output [ {{ name: "{out}" data_type: TYPE_FP32 dims: [ -1 ] }} ]\n')

    def ensemble(repo, name, step, inp="INPUT0", out="OUTPUT0"):
        add_model(repo, name, f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 0\n'
                              'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                              'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                              f'ensemble_scheduling {{ step [ {{ model_name: "{step}" model_version: -1 '
                              f'input_map {{ key: "{inp}" value: "INPUT0" }} '
                              f'output_map {{ key: "{out}" value: "OUTPUT0" }} }} ] }}\n')

    r1, r2, r3 = tmp_path / "r1", tmp_path / "r2", tmp_path / "r3"
    identity(r1, "m")
    identity(r1, "only1")
    ensemble(r1, "ens", "m")
    identity(r2, "m", "IN_B", "OUT_B")
    identity(r2, "only2")
    ensemble(r2, "ens", "m", "IN_B", "OUT_B")
    ensemble(r2, "ens_b", "m", "IN_B", "OUT_B")
    ensemble(r2, "ens_cross", "only1")
    # r3's ensemble names `m`, which r3 lacks and r1 and r2 both have.
    ensemble(r3, "ens_amb", "m")
    return r1, r2, r3


AMBIGUOUS = ("There are 2 identifiers of model '{}' in global map, model namespace must be provided to "
             "resolve ambiguity.")


def test_model_namespacing_serves_one_name_from_two_repositories(start_server, tmp_path):
    """`--model-namespacing=true`: both repositories' `m` and `ens` load and are kept apart; a
    request naming `m` alone is refused with Triton 2.51's text (HTTP 400, gRPC INVALID_ARGUMENT,
    not ready); an ensemble's step runs the `m` of its own repository, else the only model of
    that name; metrics carry Triton's `namespace` label."""
    r1, r2, _ = _namespaced_repos(tmp_path)
    srv = start_server(r1, args=["--model-repository", str(r2), "--model-namespacing=true"])
    index = srv.index()
    names = sorted(e["name"] for e in index)
    assert names == ["ens", "ens", "ens_b", "ens_cross", "m", "m", "only1", "only2"], index
    assert all(e["state"] == "READY" for e in index), index
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [3], "data": [1, 2, 3]}]}
    for name in ["m", "ens"]:
        for r in [srv.get(f"/v2/models/{name}"), srv.get(f"/v2/models/{name}/config"),
                  srv.post(f"/v2/models/{name}/infer", body)]:
            assert (r.status_code, r.json()) == (400, {"error": AMBIGUOUS.format(name)}), r.text
        assert srv.get(f"/v2/models/{name}/ready").status_code == 400
    r = srv.get("/v2/models/nope")
    assert (r.status_code, r.json()["error"]) == (400, "Request for unknown model: 'nope' is not found")
    r = srv.get("/v2/models/m/stats")
    assert (r.status_code, r.json()["error"]) == (400, "requested model 'm' is not available")
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    assert not g.is_model_ready("m") and g.is_model_ready("only1")
    with pytest.raises(InferenceServerException) as e:
        g.get_model_metadata("m")
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and AMBIGUOUS.format("m") in e.value.message()
    ginp = grpcclient.InferInput("INPUT0", [3], "FP32")
    ginp.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        g.infer("ens", [ginp])
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and AMBIGUOUS.format("ens") in e.value.message()
    for name in ["only1", "only2", "ens_b", "ens_cross"]:
        np.testing.assert_array_equal(g.infer(name, [ginp]).as_numpy("OUTPUT0"), [1, 2, 3])
    g.close()
    stats = srv.get("/v2/models/stats").json()["model_stats"]
    assert sorted(s["name"] for s in stats) == names
    metrics = requests.get(srv.metrics_url).text
    # ens_b ran r2's m; nothing ran r1's; ens_cross reached only1 in r1.
    assert f'nv_inference_count{{model="m",namespace="{r2}",version="1"}} 1' in metrics, metrics
    assert f'nv_inference_count{{model="m",namespace="{r1}",version="1"}} 0' in metrics, metrics
    assert f'nv_inference_count{{model="only1",namespace="{r1}",version="1"}} 2' in metrics, metrics


def test_model_namespacing_load_and_unload_by_name_act_in_every_repository(start_server, tmp_path):
    """Explicit mode with namespaces: an ensemble whose step names a model of two other
    repositories fails to load with Triton's text (and loads `m` in both, as Triton does);
    unloading `m` unloads both (then the name has no identifier, as Triton answers)."""
    r1, r2, r3 = _namespaced_repos(tmp_path)
    srv = start_server(r1, args=["--model-repository", str(r2), "--model-repository", str(r3),
                                 "--model-namespacing=true", "--model-control-mode=explicit"])
    r = srv.get("/v2/models/m")
    assert (r.status_code, r.json()["error"]) == (400, "Request for unknown model: 'm' is not found")
    r = srv.post("/v2/repository/models/ens_amb/load")
    assert r.status_code == 400, r.text
    assert r.json()["error"] == (f"load failed for model '{r3}::ens_amb': ensemble {r3}::ens_amb contains models "
                                 "that are not available or ambiguous: m"), r.text
    ready_m = lambda: sorted(e.get("state") for e in srv.index() if e["name"] == "m")  # noqa: E731
    assert ready_m() == ["READY", "READY"], "the step's load loaded `m` in both repositories"
    r = srv.get("/v2/models/ens_amb")
    assert (r.status_code, r.json()["error"]) == (404, f"Request for unknown model: '{r3}::ens_amb' is not found")
    assert srv.post("/v2/repository/models/m/unload").status_code == 200
    assert ready_m() == ["UNAVAILABLE", "UNAVAILABLE"]
    r = srv.get("/v2/models/m")
    assert (r.status_code, r.json()["error"]) == (404, "Identifier of model 'm' is not found in global map")
    # Loading an ensemble loads the model its step resolves to: r2's own `m`, which is then the
    # only `m` known, so the name alone is no longer ambiguous.
    assert srv.post("/v2/repository/models/ens_b/load").status_code == 200
    assert srv.client.is_model_ready("ens_b") and srv.client.is_model_ready("m")
    assert [i["name"] for i in srv.get("/v2/models/m").json()["inputs"]] == ["IN_B"]


def test_without_model_namespacing_a_name_in_two_repositories_is_refused(start_server, tmp_path):
    r1, r2, _ = _namespaced_repos(tmp_path)
    srv = start_server(r1, args=["--model-repository", str(r2), "--exit-on-error=false"], wait_for="live")
    index = wait_until(lambda: (i := srv.index()) and all(e.get("state") in ("READY", "UNAVAILABLE") for e in i) and i)
    by_name = {e["name"]: e for e in index}
    assert len(index) == len(by_name), "one entry per name"
    for name in ["m", "ens"]:
        assert by_name[name]["state"] == "UNAVAILABLE" and "two repositories" in by_name[name]["reason"], index
    assert by_name["only1"]["state"] == "READY" and by_name["only2"]["state"] == "READY"
    r = srv.get("/v2/models/m")
    assert (r.status_code, r.json()["error"]) == (404, "Request for unknown model: 'm' is not found")


def test_model_namespacing_in_poll_mode_a_removed_model_leaves_its_namespace(start_server, tmp_path):
    """Poll mode with namespaces: removing r1's `m` unloads it alone; r2's `m` keeps serving and
    the name is no longer ambiguous; a new `m` in r1 makes it ambiguous again."""
    import shutil
    r1, r2, _ = _namespaced_repos(tmp_path)
    shutil.rmtree(r1 / "ens")
    srv = start_server(r1, args=["--model-repository", str(r2), "--model-namespacing=true",
                                 "--model-control-mode=poll", "--repository-poll-secs=1"])
    assert srv.get("/v2/models/m").status_code == 400
    saved = tmp_path / "saved_m"
    shutil.move(str(r1 / "m"), saved)
    wait_until(lambda: srv.get("/v2/models/m").status_code == 200, what="r1's m to leave")
    assert [i["name"] for i in srv.get("/v2/models/m").json()["inputs"]] == ["IN_B"]
    assert srv.client.is_model_ready("ens_b")
    shutil.move(str(saved), r1 / "m")
    wait_until(lambda: srv.get("/v2/models/m").status_code == 400, what="r1's m to come back")
    assert srv.get("/v2/models/m").json()["error"] == AMBIGUOUS.format("m")
