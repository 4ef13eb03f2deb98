"""loadtests/sched_trace.py reads `perf script` output of scheduler switches back into where the
instance's thread was: a small trace of two CPUs written by hand, each figure known."""

import sys

import pytest

from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "loadtests"))
import sched_trace  # noqa: E402

INSTANCE, POOL, WORKER, CLIENT = 100, 101, 102, 200


def switch(t, cpu, prev, prev_comm, state, nxt, next_comm, frame):
    """One sched_switch as `perf script -F comm,tid,cpu,time,event,trace,ip,sym` prints it, with
    a kernel frame and the previous thread's innermost user frame."""
    return (f"{prev_comm:>16} {prev:>6} [{cpu:03d}] {t:.6f}: sched:sched_switch: prev_comm={prev_comm} "
            f"prev_pid={prev} prev_prio=120 prev_state={state} ==> next_comm={next_comm} next_pid={nxt} "
            f"next_prio=120\n\tffffffff82248208 __schedule\n\t           87ebf {frame}\n")


def wakeup(t, cpu, waker, waker_comm, woken, woken_comm, target):
    return (f"{waker_comm:>16} {waker:>6} [{cpu:03d}] {t:.6f}: sched:sched_wakeup: comm={woken_comm} "
            f"pid={woken} prio=120 target_cpu={target:03d}\n\tffffffff8113c0a1 ttwu_do_activate\n")


# CPU 0: the instance runs 0-4 ms, the HTTP worker it woke preempts it 4-5 ms (CPU 1 idle from
# 3 ms meanwhile), the instance runs 5-8 ms and sleeps 8-10 ms with CPU 0 idle.
# CPU 1: the pool 0-2 ms, the client 2-3 ms, idle 3-10 ms.
TRACE = "\n".join([
    switch(0.000, 0, 0, "swapper/0", "R", INSTANCE, "inst-mlp_0_0", "[unknown]"),
    switch(0.000, 1, 0, "swapper/1", "R", POOL, "inst-mlp_0_0", "[unknown]"),
    switch(0.002, 1, POOL, "inst-mlp_0_0", "S", CLIENT, "perf_analyzer", "__futex_abstimed_wait_common"),
    switch(0.003, 1, CLIENT, "perf_analyzer", "S", 0, "swapper/1", "recv"),
    # The instance wakes the HTTP worker onto its own CPU, which is busy: 0.5 ms to run.
    wakeup(0.0035, 0, INSTANCE, "inst-mlp_0_0", WORKER, "actix-rt|system", 0),
    switch(0.004, 0, INSTANCE, "inst-mlp_0_0", "R", WORKER, "actix-rt|system", "mio::sys::unix::waker::Waker::wake"),
    switch(0.005, 0, WORKER, "actix-rt|system", "S", INSTANCE, "inst-mlp_0_0", "epoll_wait"),
    switch(0.008, 0, INSTANCE, "inst-mlp_0_0", "S", 0, "swapper/0", "syscall"),
    # The client wakes the instance onto CPU 0, idle: 0.2 ms to run.
    wakeup(0.0098, 1, 0, "swapper/1", INSTANCE, "inst-mlp_0_0", 0),
    switch(0.010, 0, 0, "swapper/0", "R", INSTANCE, "inst-mlp_0_0", "[unknown]"),
])


def test_parse_reads_each_switch_and_the_leaving_threads_user_frame():
    events = sched_trace.parse(TRACE)
    assert len(events) == 10
    switches = [e for e in events if isinstance(e, sched_trace.Switch)]
    assert len(switches) == 8
    e = switches[4]
    assert (e.cpu, e.prev, e.state, e.next, e.next_comm) == (0, INSTANCE, "R", WORKER, "actix-rt|system")
    assert e.frame == "mio::sys::unix::waker::Waker::wake"
    assert switches[6].state == "S" and switches[6].frame == "syscall"
    w = events[4]
    assert isinstance(w, sched_trace.Wakeup) and (w.woken, w.target) == (WORKER, 0)


