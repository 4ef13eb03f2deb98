//! The sequence batcher: Triton's `sequence_batching`, driven by the scheduler actor like the
//! dynamic batcher. Each correlation ID gets a slot (for its life with the `direct` strategy,
//! on one instance); its requests run one at a time, in order; the control inputs (START, END,
//! READY, CORRID) and the implicit state tensors are added to each request here, and the state
//! the model returns is kept by the engine — in `StateStore`, not in the backend — so a
//! restarted instance carries its sequences on with their state intact.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::batcher::Next;
use crate::error::Error;
use crate::figures::ModelFigures;
use crate::instance::Pending;
use crate::policy::{ControlKind, InitialState, ModelPolicy, SequencePolicy, SequenceStrategy};
use crate::request::{CorrelationId, RequestedOutput};
use crate::tensor::{element_count, serialize_bytes, DataType, Tensor};

/// Each sequence's implicit state between its requests: written by the instance thread that
/// ran the request (before it answers), read when the next request is dispatched.
pub type StateStore = Arc<Mutex<HashMap<CorrelationId, Vec<Tensor>>>>;

/// What the instance does with a sequence request's outputs.
#[derive(Debug, Clone)]
pub struct SequenceTicket {
    pub id: CorrelationId,
    /// (state output name, whether the client asked for it too).
    pub state_outputs: Vec<(String, bool)>,
    pub batched: bool,
    pub store: StateStore,
    pub figures: Arc<ModelFigures>,
}

impl SequenceTicket {
    /// Keeps the state outputs as the sequence's next state and removes from `outputs` those
    /// the client did not ask for. A request that returned no state keeps the old one.
    pub fn absorb(&self, outputs: &mut Vec<Tensor>) {
        if self.state_outputs.is_empty() {
            return;
        }
        let mut next = Vec::with_capacity(self.state_outputs.len());
        for (name, _) in &self.state_outputs {
            match outputs.iter().find(|t| &t.name == name) {
                Some(t) => {
                    let shape = if self.batched { t.shape.get(1..).unwrap_or(&[]).to_vec() } else { t.shape.clone() };
                    next.push(Tensor::new(t.name.clone(), t.datatype, shape, t.data.clone()));
                }
                None => return,
            }
        }
        let mut store = self.store.lock();
        let old: usize = store.get(&self.id).map(|v| v.iter().map(|t| t.data.len()).sum()).unwrap_or(0);
        let new: usize = next.iter().map(|t| t.data.len()).sum();
        store.insert(self.id.clone(), next);
        drop(store);
        self.figures.seq_state_bytes.fetch_add(new as u64, Relaxed);
        self.figures.seq_state_bytes.fetch_sub(old as u64, Relaxed);
        outputs.retain(|t| self.state_outputs.iter().all(|(name, wanted)| &t.name != name || *wanted));
    }
}

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
    /// Direct strategy: which sequence holds each slot of each instance.
    slots: Vec<Vec<Option<CorrelationId>>>,
    /// Oldest strategy: how many sequences may hold a candidate place.
    candidates: usize,
    queued: usize,
    capacity: usize,
    next_order: u64,
    /// Requests of unknown sequences without START, held until their START comes or their
    /// grace ends: (id, request, deadline), in order of arrival (and so of deadline).
    orphans: VecDeque<(CorrelationId, Pending, Instant)>,
    store: StateStore,
    figures: Arc<ModelFigures>,
}

fn flag_tensor(name: &str, datatype: DataType, value: &[u8], batched: bool) -> Tensor {
    let shape = if batched { vec![1, 1] } else { vec![1] };
    Tensor::new(name, datatype, shape, Bytes::copy_from_slice(value))
}

