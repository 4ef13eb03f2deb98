#!/usr/bin/env python3
"""Issue 19 points 1 and 2 in one short run: two builds of the server (old and new) beside the
floor servers, each a ratio within one repeat.

Subjects, all started once and kept up (each idle while another is measured):
  old, new    two release builds of Tritium (e.g. main and a branch), the bundled add_sub and mlp.
  floor       loadtests/ceiling's `floor` (actix-web answering add_sub in its own handler).
  floor_grpc  loadtests/ceiling's `floor_grpc` (tonic answering add_sub's ModelInfer in its own
              handler).
Loads (perf_analyzer, batch 1): add_sub c1 over HTTP (binary tensors) and gRPC against every
subject that serves it; mlp c16 over HTTP (binary) and gRPC against old and new. Each repeat runs
every subject, the order rotated. The ceiling (loadtests/ceiling, one process per batch size with
its CPU time) runs first, for the CPU bound: 2 cores ÷ (perf_analyzer's CPU µs per inference +
ONNX Runtime's CPU µs per item at the run's batch efficiency; below).

Per repeat: add_sub p50 ÷ the floor's (HTTP and gRPC), mlp c16 infer/s ÷ the bound, the
instance's busy share of wall time (targets.busy), the time outside the statistics per request
(perf_analyzer's Network+Server Send/Recv), new ÷ old infer/s.

Options for issue 19 point 1 (the mlp instance fed at c16):
  --loads mlp_http,mlp_grpc   only some loads (add_sub_http, add_sub_grpc, mlp_http, mlp_grpc;
              also mlp_http_c1 for the latency of a lone mlp request); the floors start only for
              add_sub.
  --loads ...,add_sub_http_c16,add_sub_grpc_c16   add_sub at c16 against old, new and the floors:
              the server's CPU per request with nothing but answering to do (the floor's). With
              the mlp loads, each mlp row then also says what 0.85 of the bound leaves the server
              beyond the model, and the share of the bound a server would reach whose CPU beyond
              the model were the floor's at c16, with no core idle: (perf_analyzer + the model) ÷
              (perf_analyzer + the model + the floor), the same repeat's figures.
  --old-model-repository     the old build's repository (model_repository/ is the new build's).
  --old-mlp-batching / --new-mlp-batching TEXT   what that subject's mlp dynamic_batching holds.
  --old-mlp-instances / --new-mlp-instances N   that subject's mlp instance_group count (the
              ceiling then runs N sessions at once, with cores ÷ N intra-op threads each unless
              intra_op_thread_count is set, as the server gives them).
  --old-mlp-param / --new-mlp-param KEY=VALUE   a `parameters` entry added to that subject's mlp
              config (e.g. intra_op_thread_count=1, session.intra_op.allow_spinning=0), so one
              binary can be measured against itself with other session options.
  --old-server-arg / --new-server-arg ARG   an argument added to that subject's command line
              (repeatable; e.g. --new-server-arg=--http-thread-count --new-server-arg=1).
  --floor-mlp PATH   loadtests/ceiling's `floor_mlp` as a subject of the mlp loads: actix-web
              (HTTP) or tonic (gRPC) and the bundled mlp's ONNX Runtime session with the least
              batching engine between them (a queue under a mutex, one thread running the
              batches, the same 200 µs delay for 8). What it reaches of the bound is what a server
              of Tritium's shape reaches here with nothing else to do.
  --triton    real Triton 2.51 (loadtests/triton_ref, $TRITON_REF_DIR) as a third subject of the mlp
              loads, its mlp as targets.py configures it: the time outside the statistics per
              request, new ÷ Triton's, in the same repeat.
Every mlp run also records each server thread's CPU (/proc/<pid>/task/*/stat), summed by thread
name, in CPU µs per inference: what the server spends beyond the model, and where.

The bound's model CPU: the ceiling's own CPU time (every thread of the process, spinning
included) over its timed window per item, at batch sizes 1, 4-8 and 16 by default, interpolated at
the run's batch efficiency, the least of --ceiling-windows windows; run with each subject's own
ONNX Runtime options (the `intra_op_thread_count` and `session.*` parameters of its mlp config
as the run edits it; Triton's mlp: ONNX Runtime's defaults), unless --ceiling-session /
--ceiling-intra-threads are given, which then hold for all. Measured alone, with both cores to
itself: the model's arithmetic, not what contention for the cores adds to it (that is the
server's to avoid).

Hand-offs: after the repeats, one more add_sub c1 run per protocol against old and new counts
each server thread's voluntary context switches (`/proc/<pid>/task/*/status`: each is the thread
going to sleep, so each wake-up of a sleeping thread that a request causes shows as one) per
request, by thread name.

  .venv/bin/python loadtests/hotpath.py --old PATH --new PATH [--repeats 2]

Results: loadtests/out/hotpath-<time>/summary.{md,json}.
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import targets  # noqa: E402
from common import median, spread  # noqa: E402

LOADS = {"add_sub_http": ("add_sub", "http", "bin", 1), "add_sub_grpc": ("add_sub", "grpc", "bin", 1),
         "mlp_http": ("mlp", "http", "bin", 16), "mlp_grpc": ("mlp", "grpc", "bin", 16),
         "mlp_http_c1": ("mlp", "http", "bin", 1),
         "add_sub_http_c16": ("add_sub", "http", "bin", 16), "add_sub_grpc_c16": ("add_sub", "grpc", "bin", 16)}
DEFAULT_LOADS = "add_sub_http,add_sub_grpc,mlp_http,mlp_grpc"
SUBJECTS = ["old", "new", "floor", "floor_grpc", "floor_mlp", "triton"]


def edit_mlp_config(text, params, batching=None, instances=None):
    """mlp's config.pbtxt with `parameters` entries (KEY=VALUE) added, what its
    dynamic_batching block holds replaced by `batching` and its instance count set to
    `instances`."""
    if instances is not None:
        group = f"instance_group [ {{ kind: KIND_CPU count: {instances} }} ]"
        text, n = re.subn(r"instance_group\s*\[[^\]]*\]", group, text)
        if n != 1:
            sys.exit("mlp's config.pbtxt has no single instance_group to replace")
    if batching is not None:
        text, n = re.subn(r"dynamic_batching \{[^}]*\}", lambda _: f"dynamic_batching {{ {batching} }}", text)
        if n != 1:
            sys.exit("mlp's config.pbtxt has no single dynamic_batching block to replace")
    for kv in params:
        key, sep, value = kv.partition("=")
        if not sep:
            sys.exit(f"mlp parameter {kv!r}: expected KEY=VALUE")
        text += f'\nparameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
    return text


def mlp_config_editor(params, batching=None, instances=None):
    """An edit_repo for common.bench_server that applies edit_mlp_config."""
    def edit(repo):
        cfg = os.path.join(repo, "mlp", "config.pbtxt")
        text = edit_mlp_config(open(cfg).read(), params, batching, instances)
        with open(cfg, "w") as f:
            f.write(text)
    return edit if params or batching is not None or instances is not None else None


def mlp_edits(args, label):
    """(params, batching, instances): how the run edits `label`'s mlp config."""
    if label == "old":
        return args.old_mlp_param, args.old_mlp_batching, args.old_mlp_instances
    return args.new_mlp_param, args.new_mlp_batching, args.new_mlp_instances


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap, interval_ms=1500)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--floor", required=True)
    ap.add_argument("--floor-grpc", required=True)
    ap.add_argument("--floor-mlp", help="loadtests/ceiling's floor_mlp binary: a subject of the mlp loads")
    ap.add_argument("--ceiling", required=True)
    ap.add_argument("--ceiling-seconds", type=float, default=1.0)
    ap.add_argument("--ceiling-intra-threads", type=int, default=0)
    ap.add_argument("--ceiling-windows", type=int, default=3,
                    help="timed windows per batch size, the least CPU per item kept (1 for a ceiling "
                         "binary that prints no cpu_us_per_item)")
    ap.add_argument("--ceiling-batches", default="1,4,5,6,7,8,16",
                    help="batch sizes the ceiling runs (the bound interpolates between them)")
    ap.add_argument("--ceiling-session", action="append", default=[], metavar="KEY=VALUE",
                    help="an ONNX Runtime session config entry for the ceiling (repeatable)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--loads", default=DEFAULT_LOADS, help="comma-separated, of: " + ",".join(LOADS))
    ap.add_argument("--old-model-repository", help="the old build's repository (default: --model-repository)")
    ap.add_argument("--old-mlp-param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--new-mlp-param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--old-mlp-batching", metavar="TEXT", help="replaces the inside of mlp's dynamic_batching { }")
    ap.add_argument("--new-mlp-batching", metavar="TEXT")
    ap.add_argument("--old-mlp-instances", type=int, metavar="N", help="that subject's mlp instance_group count")
    ap.add_argument("--new-mlp-instances", type=int, metavar="N")
    ap.add_argument("--old-server-arg", action="append", default=[], metavar="ARG",
                    help="an argument added to the old server's command line (repeatable)")
    ap.add_argument("--new-server-arg", action="append", default=[], metavar="ARG")
    ap.add_argument("--triton", action="store_true", help="Triton 2.51 as a subject of the mlp loads")
    ap.add_argument("--triton-ref", default=os.environ.get("TRITON_REF_DIR", "/work/ref"))
    ap.add_argument("--triton-delay-us", type=int, default=200)
    ap.add_argument("--triton-preferred", default="8,16,32")
    ap.add_argument("--triton-instances", type=int, default=1)
    ap.add_argument("--triton-intra-threads", type=int, default=0, help="0 = ONNX Runtime's default")
    ap.add_argument("--from-json", metavar="SUMMARY_JSON", help="only write the summary again from a run's summary.json")
    args = ap.parse_args()
    if args.from_json:
        d = json.load(open(args.from_json))
        for c in d["ceilings"].values():
            c["batches"] = {int(b): r for b, r in c["batches"].items()}
        summarize(args, os.path.dirname(os.path.abspath(args.from_json)), d["stamp"], d["header"], d["runs"],
                  d["failures"], d["ceilings"], d["switches"])
        return 0
    for p in (args.old, args.new, args.floor, args.floor_grpc, args.ceiling, args.perf_analyzer) + \
            ((args.floor_mlp,) if args.floor_mlp else ()):
        if not os.path.exists(p):
            sys.exit(f"missing {p}")
    unknown = [x for x in args.loads.split(",") if x not in LOADS]
    if unknown:
        sys.exit(f"unknown loads {unknown}: of {list(LOADS)}")
    loads = [LOADS[x] for x in args.loads.split(",")]
    if args.triton and not os.path.exists(os.path.join(args.triton_ref, "backends/python")):
        sys.exit(f"missing {args.triton_ref}: run loadtests/triton_ref/setup.sh (or leave out --triton)")
    args.server = args.new
    mlp_loads = [x for x in loads if x[0] == "mlp"]
    targets.PLAN.update({"old": loads, "new": loads, "triton": mlp_loads,
                         "floor": [x for x in loads if x[:2] == ("add_sub", "http")],
                         "floor_grpc": [x for x in loads if x[:2] == ("add_sub", "grpc")],
                         "floor_mlp": mlp_loads if args.floor_mlp else []})
    for proto in ("http", "grpc"):
        # the floors answer add_sub at c16 at 25,000-40,000/s here: a 1.5 s window stalled
        # perf_analyzer for 600 s (targets.INTERVAL_MS). Against `floor` it still outgrows its
        # 4 GB limit in some repeats, with 400 ms windows (-161118) as with 250 ms (-172027)
        targets.INTERVAL_MS[("add_sub", proto, "bin", 16)] = min(args.interval_ms, 400)
    subjects = ["old", "new"]
    if targets.PLAN["floor"]:
        subjects.append("floor")
    if targets.PLAN["floor_grpc"]:
        subjects.append("floor_grpc")
    if targets.PLAN["floor_mlp"]:
        subjects.append("floor_mlp")
    if args.triton and mlp_loads:
        subjects.append("triton")
    out_dir, stamp = common.make_out_dir(args, "hotpath")
    header = common.run_header(args)
    runs, failures = [], []
    ceilings = run_ceilings(args, out_dir, subjects) if mlp_loads else {}
    tmp = tempfile.mkdtemp(prefix="hotpath-")
    try:
        with contextlib.ExitStack() as stack:
            servers = start_servers(args, out_dir, tmp, stack, subjects)
            for s in subjects:
                targets.warm_up(args, out_dir, s, servers[s])
            for rep in range(1, args.repeats + 1):
                k = (rep - 1) % len(subjects)
                order = subjects[k:] + subjects[:k]
                print(f"--- repeat {rep}: {' '.join(order)}", flush=True)
                for s in order:
                    targets.measure(args, out_dir, rep, s, servers[s], runs, failures)
            switches = {}
            for label in ("old", "new"):
                for proto in ("http", "grpc"):
                    if ("add_sub", proto, "bin", 1) in loads:
                        switches[f"{label}-{proto}"] = count_switches(args, out_dir, servers[label], proto, label)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summarize(args, out_dir, stamp, header, runs, failures, ceilings, switches)
    return 0 if not failures else 1


