#!/usr/bin/env python3
"""Where a turn's CPU goes at a shallow vs a deep gRPC queue (issue 17 point 1): one server,
`chatload --closed` over gRPC on `accumulate_live` (a candidate place for every conversation)
at each of --counts conversations in turn (every conversation's turn in flight), and in the
middle of each point, over the same --window seconds: `perf stat` (cache misses, dTLB load
misses, context switches, cycles, instructions) and `perf record -g` on the server, and the
CPU of each of its threads from /proc. Everything is divided by the turns the server answered in
the window (its `nv_inference_count` before and after), so the points compare per turn.

  flock /tmp/quiet.lock python3 loadtests/quiet.py .venv/bin/python loadtests/seq_profile.py \
      --server /tmp/bench-x/release/tritium --chatload /tmp/bench-x/release/chatload

Writes loadtests/out/seq_profile-<time>/: summary.md, the perf data (perf-<n>.data) and each
point's top symbols (top-<n>.txt, self samples per turn).
"""

import argparse
import json
import os
import re
import subprocess
import time
import urllib.request

import common
from sequence_scaling import ACC, LIVE, live_copy

# The hardware counters read "not supported" on this machine's VM; the software ones count.
EVENTS = "cycles,instructions,cache-misses,dTLB-load-misses,context-switches,cpu-migrations,page-faults"


