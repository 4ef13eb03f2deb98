#!/usr/bin/env python3
"""What batches a build forms under a concurrent load: mlp at c16 (batch-1 clients) over HTTP
(binary tensors) and gRPC against two or more release builds, alternating, each run's
executions counted by batch size with their mean compute time.

Per run, from the server itself: the statistics extension's `batch_stats` (executions and
compute_infer time per batch size, before and after the run), the actor tree's scheduler
counters (the metrics port's /v2/actors: batches sent straight from the submitting thread, `direct`,
of them run by that thread itself, `here`; taken by an
instance from the batcher as it finished, `pulled`; requests queued behind busy instances by
their submitting thread, `lane_queued`), the server's CPU (/proc, every thread) and
perf_analyzer's, per inference. Together they say how many executions were batches of one and
what each size costs the instance, which a throughput figure alone hides.

  .venv/bin/python loadtests/batch_mix.py --builds OLD,NEW [--rounds 2] [--concurrency 16]
      [--protocols http,grpc] [--runs 1] [--server-arg=ARG ...]

--runs N runs perf_analyzer N times per build, protocol and round, the builds alternating, and the summary
counts the runs whose batches of one were over 20 % of the executions: a state a load may fall
into by chance, such as the one HTTP worker that ran every request itself (`--server-arg=--http-thread-count
--server-arg=1`; loadtests/PROFILES.md, 2026-12-06).

Results: loadtests/out/batch_mix-<time>/summary.{md,json}.
"""

import argparse
import json
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# A run where batches of one were more than this share of the executions fell, for part of it
# at least, into running requests one at a time (a normal run at mlp c16: 5-12 %).
STUCK = 0.2
COUNTERS = ("batches", "items", "direct", "here", "pulled", "lane_queued")


def batch_stats(srv, model):
    stats = common.get_json(f"{srv.base}/v2/models/{model}/stats")
    out = {}
    for e in stats["model_stats"][0].get("batch_stats", []):
        out[int(e["batch_size"])] = (int(e["compute_infer"]["count"]), int(e["compute_infer"]["ns"]))
    return out


def scheduler(srv, model):
    tree = common.get_json(f"http://127.0.0.1:{srv.metrics_port}/v2/actors")
    for m in tree["models"]:
        if m["name"] == model:
            return m["scheduler"]
    raise RuntimeError(f"{model} is not in the actor tree")


def measure(args, out_dir, label, srv, proto, rnd, k=0):
    url = srv.url(proto)
    b0, s0 = batch_stats(srv, args.model), scheduler(srv, args.model)
    cpu0, pa0 = common.tree_cpu_s(srv.proc.pid), common.children_cpu_s()
    name = f"r{rnd}-{label}-{proto}" + (f"-{k}" if args.runs > 1 else "")
    r = common.run_pa(args.perf_analyzer, args.model, url, proto, args.concurrency,
                      os.path.join(out_dir, f"{name}.csv"), os.path.join(out_dir, f"{name}.log"),
                      interval_ms=args.interval_ms, stability=args.stability, server=srv)
    cpu1, pa1 = common.tree_cpu_s(srv.proc.pid), common.children_cpu_s()
    b1, s1 = batch_stats(srv, args.model), scheduler(srv, args.model)
    sizes = {}
    for size, (count, ns) in b1.items():
        c0, n0 = b0.get(size, (0, 0))
        if count - c0:
            sizes[size] = {"executions": count - c0, "compute_us": (ns - n0) / (count - c0) / 1000}
    executions = sum(v["executions"] for v in sizes.values())
    items = sum(size * v["executions"] for size, v in sizes.items())
    run = {
        "round": rnd, "build": label, "protocol": proto, "infer_per_s": r["infer_per_s"],
        "p50_us": r["p50_us"], "items_per_execution": items / executions if executions else 0.0,
        "single_share": sizes.get(1, {}).get("executions", 0) / executions if executions else 0.0,
        "server_cpu_us_per_inference": (cpu1 - cpu0) * 1e6 / items if items else 0.0,
        "pa_cpu_us_per_inference": (pa1 - pa0) * 1e6 / items if items else 0.0,
        "sizes": sizes,
        # None where the build's tree has no such counter (builds before 2026-12-06; `here`:
        # before its second session)
        "scheduler": {k: s1[k] - s0[k] if k in s1 else None for k in COUNTERS},
    }
    print(f"{name}: {run['infer_per_s']:.0f} infer/s, {run['items_per_execution']:.2f} per execution, "
          f"{100 * run['single_share']:.0f} % batches of one, {run['scheduler']}", flush=True)
    return run


