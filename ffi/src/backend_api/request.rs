//! `TRITONBACKEND_Request` and `TRITONBACKEND_Input`: one request handed to a backend's
//! `ModelInstanceExecute`. The backend owns it until `TRITONBACKEND_RequestRelease`; its input
//! buffers are the engine's `Bytes` (no copy), kept alive by the request until then.

use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

use bytes::Bytes;

use super::abi::*;
use super::boundary::{borrow, c_string, export, text, write};
use super::buffer::BufferAttributes;
use super::error::Error;
use super::host::{HostError, HostEvent, HostParam, HostRequest};
use super::response::Sink;

/// One input tensor in CPU memory.
pub struct Input {
    name: CString,
    datatype: DataType,
    shape: Vec<i64>,
    data: Bytes,
    attributes: BufferAttributes,
}

enum CorrelationId {
    Number(u64),
    Text(CString),
}

/// A request's or a response's parameter; `value` points into this struct.
pub(crate) struct Param {
    pub(crate) key: CString,
    pub(crate) kind: ParameterType,
    string: CString,
    int: i64,
    boolean: bool,
    double: f64,
}

impl Param {
    pub(crate) fn new(key: &str, value: HostParam) -> Param {
        let mut p = Param {
            key: c_string(key),
            kind: PARAMETER_STRING,
            string: CString::default(),
            int: 0,
            boolean: false,
            double: 0.0,
        };
        match value {
            HostParam::Str(s) => p.string = c_string(&s),
            HostParam::Int(i) => (p.kind, p.int) = (PARAMETER_INT, i),
            HostParam::Bool(b) => (p.kind, p.boolean) = (PARAMETER_BOOL, b),
            HostParam::Double(d) => (p.kind, p.double) = (PARAMETER_DOUBLE, d),
        }
        p
    }

    pub(crate) fn value(&self) -> *const c_void {
        match self.kind {
            PARAMETER_STRING => self.string.as_ptr().cast(),
            PARAMETER_INT => (&self.int as *const i64).cast(),
            PARAMETER_BOOL => (&self.boolean as *const bool).cast(),
            _ => (&self.double as *const f64).cast(),
        }
    }
}

/// One request as the backend sees it behind `TRITONBACKEND_Request*`.
pub struct Request {
    id: CString,
    correlation: CorrelationId,
    flags: u32,
    timeout_us: u64,
    inputs: Vec<Input>,
    outputs: Vec<CString>,
    /// Never grows after construction, so the value pointers into it stay valid.
    params: Vec<Param>,
    /// Whether a release with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE` is allowed (an iterative
    /// sequence model).
    reschedulable: bool,
    /// The model's name, for the texts of refused reschedules.
    model: String,
    pub(crate) sink: Arc<Sink>,
}

impl Request {
    pub(crate) fn new(request: HostRequest, sink: Arc<Sink>) -> Request {
        let params = request.parameters.into_iter().map(|(key, value)| Param::new(&key, value)).collect();
        Request {
            id: c_string(&request.id),
            correlation: match request.correlation_text {
                Some(s) => CorrelationId::Text(c_string(&s)),
                None => CorrelationId::Number(request.correlation_id),
            },
            flags: request.flags,
            timeout_us: request.timeout_us,
            inputs: request
                .inputs
                .into_iter()
                .map(|t| Input {
                    name: c_string(&t.name),
                    datatype: data_type_of(&t.datatype),
                    shape: t.shape,
                    attributes: BufferAttributes::cpu(t.data.len()),
                    data: t.data,
                })
                .collect(),
            outputs: request.outputs.iter().map(|o| c_string(o)).collect(),
            params,
            reschedulable: request.reschedulable,
            model: request.model,
            sink,
        }
    }

