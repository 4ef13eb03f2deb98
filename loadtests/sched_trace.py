#!/usr/bin/env python3
"""Where the instance's thread is while a concurrent load runs: on a CPU, waiting for one
(preempted, and by whom), or asleep; and what each CPU runs meanwhile, idle included.

Issue 19 point 1 asks for the instance busy 90 % of the wall time at mlp c16. The statistics
say how much of the time it computed, not why it did not compute the rest. This traces the
scheduler (`perf record -e sched:sched_switch -e sched:sched_wakeup -a -g`, every CPU, a few
seconds) while perf_analyzer runs the model at c16 with batch-1 clients, and reads it back:

- per CPU, the share of the window each owner ran (the instance's thread, ONNX Runtime's pool
  threads, the HTTP and gRPC threads, perf_analyzer, other processes) and the share it idled;
- the instance's thread: on a CPU, runnable but preempted (how often, how long, by which owner,
  and the instance's own innermost user frame when it lost the CPU: the syscall that woke the
  thread that took its place), asleep (and where);
- the instance's state against the CPUs idle at the same time: a runnable instance while a CPU
  idles is time the load lost to placement, not to work;
- each group's wake-ups: onto an idle CPU or onto one running another thread (which the woken
  thread must preempt or wait behind), and the wait from the wake-up to running.

ONNX Runtime's pool threads take the name of the thread that made the session, so the instance's
thread is the lowest thread id of that name (it made the session) and the others are its pool.

A change to the server's threads can be tried on the same running load: --batch GROUPS puts
the frontend threads (`frontends`: actix-* and grpc-*) and/or ONNX Runtime's pool threads
(`pool`) under SCHED_BATCH (`chrt -b`: woken, such a thread does not preempt the one running on
its CPU; it waits for a free CPU or the scheduler's tick); --pin-instance / --pin-pool /
--pin-frontends hold the instance's thread, its pool and the frontend threads to CPU lists
(`taskset`); --fifo GROUPS puts the instance's thread and/or its pool under SCHED_FIFO
(priority 1: no thread of the fair class preempts them); --slice-us GROUP=US asks the fair
scheduler (EEVDF, Linux 6.12 and later) for that slice for a group's threads (instance, pool,
frontends). With a change, the threads are traced as
the server made them and then changed; --rounds N first runs N rounds of two phases (as made,
changed; the order alternating) and compares their infer/s and server CPU per inference. The
experiments: loadtests/PROFILES.md (2026-12-06, "where the instance's thread is at mlp c16" and
"what 0.85 of the bound leaves beyond the model").

Needs root (perf's scheduler tracepoints on every CPU) and `perf`; run it under quiet.py.

  .venv/bin/python loadtests/sched_trace.py --server BIN [--protocol http] [--seconds 2]
      [--batch frontends,pool] [--pin-instance CPUS] [--pin-pool CPUS] [--pin-frontends CPUS]
      [--slice-us instance|pool|frontends=US] [--fifo instance,pool] [--rounds 8]

Results: loadtests/out/sched_trace-<time>/summary.{md,json}.
"""

import argparse
import collections
import ctypes
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SWITCH = re.compile(
    r"\s*(?P<comm>\S.*?)\s+(?P<tid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<time>[\d.]+):\s+sched:sched_switch:\s+"
    r"prev_comm=(?P<prev_comm>.*?) prev_pid=(?P<prev>\d+) .*?prev_state=(?P<state>\S+) ==> "
    r"next_comm=(?P<next_comm>.*?) next_pid=(?P<next>\d+)")


WAKEUP = re.compile(
    r"\s*(?P<comm>\S.*?)\s+(?P<tid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<time>[\d.]+):\s+sched:sched_wakeup:\s+"
    r"comm=(?P<woken_comm>.*?) pid=(?P<woken>\d+) prio=\d+ target_cpu=(?P<target>\d+)")


class Wakeup:
    """One sched_wakeup: `woken` is made runnable on CPU `target` (by the thread running on
    `cpu`)."""

    __slots__ = ("time", "cpu", "woken", "woken_comm", "target")

    def __init__(self, m):
        self.time = float(m["time"])
        self.cpu = int(m["cpu"])
        self.woken, self.woken_comm = int(m["woken"]), m["woken_comm"]
        self.target = int(m["target"])