def size_row(run):
    return " ".join(f"b{s}: {v['executions']} ({v['compute_us']:.0f})" for s, v in sorted(run["sizes"].items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap, interval_ms=1500)
    ap.add_argument("--builds", required=True, help="comma-separated release binaries")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                    help="an argument added to every build's command line (repeatable), e.g. "
                         "--server-arg=--http-thread-count --server-arg=1")
    ap.add_argument("--protocols", default="http,grpc")
    ap.add_argument("--runs", type=int, default=1,
                    help="perf_analyzer runs per build, protocol and round, the builds alternating")
    ap.add_argument("--from-json", metavar="SUMMARY_JSON", help="only write the summary again from a run's summary.json")
    args = ap.parse_args()
    builds = args.builds.split(",")
    if args.from_json:
        d = json.load(open(args.from_json))
        summarize(args, os.path.dirname(os.path.abspath(args.from_json)), d["stamp"], d["header"], d["builds"], d["runs"])
        return
    args.server = builds[0]
    common.check_inputs(args, [args.model])
    out_dir, stamp = common.make_out_dir(args, "batch_mix")
    header = common.run_header(args)
    runs = []
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(common.bench_server(
            b, args.onnxruntime_library, args.model_repository, out_dir, models=[args.model],
            ready=(args.model,), log_name=f"server-{i}.log", prefix="mix-", extra_args=args.server_arg))
            for i, b in enumerate(builds)]
        for rnd in range(args.rounds):
            order = list(enumerate(servers))
            if rnd % 2:
                order.reverse()
            for proto in args.protocols.split(","):
                # The builds alternate run by run: a drift of the host's speed falls on each.
                for k in range(args.runs):
                    for i, srv in order:
                        runs.append(measure(args, out_dir, f"b{i}", srv, proto, rnd, k))
    summarize(args, out_dir, stamp, header, builds, runs)


def summarize(args, out_dir, stamp, header, builds, runs):
    lines = [f"# Batches formed at {args.model} c{args.concurrency} ({stamp})", "",
             f"perf_analyzer {header['perf_analyzer']}; load average {header['loadavg_at_start']:.2f} at start; "
             f"{args.rounds} rounds, the order of the builds reversed every other round; -p {args.interval_ms} ms"
             + (f"; every server with {' '.join(args.server_arg)}" if args.server_arg else "") + ".", ""]
    for i, b in enumerate(builds):
        lines.append(f"- b{i} = {b}")
    lines += ["", "| round | build | protocol | infer/s | items per execution | batches of one | "
              "server CPU µs per inference | perf_analyzer's | direct (of them here) / pulled / lane_queued |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in runs:
        s = r["scheduler"]
        lines.append(f"| {r['round']} | {r['build']} | {r['protocol']} | {r['infer_per_s']:.0f} | "
                     f"{r['items_per_execution']:.2f} | {100 * r['single_share']:.0f} % | "
                     f"{r['server_cpu_us_per_inference']:.0f} | {r['pa_cpu_us_per_inference']:.0f} | "
                     + f"{s['direct']} ({'–' if s['here'] is None else s['here']})"
                     + "".join(" / " + ("–" if s[k] is None else str(s[k])) for k in ("pulled", "lane_queued"))
                     + " |")
    lines += ["", f"Per build and protocol: median infer/s and requests per execution, and the runs whose "
              f"batches of one were over {100 * STUCK:.0f} % of the executions (requests run one at a time):", ""]
    for i in range(len(builds)):
        for proto in args.protocols.split(","):
            mine = [r for r in runs if r["build"] == f"b{i}" and r["protocol"] == proto]
            low = [r for r in mine if r["single_share"] > STUCK]
            low_runs = ", ".join(f"{100 * r['single_share']:.0f} % at {r['items_per_execution']:.2f}" for r in low)
            lines.append(f"- b{i} {proto}: {common.median([r['infer_per_s'] for r in mine]):.0f} infer/s, "
                         f"{common.median([r['items_per_execution'] for r in mine]):.2f} per execution; "
                         f"{len(low)} of {len(mine)} runs over {100 * STUCK:.0f} %" + (f" ({low_runs})" if low else ""))
    lines += ["", "Executions by batch size (mean compute_infer µs per execution):", ""]
    for r in runs:
        lines.append(f"- r{r['round']} {r['build']} {r['protocol']}: {size_row(r)}")
    common.write_summary(out_dir, {"header": header, "stamp": stamp, "builds": builds, "runs": runs}, lines)


if __name__ == "__main__":
    main()