def metric(srv, name, model):
    """The sum of `name`'s series for `model` on the server's metrics endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and f'model="{model}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def inference_count(srv, model):
    return metric(srv, "nv_inference_count", model)


def perf_stat(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,.]+)\s+([\w-]+)", line)
        if m and m.group(2) in EVENTS.split(","):
            out[m.group(2)] = float(m.group(1).replace(",", ""))
    return out


def top_symbols(data, cpu_us_per_turn, limit=80):
    """Each symbol's share of the self samples, as µs of the server's CPU per turn."""
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "sym", "--stdio",
                          "-g", "none", "--percent-limit", "0.1"],
                         capture_output=True, text=True)
    rows = []
    for line in rep.stdout.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+\[.\]\s+(.*)", line)
        if m:
            rows.append((float(m.group(1)), m.group(2).strip()))
    return [(pct, pct / 100 * cpu_us_per_turn, sym) for pct, sym in rows[:limit]]


GROUPS = [
    ("malloc/free", re.compile(r"^(_int_malloc|_int_free|malloc|cfree|free|malloc_consolidate|unlink_chunk|_int_realloc|"
                               r"realloc|tcache|__libc_malloc|__libc_free)")),
    ("memmove/memcpy/memcmp", re.compile(r"^__mem")),
    ("h2/hyper/tonic/prost/bytes", re.compile(r"^<?(h2|hyper|tonic|http|http_body|prost|tower|bytes|tokio_util)::")),
    ("tokio", re.compile(r"^<?(tokio)::")),
    ("ours", re.compile(r"^<?(tritium|tritium_actors)::")),
    ("core/alloc/std/hashbrown", re.compile(r"^<?(core|alloc|std|hashbrown)::")),
]


def groups(data, cpu_us_per_turn):
    """The server's CPU per turn by where it went: the kernel, ONNX Runtime, malloc, the
    protocol crates, tokio, ours, the standard library, the rest (self samples)."""
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym", "--stdio",
                          "-g", "none", "--percent-limit", "0"], capture_output=True, text=True)
    out = {}
    for line in rep.stdout.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
        if not m:
            continue
        pct, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
        if kind == "k":
            name = "kernel"
        elif "onnxruntime" in dso:
            name = "ONNX Runtime"
        else:
            name = next((g for g, rx in GROUPS if rx.match(sym)), "other")
        out[name] = out.get(name, 0.0) + pct / 100 * cpu_us_per_turn
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--chatload", required=True)
    ap.add_argument("--ort", default=common.DEFAULT_ORT)
    ap.add_argument("--counts", default="64,10000")
    ap.add_argument("--duration", type=float, default=9.0, help="seconds of load per point")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds before the window opens")
    ap.add_argument("--window", type=float, default=4.0)
    ap.add_argument("--hz", type=int, default=999)
    ap.add_argument("--connections", type=int, default=2)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--label", default="")
    ap.add_argument("--server-arg", action="append", default=[])
    args = ap.parse_args()
    out_dir = os.path.join(common.ROOT, "loadtests", "out", time.strftime("seq_profile-%Y%m%d-%H%M%S"))
    os.makedirs(out_dir)
    counts = [int(c) for c in args.counts.split(",")]
    lines = [f"server {args.server} ({common.server_commit(args.server)}) {args.label}", ""]
    summary = []
    with common.bench_server(args.server, args.ort, common.DEFAULT_REPO, out_dir, models=[ACC], ready=[ACC, LIVE],
                             edit_repo=live_copy(counts, len(counts)), prefix="prof-",
                             extra_args=args.server_arg) as srv:
        pid = srv.proc.pid
        for n in counts:
            json_path = os.path.join(out_dir, f"chatload-{n}.json")
            cmd = [args.chatload, "--closed", "--protocol", "grpc", "--workload", "sum", "--model", LIVE,
                   "--http", srv.url("http"), "--grpc", srv.url("grpc"), "--metrics", f"127.0.0.1:{srv.metrics_port}",
                   "--pid", str(pid), "--conversations", str(n), "--duration", str(args.duration),
                   "--connections", str(args.connections), "--streams", str(args.streams),
                   "--sequence-id-base", "1", "--baseline-turns", "20", "--timeout-ms", "30000", "--json", json_path]
            load = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(args.warmup)
            data = os.path.join(out_dir, f"perf-{n}.data")
            c0, th0, t0 = inference_count(srv, LIVE), common.thread_cpu_s(pid), time.monotonic()
            stat = subprocess.Popen(["perf", "stat", "-e", EVENTS, "-p", str(pid), "--", "sleep", str(args.window)],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            rec = subprocess.Popen(["perf", "record", "-g", "-F", str(args.hz), "-p", str(pid), "-o", data, "--",
                                    "sleep", str(args.window)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # The turns queued in the engine, sampled once a second over the window (the rest of
            # the conversations' turns in flight wait in the streams' HTTP/2 receive windows).
            queued = []
            while stat.poll() is None:
                queued.append(metric(srv, "nv_inference_pending_request_count", LIVE))
                time.sleep(1)
            stat_out = stat.communicate()[0]
            rec.wait()
            c1, th1, t1 = inference_count(srv, LIVE), common.thread_cpu_s(pid), time.monotonic()
            out = load.communicate()[0]
            open(os.path.join(out_dir, f"chatload-{n}.txt"), "w").write(" ".join(cmd) + "\n" + out)
            turns = c1 - c0
            wall = t1 - t0
            f = json.load(open(json_path))
            st = perf_stat(stat_out)
            threads = common.thread_cores(th0, th1, wall)
            per_turn_threads = {k: v * wall * 1e6 / turns for k, v in threads.items() if v * wall * 1e6 / turns >= 0.1}
            cpu = sum(threads.values()) * wall * 1e6 / turns
            top = top_symbols(data, cpu)
            open(os.path.join(out_dir, f"top-{n}.txt"), "w").write(
                "\n".join(f"{pct:6.2f}% {us:7.3f} µs/turn  {sym}" for pct, us, sym in top) + "\n")
            row = dict(conversations=n, turns_per_s=turns / wall, cpu_us_per_turn=cpu, groups=groups(data, cpu),
                       queued=sorted(queued)[len(queued) // 2] if queued else None,
                       per_turn={k: v / turns for k, v in st.items()}, threads_us=per_turn_threads,
                       errors=f.get("errors"), crosstalk=f.get("crosstalk"), stat=st)
            summary.append(row)
            print(f"c{n}: {turns / wall:.0f} turns/s, server CPU {cpu:.1f} µs/turn, queued {row['queued']}, "
                  + ", ".join(f"{k} {v / turns:.2f}" for k, v in st.items()) + " per turn; errors "
                  f"{f.get('errors')} cross-talk {f.get('crosstalk')}", flush=True)
            print("  threads µs/turn: " + ", ".join(f"{k} {v:.1f}" for k, v in per_turn_threads.items()), flush=True)
            srv.alive()
    lines.append("| conversations | turns/s | queued in the engine | server CPU µs/turn | " + " | ".join(EVENTS.split(",")) + " (per turn) |")
    lines.append("| --- " * (4 + len(EVENTS.split(","))) + "|")
    for r in summary:
        lines.append(f"| {r['conversations']} | {r['turns_per_s']:.0f} | {r['queued']} | {r['cpu_us_per_turn']:.1f} | "
                     + " | ".join(f"{r['per_turn'].get(e, float('nan')):.2f}" for e in EVENTS.split(",")) + " |")
    lines.append("")
    names = list(dict.fromkeys(g for r in summary for g in r["groups"]))
    lines.append("| µs per turn | " + " | ".join(f"c{r['conversations']}" for r in summary) + " |")
    lines.append("| --- " * (1 + len(summary)) + "|")
    for g in names:
        lines.append(f"| {g} | " + " | ".join(f"{r['groups'].get(g, 0.0):.2f}" for r in summary) + " |")
    lines.append("")
    for r in summary:
        lines.append(f"c{r['conversations']} threads µs/turn: "
                     + ", ".join(f"{k} {v:.1f}" for k, v in r["threads_us"].items()))
    open(os.path.join(out_dir, "summary.md"), "w").write("\n".join(lines) + "\n")
    json.dump(summary, open(os.path.join(out_dir, "summary.json"), "w"), indent=1)
    print("\n".join(lines))
    print(f"results: {out_dir}")


if __name__ == "__main__":
    main()
