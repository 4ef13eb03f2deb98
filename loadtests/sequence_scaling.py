#!/usr/bin/env python3
"""Does a turn cost more when more sequences are live? (issue 17 point 1.) Throughput at many
concurrent sequences as a ratio of the throughput at 64, measured on the same server in the
same run, for an old and a new build side by side, alternating which goes first in each pair.

Loads, each over gRPC with perf_analyzer: `accumulate_oldest` with --sequence-length 10 at
--counts (default 64, 1000, 4000 concurrent sequences; perf_analyzer keeps one sequence per
concurrent slot, so the count is the number of live sequences, beyond the 1,024 candidate
places the rest wait in the backlog), then stateless `add_sub` at --stateless-counts (default
64, 1000). Per build and pair: infer/s at each count ÷ infer/s at the first count. Target: ≥ 0.8
at every count. Every run must exit 0 with no error line and leave the server's failure counts
unchanged (end-of-run errors of the sequence runs, when perf_analyzer closes its open
sequences, are listed, as in sequences.py).

  .venv/bin/python loadtests/sequence_scaling.py --old PATH [--new PATH] [--pairs 2]
      [--pa-mode auto|sync|async|streaming] [--max-threads 16] [--pa-channel-share N]
      [--server-cpus LIST --pa-cpus LIST]

Without --new, one binary runs on --pairs servers one after the other (repeats of one build).

Where each side runs (--server-cpus, --pa-cpus: CPU lists as `taskset -c` reads them, e.g. `0,1`
and `2-15`): the server's threads and perf_analyzer's are held to their own CPUs. On a 2-core
machine both share the two cores, and perf_analyzer's own CPU per inference grows about 1.5x from
64 to 4,000 sequences (one client and one thread per sequence, in every mode: loadtests/PROFILES.md),
so the c4000 ratio there is mostly perf_analyzer's; with perf_analyzer on cores of its own that
it does not exhaust, the ratio is the server's.

How perf_analyzer sends (--pa-mode, recorded in the summary's header and each run's row): `auto`
(the default, what every earlier run of this script did) passes no flag, and perf_analyzer then
sends the sequence model's requests asynchronously from --max-threads threads (16) and add_sub's
synchronously, one thread per concurrent request; `sync` (--sync) one thread per concurrent request
for both; `async` (-a --max-threads N) and `streaming` (-a --streaming --max-threads N: gRPC
ModelStreamInfer) asynchronously for both. Whatever the mode, perf_analyzer gives each concurrent
sequence its own context, and each context its own gRPC client object with its own completion
thread (async) or stream and stream-reader thread (streaming); stateless models get one context
per thread. Its clients share a TCP connection six at a time (its client library's
TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT; --pa-channel-share N sets it). Each run records what
it held, sampled every second: the live sequences the server counts
(`tritium_sequence_active` + `tritium_sequence_backlog`: perf_analyzer keeps one request per
sequence in flight, so this is the count), the server's established gRPC connections and
perf_analyzer's threads, plus the calls perf_analyzer said it used.

With --chatload PATH (a release build of loadtests/chatload), the same servers also run the
chatload leg: a copy of the accumulator, `accumulate_live`, whose max_candidate_sequences holds
every conversation (so all N are live, none in a backlog), driven by `chatload --closed` (each
of N conversations sends its next turn as soon as its previous one is answered, zero think time,
many conversations on --chat-grpc-connections x --streams gRPC streams or on
--chat-http-connections HTTP/1.1 connections) at --chat-counts conversations over
--chat-protocols. perf_analyzer's own CPU per inference grows with its concurrency; chatload's
does not, so its ratio is the server's. Every point checks every reply against the conversation's
own running sum. The points run in the order count, protocol, on the same sequence ids (a point's
first turn STARTs each conversation again), so at each point N conversations (and the baseline
conversation of each point so far) are live. --skip-pa runs the chatload leg alone.

Results: loadtests/out/sequence_scaling-<time>/summary.{md,json}.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

import common
from common import PAError, median, spread

ACC = "accumulate_oldest"
STATELESS = "add_sub"
LIVE = "accumulate_live"


def pa_mode_flags(mode, max_threads):
    """perf_analyzer's flags for --pa-mode. `auto` passes none: perf_analyzer then sends a sequence
    model's requests asynchronously (--max-threads threads, 16 by default) and a stateless model's
    synchronously (one thread per concurrent request)."""
    return {"auto": [], "sync": ["--sync"], "async": ["-a", "--max-threads", str(max_threads)],
            "streaming": ["-a", "--streaming", "--max-threads", str(max_threads)]}[mode]


def metric_sum(text, name, model):
    """The sum of a metric's samples labelled model="<model>" in a Prometheus text page (None when
    there is none)."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") and f'model="{model}"' in line:
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def established(port):
    """The established TCP connections whose local port is `port` (the server's side of each
    client connection), from /proc/net/tcp{,6}."""
    n = 0
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(f).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[1].rsplit(":", 1)[1] == f"{port:04X}" and fields[3] == "01":
                n += 1
    return n