    /// Why a release with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE` is refused, if it is: as in
    /// Triton, a model that is not an iterative sequence refuses every reschedule; an iterative
    /// one refuses it for a request carrying the END flag, whose sequence has ended (Triton's
    /// enqueue of the rescheduled request then fails with its no-START error).
    fn reschedule_refusal(&self) -> Option<Error> {
        if !self.reschedulable {
            return Some(Error::new(ERROR_INVALID_ARG, RESCHEDULE_REFUSED));
        }
        if self.flags & REQUEST_FLAG_SEQUENCE_END != 0 {
            let id = match &self.correlation {
                CorrelationId::Number(n) => n.to_string(),
                CorrelationId::Text(s) => s.to_string_lossy().into_owned(),
            };
            return Some(Error::new(
                ERROR_INVALID_ARG,
                format!(
                    "inference request for sequence {id} to model '{}' must specify the START flag on the first request of the sequence",
                    self.model
                ),
            ));
        }
        None
    }

    fn input(&self, index: u32) -> Result<&Input, Error> {
        self.inputs.get(index as usize).ok_or_else(|| {
            Error::new(ERROR_INVALID_ARG, format!("input index {index} is out of range ({} inputs)", self.inputs.len()))
        })
    }
}

/// Borrows a request handle.
///
/// # Safety
/// `request` must be null or a live request that the backend has not released.
unsafe fn req<'a>(request: *mut Request) -> Result<&'a Request, Error> {
    // SAFETY: forwarded from the caller.
    unsafe { borrow(request, "request") }
}

export! {
    fn TRITONBACKEND_RequestId(request: *mut Request, id: *mut *const c_char) {
        // SAFETY: a live request and the caller's out-parameter (the header's contract).
        unsafe { write(id, req(request)?.id.as_ptr(), "id") }
    }
}

export! {
    /// The numeric correlation ID (0 without a sequence); an error when it is a string.
    fn TRITONBACKEND_RequestCorrelationId(request: *mut Request, id: *mut u64) {
        // SAFETY: a live request (the header's contract).
        match unsafe { &req(request)?.correlation } {
            // SAFETY: the caller's out-parameter.
            CorrelationId::Number(n) => unsafe { write(id, *n, "id") },
            CorrelationId::Text(_) => Err(Error::new(ERROR_INVALID_ARG, "correlation ID is a string, not an unsigned integer")),
        }
    }
}

export! {
    /// The string correlation ID; an error when it is a number.
    fn TRITONBACKEND_RequestCorrelationIdString(request: *mut Request, id: *mut *const c_char) {
        // SAFETY: a live request (the header's contract).
        match unsafe { &req(request)?.correlation } {
            // SAFETY: the caller's out-parameter; the string lives as long as the request.
            CorrelationId::Text(s) => unsafe { write(id, s.as_ptr(), "id") },
            CorrelationId::Number(_) => Err(Error::new(ERROR_INVALID_ARG, "correlation ID is an unsigned integer, not a string")),
        }
    }
}

export! {
    fn TRITONBACKEND_RequestFlags(request: *mut Request, flags: *mut u32) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(flags, req(request)?.flags, "flags") }
    }
}

export! {
    fn TRITONBACKEND_InferenceRequestTimeoutMicroseconds(request: *mut Request, timeout: *mut u64) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(timeout, req(request)?.timeout_us, "timeout") }
    }
}

export! {
    fn TRITONBACKEND_RequestIsCancelled(request: *mut Request, is_cancelled: *mut bool) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(is_cancelled, req(request)?.sink.is_cancelled(), "is_cancelled") }
    }
}

export! {
    fn TRITONBACKEND_RequestInputCount(request: *mut Request, count: *mut u32) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(count, req(request)?.inputs.len() as u32, "count") }
    }
}

export! {
    fn TRITONBACKEND_RequestInputName(request: *mut Request, index: u32, input_name: *mut *const c_char) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(input_name, req(request)?.input(index)?.name.as_ptr(), "input_name") }
    }
}

export! {
    /// The input of that name, owned by the request.
    fn TRITONBACKEND_RequestInput(request: *mut Request, name: *const c_char, input: *mut *mut Input) {
        // SAFETY: a live request and a C string (the header's contract).
        let (r, name) = unsafe { (req(request)?, text(name, "name")?) };
        let found = r.inputs.iter().find(|i| i.name.to_bytes() == name.as_bytes()).ok_or_else(|| {
            Error::new(ERROR_INVALID_ARG, format!("unknown request input name {name}"))
        })?;
        // SAFETY: the caller's out-parameter; the input lives as long as the request.
        unsafe { write(input, (found as *const Input).cast_mut(), "input") }
    }
}

