#!/usr/bin/env python3
"""Throughput of the `minilm` text-embedding ensemble (minilm_tokenizer -> minilm_encoder ->
minilm_pooling) in sentences/s, and the share of each request's time spent outside model compute.

Starts a Tritium binary on free loopback ports with only the four minilm models, checks one
embedding (unit norm, 384-d), then runs perf_analyzer against `minilm` with --input-data: a JSON
file it writes with CORPUS (64 English sentences, 6-30 words, fixed seed; one sentence per request,
perf_analyzer cycles through them), batch 1 — so infer/s = sentences/s — at concurrency 1 and 16,
over gRPC and HTTP. One warm-up per protocol, then --repeats repeats, the protocol order reversed
every repeat.

Time split per request, from the statistics extension as perf_analyzer reads it for an
ensemble over its measured windows (its "Server:" and "Composing models:" figures: the deltas of
/v2/models/<m>/stats of the ensemble and each composing model, per request):
  request   the ensemble's average request latency on the server (receives -> response ready)
  compute   the composing models' compute_infer, summed over the three steps (each request in a
            batch is credited with its batch's compute time, as Triton does)
  queue     the composing models' queue time, summed
  in/out    the composing models' compute_input + compute_output, summed
  other     request - compute - queue - in/out: the ensemble's own orchestration and handing
            tensors between steps
  outside   1 - compute / request: the share of the server-side request time outside model compute
  client    perf_analyzer's average latency (adds the frontend, the protocol and the client)
The same split from this script's own /stats snapshots before and after each whole
perf_analyzer run (warm-up and every stability window included) is in summary.json
("whole_run") as a cross-check. Every run must exit 0, print no error line, and leave the failure
counts unchanged.

  .venv/bin/python loadtests/minilm.py [--server PATH] [--repeats 2] [--interval-ms 3000]

Needs a server built from a commit with the tokenizer and pooling backends (befafdb or later).
Results: loadtests/out/minilm-<time>/summary.{md,json}, perf_analyzer logs and CSVs, server.log.
"""

import argparse
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import PAError, median, spread  # noqa: E402

MODELS = ["minilm", "minilm_tokenizer", "minilm_encoder", "minilm_pooling"]
STEPS = MODELS[1:]
CONCURRENCIES = (1, 16)
PROTOCOLS = ("grpc", "http")

WORDS = ("the a of to and in is that for it with as was on be at by this from or an are not have "
         "but which one all were we when there can more if will would about their what so up out "
         "model server request batch token embedding sentence vector search query document latency "
         "throughput queue thread core memory network client protocol tensor shape weight layer "
         "attention pooling normalise cosine similarity index retrieval text language machine data "
         "quick brown fox jumps over lazy dog river mountain city morning evening coffee train "
         "station library garden window music picture question answer people world time year day").split()


def corpus(n=64, seed=7):
    r = random.Random(seed)
    out = []
    for _ in range(n):
        words = [r.choice(WORDS) for _ in range(r.randint(6, 30))]
        s = " ".join(words)
        out.append(s[0].upper() + s[1:] + r.choice([".", ".", "?", "!"]))
    return out


def write_input_data(path, sentences):
    with open(path, "w") as f:
        json.dump({"data": [{"TEXT": [s]} for s in sentences]}, f)


