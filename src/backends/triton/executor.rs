//! The thread that calls one instance's `TRITONBACKEND_ModelInstanceExecute`. A backend may keep
//! that call running for as long as the model works (Triton's Python backend returns only when
//! model.py's `execute` has), so the instance's own thread hands it the batch and meanwhile
//! watches: whether each request's client has gone (the backend then sees the request
//! cancelled while it still runs, as in Triton) and the batch's first request timeout (a
//! backend that has not returned by then has hung).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tritium_actors::{Error, Result};
use tritium_ffi::backend_api::{HostError, HostRequest, LoadedInstance, Pending};

type Outcome = std::result::Result<Vec<Pending>, HostError>;

pub(super) struct Executor {
    jobs: Option<Sender<Vec<HostRequest>>>,
    done: Receiver<Outcome>,
    thread: Option<JoinHandle<()>>,
    /// A call never returned: the thread is left to it, and nothing more is handed over.
    pub hung: bool,
}

impl Executor {
    pub fn start(instance: LoadedInstance, name: &str) -> Result<Self> {
        let (jobs, job_rx) = channel::<Vec<HostRequest>>();
        let (done_tx, done) = channel();
        let thread = std::thread::Builder::new()
            .name(format!("{name}-execute"))
            .spawn(move || {
                for job in job_rx {
                    if done_tx.send(instance.execute(job)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| Error::internal(format!("instance '{name}': starting the execute thread: {e}")))?;
        Ok(Executor { jobs: Some(jobs), done, thread: Some(thread), hung: false })
    }

    /// Runs `execute` on the thread and waits for it, calling `watch` every `poll` while it
    /// runs. Past `deadline` the call has hung: the instance is marked so and fails the batch.
    pub fn execute(
        &mut self,
        model: &str,
        requests: Vec<HostRequest>,
        deadline: Option<Instant>,
        poll: Duration,
        watch: &dyn Fn(),
    ) -> Result<Outcome> {
        let gone = || Error::unavailable(format!("model '{model}': the execute thread has stopped"));
        if self.hung {
            return Err(gone());
        }
        self.jobs.as_ref().ok_or_else(gone)?.send(requests).map_err(|_| gone())?;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match self.done.recv_timeout(left.map_or(poll, |l| l.min(poll))) {
                Ok(outcome) => return Ok(outcome),
                Err(RecvTimeoutError::Disconnected) => return Err(gone()),
                Err(RecvTimeoutError::Timeout) if left.is_some_and(|l| l <= poll) => {
                    self.hung = true;
                    return Err(Error::unavailable(format!(
                        "model '{model}': the backend did not return from execute within the request's timeout; the instance is replaced"
                    )));
                }
                Err(RecvTimeoutError::Timeout) => watch(),
            }
        }
    }
}

impl Drop for Executor {
    /// Ends the thread and waits for it, so that the instance's finalize has run when the
    /// instance is gone (unless a call hung: then the thread keeps the instance until it returns).
    fn drop(&mut self) {
        self.jobs = None;
        if let (false, Some(thread)) = (self.hung, self.thread.take()) {
            let _ = thread.join();
        }
    }
}

/// Marks cancelled each request whose client has gone (`gone[i]` beside `flags[i]`).
pub(super) fn mark_gone(gone: &[&dyn Fn() -> bool], flags: &[Arc<AtomicBool>]) {
    for (is_gone, flag) in gone.iter().zip(flags) {
        if !flag.load(Ordering::Relaxed) && is_gone() {
            flag.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_requests_whose_client_went_are_marked() {
        let flags = [Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false))];
        let (yes, no) = (|| true, || false);
        mark_gone(&[&no, &yes], &flags);
        assert!(!flags[0].load(Ordering::Relaxed));
        assert!(flags[1].load(Ordering::Relaxed));
    }
}
