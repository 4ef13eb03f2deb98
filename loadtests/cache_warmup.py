#!/usr/bin/env python3
"""The response cache, measured on the bundled `mlp` (ONNX, 256 -> 2048 -> 2048 -> 256), and
model warmup, measured on the bundled `minilm_encoder` (ONNX, all-MiniLM-L6-v2's transformer,
sequences of 128 tokens), in one server run each.

Cache: one server with `--cache-config local,size=<--cache-bytes>` and three copies of `mlp`:
  mlp_hit   response_cache on; perf_analyzer sends one fixed input (--input-data zero): after the
            first request every one is a hit
  mlp_miss  response_cache on; perf_analyzer cycles through --distinct random inputs, more than
            the cache holds (an answer costs 1,047 bytes), so each comes back evicted: every one
            is a miss (lookup + model + insertion), except at most what the cache holds when a
            run starts over the inputs the previous run ended on
  mlp_off   no response_cache; the same distinct inputs (the model alone)
perf_analyzer runs each in turn at concurrency 1 (HTTP, binary tensors), REPEATS times, order
rotating; the server's statistics confirm what each run was (hits, misses, executions).

Warmup: ROUNDS fresh servers, each with `enc_warm` (model_warmup: one zero_data sample of 128
tokens) and `enc_cold` (none); once both are READY, the first request to each (128 tokens) is
timed (one new HTTP connection each, the order alternating by round), then a second one. The
same servers hold `id_warm` / `id_cold`: the built-in identity backend with
`first_execute_delay_ms` (each instance's first execution takes FIRST_RUN_MS more, a stand-in for
a model that compiles or allocates on its first run), with and without a warmup sample.

  loadtests/setup.sh                              # perf_analyzer, once
  .venv/bin/python loadtests/cache_warmup.py --server target/debug/tritium [--repeats 3]

Only the standard library is used. Results go to loadtests/out/cache_warmup-<time>/.
"""

import argparse
import http.client
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

BASE_MODEL = "mlp"
WARM_MODEL = "minilm_encoder"
TOKENS = 128
CACHED = "\nresponse_cache { enable: true }\n"
WARMUP = "\nmodel_warmup [ { name: \"zeros\" batch_size: 1\n" + "".join(
    f'  inputs {{ key: "{i}" value: {{ data_type: TYPE_INT64 dims: [ {TOKENS} ] zero_data: true }} }}\n'
    for i in ("input_ids", "attention_mask", "token_type_ids")) + "} ]\n"


FIRST_RUN_MS = 300
IDENTITY = f"""
name: "{{name}}"
backend: "identity"
max_batch_size: 0
input [ {{{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}}} ]
output [ {{{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}}} ]
parameters {{{{ key: "first_execute_delay_ms" value: {{{{ string_value: "{FIRST_RUN_MS}" }}}} }}}}
"""
IDENTITY_WARMUP = """
model_warmup [ { name: "zeros" batch_size: 1
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
"""


def add_identity(repo, name, extra):
    os.makedirs(os.path.join(repo, name, "1"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(IDENTITY.format(name=name) + extra)


def copy_model(repo, new, extra, base=BASE_MODEL):
    src = os.path.join(repo, base)
    dst = os.path.join(repo, new)
    os.makedirs(os.path.join(dst, "1"))
    os.link(os.path.join(src, "1", "model.onnx"), os.path.join(dst, "1", "model.onnx"))
    text = open(os.path.join(src, "config.pbtxt")).read().replace(f'name: "{base}"', f'name: "{new}"')
    with open(os.path.join(dst, "config.pbtxt"), "w") as f:
        f.write(text + extra)


def stats(base, model):
    s = common.get_json(f"{base}/v2/models/{model}/stats")["model_stats"][0]
    inf = s["inference_stats"]
    return {"exec": int(s["execution_count"]), "success": int(inf["success"]["count"]),
            "hit": int(inf["cache_hit"]["count"]), "miss": int(inf["cache_miss"]["count"])}


def cache_run(args, out_dir):
    def edit(repo):
        copy_model(repo, "mlp_hit", CACHED)
        copy_model(repo, "mlp_miss", CACHED)
        copy_model(repo, "mlp_off", "")

    rng = random.Random(7)
    distinct = os.path.join(out_dir, "distinct_inputs.json")
    with open(distinct, "w") as f:
        json.dump({"data": [{"INPUT0": [round(rng.uniform(-1, 1), 4) for _ in range(256)]}
                            for _ in range(args.distinct)]}, f)
    modes = {"mlp_hit": ["--input-data", "zero"], "mlp_miss": ["--input-data", distinct],
             "mlp_off": ["--input-data", distinct]}
    rows = {m: [] for m in modes}
    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=[BASE_MODEL], ready=tuple(modes), edit_repo=edit, prefix="cache-",
                             log_name="cache-server.log",
                             extra_args=[f"--cache-config=local,size={args.cache_bytes}"]) as srv:
        order = list(modes)
        for rep in range(args.repeats):
            for model in order[rep % 3:] + order[:rep % 3]:
                before = stats(srv.base, model)
                r = common.run_pa(args.perf_analyzer, model, srv.url("http"), "http", 1,
                                  os.path.join(out_dir, f"{model}-{rep}.csv"), os.path.join(out_dir, "pa.log"),
                                  extra=modes[model], interval_ms=args.interval_ms, stability=args.stability,
                                  server=srv)
                after = stats(srv.base, model)
                r["delta"] = {k: after[k] - before[k] for k in after}
                rows[model].append(r)
                d = r["delta"]
                print(f"{model} rep {rep}: p50 {r['p50_us']} us, p99 {r['p99_us']} us, "
                      f"{r['infer_per_s']:.0f}/s; hits {d['hit']}, misses {d['miss']}, executions {d['exec']}",
                      flush=True)
    return rows


def infer_once(port, model):
    if model.startswith("id_"):
        body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4],
                                       "data": [1.0, 2.0, 3.0, 4.0]}]}).encode()
        return post(port, model, body)
    ids = [101] + [2000 + i for i in range(TOKENS - 2)] + [102]
    body = json.dumps({"inputs": [
        {"name": "input_ids", "datatype": "INT64", "shape": [1, TOKENS], "data": ids},
        {"name": "attention_mask", "datatype": "INT64", "shape": [1, TOKENS], "data": [1] * TOKENS},
        {"name": "token_type_ids", "datatype": "INT64", "shape": [1, TOKENS], "data": [0] * TOKENS},
    ]}).encode()
    return post(port, model, body)


