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
its CPU time) runs once first, for the CPU bound as targets.py computes it: 2 cores ÷
(perf_analyzer's CPU µs per inference + ONNX Runtime's CPU µs per item at the batch size nearest
the run's batch efficiency).

Per repeat: add_sub p50 ÷ the floor's (HTTP and gRPC), mlp c16 infer/s ÷ the bound, the
instance's busy share of wall time (targets.busy), the time outside the statistics per request
(perf_analyzer's Network+Server Send/Recv), new ÷ old infer/s.

Hand-offs: after the repeats, one more add_sub c1 run per protocol against old and new counts
each server thread's voluntary context switches (`/proc/<pid>/task/*/status`: each is the thread
going to sleep, so each wake-up of a sleeping thread that a request causes shows as one) per
request, by thread name.

  .venv/bin/python loadtests/hotpath.py --old PATH --new PATH [--repeats 2]

Results: loadtests/out/hotpath-<time>/summary.{md,json}.
"""

import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import targets  # noqa: E402
from common import median, spread  # noqa: E402

LOADS = [("add_sub", "http", "bin", 1), ("add_sub", "grpc", "bin", 1),
         ("mlp", "http", "bin", 16), ("mlp", "grpc", "bin", 16)]
SUBJECTS = ["old", "new", "floor", "floor_grpc"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap, interval_ms=1500)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--floor", required=True)
    ap.add_argument("--floor-grpc", required=True)
    ap.add_argument("--ceiling", required=True)
    ap.add_argument("--ceiling-seconds", type=float, default=2.0)
    ap.add_argument("--ceiling-intra-threads", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    for p in (args.old, args.new, args.floor, args.floor_grpc, args.ceiling, args.perf_analyzer):
        if not os.path.exists(p):
            sys.exit(f"missing {p}")
    args.server = args.new
    targets.PLAN.update({"old": LOADS, "new": LOADS})
    out_dir, stamp = common.make_out_dir(args, "hotpath")
    header = common.run_header(args)
    runs, failures = [], []
    ceiling = targets.run_ceiling(args, out_dir, 0)
    print("ceiling: " + "  ".join(f"b{b} {r['cpu_us_per_item']:.0f} CPU µs/item" for b, r in ceiling.items()))
    with contextlib.ExitStack() as stack:
        servers = {}
        for label, binary in (("old", args.old), ("new", args.new)):
            servers[label] = stack.enter_context(common.bench_server(
                binary, args.onnxruntime_library, args.model_repository, out_dir, models=["mlp", "add_sub"],
                ready=("mlp", "add_sub"), check=common.add_sub_check, log_name=f"server-{label}.log",
                prefix="hot-"))
        port = common.free_ports(1)[0]
        servers["floor"] = stack.enter_context(targets.process_server(
            "floor", [args.floor, "--port", str(port)], dict(os.environ), os.path.join(out_dir, "server-floor.log"),
            port, ready=["add_sub"]))
        port = common.free_ports(1)[0]
        servers["floor_grpc"] = stack.enter_context(targets.process_server(
            "floor_grpc", [args.floor_grpc, "--port", str(port)], dict(os.environ),
            os.path.join(out_dir, "server-floor_grpc.log"), port, port))
        targets.wait_port(port)
        for s in SUBJECTS:
            targets.warm_up(args, out_dir, s, servers[s])
        for rep in range(1, args.repeats + 1):
            k = (rep - 1) % len(SUBJECTS)
            order = SUBJECTS[k:] + SUBJECTS[:k]
            print(f"--- repeat {rep}: {' '.join(order)}", flush=True)
            for s in order:
                targets.measure(args, out_dir, rep, s, servers[s], runs, failures)
        switches = {}
        for label in ("old", "new"):
            for proto in ("http", "grpc"):
                switches[f"{label}-{proto}"] = count_switches(args, out_dir, servers[label], proto, label)
    summarize(args, out_dir, stamp, header, runs, failures, ceiling, switches)
    return 0 if not failures else 1


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


def bound(r, ceiling):
    """The most infer/s the cores allow at this run's batching with perf_analyzer's CPU and
    ONNX Runtime's alone (targets.cpu_lines)."""
    client = targets.us_per_inference(r, "client_cores")
    be = r.get("batch_efficiency") or 1.0
    nb = min(ceiling, key=lambda b: abs(b - be))
    return (os.cpu_count() or 2) * 1e6 / (client + ceiling[nb]["cpu_us_per_item"])


def summarize(args, out_dir, stamp, header, runs, failures, ceiling, switches):
    reps = sorted({r["repeat"] for r in runs})

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
            o, n = g(rep, "old", "mlp", proto, 16), g(rep, "new", "mlp", proto, 16)
            for b, r in (("old", o), ("new", n)):
                if r:
                    add(f"mlp_{proto}_{b}_bound", r["infer_per_s"] / bound(r, ceiling))
                    add(f"mlp_{proto}_{b}_busy", targets.busy(r))
                    add(f"mlp_{proto}_{b}_outside", r["network_server_us"])
                    add(f"mlp_{proto}_{b}_batch", r.get("batch_efficiency") or 1.0)
                    add(f"mlp_{proto}_{b}_ips", r["infer_per_s"])
            if o and n:
                add(f"mlp_{proto}_new_vs_old", n["infer_per_s"] / o["infer_per_s"])

    def cell(key, digits=2):
        xs = ratios.get(key)
        return f"{median(xs):.{digits}f} ({spread(xs)})" if xs else "not measured"

    lines = [f"# Issue 19: the hot path, old ÷ new ÷ floor ({stamp})", "",
             f"perf_analyzer {common.PA_VERSION}; old = {args.old}, new = {args.new} (git HEAD "
             f"{header['git_head'][:12]}); load average {header['loadavg_at_start']:.2f} at start on "
             f"{header['nproc']} cores; {len(reps)} repeats, the order of the subjects rotated, ratios per "
             f"repeat, median (min–max); -p {args.interval_ms} ms.", "",
             "| figure | old | new |", "| --- | --- | --- |"]
    for proto in ("http", "grpc"):
        lines.append(f"| add_sub {proto} c1 p50 ÷ floor's (target ≤ 1.3) | {cell(f'add_sub_{proto}_old_vs_floor')} | "
                     f"{cell(f'add_sub_{proto}_new_vs_floor')} |")
        lines.append(f"| … p50 µs (floor {cell(f'add_sub_{proto}_floor_p50', 0)}) | "
                     f"{cell(f'add_sub_{proto}_old_p50', 0)} | {cell(f'add_sub_{proto}_new_p50', 0)} |")
    for proto in ("http", "grpc"):
        lines.append(f"| mlp {proto} c16 infer/s | {cell(f'mlp_{proto}_old_ips', 0)} | {cell(f'mlp_{proto}_new_ips', 0)} |")
        lines.append(f"| … ÷ the CPU bound (target ≥ 0.85) | {cell(f'mlp_{proto}_old_bound')} | "
                     f"{cell(f'mlp_{proto}_new_bound')} |")
        lines.append(f"| … instance busy % (target ≥ 90) | {cell(f'mlp_{proto}_old_busy', 0)} | "
                     f"{cell(f'mlp_{proto}_new_busy', 0)} |")
        lines.append(f"| … µs per request outside the statistics | {cell(f'mlp_{proto}_old_outside', 0)} | "
                     f"{cell(f'mlp_{proto}_new_outside', 0)} |")
        lines.append(f"| … requests per execution | {cell(f'mlp_{proto}_old_batch', 1)} | "
                     f"{cell(f'mlp_{proto}_new_batch', 1)} |")
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
                                   "ceiling": ceiling, "ratios": ratios, "switches": switches}, lines)


if __name__ == "__main__":
    sys.exit(main())