class Switch:
    """One sched_switch: `prev` leaves CPU `cpu` in `state` (R: preempted, still runnable),
    `next` takes it; `frame` is prev's innermost user-space frame (the last of its call chain)."""

    __slots__ = ("time", "cpu", "prev", "prev_comm", "state", "next", "next_comm", "frame")

    def __init__(self, m, frame):
        self.time = float(m["time"])
        self.cpu = int(m["cpu"])
        self.prev, self.prev_comm = int(m["prev"]), m["prev_comm"]
        self.state = "R" if m["state"].startswith("R") else "S"
        self.next, self.next_comm = int(m["next"]), m["next_comm"]
        self.frame = frame


# What `perf script` prints of each event for `parse` (add `ip,sym` for the call chains).
FIELDS = "comm,tid,cpu,time,event,trace"


def parse(text):
    """The sched_switch and sched_wakeup events of `perf script -F FIELDS[,ip,sym]`, in time
    order; a switch's `frame` is the last line of its call chain when one is printed (the
    leaving thread's innermost user frame), else `?`."""
    out, last = [], None
    for line in text.splitlines():
        m = SWITCH.match(line)
        if m:
            last = Switch(m, "?")
            out.append(last)
            continue
        m = WAKEUP.match(line)
        if m:
            out.append(Wakeup(m))
            last = None
        elif last is not None and line.strip():
            last.frame = line.split()[-1]
    out.sort(key=lambda e: e.time)
    return out


def owner(tid, comm, server_tids, instance, pool):
    """The group a thread's time is counted under."""
    if tid == 0:
        return "idle"
    if tid == instance:
        return "instance"
    if tid in pool:
        return "ONNX Runtime pool"
    if tid in server_tids:
        name = re.sub(r"\d+$", "", comm)
        return "server " + name.rstrip("-_")
    return comm


def analyze(events, server_tids, instance, pool):
    """Per-CPU time by owner, the instance's states, and its state against idle CPUs; shares of
    the traced window."""
    events = [e for e in events if isinstance(e, Switch)]
    if not events:
        raise ValueError("no sched_switch events in the trace")
    t0, t1 = events[0].time, events[-1].time
    span = t1 - t0
    on_cpu = {}  # cpu -> (owner, since)
    per_cpu = collections.defaultdict(float)
    inst_state, inst_since, inst_frame = None, t0, None
    states = collections.defaultdict(float)  # on / R / S
    preempted_by = collections.Counter()
    preempted_at = collections.Counter()
    asleep_at = collections.defaultdict(float)
    preemptions = 0
    pool_state = "S"
    overlap = collections.defaultdict(float)
    last = t0
    name = lambda tid, comm: owner(tid, comm, server_tids, instance, pool)  # noqa: E731
    for e in events:
        dt = e.time - last
        if inst_state is not None and dt > 0:
            known = len(on_cpu)
            idle = sum(1 for o, _ in on_cpu.values() if o == "idle")
            overlap[(inst_state, pool_state, idle, known)] += dt
        last = e.time
        if e.cpu in on_cpu:
            o, since = on_cpu[e.cpu]
            per_cpu[(e.cpu, o)] += e.time - since
        on_cpu[e.cpu] = (name(e.next, e.next_comm), e.time)
        if e.prev == instance:
            if inst_state is not None:
                states["on"] += e.time - inst_since
            inst_state, inst_since, inst_frame = e.state, e.time, e.frame
            if e.state == "R":
                preemptions += 1
                preempted_by[name(e.next, e.next_comm)] += 1
                preempted_at[e.frame] += 1
        if e.next == instance:
            if inst_state in ("R", "S"):
                states[inst_state] += e.time - inst_since
                if inst_state == "S":
                    asleep_at[inst_frame] += e.time - inst_since
            inst_state, inst_since = "on", e.time
        if e.prev in pool:
            pool_state = e.state
        if e.next in pool:
            pool_state = "on"
    # The window ends at the last switch: each CPU's owner and the instance's state run to it.
    for cpu, (o, since) in on_cpu.items():
        per_cpu[(cpu, o)] += t1 - since
    if inst_state in ("on", "R", "S"):
        states[inst_state] += t1 - inst_since
        if inst_state == "S":
            asleep_at[inst_frame] += t1 - inst_since
    cpus = sorted({c for c, _ in per_cpu})
    return {
        "span_s": span,
        "per_cpu": {c: {o: v / span for (cc, o), v in per_cpu.items() if cc == c} for c in cpus},
        "instance": {k: v / span for k, v in states.items()},
        "preemptions": preemptions,
        "preempted_mean_us": states["R"] / preemptions * 1e6 if preemptions else None,
        "preempted_by": dict(preempted_by.most_common()),
        "preempted_at": dict(preempted_at.most_common(8)),
        "asleep_at": {k: v / span for k, v in sorted(asleep_at.items(), key=lambda kv: -kv[1])[:5]},
        # Only once every CPU has been seen switching (its owner known) does the idle count hold.
        "overlap": {f"{i}|{p}|{n}": v / span for (i, p, n, known), v in overlap.items() if known == len(cpus)},
    }