def pa_threads():
    """Threads of this script's perf_analyzer child (the wrapper execs it), or None."""
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm == "perf_analyzer" and int(stat.rpartition(")")[2].split()[1]) == me:
            try:
                return len(os.listdir(f"/proc/{d}/task"))
            except OSError:
                return None
    return None


class Sampler:
    """Every second while perf_analyzer runs: the model's live sequences as the server counts them
    (`tritium_sequence_active` + `tritium_sequence_backlog`, for a sequence model), the server's
    established gRPC connections and perf_analyzer's threads. Summed up as medians (and the live
    count's max) over the samples after the first 3 s (perf_analyzer's ramp)."""

    def __init__(self, srv, model, sequence):
        self.srv, self.model, self.sequence = srv, model, sequence
        self.samples, self.stop = [], threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        t0 = time.monotonic()
        while not self.stop.wait(1.0):
            s = {"t": time.monotonic() - t0, "connections": established(self.srv.grpc_port), "pa_threads": pa_threads()}
            if self.sequence:
                try:
                    url = f"http://127.0.0.1:{self.srv.metrics_port}/metrics"
                    with urllib.request.urlopen(url, timeout=5) as r:
                        text = r.read().decode()
                    active = metric_sum(text, "tritium_sequence_active", self.model)
                    backlog = metric_sum(text, "tritium_sequence_backlog", self.model)
                    if active is not None and backlog is not None:
                        s.update(active=active, backlog=backlog, live=active + backlog)
                except OSError:
                    pass
            self.samples.append(s)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def summary(self):
        steady = [s for s in self.samples if s["t"] >= 3.0] or self.samples
        out = {}
        for key in ("live", "active", "backlog", "connections", "pa_threads"):
            xs = [s[key] for s in steady if s.get(key) is not None]
            if xs:
                out[key] = median(xs)
        lives = [s["live"] for s in steady if "live" in s]
        if lives:
            out["live_max"] = max(lives)
        return out


def live_copy(counts, points):
    """An `edit_repo` that adds `accumulate_live`: the accumulator with a candidate place for every
    conversation of the largest point and every point's baseline conversation."""
    def edit(repo):
        src, dst = os.path.join(repo, ACC), os.path.join(repo, LIVE)
        shutil.copytree(src, dst)
        cfg = os.path.join(dst, "config.pbtxt")
        text = open(cfg).read().replace(f'name: "{ACC}"', f'name: "{LIVE}"')
        text = re.sub(r"max_candidate_sequences: \d+", f"max_candidate_sequences: {max(counts) + points + 16}", text)
        open(cfg, "w").write(text)
    return edit


