//! The sequence batcher: Triton's `sequence_batching`, driven by the scheduler actor like the
//! dynamic batcher (the two together are the sequence actor, `scheduler::SequenceActor`). Each correlation ID
//! gets a slot (for its life with the `direct` strategy, on one instance); its requests run one at a time, in
//! order; the control inputs (START, END, READY, CORRID) and the implicit state tensors are added to each
//! request here, and the state the model returns is kept by the engine — in `StateStore`, not in the backend
//! — so a restarted instance carries its sequences on with their state intact.
//!
//! Where a sequence may run is in `slots`; its state between requests in `state`; the inputs
//! added to each of its requests in `inputs`.

mod inputs;
mod slots;
pub(crate) mod state;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slots::Slots;
pub use state::{SequenceTicket, StateStore};

use crate::clock::SharedClock;
use crate::error::Error;
use crate::figures::ModelFigures;
use crate::policy::{ControlKind, ModelPolicy, SequencePolicy, SequenceStrategy};
use crate::protocol::{Next, Pending, Refused};
use crate::queue::Queue;
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
}

#[derive(Debug)]
pub struct SequenceBatcher {
    model: String,
    policy: SequencePolicy,
    batched: bool,
    max_batch: usize,
    /// Sequences holding a slot (direct) or a candidate place (oldest).
    active: HashMap<CorrelationId, Sequence>,
    /// Sequences waiting for a slot, in arrival order.
    backlog: VecDeque<(CorrelationId, Sequence)>,
    slots: Slots,
    queued: usize,
    capacity: usize,
    next_order: u64,
    /// Requests of unknown sequences without START, held until their START comes or their
    /// grace ends: (id, request, deadline), in order of arrival (and so of deadline).
    orphans: VecDeque<(CorrelationId, Pending, Instant)>,
    store: StateStore,
    figures: Arc<ModelFigures>,
    /// For the time a request arrives or a sequence gets its slot.
    clock: SharedClock,
}

impl SequenceBatcher {
    pub fn new(
        policy: &ModelPolicy,
        sequence: &SequencePolicy,
        figures: Arc<ModelFigures>,
        clock: SharedClock,
    ) -> Self {
        SequenceBatcher {
            model: policy.name.clone(),
            policy: sequence.clone(),
            batched: policy.batches(),
            max_batch: policy.max_batch_size.max(1),
            active: HashMap::new(),
            backlog: VecDeque::new(),
            slots: Slots::new(policy, &sequence.strategy),
            queued: 0,
            capacity: policy.queue_capacity,
            next_order: 0,
            orphans: VecDeque::new(),
            store: StateStore::new(figures.clone()),
            figures,
            clock,
        }
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
        self.figures.sequence.publish(self.active.len(), self.backlog.len(), self.slots.used());
    }

    fn free_slot(&self) -> Option<(usize, usize)> {
        self.slots.free(self.active.len())
    }

    /// Queues a request of a sequence, or hands it back with the reason it cannot be queued.
    pub fn push(&mut self, p: Pending) -> Result<(), Refused> {
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
        if let Some(seq) = self.active.get_mut(&id) {
            seq.queue.push_back(p);
            seq.last_active = now;
        } else if let Some((_, seq)) = self.backlog.iter_mut().find(|(b, _)| *b == id) {
            seq.queue.push_back(p);
        } else if !flags.start {
            if self.policy.start_grace.is_zero() {
                return Err(Box::new((p, self.no_start(&id))));
            }
            // Its START may be on its way: hold it for the grace period (see `adopt_orphans`).
            self.orphans.push_back((id, p, now + self.policy.start_grace));
        } else {
            let order = self.next_order;
            self.next_order += 1;
            let mut seq = Sequence {
                queue: VecDeque::from([p]),
                in_flight: None,
                slot: None,
                ending: false,
                last_active: now,
                order,
            };
            match self.free_slot() {
                Some(slot) => self.activate(id.clone(), seq, slot),
                None if self.backlog.len() >= self.policy.max_backlog => {
                    let p = seq.queue.pop_front().expect("the new sequence's request");
                    let e = Error::unavailable(format!(
                        "model '{}' has no free sequence slot and its backlog is full ({} sequences waiting)",
                        self.model,
                        self.backlog.len()
                    ));
                    return Err(Box::new((p, e)));
                }
                None => self.backlog.push_back((id.clone(), seq)),
            }
            self.adopt_orphans(&id);
        }
        self.queued += 1;
        self.publish();
        Ok(())
    }

