"""Where a chat turn's latency goes, turn by turn (issue 17 point 2): joins chatload's turns
(`--turns-out`: due, sent and answered times in CLOCK_MONOTONIC ns, request id `t<k>`) with the
server's Triton trace file (`--trace-config triton,file=...`, rate 1: QUEUE_START, COMPUTE_START,
COMPUTE_END of each request, same clock) and the kernel's scheduler events for the server's
instance threads (`perf record -e sched:sched_switch -e sched:sched_wakeup -a -k mono`), and
splits every turn into

- send lag: due → sent (the generator's pacer and runtime: the client's side),
- in: sent → QUEUE_START (loopback, the frontend's decode, the hand-off to the sequence actor),
- queue: QUEUE_START → COMPUTE_START (waiting for the instance, behind another turn),
- compute: COMPUTE_START → COMPUTE_END (the model's prefill and decode loop), of which
  "descheduled": the time the instance's thread was runnable but waiting for a core (woken or
  preempted, not yet switched in); "pool_descheduled" is the same summed over ONNX Runtime's
  intra-op threads (named after the instance's thread, which creates them),
- out: COMPUTE_END → answered (the response's way back to the generator).

Used by chat_load.py (`--split`); also runs alone on a finished point:

  .venv/bin/python loadtests/chat_tail.py <out dir> <protocol>-<conversations>
"""

import bisect
import csv
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sched_trace  # noqa: E402


def trace_args(out):
    """The server's flags for a Triton trace of every request into `out`/trace.json."""
    return ["--trace-config", f"triton,file={os.path.join(out, 'trace.json')}", "--trace-config", "rate=1",
            "--trace-config", "level=TIMESTAMPS"]


def start_sched(out, point):
    """perf recording every CPU's context switches and wake-ups (the clock: CLOCK_MONOTONIC)."""
    data = os.path.join(out, f"{point}-sched.data")
    log = open(os.path.join(out, f"{point}-sched.log"), "w")
    return subprocess.Popen(["perf", "record", "-q", "-k", "mono", "-a", "-e", "sched:sched_switch", "-e",
                             "sched:sched_wakeup", "-o", data], stdout=log, stderr=subprocess.STDOUT)


def stop_sched(proc, out, point, server_pid):
    """Stops perf and writes the server's thread names (tid comm) beside its data."""
    with open(os.path.join(out, f"{point}-threads.txt"), "w") as f:
        task = f"/proc/{server_pid}/task"
        for tid in sorted(os.listdir(task), key=int):
            try:
                f.write(f"{tid} {open(os.path.join(task, tid, 'comm')).read().strip()}\n")
            except OSError:
                pass
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)


# chatload's threads (its main thread, its pacer and its tokio runtime's workers).
CLIENT_THREADS = {"chatload", "chatload-pacer", "tokio-rt-worker"}

def waits(out, point, tids):
    """Each watched thread's waits for a core, (start ns, end ns, tid, the thread it got the
    core from), and every CPU's timeline, {cpu: [(start ns, end ns, tid, comm)]}."""
    data = os.path.join(out, f"{point}-sched.data")
    text = subprocess.run(["perf", "script", "-i", data, "-F", sched_trace.FIELDS, "--ns"], capture_output=True,
                          text=True).stdout
    runnable, found, cpus, running = {}, [], {}, {}
    for e in sched_trace.parse(text):
        ns = int(round(e.time * 1e9))
        if isinstance(e, sched_trace.Wakeup):
            if e.woken in tids:
                runnable.setdefault(e.woken, ns)
            continue
        if e.cpu in running:
            since, tid, comm = running[e.cpu]
            cpus.setdefault(e.cpu, []).append((since, ns, tid, comm))
        running[e.cpu] = (ns, e.next, e.next_comm)
        if e.prev in tids:
            if e.state == "R":
                runnable[e.prev] = ns  # preempted: still runnable
            else:
                runnable.pop(e.prev, None)  # asleep: a wake-up it had is spent
        if e.next in tids and e.next in runnable:
            found.append((runnable.pop(e.next), ns, e.next, e.prev_comm))
    found.sort()
    return found, cpus


def ran_during(cpus, starts, a, b, into, label):
    """Adds to `into` how long each thread ran on every CPU within [a, b], by `label(tid, comm)`."""
    for cpu, segs in cpus.items():
        i = max(0, bisect.bisect_left(starts[cpu], a) - 1)
        while i < len(segs) and segs[i][0] < b:
            o = min(segs[i][1], b) - max(segs[i][0], a)
            if o > 0:
                key = label(segs[i][2], segs[i][3])
                into[key] = into.get(key, 0) + o
            i += 1


