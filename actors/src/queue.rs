//! The scheduler's queue: the dynamic batcher, or the sequence batcher for a model with
//! `sequence_batching`. One interface so the scheduler actor drives either the same way.

use std::sync::Arc;
use std::time::Instant;

use crate::batcher::Batcher;
use crate::error::Error;
use crate::figures::ModelFigures;
use crate::policy::ModelPolicy;
use crate::protocol::{Next, Pending, Refused};
use crate::sequence::SequenceBatcher;

#[derive(Debug)]
pub(crate) enum Queue {
    Batch(Batcher),
    Sequence(Box<SequenceBatcher>),
}

impl Queue {
    pub fn new(policy: &ModelPolicy, figures: Arc<ModelFigures>) -> Self {
        match policy.sequence() {
            Some(seq) => Queue::Sequence(Box::new(SequenceBatcher::new(policy, seq, figures))),
            None => Queue::Batch(Batcher::new(policy)),
        }
    }

    /// Puts back a request that was taken for an instance that died before it got it.
    pub fn requeue(&mut self, p: Pending) -> Result<(), Refused> {
        match self {
            Queue::Batch(b) => {
                b.push(p).map_err(|p| Box::new((*p, Error::unavailable("instance lost and the queue is full"))))
            }
            Queue::Sequence(s) => s.requeue(p),
        }
    }

    pub fn push(&mut self, p: Pending) -> Result<(), Refused> {
        match self {
            Queue::Batch(b) => b.push(p).map_err(|p| Box::new((*p, Error::unavailable("Exceeds maximum queue size")))),
            Queue::Sequence(s) => s.push(p),
        }
    }

    /// The next batch for the free instance `instance` (the dynamic batcher serves any);
    /// `idle`: no instance of the model is executing.
    pub fn next(&mut self, instance: usize, now: Instant, idle: bool) -> Next {
        match self {
            Queue::Batch(b) => b.next(now, idle),
            Queue::Sequence(s) => s.next(instance, now),
        }
    }

    /// An instance finished a batch; returns requests that can no longer run.
    pub fn finished(&mut self, instance: usize, now: Instant) -> Vec<(Pending, Error)> {
        match self {
            Queue::Batch(_) => Vec::new(),
            Queue::Sequence(s) => s.finished(instance, now),
        }
    }

    pub fn instance_down(&mut self, instance: usize) {
        if let Queue::Sequence(s) = self {
            s.instance_down(instance);
        }
    }

    pub fn expire_idle(&mut self, now: Instant) {
        if let Queue::Sequence(s) = self {
            s.expire_idle(now);
        }
    }

    pub fn take_cancelled(&mut self) -> Vec<Pending> {
        match self {
            Queue::Batch(b) => b.take_cancelled(),
            Queue::Sequence(s) => s.take_cancelled(),
        }
    }

    /// Requests whose queue timeout passed under REJECT (DELAY ones are moved back inside).
    pub fn take_expired(&mut self, now: Instant) -> Vec<Pending> {
        match self {
            Queue::Batch(b) => b.take_expired(now),
            Queue::Sequence(_) => Vec::new(),
        }
    }

    /// Requests refused with their own error once their time is up (a sequence request whose
    /// START never came).
    pub fn take_refused(&mut self, now: Instant) -> Vec<(Pending, Error)> {
        match self {
            Queue::Batch(_) => Vec::new(),
            Queue::Sequence(s) => s.take_orphans_expired(now),
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        match self {
            Queue::Batch(b) => b.next_deadline(),
            Queue::Sequence(s) => s.next_deadline(),
        }
    }

    pub fn drain_all(&mut self) -> Vec<Pending> {
        match self {
            Queue::Batch(b) => b.drain_all(),
            Queue::Sequence(s) => s.drain_all(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Queue::Batch(b) => b.len(),
            Queue::Sequence(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
