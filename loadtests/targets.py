#!/usr/bin/env python3
"""The targets of issue #4, each a ratio measured within one run: Tritium against the in-process
ONNX Runtime ceiling, against Flask and FastAPI baselines, and against real Triton 2.51.

Subjects, all started once and kept up for the whole run (each idle while another is measured):
  ceiling   loadtests/ceiling (Rust, `ort` as Tritium uses it): the mlp ONNX file in-process,
            with the ONNX Runtime options the bundled mlp config gives Tritium, items/s and
            its own CPU per item at batch 1, 4-8, 32, 64 (the least-CPU of --ceiling-windows
            windows: loadtests/PROFILES.md, "Issue 19 point 1"); no server, no client.
  tritium   the release binary, the bundled mlp (dynamic batching, preferred 8/16/32, 200 µs,
            1 instance) and add_sub (ONNX).
  flask     loadtests/baselines/flask_app.py under gunicorn (2 workers, gthread, 2 threads),
            onnxruntime with 1 intra-op thread per worker (2 cores / 2 workers, the rule Tritium
            applies to 2 instances).
  fastapi   loadtests/baselines/fastapi_app.py under uvicorn (2 workers, uvloop, httptools), the
            same onnxruntime settings.
  triton    real Triton 2.51 (loadtests/triton_ref), python backend: mlp through onnxruntime
            (triton_ref/mlp_onnx/model.py, ONNX Runtime default threads, 1 instance) with the same
            dynamic batching as Tritium's (--triton-delay-us / --triton-preferred to change), and
            the python add_sub of triton_ref/make_models.sh.
  floor     loadtests/ceiling's `floor` binary: actix-web answering add_sub in the request's own
            handler (no router, scheduler or instance thread): the least latency any server of
            this shape can show to perf_analyzer on this machine.
  floor_grpc  loadtests/ceiling's `floor_grpc` binary: the same over gRPC (tonic answering
            add_sub's ModelInfer in its own handler).
perf_analyzer 2.50.0, batch 1, random data: mlp over HTTP with JSON tensors
(--input-tensor-format json --output-tensor-format json) at c1 and c16 against tritium, flask,
fastapi; HTTP (binary tensors, perf_analyzer's default) and gRPC at c1 and c16 against tritium
and triton; gRPC at c64 against tritium and triton (saturation); gRPC with client batches
(perf_analyzer -b 16 at c4, -b 64 at c2) against tritium (saturation as the ceiling measures it,
items/s); add_sub at c1 over HTTP (binary) against tritium, triton and floor, and over gRPC against
tritium, triton and floor_grpc. Every repeat runs every subject, the order of the subjects
rotated each repeat; a ratio is taken within a repeat; medians and min–max over repeats.

Server-side breakdowns come from perf_analyzer's server-side columns (the statistics extension
over its measured windows: queue, compute input, compute infer, compute output per request) and
batch efficiency = inference_count / execution_count from /v2/models/<m>/stats around each run.
CPU: the server's process tree (from /proc) and perf_analyzer (its rusage) over each run, in
cores used and in CPU µs per inference, so a ratio can be read against what the 2 cores allow.

  .venv/bin/python loadtests/targets.py [--repeats 3] [--interval-ms 2000] [--skip triton,...]

Needs: loadtests/setup.sh (perf_analyzer, loadtests/.baselines-venv), triton_ref/setup.sh
(/work/ref, with onnxruntime), the release server and ceiling binaries
(`cargo build --release --locked -p tritium -p tritium-ceiling` with
CARGO_TARGET_DIR=/tmp/tritium-bench-target). Results: loadtests/out/targets-<time>/summary.{md,json}
and targets.md (the targets table collect_results.py puts at the top of RESULTS.md).
"""

import argparse
import contextlib
import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import PAError, median, spread  # noqa: E402

HERE = common.HERE
ROOT = common.ROOT
SUBJECTS = ["ceiling", "tritium", "flask", "fastapi", "triton", "floor", "floor_grpc"]
JSON_FMT = ["--input-tensor-format", "json", "--output-tensor-format", "json"]

# (subject, model, protocol, format, concurrency); format "json" or "bin"
PLAN = {
    "tritium": [("mlp", "http", "json", 1), ("mlp", "http", "json", 16), ("mlp", "http", "bin", 1),
                ("mlp", "http", "bin", 16), ("mlp", "grpc", "bin", 1), ("mlp", "grpc", "bin", 16),
                ("mlp", "grpc", "bin", 64), ("mlp", "grpc", "bin-b16", 4), ("mlp", "grpc", "bin-b64", 2),
                ("add_sub", "http", "bin", 1), ("add_sub", "grpc", "bin", 1)],
    "flask": [("mlp", "http", "json", 1), ("mlp", "http", "json", 16)],
    "fastapi": [("mlp", "http", "json", 1), ("mlp", "http", "json", 16)],
    "triton": [("mlp", "http", "bin", 1), ("mlp", "http", "bin", 16), ("mlp", "grpc", "bin", 1),
               ("mlp", "grpc", "bin", 16), ("mlp", "grpc", "bin", 64), ("add_sub", "http", "bin", 1),
               ("add_sub", "grpc", "bin", 1)],
    "floor": [("add_sub", "http", "bin", 1)],
    "floor_grpc": [("add_sub", "grpc", "bin", 1)],
}
NO_STATS = ("flask", "fastapi", "floor", "floor_grpc")  # subjects without the statistics extension


def client_batch(fmt):
    """perf_analyzer's -b for a plan's format: "bin-b64" -> 64."""
    return int(fmt.partition("-b")[2] or 1)


class Remote:
    """A server process this script started (its own session, so the whole group is stopped)."""

    def __init__(self, name, proc, http_port, grpc_port=None):
        self.name, self.proc = name, proc
        self.http_port, self.grpc_port = http_port, grpc_port
        self.base = f"http://127.0.0.1:{http_port}"

    def url(self, protocol):
        return f"127.0.0.1:{self.grpc_port if protocol == 'grpc' else self.http_port}"

    def alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")


