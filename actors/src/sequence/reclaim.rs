//! How the sequence batcher gives back what its sequences hold once they no longer need it:
//! idle sequences past `max_sequence_idle_microseconds`, sequences evicted when the state held
//! passes `max_state_bytes`, queued requests whose clients went away, and the backlog's
//! entries of sequences that no longer wait.

use std::collections::VecDeque;
use std::time::Instant;

use super::{SequenceBatcher, EVICTED_REMEMBERED};
use crate::protocol::Pending;
use crate::request::CorrelationId;

impl SequenceBatcher {
    /// While the state held is over `max_state_bytes`, evicts the idle sequences holding
    /// state, longest idle first; each eviction is remembered so the sequence's next request
    /// is refused saying why. Sequences running or with a request queued are never evicted.
    pub(super) fn evict_over_cap(&mut self) {
        let Some(cap) = self.policy.max_state_bytes else { return };
        let mut held = self.store.bytes();
        if held <= cap {
            return;
        }
        let mut victims = Vec::new();
        for id in self.idle.values() {
            if held <= cap {
                break;
            }
            let bytes = self.store.bytes_of(id);
            if bytes > 0 {
                held -= bytes;
                victims.push(id.clone());
            }
        }
        for id in victims {
            tracing::info!(
                "sequence {id} of model '{}' evicted: the implicit state held is over max_sequence_state_bytes ({cap})",
                self.model
            );
            self.figures.sequence.eviction();
            self.release(&id);
            if self.evicted.insert(id.clone()) {
                self.evicted_order.push_back(id);
                while self.evicted_order.len() > EVICTED_REMEMBERED {
                    let old = self.evicted_order.pop_front().expect("non-empty");
                    self.evicted.remove(&old);
                }
            }
        }
    }

    /// Frees the slots of sequences idle past `max_sequence_idle_microseconds`: the idle
    /// sequences are ordered by their last activity, so only the expired ones are visited.
    pub fn expire_idle(&mut self, now: Instant) {
        if self.policy.max_idle.is_zero() {
            return;
        }
        while let Some((&(last, _), id)) = self.idle.first_key_value() {
            if now.saturating_duration_since(last) < self.policy.max_idle {
                break;
            }
            let id = id.clone();
            tracing::debug!("sequence {id} of model '{}' idle: its slot is freed", self.model);
            self.figures.sequence.idle_release();
            self.release(&id);
        }
        self.publish();
    }

    /// Removes queued requests whose client has gone. It visits only the sequences with a
    /// request queued — those ready to run, running (more may wait behind the running one) and
    /// waiting in the backlog — never every live one: visiting all 10,000 live conversations
    /// took the sequence actor about a millisecond every sweep, and every turn that arrived
    /// meanwhile waited for it. The scheduler calls it at most every few milliseconds.
    pub fn take_cancelled(&mut self) -> Vec<Pending> {
        let mut gone = Vec::new();
        // Only the ids of sequences with a cancelled request are cloned: visiting a queued
        // sequence is a lookup and a look at its queue (cloning, sorting and deduplicating
        // every queued id was most of the sweep at 10,000 queued turns).
        let sequences = &self.sequences;
        let cancelled =
            |id: &&CorrelationId| sequences.get(*id).is_some_and(|s| s.queue.iter().any(|p| p.reply.is_closed()));
        let mut touched: Vec<CorrelationId> = (self.ready.iter().flat_map(|lane| lane.values()))
            .chain(self.running.iter().flatten())
            .chain(self.backlog.iter().map(|(_, id)| id))
            .filter(cancelled)
            .cloned()
            .collect();
        // A backlog entry may repeat a sequence (a stale entry of an earlier wait).
        touched.sort_unstable();
        touched.dedup();
        for id in &touched {
            let Some(s) = self.sequences.get_mut(id) else { continue };
            let (g, keep): (VecDeque<Pending>, VecDeque<Pending>) =
                s.queue.drain(..).partition(|p| p.reply.is_closed());
            s.queue = keep;
            gone.extend(g);
        }
        let mut dropped = false;
        for id in touched {
            // A backlogged sequence with nothing left to run is dropped.
            if self.sequences.get(&id).is_some_and(|s| s.waiting && s.queue.is_empty()) {
                self.forget(&id);
                dropped = true;
            } else if !self.end_if_done(&id) {
                self.reindex(&id);
            }
        }
        if dropped {
            self.compact();
        }
        let (g, keep): (VecDeque<_>, VecDeque<_>) = self.orphans.drain(..).partition(|(_, p, _)| p.reply.is_closed());
        self.orphans = keep;
        gone.extend(g.into_iter().map(|(_, p, _)| p));
        self.queued -= gone.len();
        self.publish();
        gone
    }

    /// Drops the backlog's entries of sequences no longer waiting, and gives back the room of
    /// tables that emptied: a burst of STARTs whose clients all cancelled leaves nothing behind
    /// (the entries would otherwise stay until a slot frees, and pile up with every burst).
    pub(super) fn compact(&mut self) {
        let sequences = &self.sequences;
        self.backlog.retain(|(order, id)| sequences.get(id).is_some_and(|s| s.waiting && s.order == *order));
        if self.backlog.capacity() > 4 * self.backlog.len().max(64) {
            self.backlog.shrink_to_fit();
        }
        if self.sequences.capacity() > 4 * self.sequences.len().max(64) {
            self.sequences.shrink_to_fit();
        }
    }
}
