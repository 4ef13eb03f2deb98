//! What keeps one execution from holding an instance for ever: a batch whose requests carry a
//! timeout (the request's `timeout` parameter, over HTTP and gRPC) is watched until the first of
//! them; a batch without one runs as it always did, on the instance's own thread with nothing
//! added. Two ways, by what the runtime allows:
//!
//! - a runtime that can be stopped from another thread (ONNX Runtime's `RunOptions` terminate) runs on the
//!   instance's thread while the process's one [`arm`]ed alarm stops it at the deadline: the batch fails and
//!   the instance serves on. (TensorFlow stops itself: its `RunOptions.timeout_in_ms` carries the time left,
//!   see [`left_ms`].) Such a run is also stopped at a client's own deadline (a gRPC deadline, [`stop_at`]):
//!   its client has gone.
//! - a runtime that cannot be stopped (libtorch, a backend of Triton's backend API) runs on an [`Executor`],
//!   a thread of the instance's own, while the instance's thread waits up to the request timeout: past it the
//!   batch fails with [`hung`]'s text, the thread is left to the stuck call, and the instance says it is
//!   unhealthy so that the supervisor replaces it. A client's deadline alone never gives an instance up (a
//!   slow run is not a hung one).
//!
//! Triton bounds only a request's time in the queue with its timeout; a backend that never
//! returns holds its instance there for ever.

use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tritium_actors::{BatchInput, Error, InferRequest, Result};

/// When a request's timeout ends (counted from its arrival), if it has one.
pub fn request_deadline(r: &InferRequest) -> Option<Instant> {
    (r.timeout_us > 0).then(|| r.received + Duration::from_micros(r.timeout_us))
}

/// Beside each request of the batch, when its timeout ends.
pub fn deadlines(batch: &BatchInput<'_>) -> Vec<Option<Instant>> {
    if batch.requests.len() > 1 {
        batch.requests.iter().map(|r| request_deadline(r)).collect()
    } else {
        vec![batch.request.and_then(request_deadline)]
    }
}

/// The batch's requests (the lone one where the caller gives it alone).
fn requests<'a>(batch: &'a BatchInput<'_>) -> impl Iterator<Item = &'a InferRequest> {
    let all = if batch.requests.len() > 1 { batch.requests } else { &[] };
    all.iter().copied().chain(batch.request.filter(|_| all.is_empty()))
}

/// The batch's first request timeout: a run that cannot be stopped is watched until then (and
/// its instance given up past it). None: not watched.
pub fn deadline(batch: &BatchInput<'_>) -> Option<Instant> {
    requests(batch).filter_map(request_deadline).min()
}

/// When a run that can be stopped cheaply is stopped: the first of the batch's request
/// timeouts and its clients' own deadlines (a gRPC deadline: past it the client has gone).
pub fn stop_at(batch: &BatchInput<'_>) -> Option<Instant> {
    requests(batch).flat_map(|r| [request_deadline(r), r.client_deadline]).flatten().min()
}

/// The milliseconds left until `deadline`, at least 1 (a runtime's timeout of 0 means none).
/// TensorFlow's `RunOptions` take it; a build without TensorFlow has no caller but the test.
#[cfg_attr(not(feature = "tensorflow"), allow(dead_code))]
pub fn left_ms(deadline: Instant) -> i64 {
    let left = deadline.saturating_duration_since(Instant::now()).as_millis();
    i64::try_from(left).unwrap_or(i64::MAX).max(1)
}

/// The failure of a batch that a runtime stopped at its first request's timeout.
pub fn stopped(model: &str, runtime: &str) -> Error {
    Error::unavailable(format!(
        "model '{model}': the execution did not finish within the request's timeout; {runtime} stopped it and the instance serves on"
    ))
}

/// The failure of a batch whose execution never returned before its first request's timeout.
pub fn hung(model: &str) -> Error {
    Error::unavailable(format!(
        "model '{model}': the backend did not return from execute within the request's timeout; the instance is replaced"
    ))
}

type Ring = Box<dyn FnOnce() + Send>;

/// The alarms due, by deadline (and a number that tells two alarms of one instant apart).
#[derive(Default)]
struct Alarms {
    next: u64,
    due: BTreeMap<(Instant, u64), Ring>,
}

struct Clock {
    alarms: Mutex<Alarms>,
    changed: Condvar,
}

