#!/usr/bin/env python3
"""Stateful models under perf_analyzer's sequence load: how many concurrent sequences work.

`accumulate_oldest` (bundled; sequence_batching `oldest`, max_candidate_sequences 1024,
preferred_batch_size 8, INT32 INPUT [1], max_batch_size 8, implicit state ACC_IN -> ACC_OUT):
perf_analyzer with --sequence-length 10 (its default ±20 % variation, so 8-12 requests) at
rising --concurrency-range counts over gRPC. perf_analyzer keeps one sequence per concurrent
slot, one request outstanding per sequence, so the count is the number of live sequences; beyond
the 1,024 candidate slots new sequences wait in the server's backlog. The script stops at the
first count that fails and reports the largest that ran without errors, with its p99. Then the
same at a moderate count over HTTP.

`silero_vad` (bundled, real VAD; input [1,-1] FP32, sr INT64 [1], state implicit, no batching):
first as perf_analyzer feeds it by default (--shape input:1,512, random data, so a random `sr`),
then with --input-data: one JSON stream of 10 chunks of 512 samples with sr = 16000.

Every run must exit 0, print no error line, and leave the model's failure count in the server's
statistics unchanged; batch efficiency = inference_count / execution_count from the server's
statistics over the run.

  .venv/bin/python loadtests/sequences.py [--grpc-counts 16,64,256,1000,2000,4000] [--http-count 64]

Results: loadtests/out/sequences-<time>/summary.{md,json}, perf_analyzer logs and CSVs, server.log.
"""

import argparse
import json
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import PAError  # noqa: E402

ACC = "accumulate_oldest"
VAD = "silero_vad"