def wakeups(events, server_tids, instance, pool):
    """Per owner, how its threads' wake-ups went: woken onto a CPU that was idle or onto one
    running another thread (which it must then preempt or wait behind), and how long from the
    wake-up to running (µs, p50 and p90)."""
    on_cpu, woken = {}, {}
    waits = collections.defaultdict(list)
    for e in events:
        if isinstance(e, Wakeup):
            if e.target in on_cpu:  # the target CPU's owner is known
                woken[e.woken] = (e.time, e.woken_comm, on_cpu[e.target] == 0)
            continue
        on_cpu[e.cpu] = e.next
        if e.next in woken:
            at, comm, to_idle = woken.pop(e.next)
            who = owner(e.next, comm, server_tids, instance, pool)
            waits[(who, "an idle CPU" if to_idle else "a busy CPU")].append((e.time - at) * 1e6)
    out = {}
    for (who, where), v in waits.items():
        v.sort()
        out.setdefault(who, {})[where] = {"count": len(v), "p50_us": v[len(v) // 2], "p90_us": v[int(len(v) * 0.9)]}
    return out


def server_threads(pid, model):
    """The server's thread ids, its instance's thread (the lowest id named after the model's
    first instance) and that instance's ONNX Runtime pool threads."""
    tids = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            tids[int(t)] = open(f"/proc/{pid}/task/{t}/comm").read().strip()
        except OSError:
            pass
    named = sorted(t for t, c in tids.items() if c.startswith(f"inst-{model}_0_0"[:15]))
    if not named:
        names = sorted(set(tids.values()))
        raise RuntimeError(f"no thread of the model's first instance (inst-{model}_0_0) among {names}")
    return tids, named[0], set(named[1:])


def cpu_list(cpus):
    """`taskset -c`'s CPU list (e.g. `0,2-3`) as a set."""
    out = set()
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def as_made(tids):
    """Each thread's CPUs and scheduling policy as the server (and ONNX Runtime: with its default
    thread count it pins each pool thread to a CPU of its own) made them."""
    return {t: (os.sched_getaffinity(t), os.sched_getscheduler(t)) for t in tids}


class SchedAttr(ctypes.Structure):
    """Linux's `struct sched_attr` (SCHED_ATTR_SIZE_VER1)."""
    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
                ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32),
                ("sched_runtime", ctypes.c_uint64), ("sched_deadline", ctypes.c_uint64),
                ("sched_period", ctypes.c_uint64), ("sched_util_min", ctypes.c_uint32),
                ("sched_util_max", ctypes.c_uint32)]


SYS_SCHED_SETATTR, SYS_SCHED_GETATTR = 314, 315  # x86_64
LIBC = ctypes.CDLL(None, use_errno=True)


def set_slice_ns(tid, ns):
    """Asks the fair scheduler (EEVDF, Linux 6.12 and later) for a slice of `ns` for the thread
    (0: the default): a shorter slice gives a woken thread an earlier deadline, so it preempts the
    thread on its CPU sooner, and runs less before it is preempted itself."""
    attr = SchedAttr()
    if LIBC.syscall(SYS_SCHED_GETATTR, tid, ctypes.byref(attr), ctypes.sizeof(attr), 0) != 0:
        raise OSError(ctypes.get_errno(), f"sched_getattr({tid})")
    attr.size, attr.sched_runtime = ctypes.sizeof(attr), ns
    if LIBC.syscall(SYS_SCHED_SETATTR, tid, ctypes.byref(attr), 0) != 0:
        raise OSError(ctypes.get_errno(), f"sched_setattr({tid})")


