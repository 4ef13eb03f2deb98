//! How the scheduler actor drives the sequence batcher: the `Queue` trait over its methods, and
//! the idle check's period; and the batcher shared under a lock with the model's lane
//! (`SharedSequence`), where submitters push and instances take their next batch themselves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::SequenceBatcher;
use crate::error::Error;
use crate::protocol::{Next, Pending, Refused};
use crate::queue::Queue;

impl Queue for SequenceBatcher {
    fn push(&mut self, p: Pending) -> Result<(), Refused> {
        SequenceBatcher::push(self, p)
    }

    fn requeue(&mut self, p: Pending) -> Result<(), Refused> {
        SequenceBatcher::requeue(self, p)
    }

    fn next(&mut self, instance: usize, now: Instant, _idle: bool) -> Next {
        SequenceBatcher::next(self, instance, now)
    }

    fn reschedule(&mut self, p: Pending) -> Result<(), Refused> {
        SequenceBatcher::reschedule(self, p)
    }

    fn finished(&mut self, instance: usize, now: Instant) -> Vec<(Pending, Error)> {
        SequenceBatcher::finished(self, instance, now)
    }

    fn instance_down(&mut self, instance: usize) {
        SequenceBatcher::instance_down(self, instance)
    }

    /// Idle sequences give their slots up within a tenth of the idle timeout.
    fn idle_check_every(&self) -> Option<Duration> {
        let idle = self.policy.max_idle;
        (!idle.is_zero()).then(|| (idle / 10).clamp(Duration::from_millis(5), Duration::from_millis(100)))
    }

    fn expire_idle(&mut self, now: Instant) {
        SequenceBatcher::expire_idle(self, now)
    }

    fn take_cancelled(&mut self) -> Vec<Pending> {
        SequenceBatcher::take_cancelled(self)
    }

    fn take_refused(&mut self, now: Instant) -> Vec<(Pending, Error)> {
        self.take_orphans_expired(now)
    }

    fn next_deadline(&self) -> Option<Instant> {
        SequenceBatcher::next_deadline(self)
    }

    fn drain_all(&mut self) -> Vec<Pending> {
        SequenceBatcher::drain_all(self)
    }

    fn len(&self) -> usize {
        self.queued
    }
}

/// The sequence batcher shared by the sequence actor with the model's lane (`lane::sequence`):
/// submitting threads push into it and dispatch to a free instance, instances take their next
/// batch from it; each call of the actor's takes the lock for that call alone.
#[derive(Debug, Clone)]
pub struct SharedSequence(pub(crate) Arc<Mutex<SequenceBatcher>>);

impl Queue for SharedSequence {
    fn push(&mut self, p: Pending) -> Result<(), Refused> {
        self.0.lock().push(p)
    }

    fn requeue(&mut self, p: Pending) -> Result<(), Refused> {
        self.0.lock().requeue(p)
    }

    fn next(&mut self, instance: usize, now: Instant, _idle: bool) -> Next {
        self.0.lock().next(instance, now)
    }

    fn reschedule(&mut self, p: Pending) -> Result<(), Refused> {
        self.0.lock().reschedule(p)
    }

    fn finished(&mut self, instance: usize, now: Instant) -> Vec<(Pending, Error)> {
        self.0.lock().finished(instance, now)
    }

    fn instance_down(&mut self, instance: usize) {
        self.0.lock().instance_down(instance)
    }

    fn idle_check_every(&self) -> Option<Duration> {
        Queue::idle_check_every(&*self.0.lock())
    }

    fn expire_idle(&mut self, now: Instant) {
        self.0.lock().expire_idle(now)
    }

    fn take_cancelled(&mut self) -> Vec<Pending> {
        self.0.lock().take_cancelled()
    }

    fn take_refused(&mut self, now: Instant) -> Vec<(Pending, Error)> {
        self.0.lock().take_orphans_expired(now)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.0.lock().next_deadline()
    }

    fn drain_all(&mut self) -> Vec<Pending> {
        self.0.lock().drain_all()
    }

    fn len(&self) -> usize {
        self.0.lock().queued
    }
}
