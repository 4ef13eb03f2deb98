//! The sequence batcher: Triton's `sequence_batching`, driven by the scheduler actor like the
//! dynamic batcher (the two together are the sequence actor, `scheduler::SequenceActor`). Each correlation ID
//! gets a slot (for its life with the `direct` strategy, on one instance); its requests run one at a time, in
//! order; the control inputs (START, END, READY, CORRID) and the implicit state tensors are added to each
//! request here, and the state the model returns is kept by the engine — in `StateStore`, not in the backend
//! — so a restarted instance carries its sequences on with their state intact.
//!
//! Where a sequence may run is in `slots`; its state between requests in `state`; the inputs
//! added to each of its requests in `inputs`; how the scheduler actor drives it in `queue`; the
//! table of live conversations it answers watchers with in `table`; iterative sequences (a
//! request run again and again) in `iterative`; what it gives back (idle and evicted sequences,
//! cancelled requests, stale backlog entries) in `reclaim`.

mod inputs;
mod iterative;
mod queue;
mod reclaim;
mod slots;
pub(crate) mod state;
pub mod table;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

pub use queue::SharedSequence;
use slots::Slots;
pub use state::{SequenceTicket, StateStore};
pub use table::{Conversation, ConversationStatus, SortKey, TablePage, TableQuery};

use crate::clock::SharedClock;
use crate::error::Error;
use crate::figures::ModelFigures;
use crate::policy::{ControlKind, ModelPolicy, SequencePolicy, SequenceStrategy};
use crate::protocol::{Next, Pending, Refused};
use crate::request::CorrelationId;
use crate::tensor::DataType;

#[derive(Debug)]
struct Sequence {
    queue: VecDeque<Pending>,
    /// The instance running this sequence's request, if one is running.
    in_flight: Option<usize>,
    /// `direct`: the (instance, slot) it holds for its life.
    slot: Option<(usize, usize)>,
    /// The END request has been dispatched.
    ending: bool,
    last_active: Instant,
    /// Order of arrival, for the `oldest` strategy and the backlog.
    order: u64,
    /// In the backlog, waiting for a slot.
    waiting: bool,
    /// Requests dispatched since its START.
    turns: u64,
    /// Its key in `ready` while it has a request to run and none running.
    ready_key: Option<(Instant, u64)>,
    /// Its key in `idle` while it holds a slot with nothing queued or running.
    idle_key: Option<(Instant, u64)>,
}

/// The end of the error for a request of a sequence this model does not hold, without START
/// (Triton's text); a frontend may recognise it (see Tritium's sequence affinity).
pub const NO_START: &str = "must specify the START flag on the first request of the sequence";

/// How many evicted correlation IDs are remembered (oldest forgotten first), so that their
/// next request is told why its sequence is gone.
const EVICTED_REMEMBERED: usize = 65_536;

/// Every structure is indexed so that a request's turn (push, dispatch, finish) costs
/// O(log n) in the number n of live sequences, never a scan of them: `ready` orders the
/// sequences that can run by the arrival of their next request, `running` lists what each
/// instance runs, `idle` orders the idle sequences by their last activity (for the idle
/// timeout and for eviction), and the backlog is a queue of IDs into `sequences`.
#[derive(Debug)]
pub struct SequenceBatcher {
    model: String,
    policy: SequencePolicy,
    batched: bool,
    max_batch: usize,
    /// Sequences holding a slot (direct) or a candidate place (oldest), and those waiting in
    /// the backlog for one.
    sequences: HashMap<CorrelationId, Sequence>,
    /// How many of `sequences` hold a slot.
    active: usize,
    /// Sequences waiting for a slot, in arrival order: (order, id). An entry whose sequence is
    /// gone or no longer waiting (same order) is skipped.
    backlog: VecDeque<(u64, CorrelationId)>,
    /// How many of `sequences` wait in the backlog.
    waiting: usize,
    /// Sequences that can run a request now, by (arrival of that request, order): one map per
    /// instance with `direct` (a sequence runs on its slot's instance), one with `oldest`.
    ready: Vec<BTreeMap<(Instant, u64), CorrelationId>>,
    /// The sequences each instance is running.
    running: Vec<Vec<CorrelationId>>,
    /// Sequences holding a slot with nothing queued or running, by (last activity, order).
    idle: BTreeMap<(Instant, u64), CorrelationId>,
    slots: Slots,
    queued: usize,
    capacity: usize,
    next_order: u64,
    /// Requests of unknown sequences without START, held until their START comes or their
    /// grace ends: (id, request, deadline), in order of arrival (and so of deadline).
    orphans: VecDeque<(CorrelationId, Pending, Instant)>,
    /// Sequences evicted for the state cap, remembered so their next request says so.
    evicted: HashSet<CorrelationId>,
    evicted_order: VecDeque<CorrelationId>,
    store: StateStore,
    figures: Arc<ModelFigures>,
    /// For the time a request arrives or a sequence gets its slot.
    clock: SharedClock,
    /// The ID the next request without one starts a sequence under (iterative sequences,
    /// counting from 1 as Triton does).
    next_auto_id: u64,
}

