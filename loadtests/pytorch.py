#!/usr/bin/env python3
"""The PyTorch backend's figures, each a ratio within one run (issue 15):

  vs ceiling  Tritium's torch_mlp (TorchScript on libtorch through tch) saturated with client
              batches (perf_analyzer gRPC -b 16 at c4 and -b 64 at c2, items/s) against
              loadtests/ceiling's `torch_ceiling`: the same TorchScript file run in-process
              through tch as the backend runs it (one CModule, bytes copied in, forward without
              autograd, output copied out), libtorch's default intra-op threads as Tritium's one
              instance, its best items/s at batch 16 and 64. No server, no client: the most a
              server could do with this model on these cores.
  vs bound    each client batch size against what the cores physically leave once the client
              runs on them too: the ceiling's items/s at that batch size times the share of the
              cores perf_analyzer did not use in that run (its rusage over the run).
  vs ONNX     the same network and weights on both backends: torch_mlp against mlp (ONNX Runtime)
              at the same client batches and at batch-1 gRPC c16; and the MiniLM pipeline with
              its encoder on libtorch (minilm_torch) against the ONNX one (minilm), sentences/s at
              c1 and c16 over gRPC with the corpus of loadtests/minilm.py.

Every repeat runs every subject (the order of torch and ONNX alternated each repeat); medians
and min-max over repeats. Every perf_analyzer run must exit 0 with no error line and leave the
server's failure counts unchanged.

  .venv/bin/python loadtests/pytorch.py [--repeats 3] [--interval-ms 2000]
  .venv/bin/python loadtests/pytorch.py --summarize loadtests/out/pytorch-<time>   (tables again)

Needs loadtests/setup.sh (perf_analyzer) and release builds of the server and the ceiling
(`CARGO_TARGET_DIR=/tmp/tritium-bench-target cargo build --release --locked -p tritium -p
tritium-ceiling`). Results: loadtests/out/pytorch-<time>/summary.{md,json}.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import common
import minilm
from common import PAError, median, spread

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["mlp", "torch_mlp", "minilm", "minilm_torch", "minilm_tokenizer", "minilm_encoder", "minilm_encoder_torch",
          "minilm_pooling"]
CLIENT_BATCHES = ((16, 4), (64, 2))  # (perf_analyzer -b, concurrency)


def ceiling(path, model_file, seconds):
    out = subprocess.run([path, "--model", model_file, "--dims", "256", "--batch", "16,64", "--seconds",
                          str(seconds), "--repeats", "1"], check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in out.stdout.decode().splitlines() if line.startswith("{")]
    return {r["batch"]: r["items_per_s"] for r in rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ceiling", default=os.path.join(os.path.dirname(common.DEFAULT_SERVER), "torch_ceiling"))
    ap.add_argument("--ceiling-seconds", type=float, default=4.0)
    ap.add_argument("--summarize", metavar="OUT_DIR", help="recompute the tables of an earlier run's summary.json")
    args = ap.parse_args()
    if args.summarize:
        with open(os.path.join(args.summarize, "summary.json")) as f:
            summarize(args.summarize, json.load(f))
        return
    for p in (args.server, args.perf_analyzer, args.ceiling):
        if not os.path.exists(p):
            sys.exit(f"missing {p} (run loadtests/setup.sh and the release build first)")
    for m in ("torch_mlp/1/model.pt", "minilm_encoder_torch/1/model.pt", "mlp/1/model.onnx"):
        if not os.path.exists(os.path.join(args.model_repository, m)):
            sys.exit(f"{args.model_repository}/{m} missing: run scripts/setup.sh")
    out_dir, _ = common.make_out_dir(args, "pytorch")
    header = common.run_header(args)
    data_path = os.path.join(out_dir, "minilm_input.json")
    minilm.write_input_data(data_path, minilm.corpus())
    torch_file = os.path.join(args.model_repository, "torch_mlp", "1", "model.pt")
    runs, failures, ceilings = [], [], []

    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir, models=MODELS,
                             ready=["mlp", "torch_mlp", "minilm", "minilm_torch"], prefix="pytorch-") as srv:

        def one(label, model, batch, conc, extra=()):
            srv.alive()
            name = f"{label}-{model}-b{batch}-c{conc}"
            cpu0, pa0, t0 = common.tree_cpu_s(srv.proc.pid), common.children_cpu_s(), time.monotonic()
            try:
                r = common.run_pa(args.perf_analyzer, model, srv.url("grpc"), "grpc", conc,
                                  os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                  extra=list(extra), interval_ms=args.interval_ms, stability=args.stability,
                                  server=srv, batch=batch)
            except PAError as e:
                print(f"FAILED {name}: {e}", flush=True)
                failures.append({"run": name, "error": str(e)})
                return None
            wall = time.monotonic() - t0
            r.update(label=label, model=model, batch=batch,
                     server_cores=(common.tree_cpu_s(srv.proc.pid) - cpu0) / wall,
                     client_cores=(common.children_cpu_s() - pa0) / wall)
            print(f"{name:>34}: {r['infer_per_s']:>8.1f} items/s  p50 {r['p50_us']:>7} µs", flush=True)
            return r

        for model in ("torch_mlp", "mlp"):
            one("warmup", model, 16, 4)
        for i in range(args.repeats):
            pair = ("torch_mlp", "mlp") if i % 2 == 0 else ("mlp", "torch_mlp")
            c = ceiling(args.ceiling, torch_file, args.ceiling_seconds)
            c["repeat"] = i + 1
            ceilings.append(c)
            print(f"torch_ceiling: b16 {c[16]:.0f}/s  b64 {c[64]:.0f}/s", flush=True)
            for batch, conc in CLIENT_BATCHES + ((1, 16),):
                for model in pair:
                    r = one(f"rep{i + 1}", model, batch, conc)
                    if r is not None:
                        r["repeat"] = i + 1
                        runs.append(r)
            for conc in (1, 16):
                for model in (("minilm_torch", "minilm") if i % 2 == 0 else ("minilm", "minilm_torch")):
                    r = one(f"rep{i + 1}", model, 1, conc, extra=["--input-data", data_path])
                    if r is not None:
                        r["repeat"] = i + 1
                        runs.append(r)

    summary = {"header": header, "runs": runs, "ceilings": ceilings, "failures": failures}
    summarize(out_dir, summary)
    if failures:
        sys.exit(1)


def summarize(out_dir, summary):
    """Ratios and tables from a run's `runs` and `ceilings` (also for an earlier summary.json)."""
    header, runs, ceilings, failures = summary["header"], summary["runs"], summary["ceilings"], summary["failures"]
    ceilings = [{(int(k) if k.isdigit() else k): v for k, v in c.items()} for c in ceilings]  # JSON keys
    repeats = len(ceilings)
    def pick(model, batch, conc, repeat):
        for r in runs:
            if (r["model"], r["batch"], r["concurrency"], r["repeat"]) == (model, batch, conc, repeat):
                return r["infer_per_s"]
        return None

    def client_cores(model, batch, conc, repeat):
        for r in runs:
            if (r["model"], r["batch"], r["concurrency"], r["repeat"]) == (model, batch, conc, repeat):
                return r.get("client_cores")
        return None

    ratios = {"torch_sat_vs_ceiling": [], "torch_b16_vs_ceiling": [], "torch_b64_vs_ceiling": [],
              "torch_b16_vs_bound": [], "torch_b64_vs_bound": [], "torch_vs_onnx_mlp_sat": [],
              "torch_vs_onnx_mlp_b1_c16": [],
              "minilm_torch_vs_onnx_c1": [], "minilm_torch_vs_onnx_c16": []}
    for c in ceilings:
        k = c["repeat"]
        best_torch = max(filter(None, (pick("torch_mlp", b, n, k) for b, n in CLIENT_BATCHES)), default=None)
        best_onnx = max(filter(None, (pick("mlp", b, n, k) for b, n in CLIENT_BATCHES)), default=None)
        if best_torch:
            ratios["torch_sat_vs_ceiling"].append(best_torch / max(c[16], c[64]))
        # The physical bound at each client batch: the ceiling's items/s at that batch size times the
        # share of the cores perf_analyzer left in the run.
        for b, n in CLIENT_BATCHES:
            got, client = pick("torch_mlp", b, n, k), client_cores("torch_mlp", b, n, k)
            if got and client is not None:
                bound = c[b] * (1 - client / (header.get("nproc") or 2))
                ratios[f"torch_b{b}_vs_ceiling"].append(got / c[b])
                ratios[f"torch_b{b}_vs_bound"].append(got / bound)
        if best_torch and best_onnx:
            ratios["torch_vs_onnx_mlp_sat"].append(best_torch / best_onnx)
        t, o = pick("torch_mlp", 1, 16, k), pick("mlp", 1, 16, k)
        if t and o:
            ratios["torch_vs_onnx_mlp_b1_c16"].append(t / o)
        for conc in (1, 16):
            t, o = pick("minilm_torch", 1, conc, k), pick("minilm", 1, conc, k)
            if t and o:
                ratios[f"minilm_torch_vs_onnx_c{conc}"].append(t / o)

    lines = [f"# PyTorch backend: {header['time']}, server built from {header['server_built_from']}", "",
             f"perf_analyzer {header['perf_analyzer']}, gRPC; {repeats} repeats; load average at start "
             f"{header['loadavg_at_start']:.2f}; failed runs: {len(failures)}", "",
             "| ratio | median (min–max) |", "| --- | --- |"]
    for key, xs in ratios.items():
        lines.append(f"| {key} | {median(xs):.2f} ({spread(xs)}) |" if xs else f"| {key} | no data |")
    lines += ["", "| subject | batch | concurrency | items/s median (min–max) |", "| --- | --- | --- | --- |"]
    for model in ("torch_mlp", "mlp", "minilm_torch", "minilm"):
        for batch, conc in sorted({(r["batch"], r["concurrency"]) for r in runs if r["model"] == model}):
            xs = [r["infer_per_s"] for r in runs if (r["model"], r["batch"], r["concurrency"]) == (model, batch, conc)]
            lines.append(f"| {model} | {batch} | {conc} | {median(xs):.0f} ({spread(xs)}) |")
    for b in (16, 64):
        xs = [c[b] for c in ceilings]
        lines.append(f"| torch_ceiling (in-process) | {b} | – | {median(xs):.0f} ({spread(xs)}) |")
    lines += ["", "| CPU µs per item | batch 16, c4 | batch 64, c2 |", "| --- | --- | --- |"]
    for who, key in (("perf_analyzer", "client_cores"), ("Tritium (whole process)", "server_cores")):
        cells = []
        for b, n in CLIENT_BATCHES:
            xs = [r[key] * 1e6 / r["infer_per_s"] for r in runs
                  if (r["model"], r["batch"], r["concurrency"]) == ("torch_mlp", b, n) and r.get(key) is not None]
            cells.append(f"{median(xs):.1f}" if xs else "-")
        lines.append(f"| {who}, torch_mlp | {cells[0]} | {cells[1]} |")

    summary["ratios"] = ratios
    common.write_summary(out_dir, summary, lines)


if __name__ == "__main__":
    main()