    fn no_start(&self, id: &CorrelationId) -> Error {
        Error::invalid(format!(
            "inference request for sequence {id} to model '{}' must specify the START flag on the first request of the sequence",
            self.model
        ))
    }

    /// A sequence just started: the requests of its id that arrived before its START (held as
    /// orphans) follow the START, in their order of arrival.
    fn adopt_orphans(&mut self, id: &CorrelationId) {
        if !self.orphans.iter().any(|(o, _, _)| o == id) {
            return;
        }
        let (mine, rest): (VecDeque<_>, VecDeque<_>) = self.orphans.drain(..).partition(|(o, _, _)| o == id);
        self.orphans = rest;
        let queue = match self.active.get_mut(id) {
            Some(seq) => &mut seq.queue,
            None => &mut self.backlog.iter_mut().find(|(b, _)| b == id).expect("just started").1.queue,
        };
        for (_, p, _) in mine {
            queue.push_back(p);
        }
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
        match id.and_then(|id| self.active.get_mut(&id)) {
            Some(seq) => {
                seq.queue.push_front(p);
                self.queued += 1;
                Ok(())
            }
            None => Err(Box::new((p, Error::unavailable("the sequence's instance was lost")))),
        }
    }

    fn activate(&mut self, id: CorrelationId, mut seq: Sequence, slot: (usize, usize)) {
        seq.slot = self.slots.take(slot, &id);
        seq.last_active = self.clock.now();
        self.active.insert(id, seq);
    }

    /// Frees a sequence's slot and state, and gives the slot to the oldest waiting sequence.
    fn release(&mut self, id: &CorrelationId) {
        if let Some(seq) = self.active.remove(id) {
            if let Some(slot) = seq.slot {
                self.slots.give_back(slot);
            }
        }
        self.store.remove(id);
        while let Some(slot) = self.free_slot() {
            let Some((id, seq)) = self.backlog.pop_front() else { break };
            self.activate(id, seq, slot);
        }
    }