def post(port, model, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    start = time.perf_counter()
    conn.request("POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    elapsed = time.perf_counter() - start
    conn.close()
    assert resp.status == 200, data[:300]
    return elapsed * 1e6


MODELS = ("enc_warm", "enc_cold", "id_warm", "id_cold")


def warmup_run(args, out_dir):
    def edit(repo):
        copy_model(repo, "enc_warm", WARMUP, base=WARM_MODEL)
        copy_model(repo, "enc_cold", "", base=WARM_MODEL)
        add_identity(repo, "id_warm", IDENTITY_WARMUP)
        add_identity(repo, "id_cold", "")

    rounds = []
    for i in range(args.rounds):
        with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                                 models=[WARM_MODEL], ready=MODELS, edit_repo=edit,
                                 prefix="warmup-", log_name=f"warmup-server-{i}.log") as srv:
            order = list(MODELS) if i % 2 == 0 else list(reversed(MODELS))
            first = {m: infer_once(srv.http_port, m) for m in order}
            second = {m: infer_once(srv.http_port, m) for m in order}
            rounds.append({"first": first, "second": second})
            print(f"round {i}: first " + ", ".join(f"{m} {first[m]:.0f} us" for m in MODELS) +
                  "; second " + ", ".join(f"{m} {second[m]:.0f} us" for m in MODELS), flush=True)
    return rounds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_args(ap, interval_ms=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--distinct", type=int, default=4000)
    ap.add_argument("--cache-bytes", type=int, default=1 << 18)
    ap.add_argument("--skip-cache", action="store_true", help="measure warmup only")
    args = ap.parse_args()
    common.check_inputs(args, [BASE_MODEL, WARM_MODEL])
    out_dir, _ = common.make_out_dir(args, "cache_warmup")
    header = common.run_header(args)
    cache = {m: [] for m in ("mlp_hit", "mlp_miss", "mlp_off")} if args.skip_cache else cache_run(args, out_dir)
    warm = warmup_run(args, out_dir)
    med = common.median
    lines = [f"# Response cache and warmup ({header['time']}, server {header['server']}, "
             f"{header['nproc']} cores, load {header['loadavg_at_start']:.1f})", "",
             f"## Cache: perf_analyzer c=1, HTTP binary, {args.repeats} runs each, same server", "",
             "| model | p50 µs (median) | p99 µs (median) | infer/s (median) | hits | misses | executions |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for model, rs in cache.items():
        lines.append(f"| {model} | {med(r['p50_us'] for r in rs):.0f} | {med(r['p99_us'] for r in rs):.0f} | "
                     f"{med(r['infer_per_s'] for r in rs):.0f} | {sum(r['delta']['hit'] for r in rs)} | "
                     f"{sum(r['delta']['miss'] for r in rs)} | {sum(r['delta']['exec'] for r in rs)} |")
    hit, miss = med(r["p50_us"] for r in cache["mlp_hit"]), med(r["p50_us"] for r in cache["mlp_miss"]) or 1
    warm_first = med(r["first"]["enc_warm"] for r in warm)
    cold_first = med(r["first"]["enc_cold"] for r in warm)
    lines += ["", f"hit / miss p50 latency: {hit / miss:.2f}", "",
              f"## Warmup: first request after READY, {args.rounds} fresh servers", "",
              "| model | first request µs (median, range) | second request µs (median) |", "| --- | --- | --- |"]
    for m in MODELS:
        firsts = [r["first"][m] for r in warm]
        lines.append(f"| {m} | {med(firsts):.0f} ({common.spread(firsts)}) | {med(r['second'][m] for r in warm):.0f} |")
    id_ratio = med(r["first"]["id_warm"] for r in warm) / med(r["first"]["id_cold"] for r in warm)
    lines += ["", f"first request, warmed / not warmed (medians): minilm_encoder {warm_first / cold_first:.2f}, "
              f"identity with a {FIRST_RUN_MS} ms first run {id_ratio:.3f}"]
    common.write_summary(out_dir, {"header": header, "cache": cache, "warmup": warm}, lines)


if __name__ == "__main__":
    main()