def test_analyze_splits_the_instances_time_and_each_cpus():
    r = sched_trace.analyze(sched_trace.parse(TRACE), {INSTANCE, POOL, WORKER}, INSTANCE, {POOL})
    assert r["span_s"] == pytest.approx(0.010)
    inst = r["instance"]
    assert inst["on"] == pytest.approx(0.7)  # 0-4 and 5-8 ms
    assert inst["R"] == pytest.approx(0.1)  # 4-5 ms
    assert inst["S"] == pytest.approx(0.2)  # 8-10 ms
    assert r["preemptions"] == 1 and r["preempted_mean_us"] == pytest.approx(1000)
    assert r["preempted_by"] == {"server actix-rt|system": 1}
    assert r["preempted_at"] == {"mio::sys::unix::waker::Waker::wake": 1}
    assert r["asleep_at"] == {"syscall": pytest.approx(0.2)}
    cpu0, cpu1 = r["per_cpu"][0], r["per_cpu"][1]
    assert cpu0 == {"instance": pytest.approx(0.7), "server actix-rt|system": pytest.approx(0.1),
                    "idle": pytest.approx(0.2)}
    assert cpu1["ONNX Runtime pool"] == pytest.approx(0.2)
    assert cpu1["perf_analyzer"] == pytest.approx(0.1)
    assert cpu1["idle"] == pytest.approx(0.7)  # from 3 ms to the end of the window, with no switch


def test_overlap_counts_a_preempted_instance_beside_an_idle_cpu():
    r = sched_trace.analyze(sched_trace.parse(TRACE), {INSTANCE, POOL, WORKER}, INSTANCE, {POOL})
    o = r["overlap"]
    assert o["on|on|0"] == pytest.approx(0.2)  # 0-2 ms: both computing
    assert o["on|S|0"] == pytest.approx(0.1)  # 2-3 ms: the client on CPU 1
    assert o["on|S|1"] == pytest.approx(0.4)  # 3-4 and 5-8 ms: CPU 1 idle
    assert o["R|S|1"] == pytest.approx(0.1)  # 4-5 ms: preempted while CPU 1 idled
    assert o["S|S|2"] == pytest.approx(0.2)  # 8-10 ms: nothing runs
    assert sum(o.values()) == pytest.approx(1.0)


def test_wakeups_tell_a_busy_cpu_from_an_idle_one():
    w = sched_trace.wakeups(sched_trace.parse(TRACE), {INSTANCE, POOL, WORKER}, INSTANCE, {POOL})
    assert w == {
        "server actix-rt|system": {"a busy CPU": {"count": 1, "p50_us": pytest.approx(500), "p90_us": pytest.approx(500)}},
        "instance": {"an idle CPU": {"count": 1, "p50_us": pytest.approx(200), "p90_us": pytest.approx(200)}},
    }


def test_cpu_lists_read_as_taskset_writes_them():
    assert sched_trace.cpu_list("0") == {0}
    assert sched_trace.cpu_list("0,2-4") == {0, 2, 3, 4}


def test_parse_reads_output_printed_without_call_chains():
    # chat_tail.py asks perf for the events alone: no frame lines, no blank lines between events.
    bare = "\n".join(line for line in TRACE.splitlines() if line.strip() and not line.startswith("\t"))
    events = sched_trace.parse(bare)
    assert [type(e).__name__ for e in events] == [type(e).__name__ for e in sched_trace.parse(TRACE)]
    assert all(e.frame == "?" for e in events if isinstance(e, sched_trace.Switch))


def test_slice_specs_are_read_and_bad_ones_refused():
    assert sched_trace.slices(["pool=100", "instance=5000"]) == {"pool": 100_000, "instance": 5_000_000}
    assert sched_trace.slices([]) == {}
    for bad in ("pool", "pool=", "pool=-5", "pool=1.5", "workers=100"):
        with pytest.raises(SystemExit):
            sched_trace.slices([bad])
