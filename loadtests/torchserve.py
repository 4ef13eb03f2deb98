#!/usr/bin/env python3
"""Tritium's PyTorch backend against TorchServe on the same TorchScript file (issue 15): the
bundled torch_mlp (256 -> 2048 -> 2048 -> 256, model_repository/generate_torchscript.py), one
item (256 floats, JSON) per HTTP request, the same load generator for both (wrk, Debian's, with
loadtests/torchserve/post.lua): p50 at 1 connection and requests/s at 16 connections.

Subjects, each idle while another is measured:
  tritium     the release binary serving only torch_mlp (dynamic batching as bundled: preferred
              8/16/32, 200 µs; 1 instance, libtorch's default threads); KServe v2 JSON to
              /v2/models/torch_mlp/infer.
  torchserve  TorchServe 0.12.0 with torch 2.11.0 (loadtests/torchserve/setup.sh), the same
              model.pt in a .mar with loadtests/torchserve/handler.py (torch.jit.load, inference
              mode); a body of 256 floats to /predictions/torch_mlp. Two configurations, both
              measured: TorchServe's defaults (a worker per core, no batching), and batching
              (batch_size 16, max_batch_delay 1 ms, the closest TorchServe has to Tritium's
              dynamic batcher); the better of the two is the one the ratios use. TorchServe runs one
              at a time (it refuses a second on one machine), started again each repeat.
Both answers are checked against each other before any run. Every repeat runs every subject, the
order rotated; ratios within a repeat, medians and min-max over repeats.

  loadtests/.torchserve-venv/bin/python loadtests/torchserve.py [--repeats 3] [--seconds 10]

Results: loadtests/out/torchserve-<time>/summary.{md,json}.
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import common
from common import median, spread

HERE = os.path.dirname(os.path.abspath(__file__))
TS = os.path.join(HERE, "torchserve")
VENV_BIN = os.path.join(HERE, ".torchserve-venv", "bin")


def post(url, body, timeout=10):
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait(url, deadline_s=180):
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} never answered 200")


@contextlib.contextmanager
def torchserve(model_file, out_dir, batching):
    tmp = tempfile.mkdtemp(prefix="ts-bench-")
    store = os.path.join(tmp, "store")
    os.makedirs(store)
    subprocess.run([os.path.join(VENV_BIN, "torch-model-archiver"), "--model-name", "torch_mlp", "--version", "1.0",
                    "--serialized-file", model_file, "--handler", os.path.join(TS, "handler.py"),
                    "--export-path", store], check=True)
    port, mport, metrics = common.free_ports(3)
    props = os.path.join(tmp, "config.properties")
    # TorchServe 0.12 turns its model-registration API off by default: the model is loaded at
    # start, its workers and batching from `models`.
    model = {"1.0": {"defaultVersion": True, "marName": "torch_mlp.mar", "minWorkers": 2, "maxWorkers": 2,
                     "batchSize": 16 if batching else 1, "maxBatchDelay": 1 if batching else 100,
                     "responseTimeout": 120}}
    with open(props, "w") as f:
        f.write(f"inference_address=http://127.0.0.1:{port}\nmanagement_address=http://127.0.0.1:{mport}\n"
                f"metrics_address=http://127.0.0.1:{metrics}\ndisable_token_authorization=true\n"
                f"model_store={store}\nload_models=torch_mlp.mar\nmodels={json.dumps({'torch_mlp': model})}\n"
                # Two TorchServes run side by side: their workers' sockets must not meet.
                f"initial_worker_port={9100 if batching else 9000}\n")
    log = open(os.path.join(out_dir, f"torchserve-{'batch' if batching else 'default'}.log"), "w")
    env = dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ["PATH"], LOG_LOCATION=tmp, METRICS_LOCATION=tmp)
    proc = subprocess.Popen([os.path.join(VENV_BIN, "torchserve"), "--start", "--foreground", "--ncs",
                             "--disable-token-auth", "--ts-config", props, "--model-store", store],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp)
    try:
        url = f"http://127.0.0.1:{port}/predictions/torch_mlp"
        end = time.time() + 180
        while True:
            try:
                post(url, json.dumps([0.0] * 256).encode())
                break
            except Exception:
                if time.time() > end or proc.poll() is not None:
                    raise RuntimeError(f"TorchServe never served torch_mlp (see {log.name})")
                time.sleep(0.5)
        yield url
    finally:
        subprocess.run([os.path.join(VENV_BIN, "torchserve"), "--stop"], env=env, cwd=tmp,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def wrk(url, body_file, connections, seconds, log_path):
    threads = 1 if connections == 1 else 2
    env = dict(os.environ, WRK_BODY=body_file, WRK_TYPE="application/json")
    cmd = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s", "--latency", "-s",
           os.path.join(TS, "post.lua"), url]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=seconds + 60)
    text = p.stdout.decode(errors="replace")
    with open(log_path, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + text + "\n")
    if p.returncode != 0 or "Non-2xx" in text or "Socket errors" in text:
        raise RuntimeError(f"wrk failed or saw errors against {url} (see {log_path})")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    m = re.search(r"50%\s+([\d.]+)(us|ms|s)", text)
    p50_us = float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]
    return {"rps": rps, "p50_us": p50_us}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    args = ap.parse_args()
    model_file = os.path.join(args.model_repository, "torch_mlp", "1", "model.pt")
    for p in (args.server, model_file, os.path.join(VENV_BIN, "torchserve")):
        if not os.path.exists(p):
            sys.exit(f"missing {p} (loadtests/torchserve/setup.sh, scripts/setup.sh, the release build)")
    out_dir, _ = common.make_out_dir(args, "torchserve")
    header = common.run_header(args)
    x = [((k % 97) * 0.01 - 0.5) for k in range(256)]
    bodies = {"tritium": os.path.join(out_dir, "tritium.json"), "torchserve": os.path.join(out_dir, "torchserve.json")}
    with open(bodies["tritium"], "w") as f:
        json.dump({"inputs": [{"name": "INPUT__0", "shape": [1, 256], "datatype": "FP32", "data": x}]}, f)
    with open(bodies["torchserve"], "w") as f:
        json.dump(x, f)
    results = []
    ts_body = open(bodies["torchserve"], "rb").read()

    def measure(name, url, i):
        body = bodies["tritium" if name == "tritium" else "torchserve"]
        for conns in (1, 16):
            r = wrk(url, body, conns, args.seconds, os.path.join(out_dir, f"wrk-{name}.log"))
            r.update(subject=name, connections=conns, repeat=i + 1)
            results.append(r)
            print(f"rep{i + 1} {name:>19} c{conns:<2}: {r['rps']:>8.1f} req/s  p50 {r['p50_us']:>8.0f} µs", flush=True)

    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=["torch_mlp"], ready=["torch_mlp"], prefix="ts-tritium-") as srv:
        tritium_url = f"{srv.base}/v2/models/torch_mlp/infer"
        want = post(tritium_url, open(bodies["tritium"], "rb").read())["outputs"][0]["data"]
        for i in range(args.repeats):
            # One TorchServe at a time (it refuses a second on one machine), started per repeat;
            # Tritium first in even repeats, last in odd ones.
            if i % 2 == 0:
                measure("tritium", tritium_url, i)
            for batching in (False, True):
                name = "torchserve-batch" if batching else "torchserve-default"
                with torchserve(model_file, out_dir, batching) as url:
                    got = post(url, ts_body)
                    worst = max(abs(a - b) for a, b in zip(got, want))
                    if len(got) != 256 or worst > 1e-3:
                        sys.exit(f"{name} answers differently from Tritium (max difference {worst})")
                    measure(name, url, i)
            if i % 2 == 1:
                measure("tritium", tritium_url, i)

    def get(name, conns, k, key):
        return next(r[key] for r in results if (r["subject"], r["connections"], r["repeat"]) == (name, conns, k))

    ratios = {"throughput_c16_vs_best_torchserve": [], "p50_c1_vs_best_torchserve": []}
    for k in range(1, args.repeats + 1):
        best_rps = max(get(n, 16, k, "rps") for n in ("torchserve-default", "torchserve-batch"))
        best_p50 = min(get(n, 1, k, "p50_us") for n in ("torchserve-default", "torchserve-batch"))
        ratios["throughput_c16_vs_best_torchserve"].append(get("tritium", 16, k, "rps") / best_rps)
        ratios["p50_c1_vs_best_torchserve"].append(get("tritium", 1, k, "p50_us") / best_p50)
    lines = [f"# Tritium (PyTorch backend) vs TorchServe: {header['time']}, server built from "
             f"{header['server_built_from']}", "",
             f"torch_mlp, one item per JSON request, wrk {args.seconds} s per run, {args.repeats} repeats; load "
             f"average at start {header['loadavg_at_start']:.2f}", "",
             "| ratio | median (min–max) | target |", "| --- | --- | --- |",
             f"| Tritium ÷ best TorchServe, req/s at 16 connections | "
             f"{median(ratios['throughput_c16_vs_best_torchserve']):.2f} "
             f"({spread(ratios['throughput_c16_vs_best_torchserve'])}) | ≥ 2 |",
             f"| Tritium ÷ best TorchServe, p50 at 1 connection | {median(ratios['p50_c1_vs_best_torchserve']):.2f} "
             f"({spread(ratios['p50_c1_vs_best_torchserve'])}) | ≤ 0.5 |", "",
             "| subject | connections | req/s median (min–max) | p50 µs median |", "| --- | --- | --- | --- |"]
    for name in ("tritium", "torchserve-default", "torchserve-batch"):
        for conns in (1, 16):
            rs = [r for r in results if r["subject"] == name and r["connections"] == conns]
            lines.append(f"| {name} | {conns} | {median(r['rps'] for r in rs):.0f} ({spread(r['rps'] for r in rs)}) | "
                         f"{median(r['p50_us'] for r in rs):.0f} |")
    common.write_summary(out_dir, {"header": header, "ratios": ratios, "results": results}, lines)


if __name__ == "__main__":
    main()