impl SequenceBatcher {
    pub fn new(
        policy: &ModelPolicy,
        sequence: &SequencePolicy,
        figures: Arc<ModelFigures>,
        clock: SharedClock,
    ) -> Self {
        let slots = Slots::new(policy, &sequence.strategy);
        let instances = policy.instances.len().max(1);
        let lanes = if slots.direct() { instances } else { 1 };
        figures.sequence.state_bytes_limit(sequence.max_state_bytes.unwrap_or(0));
        SequenceBatcher {
            model: policy.name.clone(),
            policy: sequence.clone(),
            batched: policy.batches(),
            // A decoupled model runs one request at a time, unless its backend takes several
            // (`batch_decoupled`).
            max_batch: if policy.decoupled { 1 } else { policy.max_batch_size.max(1) },
            sequences: HashMap::new(),
            active: 0,
            backlog: VecDeque::new(),
            waiting: 0,
            ready: vec![BTreeMap::new(); lanes],
            running: vec![Vec::new(); instances],
            idle: BTreeMap::new(),
            slots,
            queued: 0,
            capacity: policy.queue_capacity,
            next_order: 0,
            orphans: VecDeque::new(),
            evicted: HashSet::new(),
            evicted_order: VecDeque::new(),
            store: StateStore::new(figures.clone()),
            figures,
            clock,
            next_auto_id: 1,
        }
    }

    /// Lets a decoupled model's requests batch up to `max_batch_size` (its backend runs several
    /// at once, each streaming on its own).
    pub fn batch_decoupled(&mut self, policy: &ModelPolicy) {
        self.max_batch = policy.max_batch_size.max(1);
    }

    fn direct(&self) -> bool {
        self.slots.direct()
    }

    pub fn len(&self) -> usize {
        self.queued
    }

    pub fn is_empty(&self) -> bool {
        self.queued == 0
    }

    fn publish(&self) {
        self.figures.sequence.publish(self.active, self.waiting, self.slots.used());
        // Requests reach it from the lane too, between the actor's turns.
        self.figures.scheduler.queued(self.queued);
    }

    fn free_slot(&self) -> Option<(usize, usize)> {
        self.slots.free(self.active)
    }

    /// Puts sequence `id` in `ready` or `idle` (or neither) as its state now says.
    fn reindex(&mut self, id: &CorrelationId) {
        let Some(seq) = self.sequences.get_mut(id) else { return };
        let placed = !seq.waiting && seq.in_flight.is_none();
        let ready = if placed { seq.queue.front().map(|p| (p.enqueued, seq.order)) } else { None };
        let idle = (placed && seq.queue.is_empty()).then_some((seq.last_active, seq.order));
        let lane = if self.slots.direct() { seq.slot.map_or(0, |(i, _)| i) } else { 0 };
        if seq.ready_key != ready {
            if let Some(k) = seq.ready_key.take() {
                self.ready[lane].remove(&k);
            }
            if let Some(k) = ready {
                self.ready[lane].insert(k, id.clone());
            }
            seq.ready_key = ready;
        }
        if seq.idle_key != idle {
            if let Some(k) = seq.idle_key.take() {
                self.idle.remove(&k);
            }
            if let Some(k) = idle {
                self.idle.insert(k, id.clone());
            }
            seq.idle_key = idle;
        }
    }

    /// Removes sequence `id` from every index; returns it.
    fn forget(&mut self, id: &CorrelationId) -> Option<Sequence> {
        let seq = self.sequences.remove(id)?;
        let lane = if self.slots.direct() { seq.slot.map_or(0, |(i, _)| i) } else { 0 };
        if let Some(k) = seq.ready_key {
            self.ready[lane].remove(&k);
        }
        if let Some(k) = seq.idle_key {
            self.idle.remove(&k);
        }
        if seq.waiting {
            self.waiting -= 1;
        } else {
            self.active -= 1;
        }
        Some(seq)
    }

