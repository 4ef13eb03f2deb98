#!/usr/bin/env python3
"""Soak: mixed traffic at a fixed fraction of saturation for a long time, every answer checked,
the server's memory and open files watched (issue 16, point 7).

The mix, each kind on its own client threads:
  http      add_sub over HTTP (tritonclient.http), sums and differences checked
  grpc      add_sub over gRPC (tritonclient.grpc)
  sequence  `accumulate` conversations of 10 turns over gRPC, each running sum checked
  ensemble  add_sub_pipeline over HTTP, both outputs checked
  stream    the decoupled repeat_int32 over a gRPC stream: every response, in order
  bad       requests that must be refused (wrong shape: 400 with Triton's JSON error; an unknown
            model over gRPC: NOT_FOUND); a refusal is the expected answer, anything else an error

First the mix runs unthrottled for `--calibrate` seconds: that rate is the saturation of this
client and server together. Then it runs paced at `--fraction` of it for `--seconds`. RSS and
the count of open file descriptors of the server are sampled every 2 s; growth is the last
sample against the first one after the warm-up (the first 20 % of the run).

Exit status 0 only with no unexpected answer and RSS and open files growing less than
`--max-growth` (5 %). The CI runs a 60-second version (tests/test_soak.py).
"""
import argparse
import json
import os
import queue
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

MODELS = ["add_sub", "identity_fp32", "add_sub_pipeline", "accumulate", "repeat_int32"]
THREADS = {"http": 2, "grpc": 2, "sequence": 2, "ensemble": 1, "stream": 1, "bad": 1}


class Pacer:
    """Hands out start times 1/rate apart (rate None: as fast as asked)."""

    def __init__(self, rate):
        self.gap = 1.0 / rate if rate else 0.0
        self.next = time.monotonic()
        self.lock = threading.Lock()

    def wait(self):
        if not self.gap:
            return
        with self.lock:
            now = time.monotonic()
            self.next = max(self.next + self.gap, now - 1.0)  # no burst after a stall
            at = self.next
        if at > now:
            time.sleep(at - now)


class Traffic:
    def __init__(self, srv, rng_seed):
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient
        self.grpcclient, self.httpclient = grpcclient, httpclient
        self.http = httpclient.InferenceServerClient(srv.url("http"))
        self.grpc = grpcclient.InferenceServerClient(srv.url("grpc"))
        self.rng = np.random.default_rng(rng_seed)
        self.base = srv.base

    def pair(self):
        return (self.rng.standard_normal(16).astype(np.float32)[None, :],
                self.rng.standard_normal(16).astype(np.float32)[None, :])

    def _inputs(self, mod, names, arrays):
        out = []
        for n, a in zip(names, arrays):
            i = mod.InferInput(n, list(a.shape), "FP32")
            i.set_data_from_numpy(a)
            out.append(i)
        return out

    def http_add_sub(self):
        a, b = self.pair()
        r = self.http.infer("add_sub", self._inputs(self.httpclient, ["INPUT0", "INPUT1"], [a, b]))
        check(np.allclose(r.as_numpy("OUTPUT0"), a + b) and np.allclose(r.as_numpy("OUTPUT1"), a - b), "add_sub http")

    def grpc_add_sub(self):
        a, b = self.pair()
        r = self.grpc.infer("add_sub", self._inputs(self.grpcclient, ["INPUT0", "INPUT1"], [a, b]))
        check(np.allclose(r.as_numpy("OUTPUT0"), a + b) and np.allclose(r.as_numpy("OUTPUT1"), a - b), "add_sub grpc")

    def ensemble(self):
        a, b = self.pair()
        r = self.http.infer("add_sub_pipeline", self._inputs(self.httpclient, ["IN0", "IN1"], [a, b]))
        check(np.allclose(r.as_numpy("OUT"), a + b) and np.allclose(r.as_numpy("DIFF"), a - b), "ensemble")

    def bad(self):
        import requests
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]},
                           {"name": "INPUT1", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}
        r = requests.post(f"{self.base}/v2/models/add_sub/infer", json=body, timeout=30)
        check(r.status_code == 400 and "error" in r.json(), f"bad shape answered {r.status_code} {r.text[:200]}")
        try:
            self.grpc.get_model_metadata("no_such_model")
        except Exception as e:  # tritonclient raises InferenceServerException
            check("StatusCode.NOT_FOUND" in str(e.status()), f"unknown model answered {e}")
        else:
            check(False, "unknown model answered OK")


def check(ok, what):
    if not ok:
        raise AssertionError(what)


def sequence_worker(t, stop, pacer, counts, errors, base_id):
    """Conversations of 10 turns on `accumulate`; each turn's OUTPUT is the running sum."""
    grpcclient = t.grpcclient
    seq = base_id
    while not stop.is_set():
        seq += 1
        total = 0
        for turn in range(10):
            pacer.wait()
            v = int(t.rng.integers(-100, 100))
            total += v
            i = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            i.set_data_from_numpy(np.array([[v]], np.int32))
            try:
                r = t.grpc.infer("accumulate", [i], sequence_id=seq, sequence_start=turn == 0,
                                 sequence_end=turn == 9)
                check(int(r.as_numpy("OUTPUT")[0][0]) == total, f"sequence {seq} turn {turn}: running sum")
                counts["sequence"] += 1
            except Exception as e:
                errors.put(f"sequence: {e}")
                break


