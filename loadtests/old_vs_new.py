#!/usr/bin/env python3
"""Two builds of the server side by side in one run: the same loads against an old and a new
binary, alternating which goes first in each pair, so a refactor can show that it changed no
figure beyond noise (issue 25 point 7).

Loads, each over gRPC with perf_analyzer: `mlp` batch 1 at c16 (dynamic batching), the
sequence model `accumulate_oldest` with --sequence-length 10 at c64 and c256 (the `oldest`
strategy; see sequences.py), the ensemble `add_sub_pipeline` (add_sub, then identity_fp32) at
c16, and the decoupled `repeat_int32` over gRPC streams at c8 (IN of 4 elements, no delays:
4 responses and a final flag per request). On request (`--loads`): `accumulate_oldest` at c1
(one sequence at a time: the sequence path's latency) and c4 (every batch short of the preferred
8, so each waits out the strategy's delay), `add_sub_pipeline` and `repeat_int32` at c1, and `accumulate` (the `direct` strategy,
2 instances x 4 slots) at c8. Per pair and load: new ÷ old infer/s and p99, the server's CPU µs
per inference (its process tree, from /proc) and its threads' voluntary context switches per
inference by thread name (each is a thread going to sleep, so each wake-up a request causes
shows as one; as hotpath.py counts them). Every run must exit 0 with no error line and leave the
server's failure counts unchanged.

  .venv/bin/python loadtests/old_vs_new.py --old PATH --new PATH [--pairs 3]
      [--loads accumulate_oldest:1,accumulate_oldest:64,accumulate:8]

Results: loadtests/out/old_vs_new-<time>/summary.{md,json}.
"""

import argparse
import json
import os
import sys

import common
from common import PAError, median, spread
from hotpath import thread_switches

REPEAT_DATA = "repeat_int32.json"  # written into the run's folder
SEQ = ["--sequence-length", "10"]
ALL_LOADS = {"mlp:16": ("mlp", 16, []), "accumulate_oldest:1": ("accumulate_oldest", 1, SEQ),
             "accumulate_oldest:4": ("accumulate_oldest", 4, SEQ),
             "accumulate_oldest:64": ("accumulate_oldest", 64, SEQ),
             "accumulate_oldest:256": ("accumulate_oldest", 256, SEQ), "accumulate:8": ("accumulate", 8, SEQ),
             "add_sub_pipeline:1": ("add_sub_pipeline", 1, []),
             "add_sub_pipeline:16": ("add_sub_pipeline", 16, []),
             "repeat_int32:1": ("repeat_int32", 1, ["--streaming", "--input-data", REPEAT_DATA]),
             "repeat_int32:8": ("repeat_int32", 8, ["--streaming", "--input-data", REPEAT_DATA])}
DEFAULT_LOADS = "mlp:16,accumulate_oldest:64,accumulate_oldest:256,add_sub_pipeline:16,repeat_int32:8"
# The models each load needs loaded (an ensemble, its steps too).
NEEDS = {"add_sub_pipeline": ["add_sub", "identity_fp32", "add_sub_pipeline"]}
SEQUENCE_MODELS = ("accumulate_oldest", "accumulate")