    /// Queues a request of a sequence, or hands it back with the reason it cannot be queued.
    pub fn push(&mut self, mut p: Pending) -> Result<(), Refused> {
        if self.policy.iterative {
            self.assign_id(&mut p);
        }
        let Some(flags) = p.request.sequence.clone() else {
            let e = Error::invalid(format!(
                "inference request to model '{}' must specify a non-zero or non-empty correlation ID",
                self.model
            ));
            return Err(Box::new((p, e)));
        };
        let id = flags.id.clone();
        if id == CorrelationId::U64(0) || id == CorrelationId::Str(String::new()) {
            let e = Error::invalid(format!(
                "inference request to model '{}' must specify a non-zero or non-empty correlation ID",
                self.model
            ));
            return Err(Box::new((p, e)));
        }
        if let Some(c) = self.policy.control(ControlKind::CorrId) {
            let ok = matches!(
                (&id, c.datatype),
                (CorrelationId::U64(_), DataType::U64) | (CorrelationId::Str(_), DataType::Bytes)
            ) || matches!((&id, c.datatype), (CorrelationId::U64(_), DataType::Bytes));
            if !ok {
                let e = Error::invalid(format!(
                    "sequence ID '{id}' is a string, but model '{}' takes {} correlation IDs (control '{}')",
                    self.model, c.datatype, c.input
                ));
                return Err(Box::new((p, e)));
            }
        }
        if self.queued >= self.capacity {
            return Err(Box::new((p, Error::unavailable("Exceeds maximum queue size"))));
        }
        let now = self.clock.now();
        if let Some(seq) = self.sequences.get_mut(&id) {
            seq.queue.push_back(p);
            if !seq.waiting {
                seq.last_active = now;
            }
            self.reindex(&id);
        } else if !flags.start && self.evicted.contains(&id) {
            let e = Error::invalid(format!(
                "sequence {id} of model '{}' was evicted, its implicit state dropped, to keep the state held within \
                 max_sequence_state_bytes ({} bytes) after it had been idle the longest; start it again with the \
                 START flag",
                self.model,
                self.policy.max_state_bytes.unwrap_or(0)
            ));
            return Err(Box::new((p, e)));
        } else if !flags.start {
            if self.policy.start_grace.is_zero() {
                return Err(Box::new((p, self.no_start(&id))));
            }
            // Its START may be on its way: hold it for the grace period (see `adopt_orphans`).
            self.orphans.push_back((id, p, now + self.policy.start_grace));
        } else {
            // A new START for an evicted ID begins a new sequence; the old one stays gone.
            self.evicted.remove(&id);
            let order = self.next_order;
            self.next_order += 1;
            let seq = Sequence {
                queue: VecDeque::from([p]),
                in_flight: None,
                slot: None,
                ending: false,
                last_active: now,
                order,
                waiting: true,
                turns: 0,
                ready_key: None,
                idle_key: None,
            };
            match self.free_slot() {
                Some(slot) => {
                    self.sequences.insert(id.clone(), seq);
                    self.waiting += 1;
                    self.activate(&id, slot);
                }
                None if self.waiting >= self.policy.max_backlog => {
                    let mut seq = seq;
                    let p = seq.queue.pop_front().expect("the new sequence's request");
                    let e = Error::unavailable(format!(
                        "model '{}' has no free sequence slot and its backlog is full ({} sequences waiting)",
                        self.model, self.waiting
                    ));
                    return Err(Box::new((p, e)));
                }
                None => {
                    self.sequences.insert(id.clone(), seq);
                    self.waiting += 1;
                    self.backlog.push_back((order, id.clone()));
                }
            }
            self.adopt_orphans(&id);
        }
        self.queued += 1;
        self.publish();
        Ok(())
    }

    fn no_start(&self, id: &CorrelationId) -> Error {
        Error::invalid(format!("inference request for sequence {id} to model '{}' {NO_START}", self.model))
    }

    /// A sequence just started: the requests of its id that arrived before its START (held as
    /// orphans) follow the START, in their order of arrival.
    fn adopt_orphans(&mut self, id: &CorrelationId) {
        if !self.orphans.iter().any(|(o, _, _)| o == id) {
            return;
        }
        let (mine, rest): (VecDeque<_>, VecDeque<_>) = self.orphans.drain(..).partition(|(o, _, _)| o == id);
        self.orphans = rest;
        let seq = self.sequences.get_mut(id).expect("just started");
        for (_, p, _) in mine {
            seq.queue.push_back(p);
        }
        self.reindex(id);
    }