@contextlib.contextmanager
def process_server(name, cmd, env, log_path, http_port, grpc_port=None, ready=(), deadline_s=180):
    log = open(log_path, "w")
    log.write(" ".join(cmd) + "\n")
    log.flush()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    srv = Remote(name, proc, http_port, grpc_port)
    try:
        end = time.time() + deadline_s
        pending = list(ready)
        while pending:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited early with {proc.returncode}; see {log_path}")
            if time.time() > end:
                raise RuntimeError(f"{name} not ready in time (waiting for {pending}); see {log_path}")
            try:
                if common.http("GET", f"{srv.base}/v2/models/{pending[0]}/ready", timeout=1)[0] == 200:
                    pending.pop(0)
                    continue
            except Exception:
                pass
            time.sleep(0.3)
        time.sleep(0.5)
        srv.alive()
        print(f"{name} ready on {srv.base} (pid {proc.pid})", flush=True)
        yield srv
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        time.sleep(0.5)
        with contextlib.suppress(ProcessLookupError):  # stubs / workers left behind
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def wait_port(port, deadline_s=30):
    """Waits until something listens on 127.0.0.1:`port` (a server without an HTTP endpoint)."""
    end = time.time() + deadline_s
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        if time.time() > end:
            raise RuntimeError(f"nothing listens on port {port} after {deadline_s} s")
        time.sleep(0.1)


def baseline_env(args):
    env = dict(os.environ)
    env.update(BASELINE_INTRA_THREADS=str(args.baseline_intra_threads),
               BASELINE_MODEL=os.path.join(args.model_repository, "mlp/1/model.onnx"),
               BASELINE_MODEL_NAME="mlp", OMP_NUM_THREADS="1")
    return env


def triton_repo(args, tmp):
    repo = os.path.join(tmp, "triton_models")
    subprocess.run(["bash", os.path.join(HERE, "triton_ref/make_models.sh"), repo], check=True,
                   stdout=subprocess.DEVNULL)
    os.makedirs(os.path.join(repo, "mlp/1"))
    shutil.copy(os.path.join(HERE, "triton_ref/mlp_onnx/model.py"), os.path.join(repo, "mlp/1/model.py"))
    shutil.copy(os.path.join(args.model_repository, "mlp/1/model.onnx"), os.path.join(repo, "mlp/1/model.onnx"))
    pref = ", ".join(args.triton_preferred.split(","))
    cfg = f"""name: "mlp"
backend: "python"
max_batch_size: 64
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 256 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 256 ] }} ]
dynamic_batching {{
  preferred_batch_size: [ {pref} ]
  max_queue_delay_microseconds: {args.triton_delay_us}
}}
instance_group [ {{ kind: KIND_CPU count: {args.triton_instances} }} ]
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{args.triton_intra_threads}" }} }}
"""
    with open(os.path.join(repo, "mlp/config.pbtxt"), "w") as f:
        f.write(cfg)
    return repo, cfg


def full_csv_row(path):
    with open(path) as f:
        return next(csv.DictReader(f))


# The ceiling's batch sizes: those the table shows, and 4-7 for the CPU bound at the 6-7 requests
# per execution Tritium forms at c16 (model_cpu_per_item interpolates between them).
CEILING_BATCHES = (1, 4, 5, 6, 7, 8, 32, 64)


def run_ceiling(args, out_dir, rep, batches=CEILING_BATCHES):
    """One ceiling process per batch size. CPU per item: the process's own CPU time (every
    thread, ONNX Runtime's pool and its spinning included) over its timed window, as the ceiling
    prints it; the whole process's rusage over its life (session setup and warm-up included) only
    where an older ceiling binary prints none."""
    out = {}
    for batch in batches:
        cmd = [args.ceiling, "--model", os.path.join(args.model_repository, "mlp/1/model.onnx"),
               "--onnxruntime-library", args.onnxruntime_library, "--batch", str(batch),
               "--seconds", str(args.ceiling_seconds), "--repeats", str(getattr(args, "ceiling_windows", 1))]
        if args.ceiling_intra_threads:
            cmd += ["--intra-threads", str(args.ceiling_intra_threads)]
        if getattr(args, "ceiling_sessions", 1) > 1:
            cmd += ["--sessions", str(args.ceiling_sessions)]
        session = getattr(args, "ceiling_session", None)
        if session is None and not args.ceiling_intra_threads:
            # like with like: the ONNX Runtime options the bundled mlp config gives Tritium
            with open(os.path.join(args.model_repository, "mlp", "config.pbtxt")) as f:
                cmd += list(common.ort_options(f.read()))
        for entry in session or []:
            cmd += ["--session", entry]
        cpu0, t0 = common.children_cpu_s(), time.monotonic()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        cores = (common.children_cpu_s() - cpu0) / (time.monotonic() - t0)
        with open(os.path.join(out_dir, f"rep{rep}-ceiling.log"), "a") as f:
            f.write(" ".join(cmd) + "\n" + p.stdout + p.stderr + f"[rc {p.returncode}, {cores:.2f} cores]\n")
        if p.returncode != 0:
            raise RuntimeError(f"ceiling exited {p.returncode}: {p.stderr[-300:]}")
        windows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
        for r in windows:
            r["cores"] = cores
            if "cpu_us_per_item" not in r:
                r["cpu_us_per_item"] = cores * 1e6 / r["items_per_s"]
        if windows:
            # With several windows, the least disturbed one: every other process on the machine,
            # even held to quiet.py's quota, preempts ONNX Runtime's threads now and then, and a
            # parallel-for whose other half is descheduled spins until it runs again.
            best = min(windows, key=lambda r: r["cpu_us_per_item"])
            best["windows_cpu_us_per_item"] = [round(r["cpu_us_per_item"], 1) for r in windows]
            out[best["batch"]] = best
    return out