def repeat_input(out_dir):
    """perf_analyzer's data for repeat_int32: IN of 4 elements, no delay before any response."""
    path = os.path.join(out_dir, REPEAT_DATA)
    with open(path, "w") as f:
        json.dump({"data": [{"IN": {"content": [1, 2, 3, 4], "shape": [4]},
                             "DELAY": {"content": [0, 0, 0, 0], "shape": [4]},
                             "WAIT": {"content": [0], "shape": [1]}}]}, f)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--loads", default=DEFAULT_LOADS,
                    help=f"comma-separated model:concurrency among {', '.join(ALL_LOADS)}")
    args = ap.parse_args()
    unknown = [k for k in args.loads.split(",") if k not in ALL_LOADS]
    if unknown:
        sys.exit(f"unknown load(s) {unknown}; known: {', '.join(ALL_LOADS)}")
    loads = [ALL_LOADS[k] for k in args.loads.split(",")]
    models = []
    for model, _, _ in loads:
        models += [m for m in NEEDS.get(model, [model]) if m not in models]
    for p in (args.old, args.new, args.perf_analyzer):
        if not os.path.exists(p):
            sys.exit(f"missing {p}")
    args.server = args.new
    out_dir, _ = common.make_out_dir(args, "old_vs_new")
    header = common.run_header(args)
    results, failures = [], []
    data = repeat_input(out_dir)
    for pair in range(args.pairs):
        order = (("old", args.old), ("new", args.new)) if pair % 2 == 0 else (("new", args.new), ("old", args.old))
        for label, binary in order:
            with common.bench_server(binary, args.onnxruntime_library, args.model_repository, out_dir,
                                     models=models, ready=models,
                                     log_name=f"server-{label}-{pair + 1}.log", prefix="ovn-") as srv:
                for model, conc, extra in loads:
                    name = f"pair{pair + 1}-{label}-{model}-c{conc}"
                    cpu0, sw0 = common.tree_cpu_s(srv.proc.pid), thread_switches(srv.proc.pid)
                    stats0 = common.model_stats(srv.base, model)
                    try:
                        r = common.run_pa(args.perf_analyzer, model, srv.url("grpc"), "grpc", conc,
                                          os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                          extra=[data if x == REPEAT_DATA else x for x in extra],
                                          interval_ms=args.interval_ms, stability=args.stability,
                                          server=srv, teardown_ok=model in SEQUENCE_MODELS)
                    except PAError as e:
                        print(f"FAILED {name}: {e}", flush=True)
                        failures.append({"run": name, "error": str(e)})
                        continue
                    r.update(pair=pair + 1, build=label, model=model)
                    # Over the whole run (perf_analyzer's warm-up and windows): per inference.
                    n = max(common.stats_delta(common.model_stats(srv.base, model), stats0)["inference_count"], 1)
                    r["server_cpu_us"] = (common.tree_cpu_s(srv.proc.pid) - cpu0) * 1e6 / n
                    sw1 = thread_switches(srv.proc.pid)
                    r["switches"] = {k: (v - sw0.get(k, 0)) / n for k, v in sw1.items() if v - sw0.get(k, 0) > 0}
                    results.append(r)
                    print(f"{name:>40}: {r['infer_per_s']:>8.1f} infer/s  p99 {r['p99_us']:>8} µs", flush=True)

    def get(pair, build, model, conc, key):
        for r in results:
            if (r["pair"], r["build"], r["model"], r["concurrency"]) == (pair, build, model, conc):
                return r[key]
        return None

    lines = [f"# Old vs new build, same run: {header['time']}", "",
             f"old: {args.old}; new: {args.new}; {args.pairs} pairs, order alternated; failed runs: {len(failures)}",
             "", "| load | new ÷ old infer/s median (min–max) | new ÷ old p99 median (min–max) | old infer/s | new infer/s |",
             "| --- | --- | --- | --- | --- |"]
    ratios = {}
    for model, conc, extra in loads:
        tp, p99 = [], []
        for k in range(1, args.pairs + 1):
            o, n = get(k, "old", model, conc, "infer_per_s"), get(k, "new", model, conc, "infer_per_s")
            if o and n:
                tp.append(n / o)
            o, n = get(k, "old", model, conc, "p99_us"), get(k, "new", model, conc, "p99_us")
            if o and n:
                p99.append(n / o)
        olds = [r["infer_per_s"] for r in results if (r["build"], r["model"], r["concurrency"]) == ("old", model, conc)]
        news = [r["infer_per_s"] for r in results if (r["build"], r["model"], r["concurrency"]) == ("new", model, conc)]
        ratios[f"{model}-c{conc}"] = {"infer_per_s": tp, "p99": p99}
        proto = "gRPC stream" if "--streaming" in extra else "gRPC"
        lines.append(f"| {model} {proto} c{conc} | {median(tp):.2f} ({spread(tp)}) | {median(p99):.2f} ({spread(p99)}) | "
                     f"{median(olds):.0f} | {median(news):.0f} |")
    lines += ["", "Server CPU µs per inference and voluntary context switches per inference by server thread "
              "(threads under 0.05 left out), median over the pairs:", "",
              "| load | build | CPU µs | switches in all | by thread |", "| --- | --- | --- | --- | --- |"]
    for model, conc, extra in loads:
        for build in ("old", "new"):
            rs = [r for r in results if (r["build"], r["model"], r["concurrency"]) == (build, model, conc)]
            if not rs:
                continue
            names = sorted({k for r in rs for k in r["switches"]})
            per = {k: median(r["switches"].get(k, 0.0) for r in rs) for k in names}
            per = {k: v for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.05}
            total = median(sum(r["switches"].values()) for r in rs)
            cpu = [r["server_cpu_us"] for r in rs]
            lines.append(f"| {model} c{conc} | {build} | {median(cpu):.0f} ({spread(cpu)}) | {total:.2f} | "
                         + ", ".join(f"`{k}` {v:.2f}" for k, v in per.items()) + " |")
    common.write_summary(out_dir, {"header": header, "ratios": ratios, "results": results, "failures": failures},
                         lines)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
