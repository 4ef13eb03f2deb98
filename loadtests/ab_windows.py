#!/usr/bin/env python3
"""Two builds of the server on one load, in short windows that alternate round by round.

On these shared 2-core machines the host's speed drifts by tens of per cent within minutes, so
two builds measured minutes apart (hotpath.py's repeats, old_vs_new.py's pairs) can differ by
more than a change does. Here both servers stay up side by side (each idle while the other is
measured), and each round measures one window of each, the order alternating: perf_analyzer
runs the model at a fixed concurrency against one server, and after `--warm-s` the server's own
statistics and CPU time are read around a window of `--window-s`. The figure is the median over
the rounds of new ÷ old within a round, the two windows seconds apart.

Per window: infer/s and requests per execution (the server's statistics), and the server's CPU
µs per inference (`/proc`, every thread of the process).

  .venv/bin/python loadtests/ab_windows.py --old OLD --new NEW [--protocols grpc,http]
      [--model mlp] [--concurrency 16] [--rounds 8] [--window-s 4] [--warm-s 2]

Run it under quiet.py. Results: loadtests/out/ab_windows-<time>/summary.{md,json}.
"""

import argparse
import contextlib
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import median, spread  # noqa: E402

PROTOCOLS = ("grpc", "http")


def window(args, srv, proto, out_dir, label):
    """One window of `srv` under perf_analyzer: (infer/s, requests per execution, server CPU µs
    per inference)."""
    log = open(os.path.join(out_dir, f"pa-{label}-{proto}.log"), "a")
    pa = subprocess.Popen(
        [args.perf_analyzer, "-m", args.model, "-u", srv.url(proto), "-i", proto, "--concurrency-range",
         str(args.concurrency), "-p", "600000", "-s", "50", "--max-trials", "1"], stdout=log, stderr=subprocess.STDOUT)
    try:
        time.sleep(args.warm_s)
        if pa.poll() is not None:
            sys.exit(f"perf_analyzer exited early; see {log.name}")
        s0, c0, t0 = common.model_stats(srv.base, args.model), common.tree_cpu_s(srv.proc.pid), time.monotonic()
        time.sleep(args.window_s)
        s1, c1, t1 = common.model_stats(srv.base, args.model), common.tree_cpu_s(srv.proc.pid), time.monotonic()
    finally:
        pa.kill()
        pa.wait()
        log.close()
    d = common.stats_delta(s1, s0)
    n, e = d["inference_count"], d["execution_count"]
    if n == 0:
        sys.exit(f"{label} {proto}: no inference in the window; see {out_dir}")
    return {"infer_per_s": n / (t1 - t0), "per_execution": n / max(e, 1), "server_cpu_us": (c1 - c0) * 1e6 / n}


def ratios(rounds):
    """Per round new ÷ old of infer/s and of server CPU per inference, and their medians:
    `rounds` is a list of {"old": window, "new": window}."""
    ips = [r["new"]["infer_per_s"] / r["old"]["infer_per_s"] for r in rounds]
    cpu = [r["new"]["server_cpu_us"] / r["old"]["server_cpu_us"] for r in rounds]
    return {"infer_per_s": ips, "server_cpu": cpu, "infer_per_s_median": median(ips), "server_cpu_median": median(cpu)}


def parse_protocols(text):
    protos = [p for p in text.split(",") if p]
    unknown = [p for p in protos if p not in PROTOCOLS]
    if unknown or not protos:
        raise ValueError(f"--protocols: of {', '.join(PROTOCOLS)}, not {text!r}")
    return protos


def summary_lines(args, stamp, header, results):
    lines = [f"# Two builds in alternating windows: {args.model} c{args.concurrency} ({stamp})", "",
             f"old {args.old}, new {args.new} (git HEAD {header['git_head'][:12]}); load average "
             f"{header['loadavg_at_start']:.2f} at start; {args.rounds} rounds of a {args.window_s:g} s window per "
             f"build after {args.warm_s:g} s of load, the order alternating.", "",
             "| protocol | new ÷ old infer/s, median (min–max) | new ÷ old server CPU per inference | "
             "old infer/s | new infer/s | requests per execution, old / new |", "| --- | --- | --- | --- | --- | --- |"]
    for proto, rounds in results.items():
        r = ratios(rounds)
        old = [x["old"] for x in rounds]
        new = [x["new"] for x in rounds]
        lines.append(
            f"| {proto} | {r['infer_per_s_median']:.3f} ({spread(r['infer_per_s'])}) | "
            f"{r['server_cpu_median']:.3f} ({spread(r['server_cpu'])}) | "
            f"{median(w['infer_per_s'] for w in old):.0f} | {median(w['infer_per_s'] for w in new):.0f} | "
            f"{median(w['per_execution'] for w in old):.2f} / {median(w['per_execution'] for w in new):.2f} |")
    for proto, rounds in results.items():
        lines += ["", f"{proto}, per round (infer/s, requests per execution, server CPU µs per inference):", "",
                  "| round | old | new | new ÷ old infer/s |", "| --- | --- | --- | --- |"]
        for i, x in enumerate(rounds):
            o, n = x["old"], x["new"]
            cell = lambda w: f"{w['infer_per_s']:.0f}, {w['per_execution']:.2f}, {w['server_cpu_us']:.0f}"  # noqa: E731
            lines.append(f"| {i} | {cell(o)} | {cell(n)} | {n['infer_per_s'] / o['infer_per_s']:.3f} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--protocols", default="grpc,http")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--window-s", type=float, default=4.0)
    ap.add_argument("--warm-s", type=float, default=2.0, help="load before each window is read")
    args = ap.parse_args()
    try:
        protos = parse_protocols(args.protocols)
    except ValueError as e:
        sys.exit(str(e))
    args.server = args.new
    for p in (args.old, args.new):
        if not os.path.exists(p):
            sys.exit(f"missing {p}")
    common.check_inputs(args, [args.model])
    out_dir, stamp = common.make_out_dir(args, "ab_windows")
    header = common.run_header(args)
    results = {p: [] for p in protos}
    with contextlib.ExitStack() as stack:
        servers = {label: stack.enter_context(common.bench_server(
            binary, args.onnxruntime_library, args.model_repository, out_dir, models=[args.model],
            ready=(args.model,), log_name=f"server-{label}.log", prefix="ab-"))
            for label, binary in (("old", args.old), ("new", args.new))}
        for rnd in range(args.rounds):
            for proto in protos:
                order = ("old", "new") if rnd % 2 == 0 else ("new", "old")
                got = {label: window(args, servers[label], proto, out_dir, label) for label in order}
                results[proto].append(got)
                print(f"round {rnd} {proto}: old {got['old']['infer_per_s']:.0f}/s, new {got['new']['infer_per_s']:.0f}/s "
                      f"({got['new']['infer_per_s'] / got['old']['infer_per_s']:.3f})", flush=True)
    common.write_summary(out_dir, {"header": header, "stamp": stamp, "args": vars(args), "results": results,
                                   "ratios": {p: ratios(r) for p, r in results.items()}},
                         summary_lines(args, stamp, header, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