def chat_leg(args, srv, out_dir, label, pair, points, protocols):
    """chatload --closed at every (workload, model, count) and protocol on `srv`; chatload's
    figures per point."""
    rows = []
    for workload, model, n in points:
        for protocol in protocols:
            name = f"pair{pair + 1}-{label}-chatload-{model}-{protocol}-{n}"
            json_path = os.path.join(out_dir, name + ".json")
            conns = args.chat_grpc_connections if protocol == "grpc" else args.chat_http_connections
            cmd = [args.chatload, "--closed", "--protocol", protocol, "--workload", workload, "--model", model,
                   "--http", srv.url("http"), "--grpc", srv.url("grpc"), "--metrics", f"127.0.0.1:{srv.metrics_port}",
                   "--pid", str(srv.proc.pid), "--conversations", str(n), "--duration", str(args.chat_duration),
                   "--connections", str(conns), "--streams", str(args.streams), "--sequence-id-base", "1",
                   "--baseline-turns", "20", "--timeout-ms", "30000", "--json", json_path]
            if args.chat_max_in_flight:
                cmd += ["--max-in-flight", str(args.chat_max_in_flight)]
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            open(os.path.join(out_dir, name + ".txt"), "w").write(" ".join(cmd) + "\n" + run.stdout + run.stderr)
            if run.returncode != 0:
                print(f"FAILED {name}: exit {run.returncode}\n{run.stdout}{run.stderr}", flush=True)
                rows.append({"run": name, "error": f"exit {run.returncode}"})
                continue
            f = json.load(open(json_path))
            f.update(pair=pair + 1, build=label, run=name)
            rows.append(f)
            print(f"{name:>44}: {f['achieved_rate']:>8.1f} turns/s  live {f['live_sequences']:.0f}  "
                  f"p99 {f['from_send_us']['p99']} µs  CPU µs/turn server {f['server_cpu_us_per_turn']:.0f} "
                  f"client {f['client_cpu_us_per_turn']:.0f}  errors {f['errors']} cross-talk {f['crosstalk']}",
                  flush=True)
            srv.alive()
    return rows


def pinned_pa(pa, cpus, out_dir):
    """A wrapper that runs perf_analyzer held to `cpus`. It execs (taskset, then the wrapper
    perf_analyzer is installed with), so the process the samplers find is perf_analyzer itself."""
    path = os.path.join(out_dir, "perf_analyzer-pinned")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nexec taskset -c {shlex.quote(cpus)} {shlex.quote(os.path.abspath(pa))} "$@"\n')
    os.chmod(path, 0o755)
    return path


