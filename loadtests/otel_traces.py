#!/usr/bin/env python3
"""Serving throughput with OpenTelemetry traces at rate 1 vs off, in one run, by perf_analyzer.

One Tritium server starts with `--trace-config mode=opentelemetry` (rate 1, level TIMESTAMPS,
`bsp_schedule_delay=200`) exporting to an OTLP/HTTP receiver in this process on loopback (the
bodies are kept as they come and decoded with the official `opentelemetry-proto` definitions
after the measured runs, so decoding takes no CPU from them; it is not a collector). Between perf_analyzer runs the trace extension switches tracing
on (`trace_level: TIMESTAMPS`) and off (`OFF`) on that same server, so both conditions share
the process, the models and the machine's load; the order alternates every repeat. Each
repeat gives on/off ratios of throughput (concurrency 8) and p50 latency (concurrency 1), for
HTTP and gRPC on `add_sub`; the summary takes the median over repeats and counts the spans the
receiver got in the traced runs (3 per request: InferRequest, add_sub, compute; the batch
processor drops spans when its queue is full, which would show here as fewer).

  .venv/bin/python loadtests/otel_traces.py --server target/debug/tritium [--repeats 3]

Results: loadtests/out/otel_traces-<time>/summary.{md,json}, perf_analyzer logs and CSVs,
server.log.
"""

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import PAError, median  # noqa: E402

CONCURRENCIES = (1, 8)
PROTOCOLS = ("http", "grpc")
MODEL = "add_sub"


class CountingReceiver:
    """Accepts OTLP/HTTP posts on loopback and keeps their bodies, answering 200 with an empty
    protobuf body (a valid empty ExportTraceServiceResponse)."""

    def __init__(self):
        self.bodies = []
        self.lock = threading.Lock()
        rx = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with rx.lock:
                    rx.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self):
        """The bodies received so far, forgotten here."""
        with self.lock:
            out, self.bodies = self.bodies, []
        return out


def spans_in(bodies):
    """{span name: count} over OTLP ExportTraceServiceRequest bodies."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    counts = {}
    for body in bodies:
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    counts[span.name] = counts.get(span.name, 0) + 1
    return counts


def set_level(base, level):
    body = json.dumps({"trace_level": [level]}).encode()
    req = urllib.request.Request(f"{base}/v2/trace/setting", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        got = json.load(r)
    assert got["trace_level"] == [level] and got["trace_mode"] == "opentelemetry", got


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    common.check_inputs(args, [MODEL])
    out_dir, stamp = common.make_out_dir(args, "otel_traces")
    header = common.run_header(args)
    rx = CountingReceiver()
    flags = ["mode=opentelemetry", f"opentelemetry,url={rx.url}", "opentelemetry,bsp_schedule_delay=200",
             "level=TIMESTAMPS", "rate=1", "count=-1"]
    extra = sum((["--trace-config", f] for f in flags), [])
    runs, failures = [], []
    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=[MODEL], ready=[MODEL], check=common.add_sub_check, prefix="otel-",
                             extra_args=extra) as srv:

        def one(label, tracing, protocol, conc):
            srv.alive()
            set_level(srv.base, "TIMESTAMPS" if tracing else "OFF")
            name = f"{label}-{'on' if tracing else 'off'}-{protocol}-c{conc}"
            try:
                r = common.run_pa(args.perf_analyzer, MODEL, srv.url(protocol), protocol, conc,
                                  os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                  interval_ms=args.interval_ms, stability=args.stability, server=srv)
            except PAError as e:
                print(f"FAILED {name}: {e}", flush=True)
                failures.append({"run": name, "error": str(e)})
                return None
            r.update(label=label, tracing=tracing, protocol=protocol)
            print(f"{name:>22}: p50 {r['p50_us']:>7} µs  p99 {r['p99_us']:>7} µs  {r['infer_per_s']:>9.1f} infer/s",
                  flush=True)
            return r

        for protocol in PROTOCOLS:
            one("warmup", True, protocol, 1)
        traced_requests = 0
        time.sleep(1.0)  # the warm-up's spans go out (bsp_schedule_delay 200 ms)
        rx.take()
        for i in range(args.repeats):
            order = (True, False) if i % 2 == 0 else (False, True)
            for protocol in PROTOCOLS:
                for conc in CONCURRENCIES:
                    for tracing in order:
                        r = one(f"rep{i + 1}", tracing, protocol, conc)
                        if r is not None:
                            r["repeat"] = i + 1
                            runs.append(r)
                            if tracing:
                                traced_requests += r["server_stats_delta"]["success"]
        set_level(srv.base, "OFF")
        time.sleep(2.0)  # the last spans go out
        bodies = rx.take()

    def get(rep, tracing, protocol, conc):
        return next((r for r in runs if r["repeat"] == rep and r["tracing"] == tracing
                     and r["protocol"] == protocol and r["concurrency"] == conc), None)

    ratios = {}
    for protocol in PROTOCOLS:
        rows = []
        for rep in range(1, args.repeats + 1):
            on8, off8 = get(rep, True, protocol, 8), get(rep, False, protocol, 8)
            on1, off1 = get(rep, True, protocol, 1), get(rep, False, protocol, 1)
            row = {"repeat": rep}
            if on8 and off8:
                row["throughput_on/off_c8"] = on8["infer_per_s"] / off8["infer_per_s"]
            if on1 and off1:
                row["p50_on/off_c1"] = on1["p50_us"] / off1["p50_us"]
            rows.append(row)
        ratios[protocol] = rows

    def med(protocol, key):
        return median([r[key] for r in ratios[protocol] if key in r])

    def med_abs(tracing, protocol, conc, key):
        return median([r[key] for r in runs if r["tracing"] == tracing and r["protocol"] == protocol
                       and r["concurrency"] == conc])

    posts, sent = len(bodies), sum(len(b) for b in bodies)
    spans = spans_in(bodies)
    del bodies
    summary = {"header": header, "repeats": args.repeats, "runs": runs, "failures": failures, "ratios": ratios,
               "traced_requests": traced_requests, "otlp_posts": posts, "otlp_bytes": sent, "spans": spans,
               "loadavg_at_end": os.getloadavg()[0]}
    lines = [f"# OpenTelemetry traces at rate 1 vs off ({stamp})", "",
             f"perf_analyzer {header['perf_analyzer']}, server {header['server']} built from "
             f"{header['server_built_from']}, load average {header['loadavg_at_start']:.1f} at start, "
             f"{summary['loadavg_at_end']:.1f} at end, {header['nproc']} CPUs; {args.repeats} repeats, "
             f"on/off alternating, model {MODEL}.", "",
             "| protocol | throughput c8 on/off | p50 c1 on/off | c8 infer/s on | c8 infer/s off | c1 p50 µs on | c1 p50 µs off |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for p in PROTOCOLS:
        lines.append(f"| {p} | {med(p, 'throughput_on/off_c8'):.3f} | {med(p, 'p50_on/off_c1'):.3f} | "
                     f"{med_abs(True, p, 8, 'infer_per_s'):.0f} | {med_abs(False, p, 8, 'infer_per_s'):.0f} | "
                     f"{med_abs(True, p, 1, 'p50_us'):.0f} | {med_abs(False, p, 1, 'p50_us'):.0f} |")
    lines += ["", f"Traced requests (server statistics, traced runs): {traced_requests}; OTLP posts received: "
              f"{posts} ({sent / 1e6:.1f} MB) with spans {spans} (3 per traced request when none is dropped).", ""]
    if failures:
        lines.append(f"FAILED runs: {len(failures)} (see summary.json)")
    common.write_summary(out_dir, summary, lines)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