impl SequenceBatcher {
    pub fn new(policy: &ModelPolicy, sequence: &SequencePolicy, figures: Arc<ModelFigures>) -> Self {
        let per_instance = policy.max_batch_size.max(1);
        let instances = policy.instances.len().max(1);
        let candidates = match &sequence.strategy {
            SequenceStrategy::Oldest { max_candidate_sequences, .. } if *max_candidate_sequences > 0 => {
                *max_candidate_sequences
            }
            _ => per_instance * instances,
        };
        SequenceBatcher {
            model: policy.name.clone(),
            policy: sequence.clone(),
            batched: policy.batches(),
            max_batch: per_instance,
            active: HashMap::new(),
            backlog: VecDeque::new(),
            slots: vec![vec![None; per_instance]; instances],
            candidates,
            queued: 0,
            capacity: policy.queue_capacity,
            next_order: 0,
            orphans: VecDeque::new(),
            store: Arc::new(Mutex::new(HashMap::new())),
            figures,
        }
    }

    fn direct(&self) -> bool {
        matches!(self.policy.strategy, SequenceStrategy::Direct)
    }

    pub fn len(&self) -> usize {
        self.queued
    }

    pub fn is_empty(&self) -> bool {
        self.queued == 0
    }

    fn publish(&self) {
        self.figures.seq_active.store(self.active.len() as u64, Relaxed);
        self.figures.seq_backlog.store(self.backlog.len() as u64, Relaxed);
        for (i, slots) in self.slots.iter().enumerate() {
            if let Some(f) = self.figures.instances.get(i) {
                f.seq_slots_used.store(slots.iter().filter(|s| s.is_some()).count() as u64, Relaxed);
            }
        }
    }

    /// A free slot: (instance, slot) for direct; `Some((0, 0))` when a candidate place is free
    /// for oldest.
    fn free_slot(&self) -> Option<(usize, usize)> {
        if self.direct() {
            // Spread sequences over instances: the instance with the most free slots first.
            let (i, slots) = self
                .slots
                .iter()
                .enumerate()
                .max_by_key(|(i, s)| (s.iter().filter(|x| x.is_none()).count(), usize::MAX - i))?;
            let j = slots.iter().position(Option::is_none)?;
            Some((i, j))
        } else {
            (self.active.len() < self.candidates).then_some((0, 0))
        }
    }

