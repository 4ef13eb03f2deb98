//! The instance's thread kept off the cores ONNX Runtime pinned its pool threads to, once the
//! pool is seen at work.
//!
//! Left with its default thread count, ONNX Runtime makes one intra-op thread per core and pins
//! each of its pool threads to a core of its own, from the second core on; the thread that calls
//! `Run` (the instance's) does the first share of every parallel section and is left wherever the
//! kernel puts it. The kernel puts a woken thread beside the one that woke it, so the instance's
//! thread often ran on its own pool thread's core, each preempting the other while the first core
//! idled: at mlp c16 on 2 cores the instance was preempted by its pool thread 455-560 times in 2 s
//! and a core idled 15 % of the time. Kept on the core the pool leaves, the load served 1.08
//! (HTTP) and 1.11 (gRPC) times the requests per second for 0.92-0.93 times the server's CPU per
//! request, in phases alternating on one server (loadtests/PROFILES.md, "where the instance's
//! thread is at mlp c16", 2026-12-06).
//!
//! Only once the pool has worked: a small model's runs never leave the calling thread (ONNX
//! Runtime's cost model keeps small kernels there), and several such models' threads would
//! otherwise all be held to the first core for nothing. Every `CHECK_EVERY` runs the pool threads'
//! CPU time is read (`/proc/self/task/<tid>/stat`, in clock ticks); once it has grown by
//! `POOL_AT_WORK` ticks, the instance's thread is held to the cores the pool leaves. Models whose
//! pools work share that core, as their pools share the others (ONNX Runtime's default gives each
//! session a thread per core).
//!
//! Only where the pool threads sleep between parallel sections (`session.intra_op.allow_spinning`
//! = `0`, as the bundled mlp sets): with ONNX Runtime's default spinning they run through every
//! run whether given work or not, so their CPU time says nothing about work, and a first version
//! that moved the instances of such models anyway (add_sub, the sequence accumulator, on the
//! strength of their pools' spinning) served the accumulator at c64 0.79 times as fast.
//!
//! Nothing changes where ONNX Runtime pins nothing (an `intra_op_thread_count` set in the config,
//! or several instances of a model, which then share the cores out by count), where the pool
//! covers every core the thread may use, or where the instance is pinned already (a host
//! policy's `cpu-cores`).

use std::collections::BTreeSet;

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet, Pid};

/// The threads of this process whose name is this thread's: ONNX Runtime's pool threads take
/// the name of the thread that made the session.
pub(super) fn named_like_me() -> BTreeSet<i32> {
    let me = rustix::thread::gettid().as_raw_nonzero().get();
    let mine = comm(me);
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return BTreeSet::new() };
    tasks
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&tid| tid != me && mine.is_some() && comm(tid) == mine)
        .collect()
}

fn comm(tid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok().map(|c| c.trim_end().to_string())
}

/// The cores of `mine` that none of the pool threads is pinned to, when every pool thread is
/// pinned inside fewer cores than `mine` and some of `mine` are left; `None`: nothing to change.
pub(super) fn cores_left(mine: &BTreeSet<usize>, pool: &[BTreeSet<usize>]) -> Option<BTreeSet<usize>> {
    if pool.is_empty() || pool.iter().any(|p| !p.is_subset(mine) || p.len() >= mine.len()) {
        return None;
    }
    let taken: BTreeSet<usize> = pool.iter().flatten().copied().collect();
    let left: BTreeSet<usize> = mine.difference(&taken).copied().collect();
    (!left.is_empty()).then_some(left)
}

