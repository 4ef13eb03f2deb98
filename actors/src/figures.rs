//! The observable state of a model's actors (quickwit's `observable_state` habit): each actor
//! kind publishes its own state, with atomics only it writes, and anyone reads a snapshot of it
//! without asking the actor or taking a lock — the metrics exporter at scrape time, tests as
//! whole values.
//!
//! | state | written by |
//! | --- | --- |
//! | `SchedulerState` | the scheduler actor (batcher or sequence actor) |
//! | `SequenceState` | the sequence actor (its state store keeps the bytes it holds) |
//! | `SupervisorState` | the supervisor |
//! | `InstanceState` | each instance, its own |
//! | `ModelFigures::submitted` | the model's handle, as it sends requests to the scheduler |

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use crate::exit::{ExitCause, RestartCounts};
use crate::histogram::{Histogram, HistogramSnapshot, BATCH_SIZE_BOUNDS, LATENCY_US_BOUNDS};

/// The scheduler actor's state.
#[derive(Debug)]
pub struct SchedulerState {
    /// Requests queued, not yet handed to an instance.
    queue_len: AtomicU64,
    /// Requests taken from its mailbox (`ModelFigures::submitted` minus this is its depth).
    handled: AtomicU64,
    batches: AtomicU64,
    items: AtomicU64,
    /// Of `batches`, those the submitting thread handed to an instance itself (the lane).
    direct: AtomicU64,
    /// Of `batches`, those an instance took from the batcher itself as it finished one.
    pulled: AtomicU64,
    /// Requests their submitting thread queued in the batcher behind busy instances.
    lane_queued: AtomicU64,
    /// Batches handed to each instance (minus the instance's `taken`: its mailbox depth).
    dispatched: Vec<AtomicU64>,
    batch_size: Histogram,
    batch_delay_us: Histogram,
    /// Of `direct`, those the submitting thread ran itself on the instance's backend (last, so
    /// that the hotter counters above keep their places).
    here: AtomicU64,
}

/// What the scheduler actor reports.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerSnapshot {
    pub queue_len: u64,
    /// Requests sent to the scheduler and not yet handled.
    pub mailbox: u64,
    /// Batches handed to instances, and the items they held.
    pub batches: u64,
    pub items: u64,
    /// Of `batches`, the requests handed straight to a free instance by the thread that
    /// submitted them, without the scheduler actor's hop (`lane`).
    pub direct: u64,
    /// Of `direct`, those the submitting thread (a frontend thread serving one client alone)
    /// ran itself on the instance's backend instead of waking the instance's thread.
    pub here: u64,
    /// Of `batches`, those an instance took from the batcher itself as it finished its previous
    /// one, without the scheduler actor's hop (`lane`).
    pub pulled: u64,
    /// Requests that found every instance busy and were queued in the batcher by the thread
    /// that submitted them, without the scheduler actor's hop (`lane`).
    pub lane_queued: u64,
    /// Items per batch.
    pub batch_size: HistogramSnapshot,
    /// How long the oldest request of each batch waited, in µs.
    pub batch_delay_us: HistogramSnapshot,
}

impl SchedulerState {
    fn new(instances: usize) -> Self {
        SchedulerState {
            queue_len: AtomicU64::new(0),
            handled: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            items: AtomicU64::new(0),
            direct: AtomicU64::new(0),
            pulled: AtomicU64::new(0),
            lane_queued: AtomicU64::new(0),
            dispatched: (0..instances).map(|_| AtomicU64::new(0)).collect(),
            batch_size: Histogram::new(BATCH_SIZE_BOUNDS),
            batch_delay_us: Histogram::new(LATENCY_US_BOUNDS),
            here: AtomicU64::new(0),
        }
    }

    pub(crate) fn handled(&self) {
        self.handled.fetch_add(1, Relaxed);
    }

    pub(crate) fn queued(&self, len: usize) {
        self.queue_len.store(len as u64, Relaxed);
    }

    /// The submitting thread queued a request in the batcher (`len` queued now) itself.
    pub(crate) fn lane_queued(&self, len: usize) {
        self.lane_queued.fetch_add(1, Relaxed);
        self.queued(len);
    }

    /// A batch of `items` left for an instance, its oldest request having waited `waited`.
    pub(crate) fn batch(&self, items: usize, waited: Option<Duration>) {
        self.batches.fetch_add(1, Relaxed);
        self.items.fetch_add(items as u64, Relaxed);
        self.batch_size.record(items as f64);
        if let Some(w) = waited {
            self.batch_delay_us.record_us(w);
        }
    }

    pub(crate) fn dispatched(&self, instance: usize) {
        self.dispatched[instance].fetch_add(1, Relaxed);
    }

    /// A request went straight to instance `instance` from the thread that submitted it, in a
    /// batch of `items` whose oldest request waited `waited` (nothing, but for a sequence
    /// model's batch), handled without the scheduler's mailbox.
    pub(crate) fn direct(&self, items: usize, waited: Duration, instance: usize) {
        self.handled();
        self.batch(items, Some(waited));
        self.dispatched(instance);
        self.direct.fetch_add(1, Relaxed);
    }

