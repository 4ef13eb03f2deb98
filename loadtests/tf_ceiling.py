#!/usr/bin/env python3
"""TensorFlow's own in-process call of a SavedModel, the ceiling for loadtests/tf_backend.py:
the serving signature run through a TensorFlow session (`tf.compat.v1.Session.run`, the path
TensorFlow's C API `TF_SessionRun` takes too), one caller, no server, no client, TensorFlow's
default threads (what one Tritium instance without TF_NUM_INTRA_THREADS gets). Prints one JSON
line per batch size: items/s and the p50 of one call in µs.

    .tensorflow/venv/bin/python loadtests/tf_ceiling.py --model DIR --batch 1,16 --seconds 4
"""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="the model.savedmodel folder")
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--input", default="INPUT0")
    ap.add_argument("--output", default="OUTPUT0")
    args = ap.parse_args()
    graph = tf.Graph()
    with graph.as_default():
        sess = tf.compat.v1.Session(graph=graph)
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], args.model)
        sig = meta.signature_def["serving_default"]
        feed_name = sig.inputs[args.input].name
        fetch_name = sig.outputs[args.output].name
        dims = [d.size for d in sig.inputs[args.input].tensor_shape.dim][1:]
        for batch in (int(b) for b in args.batch.split(",")):
            x = np.random.default_rng(1).standard_normal([batch] + dims).astype(np.float32)
            for _ in range(20):
                sess.run(fetch_name, {feed_name: x})
            times = []
            start = time.perf_counter()
            while time.perf_counter() - start < args.seconds:
                t0 = time.perf_counter()
                sess.run(fetch_name, {feed_name: x})
                times.append(time.perf_counter() - t0)
            elapsed = time.perf_counter() - start
            times.sort()
            print(json.dumps({"batch": batch, "items_per_s": batch * len(times) / elapsed,
                              "p50_us": int(times[len(times) // 2] * 1e6), "calls": len(times)}), flush=True)


if __name__ == "__main__":
    main()
