//! How the scheduler actor drives the sequence batcher: the `Queue` trait over its methods, and
//! the idle check's period.

use std::time::{Duration, Instant};

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
