#!/usr/bin/env python3
"""What going through nginx adds: direct vs through deploy/nginx/nginx.conf, in one run.

Starts one Tritium binary (add_sub) and nginx (Debian's, scripts/install_nginx.sh) on the
checked-in config with all three upstream replicas pointed at that one server (so the only
difference between the two paths is nginx: its consistent hash, its keep-alive connections to
the upstream, grpc_pass), then runs perf_analyzer (batch 1, stateless requests: no
x-sequence-id, so nginx hashes on $request_id) over HTTP and gRPC at concurrency 1 and 16, direct
and through nginx back to back, the order reversed every repeat. Reports p50 (and p99, infer/s)
of each and the added p50 (nginx - direct) and its ratio, taken within a repeat; medians over
repeats. Every run must exit 0, print no error line, and leave the server's failure count at 0.

  .venv/bin/python loadtests/nginx_overhead.py [--repeats 3] [--interval-ms 1000]

Results: loadtests/out/nginx_overhead-<time>/summary.{md,json}, the logs, nginx's folder.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import common  # noqa: E402
from common import PAError, median, spread  # noqa: E402
from lb import Nginx  # noqa: E402

MODEL = "add_sub"
PROTOCOLS = ("http", "grpc")
CONCURRENCIES = (1, 16)
TARGETS = ("direct", "nginx")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap, interval_ms=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    common.check_inputs(args, [MODEL])
    out_dir, stamp = common.make_out_dir(args, "nginx_overhead")
    header = common.run_header(args)
    runs, failures = [], []
    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=[MODEL], ready=[MODEL], check=common.add_sub_check, prefix="ngx-") as srv:
        lb = Nginx([srv.http_port] * 3, [srv.grpc_port] * 3, os.path.join(out_dir, "nginx")).start()
        try:
            urls = {("direct", "http"): srv.url("http"), ("direct", "grpc"): srv.url("grpc"),
                    ("nginx", "http"): lb.http_url, ("nginx", "grpc"): lb.grpc_url}

            def one(label, target, protocol, conc):
                name = f"{label}-{target}-{protocol}-c{conc}"
                try:
                    r = common.run_pa(args.perf_analyzer, MODEL, urls[(target, protocol)], protocol, conc,
                                      os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                      interval_ms=args.interval_ms, stability=args.stability, server=srv)
                except PAError as e:
                    print(f"FAILED {name}: {e}", flush=True)
                    failures.append({"run": name, "error": str(e)})
                    return None
                r.update(target=target, protocol=protocol, label=label)
                print(f"{name:>28}: p50 {r['p50_us']:>7} µs  p99 {r['p99_us']:>7} µs  "
                      f"{r['infer_per_s']:>9.1f} infer/s", flush=True)
                return r

            for target in TARGETS:
                for protocol in PROTOCOLS:
                    one("warmup", target, protocol, 1)
            for i in range(args.repeats):
                order = list(TARGETS) if i % 2 == 0 else list(reversed(TARGETS))
                for protocol in PROTOCOLS:
                    for conc in CONCURRENCIES:
                        for target in order:
                            r = one(f"rep{i + 1}", target, protocol, conc)
                            if r is not None:
                                r["repeat"] = i + 1
                                runs.append(r)
        finally:
            lb.stop()

    def get(rep, target, protocol, conc):
        for r in runs:
            if (r["repeat"], r["target"], r["protocol"], r["concurrency"]) == (rep, target, protocol, conc):
                return r
        return None

    rows = {}
    for protocol in PROTOCOLS:
        for conc in CONCURRENCIES:
            added, ratio = [], []
            for rep in range(1, args.repeats + 1):
                d, n = get(rep, "direct", protocol, conc), get(rep, "nginx", protocol, conc)
                if d and n:
                    added.append(n["p50_us"] - d["p50_us"])
                    ratio.append(n["p50_us"] / d["p50_us"])
            rows[f"{protocol} c{conc}"] = {
                "direct_p50_us": [get(r, "direct", protocol, conc)["p50_us"] for r in range(1, args.repeats + 1)
                                  if get(r, "direct", protocol, conc)],
                "nginx_p50_us": [get(r, "nginx", protocol, conc)["p50_us"] for r in range(1, args.repeats + 1)
                                 if get(r, "nginx", protocol, conc)],
                "added_p50_us": added, "p50_ratio": ratio,
            }
    summary = {"header": header, "repeats": args.repeats, "runs": runs, "failures": failures, "rows": rows}
    lines = [
        f"# nginx overhead ({stamp})", "",
        f"perf_analyzer {header['perf_analyzer']}, server {header['server']} (built from "
        f"{header['server_built_from']}), git HEAD {header['git_head'][:12]}, load average at start "
        f"{header['loadavg_at_start']:.1f} on {header['nproc']} cores. {MODEL}, batch 1, -p {args.interval_ms} ms, "
        f"{args.repeats} repeats; direct and nginx back to back, the order reversed every repeat. "
        f"{len(runs)} measured runs, {len(failures)} failed.", "",
        "| protocol, concurrency | direct p50 µs | nginx p50 µs | added p50 µs (min–max) | nginx/direct p50 (min–max) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, row in rows.items():
        lines.append(f"| {key} | {median(row['direct_p50_us']):.0f} | {median(row['nginx_p50_us']):.0f} | "
                     f"{median(row['added_p50_us']):.0f} ({spread(row['added_p50_us'])}) | "
                     f"{median(row['p50_ratio']):.2f} ({spread(row['p50_ratio'])}) |")
    common.write_summary(out_dir, summary, lines)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
