//! An instance's backend and the one function that runs a batch on it (`InstanceCore::step`),
//! shared by the instance's own thread and, for a lone request, by the thread that submitted it.
//!
//! The direct lane hands a request that finds nothing queued and an instance free straight to
//! that instance. Waking the instance's thread for it and the submitter's again for the answer
//! costs two thread wake-ups (12-25 µs each on a busy two-core machine) where a small model
//! computes in 20 µs. So where the backend allows it (`Backend::runs_inline`: ONNX Runtime on
//! the CPU), the instance has no rate limiter, no pinned cores and its recent executions were
//! short (an average under [`INLINE_MAX_COMPUTE`]), the submitting thread (an HTTP worker, a
//! gRPC connection's runtime) runs the batch itself, while the lane's claim keeps the instance
//! its own: nobody else sends it work while it is not in the lane's free list.
//!
//! Both ways run `step`: statistics, traces, cancellation, the response cache, the watchdog's
//! alarm (inside the backend) and the lane's `finish` behave the same. What only the instance's
//! thread may do, it is asked to do by a message: take the next batch when work waits
//! (`InstanceMsg::Pull`; a frontend thread never runs a queue of batches), or end when the
//! backend panicked or reported itself unhealthy (`InstanceMsg::Exit`: the thread drops the
//! backend and the supervisor restarts the instance as after a failure on its own thread).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::TrySendError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{execute, panic_message, Done, InstanceActor};
use crate::backend::Backend;
use crate::error::Error;
use crate::exit::InstanceExit;
use crate::mailbox::Sender;
use crate::protocol::{InstanceIdle, InstanceMsg, Pending, RunHere};

/// A model whose executions took longer than this on average (the last few, weighted to the
/// latest) runs on its instance's thread: a frontend thread is never held much longer than a
/// small model's execution.
pub const INLINE_MAX_COMPUTE: Duration = Duration::from_millis(1);

/// Not measured yet: the instance's first execution runs on its own thread.
const UNMEASURED: u64 = u64::MAX;

/// What an instance does after a batch (`InstanceCore::step`).
pub(crate) enum Step {
    /// Free (in the lane, or the scheduler told): wait for the next message.
    Free,
    /// Requests wait: take the next batch from the batcher (`Lane::pull`), on the instance's
    /// own thread.
    Pull,
    /// The instance cannot go on (a backend panic or a failed health check): it ends, and the
    /// supervisor replaces it.
    Exit(InstanceExit),
}

/// One instance's backend, shared by its thread and the threads that run a lone request on it.
pub(crate) struct InstanceCore {
    pub env: Arc<InstanceActor>,
    /// Taken by whoever runs a batch: uncontended, as only the instance's holder (its thread,
    /// or the submitter that claimed it in the lane) runs one. `None` once the instance ended.
    pub backend: Mutex<Option<Box<dyn Backend>>>,
    /// The recent executions' average wall time in nanoseconds (`UNMEASURED` before the first).
    recent_ns: AtomicU64,
}

impl InstanceCore {
    pub fn new(env: Arc<InstanceActor>, backend: Box<dyn Backend>) -> Self {
        InstanceCore { env, backend: Mutex::new(Some(backend)), recent_ns: AtomicU64::new(UNMEASURED) }
    }

    /// Whether a lone request may run on its submitter's thread: the recent executions were
    /// short.
    pub fn short(&self) -> bool {
        self.recent_ns.load(Relaxed) < INLINE_MAX_COMPUTE.as_nanos() as u64
    }

    /// Whether the instance may ever run a request on another thread than its own (the
    /// backend allows it; no rate limiter, whose grant may wait, and no pinned cores).
    pub fn may_inline(env: &InstanceActor, backend: &dyn Backend) -> bool {
        backend.runs_inline() && env.limiter.is_none() && env.spec.cpu_cores.is_empty() && !env.policy.decoupled
    }