export! {
    fn TRITONBACKEND_RequestInputByIndex(request: *mut Request, index: u32, input: *mut *mut Input) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe {
            let found = req(request)?.input(index)?;
            write(input, (found as *const Input).cast_mut(), "input")
        }
    }
}

export! {
    fn TRITONBACKEND_RequestOutputCount(request: *mut Request, count: *mut u32) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(count, req(request)?.outputs.len() as u32, "count") }
    }
}

export! {
    fn TRITONBACKEND_RequestOutputName(request: *mut Request, index: u32, output_name: *mut *const c_char) {
        // SAFETY: a live request (the header's contract).
        let r = unsafe { req(request)? };
        let name = r.outputs.get(index as usize).ok_or_else(|| {
            Error::new(ERROR_INVALID_ARG, format!("requested output index {index} is out of range ({} outputs)", r.outputs.len()))
        })?;
        // SAFETY: the caller's out-parameter.
        unsafe { write(output_name, name.as_ptr(), "output_name") }
    }
}

export! {
    fn TRITONBACKEND_RequestParameterCount(request: *mut Request, count: *mut u32) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(count, req(request)?.params.len() as u32, "count") }
    }
}

export! {
    /// One parameter: its key, type and a pointer to its value, all owned by the request.
    fn TRITONBACKEND_RequestParameter(request: *mut Request, index: u32, key: *mut *const c_char, kind: *mut ParameterType, vvalue: *mut *const c_void) {
        // SAFETY: a live request (the header's contract).
        let r = unsafe { req(request)? };
        let p = r.params.get(index as usize).ok_or_else(|| {
            Error::new(ERROR_INVALID_ARG, format!("parameter index {index} is out of range ({} parameters)", r.params.len()))
        })?;
        // SAFETY: the caller's out-parameters.
        unsafe {
            write(key, p.key.as_ptr(), "key")?;
            write(kind, p.kind, "type")?;
            write(vvalue, p.value(), "vvalue")
        }
    }
}

export! {
    /// The request's trace when the trace settings sampled it, null otherwise (as in Triton).
    /// It stays the request's: it lives until the request and its response factories are gone.
    fn TRITONBACKEND_RequestTrace(request: *mut Request, trace: *mut *mut super::trace::InferenceTrace) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(trace, req(request)?.sink.trace(), "trace") }
    }
}

/// Triton's error for a reschedule of a request whose model is not an iterative sequence.
pub const RESCHEDULE_REFUSED: &str =
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.";

export! {
    /// Gives the request back: frees it and its inputs (the engine's response channel stays
    /// open while a response factory of the request lives). With
    /// `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE` (an iterative sequence) the engine is told to
    /// run the request again, in a later batch; a refused reschedule leaves the request with the
    /// backend, which then releases it as usual (Triton's contract).
    fn TRITONBACKEND_RequestRelease(request: *mut Request, release_flags: u32) {
        if request.is_null() {
            return Err(Error::new(ERROR_INVALID_ARG, "request is null"));
        }
        if release_flags & REQUEST_RELEASE_RESCHEDULE != 0 {
            // SAFETY: a live request, not released yet (the header's contract).
            let r = unsafe { req(request)? };
            if let Some(refusal) = r.reschedule_refusal() {
                r.sink.send(HostEvent::RescheduleRefused(HostError::from(refusal.clone())));
                return Err(refusal);
            }
            r.sink.send(HostEvent::Rescheduled);
        }
        // SAFETY: the backend gives back a request made by `Box::into_raw` in `host`, once.
        drop(unsafe { Box::from_raw(request) });
        Ok(())
    }
}

/// Borrows an input handle.
///
/// # Safety
/// `input` must be null or an input of a live request.
unsafe fn inp<'a>(input: *mut Input) -> Result<&'a Input, Error> {
    // SAFETY: forwarded from the caller.
    unsafe { borrow(input, "input") }
}