fn cores(set: &CpuSet) -> BTreeSet<usize> {
    (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
}

/// Runs between two reads of the pool threads' CPU time.
const CHECK_EVERY: u32 = 64;
/// Clock ticks (10 ms each at the usual 100 Hz) of pool work that count as the pool at work.
const POOL_AT_WORK: u64 = 2;

/// An instance's thread that may move off its pool's cores once the pool works.
pub(super) struct Placement {
    instance: String,
    /// The instance's thread (it made the session).
    thread: Pid,
    pool: Vec<i32>,
    /// The cores the pool leaves.
    left: BTreeSet<usize>,
    /// The pool's CPU ticks when the session was made.
    baseline: u64,
    runs: u32,
}

impl Placement {
    /// For the calling thread, which has just made a session whose pool threads are `pool`:
    /// `None` when the pool pins nothing that the thread could keep off.
    pub(super) fn new(instance: &str, pool: &BTreeSet<i32>) -> Option<Placement> {
        let mine = cores(&sched_getaffinity(None).ok()?);
        let pinned: Vec<BTreeSet<usize>> = pool
            .iter()
            .filter_map(|&tid| sched_getaffinity(Some(Pid::from_raw(tid)?)).ok())
            .map(|set| cores(&set))
            .collect();
        let left = cores_left(&mine, &pinned)?;
        let pool: Vec<i32> = pool.iter().copied().collect();
        Some(Placement {
            instance: instance.to_string(),
            thread: rustix::thread::gettid(),
            baseline: ticks(&pool),
            pool,
            left,
            runs: 0,
        })
    }

    /// Counts a run (on any thread); every `CHECK_EVERY` runs, moves the instance's thread once
    /// the pool has worked. True when done with (moved, or it cannot be).
    pub(super) fn after_run(&mut self) -> bool {
        self.runs = self.runs.wrapping_add(1);
        if !self.runs.is_multiple_of(CHECK_EVERY) || ticks(&self.pool) < self.baseline + POOL_AT_WORK {
            return false;
        }
        let mut set = CpuSet::new();
        for &c in &self.left {
            set.set(c);
        }
        match sched_setaffinity(Some(self.thread), &set) {
            Ok(()) => tracing::info!(
                "instance '{}' runs on cores {:?}, beside ONNX Runtime's {} pinned pool threads",
                self.instance,
                self.left,
                self.pool.len()
            ),
            Err(e) => tracing::warn!("instance '{}': cannot keep it off its pool's cores: {e}", self.instance),
        }
        true
    }
}

/// The threads' CPU time so far, user and system, in clock ticks (`/proc/self/task/<tid>/stat`);
/// a thread gone counts nothing.
fn ticks(threads: &[i32]) -> u64 {
    threads
        .iter()
        .filter_map(|tid| {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
            // After the name in parentheses: state, ppid, ..., utime and stime (fields 14 and 15).
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cores: &[usize]) -> BTreeSet<usize> {
        cores.iter().copied().collect()
    }

    #[test]
    fn the_core_a_pinned_pool_leaves_is_the_callers() {
        assert_eq!(cores_left(&set(&[0, 1]), &[set(&[1])]), Some(set(&[0])));
        assert_eq!(cores_left(&set(&[0, 1, 2, 3]), &[set(&[1]), set(&[2]), set(&[3])]), Some(set(&[0])));
        // Pool threads on groups of cores: the caller keeps what no group holds.
        assert_eq!(cores_left(&set(&[0, 1, 2, 3, 4, 5]), &[set(&[2, 3]), set(&[4, 5])]), Some(set(&[0, 1])));
    }

    #[test]
    fn nothing_changes_unless_every_pool_thread_is_pinned_inside_the_callers_cores() {
        // No pool (one intra-op thread), or a pool thread free to run anywhere the caller may.
        assert_eq!(cores_left(&set(&[0, 1]), &[]), None);
        assert_eq!(cores_left(&set(&[0, 1]), &[set(&[0, 1])]), None);
        assert_eq!(cores_left(&set(&[0, 1, 2]), &[set(&[1]), set(&[0, 1, 2])]), None);
        // Pinned outside the caller's cores (a caller pinned already), or covering all of them.
        assert_eq!(cores_left(&set(&[0]), &[set(&[1])]), None);
        assert_eq!(cores_left(&set(&[0, 1]), &[set(&[0]), set(&[1])]), None);
    }

    #[test]
    fn a_thread_keeps_off_its_pinned_pools_cores_once_the_pool_works() {
        let cores_here = cores(&sched_getaffinity(None).unwrap());
        if cores_here.len() < 2 {
            eprintln!("skipped: one core");
            return;
        }
        let last = *cores_here.iter().next_back().unwrap();
        let expected: BTreeSet<usize> = cores_here.iter().copied().filter(|&c| c != last).collect();
        // A "pool" thread named like the caller, pinned to the last core as ONNX Runtime pins its
        // pool, idle until told to work.
        std::thread::Builder::new()
            .name("placement-test".into())
            .spawn(move || {
                let (tid_tx, tid_rx) = std::sync::mpsc::channel();
                let (work_tx, work_rx) = std::sync::mpsc::channel::<bool>();
                let (worked_tx, worked_rx) = std::sync::mpsc::channel::<()>();
                let pool = std::thread::Builder::new()
                    .name("placement-test".into())
                    .spawn(move || {
                        let mut only = CpuSet::new();
                        only.set(last);
                        sched_setaffinity(None, &only).unwrap();
                        tid_tx.send(rustix::thread::gettid().as_raw_nonzero().get()).unwrap();
                        let me = [rustix::thread::gettid().as_raw_nonzero().get()];
                        while let Ok(true) = work_rx.recv() {
                            // Busy until its own CPU time has grown by more than counts as work.
                            let start = ticks(&me);
                            let mut x = 0u64;
                            while ticks(&me) <= start + POOL_AT_WORK {
                                for _ in 0..100_000 {
                                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                                }
                            }
                            worked_tx.send(()).unwrap();
                        }
                    })
                    .unwrap();
                let tid = tid_rx.recv().unwrap();
                assert_eq!(named_like_me(), BTreeSet::from([tid]));
                let mut placement = Placement::new("test", &named_like_me()).expect("a pinned pool");
                // An idle pool: runs counted, the thread stays free.
                for _ in 0..2 * CHECK_EVERY {
                    assert!(!placement.after_run());
                }
                assert_eq!(cores(&sched_getaffinity(None).unwrap()), cores_here);
                // The pool works: at the next check the thread keeps to the cores it leaves.
                work_tx.send(true).unwrap();
                worked_rx.recv().unwrap();
                let moved = (0..CHECK_EVERY).any(|_| placement.after_run());
                assert!(moved, "the pool's work was seen");
                assert_eq!(cores(&sched_getaffinity(None).unwrap()), expected);
                work_tx.send(false).unwrap();
                pool.join().unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