def run_ceilings(args, out_dir, subjects):
    """The ceiling once per distinct set of ONNX Runtime options among the subjects:
    {subject: {"options": flags, "batches": {batch: result}}}."""
    batches = [int(b) for b in args.ceiling_batches.split(",")]
    forced = bool(args.ceiling_session or args.ceiling_intra_threads)
    wanted = {}
    for label in subjects:
        if label in ("floor", "floor_grpc"):
            continue
        if forced or label == "triton":
            flags = ()
        elif label == "floor_mlp":
            flags = floor_mlp_options(args)
        else:
            repo = (args.old_model_repository if label == "old" else None) or args.model_repository
            text = edit_mlp_config(open(os.path.join(repo, "mlp", "config.pbtxt")).read(), *mlp_edits(args, label))
            flags = common.ort_options(text)
        wanted[label] = flags
    runs, out = {}, {}
    for label, flags in wanted.items():
        if flags not in runs:
            saved = args.ceiling_session
            args.ceiling_session = list(args.ceiling_session) + [flags[i + 1] for i in range(0, len(flags), 2)
                                                                if flags[i] == "--session"]
            intra = [flags[i + 1] for i in range(0, len(flags), 2) if flags[i] == "--intra-threads"]
            sessions = [flags[i + 1] for i in range(0, len(flags), 2) if flags[i] == "--sessions"]
            saved_intra = args.ceiling_intra_threads
            if intra:
                args.ceiling_intra_threads = int(intra[-1])
            args.ceiling_sessions = int(sessions[-1]) if sessions else 1
            runs[flags] = targets.run_ceiling(args, out_dir, 0, batches)
            args.ceiling_session, args.ceiling_intra_threads, args.ceiling_sessions = saved, saved_intra, 1
            print(f"ceiling {' '.join(flags) or '(defaults)'}: " + "  ".join(
                f"b{b} {r['cpu_us_per_item']:.0f}" for b, r in runs[flags].items()) + " CPU µs/item", flush=True)
        out[label] = {"options": " ".join(flags) or "ONNX Runtime's defaults", "batches": runs[flags]}
    return out


