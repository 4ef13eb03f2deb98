#!/usr/bin/env python3
"""Does watching the actor tree cost the engine anything? perf_analyzer's sequence load on
`accumulate_oldest` (gRPC, --concurrency-range N live sequences) in alternating rounds: without a
watcher, then with one that requests GET /v2/actors every --watch-ms (10 times faster than the
page polls), and so on. Reports each round's infer/s and p99, the ratio of the medians (watched /
unwatched: the same run, same server, interleaved, so drift hits both), and the tree requests'
latency (median and max) under that load.

  .venv/bin/python loadtests/actors_watch.py [--server target/debug/tritium] [--concurrency 256]

Results: loadtests/out/actors_watch-<time>/summary.{md,json}, perf_analyzer logs, server.log.
"""

import argparse
import os
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ACC = "accumulate_oldest"


class Watcher(threading.Thread):
    """Requests the tree every `every_s` until stopped; keeps each request's latency."""

    def __init__(self, url, every_s):
        super().__init__(daemon=True)
        self.url, self.every_s, self.stop, self.latencies_ms, self.errors = url, every_s, threading.Event(), [], 0

    def run(self):
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as r:
                    r.read()
                    if r.status != 200:
                        self.errors += 1
            except OSError:
                self.errors += 1
            self.latencies_ms.append((time.perf_counter() - t0) * 1000)
            self.stop.wait(self.every_s)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap, interval_ms=2000)
    ap.add_argument("--concurrency", type=int, default=256, help="live sequences")
    ap.add_argument("--rounds", type=int, default=3, help="pairs of (unwatched, watched) runs")
    ap.add_argument("--watch-ms", type=int, default=100)
    args = ap.parse_args()
    common.check_inputs(args, [ACC])
    out_dir, _ = common.make_out_dir(args, "actors_watch")
    header = common.run_header(args)
    runs = []
    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=[ACC], ready=[ACC], prefix="watch-") as srv:
        tree_url = f"http://127.0.0.1:{srv.metrics_port}/v2/actors"

        def one(label, i):
            srv.alive()
            name = f"{label}-{i}"
            watcher = Watcher(tree_url, args.watch_ms / 1000) if label == "watched" else None
            if watcher:
                watcher.start()
            try:
                r = common.run_pa(args.perf_analyzer, ACC, srv.url("grpc"), "grpc", args.concurrency,
                                  os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                  extra=["--sequence-length", "10"], interval_ms=args.interval_ms,
                                  stability=args.stability, server=srv, timeout=900, teardown_ok=True)
            finally:
                if watcher:
                    watcher.stop.set()
                    watcher.join()
            rec = {"label": label, "round": i, "infer_per_s": r["infer_per_s"], "p99_us": r["p99_us"]}
            if watcher:
                lat = sorted(watcher.latencies_ms)
                rec.update(tree_requests=len(lat), tree_errors=watcher.errors,
                           tree_p50_ms=common.median(lat), tree_max_ms=lat[-1] if lat else None)
            print(f"{name:>12}: {rec['infer_per_s']:>8.1f} infer/s  p99 {rec['p99_us']:>8} µs"
                  + (f"  tree p50 {rec['tree_p50_ms']:.1f} ms max {rec['tree_max_ms']:.1f} ms "
                     f"({rec['tree_requests']} requests, {rec['tree_errors']} errors)" if watcher else ""),
                  flush=True)
            runs.append(rec)

        one("warmup", 0)
        runs.clear()
        for i in range(1, args.rounds + 1):
            one("unwatched", i)
            one("watched", i)
    med = {k: common.median([r["infer_per_s"] for r in runs if r["label"] == k]) for k in ("unwatched", "watched")}
    ratio = med["watched"] / med["unwatched"]
    spread = {k: common.spread([r["infer_per_s"] for r in runs if r["label"] == k]) for k in med}
    watched = [r for r in runs if r["label"] == "watched"]
    summary = {**header, "concurrency": args.concurrency, "watch_ms": args.watch_ms, "runs": runs,
               "median_infer_per_s": med, "spread": spread, "ratio_watched_over_unwatched": ratio}
    lines = [
        f"# Watching the actor tree under sequence load ({ACC}, {args.concurrency} live sequences, gRPC)",
        "",
        f"{header['time']}, git HEAD {header['git_head'][:12]}, server {header['server']}, "
        f"load average at start {header['loadavg_at_start']:.2f} on {header['nproc']} cores.",
        "",
        "| run | infer/s | p99 µs | tree requests | tree p50 ms | tree max ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        lines.append(f"| {r['label']} {r['round']} | {r['infer_per_s']:.1f} | {r['p99_us']} | "
                     f"{r.get('tree_requests', '')} | "
                     + (f"{r['tree_p50_ms']:.1f} | {r['tree_max_ms']:.1f} |" if "tree_p50_ms" in r else " | |"))
    lines += ["", f"Median infer/s: unwatched {med['unwatched']:.1f}, watched {med['watched']:.1f}; "
              f"ratio watched / unwatched **{ratio:.3f}** (spread of each: "
              f"{spread['unwatched']}, {spread['watched']}). Tree errors: "
              f"{sum(r['tree_errors'] for r in watched)}."]
    common.write_summary(out_dir, summary, lines)


if __name__ == "__main__":
    main()