def model_cpu_per_item(batches, batch):
    """ONNX Runtime's CPU µs per item at `batch` items per run (a server's batch efficiency, not
    a whole number), interpolated linearly between the ceiling's nearest measured batch sizes
    (`batches`: {batch: ceiling result}); the nearest one outside their range."""
    pts = sorted((int(b), r["cpu_us_per_item"]) for b, r in batches.items() if r.get("cpu_us_per_item"))
    if not pts:
        return None
    if batch <= pts[0][0]:
        return pts[0][1]
    for (b0, c0), (b1, c1) in zip(pts, pts[1:]):
        if b0 <= batch <= b1:
            return c0 + (c1 - c0) * (batch - b0) / (b1 - b0)
    return pts[-1][1]


def measure(args, out_dir, rep, subject, srv, runs, failures):
    for model, protocol, fmt, c in PLAN[subject]:
        label = f"rep{rep}-{subject}-{model}-{protocol}-{fmt}-c{c}"
        extra = list(JSON_FMT) if fmt == "json" else []
        stats_srv = srv
        if subject in ("flask", "fastapi"):
            extra += ["-x", "1"]  # without a version perf_analyzer cannot match their stats
        if subject in NO_STATS:
            stats_srv = None
        try:
            srv.alive()
            threads0 = common.thread_cpu_s(srv.proc.pid)
            cpu0, pa0, t0 = common.tree_cpu_s(srv.proc.pid), common.children_cpu_s(), time.monotonic()
            r = common.run_pa(args.perf_analyzer, model, srv.url(protocol), protocol, c,
                              os.path.join(out_dir, label + ".csv"), os.path.join(out_dir, label + ".log"),
                              extra=extra, interval_ms=args.interval_ms, stability=args.stability,
                              server=stats_srv, batch=client_batch(fmt))
            wall = time.monotonic() - t0
            r["server_cores"] = (common.tree_cpu_s(srv.proc.pid) - cpu0) / wall
            r["client_cores"] = (common.children_cpu_s() - pa0) / wall
            # the server's own threads by name (its children, e.g. Triton's python stubs, are in
            # server_cores only)
            r["thread_cores"] = common.thread_cores(threads0, common.thread_cpu_s(srv.proc.pid), wall)
        except (PAError, RuntimeError) as e:
            print(f"FAILED {label}: {e}", flush=True)
            failures.append({"run": label, "error": str(e)})
            continue
        row = full_csv_row(os.path.join(out_dir, label + ".csv"))
        for k, col in (("server_compute_input_us", "Server Compute Input"),
                       ("server_compute_output_us", "Server Compute Output"),
                       ("client_send_us", "Client Send"), ("client_recv_us", "Client Recv"),
                       ("network_server_us", "Network+Server Send/Recv")):
            r[k] = int(row.get(col, 0) or 0)
        d = r.get("server_stats_delta")
        if d:
            r["batch_efficiency"] = d["inference_count"] / max(d["execution_count"], 1)
        r.update(repeat=rep, subject=subject, model=model, protocol=protocol, fmt=fmt)
        runs.append(r)
        print(f"{label:>40}: {r['infer_per_s']:9.1f} infer/s  p50 {r['p50_us']:>7} µs  p99 {r['p99_us']:>7} µs"
              + (f"  batch eff {r['batch_efficiency']:.2f}" if d else "")
              + f"  cores server {r['server_cores']:.2f} client {r['client_cores']:.2f}", flush=True)


def warm_up(args, out_dir, subject, srv):
    plan = PLAN[subject][:1] + [p for p in PLAN[subject] if p[0] == "add_sub"][:1]
    for model, protocol, fmt, c in dict.fromkeys(plan):
        extra = list(JSON_FMT) if fmt == "json" else []
        if subject in ("flask", "fastapi"):
            extra += ["-x", "1"]
        try:
            common.run_pa(args.perf_analyzer, model, srv.url(protocol), protocol, 4,
                          os.path.join(out_dir, f"warmup-{subject}-{model}.csv"),
                          os.path.join(out_dir, f"warmup-{subject}-{model}.log"),
                          extra=extra, interval_ms=1000, stability=50, retry=False)
        except PAError as e:
            print(f"warm-up {subject}: {e}", flush=True)


