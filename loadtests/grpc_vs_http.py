#!/usr/bin/env python3
"""HTTP vs gRPC vs gRPC streaming, measured by Triton's perf_analyzer in one run.

Starts a Tritium binary on free loopback ports with a copy of `add_sub` (FP32 INPUT0/INPUT1 [16],
no dynamic batcher) and `mlp` (256 -> 2048 -> 2048 -> 256, dynamic batcher), then for each model
runs perf_analyzer (batch 1, random data) with
  http:   -i http
  grpc:   -i grpc
  stream: -i grpc --streaming   (one bidirectional ModelStreamInfer stream per concurrent slot)
at concurrency 1 (latency p50/p99) and 16 (throughput), after one warm-up run of each protocol.
REPEATS repeats; within each the three protocols run back to back, the order reversed every
repeat. Ratios (grpc/http, stream/http) are taken within a repeat, then the median over repeats.
Every run must exit 0, print no error line, and leave the model's failure count in the server's
statistics unchanged.

  .venv/bin/python loadtests/grpc_vs_http.py [--repeats 3] [--interval-ms 2000] [--models add_sub,mlp]

Results: loadtests/out/grpc_vs_http-<time>/summary.{md,json}, each perf_analyzer log and CSV,
server.log.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import PAError, median, spread  # noqa: E402

MODES = {
    "http": ("http", []),
    "grpc": ("grpc", []),
    "stream": ("grpc", ["--streaming"]),
}
CONCURRENCIES = (1, 16)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="add_sub,mlp")
    args = ap.parse_args()
    models = args.models.split(",")
    common.check_inputs(args, models)
    out_dir, stamp = common.make_out_dir(args, "grpc_vs_http")
    header = common.run_header(args)
    runs, failures = [], []

    check = common.add_sub_check if "add_sub" in models else None
    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=models, ready=models, check=check, prefix="gvh-") as srv:

        def one(model, label, mode, conc):
            srv.alive()
            protocol, extra = MODES[mode]
            name = f"{model}-{label}-{mode}-c{conc}"
            try:
                r = common.run_pa(args.perf_analyzer, model, srv.url(protocol), protocol, conc,
                                  os.path.join(out_dir, name + ".csv"),
                                  os.path.join(out_dir, name + ".log"), extra=extra,
                                  interval_ms=args.interval_ms, stability=args.stability, server=srv)
            except PAError as e:
                print(f"FAILED {name}: {e}", flush=True)
                failures.append({"run": name, "error": str(e)})
                return None
            r.update(model=model, label=label, mode=mode)
            print(f"{name:>28}: p50 {r['p50_us']:>7} µs  p99 {r['p99_us']:>7} µs  "
                  f"{r['infer_per_s']:>9.1f} infer/s  (ORT {r['server_compute_infer_us']} µs, "
                  f"-s {r['stability_pct']})", flush=True)
            return r

        for model in models:
            for mode in MODES:
                one(model, "warmup", mode, 1)
            for i in range(args.repeats):
                order = list(MODES) if i % 2 == 0 else list(reversed(MODES))
                for conc in CONCURRENCIES:
                    for mode in order:
                        r = one(model, f"rep{i + 1}", mode, conc)
                        if r is not None:
                            r["repeat"] = i + 1
                            r["order"] = order
                            runs.append(r)

    def get(model, rep, mode, conc):
        for r in runs:
            if r["model"] == model and r["repeat"] == rep and r["mode"] == mode and r["concurrency"] == conc:
                return r
        return None

    # ratio per repeat: latency at concurrency 1, throughput at concurrency 16
    ratios = {}
    for model in models:
        ratios[model] = []
        for rep in range(1, args.repeats + 1):
            row = {"repeat": rep}
            for mode in ("grpc", "stream"):
                for conc, key in ((1, "p50_us"), (1, "p99_us"), (16, "infer_per_s"),
                                  (1, "server_compute_infer_us")):
                    a, b = get(model, rep, mode, conc), get(model, rep, "http", conc)
                    if a and b and b[key]:
                        row[f"{mode}/http c{conc} {key}"] = a[key] / b[key]
            ratios[model].append(row)

    def med_of(model, mode, conc, key):
        return [r[key] for r in runs if r["model"] == model and r["mode"] == mode and r["concurrency"] == conc]

    summary = {"header": header, "models": models, "repeats": args.repeats,
               "interval_ms": args.interval_ms, "stability_pct": args.stability,
               "runs": runs, "failures": failures, "ratios": ratios,
               "median": {m: {mode: {
                   "c1_p50_us": median(med_of(m, mode, 1, "p50_us")),
                   "c1_p99_us": median(med_of(m, mode, 1, "p99_us")),
                   "c16_infer_per_s": median(med_of(m, mode, 16, "infer_per_s")),
               } for mode in MODES} for m in models}}
    n_requests = sum(r.get("client_request_count", 0) for r in runs)
    lines = [
        f"# HTTP vs gRPC vs gRPC streaming ({stamp})", "",
        f"perf_analyzer {header['perf_analyzer']}, server built from {header['server_built_from']}, "
        f"git HEAD {header['git_head'][:12]}. Batch 1, random data, -p {args.interval_ms} ms "
        f"-s {args.stability} (retried at {2 * args.stability} when unstable), {args.repeats} repeats "
        "after one warm-up per protocol; within a repeat http, grpc, stream run back to back, the "
        "order reversed every repeat. Ratios are taken within a repeat; median and min–max over "
        "repeats. Control: the ratio of the server's ONNX Runtime compute time (the same work for "
        "every protocol), near 1.0 when the machine was equally busy for both runs.", "",
        f"Errors: {len(runs)} measured runs (plus warm-ups), {n_requests} requests counted by "
        f"perf_analyzer in the measured windows; {len(failures)} failed runs"
        + (": " + "; ".join(f["run"] + ": " + f["error"] for f in failures) if failures else
           " (every run exited 0, printed no error line, and the server's failure count stayed 0)."),
        "",
    ]
    for model in models:
        lines += [f"## {model}", "",
                  "| protocol | c1 p50 µs (min–max) | c1 p99 µs (min–max) | c16 infer/s (min–max) |",
                  "| --- | --- | --- | --- |"]
        for mode in MODES:
            p50, p99, thr = (med_of(model, mode, 1, "p50_us"), med_of(model, mode, 1, "p99_us"),
                             med_of(model, mode, 16, "infer_per_s"))
            lines.append(f"| {mode} | {median(p50):.0f} ({spread(p50)}) | {median(p99):.0f} ({spread(p99)}) "
                         f"| {median(thr):.0f} ({spread(thr)}) |")
        keys = [f"{mode}/http c{c} {k}" for mode in ("grpc", "stream")
                for c, k in ((1, "p50_us"), (1, "p99_us"), (16, "infer_per_s"), (1, "server_compute_infer_us"))]
        short = {"p50_us": "p50", "p99_us": "p99", "infer_per_s": "infer/s", "server_compute_infer_us": "control"}
        lines += ["", "Ratios within each repeat (latency at concurrency 1, throughput at concurrency 16):", "",
                  "| repeat | " + " | ".join(f"{k.split()[0]} {short[k.split()[2]]}" for k in keys) + " |",
                  "| --- |" + " --- |" * len(keys)]
        for row in ratios[model]:
            lines.append(f"| {row['repeat']} | " + " | ".join(
                f"{row[k]:.3f}" if k in row else "-" for k in keys) + " |")
        lines.append("| median | " + " | ".join(
            f"{median(r[k] for r in ratios[model] if k in r):.3f}" for k in keys) + " |")
        lines.append("| min–max | " + " | ".join(
            spread(r[k] for r in ratios[model] if k in r) for k in keys) + " |")
        lines.append("")
    summary["n_requests"] = n_requests
    common.write_summary(out_dir, summary, lines)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
