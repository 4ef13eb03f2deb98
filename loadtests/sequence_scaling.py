#!/usr/bin/env python3
"""Does a turn cost more when more sequences are live? (issue 17 point 1.) Throughput at many
concurrent sequences as a ratio of the throughput at 64, measured on the same server in the
same run, for an old and a new build side by side, alternating which goes first in each pair.

Loads, each over gRPC with perf_analyzer: `accumulate_oldest` with --sequence-length 10 at
--counts (default 64, 1000, 4000 concurrent sequences; perf_analyzer keeps one sequence per
concurrent slot, so the count is the number of live sequences, beyond the 1,024 candidate
places the rest wait in the backlog), then stateless `add_sub` at --stateless-counts (default
64, 1000). Per build and pair: infer/s at each count ÷ infer/s at the first count. Target: ≥ 0.8
at every count. Every run must exit 0 with no error line and leave the server's failure counts
unchanged (end-of-run errors of the sequence runs, when perf_analyzer closes its open
sequences, are listed, as in sequences.py).

  .venv/bin/python loadtests/sequence_scaling.py --old PATH --new PATH [--pairs 2]

Results: loadtests/out/sequence_scaling-<time>/summary.{md,json}.
"""

import argparse
import os
import sys
import time

import common
from common import PAError, median, spread

ACC = "accumulate_oldest"
STATELESS = "add_sub"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap, interval_ms=3000)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--counts", default="64,1000,4000")
    ap.add_argument("--stateless-counts", default="64,1000")
    args = ap.parse_args()
    for p in (args.old, args.new, args.perf_analyzer):
        if not os.path.exists(p):
            sys.exit(f"missing {p}")
    args.server = args.new
    out_dir, _ = common.make_out_dir(args, "sequence_scaling")
    header = common.run_header(args)
    loads = [(ACC, int(c), ["--sequence-length", "10"]) for c in args.counts.split(",")]
    loads += [(STATELESS, int(c), []) for c in args.stateless_counts.split(",") if c]
    results, failures = [], []
    for pair in range(args.pairs):
        order = (("old", args.old), ("new", args.new)) if pair % 2 == 0 else (("new", args.new), ("old", args.old))
        for label, binary in order:
            with common.bench_server(binary, args.onnxruntime_library, args.model_repository, out_dir,
                                     models=[ACC, STATELESS], ready=[ACC, STATELESS],
                                     log_name=f"server-{label}-{pair + 1}.log", prefix="scal-") as srv:
                for model, conc, extra in loads:
                    name = f"pair{pair + 1}-{label}-{model}-c{conc}"
                    cpu0, pa0, t0 = common.tree_cpu_s(srv.proc.pid), common.children_cpu_s(), time.monotonic()
                    try:
                        r = common.run_pa(args.perf_analyzer, model, srv.url("grpc"), "grpc", conc,
                                          os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                          extra=extra, interval_ms=args.interval_ms, stability=args.stability,
                                          server=srv, teardown_ok=bool(extra), timeout=900)
                    except PAError as e:
                        print(f"FAILED {name}: {e}", flush=True)
                        failures.append({"run": name, "error": str(e)})
                        continue
                    wall = time.monotonic() - t0
                    r.update(pair=pair + 1, build=label, model=model,
                             server_cores=(common.tree_cpu_s(srv.proc.pid) - cpu0) / wall,
                             client_cores=(common.children_cpu_s() - pa0) / wall)
                    results.append(r)
                    print(f"{name:>44}: {r['infer_per_s']:>8.1f} infer/s  p99 {r['p99_us']:>9} µs  "
                          f"cores server {r['server_cores']:.2f} client {r['client_cores']:.2f}  "
                          f"end-of-run errors {len(r.get('teardown_errors', []))}", flush=True)

    def get(pair, build, model, conc):
        for r in results:
            if (r["pair"], r["build"], r["model"], r["concurrency"]) == (pair, build, model, conc):
                return r["infer_per_s"]
        return None

    lines = [f"# Sequence scaling, same run: {header['time']}", "",
             f"old: {args.old}; new: {args.new}; {args.pairs} pairs, order alternated; -p {args.interval_ms} ms; "
             f"failed runs: {len(failures)}. Ratio: infer/s at the count ÷ infer/s at the model's first count, "
             "on the same server in the same pair; median (min–max) over the pairs.", "",
             "| load | old ratio | new ratio | old infer/s | new infer/s |", "| --- | --- | --- | --- | --- |"]
    ratios = {}
    for model in (ACC, STATELESS):
        counts = [c for m, c, _ in loads if m == model]
        if not counts:
            continue
        for conc in counts:
            row = {}
            for build in ("old", "new"):
                rs = []
                for k in range(1, args.pairs + 1):
                    base, at = get(k, build, model, counts[0]), get(k, build, model, conc)
                    if base and at:
                        rs.append(at / base)
                row[build] = rs
            tps = {b: [r["infer_per_s"] for r in results if (r["build"], r["model"], r["concurrency"]) == (b, model, conc)]
                   for b in ("old", "new")}
            ratios[f"{model}-c{conc}"] = {"ratio": row, "infer_per_s": tps}
            lines.append(f"| {model} gRPC c{conc} ÷ c{counts[0]} | {median(row['old']):.2f} ({spread(row['old'])}) | "
                         f"{median(row['new']):.2f} ({spread(row['new'])}) | {spread(tps['old'])} | "
                         f"{spread(tps['new'])} |")
    # The turn's cost itself: CPU per inference of the server and of perf_analyzer (rusage over the
    # whole run, so a slow ramp counts too), and the server's at each count ÷ at the first count.
    lines += ["", "CPU µs per inference (server / perf_analyzer), median over the pairs; the server's at the "
              "count ÷ at the model's first count:", "",
              "| load | old | new | new server ratio |", "| --- | --- | --- | --- |"]
    for model in (ACC, STATELESS):
        counts = [c for m, c, _ in loads if m == model]
        first = {}
        for conc in counts:
            cells, new_server = [], None
            for build in ("old", "new"):
                rs = [r for r in results if (r["build"], r["model"], r["concurrency"]) == (build, model, conc)]
                server = [r["server_cores"] * 1e6 / r["infer_per_s"] for r in rs if r["infer_per_s"]]
                client = [r["client_cores"] * 1e6 / r["infer_per_s"] for r in rs if r["infer_per_s"]]
                cells.append(f"{median(server):.0f} / {median(client):.0f}" if server else "-")
                if build == "new" and server:
                    new_server = median(server)
            first.setdefault(model, new_server)
            ratio = f"{new_server / first[model]:.2f}" if new_server and first[model] else "-"
            lines.append(f"| {model} c{conc} | {cells[0]} | {cells[1]} | {ratio} |")
    common.write_summary(out_dir, {"header": header, "ratios": ratios, "results": results, "failures": failures},
                         lines)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