def pick(runs, rep, subject, model, protocol, fmt, c):
    for r in runs:
        if (r["repeat"], r["subject"], r["model"], r["protocol"], r["fmt"], r["concurrency"]) == \
                (rep, subject, model, protocol, fmt, c):
            return r
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma-separated subjects to leave out: " + ",".join(SUBJECTS))
    ap.add_argument("--ceiling", default="/tmp/tritium-bench-target/release/ceiling",
                    help="the loadtests/ceiling binary (release)")
    ap.add_argument("--floor", default="/tmp/tritium-bench-target/release/floor",
                    help="the loadtests/ceiling floor server binary (release)")
    ap.add_argument("--floor-grpc", default="/tmp/tritium-bench-target/release/floor_grpc",
                    help="the loadtests/ceiling gRPC floor server binary (release)")
    ap.add_argument("--ceiling-seconds", type=float, default=1.0, help="per window per batch size per repeat")
    ap.add_argument("--ceiling-windows", type=int, default=3,
                    help="timed windows per batch size, the least CPU per item kept (see run_ceiling)")
    ap.add_argument("--ceiling-intra-threads", type=int, default=0,
                    help="0 = the bundled mlp config's (ONNX Runtime's default unless it sets intra_op_thread_count)")
    ap.add_argument("--ceiling-session", action="append", metavar="KEY=VALUE",
                    help="ONNX Runtime session entries for the ceiling (default: the bundled mlp config's session.*)")
    ap.add_argument("--baselines-venv", default=os.path.join(HERE, ".baselines-venv"))
    ap.add_argument("--baseline-workers", type=int, default=2)
    ap.add_argument("--baseline-intra-threads", type=int, default=1)
    ap.add_argument("--triton-ref", default=os.environ.get("TRITON_REF_DIR", "/work/ref"))
    ap.add_argument("--triton-delay-us", type=int, default=200)
    ap.add_argument("--triton-preferred", default="8,16,32")
    ap.add_argument("--triton-instances", type=int, default=1)
    ap.add_argument("--triton-intra-threads", type=int, default=0, help="0 = ONNX Runtime's default")
    ap.add_argument("--from-raw", help="only write the summary again from a run's raw.json")
    args = ap.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    subjects = [s for s in SUBJECTS if s not in skip]
    if args.from_raw:
        raw = json.load(open(args.from_raw))
        for c in raw["ceiling"]:
            c["batches"] = {int(b): r for b, r in c["batches"].items()}
        summarize(args, os.path.dirname(os.path.abspath(args.from_raw)), raw["stamp"], raw["header"],
                  raw["subjects"], raw["runs"], raw["failures"], raw["ceiling"], raw["triton_cfg"])
        return 0
    common.check_inputs(args, ["mlp", "add_sub"])
    if "ceiling" in subjects and not os.path.exists(args.ceiling):
        sys.exit(f"missing {args.ceiling}: CARGO_TARGET_DIR=/tmp/tritium-bench-target cargo build --release "
                 "--locked -p tritium-ceiling (or --skip ceiling)")
    if "floor" in subjects and not os.path.exists(args.floor):
        sys.exit(f"missing {args.floor}: CARGO_TARGET_DIR=/tmp/tritium-bench-target cargo build --release "
                 "--locked -p tritium-ceiling (or --skip floor)")
    if "floor_grpc" in subjects and not os.path.exists(args.floor_grpc):
        sys.exit(f"missing {args.floor_grpc}: CARGO_TARGET_DIR=/tmp/tritium-bench-target cargo build --release "
                 "--locked -p tritium-ceiling (or --skip floor_grpc)")
    if ({"flask", "fastapi"} & set(subjects)) and not os.path.exists(os.path.join(args.baselines_venv, "bin/gunicorn")):
        sys.exit(f"missing {args.baselines_venv}: run loadtests/setup.sh (or --skip flask,fastapi)")
    if "triton" in subjects and not os.path.exists(os.path.join(args.triton_ref, "backends/python")):
        sys.exit(f"missing {args.triton_ref}: run loadtests/triton_ref/setup.sh (or --skip triton)")
    out_dir, stamp = common.make_out_dir(args, "targets")
    header = common.run_header(args)
    tmp = tempfile.mkdtemp(prefix="targets-")
    runs, failures, ceiling = [], [], []
    triton_cfg = None
    try:
        with contextlib.ExitStack() as stack:
            servers = {}
            if "tritium" in subjects:
                servers["tritium"] = stack.enter_context(common.bench_server(
                    args.server, args.onnxruntime_library, args.model_repository, out_dir,
                    models=["mlp", "add_sub"], ready=("mlp", "add_sub"), check=common.add_sub_check,
                    log_name="server-tritium.log", prefix="tgt-"))
            v = args.baselines_venv
            if "flask" in subjects:
                port = common.free_ports(1)[0]
                servers["flask"] = stack.enter_context(process_server(
                    "flask", [f"{v}/bin/gunicorn", "-w", str(args.baseline_workers), "-k", "gthread",
                              "--threads", "2", "--chdir", os.path.join(HERE, "baselines"),
                              "-b", f"127.0.0.1:{port}", "flask_app:app"],
                    baseline_env(args), os.path.join(out_dir, "server-flask.log"), port, ready=["mlp"]))
            if "fastapi" in subjects:
                port = common.free_ports(1)[0]
                servers["fastapi"] = stack.enter_context(process_server(
                    "fastapi", [f"{v}/bin/uvicorn", "--workers", str(args.baseline_workers), "--loop", "uvloop",
                                "--http", "httptools", "--app-dir", os.path.join(HERE, "baselines"),
                                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
                                "--no-access-log", "fastapi_app:app"],
                    baseline_env(args), os.path.join(out_dir, "server-fastapi.log"), port, ready=["mlp"]))
            if "floor" in subjects:
                port = common.free_ports(1)[0]
                servers["floor"] = stack.enter_context(process_server(
                    "floor", [args.floor, "--port", str(port)], dict(os.environ),
                    os.path.join(out_dir, "server-floor.log"), port, ready=["add_sub"]))
                common.add_sub_check(servers["floor"].base)
            if "floor_grpc" in subjects:
                port = common.free_ports(1)[0]
                # No HTTP port: it is up once its gRPC port answers (perf_analyzer's warm-up
                # run below checks its answers).
                servers["floor_grpc"] = stack.enter_context(process_server(
                    "floor_grpc", [args.floor_grpc, "--port", str(port)], dict(os.environ),
                    os.path.join(out_dir, "server-floor_grpc.log"), port, port))
                wait_port(port)
            if "triton" in subjects:
                repo, triton_cfg = triton_repo(args, tmp)
                with open(os.path.join(out_dir, "triton-mlp-config.pbtxt"), "w") as f:
                    f.write(triton_cfg)
                hp, gp, mp = common.free_ports(3)
                env = dict(os.environ, TRITON_REF_DIR=args.triton_ref)
                servers["triton"] = stack.enter_context(process_server(
                    "triton", ["bash", os.path.join(HERE, "triton_ref/run.sh"), repo, str(hp), str(gp), str(mp),
                               "--", "--model-control-mode=explicit", "--load-model=mlp", "--load-model=add_sub"],
                    env, os.path.join(out_dir, "server-triton.log"), hp, gp, ready=["mlp", "add_sub"]))
                common.add_sub_check(servers["triton"].base)
            for s in subjects:
                if s in servers:
                    warm_up(args, out_dir, s, servers[s])
            for rep in range(1, args.repeats + 1):
                k = (rep - 1) % len(subjects)
                order = subjects[k:] + subjects[:k]
                print(f"--- repeat {rep}: {' '.join(order)}", flush=True)
                for s in order:
                    if s == "ceiling":
                        try:
                            c = run_ceiling(args, out_dir, rep)
                            ceiling.append({"repeat": rep, "batches": c})
                            print("ceiling: " + "  ".join(f"b{b} {r['items_per_s']:.0f}/s" for b, r in c.items()), flush=True)
                        except Exception as e:
                            failures.append({"run": f"rep{rep}-ceiling", "error": str(e)})
                    else:
                        measure(args, out_dir, rep, s, servers[s], runs, failures)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with open(os.path.join(out_dir, "raw.json"), "w") as f:
            json.dump({"stamp": stamp, "header": header, "subjects": subjects, "runs": runs,
                       "failures": failures, "ceiling": ceiling, "triton_cfg": triton_cfg}, f)
    summarize(args, out_dir, stamp, header, subjects, runs, failures, ceiling, triton_cfg)
    return 0 if not failures else 1