def floor_mlp_options(args):
    """The ceiling's flags for floor_mlp's session: the bundled mlp config's, unedited."""
    return common.ort_options(open(os.path.join(args.model_repository, "mlp", "config.pbtxt")).read())


def server_args_note(args, label):
    extra = getattr(args, f"{label}_server_arg", None) or []
    return f" (server {' '.join(extra)})" if extra else ""


def start_servers(args, out_dir, tmp, stack, subjects):
    servers = {}
    for label, binary in (("old", args.old), ("new", args.new)):
        repo = (args.old_model_repository if label == "old" else None) or args.model_repository
        servers[label] = stack.enter_context(common.bench_server(
            binary, args.onnxruntime_library, repo, out_dir, models=["mlp", "add_sub"],
            ready=("mlp", "add_sub"), check=common.add_sub_check, log_name=f"server-{label}.log",
            prefix="hot-", edit_repo=mlp_config_editor(*mlp_edits(args, label)),
            extra_args=args.old_server_arg if label == "old" else args.new_server_arg))
    if "floor" in subjects:
        port = common.free_ports(1)[0]
        servers["floor"] = stack.enter_context(targets.process_server(
            "floor", [args.floor, "--port", str(port)], dict(os.environ), os.path.join(out_dir, "server-floor.log"),
            port, ready=["add_sub"]))
    if "floor_grpc" in subjects:
        port = common.free_ports(1)[0]
        servers["floor_grpc"] = stack.enter_context(targets.process_server(
            "floor_grpc", [args.floor_grpc, "--port", str(port)], dict(os.environ),
            os.path.join(out_dir, "server-floor_grpc.log"), port, port))
        targets.wait_port(port)
    if "floor_mlp" in subjects:
        port, grpc_port = common.free_ports(2)
        flags = floor_mlp_options(args)
        if any(f in ("--intra-threads", "--sessions") for f in flags):
            sys.exit(f"--floor-mlp serves one session with ONNX Runtime's default threads; the bundled mlp asks {flags}")
        servers["floor_mlp"] = stack.enter_context(targets.process_server(
            "floor_mlp", [args.floor_mlp, "--port", str(port), "--grpc-port", str(grpc_port),
                          "--onnxruntime-library", args.onnxruntime_library,
                          "--model", os.path.join(args.model_repository, "mlp", "1", "model.onnx")] + list(flags),
            dict(os.environ), os.path.join(out_dir, "server-floor_mlp.log"), port, grpc_port, ready=["mlp"]))
    if "triton" in subjects:
        repo, cfg = targets.triton_repo(args, tmp)
        with open(os.path.join(out_dir, "triton-mlp-config.pbtxt"), "w") as f:
            f.write(cfg)
        hp, gp, mp = common.free_ports(3)
        env = dict(os.environ, TRITON_REF_DIR=args.triton_ref)
        servers["triton"] = stack.enter_context(targets.process_server(
            "triton", ["bash", os.path.join(common.HERE, "triton_ref/run.sh"), repo, str(hp), str(gp), str(mp),
                       "--", "--model-control-mode=explicit", "--load-model=mlp"],
            env, os.path.join(out_dir, "server-triton.log"), hp, gp, ready=["mlp"]))
    return servers


