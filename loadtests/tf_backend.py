#!/usr/bin/env python3
"""The TensorFlow backend's figures, each a ratio within one run (issue 27, point 5):

  vs ceiling  Tritium's tf_mlp (the mlp of model_repository/ as a SavedModel: 256 -> 2048 ->
              2048 -> 256, Relu) over gRPC at batch 1, c1 and c16 (dynamic batching on), against
              loadtests/tf_ceiling.py: the same SavedModel run in-process by TensorFlow itself
              (a session's run, one caller, TensorFlow's default threads) at batch 1 (c1's
              ceiling: items/s and p50) and at its best of batch 1 and 16 (c16's ceiling, items/s).
  mixed load  the same network on the three frameworks in one server: mlp (ONNX Runtime),
              torch_mlp (libtorch) and tf_mlp (TensorFlow), one perf_analyzer per model at once
              (gRPC, batch 1, c4 each), each model's items/s against the same model alone.

Every repeat runs every subject; medians and min-max over repeats. Every perf_analyzer run must
exit 0 with no error line and leave the server's failure counts unchanged.

  .venv/bin/python loadtests/tf_backend.py [--repeats 3] --server target/release/tritium

Needs loadtests/setup.sh (perf_analyzer), scripts/setup.sh (TensorFlow and the SavedModels) and
a release build with the feature (`cargo build --release --locked -p tritium --features
tensorflow`). Results: loadtests/out/tensorflow-<time>/summary.{md,json}.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading

import common
from common import PAError, median, spread

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TF_REPO = os.path.join(ROOT, "examples", "tensorflow_models")
TF_PYTHON = os.path.join(ROOT, ".tensorflow", "venv", "bin", "python")
MIXED = ("mlp", "torch_mlp", "tf_mlp")
MIXED_CONCURRENCY = 4


def ceiling(seconds):
    model = os.path.join(TF_REPO, "tf_mlp", "1", "model.savedmodel")
    out = subprocess.run([TF_PYTHON, os.path.join(HERE, "tf_ceiling.py"), "--model", model, "--batch", "1,16",
                          "--seconds", str(seconds)], check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in out.stdout.decode().splitlines() if line.startswith("{")]
    return {r["batch"]: r for r in rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ceiling-seconds", type=float, default=4.0)
    args = ap.parse_args()
    for p in (args.server, args.perf_analyzer, TF_PYTHON):
        if not os.path.exists(p):
            sys.exit(f"missing {p} (run loadtests/setup.sh, scripts/setup.sh and the release build first)")
    for m in ("tf_mlp/1/model.savedmodel/saved_model.pb",):
        if not os.path.exists(os.path.join(TF_REPO, m)):
            sys.exit(f"{TF_REPO}/{m} missing: run scripts/setup.sh")
    out_dir, _ = common.make_out_dir(args, "tf_backend")
    header = common.run_header(args)
    runs, failures, ceilings = [], [], []

    def add_tf_models(repo):
        shutil.copytree(os.path.join(TF_REPO, "tf_mlp"), os.path.join(repo, "tf_mlp"))

    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=["mlp", "torch_mlp"], edit_repo=add_tf_models, ready=list(MIXED),
                             prefix="tensorflow-") as srv:

        def one(label, model, conc, tag=""):
            srv.alive()
            name = f"{label}-{model}-c{conc}{tag}"
            try:
                r = common.run_pa(args.perf_analyzer, model, srv.url("grpc"), "grpc", conc,
                                  os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                  interval_ms=args.interval_ms, stability=args.stability, server=srv)
            except PAError as e:
                print(f"FAILED {name}: {e}", flush=True)
                failures.append({"run": name, "error": str(e)})
                return None
            r.update(label=label, model=model, mixed=bool(tag))
            print(f"{name:>34}: {r['infer_per_s']:>8.1f} items/s  p50 {r['p50_us']:>7} µs", flush=True)
            return r

        def mixed(label):
            results = {}
            threads = [threading.Thread(target=lambda m=m: results.__setitem__(m, one(label, m, MIXED_CONCURRENCY,
                                                                                    "-mixed")))
                       for m in MIXED]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return results

        for model in MIXED:
            one("warmup", model, 4)
        for i in range(args.repeats):
            k = i + 1
            c = ceiling(args.ceiling_seconds)
            c["repeat"] = k
            ceilings.append(c)
            print(f"tf in-process: b1 {c[1]['items_per_s']:.0f}/s p50 {c[1]['p50_us']} µs, "
                  f"b16 {c[16]['items_per_s']:.0f}/s", flush=True)
            for conc in (1, 16):
                r = one(f"rep{k}", "tf_mlp", conc)
                if r is not None:
                    r["repeat"] = k
                    runs.append(r)
            for model in MIXED:
                r = one(f"rep{k}", model, MIXED_CONCURRENCY, "-alone")
                if r is not None:
                    r.update(repeat=k, mixed=False, alone=True)
                    runs.append(r)
            for model, r in mixed(f"rep{k}").items():
                if r is not None:
                    r["repeat"] = k
                    runs.append(r)

    def pick(model, conc, repeat, mixed=False, alone=False):
        for r in runs:
            if (r["model"], r["concurrency"], r["repeat"], r.get("mixed"), r.get("alone", False)) == \
                    (model, conc, repeat, mixed, alone):
                return r
        return None

    ratios = {"tf_c1_vs_inprocess_b1_items": [], "tf_c1_p50_over_inprocess_b1_p50": [],
              "tf_c16_vs_inprocess_best_items": []}
    ratios.update({f"{m}_mixed_vs_alone": [] for m in MIXED})
    for c in ceilings:
        k = c["repeat"]
        r1, r16 = pick("tf_mlp", 1, k), pick("tf_mlp", 16, k)
        if r1:
            ratios["tf_c1_vs_inprocess_b1_items"].append(r1["infer_per_s"] / c[1]["items_per_s"])
            ratios["tf_c1_p50_over_inprocess_b1_p50"].append(r1["p50_us"] / c[1]["p50_us"])
        if r16:
            best = max(c[1]["items_per_s"], c[16]["items_per_s"])
            ratios["tf_c16_vs_inprocess_best_items"].append(r16["infer_per_s"] / best)
        for m in MIXED:
            alone, mixed_r = pick(m, MIXED_CONCURRENCY, k, alone=True), pick(m, MIXED_CONCURRENCY, k, mixed=True)
            if alone and mixed_r:
                ratios[f"{m}_mixed_vs_alone"].append(mixed_r["infer_per_s"] / alone["infer_per_s"])

    lines = [f"# TensorFlow backend: {header['time']}, server built from {header['server_built_from']}", "",
             f"perf_analyzer {header['perf_analyzer']}, gRPC, batch 1; {args.repeats} repeats; {header['nproc']} "
             f"cores; load average at start {header['loadavg_at_start']:.2f}; failed runs: {len(failures)}", "",
             "| ratio | median (min–max) |", "| --- | --- |"]
    for key, xs in ratios.items():
        lines.append(f"| {key} | {median(xs):.2f} ({spread(xs)}) |" if xs else f"| {key} | no data |")
    lines += ["", "| subject | concurrency | items/s median (min–max) | p50 µs median |", "| --- | --- | --- | --- |"]
    for model in MIXED:
        for conc in sorted({r["concurrency"] for r in runs if r["model"] == model}):
            for kind in ("", "alone", "mixed"):
                xs = [r for r in runs if r["model"] == model and r["concurrency"] == conc and
                      (kind == "" and not r.get("mixed") and not r.get("alone") or
                       kind == "alone" and r.get("alone") or kind == "mixed" and r.get("mixed"))]
                if xs:
                    label = f"{model}{' (' + kind + ')' if kind else ''}"
                    lines.append(f"| {label} | {conc} | {median([r['infer_per_s'] for r in xs]):.0f} "
                                 f"({spread([r['infer_per_s'] for r in xs])}) | {median([r['p50_us'] for r in xs]):.0f} |")
    for b in (1, 16):
        xs = [c[b]["items_per_s"] for c in ceilings]
        ps = [c[b]["p50_us"] for c in ceilings]
        lines.append(f"| tf_mlp in-process (TensorFlow's session), batch {b} | 1 caller | {median(xs):.0f} "
                     f"({spread(xs)}) | {median(ps):.0f} |")
    summary = {"header": header, "ratios": ratios, "runs": runs, "ceilings": ceilings, "failures": failures}
    common.write_summary(out_dir, summary, lines)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