def why_lines(runs, ceiling):
    """Where the time goes for each target, from the server-side statistics (medians over repeats)."""
    def agg(subject, model, proto, fmt, c):
        xs = [r for r in runs if (r["subject"], r["model"], r["protocol"], r["fmt"], r["concurrency"]) ==
              (subject, model, proto, fmt, c)]
        if not xs:
            return None
        keys = ("infer_per_s", "p50_us", "p99_us", "server_queue_us", "server_compute_input_us",
                "server_compute_infer_us", "server_compute_output_us", "network_server_us", "client_send_us",
                "server_cores", "client_cores")
        out = {k: median(r.get(k, 0) for r in xs) for k in keys}
        out["batch_efficiency"] = median(r.get("batch_efficiency", 1.0) for r in xs)
        out["busy"] = median(busy(r) for r in xs) if subject not in NO_STATS else None
        return out

    lines = ["", "Where the time goes (medians over the repeats; server figures from the statistics extension "
             "over perf_analyzer's windows, per request; compute infer per request = the time of the execution "
             "it ran in):", ""]
    t64, t16 = agg("tritium", "mlp", "grpc", "bin", 64), agg("tritium", "mlp", "http", "json", 16)
    if t64 and ceiling:
        b = t64["batch_efficiency"]
        nb = min((1, 8, 32, 64), key=lambda x: abs(x - b))
        cp = median(c["batches"][nb]["p50_us"] for c in ceiling if nb in c["batches"])
        lines.append(f"- ceiling: Tritium's gRPC c64 run batches {b:.1f} requests per execution, whose ONNX Runtime "
                     f"run takes {t64['server_compute_infer_us']:.0f} µs in the server against {cp:.0f} µs in the "
                     f"ceiling at batch {nb} (the cores are shared with perf_analyzer's 64 threads and the "
                     f"server's network threads), and the instance computes only {t64['busy']:.0f} % of the wall "
                     f"time; each request also spends {t64['network_server_us']:.0f} µs in the network and the "
                     f"server outside the statistics and {t64['server_queue_us']:.0f} µs queued.")
    for base in ("flask", "fastapi"):
        b16 = agg(base, "mlp", "http", "json", 16)
        if t16 and b16:
            lines.append(f"- {base}: at c16 (HTTP JSON) Tritium does {t16['infer_per_s']:.0f} infer/s, {base} "
                         f"{b16['infer_per_s']:.0f} (p50 {t16['p50_us']:.0f} vs {b16['p50_us']:.0f} µs); Tritium's "
                         f"instance is busy {t16['busy']:.0f} % at batch {t16['batch_efficiency']:.1f}, compute infer "
                         f"{t16['server_compute_infer_us']:.0f} µs, queue {t16['server_queue_us']:.0f} µs, network + "
                         f"server outside statistics {t16['network_server_us']:.0f} µs per request.")
    for proto in ("http", "grpc"):
        t, tr = agg("tritium", "mlp", proto, "bin", 16), agg("triton", "mlp", proto, "bin", 16)
        if t and tr:
            lines.append(f"- Triton {proto} c16: Triton's instance is busy {tr['busy']:.0f} % at batch "
                         f"{tr['batch_efficiency']:.1f} (compute in/infer/out {tr['server_compute_input_us']:.0f}/"
                         f"{tr['server_compute_infer_us']:.0f}/{tr['server_compute_output_us']:.0f} µs, outside "
                         f"statistics {tr['network_server_us']:.0f} µs), Tritium's {t['busy']:.0f} % at batch "
                         f"{t['batch_efficiency']:.1f} ({t['server_compute_input_us']:.0f}/"
                         f"{t['server_compute_infer_us']:.0f}/{t['server_compute_output_us']:.0f} µs, outside "
                         f"statistics {t['network_server_us']:.0f} µs): Triton's one instance is near saturation; "
                         "Tritium's computes faster per batch but sits idle the rest of the time, while its requests "
                         "spend longer outside the statistics (HTTP/gRPC handling and the hand-off to the "
                         "scheduler, on the 2 cores perf_analyzer also uses).")
    lines += cpu_lines(agg, ceiling)
    t, tr = agg("tritium", "add_sub", "http", "bin", 1), agg("triton", "add_sub", "http", "bin", 1)
    if t and tr:
        tc = t["server_compute_input_us"] + t["server_compute_infer_us"] + t["server_compute_output_us"]
        rc = tr["server_compute_input_us"] + tr["server_compute_infer_us"] + tr["server_compute_output_us"]
        lines.append(f"- add_sub c1: p50 {t['p50_us']:.0f} µs (Tritium) vs {tr['p50_us']:.0f} µs (Triton); compute "
                     f"{tc:.0f} vs {rc:.0f} µs and queue {t['server_queue_us']:.0f} vs {tr['server_queue_us']:.0f} µs, "
                     f"but network + server outside the statistics {t['network_server_us']:.0f} vs "
                     f"{tr['network_server_us']:.0f} µs and client send {t['client_send_us']:.0f} vs "
                     f"{tr['client_send_us']:.0f} µs: Tritium's model time is lower, its HTTP path outside "
                     "the model is where it loses.")
    return lines


def us_per_inference(r, key):
    """CPU µs per inference from a run's (or an aggregate's) cores used under `key`; None where
    not measured."""
    if r.get(key) is None or not r["infer_per_s"]:
        return None
    return r[key] * 1e6 / r["infer_per_s"]


