//! The observable state of a model's actors (quickwit's `observable_state` habit): what each
//! actor reports of itself, read by the metrics exporter without asking the actor.

use std::sync::atomic::{AtomicBool, AtomicU64};

/// One instance actor's figures.
#[derive(Debug, Default)]
pub struct InstanceFigures {
    pub alive: AtomicBool,
    pub busy_ns: AtomicU64,
    pub executions: AtomicU64,
    pub restarts: AtomicU64,
    /// Sequence slots of this instance held by a sequence (`direct` strategy).
    pub seq_slots_used: AtomicU64,
}

/// A model version's actor figures.
#[derive(Debug)]
pub struct ModelFigures {
    pub instances: Vec<InstanceFigures>,
    /// Requests queued in the scheduler, not yet handed to an instance.
    pub queue_len: AtomicU64,
    /// Messages sent to the scheduler and not yet handled.
    pub scheduler_mailbox: AtomicU64,
    /// Executions (batches) dispatched and the items they held, for batch-size figures.
    pub batches_dispatched: AtomicU64,
    pub items_dispatched: AtomicU64,
    /// The sequence actor: sequences holding a slot, sequences waiting for one, slots freed by
    /// the idle timeout, and bytes of implicit state held.
    pub seq_active: AtomicU64,
    pub seq_backlog: AtomicU64,
    pub seq_idle_releases: AtomicU64,
    pub seq_state_bytes: AtomicU64,
}

impl ModelFigures {
    pub fn new(instances: usize) -> Self {
        ModelFigures {
            instances: (0..instances).map(|_| InstanceFigures::default()).collect(),
            queue_len: AtomicU64::new(0),
            scheduler_mailbox: AtomicU64::new(0),
            batches_dispatched: AtomicU64::new(0),
            items_dispatched: AtomicU64::new(0),
            seq_active: AtomicU64::new(0),
            seq_backlog: AtomicU64::new(0),
            seq_idle_releases: AtomicU64::new(0),
            seq_state_bytes: AtomicU64::new(0),
        }
    }

    pub fn instance(&self, index: usize) -> &InstanceFigures {
        &self.instances[index]
    }

    pub fn live_instances(&self) -> usize {
        self.instances.iter().filter(|i| i.alive.load(std::sync::atomic::Ordering::Relaxed)).count()
    }
}
