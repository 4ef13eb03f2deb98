#!/usr/bin/env python3
"""The customer-service example under mixed load (issue 27, point 5): the three models of
examples/customer_service/models/ — `intent` (TorchScript), `keyword_spotter` (TensorFlow
SavedModel), `sentiment` (ONNX) — served by one server, one perf_analyzer per model at once
(gRPC, batch 1, the same concurrency each), each model's items/s against the same model alone
in the same repeat. Texts come from a fixed list of customer requests (perf_analyzer's random
BYTES would not be UTF-8, which a TorchScript List[str] refuses); audio is perf_analyzer's
random FP32.

Every repeat runs every subject; medians and min-max over repeats. Every perf_analyzer run must
exit 0 with no error line and leave the server's failure counts unchanged. The machine's load
average at the start and at the end is written beside the figures: on a shared machine they are
noisy.

  .venv/bin/python loadtests/customer_service.py [--repeats 3] [--concurrency 4] --server target/release/tritium

Needs loadtests/setup.sh (perf_analyzer), scripts/setup.sh (TensorFlow and the example's models)
and a binary built with the feature (`cargo build --release --locked -p tritium --features
tensorflow`). Results: loadtests/out/customer_service-<time>/summary.{md,json}.
"""

import argparse
import json
import os
import sys
import threading

import common
from common import PAError, median, spread

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REPO = os.path.join(ROOT, "examples", "customer_service", "models")
MODELS = ("intent", "keyword_spotter", "sentiment")
FILES = ("intent/1/model.pt", "sentiment/1/model.onnx", "keyword_spotter/1/model.savedmodel/saved_model.pb")
TEXTS = ["I was charged twice for my order", "where is my package, it is late again",
         "the app crashes with an error after the update", "please reset my password",
         "thank you, the support was great", "this is the worst service I have ever had",
         "can I change my delivery address?", "my invoice shows a fee I never agreed to"]


def input_data(out_dir):
    """perf_analyzer's --input-data file for the two text models: one TEXT per request."""
    path = os.path.join(out_dir, "texts.json")
    with open(path, "w") as f:
        json.dump({"data": [{"TEXT": {"content": [t], "shape": [1]}} for t in TEXTS]}, f)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4, help="perf_analyzer's concurrency for each model")
    args = ap.parse_args()
    for p in (args.server, args.perf_analyzer):
        if not os.path.exists(p):
            sys.exit(f"missing {p} (run loadtests/setup.sh and build the server first)")
    for f in FILES:
        if not os.path.exists(os.path.join(REPO, f)):
            sys.exit(f"{REPO}/{f} missing: run scripts/setup.sh")
    out_dir, _ = common.make_out_dir(args, "customer_service")
    header = common.run_header(args)
    texts = input_data(out_dir)
    runs, failures = [], []
    conc = args.concurrency

    with common.bench_server(args.server, args.onnxruntime_library, REPO, out_dir, ready=list(MODELS),
                             prefix="customer-service-") as srv:

        def one(label, model, kind):
            srv.alive()
            name = f"{label}-{model}-c{conc}-{kind}"
            extra = ["--input-data", texts] if model != "keyword_spotter" else []
            try:
                r = common.run_pa(args.perf_analyzer, model, srv.url("grpc"), "grpc", conc,
                                  os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                  extra=extra, interval_ms=args.interval_ms, stability=args.stability, server=srv)
            except PAError as e:
                print(f"FAILED {name}: {e}", flush=True)
                failures.append({"run": name, "error": str(e)})
                return None
            r.update(label=label, model=model, kind=kind)
            print(f"{name:>40}: {r['infer_per_s']:>8.1f} items/s  p50 {r['p50_us']:>7} µs", flush=True)
            return r

        def mixed(label):
            results = {}
            threads = [threading.Thread(target=lambda m=m: results.__setitem__(m, one(label, m, "mixed")))
                       for m in MODELS]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return results

        for model in MODELS:
            one("warmup", model, "alone")
        for k in range(1, args.repeats + 1):
            for model in MODELS:
                r = one(f"rep{k}", model, "alone")
                if r is not None:
                    runs.append(dict(r, repeat=k))
            for model, r in mixed(f"rep{k}").items():
                if r is not None:
                    runs.append(dict(r, repeat=k))
    load_at_end = os.getloadavg()[0]

    def pick(model, repeat, kind):
        return next((r for r in runs if (r["model"], r["repeat"], r["kind"]) == (model, repeat, kind)), None)

    ratios = {f"{m}_mixed_vs_alone": [] for m in MODELS}
    for k in range(1, args.repeats + 1):
        for m in MODELS:
            alone, mixed_r = pick(m, k, "alone"), pick(m, k, "mixed")
            if alone and mixed_r:
                ratios[f"{m}_mixed_vs_alone"].append(mixed_r["infer_per_s"] / alone["infer_per_s"])

    lines = [f"# Customer-service example, mixed load: {header['time']}, server built from {header['server_built_from']}",
             "", f"server {header['server']}; perf_analyzer {header['perf_analyzer']}, gRPC, batch 1, concurrency "
             f"{conc} per model; {args.repeats} repeats; {header['nproc']} cores; load average "
             f"{header['loadavg_at_start']:.2f} at start, {load_at_end:.2f} at end; failed runs: {len(failures)}", "",
             "| ratio (same repeat) | median (min–max) |", "| --- | --- |"]
    for key, xs in ratios.items():
        lines.append(f"| {key} | {median(xs):.2f} ({spread(xs)}) |" if xs else f"| {key} | no data |")
    lines += ["", "| model | alone or mixed | items/s median (min–max) | p50 µs median |", "| --- | --- | --- | --- |"]
    for model in MODELS:
        for kind in ("alone", "mixed"):
            xs = [r for r in runs if r["model"] == model and r["kind"] == kind]
            if xs:
                items = [r["infer_per_s"] for r in xs]
                lines.append(f"| {model} | {kind} | {median(items):.0f} ({spread(items)}) | "
                             f"{median([r['p50_us'] for r in xs]):.0f} |")
    header["loadavg_at_end"] = load_at_end
    summary = {"header": header, "ratios": ratios, "runs": runs, "failures": failures}
    common.write_summary(out_dir, summary, lines)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