    /// Held requests whose START did not come within the grace period, with Triton's error.
    pub fn take_orphans_expired(&mut self, now: Instant) -> Vec<(Pending, Error)> {
        let mut out = Vec::new();
        while self.orphans.front().is_some_and(|(_, _, deadline)| *deadline <= now) {
            let (id, p, _) = self.orphans.pop_front().expect("checked");
            self.queued -= 1;
            let e = self.no_start(&id);
            out.push((p, e));
        }
        if !out.is_empty() {
            self.publish();
        }
        out
    }

    /// When the oldest held request's grace ends.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.orphans.front().map(|(_, _, d)| *d)
    }

    /// Puts a dispatched request back at the head of its sequence (its instance was gone).
    pub fn requeue(&mut self, p: Pending) -> Result<(), Refused> {
        let id = p.request.sequence.as_ref().map(|f| f.id.clone());
        let Some(id) = id.filter(|id| self.sequences.get(id).is_some_and(|s| !s.waiting)) else {
            return Err(Box::new((p, Error::unavailable("the sequence's instance was lost"))));
        };
        self.sequences.get_mut(&id).expect("checked").queue.push_front(p);
        self.queued += 1;
        self.reindex(&id);
        Ok(())
    }

    /// Gives `slot` to the waiting sequence `id`.
    fn activate(&mut self, id: &CorrelationId, slot: (usize, usize)) {
        let now = self.clock.now();
        let taken = self.slots.take(slot, id);
        let seq = self.sequences.get_mut(id).expect("a waiting sequence");
        seq.slot = taken;
        seq.last_active = now;
        seq.waiting = false;
        self.waiting -= 1;
        self.active += 1;
        self.reindex(id);
    }

    /// Frees a sequence's slot and state, and gives the slot to the oldest waiting sequence.
    fn release(&mut self, id: &CorrelationId) {
        if let Some(seq) = self.forget(id) {
            if let Some(slot) = seq.slot {
                self.slots.give_back(slot);
            }
        }
        self.store.remove(id);
        while let Some(slot) = self.free_slot() {
            let Some((order, id)) = self.backlog.pop_front() else { break };
            if self.sequences.get(&id).is_some_and(|s| s.waiting && s.order == order) {
                self.activate(&id, slot);
            }
        }
    }

    /// Whether a sequence has a request ready to run on `instance` (its slot's instance with
    /// `direct`, any with `oldest`), whether or not a batching delay holds it yet.
    pub fn ready_for(&self, instance: usize) -> bool {
        let lane = if self.direct() { instance } else { 0 };
        self.ready.get(lane).is_some_and(|r| !r.is_empty())
    }

    /// Whether `next` would give instance `instance` a batch now, without taking it: for a
    /// submitter whose request may complete the batch an instance waits for (`lane::waiter`).
    pub fn ready(&self, instance: usize, now: Instant) -> bool {
        self.ready_for(instance) && self.held_until(instance, now).is_none()
    }

    /// Until when the `oldest` strategy's delay holds the batch instance `instance` would take
    /// (fewer ready than the largest batch or a preferred size, and the delay not run out).
    fn held_until(&self, instance: usize, now: Instant) -> Option<Instant> {
        let SequenceStrategy::Oldest { preferred_batch_sizes, max_queue_delay, .. } = &self.policy.strategy else {
            return None;
        };
        let lane = if self.direct() { instance } else { 0 };
        let ready = self.ready.get(lane)?;
        let (&(first, _), _) = ready.first_key_value()?;
        let n = ready.len().min(self.max_batch);
        let full = n >= self.max_batch || preferred_batch_sizes.contains(&n);
        let deadline = first + *max_queue_delay;
        (!full && !max_queue_delay.is_zero() && now < deadline).then_some(deadline)
    }

    /// The next batch for the free instance `instance`.
    pub fn next(&mut self, instance: usize, now: Instant) -> Next {
        if !self.ready_for(instance) {
            return Next::Empty;
        }
        if let Some(deadline) = self.held_until(instance, now) {
            return Next::WaitUntil(deadline);
        }
        let lane = if self.direct() { instance } else { 0 };
        // Requests of one batch must merge: same inputs with the same shapes past the batch dim.
        let mut batch: Vec<Pending> = Vec::new();
        let mut passed_over = Vec::new();
        while batch.len() < self.max_batch {
            let Some((_, id)) = self.ready[lane].pop_first() else { break };
            let seq = self.sequences.get_mut(&id).expect("ready sequences are known");
            seq.ready_key = None;
            let mut p = seq.queue.pop_front().expect("ready sequences have a request");
            let flags = p.request.sequence.clone().expect("sequence requests carry flags");
            inputs::prepare(&self.policy, self.batched, &self.store, &mut p, &id, flags.start, flags.end);
            let seq = self.sequences.get_mut(&id).expect("still known");
            if let Some(first) = batch.first() {
                if !self.batched || !compatible(first, &p) {
                    seq.queue.push_front(p);
                    passed_over.push(id);
                    continue;
                }
            }
            seq.in_flight = Some(instance);
            seq.last_active = now;
            seq.turns = if flags.start { 1 } else { seq.turns + 1 };
            seq.ending = flags.end || (seq.ending && !flags.start);
            self.queued -= 1;
            batch.push(p);
            self.reindex(&id);
            if self.running.len() <= instance {
                self.running.resize(instance + 1, Vec::new());
            }
            self.running[instance].push(id);
        }
        for id in passed_over {
            self.reindex(&id);
        }
        self.publish();
        Next::Batch(batch)
    }

    /// The instance finished its batch: its sequences may run their next request; a sequence
    /// whose END ran gives its slot up (or starts again if a START is queued). Returns the
    /// requests that cannot run (no START after an END).
    pub fn finished(&mut self, instance: usize, now: Instant) -> Vec<(Pending, Error)> {
        let mut ended = Vec::new();
        let mut failed = Vec::new();
        let ran = self.running.get_mut(instance).map(std::mem::take).unwrap_or_default();
        for id in ran {
            let Some(seq) = self.sequences.get_mut(&id).filter(|s| s.in_flight == Some(instance)) else { continue };
            seq.in_flight = None;
            seq.last_active = now;
            if self.policy.iterative && !seq.ending && seq.queue.is_empty() {
                // Its request is done (not handed back to run again): the sequence ends, as
                // Triton ends an iterative sequence when the backend releases its request.
                ended.push(id.clone());
            } else if seq.ending {
                while seq.queue.front().is_some_and(|p| !p.request.sequence.as_ref().is_some_and(|f| f.start)) {
                    let p = seq.queue.pop_front().expect("checked");
                    let e = Error::invalid(format!(
                        "inference request for sequence {id} to model '{}' {NO_START}",
                        self.model
                    ));
                    failed.push((p, e));
                }
                if seq.queue.is_empty() {
                    ended.push(id.clone());
                }
            }
            self.reindex(&id);
        }
        self.queued -= failed.len();
        for id in ended {
            self.release(&id);
        }
        self.evict_over_cap();
        self.publish();
        failed
    }

    /// The instance died: its running requests were answered with an error and changed no
    /// state, so its sequences go on from their last state (an END that failed can be sent
    /// again).
    pub fn instance_down(&mut self, instance: usize) {
        let ran = self.running.get_mut(instance).map(std::mem::take).unwrap_or_default();
        for id in ran {
            let Some(seq) = self.sequences.get_mut(&id).filter(|s| s.in_flight == Some(instance)) else { continue };
            seq.in_flight = None;
            seq.ending = false;
            self.reindex(&id);
        }
    }

    pub fn drain_all(&mut self) -> Vec<Pending> {
        let mut all = Vec::new();
        for s in self.sequences.values_mut() {
            all.extend(s.queue.drain(..));
        }
        let waiting: Vec<CorrelationId> =
            self.sequences.iter().filter(|(_, s)| s.waiting).map(|(id, _)| id.clone()).collect();
        for id in waiting {
            self.forget(&id);
        }
        self.backlog.clear();
        let ids: Vec<CorrelationId> = self.sequences.keys().cloned().collect();
        for id in ids {
            self.reindex(&id);
        }
        all.extend(self.orphans.drain(..).map(|(_, p, _)| p));
        self.queued = 0;
        self.publish();
        all
    }
}

fn compatible(a: &Pending, b: &Pending) -> bool {
    a.request.inputs.len() == b.request.inputs.len()
        && a.request.inputs.iter().all(|ta| {
            b.request
                .input(&ta.name)
                .is_some_and(|tb| ta.datatype == tb.datatype && ta.shape.get(1..) == tb.shape.get(1..))
        })
}
