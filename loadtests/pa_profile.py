"""Where the server's CPU per inference goes at perf_analyzer's concurrency levels on
accumulate_oldest (--sequence-length 10, issue 17 point 1): one server (a temp copy of
accumulate_oldest and add_sub), perf_analyzer over gRPC at each count in turn; 12 s into each
count, for 6 s, `perf record -g` on the server and each server thread's CPU from /proc, divided
by the inferences the server's statistics counted over the same 6 s.

  flock /tmp/quiet.lock python3 loadtests/quiet.py .venv/bin/python loadtests/pa_profile.py \
      <release tritium> <out dir> 64,4000 [perf_analyzer flags, e.g. --streaming]

Flags after the counts go to perf_analyzer as they are (sequence_scaling.py's --pa-mode flags:
`--sync`, `-a --max-threads 16`, `-a --streaming --max-threads 16`). Over the same window it
also prints perf_analyzer's CPU (its process total: summing its ~N threads' own counters
undercounts at thousands of threads, each below the 10 ms tick) and the machine's from
/proc/stat (busy and idle cores, busy µs per inference). PA_PROFILE_PERF=0 skips `perf record`
(the window is then a plain 6 s sleep, without perf's own cost).

Prints one line per count (inferences/s, server CPU µs per inference, by thread); leaves
perf-<count>.data and perf_analyzer's log in the out dir (`perf report -i ... --sort comm,sym`).
"""
import os, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
BIN = sys.argv[1]; OUT = sys.argv[2]; COUNTS = [int(c) for c in sys.argv[3].split(",")]; FLAGS = sys.argv[4:]
PERF = os.environ.get("PA_PROFILE_PERF", "1") != "0"
TICK = os.sysconf("SC_CLK_TCK")


def machine():
    """/proc/stat's first line: (busy, idle) CPU seconds of the whole machine so far."""
    f = [int(x) / TICK for x in open("/proc/stat").readline().split()[1:8]]
    return sum(f) - f[3] - f[4], f[3] + f[4]


PA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "perf_analyzer")
os.makedirs(OUT, exist_ok=True)
with common.bench_server(BIN, common.DEFAULT_ORT, common.DEFAULT_REPO, OUT, models=["accumulate_oldest", "add_sub"]) as srv:
    for c in COUNTS:
        pa = subprocess.Popen([PA, "-m", "accumulate_oldest", "-u", srv.url("grpc"), "-i", "grpc", "--concurrency-range", str(c),
                               "-p", "4000", "-s", "50", "--sequence-length", "10", "--max-trials", "6"] + FLAGS,
                              stdout=open(f"{OUT}/pa-{c}.log", "w"), stderr=subprocess.STDOUT)
        time.sleep(12)
        b = common.model_stats(srv.base, "accumulate_oldest"); tb = common.thread_cpu_s(srv.proc.pid); t0 = time.time()
        pb = common.tree_cpu_s(pa.pid); mb = machine(); tm = time.time()
        if PERF:
            subprocess.run(["perf", "record", "-F", "1999", "-g", "-p", str(srv.proc.pid), "-o", f"{OUT}/perf-{c}.data",
                            "--", "sleep", "6"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        else:
            time.sleep(6)
        ma = machine(); mwall = time.time() - tm
        a = common.model_stats(srv.base, "accumulate_oldest"); ta = common.thread_cpu_s(srv.proc.pid); wall = time.time() - t0
        pa_s = common.tree_cpu_s(pa.pid) - pb
        busy, idle = ma[0] - mb[0], ma[1] - mb[1]
        n = a["inference_count"] - b["inference_count"]
        by = {}
        for tid, (name, s) in ta.items():
            d = s - tb.get(tid, (name, 0.0))[1]
            by[name] = by.get(name, 0.0) + d
        tot = sum(by.values())
        print(f"c{c}: {n} inferences in {wall:.1f}s = {n/wall:.0f}/s; machine busy {busy/mwall:.2f} cores, idle {idle/mwall:.2f}, "
              f"busy per inference {busy / mwall / (n / wall) * 1e6:.1f} us; perf_analyzer CPU per inference {pa_s/n*1e6:.1f} us; "
              f"server CPU per inference {tot/n*1e6:.1f} us; by thread: " +
              ", ".join(f"{k} {v/n*1e6:.1f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1]) if v / n * 1e6 >= 0.5), flush=True)
        with open(f"{OUT}/n-{c}.txt", "w") as f:
            f.write(str(n))
        pa.terminate(); pa.wait()
        time.sleep(3)
