#!/usr/bin/env python3
"""Dynamic batching on vs off, one vs two instances, on `mlp` (real compute), by perf_analyzer.

`mlp` (256 -> 2048 -> 2048 -> 256 dense + Relu, FP32 INPUT0 [256], max_batch_size 64; bundled
config: dynamic_batching { preferred_batch_size [8, 16, 32], max_queue_delay_microseconds 200 },
one KIND_CPU instance). Four configurations, each written as a modified config.pbtxt in the temp
copy of the repository, each served by its own server start:
  batch-on-x1   the bundled config
  batch-off-x1  dynamic_batching removed
  batch-on-x2   instance_group count 2
  batch-off-x2  both
perf_analyzer over HTTP (and gRPC with --protocols http,grpc), batch 1, random data, at
concurrency 1, 4, 16 (--concurrency): infer/s, p50, p99 and the server-side split (queue and
compute infer per request, perf_analyzer's server columns); after each run the server's
/v2/models/mlp/stats delta gives inference_count / execution_count (the batch efficiency: 1.0 =
every request ran alone). REPEATS rounds, the order of the configurations
reversed every round; medians over rounds, min–max beside them.

  .venv/bin/python loadtests/batching.py [--repeats 2] [--concurrency 1,4,16] [--protocols http]
                                        [--model mlp]

Results: loadtests/out/batching-<time>/summary.{md,json}, the four config.pbtxt files, perf_analyzer
logs and CSVs, one server log per server start.
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import PAError, median, spread  # noqa: E402

CONFIGS = [("batch-on-x1", True, 1), ("batch-off-x1", False, 1),
           ("batch-on-x2", True, 2), ("batch-off-x2", False, 2)]


def edit_config(text, batching, instances):
    if not batching:
        text, n = re.subn(r"\n?dynamic_batching\s*\{[^{}]*\}\n?", "\n", text)
        if n == 0 and "dynamic_batching" in text:
            raise RuntimeError("could not remove dynamic_batching (nested braces?)")
    elif "dynamic_batching" not in text:
        text += "\ndynamic_batching { }\n"
    text, n = re.subn(r"(instance_group\s*\[\s*\{[^}]*?count:\s*)\d+", rf"\g<1>{instances}", text)
    if n == 0:
        text += f"\ninstance_group [ {{ kind: KIND_CPU count: {instances} }} ]\n"
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--protocols", default="http", help="comma-separated: http, grpc")
    args = ap.parse_args()
    model = args.model
    concs = [int(c) for c in args.concurrency.split(",")]
    protocols = [p for p in args.protocols.split(",") if p]
    if not protocols or any(p not in ("http", "grpc") for p in protocols):
        sys.exit("--protocols: http and/or grpc")
    common.check_inputs(args, [model])
    out_dir, stamp = common.make_out_dir(args, "batching")
    header = common.run_header(args)
    original = open(os.path.join(args.model_repository, model, "config.pbtxt")).read()
    configs = {}
    for name, batching, instances in CONFIGS:
        configs[name] = edit_config(original, batching, instances)
        with open(os.path.join(out_dir, f"config-{name}.pbtxt"), "w") as f:
            f.write(configs[name])
    runs, failures = [], []

    for rep in range(args.repeats):
        order = CONFIGS if rep % 2 == 0 else list(reversed(CONFIGS))
        for name, batching, instances in order:
            def edit(repo, text=configs[name]):
                with open(os.path.join(repo, model, "config.pbtxt"), "w") as f:
                    f.write(text)

            with common.bench_server(args.server, args.onnxruntime_library, args.model_repository,
                                     out_dir, models=[model], ready=[model], edit_repo=edit,
                                     log_name=f"server-rep{rep + 1}-{name}.log", prefix="bat-") as srv:
                cfg = common.get_json(f"{srv.base}/v2/models/{model}/config")
                served = {"dynamic_batching": "dynamic_batching" in cfg,
                          "instances": sum(int(g.get("count", 1)) for g in cfg.get("instance_group", []))}
                if served != {"dynamic_batching": batching, "instances": instances}:
                    raise RuntimeError(f"{name}: the server serves {served}")
                # one short warm-up so the first measured window does not pay session start-up
                try:
                    common.run_pa(args.perf_analyzer, model, srv.url("http"), "http", 1,
                                  os.path.join(out_dir, f"rep{rep + 1}-{name}-warmup.csv"),
                                  os.path.join(out_dir, f"rep{rep + 1}-{name}-warmup.log"),
                                  interval_ms=1000, stability=50, retry=False, server=srv)
                except PAError as e:
                    print(f"warm-up: {e}", flush=True)
                for proto, c in [(p, c) for p in protocols for c in concs]:
                    srv.alive()
                    label = f"rep{rep + 1}-{name}-{proto}-c{c}"
                    try:
                        r = common.run_pa(args.perf_analyzer, model, srv.url(proto), proto, c,
                                          os.path.join(out_dir, label + ".csv"),
                                          os.path.join(out_dir, label + ".log"),
                                          interval_ms=args.interval_ms, stability=args.stability,
                                          server=srv)
                    except PAError as e:
                        print(f"FAILED {label}: {e}", flush=True)
                        failures.append({"run": label, "error": str(e)})
                        continue
                    d = r["server_stats_delta"]
                    r.update(repeat=rep + 1, config=name, protocol=proto,
                             batch_efficiency=d["inference_count"] / max(d["execution_count"], 1))
                    runs.append(r)
                    with open(os.path.join(out_dir, "runs.json"), "w") as f:  # kept if the summary fails
                        json.dump(runs, f)
                    print(f"{label:>24}: p50 {r['p50_us']:>7} µs  p99 {r['p99_us']:>7} µs  "
                          f"{r['infer_per_s']:>8.1f} infer/s  inferences/executions "
                          f"{d['inference_count']}/{d['execution_count']} = {r['batch_efficiency']:.2f}  "
                          f"(-s {r['stability_pct']})", flush=True)

    def vals(name, c, key, proto="http"):
        return [r[key] for r in runs if r["config"] == name and r["concurrency"] == c and r["protocol"] == proto]

    keys = ("infer_per_s", "p50_us", "p99_us", "batch_efficiency", "server_queue_us", "server_compute_infer_us")
    table = {proto: {name: {c: {k: median(vals(name, c, k, proto)) for k in keys} for c in concs if vals(name, c, "infer_per_s", proto)}
                     for name, _, _ in CONFIGS} for proto in protocols}
    summary = {"header": header, "model": model, "repeats": args.repeats, "concurrency": concs,
               "interval_ms": args.interval_ms, "stability_pct": args.stability,
               "configs": configs, "median": table, "runs": runs, "failures": failures}
    n_requests = sum(r.get("client_request_count", 0) for r in runs)
    lines = [
        f"# Dynamic batching on/off × 1/2 instances, {model}, {' and '.join(p.upper() if p == 'http' else 'gRPC' for p in protocols)} ({stamp})", "",
        f"perf_analyzer {header['perf_analyzer']}, server built from {header['server_built_from']}, "
        f"git HEAD {header['git_head'][:12]}. Batch 1 per request, random data, -p {args.interval_ms} ms "
        f"-s {args.stability} (retried at {2 * args.stability} when unstable), {args.repeats} rounds "
        "(the configuration order reversed every round), a new server per configuration per round. "
        "Batch efficiency = inference_count / execution_count of /v2/models/<m>/stats over the run. "
        "Medians over rounds, min–max in brackets. Each configuration is in "
        "`config-<name>.pbtxt` beside this file.", "",
        f"Errors: {len(runs)} measured runs, {n_requests} requests in the measured windows, "
        f"{len(failures)} failed runs"
        + (": " + "; ".join(f["run"] + ": " + f["error"] for f in failures) if failures else
           " (every run exited 0, printed no error line, and the server's failure count stayed 0)."),
        "",
        "Server queue and compute infer: µs per request over perf_analyzer's windows (a request is "
        "credited with its whole execution's compute time).", "",
        "| config | protocol | concurrency | infer/s | p50 µs | p99 µs | inferences/execution | queue µs | compute infer µs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, _, _ in CONFIGS:
        for proto in protocols:
            for c in concs:
                t = table[proto][name].get(c)
                if t is None:
                    continue
                v = lambda k: spread(vals(name, c, k, proto))  # noqa: E731
                lines.append(
                    f"| {name} | {proto} | {c} | {t['infer_per_s']:.0f} ({v('infer_per_s')}) | "
                    f"{t['p50_us']:.0f} ({v('p50_us')}) | {t['p99_us']:.0f} ({v('p99_us')}) | "
                    f"{t['batch_efficiency']:.2f} ({v('batch_efficiency')}) | {t['server_queue_us']:.0f} | "
                    f"{t['server_compute_infer_us']:.0f} |")
    # same-round ratios: batching on / off, throughput, per instance count and concurrency
    lines += ["", "Throughput ratio batching on / off within the same round (median, min–max):", "",
              "| protocol | instances | " + " | ".join(f"c{c}" for c in concs) + " |",
              "| --- | --- |" + " --- |" * len(concs)]
    summary["ratio_on_over_off"] = {}
    for proto in protocols:
        for inst in (1, 2):
            cells = []
            for c in concs:
                rs = []
                for rep in range(1, args.repeats + 1):
                    pick = lambda cfg: [r for r in runs if r["repeat"] == rep and r["config"] == cfg  # noqa: E731
                                        and r["concurrency"] == c and r["protocol"] == proto]
                    on, off = pick(f"batch-on-x{inst}"), pick(f"batch-off-x{inst}")
                    if on and off and off[0]["infer_per_s"]:
                        rs.append(on[0]["infer_per_s"] / off[0]["infer_per_s"])
                summary["ratio_on_over_off"][f"{proto}-x{inst}-c{c}"] = rs
                cells.append(f"{median(rs):.3f} ({spread(rs)})" if rs else "-")
            lines.append(f"| {proto} | {inst} | " + " | ".join(cells) + " |")
    lines.append("")
    summary["n_requests"] = n_requests
    common.write_summary(out_dir, summary, lines)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
