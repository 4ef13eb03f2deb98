#!/usr/bin/env python3
"""Issue 19 point 3, temporary: one binary, two gRPC layouts chosen by TRITIUM_GRPC_RUNTIME
(unset: one single-threaded runtime per connection; `shared`: every connection on one
multi-threaded runtime). Same run, alternating which goes first, `--pairs` pairs. Loads over
gRPC with perf_analyzer: add_sub c16, mlp c16, accumulate_oldest c64 --sequence-length 10 (its
end-of-run errors counted, not failing the run).

  .venv/bin/python loadtests/grpc_runtime.py --server /tmp/bench-grpcrt/release/tritium [--pairs 2]
"""

import argparse
import json
import os

import common
from common import PAError

LOADS = (("add_sub", 16, []), ("mlp", 16, []), ("accumulate_oldest", 64, ["--sequence-length", "10"]))
LAYOUTS = (("per-connection", None), ("shared", "shared"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    out_dir, _ = common.make_out_dir(args, "grpc_runtime")
    results = []
    for pair in range(args.pairs):
        order = LAYOUTS if pair % 2 == 0 else LAYOUTS[::-1]
        for label, value in order:
            if value is None:
                os.environ.pop("TRITIUM_GRPC_RUNTIME", None)
            else:
                os.environ["TRITIUM_GRPC_RUNTIME"] = value
            with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                                     models=["add_sub", "mlp", "accumulate_oldest"],
                                     ready=["add_sub", "mlp", "accumulate_oldest"],
                                     log_name=f"server-{label}-{pair + 1}.log", prefix="grt-") as srv:
                for model, conc, extra in LOADS:
                    name = f"pair{pair + 1}-{label}-{model}-c{conc}"
                    try:
                        r = common.run_pa(args.perf_analyzer, model, srv.url("grpc"), "grpc", conc,
                                          os.path.join(out_dir, name + ".csv"),
                                          os.path.join(out_dir, name + ".log"), extra=extra,
                                          interval_ms=args.interval_ms, stability=args.stability,
                                          server=srv, teardown_ok=bool(extra))
                    except PAError as e:
                        print(f"FAILED {name}: {e}", flush=True)
                        results.append({"pair": pair + 1, "layout": label, "model": model, "failed": str(e)})
                        continue
                    teardown = len(r.get("teardown_errors") or [])
                    results.append({"pair": pair + 1, "layout": label, "model": model,
                                    "infer_per_s": r["infer_per_s"], "p99_us": r["p99_us"],
                                    "teardown_errors": teardown})
                    print(f"{name:>50}: {r['infer_per_s']:>8.1f} infer/s  p99 {r['p99_us']:>8} µs  "
                          f"end-of-run errors {teardown}", flush=True)
    for model, _, _ in LOADS:
        for pair in range(1, args.pairs + 1):
            by = {r["layout"]: r for r in results if r["model"] == model and r["pair"] == pair}
            a, b = by.get("per-connection", {}), by.get("shared", {})
            if a.get("infer_per_s") and b.get("infer_per_s"):
                print(f"{model} pair {pair}: shared / per-connection infer/s {b['infer_per_s'] / a['infer_per_s']:.3f}"
                      f"  end-of-run errors {a['teardown_errors']} / {b['teardown_errors']}", flush=True)
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