def slices(spec):
    """`--slice-us`'s GROUP=US entries as {group: ns}."""
    out = {}
    for item in spec:
        group, _, us = item.partition("=")
        if group not in ("instance", "pool", "frontends") or not us.isdigit():
            sys.exit(f"--slice-us {item}: want instance|pool|frontends=MICROSECONDS")
        out[group] = int(us) * 1000
    return out


def change(args, tids, instance, pool, made, on):
    """Puts the threads in the changed state the options ask for (`on`), or back as they were
    made (`made`): SCHED_BATCH (`--batch`), the CPU lists (`--pin-*`), the slices
    (`--slice-us`)."""
    groups = {g for g in args.batch.split(",") if g}
    members = {"instance": [instance], "pool": sorted(pool),
               "frontends": sorted(t for t, comm in tids.items() if comm.startswith(("actix", "grpc")))}
    for group, ns in slices(args.slice_us).items():
        for t in members[group]:
            set_slice_ns(t, ns if on else 0)  # the server sets no slice of its own
    for t, comm in tids.items():
        if ("frontends" in groups and comm.startswith(("actix", "grpc"))) or ("pool" in groups and t in pool):
            os.sched_setscheduler(t, os.SCHED_BATCH if on else made[t][1], os.sched_param(0))
    fifo = {g for g in args.fifo.split(",") if g}
    for t in [instance] * ("instance" in fifo) + sorted(pool) * ("pool" in fifo):
        if on:
            os.sched_setscheduler(t, os.SCHED_FIFO, os.sched_param(1))
        else:
            os.sched_setscheduler(t, made[t][1], os.sched_param(0))
    for cpus, threads in ((args.pin_instance, [instance]), (args.pin_pool, sorted(pool)),
                          (args.pin_frontends, members["frontends"])):
        for t in threads if cpus else ():
            os.sched_setaffinity(t, cpu_list(cpus) if on else made[t][0])


def phase(args, srv, seconds):
    """Infer/s and the server's CPU µs per inference over `seconds` of the running load."""
    before, cpu0, t0 = common.model_stats(srv.base, args.model), common.tree_cpu_s(srv.proc.pid), time.time()
    time.sleep(seconds)
    d = common.stats_delta(common.model_stats(srv.base, args.model), before)
    cpu, wall = common.tree_cpu_s(srv.proc.pid) - cpu0, time.time() - t0
    n = d["inference_count"]
    return {"infer_per_s": n / wall, "per_execution": n / max(d["execution_count"], 1),
            "server_cpu_us": cpu / max(n, 1) * 1e6}


