//! The sequence actor's state store: each sequence's implicit state between its requests, kept
//! by the engine (not the backend) so a restarted instance carries its sequences on; the
//! ticket with which the instance hands a request's state outputs back; and the control and
//! state inputs added to each request of a sequence.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::figures::ModelFigures;
use crate::instance::Pending;
use crate::policy::{ControlKind, InitialState, SequencePolicy};
use crate::request::{CorrelationId, RequestedOutput};
use crate::tensor::{element_count, serialize_bytes, DataType, Tensor};

/// Each sequence's implicit state between its requests: written by the instance thread that
/// ran the request (before it answers), read when the next request is dispatched, dropped when
/// the sequence ends. Keeps the figure of the bytes it holds.
#[derive(Debug, Clone)]
pub struct StateStore {
    states: Arc<Mutex<HashMap<CorrelationId, Vec<Tensor>>>>,
    figures: Arc<ModelFigures>,
}

fn bytes_of(state: &[Tensor]) -> u64 {
    state.iter().map(|t| t.data.len() as u64).sum()
}

impl StateStore {
    pub fn new(figures: Arc<ModelFigures>) -> Self {
        StateStore { states: Arc::default(), figures }
    }

    /// The sequence's last state, if it has one.
    pub fn get(&self, id: &CorrelationId) -> Option<Vec<Tensor>> {
        self.states.lock().get(id).cloned()
    }

    /// Replaces the sequence's state.
    pub fn put(&self, id: CorrelationId, state: Vec<Tensor>) {
        let new = bytes_of(&state);
        let old = self.states.lock().insert(id, state).map(|s| bytes_of(&s)).unwrap_or(0);
        self.figures.seq_state_bytes.fetch_add(new, Relaxed);
        self.figures.seq_state_bytes.fetch_sub(old, Relaxed);
    }

    /// Drops the sequence's state (it ended or gave its slot up).
    pub fn remove(&self, id: &CorrelationId) {
        if let Some(state) = self.states.lock().remove(id) {
            self.figures.seq_state_bytes.fetch_sub(bytes_of(&state), Relaxed);
        }
    }
}

/// What the instance does with a sequence request's outputs.
#[derive(Debug, Clone)]
pub struct SequenceTicket {
    pub id: CorrelationId,
    /// (state output name, whether the client asked for it too).
    pub state_outputs: Vec<(String, bool)>,
    pub batched: bool,
    pub store: StateStore,
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
        self.store.put(self.id.clone(), next);
        outputs.retain(|t| self.state_outputs.iter().all(|(name, wanted)| &t.name != name || *wanted));
    }
}

/// Adds the control inputs and the implicit state to a request of sequence `id`, and asks for
/// the state outputs (the ticket tells the instance where they go).
pub(super) fn prepare(
    policy: &SequencePolicy,
    batched: bool,
    store: &StateStore,
    p: &mut Pending,
    id: &CorrelationId,
    start: bool,
    end: bool,
) {
    for c in &policy.controls {
        let t = match c.kind {
            ControlKind::Start => {
                flag_tensor(&c.input, c.datatype, if start { &c.true_value } else { &c.false_value }, batched)
            }
            ControlKind::End => {
                flag_tensor(&c.input, c.datatype, if end { &c.true_value } else { &c.false_value }, batched)
            }
            ControlKind::Ready => flag_tensor(&c.input, c.datatype, &c.true_value, batched),
            ControlKind::CorrId => {
                let data = match (id, c.datatype) {
                    (CorrelationId::U64(v), DataType::U64) => Bytes::copy_from_slice(&v.to_le_bytes()),
                    (id, _) => serialize_bytes([id.to_string().into_bytes()]),
                };
                let shape = if batched { vec![1, 1] } else { vec![1] };
                Tensor::new(c.input.clone(), c.datatype, shape, data)
            }
        };
        p.request.inputs.retain(|x| x.name != t.name);
        p.request.inputs.push(t);
    }
    if policy.states.is_empty() {
        return;
    }
    let stored = if start { None } else { store.get(id) };
    let mut state_outputs = Vec::new();
    for (k, s) in policy.states.iter().enumerate() {
        let (dims, data) = match stored.as_ref().and_then(|v| v.get(k)) {
            Some(t) => (t.shape.clone(), t.data.clone()),
            None => initial(s.datatype, &s.dims, &s.initial),
        };
        let shape = if batched { std::iter::once(1).chain(dims).collect() } else { dims };
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
    p.sequence = Some(SequenceTicket { id: id.clone(), state_outputs, batched, store: store.clone() });
}

fn flag_tensor(name: &str, datatype: DataType, value: &[u8], batched: bool) -> Tensor {
    let shape = if batched { vec![1, 1] } else { vec![1] };
    Tensor::new(name, datatype, shape, Bytes::copy_from_slice(value))
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