def thread_switches(pid):
    """Voluntary context switches of each thread of `pid`, summed by thread name."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            for ln in open(f"/proc/{pid}/task/{tid}/status"):
                if ln.startswith("voluntary_ctxt_switches"):
                    out[name] = out.get(name, 0) + int(ln.split()[1])
    return out


def count_switches(args, out_dir, srv, proto, label):
    """Voluntary context switches per request, by thread name, over one add_sub c1 run."""
    before_stats = common.model_stats(srv.base, "add_sub")
    before = thread_switches(srv.proc.pid)
    name = f"switches-{label}-add_sub-{proto}"
    common.run_pa(args.perf_analyzer, "add_sub", srv.url(proto), proto, 1, os.path.join(out_dir, name + ".csv"),
                  os.path.join(out_dir, name + ".log"), interval_ms=args.interval_ms, stability=50, retry=False)
    after = thread_switches(srv.proc.pid)
    n = common.stats_delta(common.model_stats(srv.base, "add_sub"), before_stats)["inference_count"]
    per = {k: (after.get(k, 0) - before.get(k, 0)) / max(n, 1) for k in after}
    per = {k: v for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.05}
    print(f"{label} {proto}: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items()) + f" per request ({n})")
    return per


def bound(r, ceilings):
    """The most infer/s the cores allow at this run's batching with perf_analyzer's CPU and
    ONNX Runtime's alone (targets.cpu_lines)."""
    client = targets.us_per_inference(r, "client_cores")
    be = r.get("batch_efficiency") or 1.0
    return (os.cpu_count() or 2) * 1e6 / (client + model_cpu(r, ceilings))


