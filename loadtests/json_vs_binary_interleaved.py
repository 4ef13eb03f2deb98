#!/usr/bin/env python3
"""JSON vs binary tensors over HTTP, interleaved request by request, so both formats see the same
machine: a complement to json_vs_binary.py (perf_analyzer), whose separate runs on these shared
2-core machines drift by 2-3x between runs.

A small client (standard library only: http.client on one persistent keep-alive connection,
concurrency 1) sends add_sub requests (INPUT0/INPUT1 FP32 [1,16]) alternating
  json:   inputs as "data" lists, outputs asked with "binary_data": false
  binary: Triton's binary tensor extension: Inference-Header-Content-Length + raw little-endian
          bytes, "parameters": {"binary_data_size": 64} per input, outputs "binary_data": true
and decodes every response in full (json.loads / header + slices), as a client would.
Latency is send-to-decoded per request; infer/s per format is requests / the time spent on that
format's requests (what a client sending only that format would get, sequentially). The Python
client's own cost is part of every figure, so the ratio here is diluted compared with
perf_analyzer's C++ client.

  .venv/bin/python loadtests/json_vs_binary_interleaved.py [--requests 20000] [--repeats 5]

Results: loadtests/out/json_vs_binary_interleaved-<time>/summary.{json,md}.
"""

import argparse
import http.client
import json
import os
import random
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from json_vs_binary import DEFAULT_ORT, DEFAULT_SERVER, HERE, MODEL, ROOT, bench_server  # noqa: E402

N = 16


def make_requests(rng):
    # float32 values, as on the wire; JSON carries each as its shortest repr of the float32 value
    a = [struct.unpack("<f", struct.pack("<f", rng.uniform(-1000, 1000)))[0] for _ in range(N)]
    b = [struct.unpack("<f", struct.pack("<f", rng.uniform(-1000, 1000)))[0] for _ in range(N)]
    outputs_json = [{"name": n, "parameters": {"binary_data": False}} for n in ("OUTPUT0", "OUTPUT1")]
    outputs_bin = [{"name": n, "parameters": {"binary_data": True}} for n in ("OUTPUT0", "OUTPUT1")]
    json_body = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, N], "data": a},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, N], "data": b},
    ], "outputs": outputs_json}, separators=(",", ":")).encode()
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, N], "parameters": {"binary_data_size": 4 * N}},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, N], "parameters": {"binary_data_size": 4 * N}},
    ], "outputs": outputs_bin}, separators=(",", ":")).encode()
    bin_body = header + struct.pack(f"<{N}f", *a) + struct.pack(f"<{N}f", *b)
    return a, b, json_body, (header, bin_body)


def send_json(conn, body):
    conn.request("POST", f"/v2/models/{MODEL}/infer", body=body,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"json: HTTP {r.status}: {data[:200]!r}")
    return {o["name"]: o["data"] for o in json.loads(data)["outputs"]}


def send_binary(conn, header_and_body):
    header, body = header_and_body
    conn.request("POST", f"/v2/models/{MODEL}/infer", body=body, headers={
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    })
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"binary: HTTP {r.status}: {data[:200]!r}")
    hlen = r.getheader("Inference-Header-Content-Length")
    hlen = int(hlen) if hlen is not None else len(data)
    meta = json.loads(data[:hlen])
    out, pos = {}, hlen
    for o in meta["outputs"]:
        size = o["parameters"]["binary_data_size"]
        out[o["name"]] = list(struct.unpack(f"<{size // 4}f", data[pos:pos + size]))
        pos += size
    return out


