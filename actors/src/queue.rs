//! The scheduler actor's queue, as a trait: what a scheduling policy must answer so one
//! scheduler actor can drive it. The dynamic batcher (`Batcher`, making the batcher actor) and
//! the sequence batcher (`SequenceBatcher`, making the sequence actor) implement it.

use std::time::{Duration, Instant};

use crate::error::Error;
use crate::protocol::{Next, Pending, Refused};

/// Triton's error for a request handed back to run again by a model that is not an iterative
/// sequence.
pub const RESCHEDULE_REFUSED: &str =
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.";

pub trait Queue: Unpin + 'static {
    /// Queues a request, or hands it back with the reason it cannot be queued.
    fn push(&mut self, p: Pending) -> Result<(), Refused>;

    /// Puts back a request that was taken for an instance that died before it got it.
    fn requeue(&mut self, p: Pending) -> Result<(), Refused>;

    /// The next batch for the free instance `instance`; `idle`: no instance of the model is
    /// executing.
    fn next(&mut self, instance: usize, now: Instant, idle: bool) -> Next;

    /// Takes back a request its backend handed back after running it, to run it again in a
    /// later batch (an iterative sequence's next iteration). Only the sequence batcher of an
    /// iterative sequence model takes one.
    fn reschedule(&mut self, p: Pending) -> Result<(), Refused> {
        Err(Box::new((p, Error::invalid(RESCHEDULE_REFUSED))))
    }

    /// An instance finished a batch; returns requests that can no longer run.
    fn finished(&mut self, _instance: usize, _now: Instant) -> Vec<(Pending, Error)> {
        Vec::new()
    }

    /// An instance died; what it ran was answered.
    fn instance_down(&mut self, _instance: usize) {}

    /// How often the scheduler calls `expire_idle`, if ever.
    fn idle_check_every(&self) -> Option<Duration> {
        None
    }

    /// Frees what has been idle too long at `now`.
    fn expire_idle(&mut self, _now: Instant) {}

    /// Removes queued requests whose client has gone.
    fn take_cancelled(&mut self) -> Vec<Pending>;

    /// Requests whose queue timeout passed under REJECT (DELAY ones are moved back inside).
    fn take_expired(&mut self, _now: Instant) -> Vec<Pending> {
        Vec::new()
    }

    /// Requests refused with their own error once their time is up (a sequence request whose
    /// START never came).
    fn take_refused(&mut self, _now: Instant) -> Vec<(Pending, Error)> {
        Vec::new()
    }

    /// The earliest instant at which something queued changes by itself.
    fn next_deadline(&self) -> Option<Instant>;

    /// Removes every queued request (for failing them when no instance is left).
    fn drain_all(&mut self) -> Vec<Pending>;

    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
