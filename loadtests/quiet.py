#!/usr/bin/env python3
"""For benchmarks on a machine shared with builds and tests (needs root and cgroup v1's cpu
controller). Runs a command while every other process on the machine is held to a small CPU
quota (a cpu group capped at QUIET_QUOTA_US per 100 ms, 8 % of one core by default), swept every
0.5 s so processes started meanwhile are caught too; afterwards everything goes back to the root
group. `nice` is not enough: libtorch's and ONNX Runtime's intra-op threads wait on each other,
so any slice given to another process stalls both.

  python3 loadtests/quiet.py <command> [args...]
"""
import os, subprocess, sys, time

ROOT = "/sys/fs/cgroup/cpu"
BG = f"{ROOT}/background"
QUOTA_US, PERIOD_US = int(os.environ.get("QUIET_QUOTA_US", "8000")), 100000

os.makedirs(BG, exist_ok=True)
open(f"{BG}/cpu.cfs_period_us", "w").write(str(PERIOD_US))
open(f"{BG}/cpu.cfs_quota_us", "w").write(str(QUOTA_US))
child = subprocess.Popen(sys.argv[1:], start_new_session=True)
sid = child.pid
me = os.getpid()

def sweep():
    for pid in open(f"{ROOT}/cgroup.procs").read().split():
        pid = int(pid)
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid or int(fields[2]) == 0:  # our session; kernel threads (ppid 0)
                continue
            if int(fields[2]) == 2:  # kthreadd's children
                continue
            with open(f"{BG}/cgroup.procs", "w") as f:
                f.write(str(pid))
        except (OSError, ValueError, IndexError):
            pass

try:
    while child.poll() is None:
        sweep()
        time.sleep(0.5)
finally:
    for _ in range(3):
        for pid in open(f"{BG}/cgroup.procs").read().split():
            try:
                with open(f"{ROOT}/cgroup.procs", "w") as f:
                    f.write(pid)
            except OSError:
                pass
    try:
        os.rmdir(BG)
    except OSError as e:
        print(f"quiet.py: {BG} left: {e}", file=sys.stderr)
sys.exit(child.returncode)