def trace(args, srv, out_dir, label, tids, instance, pool):
    data = os.path.join(out_dir, f"sched-{label}.data")
    before, t0 = common.model_stats(srv.base, args.model), time.time()
    subprocess.run(["perf", "record", "-q", "-e", "sched:sched_switch", "-e", "sched:sched_wakeup", "-a", "-g",
                    "-o", data,
                    "--", "sleep", str(args.seconds)], check=True,
                   stdout=subprocess.DEVNULL, stderr=open(os.path.join(out_dir, f"perf-{label}.log"), "w"))
    wall = time.time() - t0
    d = common.stats_delta(common.model_stats(srv.base, args.model), before)
    text = subprocess.run(["perf", "script", "-i", data, "-F", FIELDS + ",ip,sym"],
                          check=True, capture_output=True, text=True).stdout
    events = parse(text)
    result = analyze(events, set(tids), instance, pool)
    result.update(wakeups=wakeups(events, set(tids), instance, pool),
                  infer_per_s=d["inference_count"] / wall,
                  per_execution=d["inference_count"] / max(d["execution_count"], 1))
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--protocol", default="http", choices=("http", "grpc"))
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=2.0, help="each traced window")
    ap.add_argument("--warmup-s", type=float, default=5.0, help="load before anything is measured")
    ap.add_argument("--batch", default="", help="comma-separated: frontends, pool (SCHED_BATCH)")
    ap.add_argument("--fifo", default="", help="comma-separated: instance, pool (SCHED_FIFO, priority 1)")
    ap.add_argument("--pin-instance", metavar="CPUS", help="taskset CPU list for the instance's thread")
    ap.add_argument("--pin-pool", metavar="CPUS", help="taskset CPU list for ONNX Runtime's pool threads")
    ap.add_argument("--pin-frontends", metavar="CPUS",
                    help="taskset CPU list for the frontend threads (actix-* and grpc-*)")
    ap.add_argument("--slice-us", action="append", default=[], metavar="GROUP=US",
                    help="the fair scheduler's slice for instance, pool or frontends (repeatable)")
    ap.add_argument("--rounds", type=int, default=0,
                    help="with a change: rounds of two phases, as the server made its threads and "
                         "changed, the order alternating, before the traces")
    ap.add_argument("--phase-s", type=float, default=4.0, help="each phase of --rounds")
    args = ap.parse_args()
    groups = {g for g in args.batch.split(",") if g}
    if groups - {"frontends", "pool"}:
        sys.exit(f"--batch: unknown groups {sorted(groups - {'frontends', 'pool'})}")
    fifo = {g for g in args.fifo.split(",") if g}
    if fifo - {"instance", "pool"}:
        sys.exit(f"--fifo: unknown groups {sorted(fifo - {'instance', 'pool'})}")
    changed = bool(groups or fifo or args.pin_instance or args.pin_pool or args.pin_frontends or slices(args.slice_us))
    if args.rounds and not changed:
        sys.exit("--rounds compares the threads as made with a change: give --batch, --fifo, --pin-* or --slice-us")
    common.check_inputs(args, [args.model])
    out_dir, stamp = common.make_out_dir(args, "sched_trace")
    header = common.run_header(args)
    phases, traces = [], {}
    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=[args.model], ready=(args.model,)) as srv:
        pa = subprocess.Popen(
            [args.perf_analyzer, "-m", args.model, "-u", srv.url(args.protocol), "-i", args.protocol,
             "--concurrency-range", str(args.concurrency), "-p", "600000", "-s", "50", "--max-trials", "1"],
            stdout=open(os.path.join(out_dir, "perf_analyzer.log"), "w"), stderr=subprocess.STDOUT)
        try:
            time.sleep(args.warmup_s)
            if pa.poll() is not None:
                sys.exit(f"perf_analyzer exited early; see {out_dir}/perf_analyzer.log")
            tids, instance, pool = server_threads(srv.proc.pid, args.model)
            made = as_made(tids)
            for rnd in range(args.rounds):
                for on in ((False, True) if rnd % 2 == 0 else (True, False)):
                    change(args, tids, instance, pool, made, on)
                    time.sleep(0.5)
                    phases.append(dict(phase(args, srv, args.phase_s), round=rnd, changed=on))
                    print(phases[-1], flush=True)
            for on in ((False, True) if changed else (False,)):
                change(args, tids, instance, pool, made, on)
                time.sleep(0.5)
                traces["changed" if on else "as made"] = trace(args, srv, out_dir, "changed" if on else "as-made",
                                                               tids, instance, pool)
        finally:
            pa.kill()
            pa.wait()
    placement = {"instance": sorted(made[instance][0]), "pool": [sorted(made[t][0]) for t in sorted(pool)]}
    summarize(args, out_dir, stamp, header, phases, traces, placement)


def pct(x):
    return f"{100 * x:.1f} %"


def change_text(args):
    parts = []
    if args.batch:
        parts.append(f"SCHED_BATCH on {args.batch}")
    if args.fifo:
        parts.append(f"SCHED_FIFO (priority 1) on {args.fifo}")
    if args.pin_instance:
        parts.append(f"the instance's thread on CPUs {args.pin_instance}")
    if args.pin_pool:
        parts.append(f"ONNX Runtime's pool on CPUs {args.pin_pool}")
    if args.pin_frontends:
        parts.append(f"the frontend threads on CPUs {args.pin_frontends}")
    for group, ns in slices(args.slice_us).items():
        parts.append(f"a slice of {ns // 1000} µs for the {group} thread(s)")
    return "; ".join(parts)