def stream_worker(t, stop, pacer, counts, errors):
    """repeat_int32 over one long-lived gRPC stream: IN=[k, k+1, k+2] comes back as 3 responses."""
    got = queue.Queue()
    t.grpc.start_stream(callback=lambda result, error: got.put((result, error)))
    k = 0
    try:
        while not stop.is_set():
            pacer.wait()
            k += 1
            values = np.array([k, k + 1, k + 2], np.int32)
            i = t.grpcclient.InferInput("IN", [3], "INT32")
            i.set_data_from_numpy(values)
            t.grpc.async_stream_infer("repeat_int32", [i], request_id=str(k))
            try:
                seen = []
                for _ in range(3):
                    result, error = got.get(timeout=30)
                    check(error is None, f"stream error {error}")
                    seen.append(int(result.as_numpy("OUT")[0]))
                check(seen == values.tolist(), f"stream answers {seen} for {values.tolist()}")
                counts["stream"] += 1
            except Exception as e:
                errors.put(f"stream: {e}")
                return
    finally:
        t.grpc.stop_stream()


def simple_worker(kind, t, stop, pacer, counts, errors):
    op = {"http": t.http_add_sub, "grpc": t.grpc_add_sub, "ensemble": t.ensemble, "bad": t.bad}[kind]
    while not stop.is_set():
        pacer.wait()
        try:
            op()
            counts[kind] += 1
        except Exception as e:
            errors.put(f"{kind}: {e}")


def proc_sample(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def run_mix(srv, seconds, rate, sample_every=2.0):
    """Runs the mix for `seconds` (paced at `rate` ops/s, or unthrottled); returns the counts,
    the unexpected answers and the (t, rss_kib, fds) samples."""
    stop = threading.Event()
    pacer = Pacer(rate)
    counts = {k: 0 for k in THREADS}
    errors = queue.Queue()
    threads = []
    for kind, n in THREADS.items():
        for j in range(n):
            t = Traffic(srv, rng_seed=hash((kind, j)) & 0xFFFF)
            if kind == "sequence":
                target, args = sequence_worker, (t, stop, pacer, counts, errors, (j + 1) * 10_000_000)
            elif kind == "stream":
                target, args = stream_worker, (t, stop, pacer, counts, errors)
            else:
                target, args = simple_worker, (kind, t, stop, pacer, counts, errors)
            threads.append(threading.Thread(target=target, args=args, daemon=True))
    samples = []
    start = time.monotonic()
    for th in threads:
        th.start()
    while time.monotonic() - start < seconds:
        srv.alive()
        samples.append((round(time.monotonic() - start, 1), *proc_sample(srv.proc.pid)))
        time.sleep(min(sample_every, max(0.0, seconds - (time.monotonic() - start))))
    stop.set()
    for th in threads:
        th.join(timeout=60)
    samples.append((round(time.monotonic() - start, 1), *proc_sample(srv.proc.pid)))
    return counts, [errors.get() for _ in range(errors.qsize())], samples


def growth(samples, warmup_s, index):
    after = [s for s in samples if s[0] >= warmup_s]
    first, last = after[0][index], after[-1][index]
    return (last - first) / first if first else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--calibrate", type=float, default=15)
    ap.add_argument("--fraction", type=float, default=0.8)
    ap.add_argument("--max-growth", type=float, default=0.05)
    args = ap.parse_args()
    for p in (args.server, args.onnxruntime_library):
        if not os.path.exists(p):
            sys.exit(f"missing {p} (build the server / run scripts/setup.sh first)")
    out_dir, _ = common.make_out_dir(args, "soak")
    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=MODELS, ready=MODELS) as srv:
        counts, errors, _ = run_mix(srv, args.calibrate, None)
        saturation = sum(counts.values()) / args.calibrate
        print(f"calibration: {saturation:.0f} ops/s unthrottled ({counts}); errors {len(errors)}", flush=True)
        rate = saturation * args.fraction
        counts, soak_errors, samples = run_mix(srv, args.seconds, rate)
        errors += soak_errors
        stats = common.get_json(f"{srv.base}/v2/models/stats")
    done = sum(counts.values())
    warmup = args.seconds * 0.2
    rss_growth, fd_growth = growth(samples, warmup, 1), growth(samples, warmup, 2)
    ok = not errors and rss_growth < args.max_growth and fd_growth < args.max_growth
    summary = {
        "seconds": args.seconds, "saturation_ops_s": round(saturation, 1), "target_ops_s": round(rate, 1),
        "achieved_ops_s": round(done / args.seconds, 1), "counts": counts, "unexpected": len(errors),
        "first_unexpected": errors[:5], "rss_kib_first_after_warmup": [s for s in samples if s[0] >= warmup][0][1],
        "rss_kib_last": samples[-1][1], "rss_growth": round(rss_growth, 4), "fds_growth": round(fd_growth, 4),
        "samples": samples, "server_stats_models": len(stats.get("model_stats", [])), "ok": ok,
    }
    lines = [
        f"# Soak, {args.seconds:.0f} s at {args.fraction:.0%} of {saturation:.0f} ops/s",
        f"achieved {done / args.seconds:.0f} ops/s; counts {counts}",
        f"unexpected answers: {len(errors)} {errors[:3]}",
        f"RSS {summary['rss_kib_first_after_warmup']} -> {summary['rss_kib_last']} KiB "
        f"({rss_growth:+.1%}); open fds {fd_growth:+.1%}",
        f"verdict: {'PASS' if ok else 'FAIL'}",
    ]
    common.write_summary(out_dir, summary, lines)
    print(json.dumps({k: summary[k] for k in ("achieved_ops_s", "unexpected", "rss_growth", "fds_growth", "ok")}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