def token_counts(sentences):
    """Tokens per sentence with the server's tokenizer.json (Python `tokenizers`, when installed)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    t = Tokenizer.from_file(os.path.join(common.DEFAULT_REPO, "minilm_tokenizer", "1", "tokenizer.json"))
    t.no_padding()
    return [len(e.ids) for e in t.encode_batch(sentences)]


def full_stats(base, model):
    """inference_stats of one model: {field: (count, ns)} plus inference/execution counts."""
    st = common.get_json(f"{base}/v2/models/{model}/stats")
    out = {"inference_count": 0, "execution_count": 0}
    for ms in st.get("model_stats", []):
        out["inference_count"] += int(ms.get("inference_count", 0))
        out["execution_count"] += int(ms.get("execution_count", 0))
        for k, v in ms.get("inference_stats", {}).items():
            c, ns = out.get(k, (0, 0))
            out[k] = (c + int(v.get("count", 0)), ns + int(v.get("ns", 0)))
    return out


def snapshot(base):
    return {m: full_stats(base, m) for m in MODELS}


def split(before, after):
    """Per-request time split (µs) of the ensemble from two snapshots."""
    def d(m, k):
        (c0, n0), (c1, n1) = before[m].get(k, (0, 0)), after[m].get(k, (0, 0))
        return c1 - c0, n1 - n0

    n_req, req_ns = d("minilm", "success")
    if n_req <= 0:
        return None
    per = lambda ns: ns / n_req / 1000.0  # noqa: E731  (µs per ensemble request)
    out = {"requests": n_req, "request_us": per(req_ns), "steps": {}}
    compute = queue = io = 0.0
    for m in STEPS:
        c_cnt, c_ns = d(m, "compute_infer")
        _, q_ns = d(m, "queue")
        _, i_ns = d(m, "compute_input")
        _, o_ns = d(m, "compute_output")
        execs = after[m]["execution_count"] - before[m]["execution_count"]
        infs = after[m]["inference_count"] - before[m]["inference_count"]
        out["steps"][m] = {"requests": c_cnt, "compute_us": per(c_ns), "queue_us": per(q_ns),
                           "in_out_us": per(i_ns + o_ns),
                           "batch_efficiency": infs / execs if execs else None}
        compute += per(c_ns)
        queue += per(q_ns)
        io += per(i_ns + o_ns)
        fails = after[m].get("fail", (0, 0))[0] - before[m].get("fail", (0, 0))[0]
        out.setdefault("step_failures", 0)
        out["step_failures"] += fails
    out.update(compute_us=compute, queue_us=queue, in_out_us=io,
               other_us=out["request_us"] - compute - queue - io,
               outside_share=1.0 - compute / out["request_us"])
    return out


LAT_RE = re.compile(r"Avg request latency: (\d+) usec \((.*?)\)")


def parse_pa_split(text):
    """The ensemble's and each composing model's server-side figures from the last concurrency
    block of perf_analyzer's text output, as the same split as split()."""
    block = text.split(common.SUMMARY_LINE)[0].rsplit("Request concurrency:", 1)[-1]
    server, _, composing = block.partition("Composing models:")
    m = LAT_RE.search(server)
    if not m or not composing:
        return None
    out = {"request_us": float(m.group(1)), "steps": {}}
    compute = queue = io = 0.0
    for name in STEPS:
        part = composing.split(f"{name}, version:", 1)
        if len(part) < 2:
            return None
        body = part[1].split(", version:", 1)[0]
        lm = LAT_RE.search(body)
        parts = {k: float(v) for k, v in (re.match(r"\s*([a-z ]+?)\s+(\d+) usec", x).groups()
                                          for x in lm.group(2).split("+"))}
        inf = re.search(r"Inference count: (\d+)", body)
        ex = re.search(r"Execution count: (\d+)", body)
        st = {"compute_us": parts.get("compute infer", 0.0), "queue_us": parts.get("queue", 0.0),
              "in_out_us": parts.get("compute input", 0.0) + parts.get("compute output", 0.0),
              "batch_efficiency": int(inf.group(1)) / int(ex.group(1)) if inf and ex and int(ex.group(1)) else None}
        out["steps"][name] = st
        compute += st["compute_us"]
        queue += st["queue_us"]
        io += st["in_out_us"]
    out.update(compute_us=compute, queue_us=queue, in_out_us=io,
               other_us=out["request_us"] - compute - queue - io,
               outside_share=1.0 - compute / out["request_us"])
    return out


