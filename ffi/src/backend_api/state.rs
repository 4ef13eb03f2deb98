//! `TRITONBACKEND_State`: implicit sequence state (`sequence_batching { state [...] }`). The
//! engine's sequence batcher hands each request its state as an ordinary input (the state's
//! `input_name`); the backend writes the next state with `StateNew` (named by `output_name`),
//! `StateBuffer` and `StateUpdate`. An updated state travels with the request's next response,
//! where the engine keeps it as the sequence's state for its next request (and gives it to the
//! client only if asked for by name), as Triton does.

use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::abi::*;
use super::boundary::{borrow_mut, export, text, write};
use super::buffer::BufferAttributes;
use super::error::Error;
use super::host::HostTensor;
use super::request::Request;

/// One state object as the backend sees it behind `TRITONBACKEND_State*`.
pub struct State {
    name: String,
    datatype: DataType,
    shape: Vec<i64>,
    buffer: Vec<u8>,
    attributes: BufferAttributes,
    updates: Arc<Mutex<Vec<HostTensor>>>,
}

/// A request's states: the names its model configures, the objects handed to the backend
/// (they live as long as the request's responses can be sent) and the updates not yet sent.
#[derive(Default)]
pub struct States {
    model: String,
    /// The configured `output_name`s; `None` for a model without a state configuration.
    names: Option<Vec<String>>,
    /// Boxed: the backend holds pointers to them while more are added.
    #[allow(clippy::vec_box)]
    objects: Mutex<Vec<Box<State>>>,
    updates: Arc<Mutex<Vec<HostTensor>>>,
}

impl States {
    pub(crate) fn new(model: &str, names: Option<Vec<String>>) -> Self {
        States { model: model.to_string(), names, ..Default::default() }
    }

    /// A new state object for `name`, with Triton's errors for a model without states and for
    /// a name that is not one of its states.
    fn create(&self, name: &str, datatype: DataType, shape: Vec<i64>) -> Result<*mut State, Error> {
        let Some(names) = &self.names else {
            return Err(Error::new(
                ERROR_INVALID_ARG,
                format!("unable to add state '{name}'. State configuration is missing for model '{}'.", self.model),
            ));
        };
        if !names.iter().any(|n| n == name) {
            return Err(Error::new(ERROR_INVALID_ARG, format!("state '{name}' is not a valid state name.")));
        }
        let mut state = Box::new(State {
            name: name.to_string(),
            datatype,
            shape,
            buffer: Vec::new(),
            attributes: BufferAttributes::default(),
            updates: self.updates.clone(),
        });
        let ptr: *mut State = &mut *state;
        self.objects.lock().unwrap_or_else(|e| e.into_inner()).push(state);
        Ok(ptr)
    }

    /// The states updated since the last response, for the next one.
    pub(crate) fn take_updates(&self) -> Vec<HostTensor> {
        std::mem::take(&mut *self.updates.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

export! {
    fn TRITONBACKEND_StateNew(state: *mut *mut State, request: *mut Request, name: *const c_char, datatype: DataType, shape: *const i64, dims_count: u32) {
        // SAFETY: a live request the backend has not released, and a C string.
        let (r, name) = unsafe { (super::boundary::borrow(request, "request")?, text(name, "name")?) };
        let shape = if dims_count == 0 {
            Vec::new()
        } else if shape.is_null() {
            return Err(Error::new(ERROR_INVALID_ARG, "shape is null"));
        } else {
            // SAFETY: the header's contract: `shape` holds `dims_count` values.
            unsafe { std::slice::from_raw_parts(shape, dims_count as usize) }.to_vec()
        };
        let new = r.sink.states().create(name, datatype, shape)?;
        // SAFETY: the caller's out-parameter; the state lives as long as the request's sink.
        unsafe { write(state, new, "state") }
    }
}

export! {
    /// The state's buffer, always in CPU memory (whatever memory type was asked).
    fn TRITONBACKEND_StateBuffer(state: *mut State, buffer: *mut *mut c_void, buffer_byte_size: u64, memory_type: *mut MemoryType, memory_type_id: *mut i64) {
        // SAFETY: a live state the backend does not use concurrently.
        let s = unsafe { borrow_mut(state, "state")? };
        s.buffer.resize(buffer_byte_size as usize, 0);
        s.attributes.set_size(s.buffer.len());
        // SAFETY: the caller's out-parameters; the buffer lives as long as the state.
        unsafe {
            write(buffer, s.buffer.as_mut_ptr().cast(), "buffer")?;
            write(memory_type, MEMORY_CPU, "memory_type")?;
            write(memory_type_id, 0, "memory_type_id")
        }
    }
}

export! {
    fn TRITONBACKEND_StateBufferAttributes(state: *mut State, buffer_attributes: *mut *mut BufferAttributes) {
        // SAFETY: a live state and the caller's out-parameter.
        unsafe {
            let s = borrow_mut(state, "state")?;
            write(buffer_attributes, &mut s.attributes as *mut BufferAttributes, "buffer_attributes")
        }
    }
}

export! {
    /// Makes the state's contents the sequence's next state: it goes with the request's next
    /// response (a later update of the same state replaces it).
    fn TRITONBACKEND_StateUpdate(state: *mut State) {
        // SAFETY: a live state the backend does not use concurrently.
        let s = unsafe { borrow_mut(state, "state")? };
        let tensor = HostTensor {
            name: s.name.clone(),
            datatype: data_type_name(s.datatype).to_string(),
            shape: s.shape.clone(),
            data: Bytes::copy_from_slice(&s.buffer),
        };
        let mut updates = s.updates.lock().unwrap_or_else(|e| e.into_inner());
        updates.retain(|t| t.name != tensor.name);
        updates.push(tensor);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_checked_against_the_config_and_updates_replace_each_other() {
        let none = States::new("m", None);
        let e = none.create("S", TYPE_BYTES, vec![]).unwrap_err();
        assert_eq!(e.message(), "unable to add state 'S'. State configuration is missing for model 'm'.");
        let states = States::new("m", Some(vec!["S_OUT".into()]));
        let e = states.create("X", TYPE_BYTES, vec![]).unwrap_err();
        assert_eq!((e.code, e.message()), (ERROR_INVALID_ARG, "state 'X' is not a valid state name."));
        let fp32 = data_type_of("FP32");
        for value in [1f32, 2f32] {
            let s = states.create("S_OUT", fp32, vec![1]).unwrap();
            let (mut buffer, mut memory, mut id) = (std::ptr::null_mut(), MEMORY_GPU, 1i64);
            // SAFETY: a live state from `create` and out-parameters on this frame.
            unsafe {
                assert!(TRITONBACKEND_StateBuffer(s, &mut buffer, 4, &mut memory, &mut id).is_null());
                buffer.cast::<f32>().write_unaligned(value);
                assert!(TRITONBACKEND_StateUpdate(s).is_null());
            }
            assert_eq!((memory, id), (MEMORY_CPU, 0));
        }
        let updates = states.take_updates();
        assert_eq!(updates.len(), 1, "the later update replaces the earlier");
        assert_eq!(updates[0].data.as_ref(), 2f32.to_le_bytes());
        assert_eq!(
            (updates[0].name.as_str(), updates[0].datatype.as_str(), &updates[0].shape[..]),
            ("S_OUT", "FP32", &[1][..])
        );
        assert!(states.take_updates().is_empty(), "sent once");
    }
}