def summarize(args, out_dir, stamp, header, phases, traces, placement):
    lines = [f"# Where the instance's thread is at {args.model} {args.protocol} c{args.concurrency} ({stamp})", "",
             f"server {header['server']} (git HEAD {header['git_head'][:12]}); load average "
             f"{header['loadavg_at_start']:.2f} at start; every CPU's scheduler switches traced for "
             f"{args.seconds:g} s" + (f"; the change: {change_text(args)}" if traces.keys() - {"as made"} else "") + ".",
             "", f"As made, the instance's thread may run on CPUs {placement['instance']} and ONNX Runtime's pool "
             f"threads on {placement['pool']}.", ""]
    if phases:
        lines += [f"Phases of {args.phase_s:g} s on the same load, the threads as made and changed, alternating:", "",
                  "| round | threads | infer/s | requests per execution | server CPU µs per inference |",
                  "| --- | --- | --- | --- | --- |"]
        for p in phases:
            lines.append(f"| {p['round']} | {'changed' if p['changed'] else 'as made'} | {p['infer_per_s']:.0f} | "
                         f"{p['per_execution']:.2f} | {p['server_cpu_us']:.0f} |")
        ratios = []
        for rnd in sorted({p["round"] for p in phases}):
            pair = {p["changed"]: p for p in phases if p["round"] == rnd}
            if len(pair) == 2:
                ratios.append((pair[True]["infer_per_s"] / pair[False]["infer_per_s"],
                               pair[True]["server_cpu_us"] / pair[False]["server_cpu_us"]))
        if ratios:
            lines += ["", "Changed ÷ as made, per round: infer/s " + ", ".join(f"{a:.3f}" for a, _ in ratios)
                      + f" (median {common.median([a for a, _ in ratios]):.3f}); server CPU per inference "
                      + ", ".join(f"{b:.3f}" for _, b in ratios) + f" (median {common.median([b for _, b in ratios]):.3f}).", ""]
    for label, r in traces.items():
        lines += trace_lines(label, r)
    common.write_summary(out_dir, {"header": header, "stamp": stamp, "args": vars(args), "phases": phases,
                                   "traces": traces, "placement": placement}, lines)


def trace_lines(label, r):
    lines = [f"## The trace, threads {label}", "",
             f"{r['infer_per_s']:.0f} infer/s, {r['per_execution']:.2f} requests per execution over the "
             f"{r['span_s']:.2f} s traced.", "", "Each CPU's time by owner:", ""]
    for cpu, owners in r["per_cpu"].items():
        lines.append(f"- CPU {cpu}: " + ", ".join(f"{o} {pct(v)}" for o, v in sorted(owners.items(), key=lambda kv: -kv[1])
                                                   if v >= 0.005))
    inst = r["instance"]
    lines += ["", "The instance's thread:", "",
              f"- on a CPU {pct(inst.get('on', 0))}; runnable but preempted {pct(inst.get('R', 0))} "
              f"({r['preemptions']} times, mean {r['preempted_mean_us'] or 0:.0f} µs); asleep {pct(inst.get('S', 0))}",
              "- preempted by: " + ", ".join(f"{o} {n}" for o, n in r["preempted_by"].items()),
              "- its innermost user frame as it lost the CPU (`[unknown]`: interrupted in code without "
              "symbols, e.g. at the scheduler's tick): "
              + ", ".join(f"`{f}` {n}" for f, n in r["preempted_at"].items()),
              "- asleep in: " + ", ".join(f"`{f}` {pct(v)}" for f, v in r["asleep_at"].items() if v >= 0.0005),
              "", "The instance's state and its pool's against the CPUs idle at the same time (share of the "
              "window; a thread woken but not yet on a CPU counts as asleep):", "",
              "| instance | ONNX Runtime pool | CPUs idle | share |", "| --- | --- | --- | --- |"]
    names = {"on": "on a CPU", "R": "preempted", "S": "asleep"}
    for key, v in sorted(r["overlap"].items(), key=lambda kv: -kv[1]):
        if v >= 0.005:
            i, p, n = key.split("|")
            lines.append(f"| {names[i]} | {names[p]} | {n} | {pct(v)} |")
    lines += ["", "Wake-ups: onto a CPU that idled, or onto one running another thread, and the wait from "
              "the wake-up to running (µs, p50 / p90):", "",
              "| threads | onto an idle CPU | onto a busy CPU |", "| --- | --- | --- |"]
    cell = lambda w: f"{w['count']}: {w['p50_us']:.0f} / {w['p90_us']:.0f}" if w else "-"  # noqa: E731
    for who, ws in sorted(r["wakeups"].items(), key=lambda kv: -sum(w["count"] for w in kv[1].values())):
        if sum(w["count"] for w in ws.values()) >= 50:
            lines.append(f"| {who} | {cell(ws.get('an idle CPU'))} | {cell(ws.get('a busy CPU'))} |")
    return lines + [""]


if __name__ == "__main__":
    main()