def embedding_check(base):
    body = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                                   "data": ["A man is eating food."]}]}).encode()
    _, out = common.http("POST", f"{base}/v2/models/minilm/infer", body, timeout=30)
    (o,) = json.loads(out)["outputs"]
    assert o["name"] == "EMBEDDING" and o["shape"] == [1, 384], o["shape"]
    norm = sum(v * v for v in o["data"]) ** 0.5
    assert abs(norm - 1.0) < 1e-4, norm


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap, interval_ms=3000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    for p in (args.server, args.perf_analyzer, args.onnxruntime_library):
        if not os.path.exists(p):
            sys.exit(f"missing {p} (run loadtests/setup.sh / build the server first)")
    for p in ("minilm_encoder/1/model.onnx", "minilm_tokenizer/1/tokenizer.json"):
        if not os.path.exists(os.path.join(args.model_repository, p)):
            sys.exit(f"{args.model_repository}/{p} missing: run model_repository/fetch_models.py")
    out_dir, stamp = common.make_out_dir(args, "minilm")
    header = common.run_header(args)
    sentences = corpus()
    data_path = os.path.join(out_dir, "minilm_input.json")
    write_input_data(data_path, sentences)
    tokens = token_counts(sentences)
    runs, failures = [], []

    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=MODELS, ready=["minilm"], check=embedding_check, prefix="minilm-") as srv:

        def one(label, protocol, conc):
            srv.alive()
            name = f"minilm-{label}-{protocol}-c{conc}"
            before = snapshot(srv.base)
            try:
                r = common.run_pa(args.perf_analyzer, "minilm", srv.url(protocol), protocol, conc,
                                  os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                  extra=["--input-data", data_path], interval_ms=args.interval_ms,
                                  stability=args.stability, server=srv)
            except PAError as e:
                print(f"FAILED {name}: {e}", flush=True)
                failures.append({"run": name, "error": str(e)})
                return None
            whole = split(before, snapshot(srv.base))
            if whole is None or whole["step_failures"]:
                failures.append({"run": name, "error": f"composing-model failures or no requests: {whole}"})
                return None
            with open(os.path.join(out_dir, name + ".log")) as f:
                s = parse_pa_split(f.read().rsplit("$ ", 1)[-1])
            if s is None:
                failures.append({"run": name, "error": "no composing-model figures in perf_analyzer's output"})
                return None
            r.update(label=label, protocol=protocol, split=s, whole_run=whole)
            print(f"{name:>26}: {r['infer_per_s']:>7.1f} sentences/s  client avg "
                  f"{r.get('avg_latency_us', 0):>7} µs  server request {s['request_us']:>7.0f} µs  "
                  f"compute {s['compute_us']:>7.0f} µs  queue {s['queue_us']:>7.0f} µs  "
                  f"outside {100 * s['outside_share']:.1f} %", flush=True)
            return r

        for protocol in PROTOCOLS:
            one("warmup", protocol, 1)
        for i in range(args.repeats):
            order = list(PROTOCOLS) if i % 2 == 0 else list(reversed(PROTOCOLS))
            for conc in CONCURRENCIES:
                for protocol in order:
                    r = one(f"rep{i + 1}", protocol, conc)
                    if r is not None:
                        r["repeat"] = i + 1
                        runs.append(r)

    def col(protocol, conc, f):
        return [f(r) for r in runs if r["protocol"] == protocol and r["concurrency"] == conc]

    table = {}
    for protocol in PROTOCOLS:
        for conc in CONCURRENCIES:
            table[f"{protocol} c{conc}"] = {
                "sentences_per_s": median(col(protocol, conc, lambda r: r["infer_per_s"])),
                "client_avg_us": median(col(protocol, conc, lambda r: r.get("avg_latency_us", 0))),
                "request_us": median(col(protocol, conc, lambda r: r["split"]["request_us"])),
                "compute_us": median(col(protocol, conc, lambda r: r["split"]["compute_us"])),
                "queue_us": median(col(protocol, conc, lambda r: r["split"]["queue_us"])),
                "outside_share": median(col(protocol, conc, lambda r: r["split"]["outside_share"])),
            }
    summary = {"header": header, "repeats": args.repeats, "interval_ms": args.interval_ms,
               "stability_pct": args.stability, "corpus": sentences, "tokens": tokens,
               "runs": runs, "failures": failures, "median": table}
    tok = (f"{sum(tokens) / len(tokens):.1f} tokens on average ({min(tokens)}–{max(tokens)}, with "
           "[CLS]/[SEP])") if tokens else "token counts not computed (no `tokenizers`)"
    n_requests = sum(r.get("client_request_count", 0) for r in runs)
    lines = [
        f"# minilm ensemble: sentences/s and time outside model compute ({stamp})", "",
        f"perf_analyzer {header['perf_analyzer']}, server {header['server']} (built from "
        f"{header['server_built_from']}), git HEAD {header['git_head'][:12]}, load average at start "
        f"{header['loadavg_at_start']:.2f} on {header['nproc']} cores. `minilm` only (+ its 3 composing "
        f"models), batch 1 (one sentence per request), --input-data with {len(sentences)} sentences, "
        f"{tok}; -p {args.interval_ms} ms -s {args.stability} (retried at {2 * args.stability}); "
        f"{args.repeats} repeats after one warm-up per protocol, the protocol order reversed every "
        "repeat. Medians over repeats, min–max in brackets.", "",
        f"Errors: {len(runs)} measured runs, {n_requests} requests counted by perf_analyzer in the measured "
        f"windows; {len(failures)} failed runs"
        + (": " + "; ".join(f["run"] + ": " + f["error"] for f in failures) if failures else
           " (every run exited 0, printed no error line, and no model's failure count grew)."), "",
        "| protocol | concurrency | sentences/s | client avg µs | server request µs | model compute µs "
        "| queue µs | outside model compute |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for protocol in PROTOCOLS:
        for conc in CONCURRENCIES:
            g = lambda f: col(protocol, conc, f)  # noqa: E731
            thr = g(lambda r: r["infer_per_s"])
            share = [100 * v for v in g(lambda r: r["split"]["outside_share"])]
            lines.append(
                f"| {protocol} | {conc} | {median(thr):.1f} ({spread(thr)}) "
                f"| {median(g(lambda r: r.get('avg_latency_us', 0))):.0f} "
                f"| {median(g(lambda r: r['split']['request_us'])):.0f} "
                f"| {median(g(lambda r: r['split']['compute_us'])):.0f} "
                f"| {median(g(lambda r: r['split']['queue_us'])):.0f} "
                f"| {median(share):.1f} % ({spread(share)}) |")
    lines += ["", "Per step (medians; µs per ensemble request; batch efficiency = inferences / executions):", "",
              "| protocol | concurrency | " + " | ".join(f"{m} compute / queue / batch" for m in STEPS)
              + " | in/out µs | other µs |",
              "| --- | --- |" + " --- |" * (len(STEPS) + 2)]
    for protocol in PROTOCOLS:
        for conc in CONCURRENCIES:
            g = lambda f: median(col(protocol, conc, f))  # noqa: E731
            cells = []
            for m in STEPS:
                be = g(lambda r: r["split"]["steps"][m]["batch_efficiency"] or 0)
                cells.append(f"{g(lambda r: r['split']['steps'][m]['compute_us']):.0f} / "
                             f"{g(lambda r: r['split']['steps'][m]['queue_us']):.0f} / {be:.2f}")
            lines.append(f"| {protocol} | {conc} | " + " | ".join(cells)
                         + f" | {g(lambda r: r['split']['in_out_us']):.0f} | {g(lambda r: r['split']['other_us']):.0f} |")
    lines += ["", "\"outside model compute\" = 1 − (composing models' compute_infer per request) / (the "
              "ensemble's server-side request duration); at concurrency 16 it is mostly queueing behind the "
              "encoder. The client-side latency adds the frontend, the protocol and perf_analyzer."]
    summary["n_requests"] = n_requests
    common.write_summary(out_dir, summary, lines)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