def pin_tree(pid, cpus):
    """Holds every thread of `pid` to `cpus`; threads it starts later inherit their creator's set."""
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True, stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap, interval_ms=3000)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", help="the second build; without it one binary (--old) runs --pairs times, one server each")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--pa-mode", choices=("auto", "sync", "async", "streaming"), default="auto",
                    help="how perf_analyzer sends: auto (no flag: asynchronous for the sequence model, synchronous "
                         "for add_sub), sync (--sync: one thread per concurrent request), async (-a --max-threads), "
                         "streaming (-a --streaming --max-threads: gRPC ModelStreamInfer)")
    ap.add_argument("--max-threads", type=int, default=16, help="perf_analyzer --max-threads for async / streaming")
    ap.add_argument("--pa-channel-share", type=int, default=None,
                    help="TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT for perf_analyzer: how many of its gRPC clients "
                         "share one connection (its default 6: at 4,000 sequences, 667 connections)")
    ap.add_argument("--server-cpus", help="taskset CPU list the server's threads are held to (e.g. 0,1)")
    ap.add_argument("--pa-cpus", help="taskset CPU list perf_analyzer is held to (e.g. 2-15)")
    ap.add_argument("--counts", default="64,1000,4000")
    ap.add_argument("--stateless-counts", default="64,1000")
    ap.add_argument("--chatload", help="loadtests/chatload (release): also run the closed-loop chatload leg")
    ap.add_argument("--chat-counts", default="64,1000,4000,10000")
    ap.add_argument("--chat-protocols", default="grpc,http")
    ap.add_argument("--chat-duration", type=float, default=4.0, help="seconds of closed-loop load per point")
    ap.add_argument("--chat-grpc-connections", type=int, default=2)
    ap.add_argument("--streams", type=int, default=4, help="chatload: gRPC streams per connection")
    ap.add_argument("--chat-http-connections", type=int, default=32)
    ap.add_argument("--skip-pa", action="store_true", help="the chatload leg only")
    ap.add_argument("--chat-max-in-flight", type=int, default=None,
                    help="chatload --max-in-flight: at most this many turns in flight (N conversations stay live, "
                         "the server's queue holds at most this many)")
    args = ap.parse_args()
    single = args.new is None
    for p in (args.old, args.new or args.old, args.perf_analyzer) + ((args.chatload,) if args.chatload else ()):
        if not os.path.exists(p):
            sys.exit(f"missing {p}")
    args.server = args.new or args.old
    out_dir, _ = common.make_out_dir(args, "sequence_scaling")
    header = common.run_header(args)
    pa_flags = pa_mode_flags(args.pa_mode, args.max_threads)
    if args.pa_channel_share:
        os.environ["TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT"] = str(args.pa_channel_share)
    header.update(pa_mode=args.pa_mode, pa_mode_flags=pa_flags, single_binary=single,
                  pa_channel_share=args.pa_channel_share or 6, server_cpus=args.server_cpus, pa_cpus=args.pa_cpus)
    if args.pa_cpus:
        args.perf_analyzer = pinned_pa(args.perf_analyzer, args.pa_cpus, out_dir)
    builds = ("old",) if single else ("old", "new")
    loads = [(ACC, int(c), ["--sequence-length", "10"]) for c in args.counts.split(",")]
    loads += [(STATELESS, int(c), []) for c in args.stateless_counts.split(",") if c]
    if args.skip_pa:
        loads = []
    chat_counts = [int(c) for c in args.chat_counts.split(",")] if args.chatload else []
    chat_protocols = args.chat_protocols.split(",")
    # The stateless leg: independent clients of add_sub at --stateless-counts, closed loop too.
    chat_points = [("sum", LIVE, n) for n in chat_counts]
    if chat_counts:
        chat_points += [("add-sub", STATELESS, int(c)) for c in args.stateless_counts.split(",") if c]
    models = [ACC, STATELESS] + ([LIVE] if chat_counts else [])
    edit = live_copy(chat_counts, len(chat_counts) * len(chat_protocols)) if chat_counts else None
    results, failures, chat_rows = [], [], []
    for pair in range(args.pairs):
        if single:
            order = (("old", args.old),)
        else:
            order = (("old", args.old), ("new", args.new)) if pair % 2 == 0 else (("new", args.new), ("old", args.old))
        for label, binary in order:
            with common.bench_server(binary, args.onnxruntime_library, args.model_repository, out_dir,
                                     models=[ACC, STATELESS], ready=models, edit_repo=edit,
                                     log_name=f"server-{label}-{pair + 1}.log", prefix="scal-") as srv:
                if args.server_cpus:
                    pin_tree(srv.proc.pid, args.server_cpus)
                for model, conc, extra in loads:
                    name = f"pair{pair + 1}-{label}-{model}-c{conc}"
                    cpu0, pa0, t0 = common.tree_cpu_s(srv.proc.pid), common.children_cpu_s(), time.monotonic()
                    try:
                        with Sampler(srv, model, sequence=bool(extra)) as sampler:
                            r = common.run_pa(args.perf_analyzer, model, srv.url("grpc"), "grpc", conc,
                                              os.path.join(out_dir, name + ".csv"), os.path.join(out_dir, name + ".log"),
                                              extra=extra + pa_flags, interval_ms=args.interval_ms,
                                              stability=args.stability, server=srv, teardown_ok=bool(extra),
                                              timeout=900)
                    except PAError as e:
                        print(f"FAILED {name}: {e}", flush=True)
                        failures.append({"run": name, "error": str(e)})
                        continue
                    wall = time.monotonic() - t0
                    r.update(pair=pair + 1, build=label, model=model, pa_mode=args.pa_mode,
                             server_cores=(common.tree_cpu_s(srv.proc.pid) - cpu0) / wall,
                             client_cores=(common.children_cpu_s() - pa0) / wall, observed=sampler.summary())
                    results.append(r)
                    o = r["observed"]
                    live = f"live {o['live']:.0f} (max {o['live_max']:.0f})  " if "live" in o else ""
                    print(f"{name:>44}: {r['infer_per_s']:>8.1f} infer/s  p99 {r['p99_us']:>9} µs  "
                          f"cores server {r['server_cores']:.2f} client {r['client_cores']:.2f}  {live}"
                          f"conns {o.get('connections', 0):.0f} PA threads {o.get('pa_threads') or 0:.0f} "
                          f"({r.get('pa_calls', '?')})  end-of-run errors {len(r.get('teardown_errors', []))}",
                          flush=True)
                if chat_counts:
                    rows = chat_leg(args, srv, out_dir, label, pair, chat_points, chat_protocols)
                    failures += [r for r in rows if "error" in r]
                    chat_rows += [r for r in rows if "error" not in r]

    def get(pair, build, model, conc):
        for r in results:
            if (r["pair"], r["build"], r["model"], r["concurrency"]) == (pair, build, model, conc):
                return r["infer_per_s"]
        return None

    two = not single
    what = f"old: {args.old}; new: {args.new}; {args.pairs} pairs, order alternated" if two else \
        f"one binary: {args.old}; {args.pairs} servers, one after the other"
    lines = [f"# Sequence scaling, same run: {header['time']}", "",
             f"{what}; perf_analyzer mode `{args.pa_mode}` ({' '.join(pa_flags) or 'no flag'}), "
             f"{args.pa_channel_share or 6} gRPC clients per connection; "
             f"server on CPUs {args.server_cpus or 'all'}, perf_analyzer on {args.pa_cpus or 'all'}; "
             f"-p {args.interval_ms} ms; failed runs: {len(failures)}. Ratio: infer/s at the count ÷ infer/s at "
             "the model's first count, on the same server in the same pair; median (min–max) over the "
             f"{'pairs' if two else 'servers'}.", "",
             "| load | " + " | ".join(f"{b} ratio" for b in builds) + " | " + " | ".join(f"{b} infer/s" for b in builds)
             + " |", "| --- " * (1 + 2 * len(builds)) + "|"]
    ratios = {}
    for model in (ACC, STATELESS):
        counts = [c for m, c, _ in loads if m == model]
        for conc in counts:
            row = {}
            for build in builds:
                rs = []
                for k in range(1, args.pairs + 1):
                    base, at = get(k, build, model, counts[0]), get(k, build, model, conc)
                    if base and at:
                        rs.append(at / base)
                row[build] = rs
            tps = {b: [r["infer_per_s"] for r in results if (r["build"], r["model"], r["concurrency"]) == (b, model, conc)]
                   for b in builds}
            ratios[f"{model}-c{conc}"] = {"ratio": row, "infer_per_s": tps}
            lines.append(f"| {model} gRPC c{conc} ÷ c{counts[0]} | "
                         + " | ".join(f"{median(row[b]):.2f} ({spread(row[b])})" for b in builds) + " | "
                         + " | ".join(spread(tps[b]) for b in builds) + " |")
    # The turn's cost itself: CPU per inference of the server and of perf_analyzer (rusage over the
    # whole run, so a slow ramp counts too), and the server's at each count ÷ at the first count.
    last = builds[-1]
    lines += ["", "CPU µs per inference (server / perf_analyzer), median over the "
              f"{'pairs' if two else 'servers'}; the {last} server's at the count ÷ at the model's first count:", "",
              "| load | " + " | ".join(builds) + f" | {last} server ratio |", "| --- " * (2 + len(builds)) + "|"]
    for model in (ACC, STATELESS):
        counts = [c for m, c, _ in loads if m == model]
        first = {}
        for conc in counts:
            cells, last_server = [], None
            for build in builds:
                rs = [r for r in results if (r["build"], r["model"], r["concurrency"]) == (build, model, conc)]
                server = [r["server_cores"] * 1e6 / r["infer_per_s"] for r in rs if r["infer_per_s"]]
                client = [r["client_cores"] * 1e6 / r["infer_per_s"] for r in rs if r["infer_per_s"]]
                cells.append(f"{median(server):.0f} / {median(client):.0f}" if server else "-")
                if build == last and server:
                    last_server = median(server)
            first.setdefault(model, last_server)
            ratio = f"{last_server / first[model]:.2f}" if last_server and first[model] else "-"
            lines.append(f"| {model} c{conc} | " + " | ".join(cells) + f" | {ratio} |")
    lines += observed_summary(results, loads, builds)
    if chat_counts:
        lines += chat_summary(chat_rows, chat_points, chat_protocols, args.pairs)
    common.write_summary(out_dir, {"header": header, "ratios": ratios, "results": results, "failures": failures,
                                   "chatload": chat_rows}, lines)
    if failures:
        sys.exit(1)