def overlap(intervals, starts, a, b):
    """Total length of the sorted `intervals` (start, end, ...) inside [a, b]."""
    total, i = 0, max(0, bisect.bisect_left(starts, a) - 1)
    while i < len(intervals) and intervals[i][0] < b:
        s, e = intervals[i][0], intervals[i][1]
        total += max(0, min(e, b) - max(s, a))
        i += 1
    return total


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else 0


def analyze(out, point):
    """Writes `out`/`point`-split.txt and -split.json; returns the summary."""
    traces = {}
    for rec in json.load(open(os.path.join(out, "trace.json"))):
        if "request_id" in rec:
            traces.setdefault(rec["id"], {})["_rid"] = rec["request_id"]
        for ts in rec.get("timestamps", []):
            traces.setdefault(rec["id"], {})[ts["name"]] = ts["ns"]
    by_rid = {}
    for t in traces.values():
        if "_rid" in t and "COMPUTE_END" in t:
            by_rid.setdefault(t["_rid"], []).append(t)
    tids, names = set(), {}
    threads = os.path.join(out, f"{point}-threads.txt")
    if os.path.exists(threads):
        for line in open(threads):
            tid, comm = line.split(" ", 1)
            names[int(tid)] = comm.strip()
            if comm.startswith("inst-"):
                tids.add(int(tid))
    have_sched = os.path.exists(os.path.join(out, f"{point}-sched.data")) and tids
    w, cpus = waits(out, point, tids) if have_sched else ([], {})
    cpu_starts = {cpu: [x[0] for x in segs] for cpu, segs in cpus.items()}

    def label(tid, comm):
        return ("server " if tid in names else "") + ("idle" if tid == 0 else comm)
    # The instance's own thread is the first one named after it (it creates ONNX Runtime's
    # intra-op threads, which inherit its name); the others are the intra-op pool.
    main = min(tids) if tids else None
    mine = [x for x in w if x[2] == main]
    pool = [x for x in w if x[2] != main]
    mine_starts, pool_starts = [x[0] for x in mine], [x[0] for x in pool]
    turns = []
    for row in csv.DictReader(open(os.path.join(out, f"{point}-turns.csv"))):
        sent, answered = int(row["sent_ns"]), int(row["answered_ns"])
        match = [t for t in by_rid.get(f"t{row['k']}", []) if sent <= t.get("QUEUE_START", 0) <= answered]
        if len(match) != 1:
            continue
        t = match[0]
        due = int(row["due_ns"])
        c0, c1 = t["COMPUTE_START"], t["COMPUTE_END"]
        turn = {
            "k": int(row["k"]), "start": row["start"] == "1", "completion_tokens": int(row["completion_tokens"]),
            "cached_tokens": int(row["cached_tokens"]),
            "latency": answered - due, "lag": sent - due, "in": t["QUEUE_START"] - sent,
            "queue": c0 - t["QUEUE_START"], "compute": c1 - c0, "out": answered - c1,
        }
        if have_sched:
            turn["descheduled"] = overlap(mine, mine_starts, c0, c1)
            turn["pool_descheduled"] = overlap(pool, pool_starts, c0, c1) if pool else 0
            # What ran on the cores while the instance thread waited for one.
            who = {}
            i = max(0, bisect.bisect_left(mine_starts, c0) - 1)
            while i < len(mine) and mine[i][0] < c1:
                a, b = max(mine[i][0], c0), min(mine[i][1], c1)
                if b > a:
                    ran_during(cpus, cpu_starts, a, b, who, label)
                i += 1
            turn["who"] = who
        turns.append(turn)
    if not turns:
        raise RuntimeError(f"{point}: no turn joined its trace")
    turns.sort(key=lambda t: t["latency"])
    p99 = percentile([t["latency"] for t in turns], 0.99)
    tail = [t for t in turns if t["latency"] >= p99]
    parts = ["latency", "lag", "in", "queue", "compute"] + (["descheduled", "pool_descheduled"] if have_sched else [])
    parts += ["out"]

    def mean(ts, key):
        return sum(t[key] for t in ts) / len(ts) / 1e3 if ts else 0

    compute = [t["compute"] for t in turns]
    mean_compute = sum(compute) / len(compute)
    summary = {
        "point": point, "turns": len(turns), "joined_of": sum(1 for _ in open(os.path.join(out, f"{point}-turns.csv"))) - 1,
        "p50_us": percentile([t["latency"] for t in turns], 0.5) / 1e3, "p99_us": p99 / 1e3,
        "mean_compute_us": mean_compute / 1e3, "p99_over_mean_compute": p99 / mean_compute,
        "compute_p50_us": percentile(compute, 0.5) / 1e3, "compute_p99_us": percentile(compute, 0.99) / 1e3,
        "all": {k: mean(turns, k) for k in parts}, "tail": {k: mean(tail, k) for k in parts},
        "tail_turns": len(tail),
        "tail_completion_tokens": sum(t["completion_tokens"] for t in tail) / len(tail),
        "all_completion_tokens": sum(t["completion_tokens"] for t in turns) / len(turns),
        "tail_start": sum(t["start"] for t in tail) / len(tail),
        "latency_over_own_compute_p99": percentile([t["latency"] / t["compute"] for t in turns], 0.99),
    }
    if have_sched:
        on_cpu = [t["compute"] - t["descheduled"] for t in turns]
        summary["on_cpu_compute_p50_us"] = percentile(on_cpu, 0.5) / 1e3
        summary["on_cpu_compute_p99_us"] = percentile(on_cpu, 0.99) / 1e3
        summary["descheduled_p99_us"] = percentile([t["descheduled"] for t in turns], 0.99) / 1e3
        who = {}
        for t in tail:
            for k, v in t["who"].items():
                who[k] = who.get(k, 0) + v
        summary["tail_descheduled_behind_us"] = {k: v / len(tail) / 1e3 for k, v in
                                                 sorted(who.items(), key=lambda kv: -kv[1])[:8]}
        kinds = {}
        for k, v in who.items():
            kind = ("server" if k.startswith("server ") else "idle" if k == "idle"
                    else "load generator" if k in CLIENT_THREADS else "other processes")
            kinds[kind] = kinds.get(kind, 0) + v
        summary["tail_descheduled_behind_kind_us"] = {k: v / len(tail) / 1e3 for k, v in
                                                      sorted(kinds.items(), key=lambda kv: -kv[1])}
        summary["threads"] = {str(t): names[t] for t in sorted(tids)}
    lines = [f"{point}: {len(turns)} turns joined to their trace (of {summary['joined_of']})",
             f"p50 {summary['p50_us']:.0f} us, p99 {p99 / 1e3:.0f} us; compute per turn mean "
             f"{summary['mean_compute_us']:.0f}, p50 {summary['compute_p50_us']:.0f}, p99 "
             f"{summary['compute_p99_us']:.0f} us; p99 / mean compute {summary['p99_over_mean_compute']:.2f}; "
             f"p99 of (latency / its own compute) {summary['latency_over_own_compute_p99']:.2f}",
             "mean us:          " + " ".join(f"{k:>11}" for k in parts),
             "all turns         " + " ".join(f"{summary['all'][k]:>11.0f}" for k in parts),
             f"turns >= p99 ({len(tail)}) " + " ".join(f"{summary['tail'][k]:>11.0f}" for k in parts),
             f"completion tokens: all {summary['all_completion_tokens']:.2f}, tail "
             f"{summary['tail_completion_tokens']:.2f}; START turns in the tail {summary['tail_start']:.0%}"]
    if have_sched:
        lines.append(f"compute on a core (compute - descheduled): p50 {summary['on_cpu_compute_p50_us']:.0f}, "
                     f"p99 {summary['on_cpu_compute_p99_us']:.0f} us; descheduled p99 "
                     f"{summary['descheduled_p99_us']:.0f} us; instance thread {main}, threads {summary['threads']}")
        lines.append("what ran on the 2 cores while the tail's instance thread waited (core-us per turn): " +
                     ", ".join(f"{k} {v:.0f}" for k, v in summary["tail_descheduled_behind_us"].items()))
        lines.append("  by kind: " + ", ".join(f"{k} {v:.0f}" for k, v in summary["tail_descheduled_behind_kind_us"].items()))
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, f"{point}-split.txt"), "w").write(text)
    json.dump(summary, open(os.path.join(out, f"{point}-split.json"), "w"), indent=1)
    print(text, flush=True)
    return summary


if __name__ == "__main__":
    analyze(sys.argv[1], sys.argv[2])