    /// As `direct`, the batch run on the submitting thread itself.
    pub(crate) fn direct_here(&self, items: usize, instance: usize) {
        self.direct(items, Duration::ZERO, instance);
        self.here.fetch_add(1, Relaxed);
    }

    /// Instance `instance` took a batch of `items` from the batcher itself, its oldest request
    /// having waited `waited`.
    pub(crate) fn pulled(&self, items: usize, waited: Option<Duration>, instance: usize) {
        self.batch(items, waited);
        self.dispatched(instance);
        self.pulled.fetch_add(1, Relaxed);
    }
}

/// The sequence actor's state (all zero for a model without `sequence_batching`).
#[derive(Debug)]
pub struct SequenceState {
    active: AtomicU64,
    backlog: AtomicU64,
    idle_releases: AtomicU64,
    evictions: AtomicU64,
    /// Kept by the state store, under its lock.
    state_bytes: AtomicU64,
    state_bytes_limit: AtomicU64,
    slots_used: Vec<AtomicU64>,
}

/// What the sequence actor reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SequenceSnapshot {
    /// Sequences holding a slot.
    pub active: u64,
    /// Sequences waiting for one.
    pub backlog: u64,
    /// Slots freed by the idle timeout.
    pub idle_releases: u64,
    /// Sequences evicted to keep the state held within `max_sequence_state_bytes`.
    pub evictions: u64,
    /// Bytes of implicit state held.
    pub state_bytes: u64,
    /// `max_sequence_state_bytes` (0: no cap).
    pub state_bytes_limit: u64,
    /// Slots held on each instance (`direct` strategy).
    pub slots_used: Vec<u64>,
}

impl SequenceState {
    fn new(instances: usize) -> Self {
        SequenceState {
            active: AtomicU64::new(0),
            backlog: AtomicU64::new(0),
            idle_releases: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            state_bytes: AtomicU64::new(0),
            state_bytes_limit: AtomicU64::new(0),
            slots_used: (0..instances).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub(crate) fn publish(&self, active: usize, backlog: usize, slots_used: impl Iterator<Item = usize>) {
        self.active.store(active as u64, Relaxed);
        self.backlog.store(backlog as u64, Relaxed);
        for (f, used) in self.slots_used.iter().zip(slots_used) {
            f.store(used as u64, Relaxed);
        }
    }

    pub(crate) fn idle_release(&self) {
        self.idle_releases.fetch_add(1, Relaxed);
    }

    pub(crate) fn eviction(&self) {
        self.evictions.fetch_add(1, Relaxed);
    }

    pub(crate) fn state_bytes_limit(&self, limit: u64) {
        self.state_bytes_limit.store(limit, Relaxed);
    }

    pub(crate) fn state_bytes(&self, added: u64, removed: u64) {
        self.state_bytes.fetch_add(added, Relaxed);
        self.state_bytes.fetch_sub(removed, Relaxed);
    }

    pub fn snapshot(&self) -> SequenceSnapshot {
        SequenceSnapshot {
            active: self.active.load(Relaxed),
            backlog: self.backlog.load(Relaxed),
            idle_releases: self.idle_releases.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            state_bytes: self.state_bytes.load(Relaxed),
            state_bytes_limit: self.state_bytes_limit.load(Relaxed),
            slots_used: self.slots_used.iter().map(|s| s.load(Relaxed)).collect(),
        }
    }
}

/// The supervisor's state: which instances live, and their restarts.
#[derive(Debug)]
pub struct SupervisorState {
    alive: Vec<AtomicBool>,
    restarts: Vec<RestartCounts>,
}

/// Restarts of one instance, by the cause of the exit before each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Restarts {
    pub load_failed: u64,
    pub backend_failed: u64,
    pub panicked: u64,
}

impl Restarts {
    pub fn get(&self, cause: ExitCause) -> u64 {
        match cause {
            ExitCause::LoadFailed => self.load_failed,
            ExitCause::BackendFailed => self.backend_failed,
            ExitCause::Panicked => self.panicked,
            ExitCause::Stopped => 0,
        }
    }

    pub fn total(&self) -> u64 {
        self.load_failed + self.backend_failed + self.panicked
    }
}

/// What the supervisor reports, per instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorSnapshot {
    pub alive: Vec<bool>,
    pub restarts: Vec<Restarts>,
}

impl SupervisorSnapshot {
    pub fn live_instances(&self) -> usize {
        self.alive.iter().filter(|a| **a).count()
    }
}

impl SupervisorState {
    fn new(instances: usize) -> Self {
        SupervisorState {
            alive: (0..instances).map(|_| AtomicBool::new(false)).collect(),
            restarts: (0..instances).map(|_| RestartCounts::default()).collect(),
        }
    }

    pub(crate) fn alive(&self, instance: usize, alive: bool) {
        self.alive[instance].store(alive, Relaxed);
    }

    pub(crate) fn restarted(&self, instance: usize, cause: ExitCause) {
        self.restarts[instance].add(cause);
    }

