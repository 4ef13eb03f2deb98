//! Iterative sequences (`sequence_batching { iterative_sequence: true }`, Triton's
//! `IterativeSequencer`): one request is the whole sequence, run again and again. A request
//! without a correlation ID starts a sequence under the batcher's own ID; the backend hands the
//! request back after each iteration (`reschedule`) until it answers it, and then the sequence
//! ends (`finished`, or `end_if_done` when its client went away meanwhile).

use super::SequenceBatcher;
use crate::error::Error;
use crate::protocol::{Pending, Refused};
use crate::request::{CorrelationId, SequenceFlags};

impl SequenceBatcher {
    /// An iterative sequence's request without a correlation ID (none, 0 or "") starts a
    /// sequence of its own: it gets the next ID of the batcher's count and the START flag
    /// only, as Triton's iterative sequencer does.
    pub(super) fn assign_id(&mut self, p: &mut Pending) {
        let unset = match &p.request.sequence {
            None => true,
            Some(f) => f.id == CorrelationId::U64(0) || f.id == CorrelationId::Str(String::new()),
        };
        if unset {
            let id = CorrelationId::U64(self.next_auto_id);
            self.next_auto_id += 1;
            p.request.sequence = Some(SequenceFlags { id, start: true, end: false });
        }
    }

    /// An iterative sequence's request the backend handed back after running it: it goes to
    /// the back of its sequence's queue, without START or END (Triton clears both), and waits
    /// for a later batch like a request that just arrived (no priority over the others; its
    /// queue time starts again). Its sequence keeps its slot and state meanwhile.
    pub fn reschedule(&mut self, mut p: Pending) -> Result<(), Refused> {
        let id = p.request.sequence.as_ref().map(|f| f.id.clone());
        let known = id.filter(|id| self.policy.iterative && self.sequences.get(id).is_some_and(|s| !s.waiting));
        let Some(id) = known else {
            let e = match p.request.sequence.as_ref() {
                Some(f) if self.policy.iterative => self.no_start(&f.id),
                _ => Error::invalid(crate::queue::RESCHEDULE_REFUSED),
            };
            return Err(Box::new((p, e)));
        };
        if let Some(f) = p.request.sequence.as_mut() {
            f.start = false;
            f.end = false;
        }
        let now = self.clock.now();
        p.enqueued = now;
        let seq = self.sequences.get_mut(&id).expect("checked");
        seq.ending = false;
        seq.last_active = now;
        seq.queue.push_back(p);
        self.queued += 1;
        self.reindex(&id);
        self.publish();
        Ok(())
    }

    /// Ends iterative sequence `id` if it has nothing queued or running (its rescheduled
    /// request was dropped because its client went away); whether it ended.
    pub(super) fn end_if_done(&mut self, id: &CorrelationId) -> bool {
        let done = self.policy.iterative
            && self.sequences.get(id).is_some_and(|s| !s.waiting && s.in_flight.is_none() && s.queue.is_empty());
        if done {
            self.release(id);
        }
        done
    }
}
