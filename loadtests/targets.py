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
from targets_report import (NO_STATS, PLAN, SUBJECTS, busy, client_batch, model_cpu_per_item,  # noqa: E402,F401
                            pick, summarize, us_per_inference)  # (hotpath.py reads some of these through targets)

HERE = common.HERE
ROOT = common.ROOT
JSON_FMT = ["--input-tensor-format", "json", "--output-tensor-format", "json"]


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


# perf_analyzer's window (-p, ms) for a load, where it must differ from --interval-ms: its cost
# of closing a window grows with the square of the requests in it (loadtests/PROFILES.md,
# "perf_analyzer at 22,000–25,000 infer/s"), so a load that a server answers at 25,000/s and
# more wants a short window; keyed by (model, protocol, fmt, concurrency).
INTERVAL_MS = {}


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
                              extra=extra, interval_ms=INTERVAL_MS.get((model, protocol, fmt, c), args.interval_ms),
                              stability=args.stability,
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


if __name__ == "__main__":
    sys.exit(main())