    pub fn live_instances(&self) -> usize {
        self.alive.iter().filter(|a| a.load(Relaxed)).count()
    }

    pub fn snapshot(&self) -> SupervisorSnapshot {
        SupervisorSnapshot {
            alive: self.alive.iter().map(|a| a.load(Relaxed)).collect(),
            restarts: self
                .restarts
                .iter()
                .map(|r| Restarts {
                    load_failed: r.get(ExitCause::LoadFailed),
                    backend_failed: r.get(ExitCause::BackendFailed),
                    panicked: r.get(ExitCause::Panicked),
                })
                .collect(),
        }
    }
}

/// One instance's state, over all its restarts.
#[derive(Debug, Default)]
pub struct InstanceState {
    busy_ns: AtomicU64,
    executions: AtomicU64,
    /// Batches taken from its mailbox.
    taken: AtomicU64,
    /// Items of the batch it runs now, or ran last.
    batch_size: AtomicU64,
    executing: AtomicBool,
}

/// What an instance reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InstanceSnapshot {
    /// Time spent executing, in ns.
    pub busy_ns: u64,
    pub executions: u64,
    /// Batches sent to it and not yet taken up (its mailbox holds one at most).
    pub mailbox: u64,
    /// Items of the batch it runs now (`executing`), or ran last (0 before its first).
    pub batch_size: u64,
    pub executing: bool,
}

impl InstanceState {
    /// It took a batch of `items` from its mailbox and runs it now.
    pub(crate) fn took(&self, items: usize) {
        self.batch_size.store(items as u64, Relaxed);
        self.executing.store(true, Relaxed);
        self.taken.fetch_add(1, Relaxed);
    }

    /// It finished the batch it took, after `d`.
    pub(crate) fn busy(&self, d: Duration) {
        self.busy_ns.fetch_add(d.as_nanos() as u64, Relaxed);
        self.executing.store(false, Relaxed);
    }

    pub(crate) fn executed(&self) {
        self.executions.fetch_add(1, Relaxed);
    }
}

/// A model version's actors' states.
#[derive(Debug)]
pub struct ModelFigures {
    /// Requests the handle sent to the scheduler (the handle's own figure).
    submitted: AtomicU64,
    pub scheduler: SchedulerState,
    pub sequence: SequenceState,
    pub supervisor: SupervisorState,
    pub instances: Vec<InstanceState>,
}

/// Every state of a model version's actors at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct FiguresSnapshot {
    pub scheduler: SchedulerSnapshot,
    pub sequence: SequenceSnapshot,
    pub supervisor: SupervisorSnapshot,
    pub instances: Vec<InstanceSnapshot>,
}

impl ModelFigures {
    pub fn new(instances: usize) -> Self {
        ModelFigures {
            submitted: AtomicU64::new(0),
            scheduler: SchedulerState::new(instances),
            sequence: SequenceState::new(instances),
            supervisor: SupervisorState::new(instances),
            instances: (0..instances).map(|_| InstanceState::default()).collect(),
        }
    }

    pub(crate) fn submitted(&self) {
        self.submitted.fetch_add(1, Relaxed);
    }

    /// A request counted as submitted that the scheduler refused (its mailbox was full).
    pub(crate) fn unsubmitted(&self) {
        self.submitted.fetch_sub(1, Relaxed);
    }

    pub fn instance(&self, index: usize) -> &InstanceState {
        &self.instances[index]
    }

    pub fn live_instances(&self) -> usize {
        self.supervisor.live_instances()
    }

    pub fn scheduler(&self) -> SchedulerSnapshot {
        let s = &self.scheduler;
        SchedulerSnapshot {
            queue_len: s.queue_len.load(Relaxed),
            mailbox: self.submitted.load(Relaxed).saturating_sub(s.handled.load(Relaxed)),
            batches: s.batches.load(Relaxed),
            items: s.items.load(Relaxed),
            direct: s.direct.load(Relaxed),
            here: s.here.load(Relaxed),
            pulled: s.pulled.load(Relaxed),
            lane_queued: s.lane_queued.load(Relaxed),
            batch_size: s.batch_size.snapshot(),
            batch_delay_us: s.batch_delay_us.snapshot(),
        }
    }

    pub fn instance_snapshots(&self) -> Vec<InstanceSnapshot> {
        self.instances
            .iter()
            .zip(&self.scheduler.dispatched)
            .map(|(i, sent)| InstanceSnapshot {
                busy_ns: i.busy_ns.load(Relaxed),
                executions: i.executions.load(Relaxed),
                mailbox: sent.load(Relaxed).saturating_sub(i.taken.load(Relaxed)),
                batch_size: i.batch_size.load(Relaxed),
                executing: i.executing.load(Relaxed),
            })
            .collect()
    }

    pub fn snapshot(&self) -> FiguresSnapshot {
        FiguresSnapshot {
            scheduler: self.scheduler(),
            sequence: self.sequence.snapshot(),
            supervisor: self.supervisor.snapshot(),
            instances: self.instance_snapshots(),
        }
    }
}