def model_cpu(r, ceilings):
    """The ceiling's CPU µs per item with the run's subject's ONNX Runtime options, at its batch
    efficiency."""
    return targets.model_cpu_per_item(ceilings[r["subject"]]["batches"], r.get("batch_efficiency") or 1.0)


def subject_instances(args, label):
    """The mlp instances the run gives `label` (old or new), from its config as edited."""
    repo = (args.old_model_repository if label == "old" else None) or args.model_repository
    text = edit_mlp_config(open(os.path.join(repo, "mlp", "config.pbtxt")).read(), *mlp_edits(args, label))
    return common.instance_count(text)


def thread_groups(r):
    """A run's server CPU µs per inference by thread group: names that differ only by a number
    (grpc-0, grpc-1) are one group."""
    out = {}
    for name, cores in (r.get("thread_cores") or {}).items():
        key = re.sub(r"[-_]?\d+(\+?)$", r"\1", name) or name
        out[key] = out.get(key, 0.0) + cores * 1e6 / r["infer_per_s"]
    return out


def params_note(params, batching=None, instances=None):
    notes = list(params) + ([f"dynamic_batching {{ {batching} }}"] if batching is not None else []) + \
        ([f"instance_group count {instances}"] if instances is not None else [])
    return f" (mlp {', '.join(notes)})" if notes else ""