impl Clock {
    fn lock(&self) -> MutexGuard<'_, Alarms> {
        self.alarms.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The alarm thread: rings each alarm at its deadline, outside the lock.
    fn run(&self) {
        let mut alarms = self.lock();
        loop {
            let now = Instant::now();
            alarms = match alarms.due.keys().next().copied() {
                None => self.changed.wait(alarms).unwrap_or_else(|e| e.into_inner()),
                Some(key) if key.0 <= now => {
                    let ring = alarms.due.remove(&key);
                    drop(alarms);
                    if let Some(ring) = ring {
                        ring();
                    }
                    self.lock()
                }
                Some((at, _)) => self.changed.wait_timeout(alarms, at - now).unwrap_or_else(|e| e.into_inner()).0,
            };
        }
    }
}

/// The process's alarm thread, started by the first alarm.
fn clock() -> &'static Clock {
    static CLOCK: OnceLock<&'static Clock> = OnceLock::new();
    CLOCK.get_or_init(|| {
        let clock: &'static Clock =
            Box::leak(Box::new(Clock { alarms: Mutex::new(Alarms::default()), changed: Condvar::new() }));
        std::thread::Builder::new()
            .name("watchdog-alarm".into())
            .spawn(move || clock.run())
            .expect("starting the watchdog's alarm thread");
        clock
    })
}

/// An alarm that rings at its deadline unless dropped first.
#[must_use = "dropping the alarm disarms it"]
pub struct Armed {
    key: (Instant, u64),
}

/// Calls `ring` on the alarm thread at `deadline` (at once if it has passed), unless the
/// returned alarm is dropped before. `ring` must be quick: the alarms after it wait for it.
pub fn arm(deadline: Instant, ring: impl FnOnce() + Send + 'static) -> Armed {
    let clock = clock();
    let mut alarms = clock.lock();
    let key = (deadline, alarms.next);
    alarms.next += 1;
    alarms.due.insert(key, Box::new(ring));
    // The thread sleeps until the first alarm: it need only wake when that changes.
    let first = alarms.due.keys().next() == Some(&key);
    drop(alarms);
    if first {
        clock.changed.notify_one();
    }
    Armed { key }
}

impl Drop for Armed {
    fn drop(&mut self) {
        clock().lock().due.remove(&self.key);
    }
}

/// One job for an executor's thread, given the state the thread owns.
type Job<S, T> = Box<dyn FnOnce(&mut S) -> T + Send>;

/// A thread of an instance's own that runs jobs on the state `S` it owns (the instance's handle
/// to its runtime) while the instance's thread waits for each until a deadline.
pub struct Executor<S, T> {
    jobs: Option<Sender<Job<S, T>>>,
    done: Receiver<T>,
    thread: Option<JoinHandle<()>>,
    /// A call never returned: the thread is left to it, and nothing more is handed over.
    pub hung: bool,
}