    /// Queues a request of a sequence, or hands it back with the reason it cannot be queued.
    pub fn push(&mut self, p: Pending) -> Result<(), (Pending, Error)> {
        let Some(flags) = p.request.sequence.clone() else {
            let e = Error::invalid(format!(
                "inference request to model '{}' must specify a non-zero or non-empty correlation ID",
                self.model
            ));
            return Err((p, e));
        };
        let id = flags.id.clone();
        if id == CorrelationId::U64(0) || id == CorrelationId::Str(String::new()) {
            let e = Error::invalid(format!(
                "inference request to model '{}' must specify a non-zero or non-empty correlation ID",
                self.model
            ));
            return Err((p, e));
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
                return Err((p, e));
            }
        }
        if self.queued >= self.capacity {
            return Err((p, Error::unavailable("Exceeds maximum queue size")));
        }
        let now = Instant::now();
        if let Some(seq) = self.active.get_mut(&id) {
            seq.queue.push_back(p);
            seq.last_active = now;
        } else if let Some((_, seq)) = self.backlog.iter_mut().find(|(b, _)| *b == id) {
            seq.queue.push_back(p);
        } else if !flags.start {
            if self.policy.start_grace.is_zero() {
                return Err((p, self.no_start(&id)));
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
                    return Err((p, e));
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
    pub fn requeue(&mut self, p: Pending) -> Result<(), (Pending, Error)> {
        let id = p.request.sequence.as_ref().map(|f| f.id.clone());
        match id.and_then(|id| self.active.get_mut(&id)) {
            Some(seq) => {
                seq.queue.push_front(p);
                self.queued += 1;
                Ok(())
            }
            None => Err((p, Error::unavailable("the sequence's instance was lost"))),
        }
    }

    fn activate(&mut self, id: CorrelationId, mut seq: Sequence, slot: (usize, usize)) {
        if self.direct() {
            self.slots[slot.0][slot.1] = Some(id.clone());
            seq.slot = Some(slot);
        }
        seq.last_active = Instant::now();
        self.active.insert(id, seq);
    }

    /// Frees a sequence's slot and state, and gives the slot to the oldest waiting sequence.
    fn release(&mut self, id: &CorrelationId) {
        if let Some(seq) = self.active.remove(id) {
            if let Some((i, j)) = seq.slot {
                self.slots[i][j] = None;
            }
        }
        if let Some(state) = self.store.lock().remove(id) {
            let bytes: usize = state.iter().map(|t| t.data.len()).sum();
            self.figures.seq_state_bytes.fetch_sub(bytes as u64, Relaxed);
        }
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
            self.prepare(&mut p, &id, flags.start, flags.end);
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

    /// Adds the control inputs and the implicit state, and asks for the state outputs.
    fn prepare(&self, p: &mut Pending, id: &CorrelationId, start: bool, end: bool) {
        for c in &self.policy.controls {
            let t = match c.kind {
                ControlKind::Start => {
                    flag_tensor(&c.input, c.datatype, if start { &c.true_value } else { &c.false_value }, self.batched)
                }
                ControlKind::End => {
                    flag_tensor(&c.input, c.datatype, if end { &c.true_value } else { &c.false_value }, self.batched)
                }
                ControlKind::Ready => flag_tensor(&c.input, c.datatype, &c.true_value, self.batched),
                ControlKind::CorrId => {
                    let data = match (id, c.datatype) {
                        (CorrelationId::U64(v), DataType::U64) => Bytes::copy_from_slice(&v.to_le_bytes()),
                        (id, _) => serialize_bytes([id.to_string().into_bytes()]),
                    };
                    let shape = if self.batched { vec![1, 1] } else { vec![1] };
                    Tensor::new(c.input.clone(), c.datatype, shape, data)
                }
            };
            p.request.inputs.retain(|x| x.name != t.name);
            p.request.inputs.push(t);
        }
        if self.policy.states.is_empty() {
            return;
        }
        let stored = if start { None } else { self.store.lock().get(id).cloned() };
        let mut state_outputs = Vec::new();
        for (k, s) in self.policy.states.iter().enumerate() {
            let (dims, data) = match stored.as_ref().and_then(|v| v.get(k)) {
                Some(t) => (t.shape.clone(), t.data.clone()),
                None => initial(s.datatype, &s.dims, &s.initial),
            };
            let shape = if self.batched { std::iter::once(1).chain(dims).collect() } else { dims };
            p.request.inputs.retain(|x| x.name != s.input);
            p.request.inputs.push(Tensor::new(s.input.clone(), s.datatype, shape, data));
            // Whether the client itself asked for the state output (a request prepared before,
            // then put back, keeps its first answer).
            let wanted = match &p.sequence {
                Some(t) => t.state_outputs.get(k).is_some_and(|(_, w)| *w),
                None => p.request.outputs.iter().any(|o| o.name == s.output),
            };
            if !p.request.outputs.is_empty() && !p.request.outputs.iter().any(|o| o.name == s.output) {
                p.request.outputs.push(RequestedOutput { name: s.output.clone(), class_count: 0 });
            }
            state_outputs.push((s.output.clone(), wanted));
        }
        p.sequence = Some(SequenceTicket {
            id: id.clone(),
            state_outputs,
            batched: self.batched,
            store: self.store.clone(),
            figures: self.figures.clone(),
        });
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
            self.figures.seq_idle_releases.fetch_add(1, Relaxed);
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

fn compatible(a: &Pending, b: &Pending) -> bool {
    a.request.inputs.len() == b.request.inputs.len()
        && a.request.inputs.iter().all(|ta| {
            b.request
                .input(&ta.name)
                .is_some_and(|tb| ta.datatype == tb.datatype && ta.shape.get(1..) == tb.shape.get(1..))
        })
}

/// A state's initial contents and dims.
fn initial(datatype: DataType, dims: &[i64], init: &InitialState) -> (Vec<i64>, Bytes) {
    let dims: Vec<i64> = dims.iter().map(|d| (*d).max(0)).collect();
    match init {
        InitialState::Data(data) => (dims, data.clone()),
        InitialState::Zero => {
            let n = element_count(&dims).unwrap_or(0);
            let data = match datatype.element_size() {
                Some(size) => Bytes::from(vec![0u8; n * size]),
                None => serialize_bytes((0..n).map(|_| Vec::<u8>::new())),
            };
            (dims, data)
        }
    }
}