def accumulate_check(base):
    """A two-request sequence over HTTP: OUTPUT 5, then 5 + 7 = 12."""
    outs = []
    for value, params in ((5, {"sequence_id": 987654321, "sequence_start": True}),
                          (7, {"sequence_id": 987654321, "sequence_end": True})):
        body = json.dumps({"parameters": params, "inputs": [
            {"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}]}).encode()
        _, out = common.http("POST", f"{base}/v2/models/{ACC}/infer", body)
        outs.append(json.loads(out)["outputs"][0]["data"][0])
    assert outs == [5, 12], outs


def vad_input_data(path, chunks=10, samples=512):
    """One perf_analyzer data stream (a sequence) of `chunks` 512-sample chunks at 16 kHz: a
    440 Hz tone plus a little noise, sr = 16000."""
    r = random.Random(1)
    steps = []
    for c in range(chunks):
        x = [round(0.1 * math.sin(2 * math.pi * 440 * (c * samples + i) / 16000) + r.uniform(-0.01, 0.01), 5)
             for i in range(samples)]
        steps.append({"input": {"content": x, "shape": [1, samples]}, "sr": [16000]})
    with open(path, "w") as f:
        json.dump({"data": [steps]}, f)


def vad_sr_check(model_path):
    """What ONNX Runtime itself says to silero_vad with a 512-sample chunk at sr = 16000 and at
    another sr (what perf_analyzer's random data sends), without the server; None without it."""
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError:
        return None
    ort.set_default_logger_severity(4)
    sess = ort.InferenceSession(model_path)
    res = {}
    for sr in (16000, 8000, 12345):
        try:
            sess.run(None, {"input": np.zeros((1, 512), np.float32),
                            "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(sr, np.int64)})
            res[str(sr)] = "ok"
        except Exception as e:  # noqa: BLE001
            res[str(sr)] = "error: " + str(e)[-160:]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap, interval_ms=3000)
    ap.add_argument("--grpc-counts", default="16,64,256,1000,2000,4000")
    ap.add_argument("--http-count", type=int, default=64)
    ap.add_argument("--sequence-length", type=int, default=10)
    ap.add_argument("--vad-counts", default="1,4,16")
    ap.add_argument("--serial-sequences", action="store_true",
                    help="pass perf_analyzer's --serial-sequences (one request in flight per sequence)")
    args = ap.parse_args()
    common.check_inputs(args, [ACC, VAD])
    out_dir, stamp = common.make_out_dir(args, "sequences")
    header = common.run_header(args)
    acc_runs, vad_runs = [], []
    vad_json = os.path.join(out_dir, "silero_vad_input.json")
    vad_input_data(vad_json)

    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=[ACC, VAD], ready=[ACC, VAD], check=accumulate_check,
                             prefix="seq-") as srv:

        def one(model, protocol, conc, extra, label):
            srv.alive()
            name = f"{model}-{label}-{protocol}-c{conc}"
            rec = {"model": model, "protocol": protocol, "concurrency": conc, "label": label}
            try:
                r = common.run_pa(args.perf_analyzer, model, srv.url(protocol), protocol, conc,
                                  os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                  extra=extra, interval_ms=args.interval_ms, stability=args.stability,
                                  server=srv, timeout=900, teardown_ok=True)
                rec.update(r, ok=True)
                d = r["server_stats_delta"]
                rec["batch_efficiency"] = d["inference_count"] / max(d["execution_count"], 1)
                print(f"{name:>36}: p50 {r['p50_us']:>8} µs  p99 {r['p99_us']:>8} µs  "
                      f"{r['infer_per_s']:>8.1f} infer/s  {r.get('sequence_count', 0)} sequences  "
                      f"batch {rec['batch_efficiency']:.2f}  (-s {r['stability_pct']})  "
                      f"end-of-run errors {len(r['teardown_errors'])}", flush=True)
            except PAError as e:
                rec.update(ok=False, error=str(e))
                print(f"FAILED {name}: {e}", flush=True)
            return rec

        seq = ["--sequence-length", str(args.sequence_length)] + (
            ["--serial-sequences"] if args.serial_sequences else [])
        one(ACC, "grpc", 16, seq, "warmup")
        for c in [int(x) for x in args.grpc_counts.split(",")]:
            rec = one(ACC, "grpc", c, seq, "count")
            acc_runs.append(rec)
            if not rec["ok"]:
                break
        acc_runs.append(one(ACC, "http", args.http_count, seq, "count"))

        # silero_vad as perf_analyzer feeds it by default, then with real-looking input data
        vad_runs.append(one(VAD, "grpc", 4, ["--sequence-length", str(args.sequence_length),
                                              "--shape", "input:1,512"], "random"))
        for c in [int(x) for x in args.vad_counts.split(",")]:
            vad_runs.append(one(VAD, "grpc", c, ["--input-data", vad_json], "json"))
        vad_runs.append(one(VAD, "http", 4, ["--input-data", vad_json], "json"))

    sr_check = vad_sr_check(os.path.join(args.model_repository, VAD, "1", "model.onnx"))
    ok_grpc = [r for r in acc_runs if r["protocol"] == "grpc" and r["ok"]]
    largest = max(ok_grpc, key=lambda r: r["concurrency"]) if ok_grpc else None
    clean = [r for r in ok_grpc if not r["teardown_errors"]]
    largest_clean = max(clean, key=lambda r: r["concurrency"]) if clean else None
    summary = {"header": header, "sequence_length": args.sequence_length,
               "interval_ms": args.interval_ms, "stability_pct": args.stability,
               "accumulate_oldest": acc_runs, "silero_vad": vad_runs, "silero_vad_onnxruntime_direct": sr_check,
               "largest_grpc_count_ok": largest["concurrency"] if largest else None,
               "largest_grpc_count_p99_us": largest["p99_us"] if largest else None,
               "largest_grpc_count_without_end_of_run_errors":
                   largest_clean["concurrency"] if largest_clean else None}

    def row(r):
        if not r["ok"]:
            return (f"| {r['protocol']} | {r['concurrency']} | failed | | | | | | | "
                    f"{r['error'][:200].replace('|', '/')} |")
        d = r["server_stats_delta"]
        return (f"| {r['protocol']} | {r['concurrency']} | {r['infer_per_s']:.0f} | {r['p50_us']} | "
                f"{r['p99_us']} | {r.get('sequence_count', '-')} | {d['inference_count']}/{d['execution_count']} "
                f"= {r['batch_efficiency']:.2f} | {d['fail']} | {len(r['teardown_errors'])} | "
                f"-s {r['stability_pct']}" + (f"; {r['teardown_errors'][0][:160]}" if r["teardown_errors"] else "")
                + " |")

    cols = ("| protocol | concurrent sequences | infer/s | p50 µs | p99 µs | sequences completed in windows "
            "| server inferences/executions | server failures | end-of-run errors | note |")
    sep = "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    lines = [
        f"# Sequences: accumulate_oldest and silero_vad ({stamp})", "",
        f"perf_analyzer {header['perf_analyzer']}, server built from {header['server_built_from']}, "
        f"git HEAD {header['git_head'][:12]}. --sequence-length {args.sequence_length} (±20 %), "
        f"-p {args.interval_ms} ms -s {args.stability} (retried at {2 * args.stability} when unstable), "
        "one run per count (no repeats: read the trend, not the digits). Server counts are deltas of "
        "/v2/models/<m>/stats over the whole perf_analyzer run (warm-up windows included). "
        "End-of-run errors: error lines perf_analyzer printed after its final summary (exit "
        "status 0), i.e. in its end-of-run step that closes every open sequence, after the "
        "measured windows; the server counts those requests as failures. They are listed, "
        "not treated as a failed count." + (" perf_analyzer ran with --serial-sequences."
                                            if args.serial_sequences else ""), "",
        f"Largest gRPC count whose measured windows ran without errors: **{summary['largest_grpc_count_ok']}** concurrent "
        f"sequences, p99 {summary['largest_grpc_count_p99_us']} µs"
        + ("" if all(r["ok"] for r in acc_runs) else " (the next count failed, see below)")
        + f"; the largest with no end-of-run error either: "
          f"{summary['largest_grpc_count_without_end_of_run_errors']}.", "",
        "## accumulate_oldest", "", cols, sep] + [row(r) for r in acc_runs] + [
        "", "## silero_vad", "",
        "`random`: --shape input:1,512 with perf_analyzer's random data (so `sr` is a random INT64); "
        "`json`: --input-data with 10 chunks of 512 samples, sr = 16000, one stream reused for every "
        "sequence.", "",
        "| data | " + cols[2:], "| --- | " + sep[2:]] + [
        f"| {r['label']} " + row(r) for r in vad_runs] + [""]
    if sr_check is not None:
        lines += ["ONNX Runtime alone (no server), one [1,512] chunk, zero state: " + "; ".join(
            f"sr={k}: {v}" for k, v in sr_check.items()), ""]
    common.write_summary(out_dir, summary, lines)


if __name__ == "__main__":
    main()