    fn measured(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX - 1).min(u64::MAX - 1);
        let old = self.recent_ns.load(Relaxed);
        let new = if old == UNMEASURED { ns } else { (old / 4) * 3 + ns / 4 };
        self.recent_ns.store(new, Relaxed);
    }

    /// Runs one batch on `backend` (the instance's, held by the caller): the rate limiter's
    /// grant, the execution, the instance's figures, the health check, and what the instance does
    /// next.
    pub fn step(&self, backend: &mut dyn Backend, batch: Vec<Pending>) -> Step {
        let env = &*self.env;
        let idx = env.spec.index;
        // With the rate limiter on, the batch waits here for the instance's resources and
        // turn; they are given back once its requests are answered.
        env.figures.instance(idx).took(batch.iter().map(|p| p.batch_size).sum());
        let grant = env.limiter.as_ref().map(|(limiter, member)| limiter.acquire(*member));
        let started = Instant::now();
        let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| execute(env, backend, batch))) {
            Ok(r) => r,
            Err(p) => Err(format!("instance '{}' panicked: {}", env.spec.name, panic_message(&*p))),
        };
        let took = started.elapsed();
        env.figures.instance(idx).busy(took);
        self.measured(took);
        drop(grant);
        let done = match outcome {
            Ok(done) => done,
            // The batch's requests were answered inside `execute` when the backend panicked;
            // this instance's state is unknown now, so it ends.
            Err(reason) => return Step::Exit(InstanceExit::Panicked(reason)),
        };
        let health = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| backend.health()))
            .unwrap_or_else(|p| Err(Error::internal(format!("health check panicked: {}", panic_message(&*p)))));
        if let Err(e) = health {
            // The batch was answered; the instance cannot serve more, so it ends. Requests handed
            // back to run again go on in their sequences (on the instance that replaces this one).
            if let Done::Unreleased(rescheduled) = done {
                if !rescheduled.is_empty() {
                    // Not free: it ends, and a batch sent to it would be lost.
                    let (generation, release) = (env.generation, false);
                    env.idle.do_send(InstanceIdle { index: idx, generation, rescheduled, release });
                }
            }
            return Step::Exit(InstanceExit::BackendFailed(e));
        }
        let pull = match done {
            Done::Unreleased(rescheduled) => super::free(env, rescheduled, took),
            Done::Released => false,
            Done::Pull => true,
        };
        if pull {
            Step::Pull
        } else {
            Step::Free
        }
    }

    /// Drops the backend on the calling thread (the instance's own, as it ends), a panic in its
    /// drop kept here.
    pub fn drop_backend(&self) {
        let backend = self.backend.lock().take();
        drop(std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(backend))));
    }
}

impl RunHere for InstanceCore {
    fn short(&self) -> bool {
        InstanceCore::short(self)
    }

    fn run(&self, index: usize, mailbox: &Sender<InstanceMsg>, p: Pending) -> Option<Pending> {
        let mut held = self.backend.lock();
        let Some(backend) = held.as_mut() else { return Some(p) };
        let env = &self.env;
        env.figures.scheduler.direct_here(p.batch_size, index);
        let step = self.step(backend.as_mut(), vec![p]);
        drop(held);
        let message = match step {
            Step::Free => return None,
            Step::Pull => InstanceMsg::Pull,
            Step::Exit(exit) => InstanceMsg::Exit(exit),
        };
        // Nothing else is sent to a claimed instance but a `Shutdown` (its model stops): then
        // it ends anyway. Work that waits goes to the scheduler, which hears the instance free.
        if let Err(TrySendError::Full(InstanceMsg::Pull) | TrySendError::Disconnected(InstanceMsg::Pull)) =
            mailbox.try_send(message)
        {
            let (index, generation) = (env.spec.index, env.generation);
            env.idle.do_send(InstanceIdle { index, generation, rescheduled: Vec::new(), release: true });
        }
        None
    }
}