def cpu_lines(agg, ceiling):
    """What the 2 cores allow: CPU per inference of each server and of perf_analyzer, and the
    most a server could serve at c16 if it spent only the ceiling's ONNX Runtime CPU per item."""
    per_inf = us_per_inference
    lines, ncores = [], os.cpu_count() or 2
    for subject, proto, fmt in (("tritium", "http", "json"), ("flask", "http", "json"), ("fastapi", "http", "json"),
                                ("tritium", "grpc", "bin"), ("triton", "grpc", "bin")):
        a = agg(subject, "mlp", proto, fmt, 16)
        if not a or a.get("server_cores") is None:
            continue
        lines.append(f"- CPU, {subject} mlp {proto} {fmt} c16: the server used {a['server_cores']:.2f} cores and "
                     f"perf_analyzer {a['client_cores']:.2f} of the {ncores} ({per_inf(a, 'server_cores'):.0f} and "
                     f"{per_inf(a, 'client_cores'):.0f} CPU µs per inference).")
    # (protocol, tensors, the baseline the target multiplies, the factor)
    for proto, fmt, base, factor in (("grpc", "bin", "triton", 3), ("http", "json", "flask", 8)):
        t, other = agg("tritium", "mlp", proto, fmt, 16), agg(base, "mlp", proto, fmt, 16)
        if not (t and other and ceiling and per_inf(t, "client_cores") is not None):
            continue
        nb = t["batch_efficiency"]
        cpu = [model_cpu_per_item(c["batches"], nb) for c in ceiling]
        cpu = [x for x in cpu if x]
        if not cpu:
            continue
        item, client = median(cpu), per_inf(t, "client_cores")
        bound = ncores * 1e6 / (client + item)
        lines.append(f"- Bound at {proto} {fmt} c16 with batch-1 clients: perf_analyzer's {client:.0f} CPU µs per "
                     f"inference plus the ceiling's {item:.0f} CPU µs per item at batch {nb:.1f} (ONNX Runtime alone, "
                     f"no server work) leave at most {bound:.0f} infer/s on {ncores} cores; {factor}× {base}'s "
                     f"{other['infer_per_s']:.0f} would be {factor * other['infer_per_s']:.0f}, and Tritium served "
                     f"{t['infer_per_s']:.0f} ({t['infer_per_s'] / bound:.2f} of the bound).")
    return lines


def cpu_cell(xs, key):
    """Median CPU µs per inference of `key` (cores used) over runs, '-' where not measured."""
    vals = [v for v in (us_per_inference(r, key) for r in xs) if v is not None]
    return f"{median(vals):.0f}" if vals else "-"


def busy(r):
    """Share of wall time (%) the instance computed, from infer/s, batch efficiency and the
    per-request server compute times."""
    be = r.get("batch_efficiency") or 1.0
    per = r["server_compute_input_us"] + r["server_compute_infer_us"] + r["server_compute_output_us"]
    return 100.0 * r["infer_per_s"] / be * per / 1e6


def fmt_num(x, digits=0):
    return "-" if x is None else (f"{x:.{digits}f}")