def observed_summary(results, loads, builds):
    """What each run held: the model's live sequences as the server counted them (active + backlog,
    median and max over the run's samples after perf_analyzer's ramp), the server's gRPC
    connections, perf_analyzer's threads and the calls it said it used; end-of-run errors and the
    failures the server counted (each run already failed on any error line or failure while
    measured)."""
    lines = ["", "What each run held (median over the runs of each run's median of 1 s samples): live sequences "
             "= `tritium_sequence_active` + `tritium_sequence_backlog` (max in brackets), the server's established "
             "gRPC connections, perf_analyzer's threads and calls; end-of-run errors and server-counted failures "
             "summed over the runs:", "",
             "| load | build | live sequences | connections | PA threads | calls | end-of-run errors | "
             "server failures |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model, conc, _ in loads:
        for build in builds:
            rs = [r for r in results if (r["build"], r["model"], r["concurrency"]) == (build, model, conc)]
            if not rs:
                continue
            obs = [r.get("observed", {}) for r in rs]
            live = [o["live"] for o in obs if "live" in o]
            live_cell = f"{median(live):.0f} (max {max(o['live_max'] for o in obs if 'live_max' in o):.0f})" \
                if live else "-"
            conns = [o["connections"] for o in obs if "connections" in o]
            threads = [o["pa_threads"] for o in obs if "pa_threads" in o]
            calls = sorted({r.get("pa_calls", "?") for r in rs})
            teardown = sum(len(r.get("teardown_errors", [])) for r in rs)
            fails = sum(r.get("server_stats_delta", {}).get("fail", 0) for r in rs)
            lines.append(f"| {model} c{conc} | {build} | {live_cell} | "
                         f"{median(conns):.0f} | {median(threads):.0f} | {'/'.join(calls)} | {teardown} | {fails} |"
                         if conns and threads else
                         f"| {model} c{conc} | {build} | {live_cell} | - | - | {'/'.join(calls)} | {teardown} | {fails} |")
    return lines


def chat_summary(rows, points, protocols, pairs):
    """The chatload leg: turns/s at each count ÷ at the model's first count on the same server, and
    the CPU per turn of the server and of chatload, per build; median (min–max) over the pairs."""
    lines = ["", f"chatload --closed on `{LIVE}` (every conversation live, zero think time) and on `{STATELESS}` "
             "(independent clients): turns/s at the count ÷ turns/s at the model's first count on the same server "
             "and protocol in the same pair; CPU µs per turn, server / chatload; the server's ÷ at the first count; "
             "median (min–max) over the pairs.", "",
             "| load | build | turns/s | ratio | CPU µs per turn, server / chatload | server's ÷ first | "
             "p99 from sent µs | errors / cross-talk |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def get(pair, build, model, protocol, n):
        for r in rows:
            if (r["pair"], r["build"], r["model"], r["protocol"], r["conversations"]) == (pair, build, model, protocol, n):
                return r
        return None

    for model in (LIVE, STATELESS):
        counts = [n for _, m, n in points if m == model]
        for protocol, n, build in [(p, c, b) for p in protocols for c in counts for b in ("old", "new")]:
            at = [get(k, build, model, protocol, n) for k in range(1, pairs + 1)]
            base = [get(k, build, model, protocol, counts[0]) for k in range(1, pairs + 1)]
            both = [(a, b) for a, b in zip(at, base) if a and b]
            if not both:
                continue
            ratio = [a["achieved_rate"] / b["achieved_rate"] for a, b in both]
            server = [a["server_cpu_us_per_turn"] for a, _ in both]
            client = [a["client_cpu_us_per_turn"] for a, _ in both]
            server_ratio = [a["server_cpu_us_per_turn"] / b["server_cpu_us_per_turn"] for a, b in both]
            lines.append(
                f"| {model} {protocol} c{n} | {build} | {spread([a['achieved_rate'] for a, _ in both])} | "
                f"{median(ratio):.2f} ({spread(ratio)}) | {median(server):.0f} / {median(client):.0f} | "
                f"{median(server_ratio):.2f} | {spread([a['from_send_us']['p99'] for a, _ in both])} | "
                f"{sum(a['errors'] for a, _ in both)} / {sum(a['crosstalk'] for a, _ in both)} |")
    return lines


if __name__ == "__main__":
    main()