/// Writes an input's properties; shared by the two `InputProperties` functions.
///
/// # Safety
/// A live input, and each out-parameter null (skipped) or writable.
unsafe fn properties(
    input: *mut Input,
    name: *mut *const c_char,
    datatype: *mut DataType,
    shape: *mut *const i64,
    dims_count: *mut u32,
    byte_size: *mut u64,
    buffer_count: *mut u32,
) -> Result<(), Error> {
    // SAFETY: forwarded from the caller.
    let i = unsafe { inp(input)? };
    // SAFETY: the header lets each out-parameter be null ("if non-null, returns …").
    unsafe {
        if !name.is_null() {
            name.write(i.name.as_ptr());
        }
        if !datatype.is_null() {
            datatype.write(i.datatype);
        }
        if !shape.is_null() {
            shape.write(i.shape.as_ptr());
        }
        if !dims_count.is_null() {
            dims_count.write(i.shape.len() as u32);
        }
        if !byte_size.is_null() {
            byte_size.write(i.data.len() as u64);
        }
        if !buffer_count.is_null() {
            buffer_count.write(1);
        }
    }
    Ok(())
}

export! {
    fn TRITONBACKEND_InputProperties(input: *mut Input, name: *mut *const c_char, datatype: *mut DataType, shape: *mut *const i64, dims_count: *mut u32, byte_size: *mut u64, buffer_count: *mut u32) {
        // SAFETY: forwarded under the header's contract.
        unsafe { properties(input, name, datatype, shape, dims_count, byte_size, buffer_count) }
    }
}

export! {
    /// The same as `InputProperties`: every input is in CPU memory under any host policy.
    fn TRITONBACKEND_InputPropertiesForHostPolicy(input: *mut Input, host_policy_name: *const c_char, name: *mut *const c_char, datatype: *mut DataType, shape: *mut *const i64, dims_count: *mut u32, byte_size: *mut u64, buffer_count: *mut u32) {
        let _ = host_policy_name;
        // SAFETY: forwarded under the header's contract.
        unsafe { properties(input, name, datatype, shape, dims_count, byte_size, buffer_count) }
    }
}

/// Writes buffer `index` (only 0 exists) of an input.
///
/// # Safety
/// A live input and writable out-parameters.
unsafe fn buffer(
    input: *mut Input,
    index: u32,
    out: *mut *const c_void,
    size: *mut u64,
    memory_type: *mut MemoryType,
    memory_type_id: *mut i64,
) -> Result<(), Error> {
    // SAFETY: forwarded from the caller.
    let i = unsafe { inp(input)? };
    if index != 0 {
        return Err(Error::new(ERROR_INVALID_ARG, format!("input buffer index {index} is out of range (1 buffer)")));
    }
    // SAFETY: the caller's out-parameters; the bytes live as long as the request.
    unsafe {
        write(out, i.data.as_ptr().cast(), "buffer")?;
        write(size, i.data.len() as u64, "buffer_byte_size")?;
        write(memory_type, MEMORY_CPU, "memory_type")?;
        write(memory_type_id, 0, "memory_type_id")
    }
}

export! {
    fn TRITONBACKEND_InputBuffer(input: *mut Input, index: u32, buffer_ptr: *mut *const c_void, buffer_byte_size: *mut u64, memory_type: *mut MemoryType, memory_type_id: *mut i64) {
        // SAFETY: forwarded under the header's contract.
        unsafe { buffer(input, index, buffer_ptr, buffer_byte_size, memory_type, memory_type_id) }
    }
}

export! {
    fn TRITONBACKEND_InputBufferForHostPolicy(input: *mut Input, host_policy_name: *const c_char, index: u32, buffer_ptr: *mut *const c_void, buffer_byte_size: *mut u64, memory_type: *mut MemoryType, memory_type_id: *mut i64) {
        let _ = host_policy_name;
        // SAFETY: forwarded under the header's contract.
        unsafe { buffer(input, index, buffer_ptr, buffer_byte_size, memory_type, memory_type_id) }
    }
}

export! {
    /// The buffer and its attributes (owned by the input).
    fn TRITONBACKEND_InputBufferAttributes(input: *mut Input, index: u32, buffer_ptr: *mut *const c_void, buffer_attributes: *mut *mut BufferAttributes) {
        // SAFETY: a live input (the header's contract).
        let i = unsafe { inp(input)? };
        if index != 0 {
            return Err(Error::new(ERROR_INVALID_ARG, format!("input buffer index {index} is out of range (1 buffer)")));
        }
        // SAFETY: the caller's out-parameters; both live as long as the request.
        unsafe {
            write(buffer_ptr, i.data.as_ptr().cast(), "buffer")?;
            write(buffer_attributes, (&i.attributes as *const BufferAttributes).cast_mut(), "buffer_attributes")
        }
    }
}

