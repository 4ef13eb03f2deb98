#!/usr/bin/env python3
"""torch_mlp with client batches under two server environments, same run: the server as it
starts by default (it gives libtorch's OpenMP threads OMP_WAIT_POLICY=PASSIVE when the
environment has none; src/backends/pytorch/openmp.rs) against a variant given with
--variant-env (e.g. OMP_WAIT_POLICY=ACTIVE, libgomp's spinning), and the in-process tch ceiling
between them. The servers alternate per repeat; each run also records the server's and
perf_analyzer's CPU, so the ratios can be read against the bound the client leaves.

    python3 loadtests/quiet.py .venv/bin/python loadtests/torch_threads.py --repeats 3 \
        --variant-env OMP_WAIT_POLICY=ACTIVE

Reported: per client batch (b1 c1, b16 c4, b64 c2, b64 c3), items/s of each server ÷ the ceiling
at that batch size (b1 against the ceiling's b16: the ceiling runs 16 and 64 only), variant ÷
default in items/s and in p50, and CPU µs per item of server and client; then saturation (each
server's best items/s ÷ the ceiling's best, same repeat).
"""
import argparse
import os
import sys
import time

import common
from common import PAError, median, spread
from pytorch import ceiling

CLIENT_BATCHES = ((1, 1), (16, 4), (64, 2), (64, 3))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ceiling", default=os.path.join(os.path.dirname(common.DEFAULT_SERVER), "torch_ceiling"))
    ap.add_argument("--ceiling-seconds", type=float, default=4.0)
    ap.add_argument("--variant-env", action="append", default=[], metavar="NAME=VALUE",
                    help="environment of the variant server (repeatable)")
    args = ap.parse_args()
    variant = dict(kv.split("=", 1) for kv in args.variant_env)
    if not variant:
        sys.exit("give at least one --variant-env NAME=VALUE")
    for p in (args.server, args.perf_analyzer, args.ceiling):
        if not os.path.exists(p):
            sys.exit(f"missing {p} (run loadtests/setup.sh and the release build first)")
    out_dir, _ = common.make_out_dir(args, "torch_threads")
    header = common.run_header(args)
    torch_file = os.path.join(args.model_repository, "torch_mlp", "1", "model.pt")
    runs, failures, ceilings = [], [], []

    def serve(label, repeat):
        saved = {k: os.environ.get(k) for k in variant}
        if label == "variant":
            os.environ.update(variant)
        else:
            for k in variant:
                os.environ.pop(k, None)
        try:
            with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                                     models=["torch_mlp"], ready=["torch_mlp"], prefix="torch-threads-",
                                     log_name=f"server-{label}-{repeat}.log") as srv:
                # the server has its environment now; put ours back for the ceiling and the client
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                common.run_pa(args.perf_analyzer, "torch_mlp", srv.url("grpc"), "grpc", 4,
                              os.path.join(out_dir, f"warm-{label}-{repeat}.csv"),
                              os.path.join(out_dir, f"warm-{label}-{repeat}.log"), interval_ms=1000, batch=16)
                for batch, conc in CLIENT_BATCHES:
                    name = f"{label}-r{repeat}-b{batch}-c{conc}"
                    cpu0, pa0, t0 = common.tree_cpu_s(srv.proc.pid), common.children_cpu_s(), time.monotonic()
                    try:
                        r = common.run_pa(args.perf_analyzer, "torch_mlp", srv.url("grpc"), "grpc", conc,
                                          os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                          interval_ms=args.interval_ms, stability=args.stability, server=srv,
                                          batch=batch)
                    except PAError as e:
                        print(f"FAILED {name}: {e}", flush=True)
                        failures.append({"run": name, "error": str(e)})
                        continue
                    wall = time.monotonic() - t0
                    server_cores = (common.tree_cpu_s(srv.proc.pid) - cpu0) / wall
                    client_cores = (common.children_cpu_s() - pa0) / wall
                    r.update(label=label, repeat=repeat, batch=batch, conc=conc, server_cores=server_cores,
                             client_cores=client_cores)
                    print(f"{name:>28}: {r['infer_per_s']:>8.1f} items/s  p50 {r['p50_us']:>7} µs  "
                          f"server {server_cores:.2f} client {client_cores:.2f} cores", flush=True)
                    runs.append(r)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    for i in range(args.repeats):
        order = ("default", "variant") if i % 2 == 0 else ("variant", "default")
        serve(order[0], i + 1)
        c = ceiling(args.ceiling, torch_file, args.ceiling_seconds)
        c["repeat"] = i + 1
        ceilings.append(c)
        print(f"torch_ceiling: b16 {c[16]:.0f}/s  b64 {c[64]:.0f}/s", flush=True)
        serve(order[1], i + 1)

    def pick(label, batch, conc, repeat):
        for r in runs:
            if (r["label"], r["batch"], r["conc"], r["repeat"]) == (label, batch, conc, repeat):
                return r
        return None

    lines = [f"# torch_mlp: default vs {' '.join(args.variant_env)} ({header['time']})", "",
             f"server {header['server']} built from {header['server_built_from']}; perf_analyzer "
             f"{header['perf_analyzer']}, gRPC; {args.repeats} repeats; load average at start "
             f"{header['loadavg_at_start']:.2f}; failed runs: {len(failures)}", "",
             "| client batch | default ÷ ceiling | variant ÷ ceiling | variant ÷ default | p50 variant ÷ default | CPU µs/item server default / variant | client |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    summary = {"header": header, "variant": variant, "runs": runs, "ceilings": ceilings, "failures": failures}
    for batch, conc in CLIENT_BATCHES:
        d_c, v_c, v_d, p50, cpu_d, cpu_v, cli = [], [], [], [], [], [], []
        ref = batch if batch in (16, 64) else 16
        for c in ceilings:
            d, v = pick("default", batch, conc, c["repeat"]), pick("variant", batch, conc, c["repeat"])
            if d is None or v is None:
                continue
            d_c.append(d["infer_per_s"] / c[ref])
            v_c.append(v["infer_per_s"] / c[ref])
            v_d.append(v["infer_per_s"] / d["infer_per_s"])
            p50.append(v["p50_us"] / d["p50_us"])
            cpu_d.append(1e6 * d["server_cores"] / d["infer_per_s"])
            cpu_v.append(1e6 * v["server_cores"] / v["infer_per_s"])
            cli.append(1e6 * d["client_cores"] / d["infer_per_s"])
        if not d_c:
            continue
        lines.append(f"| b{batch} c{conc} | {median(d_c):.3f} ({spread(d_c)}) | {median(v_c):.3f} ({spread(v_c)}) | "
                     f"{median(v_d):.3f} ({spread(v_d)}) | {median(p50):.3f} ({spread(p50)}) | {median(cpu_d):.1f} / {median(cpu_v):.1f} | "
                     f"{median(cli):.1f} |")
    sat = {"default": [], "variant": []}
    for c in ceilings:
        for label in sat:
            best = max((r["infer_per_s"] for r in runs if r["label"] == label and r["repeat"] == c["repeat"]),
                       default=None)
            if best is not None:
                sat[label].append(best / max(c[16], c[64]))
    lines += ["", "| saturation ÷ ceiling (best of each, same repeat) | median (min–max) |", "| --- | --- |"]
    lines += [f"| {label} | {median(xs):.3f} ({spread(xs)}) |" for label, xs in sat.items() if xs]
    lines += ["", "ceiling items/s: " + ", ".join(f"b16 {c[16]:.0f} b64 {c[64]:.0f}" for c in ceilings)]
    common.write_summary(out_dir, summary, lines)


if __name__ == "__main__":
    main()
