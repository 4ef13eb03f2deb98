"""Shared helpers for the loadtests scripts (standard library only).

- bench_server(): a Tritium binary on free loopback ports, under a symlink named `bench-server`,
  with a temp copy of the model repository (optionally only some models, optionally with edited
  configs); checks that its own process answers; stops it with SIGTERM.
- run_pa(): one perf_analyzer invocation (one concurrency level) with perf_analyzer's stability
  search at -s N, retried once at 2N; parses its CSV and its text output, and fails on any sign
  of a failed request (non-zero exit, "error" lines, failed counts in the server's statistics).
- model_stats(): the server's /v2/models/<m>/stats counters, for before/after deltas.
"""

import contextlib
import csv
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_SERVER = "/tmp/tritium-bench-target/release/tritium"
DEFAULT_ORT = os.path.join(
    ROOT, ".venv/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.31.1"
)
DEFAULT_REPO = os.path.join(ROOT, "model_repository")
DEFAULT_PA = os.path.join(HERE, "perf_analyzer")
DEFAULT_OUT = os.path.join(HERE, "out")
PA_VERSION = "2.50.0"  # what setup.sh installs; the binary itself prints no version


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def http(method, url, body=None, timeout=5):
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def get_json(url, timeout=5):
    return json.loads(http("GET", url, timeout=timeout)[1])


def wait_ready(base, proc, models, deadline_s=120):
    end = time.time() + deadline_s
    pending = list(models)
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        try:
            while pending and http("GET", f"{base}/v2/models/{pending[0]}/ready", timeout=1)[0] == 200:
                pending.pop(0)
            if not pending:
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server not ready in time (waiting for {pending})")


def add_sub_check(base, model="add_sub"):
    """One JSON request to add_sub, answers checked."""
    a = [float(i) for i in range(16)]
    b = [1.0] * 16
    body = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": a},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": b},
    ]}).encode()
    _, out = http("POST", f"{base}/v2/models/{model}/infer", body)
    outs = {o["name"]: o["data"] for o in json.loads(out)["outputs"]}
    assert outs["OUTPUT0"] == [x + y for x, y in zip(a, b)], outs
    assert outs["OUTPUT1"] == [x - y for x, y in zip(a, b)], outs


class Server:
    def __init__(self, proc, http_port, grpc_port, metrics_port, repo):
        self.proc = proc
        self.http_port = http_port
        self.grpc_port = grpc_port
        self.metrics_port = metrics_port
        self.repo = repo
        self.base = f"http://127.0.0.1:{http_port}"

    def url(self, protocol):
        return f"127.0.0.1:{self.grpc_port if protocol == 'grpc' else self.http_port}"

    def alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}")


