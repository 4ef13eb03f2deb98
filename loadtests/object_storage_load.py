#!/usr/bin/env python3
"""Model load time from an S3 server vs from local disk, in one run.

The ONNX models of the bundled repository (every folder whose config names ONNX Runtime) are
copied to a temp folder and uploaded to moto's S3 server, started here on loopback. Each round
starts one server on the local copy and one on `s3://127.0.0.1:PORT/models/repo` (the order
alternating by round) and times spawn → `GET /v2/health/ready` = 200 (every model loaded).
The S3 server's time includes listing the bucket and downloading every object into a fresh
mount directory (TRITON_AWS_MOUNT_DIRECTORY) before the loads start; that part is also read
from the server's log (its timestamps, "mirrored in" to the last "copied"). Ratio per round, median.

  .venv/bin/python loadtests/object_storage_load.py --server target/release/tritium [--rounds 5]

Needs moto and boto3 (tests/requirements.txt). Results go to loadtests/out/object_storage-<time>/.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


def onnx_models(repo):
    out = []
    for name in sorted(os.listdir(repo)):
        cfg = os.path.join(repo, name, "config.pbtxt")
        if os.path.isfile(cfg) and "onnxruntime" in open(cfg).read():
            out.append(name)
    return out


def time_to_ready(args, repository, env, log_path):
    http_port, grpc_port, metrics_port = common.free_ports(3)
    cmd = [args.server, "--model-repository", repository, "--http-port", str(http_port),
           "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port),
           "--onnxruntime-library", args.onnxruntime_library]
    with open(log_path, "w") as log:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"server exited with {proc.returncode}; see {log_path}")
                try:
                    if common.http("GET", f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=1)[0] == 200:
                        return time.monotonic() - start
                except Exception:
                    pass
                if time.monotonic() - start > 600:
                    raise TimeoutError(f"not ready in 600 s; see {log_path}")
                time.sleep(0.02)
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def copy_seconds(log_path):
    """From the server log: seconds from "mirrored in" (the bucket opened) to the last "copied"
    line (every model downloaded), from the log's own timestamps."""
    stamps = {}
    for line in open(log_path):
        for what in ("mirrored in", "copied '"):
            if what in line:
                hms = line.split()[1]  # I1204 22:30:42.452858 ...
                h, m, sec = hms.split(":")
                stamps.setdefault(what, []).append(int(h) * 3600 + int(m) * 60 + float(sec))
    return max(stamps["copied '"]) - min(stamps["mirrored in"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=common.DEFAULT_SERVER)
    ap.add_argument("--onnxruntime-library", default=common.DEFAULT_ORT)
    ap.add_argument("--model-repository", default=common.DEFAULT_REPO)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=common.DEFAULT_OUT)
    args = ap.parse_args()
    import boto3  # noqa: E402 (the test venv's)

    out_dir, stamp = common.make_out_dir(args, "object_storage")
    header = {**common.run_header(argparse.Namespace(server=args.server)), "rounds": args.rounds}
    models = onnx_models(args.model_repository)
    tmp = tempfile.mkdtemp(prefix="bench-s3-")
    local = os.path.join(tmp, "model_repository")
    for m in models:
        shutil.copytree(os.path.join(args.model_repository, m), os.path.join(local, m))
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(local) for f in fs)
    (port,) = common.free_ports(1)
    moto_log = open(os.path.join(out_dir, "moto.log"), "w")
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=moto_log, stderr=subprocess.STDOUT)
    rows = []
    try:
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="bench",
                          aws_secret_access_key="bench", region_name="us-east-1")
        for _ in range(100):
            try:
                s3.create_bucket(Bucket="models")
                break
            except Exception:
                time.sleep(0.2)
        for d, _, fs in os.walk(local):
            for f in fs:
                path = os.path.join(d, f)
                s3.upload_file(path, "models", "repo/" + os.path.relpath(path, local))
        url = f"s3://127.0.0.1:{port}/models/repo"
        for r in range(args.rounds):
            mount = os.path.join(tmp, f"mount{r}")
            os.makedirs(mount)
            env = {**os.environ, **KEYS, "TRITON_AWS_MOUNT_DIRECTORY": mount}
            order = ["local", "s3"] if r % 2 == 0 else ["s3", "local"]
            times = {}
            for which in order:
                repo = local if which == "local" else url
                times[which] = time_to_ready(args, repo, env, os.path.join(out_dir, f"server-{which}-{r}.log"))
            shutil.rmtree(mount)
            copy = copy_seconds(os.path.join(out_dir, f"server-s3-{r}.log"))
            rows.append({**times, "copy": copy, "ratio": times["s3"] / times["local"], "loadavg": os.getloadavg()[0]})
            print(f"round {r}: local {times['local']:.2f} s, s3 {times['s3']:.2f} s (of which copying {copy:.2f} s), "
                  f"ratio {rows[-1]['ratio']:.2f} (load {rows[-1]['loadavg']:.1f})", flush=True)
    finally:
        moto.terminate()
        moto.wait(timeout=30)
        moto_log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: common.median([row[k] for row in rows]) for k in ("local", "s3", "copy", "ratio")}
    lines = [
        f"## Model load time: S3 (moto on loopback) vs local disk ({stamp})",
        "",
        f"`.venv/bin/python loadtests/object_storage_load.py --server {args.server} --rounds {args.rounds}`; "
        f"{len(models)} ONNX models of the bundled repository ({size / 1e6:.0f} MB: {', '.join(models)}); "
        f"spawn → ready, median (min–max) over {args.rounds} rounds, order alternating; load average "
        f"{header['loadavg_at_start']:.1f} at start, {common.spread([r['loadavg'] for r in rows])} after each round.",
        "",
        "| | time to ready, s | ratio S3 ÷ local |",
        "| --- | --- | --- |",
        f"| local disk | {med['local']:.2f} ({common.spread([r['local'] for r in rows])}) | |",
        f"| S3 server | {med['s3']:.2f} ({common.spread([r['s3'] for r in rows])}) | "
        f"{med['ratio']:.2f} ({common.spread([r['ratio'] for r in rows])}) |",
        f"| … of which listing + downloading ({size / 1e6:.0f} MB) | {med['copy']:.2f} "
        f"({common.spread([r['copy'] for r in rows])}) | |",
    ]
    common.write_summary(out_dir, {**header, "models": models, "bytes": size, "rounds": rows, "median": med}, lines)


if __name__ == "__main__":
    main()
