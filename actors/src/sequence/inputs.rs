//! The inputs the sequence actor adds to each request of a sequence: the control inputs
//! (START, END, READY, CORRID) and the implicit state, from the state store or its initial
//! value.

use bytes::Bytes;

use super::state::{SequenceTicket, StateStore};
use crate::policy::{ControlKind, InitialState, SequencePolicy};
use crate::protocol::Pending;
use crate::request::{CorrelationId, RequestedOutput};
use crate::tensor::{element_count, serialize_bytes, DataType, Tensor};

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