def summarize(args, out_dir, stamp, header, runs, failures, ceilings, switches):
    reps = sorted({r["repeat"] for r in runs})
    # busy: the share of wall time each instance computes, the mean over the subject's instances
    instances = {b: subject_instances(args, b) for b in ("old", "new")}
    instances["triton"] = args.triton_instances
    instances["floor_mlp"] = 1

    def g(rep, subject, model, proto, c):
        return targets.pick(runs, rep, subject, model, proto, "bin", c)

    ratios = {}

    def add(key, v):
        ratios.setdefault(key, []).append(v)

    for rep in reps:
        for proto, floor in (("http", "floor"), ("grpc", "floor_grpc")):
            f = g(rep, floor, "add_sub", proto, 1)
            for b in ("old", "new"):
                t = g(rep, b, "add_sub", proto, 1)
                if t and f:
                    add(f"add_sub_{proto}_{b}_vs_floor", t["p50_us"] / f["p50_us"])
                if t:
                    add(f"add_sub_{proto}_{b}_p50", t["p50_us"])
            if f:
                add(f"add_sub_{proto}_floor_p50", f["p50_us"])
            o, n = g(rep, "old", "add_sub", proto, 1), g(rep, "new", "add_sub", proto, 1)
            if o and n:
                add(f"add_sub_{proto}_new_vs_old", n["p50_us"] / o["p50_us"])
            f16 = g(rep, floor, "add_sub", proto, 16)
            for b, r in (("old", g(rep, "old", "add_sub", proto, 16)), ("new", g(rep, "new", "add_sub", proto, 16)),
                         ("floor", f16)):
                if r:
                    add(f"add_sub_c16_{proto}_{b}_server_cpu", targets.us_per_inference(r, "server_cores"))
                    add(f"add_sub_c16_{proto}_{b}_client_cpu", targets.us_per_inference(r, "client_cores"))
                    add(f"add_sub_c16_{proto}_{b}_ips", r["infer_per_s"])
            o, n = g(rep, "old", "mlp", proto, 16), g(rep, "new", "mlp", proto, 16)
            tr = g(rep, "triton", "mlp", proto, 16)
            fm = g(rep, "floor_mlp", "mlp", proto, 16)
            for b, r in (("old", o), ("new", n), ("floor_mlp", fm), ("triton", tr)):
                if r and f16:
                    # a server whose CPU beyond the model were the floor's at c16, with no core idle
                    pa_model = targets.us_per_inference(r, "client_cores") + model_cpu(r, ceilings)
                    floor_cpu = targets.us_per_inference(f16, "server_cores")
                    add(f"mlp_{proto}_{b}_floor_best", pa_model / (pa_model + floor_cpu))
                    add(f"mlp_{proto}_{b}_budget", pa_model / 0.85 - pa_model)
                if r:
                    add(f"mlp_{proto}_{b}_bound", r["infer_per_s"] / bound(r, ceilings))
                    add(f"mlp_{proto}_{b}_busy", targets.busy(r) / instances[b])
                    add(f"mlp_{proto}_{b}_outside", r["network_server_us"])
                    add(f"mlp_{proto}_{b}_batch", r.get("batch_efficiency") or 1.0)
                    add(f"mlp_{proto}_{b}_ips", r["infer_per_s"])
                    add(f"mlp_{proto}_{b}_model_cpu", model_cpu(r, ceilings))
                    add(f"mlp_{proto}_{b}_client_cpu", targets.us_per_inference(r, "client_cores"))
                    add(f"mlp_{proto}_{b}_server_cpu", targets.us_per_inference(r, "server_cores"))
                    for k, v in thread_groups(r).items():
                        add(f"threads_{proto}_{b}_{k}", v)
            if o and n:
                add(f"mlp_{proto}_new_vs_old", n["infer_per_s"] / o["infer_per_s"])
            for b, r in (("old", o), ("new", n)):
                if r and fm:
                    add(f"mlp_{proto}_{b}_vs_floor_mlp", r["infer_per_s"] / fm["infer_per_s"])
            for b, r in (("old", o), ("new", n), ("floor_mlp", fm)):
                if r and tr:
                    add(f"mlp_{proto}_{b}_outside_vs_triton", r["network_server_us"] / max(tr["network_server_us"], 1))
            o, n = g(rep, "old", "mlp", proto, 1), g(rep, "new", "mlp", proto, 1)
            for b, r in (("old", o), ("new", n)):
                if r:
                    add(f"mlp_c1_{proto}_{b}_p50", r["p50_us"])
            if o and n:
                add(f"mlp_c1_{proto}_p50_new_vs_old", n["p50_us"] / o["p50_us"])

    def cell(key, digits=2):
        xs = ratios.get(key)
        return f"{median(xs):.{digits}f} ({spread(xs)})" if xs else "not measured"

    cols = ["old", "new"] + [s for s in ("floor_mlp", "triton") if any(k.startswith("mlp_") and f"_{s}_" in k
                                                                        for k in ratios)]
    lines = [f"# Issue 19: the hot path, old ÷ new ÷ floor ({stamp})", "",
             f"perf_analyzer {common.PA_VERSION}; old = {args.old}{params_note(*mlp_edits(args, 'old'))}"
             f"{server_args_note(args, 'old')}, new = {args.new}{params_note(*mlp_edits(args, 'new'))}"
             f"{server_args_note(args, 'new')} (git HEAD "
             f"{header['git_head'][:12]}); load average {header['loadavg_at_start']:.2f} at start on "
             f"{header['nproc']} cores; {len(reps)} repeats, the order of the subjects rotated, ratios per "
             f"repeat, median (min–max); -p {args.interval_ms} ms.", "",
             "| figure | " + " | ".join(cols) + " |", "| --- |" + " --- |" * len(cols)]

    def row(title, key, digits=2):
        lines.append(f"| {title} | " + " | ".join(cell(key.format(b=b), digits) for b in cols) + " |")

    for proto in ("http", "grpc"):
        if f"add_sub_{proto}_new_p50" not in ratios:
            continue
        row(f"add_sub {proto} c1 p50 ÷ floor's (target ≤ 1.3)", f"add_sub_{proto}_{{b}}_vs_floor")
        row(f"… p50 µs (floor {cell(f'add_sub_{proto}_floor_p50', 0)})", f"add_sub_{proto}_{{b}}_p50", 0)
    for proto in ("http", "grpc"):
        if f"add_sub_c16_{proto}_floor_server_cpu" not in ratios and f"add_sub_c16_{proto}_new_server_cpu" not in ratios:
            continue
        fl = f"; the floor {cell(f'add_sub_c16_{proto}_floor_server_cpu', 0)}" \
            if f"add_sub_c16_{proto}_floor_server_cpu" in ratios else ""
        row(f"add_sub {proto} c16: server CPU µs per request{fl}", f"add_sub_c16_{proto}_{{b}}_server_cpu", 0)
        row("… perf_analyzer's CPU µs per request", f"add_sub_c16_{proto}_{{b}}_client_cpu", 0)
        row("… infer/s", f"add_sub_c16_{proto}_{{b}}_ips", 0)
    for proto in ("http", "grpc"):
        if f"mlp_{proto}_new_ips" not in ratios:
            continue
        row(f"mlp {proto} c16 infer/s", f"mlp_{proto}_{{b}}_ips", 0)
        if "floor_mlp" in cols:
            row("… ÷ floor_mlp's in the same repeat", f"mlp_{proto}_{{b}}_vs_floor_mlp")
        row("… ÷ the CPU bound (target ≥ 0.85)", f"mlp_{proto}_{{b}}_bound")
        row("… instance busy % (target ≥ 90)", f"mlp_{proto}_{{b}}_busy", 0)
        row("… µs per request outside the statistics", f"mlp_{proto}_{{b}}_outside", 0)
        if "triton" in cols:
            row("… ÷ Triton's in the same repeat (target ≤ 1)", f"mlp_{proto}_{{b}}_outside_vs_triton")
        row("… requests per execution", f"mlp_{proto}_{{b}}_batch", 1)
        row("… server CPU µs per inference", f"mlp_{proto}_{{b}}_server_cpu", 0)
        row("… the model's alone (the ceiling's, at that batch size)", f"mlp_{proto}_{{b}}_model_cpu", 0)
        row("… perf_analyzer's CPU µs per inference", f"mlp_{proto}_{{b}}_client_cpu", 0)
        if f"mlp_{proto}_new_budget" in ratios:
            row("… CPU µs per inference that 0.85 of the bound leaves the server beyond the model",
                f"mlp_{proto}_{{b}}_budget", 0)
            row("… ÷ the bound of a server costing the floor's add_sub c16 CPU beyond the model, no core idle",
                f"mlp_{proto}_{{b}}_floor_best")
    for proto in ("http", "grpc"):
        if f"mlp_c1_{proto}_new_p50" in ratios:
            row(f"mlp {proto} c1 p50 µs", f"mlp_c1_{proto}_{{b}}_p50", 0)
    if any(k.startswith("threads_") for k in ratios):
        lines += ["", "Server CPU µs per inference by thread (names that differ only by a number summed; "
                  "median over the repeats; under 5 µs left out; Triton's python stub processes are not its "
                  "threads: they are in its server CPU above only):", ""]
        for proto in ("http", "grpc"):
            for b in cols:
                pre = f"threads_{proto}_{b}_"
                per = {k[len(pre):]: median(v) for k, v in ratios.items() if k.startswith(pre)}
                per = {k: v for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 5}
                if per:
                    lines.append(f"- {b} mlp {proto} c16: " + ", ".join(f"`{k}` {v:.0f}" for k, v in per.items()))
    if ceilings:
        lines += ["", "The ceiling alone, CPU µs per item by batch (the least of the windows; items/s of that window):", ""]
        for label, c in ceilings.items():
            lines.append(f"- {label} ({c['options']}): " + ", ".join(
                f"b{b} {r['cpu_us_per_item']:.0f} ({r['items_per_s']:.0f}/s)" for b, r in sorted(c["batches"].items())))
    lines += ["", "new ÷ old in the same repeat: " + ", ".join(
        f"{k.replace('_new_vs_old', '')} {cell(k)}" for k in sorted(ratios) if k.endswith("_new_vs_old"))]
    lines += ["", "Voluntary context switches per request by server thread (add_sub c1, one run each; "
              "threads under 0.05 left out):", ""]
    for key, per in switches.items():
        total = sum(per.values())
        lines.append(f"- {key}: {total:.2f} in all: " + ", ".join(f"`{k}` {v:.2f}" for k, v in per.items()))
    if failures:
        lines += ["", "Failures: " + "; ".join(f"{f['run']}: {f['error']}" for f in failures)]
    common.write_summary(out_dir, {"stamp": stamp, "header": header, "runs": runs, "failures": failures,
                                   "ceilings": ceilings, "ratios": ratios, "switches": switches}, lines)


if __name__ == "__main__":
    sys.exit(main())
