#!/usr/bin/env python3
"""For benchmarks on a machine shared with builds and tests (needs root and cgroup v1's cpu
controller). Runs a command while every other process on the machine is held to a small CPU
quota (a cpu group capped at QUIET_QUOTA_US per 100 ms, 8 % of one core by default), swept every
0.5 s so processes started meanwhile are caught too (the command, its session and its descendants,
including those that start sessions of their own, keep the whole machine); afterwards everything
goes back to the root group. `nice` is not enough: libtorch's and ONNX Runtime's intra-op threads wait on each other,
so any slice given to another process stalls both.

What the held-back processes may still do to a benchmark's tail (loadtests/PROFILES.md,
"bls_add_sub's odd requests at c1"): each time their quota is refilled they run in a burst,
and a benchmark thread woken on that CPU then waited for it (3-8 ms wake-to-run, once or twice
per 100 ms period: about 0.8 % of the requests of a c1 run, for any server, which is where a
p99 lies). So the group is marked idle (`cpu.idle`: a thread of the root group that wakes
preempts it, as SCHED_IDLE; it shortened those waits but did not remove them all), and the
sweep itself runs as SCHED_IDLE (it reads every process's /proc entry: 1.5-3 ms of CPU every
0.5 s, which delayed the benchmark's threads as much). QUIET_PERIOD_US changes the period (the
quota scales with it; a 12.5 ms period did not help: the bursts came at the scheduler tick,
4 ms, whatever the period); QUIET_IDLE=0 and QUIET_SWEEP_IDLE=0 undo the other two.
QUIET_BENCH_SHARES=262144 (off by default, tried in two runs only) puts the command and its
descendants in a cpu group of their own with that weight: 0.34-0.43 % of bls_add_sub c1's
requests over ~2.4 ms against 0.46-0.51 % without, alternated in the same session.

  python3 loadtests/quiet.py <command> [args...]
"""
import os, subprocess, sys, time

ROOT = "/sys/fs/cgroup/cpu"
BG = f"{ROOT}/background"
SHARE_US = int(os.environ.get("QUIET_QUOTA_US", "8000"))  # per 100 ms
MIN_QUOTA_US = 1000  # the kernel's least cpu.cfs_quota_us
PERIOD_US = int(os.environ.get("QUIET_PERIOD_US", "100000"))
QUOTA_US = max(MIN_QUOTA_US, SHARE_US * PERIOD_US // 100000)
IDLE = os.environ.get("QUIET_IDLE", "1")

os.makedirs(BG, exist_ok=True)
open(f"{BG}/cpu.cfs_period_us", "w").write(str(PERIOD_US))
open(f"{BG}/cpu.cfs_quota_us", "w").write(str(QUOTA_US))
if os.path.exists(f"{BG}/cpu.idle"):
    open(f"{BG}/cpu.idle", "w").write(IDLE)
# QUIET_BENCH_SHARES=N: the command and its descendants run in a cpu group of their own with that
# weight (cpu.shares), so the held-back group competes with one heavy entity.
BENCH = f"{ROOT}/benchmark" if os.environ.get("QUIET_BENCH_SHARES") else None
if BENCH:
    os.makedirs(BENCH, exist_ok=True)
    open(f"{BENCH}/cpu.shares", "w").write(os.environ["QUIET_BENCH_SHARES"])


def enter_bench():
    with open(f"{BENCH}/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))


child = subprocess.Popen(sys.argv[1:], start_new_session=True, preexec_fn=enter_bench if BENCH else None)
if os.environ.get("QUIET_SWEEP_IDLE", "1") != "0":
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # after the Popen: the command keeps SCHED_OTHER
sid = child.pid
me = os.getpid()

def sweep():
    stats = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                stats[int(pid)] = (int(fields[1]), int(fields[3]))  # ppid, session
            except (OSError, ValueError, IndexError):
                pass

    def ours(pid):
        # The command's session, or a descendant of the command that started a session of its
        # own (a benchmark's servers, and their children such as the Python backend's stubs).
        for _ in range(64):
            if pid == sid or pid not in stats:
                return pid == sid
            ppid, session = stats[pid]
            if session == sid:
                return True
            pid = ppid
        return False

    for pid in open(f"{ROOT}/cgroup.procs").read().split():
        pid = int(pid)
        if pid == me or pid not in stats:
            continue
        ppid, _ = stats[pid]
        if ppid in (0, 2):  # kernel threads (ppid 0) and kthreadd's children
            continue
        if ours(pid):
            continue
        try:
            with open(f"{BG}/cgroup.procs", "w") as f:
                f.write(str(pid))
        except OSError:
            pass


import signal
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

try:
    while child.poll() is None:
        sweep()
        time.sleep(0.5)
finally:
    for group in [BG] + ([BENCH] if BENCH else []):
        for _ in range(3):
            for pid in open(f"{group}/cgroup.procs").read().split():
                try:
                    with open(f"{ROOT}/cgroup.procs", "w") as f:
                        f.write(pid)
                except OSError:
                    pass
        try:
            os.rmdir(group)
        except OSError as e:
            print(f"quiet.py: {group} left: {e}", file=sys.stderr)
sys.exit(child.returncode)