impl<S: Send + 'static, T: Send + 'static> Executor<S, T> {
    /// Starts the thread `<name>-execute`, which owns `state` until the executor is dropped.
    pub fn start(mut state: S, name: &str) -> Result<Self> {
        let (jobs, job_rx) = channel::<Job<S, T>>();
        let (done_tx, done) = channel();
        let thread = std::thread::Builder::new()
            .name(format!("{name}-execute"))
            .spawn(move || {
                for job in job_rx {
                    if done_tx.send(job(&mut state)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| Error::internal(format!("instance '{name}': starting the execute thread: {e}")))?;
        Ok(Executor { jobs: Some(jobs), done, thread: Some(thread), hung: false })
    }

    /// Runs `job` on the thread and waits for it until `deadline`. Past it the call has hung:
    /// the executor is marked so and the batch fails with [`hung`]'s error.
    pub fn execute(
        &mut self,
        model: &str,
        job: impl FnOnce(&mut S) -> T + Send + 'static,
        deadline: Instant,
    ) -> Result<T> {
        let gone = || Error::unavailable(format!("model '{model}': the execute thread has stopped"));
        if self.hung {
            return Err(gone());
        }
        if deadline <= Instant::now() {
            // Not handed over: the thread would be given up on before it could start.
            return Err(Error::unavailable(format!(
                "model '{model}': the request's timeout passed before its execution began"
            )));
        }
        self.jobs.as_ref().ok_or_else(gone)?.send(Box::new(job)).map_err(|_| gone())?;
        match self.done.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(outcome) => Ok(outcome),
            Err(RecvTimeoutError::Disconnected) => Err(gone()),
            Err(RecvTimeoutError::Timeout) => {
                self.hung = true;
                Err(hung(model))
            }
        }
    }
}

impl<S, T> Drop for Executor<S, T> {
    /// Ends the thread and waits for it, so that the state it owns is dropped when the executor
    /// is (unless a call hung: then the thread keeps the state until the call returns).
    fn drop(&mut self) {
        self.jobs = None;
        if let (false, Some(thread)) = (self.hung, self.thread.take()) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn an_alarm_rings_at_its_deadline_and_a_dropped_one_never() {
        let rung = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = channel();
        let (r, t) = (rung.clone(), tx.clone());
        let kept = arm(Instant::now() + Duration::from_millis(50), move || {
            r.fetch_add(1, Ordering::SeqCst);
            let _ = t.send(Instant::now());
        });
        let r = rung.clone();
        drop(arm(Instant::now() + Duration::from_millis(10), move || {
            r.fetch_add(10, Ordering::SeqCst);
        }));
        let start = Instant::now();
        let at = rx.recv_timeout(Duration::from_secs(10)).expect("the alarm rang");
        assert!(at >= start + Duration::from_millis(40), "rang early");
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(rung.load(Ordering::SeqCst), 1, "only the alarm kept rang, once");
        drop(kept);
    }

    #[test]
    fn alarms_ring_in_deadline_order_whatever_order_they_were_armed_in() {
        let (tx, rx) = channel();
        let now = Instant::now();
        let ring = |n: u32| {
            let tx = tx.clone();
            move || {
                let _ = tx.send(n);
            }
        };
        let _b = arm(now + Duration::from_millis(60), ring(2));
        let _c = arm(now + Duration::from_millis(90), ring(3));
        let _a = arm(now + Duration::from_millis(30), ring(1));
        let got: Vec<u32> = (0..3).map(|_| rx.recv_timeout(Duration::from_secs(10)).expect("rang")).collect();
        assert_eq!(got, [1, 2, 3]);
    }

    #[test]
    fn an_alarm_past_its_deadline_rings_at_once() {
        let (tx, rx) = channel();
        let _armed = arm(Instant::now() - Duration::from_secs(1), move || {
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(10)).expect("rang");
    }

    #[test]
    fn an_executor_runs_jobs_on_its_state_and_gives_up_on_one_that_hangs() {
        let mut executor = Executor::start(0_u32, "test").unwrap();
        let add = |s: &mut u32| {
            *s += 1;
            *s
        };
        let later = || Instant::now() + Duration::from_secs(30);
        assert_eq!(executor.execute("m", add, later()).unwrap(), 1);
        assert_eq!(executor.execute("m", add, later()).unwrap(), 2);
        let e = executor.execute("m", add, Instant::now()).unwrap_err();
        assert!(e.message.contains("timeout passed before its execution began"), "{e}");
        assert!(!executor.hung, "a batch not handed over does not give the thread up");
        let (release, wait) = channel::<()>();
        let stuck = move |s: &mut u32| {
            let _ = wait.recv();
            *s
        };
        let e = executor.execute("m", stuck, Instant::now() + Duration::from_millis(50)).unwrap_err();
        assert_eq!(e, hung("m"));
        assert!(executor.hung);
        let e = executor.execute("m", add, Instant::now()).unwrap_err();
        assert!(e.message.contains("the execute thread has stopped"), "{e}");
        let e = executor.execute("m", add, later()).unwrap_err();
        assert!(e.message.contains("the execute thread has stopped"), "{e}");
        drop(executor);
        drop(release);
    }

    #[test]
    fn a_batch_is_watched_until_its_first_request_timeout() {
        let mut a = InferRequest::new("m", vec![]);
        let mut b = InferRequest::new("m", vec![]);
        let c = InferRequest::new("m", vec![]);
        a.timeout_us = 5_000_000;
        b.timeout_us = 1_000_000;
        let requests = [&a, &b, &c];
        let batch = BatchInput { requests: &requests, ..BatchInput::bare(&[], &[], 3) };
        assert_eq!(deadline(&batch), request_deadline(&b));
        assert_eq!(deadlines(&batch), vec![request_deadline(&a), request_deadline(&b), None]);
        let one = BatchInput { request: Some(&c), ..BatchInput::bare(&[], &[], 1) };
        assert_eq!(deadline(&one), None);
        assert_eq!(stop_at(&one), None);
        let mut d = InferRequest::new("m", vec![]);
        d.client_deadline = Some(Instant::now() + Duration::from_millis(10));
        let alone = BatchInput { request: Some(&d), ..BatchInput::bare(&[], &[], 1) };
        assert_eq!((deadline(&alone), stop_at(&alone)), (None, d.client_deadline), "a client deadline never gives up");
        let requests = [&a, &d];
        let both = BatchInput { requests: &requests, ..BatchInput::bare(&[], &[], 2) };
        assert_eq!((deadline(&both), stop_at(&both)), (request_deadline(&a), d.client_deadline));
        assert!(left_ms(Instant::now() - Duration::from_secs(1)) == 1);
    }
}