def summarize(args, out_dir, stamp, header, subjects, runs, failures, ceiling, triton_cfg):
    reps = sorted({r["repeat"] for r in runs} | {c["repeat"] for c in ceiling})
    ceil_by_rep = {c["repeat"]: c["batches"] for c in ceiling}
    per_rep = {}  # name -> {repeat: value}
    ratios = {}  # name -> list of per-repeat values

    def add(name, v):
        if v is not None:
            per_rep.setdefault(name, {})[rep] = v
            ratios.setdefault(name, []).append(v)

    extra = {}
    for rep in reps:
        g = lambda *k: pick(runs, rep, *k)  # noqa: E731
        tri = [r for r in runs if r["repeat"] == rep and r["subject"] == "tritium" and r["model"] == "mlp"]
        best = max(tri, key=lambda r: r["infer_per_s"]) if tri else None
        cb = ceil_by_rep.get(rep)
        if best and cb:
            top = max(cb.values(), key=lambda r: r["items_per_s"])
            add("sat_vs_ceiling", best["infer_per_s"] / top["items_per_s"])
            extra.setdefault("best", []).append(f"{best['protocol']}-{best['fmt']} c{best['concurrency']}")
            b1 = [r for r in tri if client_batch(r["fmt"]) == 1]
            if b1:
                add("sat_b1_vs_ceiling", max(r["infer_per_s"] for r in b1) / top["items_per_s"])
        t16 = g("tritium", "mlp", "http", "json", 16)
        for base in ("flask", "fastapi"):
            b16 = g(base, "mlp", "http", "json", 16)
            if t16 and b16:
                add(f"vs_{base}_c16", t16["infer_per_s"] / b16["infer_per_s"])
            t1, b1 = g("tritium", "mlp", "http", "json", 1), g(base, "mlp", "http", "json", 1)
            if t1 and b1:
                add(f"vs_{base}_c1_p50", t1["p50_us"] / b1["p50_us"])
        for proto, c in (("http", 16), ("grpc", 16), ("grpc", 64)):
            t, b = g("tritium", "mlp", proto, "bin", c), g("triton", "mlp", proto, "bin", c)
            if t and b:
                add(f"vs_triton_{proto}_c{c}", t["infer_per_s"] / b["infer_per_s"])
                add(f"vs_triton_{proto}_c{c}_p99", t["p99_us"] / b["p99_us"])
        t, b = g("tritium", "add_sub", "http", "bin", 1), g("triton", "add_sub", "http", "bin", 1)
        if t and b:
            add("add_sub_p50", t["p50_us"] / b["p50_us"])
        f = g("floor", "add_sub", "http", "bin", 1)
        if f and b:
            add("floor_vs_triton_add_sub_p50", f["p50_us"] / b["p50_us"])
        if f and t:
            add("add_sub_p50_vs_floor", t["p50_us"] / f["p50_us"])
        t, fg = g("tritium", "add_sub", "grpc", "bin", 1), g("floor_grpc", "add_sub", "grpc", "bin", 1)
        if t and fg:
            add("add_sub_grpc_p50_vs_floor", t["p50_us"] / fg["p50_us"])
        b = g("triton", "add_sub", "grpc", "bin", 1)
        if t and b:
            add("add_sub_grpc_p50", t["p50_us"] / b["p50_us"])

    def cell(name, digits=2):
        xs = ratios.get(name)
        if not xs:
            return "not measured", None
        return f"{median(xs):.{digits}f} ({spread(xs)})", median(xs)

    targets = [
        ("Tritium best-config saturation ÷ ceiling's best items/s", "sat_vs_ceiling", "≥ 0.9", lambda m: m >= 0.9),
        ("  … with batch-1 clients only", "sat_b1_vs_ceiling", "(≥ 0.9)", lambda m: m >= 0.9),
        ("Tritium ÷ Flask, mlp HTTP JSON c16 infer/s", "vs_flask_c16", "≥ 8", lambda m: m >= 8),
        ("Tritium ÷ FastAPI, mlp HTTP JSON c16 infer/s", "vs_fastapi_c16", "(≥ 8, as Flask)", lambda m: m >= 8),
        ("Tritium ÷ Triton 2.51, mlp HTTP c16 infer/s", "vs_triton_http_c16", "≥ 3 at ≤ p99", None),
        ("  … p99 Tritium ÷ Triton, HTTP c16", "vs_triton_http_c16_p99", "≤ 1", lambda m: m <= 1),
        ("Tritium ÷ Triton 2.51, mlp gRPC c16 infer/s", "vs_triton_grpc_c16", "≥ 3 at ≤ p99", None),
        ("  … p99 Tritium ÷ Triton, gRPC c16", "vs_triton_grpc_c16_p99", "≤ 1", lambda m: m <= 1),
        ("Tritium ÷ Triton 2.51, mlp gRPC c64 infer/s (saturation)", "vs_triton_grpc_c64", "(≥ 3)", None),
        ("add_sub HTTP c1 p50 Tritium ÷ Triton 2.51", "add_sub_p50", "≤ 0.3", lambda m: m <= 0.3),
        ("  … floor server ÷ Triton 2.51 (the least any server answers perf_analyzer in here)",
         "floor_vs_triton_add_sub_p50", "(≤ 0.3)", lambda m: m <= 0.3),
        ("  … Tritium ÷ floor server", "add_sub_p50_vs_floor", "≤ 1.3", lambda m: m <= 1.3),
        ("add_sub gRPC c1 p50 Tritium ÷ Triton 2.51", "add_sub_grpc_p50", "-", lambda m: True),
        ("  … Tritium ÷ gRPC floor server", "add_sub_grpc_p50_vs_floor", "≤ 1.3", lambda m: m <= 1.3),
    ]
    tlines = [f"Measured by `loadtests/targets.py` ({stamp}), server built from {header['server_built_from']}; "
              f"{len(reps)} repeats, every subject in every repeat (order rotated), ratio per repeat, "
              "median (min–max). Details in the targets section below.", "",
              "| target | measured ratio, median (min–max) | target | met? |", "| --- | --- | --- | --- |"]
    for title, key, target, ok in targets:
        text, m = cell(key)
        if m is None:
            met = "-"
        elif ok is None:
            p99 = ratios.get(key + "_p99")
            met = ("yes" if m >= 3 and p99 and median(p99) <= 1 else
                   f"no (at {m / 3:.2f}× the target" + (f", p99 ratio {median(p99):.2f}" if p99 else "") + ")")
        else:
            met = "yes" if ok(m) else "no"
            if key == "add_sub_grpc_p50":
                met = "-"
            elif not ok(m) and key.startswith("sat_"):
                met = f"no (at {m / 0.9:.2f}× the target)"
            elif not ok(m) and key.startswith("vs_f"):
                met = f"no (at {m / 8:.2f}× the target)"
            elif not ok(m) and key in ("add_sub_p50", "floor_vs_triton_add_sub_p50"):
                met = f"no ({m / 0.3:.2f}× the target latency ratio)"
        tlines.append(f"| {title} | {text} | {target} | {met} |")
    tlines += why_lines(runs, ceiling)
    if extra.get("best"):
        tlines += ["", f"Tritium's best configuration per repeat (the highest mlp infer/s among its runs): "
                   f"{', '.join(extra['best'])}."]

    lines = [f"# Targets: Tritium vs the ONNX Runtime ceiling, Flask, FastAPI and Triton 2.51 ({stamp})", "",
             f"perf_analyzer {common.PA_VERSION}, server built from {header['server_built_from']}, git HEAD "
             f"{header['git_head'][:12]}, load average {header['loadavg_at_start']:.2f} at start on "
             f"{header['nproc']} cores. Batch 1 per request, random data, -p {args.interval_ms} ms -s "
             f"{args.stability} (retried at {2 * args.stability}); {args.repeats} repeats, every subject once "
             "per repeat with the order rotated; all servers stay up for the whole run (idle while another "
             "is measured), perf_analyzer shares the 2 cores with the server under test.", "",
             "Subjects: **ceiling** = `loadtests/ceiling` (Rust, `ort` rc.15 load-dynamic, ONNX Runtime 1.31.1, "
             f"the same session setup as Tritium's ONNX backend, intra-op threads "
             f"{args.ceiling_intra_threads or 'ORT default'}; input copied into a fresh ORT tensor and the output "
             f"copied out per run; {args.ceiling_seconds} s per batch size); **tritium** = the bundled mlp config "
             "(dynamic batching, preferred 8/16/32, 200 µs, 1 instance, ORT default threads); "
             f"**flask** = gunicorn {args.baseline_workers} workers × gthread 2 threads; **fastapi** = uvicorn "
             f"{args.baseline_workers} workers, uvloop + httptools; both onnxruntime 1.31.1 with "
             f"{args.baseline_intra_threads} intra-op thread per worker; **triton** = real Triton 2.51 (nvidia-pytriton "
             "0.7.0), python backend, mlp through onnxruntime 1.31.1 in `model.py` (config below), add_sub in "
             "python; **floor** = `loadtests/ceiling/src/bin/floor.rs`, actix-web answering add_sub in the "
             "request's own handler (no scheduler, no instance thread, no statistics); **floor_grpc** = "
             "`loadtests/ceiling/src/bin/floor_grpc.rs`, the same over gRPC (tonic).", ""]
    lines += ["## Targets", ""] + tlines[2:] + [""]
    # ceiling
    if ceiling:
        lines += ["## Ceiling: mlp in-process through ONNX Runtime (`ort`)", "",
                  "| batch | items/s median (min–max) | run p50 µs | run p99 µs |", "| --- | --- | --- | --- |"]
        for b in (1, 8, 32, 64):
            xs = [c["batches"][b] for c in ceiling if b in c["batches"]]
            if xs:
                lines.append(f"| {b} | {median(x['items_per_s'] for x in xs):.0f} ({spread(x['items_per_s'] for x in xs)}) | "
                             f"{median(x['p50_us'] for x in xs):.0f} | {median(x['p99_us'] for x in xs):.0f} |")
        lines.append("")
    # per-subject table
    lines += ["## Every measured configuration", "",
              "Server-side columns (µs per request, from the statistics extension over perf_analyzer's windows; "
              "Flask/FastAPI/floor have none): queue, compute input, compute infer, compute output. Batch eff. = "
              "inference_count / execution_count over the run. CPU µs/inf: the server's process tree and "
              "perf_analyzer, CPU time over the whole perf_analyzer run ÷ its infer/s. tensors `bin-bN`: "
              "binary tensors, N items per request (perf_analyzer -b N).", "",
              "| subject | model | protocol | tensors | c | infer/s median (min–max) | p50 µs | p99 µs (min–max) | "
              "queue µs | comp. in µs | comp. infer µs | comp. out µs | batch eff. | busy % | server CPU µs/inf | "
              "client CPU µs/inf |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    keys = []
    for s in SUBJECTS:
        for p in PLAN.get(s, []):
            keys.append((s,) + p)
    for s, model, proto, fmt, c in keys:
        xs = [r for r in runs if (r["subject"], r["model"], r["protocol"], r["fmt"], r["concurrency"]) ==
              (s, model, proto, fmt, c)]
        if not xs:
            continue
        has_server = s not in NO_STATS
        sv = (lambda k: f"{median(r[k] for r in xs):.0f}") if has_server else (lambda k: "-")
        be = f"{median(r.get('batch_efficiency', 0) for r in xs):.2f}" if has_server else "-"
        lines.append(f"| {s} | {model} | {proto} | {fmt} | {c} | {median(r['infer_per_s'] for r in xs):.0f} "
                     f"({spread(r['infer_per_s'] for r in xs)}) | {median(r['p50_us'] for r in xs):.0f} | "
                     f"{median(r['p99_us'] for r in xs):.0f} ({spread(r['p99_us'] for r in xs)}) | "
                     f"{sv('server_queue_us')} | {sv('server_compute_input_us')} | "
                     f"{sv('server_compute_infer_us')} | {sv('server_compute_output_us')} | {be} | "
                     f"{f'{median(busy(r) for r in xs):.0f}' if has_server else '-'} | "
                     f"{cpu_cell(xs, 'server_cores')} | {cpu_cell(xs, 'client_cores')} |")
    lines += ["", "busy % = the share of wall time the model instance spent in compute input + infer + output: "
              "executions/s (infer/s ÷ batch eff.) × those per-request times (each request is credited with its "
              "whole batch's times), summed over instances (up to 100 % per instance). Near 100 %: the instance is the bottleneck; well below: requests do not reach "
              "it fast enough (HTTP/gRPC handling, the client on the same 2 cores).", ""]
    # where the latency goes, perf_analyzer's split of the average latency
    lines += ["## Where the time goes (average latency split by perf_analyzer, µs per request)", "",
              "| subject | model | protocol | c | avg latency | client send | network + server outside stats | "
              "server queue | server compute (in + infer + out) | client recv |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s, model, proto, fmt, c in keys:
        if s in NO_STATS or (model, c) not in (("add_sub", 1), ("mlp", 16), ("mlp", 64)) or fmt != "bin":
            continue
        xs = [r for r in runs if (r["subject"], r["model"], r["protocol"], r["fmt"], r["concurrency"]) ==
              (s, model, proto, fmt, c) and "avg_latency_us" in r]
        if not xs:
            continue
        m = lambda k: median(r.get(k, 0) for r in xs)  # noqa: E731
        comp = median(r["server_compute_input_us"] + r["server_compute_infer_us"] + r["server_compute_output_us"]
                      for r in xs)
        lines.append(f"| {s} | {model} | {proto} | {c} | {m('avg_latency_us'):.0f} | {m('client_send_us'):.0f} | "
                     f"{m('network_server_us'):.0f} | {m('server_queue_us'):.0f} | {comp:.0f} | "
                     f"{m('client_recv_us'):.0f} |")
    lines.append("")
    # all ratios
    lines += ["## Ratios within each repeat", "", "| ratio | " + " | ".join(f"rep {r}" for r in reps) +
              " | median | min–max |", "| --- |" + " --- |" * (len(reps) + 2)]
    for name in sorted(ratios):
        xs = ratios[name]
        cells = [f"{per_rep[name][r]:.3f}" if r in per_rep[name] else "-" for r in reps]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {median(xs):.3f} | {spread(xs)} |")
    lines += ["", "(`sat_vs_ceiling`: Tritium's highest mlp infer/s in the repeat ÷ the ceiling's highest items/s "
              "in the same repeat; `vs_X_cN`: Tritium infer/s ÷ X's; `_p99`/`_p50`: latency ratios, lower is "
              "better for Tritium.)", ""]
    if triton_cfg:
        lines += ["Triton's mlp config (the python model is `loadtests/triton_ref/mlp_onnx/model.py`):", "",
                  "```", triton_cfg.rstrip(), "```", ""]
    lines += [f"Failed runs: {len(failures)}" + ("" if not failures else ":")]
    lines += [f"- {f['run']}: {f['error'][:300]}" for f in failures]
    summary = {"header": header, "args": vars(args), "runs": runs, "ceiling": ceiling, "ratios": per_rep,
               "failures": failures}
    common.write_summary(out_dir, summary, lines)
    with open(os.path.join(out_dir, "targets.md"), "w") as f:
        f.write("\n".join(tlines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
