//! The sequence actor's slots: where a sequence may run. With the `direct` strategy each
//! instance has `max_batch_size` slots and a sequence holds one for its life (so its requests
//! always run on that instance); with `oldest` a sequence only holds one of
//! `max_candidate_sequences` candidate places and runs on any free instance.

use crate::policy::{ModelPolicy, SequenceStrategy};
use crate::request::CorrelationId;

#[derive(Debug)]
pub(super) struct Slots {
    direct: bool,
    /// Direct strategy: which sequence holds each slot of each instance.
    held: Vec<Vec<Option<CorrelationId>>>,
    /// Direct strategy: how many slots of each instance are held.
    used: Vec<usize>,
    /// Oldest strategy: how many sequences may hold a candidate place.
    candidates: usize,
}

impl Slots {
    pub fn new(policy: &ModelPolicy, strategy: &SequenceStrategy) -> Self {
        let per_instance = policy.max_batch_size.max(1);
        let instances = policy.instances.len().max(1);
        let candidates = match strategy {
            SequenceStrategy::Oldest { max_candidate_sequences, .. } if *max_candidate_sequences > 0 => {
                *max_candidate_sequences
            }
            _ => per_instance * instances,
        };
        Slots {
            direct: matches!(strategy, SequenceStrategy::Direct),
            held: vec![vec![None; per_instance]; instances],
            used: vec![0; instances],
            candidates,
        }
    }

    /// True with the `direct` strategy: a sequence runs on its slot's instance only.
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// A free slot while `active` sequences hold a place: (instance, slot) for direct;
    /// `Some((0, 0))` when a candidate place is free for oldest.
    pub fn free(&self, active: usize) -> Option<(usize, usize)> {
        if self.direct {
            // Spread sequences over instances: the instance with the fewest held slots first.
            let (i, _) = self.used.iter().enumerate().min_by_key(|(i, used)| (**used, *i))?;
            let j = self.held[i].iter().position(Option::is_none)?;
            Some((i, j))
        } else {
            (active < self.candidates).then_some((0, 0))
        }
    }

    /// Gives `slot` (from `free`) to sequence `id`; returns the slot the sequence now holds
    /// (none with oldest, where a place is only counted).
    pub fn take(&mut self, slot: (usize, usize), id: &CorrelationId) -> Option<(usize, usize)> {
        if !self.direct {
            return None;
        }
        if self.held[slot.0][slot.1].replace(id.clone()).is_none() {
            self.used[slot.0] += 1;
        }
        Some(slot)
    }

    /// Frees a slot a sequence held.
    pub fn give_back(&mut self, (i, j): (usize, usize)) {
        if self.held[i][j].take().is_some() {
            self.used[i] -= 1;
        }
    }

    /// Slots held, per instance.
    pub fn used(&self) -> impl Iterator<Item = usize> + '_ {
        self.used.iter().copied()
    }
}