def pct(sorted_ns, q):
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1000.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--server", default=DEFAULT_SERVER)
    ap.add_argument("--onnxruntime-library", default=DEFAULT_ORT)
    ap.add_argument("--model-repository", default=os.path.join(ROOT, "model_repository"))
    ap.add_argument("--requests", type=int, default=20000, help="per repeat, both formats together")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    args = ap.parse_args()

    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = os.path.join(args.out, f"json_vs_binary_interleaved-{stamp}")
    os.makedirs(out_dir, exist_ok=True)
    a, b, json_body, bin_req = make_requests(random.Random(args.seed))
    want0 = [struct.unpack("<f", struct.pack("<f", x + y))[0] for x, y in zip(a, b)]
    reps = []
    with bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir) as (server, base):
        host, port = base[len("http://"):].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        for fn, req in ((send_json, json_body), (send_binary, bin_req)):
            got = fn(conn, req)["OUTPUT0"]
            assert all(abs(g - w) <= 1e-3 * max(1.0, abs(w)) for g, w in zip(got, want0)), (fn, got, want0)
        for i in range(args.warmup):
            (send_json if i % 2 == 0 else send_binary)(conn, json_body if i % 2 == 0 else bin_req)
        for rep in range(args.repeats):
            if server.poll() is not None:
                raise RuntimeError(f"server exited with {server.returncode}")
            lat = {"json": [], "binary": []}
            # alternate, flipping which goes first in each pair every repeat
            first = "json" if rep % 2 == 0 else "binary"
            for i in range(args.requests):
                mode = first if i % 2 == 0 else ("binary" if first == "json" else "json")
                t0 = time.perf_counter_ns()
                if mode == "json":
                    send_json(conn, json_body)
                else:
                    send_binary(conn, bin_req)
                lat[mode].append(time.perf_counter_ns() - t0)
            rec = {"repeat": rep + 1, "first": first}
            for mode, v in lat.items():
                s = sorted(v)
                rec[mode] = {"n": len(v), "p50_us": pct(s, 0.50), "p99_us": pct(s, 0.99),
                             "mean_us": sum(v) / len(v) / 1000.0,
                             "infer_per_s": len(v) / (sum(v) / 1e9)}
            rec["ratio"] = {k: rec["binary"][k] / rec["json"][k] for k in ("infer_per_s", "p50_us", "p99_us")}
            reps.append(rec)
            j, bb = rec["json"], rec["binary"]
            print(f"rep{rep + 1}: json p50 {j['p50_us']:.0f} p99 {j['p99_us']:.0f} µs {j['infer_per_s']:.0f}/s | "
                  f"binary p50 {bb['p50_us']:.0f} p99 {bb['p99_us']:.0f} µs {bb['infer_per_s']:.0f}/s | "
                  f"ratio infer/s {rec['ratio']['infer_per_s']:.3f}", flush=True)
        conn.close()

    med = {m: {k: statistics.median(r[m][k] for r in reps) for k in ("p50_us", "p99_us", "infer_per_s")}
           for m in ("json", "binary")}
    med_ratio = {k: statistics.median(r["ratio"][k] for r in reps) for k in ("infer_per_s", "p50_us", "p99_us")}
    summary = {"model": MODEL, "concurrency": 1, "batch": 1, "client": "python http.client, keep-alive",
               "json_request_bytes": len(json_body), "binary_request_bytes": len(bin_req[1]),
               "requests_per_repeat": args.requests, "repeats": args.repeats, "time": stamp,
               "median": med, "median_ratio_binary_over_json": med_ratio, "runs": reps}
    lines = [f"# JSON vs binary tensors, interleaved per request, {MODEL}, HTTP, concurrency 1 ({stamp})", "",
             f"Python http.client, one keep-alive connection; {args.requests} requests per repeat "
             f"(half each format, alternating); request bodies {len(json_body)} B JSON, "
             f"{len(bin_req[1])} B binary. Ratio = binary / JSON.", "",
             "| repeat | JSON p50 µs | JSON p99 µs | JSON infer/s | binary p50 µs | binary p99 µs "
             "| binary infer/s | ratio infer/s | ratio p50 | ratio p99 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    rows = [(str(r["repeat"]), r["json"], r["binary"], r["ratio"]) for r in reps]
    rows.append(("median", med["json"], med["binary"], med_ratio))
    for name, j, bb, q in rows:
        lines.append(f"| {name} | {j['p50_us']:.0f} | {j['p99_us']:.0f} | {j['infer_per_s']:.0f} | "
                     f"{bb['p50_us']:.0f} | {bb['p99_us']:.0f} | {bb['infer_per_s']:.0f} | "
                     f"{q['infer_per_s']:.3f} | {q['p50_us']:.3f} | {q['p99_us']:.3f} |")
    common.write_summary(out_dir, summary, lines)


if __name__ == "__main__":
    main()