@contextlib.contextmanager
def bench_server(server_bin, ort_lib, model_repository, out_dir, models=None, ready=("add_sub",),
                 check=None, edit_repo=None, log_name="server.log", prefix="bench-", extra_args=()):
    """Starts the server on free loopback ports with a temp copy of the repository (only the
    folders in `models` when given; `edit_repo(repo_path)` may rewrite configs first) and
    `extra_args` on its command line, waits for the models in `ready`, runs `check(base)`,
    yields a Server, and stops it with SIGTERM."""
    # Neither the process name nor its command line says "tritium": on a machine shared with
    # someone's `pkill tritium` / `pkill -f tritium`, the benchmark server is not theirs to stop.
    tmp = tempfile.mkdtemp(prefix=prefix)
    repo = os.path.join(tmp, "model_repository")
    if models is None:
        shutil.copytree(model_repository, repo)
    else:
        os.makedirs(repo)
        for m in models:
            shutil.copytree(os.path.join(model_repository, m), os.path.join(repo, m))
    if edit_repo is not None:
        edit_repo(repo)
    server_exe = os.path.join(tmp, "bench-server")
    os.symlink(os.path.abspath(server_bin), server_exe)
    http_port, grpc_port, metrics_port = free_ports(3)
    server_log = open(os.path.join(out_dir, log_name), "w")
    cmd = [server_exe, "--model-repository", repo, "--http-port", str(http_port),
           "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port),
           "--onnxruntime-library", ort_lib, *extra_args]
    server_log.write(" ".join(cmd) + "\n")
    server_log.flush()
    proc = subprocess.Popen(cmd, stdout=server_log, stderr=subprocess.STDOUT)
    srv = Server(proc, http_port, grpc_port, metrics_port, repo)
    try:
        wait_ready(srv.base, proc, ready)
        time.sleep(0.5)
        if proc.poll() is not None:  # e.g. a port taken meanwhile: never measure someone else's server
            raise RuntimeError(f"server exited with {proc.returncode}; see {out_dir}/{log_name}")
        if check is not None:
            check(srv.base)
        print(f"server ready on {srv.base} / grpc :{grpc_port} (pid {proc.pid})", flush=True)
        yield srv
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        server_log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def tree_cpu_s(root_pid):
    """CPU seconds (user + system) used so far by `root_pid` and every live process below it
    (Triton's python stubs, gunicorn's workers), from /proc."""
    procs = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        # after the command: state ppid ... utime (14th field of the line) stime (15th)
        procs[int(d)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in procs.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(procs[p][1] for p in tree if p in procs) / os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid):
    """CPU seconds (user + system) used so far by each live thread of `pid`, from
    /proc/<pid>/task/*/stat: {tid: (thread name, seconds)}."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                line = f.read()
        except OSError:
            continue
        name = line[line.index("(") + 1:line.rindex(")")]
        fields = line.rpartition(")")[2].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def thread_cores(before, after, wall_s):
    """Cores used per thread name between two thread_cpu_s() snapshots: the first thread (lowest
    tid) of a name under the name, every later one under name + "+"; a thread born meanwhile
    counts from zero, one that ended is lost."""
    out = {}
    first = {}
    for tid, (name, _) in sorted(after.items()):
        first.setdefault(name, tid)
    for tid, (name, cpu) in after.items():
        prev = before.get(tid)
        used = cpu - (prev[1] if prev and prev[0] == name else 0.0)
        # Threads that inherit their creator's name (ONNX Runtime's intra-op pool takes the
        # instance thread's) are told apart from the first of that name by a "+".
        key = name if first[name] == tid else name + "+"
        out[key] = out.get(key, 0.0) + used / wall_s
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def ort_options(config_text):
    """The ceiling's flags for the ONNX Runtime options a config sets, as Tritium's ONNX backend
    reads them: intra_op_thread_count, session.* entries, and the instance count (`--sessions`,
    one session per instance, run at once); without intra_op_thread_count, N > 1 instances get
    cores ÷ N intra-op threads each, as src/backends/mod.rs gives them."""
    flags = []
    intra = None
    for key, value in re.findall(r'parameters\s*\{\s*key:\s*"([^"]+)"\s*value:\s*\{\s*string_value:\s*"([^"]*)"',
                                 config_text):
        if key == "intra_op_thread_count" and int(value or 0) > 0:
            intra = value
        elif key.startswith("session."):
            flags += ["--session", f"{key}={value.strip()}"]
    instances = instance_count(config_text)
    if intra is None and instances > 1:
        intra = str(max(1, (os.cpu_count() or 1) // instances))
    if intra is not None:
        flags = ["--intra-threads", intra] + flags
    if instances > 1:
        flags += ["--sessions", str(instances)]
    return tuple(flags)


def instance_count(config_text):
    """The instances a config's instance_group entries ask for (1 without any)."""
    groups = re.findall(r"instance_group\s*\[(.*?)\]", config_text, re.S)
    counts = [int(c) for g in groups for c in re.findall(r"count:\s*(\d+)", g)]
    entries = sum(len(re.findall(r"\{", g)) for g in groups)
    # an entry without count is one instance
    return max(1, sum(counts) + max(0, entries - len(counts)))


def children_cpu_s():
    """CPU seconds of this script's waited-for children (perf_analyzer runs) so far."""
    import resource
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def model_stats(base, model):
    """Summed counters of /v2/models/<model>/stats over its versions."""
    st = get_json(f"{base}/v2/models/{model}/stats")
    tot = {"inference_count": 0, "execution_count": 0, "success": 0, "fail": 0}
    for ms in st.get("model_stats", []):
        tot["inference_count"] += int(ms.get("inference_count", 0))
        tot["execution_count"] += int(ms.get("execution_count", 0))
        inf = ms.get("inference_stats", {})
        tot["success"] += int(inf.get("success", {}).get("count", 0))
        tot["fail"] += int(inf.get("fail", {}).get("count", 0))
    return tot


def stats_delta(after, before):
    return {k: after[k] - before[k] for k in after}


class PAError(RuntimeError):
    pass


# Lines in perf_analyzer's output that mean a request failed (or the run did not measure).
ERROR_RE = re.compile(r"(error|failed|unable|exception)", re.IGNORECASE)
BENIGN_RE = re.compile(r"^\s*(Avg |p\d+ |Client|Server|Request|Inference|Execution|Successful)")