export! {
    /// Where Tritium will put an output of the request: CPU memory, id 0, whatever the backend
    /// prefers (`TRITONBACKEND_OutputBuffer` allocates there); `name` and `byte_size` are
    /// optional and change nothing.
    fn TRITONBACKEND_RequestOutputBufferProperties(request: *mut Request, name: *const c_char, byte_size: *mut usize, memory_type: *mut MemoryType, memory_type_id: *mut i64) {
        let _ = (name, byte_size);
        // SAFETY: a live request and the caller's in/out parameters.
        unsafe {
            borrow(request, "request")?;
            write(memory_type, MEMORY_CPU, "memory_type")?;
            write(memory_type_id, 0, "memory_type_id")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc::{channel, Receiver};

    use super::*;
    use crate::backend_api::state::States;

    /// A request handed to a backend, and the channel its events arrive on.
    fn request(reschedulable: bool, flags: u32) -> (*mut Request, Receiver<HostEvent>) {
        let (tx, rx) = channel();
        let sink = Arc::new(Sink::new(tx, Arc::new(AtomicBool::new(false)), States::new("m", None), None, None));
        let host = HostRequest { correlation_id: 9, flags, reschedulable, model: "m".into(), ..Default::default() };
        (Box::into_raw(Box::new(Request::new(host, sink))), rx)
    }

    /// Takes an error the export returned.
    fn taken(e: *mut Error) -> Option<Error> {
        // SAFETY: null or an error object the export gave up to its caller.
        unsafe { Error::from_raw(e) }
    }

    #[test]
    fn an_iterative_sequence_request_is_rescheduled_and_freed() {
        let (r, rx) = request(true, REQUEST_FLAG_SEQUENCE_START);
        // SAFETY: a live request, released once.
        assert_eq!(taken(unsafe { TRITONBACKEND_RequestRelease(r, REQUEST_RELEASE_RESCHEDULE) }), None);
        assert_eq!(rx.recv().unwrap(), HostEvent::Rescheduled);
        assert!(rx.recv().is_err(), "the request was freed: its channel closed");
    }

    #[test]
    fn a_reschedule_is_refused_with_tritons_text_where_the_model_does_not_iterate() {
        let (r, rx) = request(false, REQUEST_FLAG_SEQUENCE_START);
        // SAFETY: a live request; the refused release leaves it with the caller.
        let e = taken(unsafe { TRITONBACKEND_RequestRelease(r, REQUEST_RELEASE_RESCHEDULE) }).unwrap();
        assert_eq!((e.code, e.message()), (ERROR_INVALID_ARG, RESCHEDULE_REFUSED));
        let HostEvent::RescheduleRefused(refusal) = rx.recv().unwrap() else { panic!("no refusal event") };
        assert_eq!(refusal.message, RESCHEDULE_REFUSED);
        // SAFETY: the request is still the caller's; released once.
        assert_eq!(taken(unsafe { TRITONBACKEND_RequestRelease(r, REQUEST_RELEASE_ALL) }), None);
        assert!(rx.recv().is_err());
    }

    #[test]
    fn a_request_that_ended_its_sequence_cannot_be_rescheduled() {
        let (r, _rx) = request(true, REQUEST_FLAG_SEQUENCE_START | REQUEST_FLAG_SEQUENCE_END);
        // SAFETY: a live request; the refused release leaves it with the caller.
        let e = taken(unsafe { TRITONBACKEND_RequestRelease(r, REQUEST_RELEASE_RESCHEDULE) }).unwrap();
        assert_eq!(
            e.message(),
            "inference request for sequence 9 to model 'm' must specify the START flag on the first request of the sequence"
        );
        // SAFETY: released once.
        assert_eq!(taken(unsafe { TRITONBACKEND_RequestRelease(r, REQUEST_RELEASE_ALL) }), None);
    }
}
