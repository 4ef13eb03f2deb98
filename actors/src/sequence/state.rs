//! The sequence actor's state store: each sequence's implicit state between its requests, kept
//! by the engine (not the backend) so a restarted instance carries its sequences on, and the
//! ticket with which the instance hands a request's state outputs back.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::figures::ModelFigures;
use crate::request::CorrelationId;
use crate::tensor::Tensor;

/// Each sequence's implicit state between its requests: written by the instance thread that
/// ran the request (before it answers), read when the next request is dispatched, dropped when
/// the sequence ends. Keeps the figure of the bytes it holds.
#[derive(Debug, Clone)]
pub struct StateStore {
    states: Arc<Mutex<States>>,
    figures: Arc<ModelFigures>,
}

#[derive(Debug, Default)]
struct States {
    by_id: HashMap<CorrelationId, Vec<Tensor>>,
    /// The bytes of every state in `by_id`.
    bytes: u64,
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
        self.states.lock().by_id.get(id).cloned()
    }

    /// Replaces the sequence's state.
    pub fn put(&self, id: CorrelationId, state: Vec<Tensor>) {
        let new = bytes_of(&state);
        let mut states = self.states.lock();
        let old = states.by_id.insert(id, state).map(|s| bytes_of(&s)).unwrap_or(0);
        states.bytes = states.bytes - old + new;
        self.figures.sequence.state_bytes(new, old);
    }

    /// Drops the sequence's state (it ended or gave its slot up); returns the bytes it held.
    pub fn remove(&self, id: &CorrelationId) -> u64 {
        let mut states = self.states.lock();
        let Some(state) = states.by_id.remove(id) else { return 0 };
        let bytes = bytes_of(&state);
        states.bytes -= bytes;
        self.figures.sequence.state_bytes(0, bytes);
        bytes
    }

    /// The bytes of state held by every sequence together.
    pub fn bytes(&self) -> u64 {
        self.states.lock().bytes
    }

    /// The bytes of state held by sequence `id`.
    pub fn bytes_of(&self, id: &CorrelationId) -> u64 {
        self.states.lock().by_id.get(id).map_or(0, |s| bytes_of(s))
    }

    /// The bytes of state held by each of `ids`, in their order, under one lock.
    pub fn bytes_of_each<'a>(&self, ids: impl Iterator<Item = &'a CorrelationId>) -> Vec<u64> {
        let states = self.states.lock();
        ids.map(|id| states.by_id.get(id).map_or(0, |s| bytes_of(s))).collect()
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