def parse_pa_text(text):
    """The figures of the last 'Request concurrency' block of perf_analyzer's text output."""
    out = {}
    block = text.rsplit("Request concurrency:", 1)[-1] if "Request concurrency:" in text else text
    for key, rx in (("client_request_count", r"Client:\s*\n\s*Request count: (\d+)"),
                    ("sequence_count", r"Sequence count: (\d+)"),
                    ("server_inference_count", r"Inference count: (\d+)"),
                    ("server_execution_count", r"Execution count: (\d+)"),
                    ("server_success_count", r"Successful request count: (\d+)"),
                    ("avg_latency_us", r"Avg latency: (\d+) usec")):
        m = re.search(rx, block)
        if m:
            out[key] = int(m.group(1))
    # what perf_analyzer chose: asynchronous for a sequence model unless --sync, else synchronous
    m = re.search(r"Using (asynchronous|synchronous) calls for inference", text)
    if m:
        out["pa_calls"] = "async" if m.group(1) == "asynchronous" else "sync"
    return out


SUMMARY_LINE = "Inferences/Second vs. Client"


# perf_analyzer is killed past this much resident memory. Closing a measurement window costs it
# time quadratic in the window's requests, so against a server that answers 25,000/s and more it
# can fall behind for good and grow without end: 21 GB of this machine's 24 in 10 minutes at
# add_sub c16 against the floor with -p 1500 (loadtests/PROFILES.md, "perf_analyzer at
# 22,000–25,000 infer/s").
PA_RSS_LIMIT_MB = int(os.environ.get("PA_RSS_LIMIT_MB", "4096"))