    /// The next batch for the free instance `instance`.
    pub fn next(&mut self, instance: usize, now: Instant) -> Next {
        let mut ready: Vec<(u64, CorrelationId, Instant)> = self
            .active
            .iter()
            .filter(|(_, s)| s.in_flight.is_none() && !s.queue.is_empty())
            .filter(|(_, s)| !self.direct() || s.slot.map(|(i, _)| i) == Some(instance))
            .map(|(id, s)| (s.order, id.clone(), s.queue.front().map(|p| p.enqueued).unwrap_or(now)))
            .collect();
        if ready.is_empty() {
            return Next::Empty;
        }
        ready.sort_by_key(|(order, _, at)| (*at, *order));
        if let SequenceStrategy::Oldest { preferred_batch_sizes, max_queue_delay, .. } = &self.policy.strategy {
            let n = ready.len().min(self.max_batch);
            let full = n >= self.max_batch || preferred_batch_sizes.contains(&n);
            let deadline = ready[0].2 + *max_queue_delay;
            if !full && !max_queue_delay.is_zero() && now < deadline {
                return Next::WaitUntil(deadline);
            }
        }
        // Requests of one batch must merge: same inputs with the same shapes past the batch dim.
        let mut batch: Vec<Pending> = Vec::new();
        for (_, id, _) in ready {
            if batch.len() >= self.max_batch {
                break;
            }
            let seq = self.active.get_mut(&id).expect("ready sequences are active");
            let mut p = seq.queue.pop_front().expect("ready sequences have a request");
            let flags = p.request.sequence.clone().expect("sequence requests carry flags");
            inputs::prepare(&self.policy, self.batched, &self.store, &mut p, &id, flags.start, flags.end);
            let seq = self.active.get_mut(&id).expect("still active");
            if let Some(first) = batch.first() {
                if !self.batched || !compatible(first, &p) {
                    seq.queue.push_front(p);
                    continue;
                }
            }
            seq.in_flight = Some(instance);
            seq.last_active = now;
            if flags.start {
                seq.ending = false;
            }
            if flags.end {
                seq.ending = true;
            }
            self.queued -= 1;
            batch.push(p);
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
        for (id, seq) in self.active.iter_mut().filter(|(_, s)| s.in_flight == Some(instance)) {
            seq.in_flight = None;
            seq.last_active = now;
            if seq.ending {
                while seq.queue.front().is_some_and(|p| !p.request.sequence.as_ref().is_some_and(|f| f.start)) {
                    let p = seq.queue.pop_front().expect("checked");
                    let e = Error::invalid(format!(
                        "inference request for sequence {id} to model '{}' must specify the START flag on the first request of the sequence",
                        self.model
                    ));
                    failed.push((p, e));
                }
                if seq.queue.is_empty() {
                    ended.push(id.clone());
                }
            }
        }
        self.queued -= failed.len();
        for id in ended {
            self.release(&id);
        }
        self.publish();
        failed
    }

    /// The instance died: its running requests were answered with an error and changed no
    /// state, so its sequences go on from their last state (an END that failed can be sent
    /// again).
    pub fn instance_down(&mut self, instance: usize) {
        for seq in self.active.values_mut().filter(|s| s.in_flight == Some(instance)) {
            seq.in_flight = None;
            seq.ending = false;
        }
    }

    /// Frees the slots of sequences idle past `max_sequence_idle_microseconds`.
    pub fn expire_idle(&mut self, now: Instant) {
        if self.policy.max_idle.is_zero() {
            return;
        }
        let idle: Vec<CorrelationId> = self
            .active
            .iter()
            .filter(|(_, s)| {
                s.in_flight.is_none() && s.queue.is_empty() && now.duration_since(s.last_active) >= self.policy.max_idle
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            tracing::debug!("sequence {id} of model '{}' idle: its slot is freed", self.model);
            self.figures.sequence.idle_release();
            self.release(&id);
        }
        self.publish();
    }

    /// Removes queued requests whose client has gone.
    pub fn take_cancelled(&mut self) -> Vec<Pending> {
        let mut gone = Vec::new();
        let queues =
            self.active.values_mut().map(|s| &mut s.queue).chain(self.backlog.iter_mut().map(|(_, s)| &mut s.queue));
        for q in queues {
            let (g, keep): (VecDeque<Pending>, VecDeque<Pending>) = q.drain(..).partition(|p| p.reply.is_closed());
            *q = keep;
            gone.extend(g);
        }
        let (g, keep): (VecDeque<_>, VecDeque<_>) = self.orphans.drain(..).partition(|(_, p, _)| p.reply.is_closed());
        self.orphans = keep;
        gone.extend(g.into_iter().map(|(_, p, _)| p));
        self.queued -= gone.len();
        // A backlogged sequence with nothing left to run is dropped.
        self.backlog.retain(|(_, s)| !s.queue.is_empty());
        self.publish();
        gone
    }

    pub fn drain_all(&mut self) -> Vec<Pending> {
        let mut all = Vec::new();
        for s in self.active.values_mut() {
            all.extend(s.queue.drain(..));
        }
        for (_, mut s) in self.backlog.drain(..) {
            all.extend(s.queue.drain(..));
        }
        all.extend(self.orphans.drain(..).map(|(_, p, _)| p));
        self.queued = 0;
        self.publish();
        all
    }
}

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

fn compatible(a: &Pending, b: &Pending) -> bool {
    a.request.inputs.len() == b.request.inputs.len()
        && a.request.inputs.iter().all(|ta| {
            b.request
                .input(&ta.name)
                .is_some_and(|tb| ta.datatype == tb.datatype && ta.shape.get(1..) == tb.shape.get(1..))
        })
}