def resident_mb(pid):
    """The process's resident memory in MB, 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for ln in f:
                if ln.startswith("VmRSS:"):
                    return int(ln.split()[1]) // 1024
    except OSError:
        pass
    return 0


def run_guarded(cmd, timeout, rss_limit_mb=None, poll_s=1.0):
    """Runs `cmd` with its stdout and stderr captured together; kills it past `timeout` seconds
    or past `rss_limit_mb` MB of resident memory (default PA_RSS_LIMIT_MB). Returns (text, rc):
    rc -1 when it was killed, with the reason appended to the text."""
    limit = PA_RSS_LIMIT_MB if rss_limit_mb is None else rss_limit_mb
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    grown, done = [], threading.Event()

    def watch():
        while not done.wait(poll_s) and p.poll() is None:
            rss = resident_mb(p.pid)
            if rss > limit:
                grown.append(rss)
                p.kill()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    note = ""
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        note = f"\n[timed out after {timeout}s]\n"
    done.set()
    watcher.join()
    if grown:
        note += f"\n[killed at {grown[0]} MB resident, past the {limit} MB limit (PA_RSS_LIMIT_MB)]\n"
    return out.decode(errors="replace") + note, (-1 if note else p.returncode)


def run_pa(pa, model, url, protocol, concurrency, csv_path, log_path, extra=(), interval_ms=2000,
           stability=25, retry=True, timeout=600, server=None, teardown_ok=False, batch=1):
    """One perf_analyzer run at one concurrency level. Returns the CSV row's figures plus the
    text output's counts, the -s used and `errors` (the error lines: [] on success).
    Raises PAError when it exits non-zero on both tries or prints error lines. When `server`
    (a Server) is given, the model's failure count in the server's statistics must not grow.

    teardown_ok: error lines printed after perf_analyzer's final summary ("Inferences/Second vs.
    Client ..."), with exit status 0, come from its end-of-run step (for sequence models it ends
    every open sequence then), after the measured windows; they are returned as
    `teardown_errors` instead of failing the run, and the server's failure count is then
    returned, not checked."""
    before = model_stats(server.base, model) if server is not None else None
    tries = (stability, 2 * stability) if retry else (stability,)
    for s_pct in tries:
        cmd = [pa, "-m", model, "-u", url, "-i", protocol, "-b", str(batch),
               "--concurrency-range", str(concurrency), "-p", str(interval_ms), "-s", str(s_pct),
               "-f", csv_path] + list(extra)
        if os.path.exists(csv_path):
            os.remove(csv_path)
        t0 = time.time()
        text, rc = run_guarded(cmd, timeout)
        with open(log_path, "a") as log:
            log.write(f"$ {' '.join(cmd)}\n{text}\n[rc {rc}, {time.time() - t0:.1f} s]\n\n")
        measured, _, after = text.partition(SUMMARY_LINE)
        after_errors = [ln.strip() for ln in after.splitlines()
                        if ERROR_RE.search(ln) and not BENIGN_RE.match(ln)]
        errors = [ln.strip() for ln in measured.splitlines()
                  if ERROR_RE.search(ln) and not BENIGN_RE.match(ln)]
        teardown = []
        if teardown_ok and rc == 0 and after:
            teardown = after_errors
        else:
            errors += after_errors
        unstable = any("stable" in ln.lower() for ln in errors)
        if rc == 0 and not errors:
            break
        if not unstable:  # a request error: retrying at a looser -s would not help
            break
    if rc != 0 or errors:
        # the thread's own error says why; "Failed to retrieve results" only that it failed
        errors.sort(key=lambda ln: 0 if "had error" in ln else 1)
        raise PAError(f"perf_analyzer {model} {protocol} c={concurrency} exited {rc}: "
                      f"{(errors or ['no error line'])[0][:300]} (see {log_path})")
    with open(csv_path) as f:
        row = next(csv.DictReader(f))
    r = {
        "concurrency": concurrency,
        "infer_per_s": float(row["Inferences/Second"]),
        "p50_us": int(row["p50 latency"]),
        "p90_us": int(row["p90 latency"]),
        "p99_us": int(row["p99 latency"]),
        # absent when the server has no statistics extension (the floor server)
        "server_queue_us": int(row.get("Server Queue") or 0),
        "server_compute_infer_us": int(row.get("Server Compute Infer") or 0),
        "stability_pct": s_pct,
        "errors": [],
        "teardown_errors": teardown,
    }
    r.update(parse_pa_text(text))
    if server is not None:
        d = stats_delta(model_stats(server.base, model), before)
        r["server_stats_delta"] = d
        if d["fail"] != 0 and not teardown:
            raise PAError(f"perf_analyzer {model} {protocol} c={concurrency}: the server counted "
                          f"{d['fail']} failed requests (see {log_path})")
    return r


def median(xs):
    xs = list(xs)
    return statistics.median(xs) if xs else float("nan")


def spread(xs):
    """'min–max' of a list of numbers, formatted like its median would be."""
    xs = list(xs)
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    f = (lambda v: f"{v:.3f}") if max(abs(lo), abs(hi)) < 10 else (lambda v: f"{v:.0f}")
    return f"{f(lo)}–{f(hi)}"


def git_head():
    try:
        return subprocess.check_output(["git", "-C", ROOT, "rev-parse", "HEAD"], text=True).strip()
    except Exception:
        return "unknown"


def server_commit(server_bin):
    """The commit the binary was built from, when run_all.sh (or a person) recorded it beside
    the binary as `<binary>.commit`."""
    p = server_bin + ".commit"
    if os.path.exists(p):
        return open(p).read().strip()
    return "unrecorded"


def run_header(args):
    return {
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "perf_analyzer": PA_VERSION,
        "git_head": git_head(),
        "server": os.path.abspath(args.server),
        "server_built_from": server_commit(os.path.abspath(args.server)),
        "loadavg_at_start": os.getloadavg()[0],
        "nproc": os.cpu_count(),
    }


def add_common_args(ap, interval_ms=2000):
    ap.add_argument("--server", default=DEFAULT_SERVER, help="tritium binary (release build)")
    ap.add_argument("--onnxruntime-library", default=DEFAULT_ORT)
    ap.add_argument("--model-repository", default=DEFAULT_REPO,
                    help="copied to a temp folder for the run (needs the generated .onnx files)")
    ap.add_argument("--perf-analyzer", default=DEFAULT_PA)
    ap.add_argument("--interval-ms", type=int, default=interval_ms, help="perf_analyzer -p (window)")
    ap.add_argument("--stability", type=int, default=25,
                    help="perf_analyzer -s in %% (retried once at twice this)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="the run's folder is made under this")


def check_inputs(args, models):
    import sys
    for p in (args.server, args.perf_analyzer, args.onnxruntime_library):
        if not os.path.exists(p):
            sys.exit(f"missing {p} (run loadtests/setup.sh / build the server first)")
    for m in models:
        if not os.path.exists(os.path.join(args.model_repository, m, "1", "model.onnx")):
            sys.exit(f"{args.model_repository}/{m}/1/model.onnx missing: run model_repository/generate.py")


def make_out_dir(args, name):
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = os.path.join(args.out, f"{name}-{stamp}")
    os.makedirs(out_dir, exist_ok=True)
    return out_dir, stamp


def write_summary(out_dir, summary, lines):
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(text)
    print()
    print(text)
    print(f"results in {out_dir}")
    return text
