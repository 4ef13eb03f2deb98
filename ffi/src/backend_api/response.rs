//! `TRITONBACKEND_Response`, `TRITONBACKEND_ResponseFactory` and `TRITONBACKEND_Output`: what a
//! backend sends back for a request. Every response and every flags-only send goes into the
//! request's `Sink`, a channel the engine reads; a factory keeps the sink open after the
//! request is released (decoupled models), and the sink closes when the last holder is gone.

use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use bytes::Bytes;

use super::abi::*;
use super::boundary::{borrow, borrow_mut, c_string, export, text, write};
use super::buffer::BufferAttributes;
use super::error::Error;
use super::host::{FinalHook, HostError, HostEvent, HostResponse, HostTensor};
use super::request::Request;
use super::state::States;
use super::trace::InferenceTrace;

/// Where a request's responses go.
pub struct Sink {
    tx: Sender<HostEvent>,
    cancelled: Arc<AtomicBool>,
    /// The request's implicit sequence states.
    states: States,
    /// What the backend reported of the request (`ModelInstanceReportStatistics`).
    pub(crate) report: Arc<std::sync::Mutex<Option<super::host::ReportedStats>>>,
    /// The request's trace, if traced: it lives as long as the request and its response
    /// factories, as Triton's does, so a decoupled model may spawn children until its last
    /// response.
    trace: Option<Box<InferenceTrace>>,
    /// The index the backend's next reported response gets (`ReportResponseStatistics`).
    pub(crate) response_index: std::sync::atomic::AtomicU64,
    /// Where the request's first response goes when it is final and without error.
    on_final: Option<FinalHook>,
    /// How many responses the backend sent for the request.
    sent: std::sync::atomic::AtomicU64,
}

impl Sink {
    pub(crate) fn new(
        tx: Sender<HostEvent>,
        cancelled: Arc<AtomicBool>,
        states: States,
        trace: Option<Box<InferenceTrace>>,
        on_final: Option<FinalHook>,
    ) -> Self {
        let (report, response_index, sent) = Default::default();
        Sink { tx, cancelled, states, report, trace, response_index, on_final, sent }
    }

    /// The request's trace object for the backend; null when it is not traced.
    pub(crate) fn trace(&self) -> *mut InferenceTrace {
        self.trace.as_deref().map_or(std::ptr::null_mut(), |t| (t as *const InferenceTrace).cast_mut())
    }

    pub(crate) fn states(&self) -> &States {
        &self.states
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    pub(crate) fn send(&self, event: HostEvent) {
        // The engine stops reading once it has the final response or gave up on the request;
        // what comes after that has nowhere to go.
        let _ = self.tx.send(event);
    }
}

/// One output tensor of a response, in CPU memory Tritium allocated.
pub struct Output {
    name: String,
    /// The name as a C string, for `InferenceResponseOutput`.
    c_name: CString,
    datatype: DataType,
    shape: Vec<i64>,
    buffer: Option<Vec<u8>>,
    attributes: BufferAttributes,
}

/// One response being built; `ResponseSend` or `ResponseDelete` ends it.
pub struct Response {
    sink: Arc<Sink>,
    /// Boxed: the backend holds pointers to outputs while more are added.
    #[allow(clippy::vec_box)]
    outputs: Vec<Box<Output>>,
}

/// A request's response factory: responses after the request is released.
pub struct ResponseFactory {
    sink: Arc<Sink>,
}

impl ResponseFactory {
    /// Its request's sink (shared by every factory of the request).
    pub(crate) fn sink(&self) -> Arc<Sink> {
        self.sink.clone()
    }
}

export! {
    /// A new response for a request (not yet released), owned by the caller.
    fn TRITONBACKEND_ResponseNew(response: *mut *mut Response, request: *mut Request) {
        // SAFETY: a live request (the header's contract).
        let r = unsafe { borrow(request, "request")? };
        let new = Box::into_raw(Box::new(Response { sink: r.sink.clone(), outputs: Vec::new() }));
        // SAFETY: the caller's out-parameter.
        unsafe { write(response, new, "response") }
    }
}

export! {
    fn TRITONBACKEND_ResponseFactoryNew(factory: *mut *mut ResponseFactory, request: *mut Request) {
        // SAFETY: a live request (the header's contract).
        let r = unsafe { borrow(request, "request")? };
        let new = Box::into_raw(Box::new(ResponseFactory { sink: r.sink.clone() }));
        // SAFETY: the caller's out-parameter.
        unsafe { write(factory, new, "factory") }
    }
}

export! {
    fn TRITONBACKEND_ResponseFactoryDelete(factory: *mut ResponseFactory) {
        if !factory.is_null() {
            // SAFETY: the backend gives up a factory made by `ResponseFactoryNew`, once.
            drop(unsafe { Box::from_raw(factory) });
        }
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_ResponseNewFromFactory(response: *mut *mut Response, factory: *mut ResponseFactory) {
        // SAFETY: a live factory (the header's contract).
        let f = unsafe { borrow(factory, "factory")? };
        let new = Box::into_raw(Box::new(Response { sink: f.sink.clone(), outputs: Vec::new() }));
        // SAFETY: the caller's out-parameter.
        unsafe { write(response, new, "response") }
    }
}

export! {
    /// Sends flags without a response (the final flag of a decoupled stream).
    fn TRITONBACKEND_ResponseFactorySendFlags(factory: *mut ResponseFactory, send_flags: u32) {
        // SAFETY: a live factory (the header's contract).
        unsafe { borrow(factory, "factory")? }.sink.send(HostEvent::Flags(send_flags));
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_ResponseFactoryIsCancelled(factory: *mut ResponseFactory, is_cancelled: *mut bool) {
        // SAFETY: a live factory and the caller's out-parameter.
        unsafe { write(is_cancelled, borrow(factory, "factory")?.sink.is_cancelled(), "is_cancelled") }
    }
}

export! {
    fn TRITONBACKEND_ResponseDelete(response: *mut Response) {
        if !response.is_null() {
            // SAFETY: the backend gives up a response it owns, once.
            drop(unsafe { Box::from_raw(response) });
        }
        Ok(())
    }
}

export! {
    /// Adds an output to a response; the output is owned by the response.
    fn TRITONBACKEND_ResponseOutput(response: *mut Response, output: *mut *mut Output, name: *const c_char, datatype: DataType, shape: *const i64, dims_count: u32) {
        // SAFETY: a live response the backend does not use concurrently, and a C string.
        let (r, name) = unsafe { (borrow_mut(response, "response")?, text(name, "name")?) };
        let shape = if dims_count == 0 {
            Vec::new()
        } else if shape.is_null() {
            return Err(Error::new(ERROR_INVALID_ARG, "shape is null"));
        } else {
            // SAFETY: the header's contract: `shape` holds `dims_count` values.
            unsafe { std::slice::from_raw_parts(shape, dims_count as usize) }.to_vec()
        };
        let mut new = Box::new(Output { name: name.to_string(), c_name: c_string(name), datatype, shape, buffer: None, attributes: BufferAttributes::default() });
        let ptr: *mut Output = &mut *new;
        r.outputs.push(new);
        // SAFETY: the caller's out-parameter; the boxed output does not move while the
        // response lives.
        unsafe { write(output, ptr, "output") }
    }
}

export! {
    /// Allocates the output's buffer, always in CPU memory (whatever memory type was asked).
    fn TRITONBACKEND_OutputBuffer(output: *mut Output, buffer: *mut *mut c_void, buffer_byte_size: u64, memory_type: *mut MemoryType, memory_type_id: *mut i64) {
        // SAFETY: a live output the backend does not use concurrently.
        let o = unsafe { borrow_mut(output, "output")? };
        if o.buffer.is_some() {
            return Err(Error::new(ERROR_ALREADY_EXISTS, format!("output '{}' already has a buffer", o.name)));
        }
        let data = o.buffer.insert(vec![0u8; buffer_byte_size as usize]);
        o.attributes.set_size(data.len());
        // SAFETY: the caller's out-parameters; the buffer lives as long as the response.
        unsafe {
            write(buffer, data.as_mut_ptr().cast(), "buffer")?;
            write(memory_type, MEMORY_CPU, "memory_type")?;
            write(memory_type_id, 0, "memory_type_id")
        }
    }
}

export! {
    fn TRITONBACKEND_OutputBufferAttributes(output: *mut Output, buffer_attributes: *mut *mut BufferAttributes) {
        // SAFETY: a live output and the caller's out-parameter.
        unsafe {
            let o = borrow_mut(output, "output")?;
            write(buffer_attributes, &mut o.attributes as *mut BufferAttributes, "buffer_attributes")
        }
    }
}

export! {
    /// Sends a response (taking it over); `error` stays the backend's.
    fn TRITONBACKEND_ResponseSend(response: *mut Response, send_flags: u32, error: *mut Error) {
        if response.is_null() {
            return Err(Error::new(ERROR_INVALID_ARG, "response is null"));
        }
        // SAFETY: the backend gives up a response it owns, once (the header's contract).
        let r = unsafe { Box::from_raw(response) };
        // SAFETY: a live error object or null; the backend keeps ownership.
        let error = unsafe { error.as_ref() }.map(|e| HostError { code: e.code, message: e.message().to_string() });
        let outputs = if error.is_some() {
            Vec::new()
        } else {
            let mut outputs: Vec<HostTensor> = r
                .outputs
                .into_iter()
                .map(|o| HostTensor {
                    name: o.name,
                    datatype: data_type_name(o.datatype).to_string(),
                    shape: o.shape,
                    data: Bytes::from(o.buffer.unwrap_or_default()),
                })
                .collect();
            // The states updated for the request go with its response, under their names.
            let states = r.sink.states.take_updates();
            outputs.retain(|o| states.iter().all(|s| s.name != o.name));
            outputs.extend(states);
            outputs
        };
        let is_final = send_flags & RESPONSE_COMPLETE_FINAL != 0;
        let first = r.sink.sent.fetch_add(1, Ordering::Relaxed) == 0;
        match &r.sink.on_final {
            // The request's one response: the client has it before the backend goes on (as
            // Triton answers from here); the channel hears that it went.
            Some(hook) if is_final && first && error.is_none() => {
                hook.call(outputs);
                r.sink.send(HostEvent::Answered);
            }
            _ => r.sink.send(HostEvent::Response(HostResponse { outputs, error, is_final })),
        }
        Ok(())
    }
}

export! {
    /// An output the backend added to its response: name, datatype and shape, owned by the
    /// response.
    fn TRITONBACKEND_InferenceResponseOutput(response: *mut Response, index: u32, name: *mut *const c_char, datatype: *mut DataType, shape: *mut *const i64, dim_count: *mut u64) {
        // SAFETY: a live response the backend does not use concurrently.
        let r = unsafe { borrow(response, "response") }?;
        let o = r.outputs.get(index as usize).ok_or_else(|| {
            Error::new(ERROR_INVALID_ARG, format!("out of bounds index {index}: response has {} outputs", r.outputs.len()))
        })?;
        // SAFETY: the caller's out-parameters; the values live as long as the response.
        unsafe {
            write(name, o.c_name.as_ptr(), "name")?;
            write(datatype, o.datatype, "datatype")?;
            write(shape, o.shape.as_ptr(), "shape")?;
            write(dim_count, o.shape.len() as u64, "dim_count")
        }
    }
}

/// Response parameters do not reach Tritium's clients: the engine's answer carries the
/// outputs of each request. A backend that sets one is told so, rather than have it dropped.
fn parameters_unsupported(response: *mut Response, name: *const c_char) -> Result<(), Error> {
    // SAFETY: a live response, and a C string or null (the header's contract).
    let name = unsafe {
        borrow(response, "response")?;
        text(name, "name")?
    };
    Err(Error::new(
        ERROR_UNSUPPORTED,
        format!("response parameter '{name}': Tritium does not send response parameters set by a backend"),
    ))
}

export! {
    fn TRITONBACKEND_ResponseSetStringParameter(response: *mut Response, name: *const c_char, value: *const c_char) {
        let _ = value;
        parameters_unsupported(response, name)
    }
}

export! {
    fn TRITONBACKEND_ResponseSetIntParameter(response: *mut Response, name: *const c_char, value: i64) {
        let _ = value;
        parameters_unsupported(response, name)
    }
}

export! {
    fn TRITONBACKEND_ResponseSetBoolParameter(response: *mut Response, name: *const c_char, value: bool) {
        let _ = value;
        parameters_unsupported(response, name)
    }
}

export! {
    fn TRITONBACKEND_ResponseSetDoubleParameter(response: *mut Response, name: *const c_char, value: f64) {
        let _ = value;
        parameters_unsupported(response, name)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc::{channel, Receiver};
    use std::sync::Mutex;

    use super::*;
    use crate::backend_api::host::HostRequest;

    /// A request whose final response goes to `hook`, and its channel.
    fn request(hook: Option<FinalHook>) -> (*mut Request, Receiver<HostEvent>) {
        let (tx, rx) = channel();
        let sink = Arc::new(Sink::new(tx, Arc::new(AtomicBool::new(false)), States::new("m", None), None, hook));
        (Box::into_raw(Box::new(Request::new(HostRequest::default(), sink))), rx)
    }

    /// Sends a response with one FP32 output `OUT` of one element.
    fn send(request: *mut Request, flags: u32, error: Option<&Error>) {
        let mut response = std::ptr::null_mut();
        let mut output = std::ptr::null_mut();
        let (mut buffer, mut kind, mut id) = (std::ptr::null_mut(), 0, 0);
        let error = error.map_or(std::ptr::null_mut(), |e| (e as *const Error).cast_mut());
        // SAFETY: a live request, the new response and output, the caller's out-parameters; the
        // response is given up once.
        unsafe {
            assert!(TRITONBACKEND_ResponseNew(&mut response, request).is_null());
            assert!(
                TRITONBACKEND_ResponseOutput(response, &mut output, c"OUT".as_ptr(), 11, [1i64].as_ptr(), 1).is_null()
            );
            assert!(TRITONBACKEND_OutputBuffer(output, &mut buffer, 4, &mut kind, &mut id).is_null());
            assert!(TRITONBACKEND_ResponseSend(response, flags, error).is_null());
        }
    }

    /// A hook that keeps what it is given.
    fn keeper() -> (FinalHook, Arc<Mutex<Vec<Vec<HostTensor>>>>) {
        let got: Arc<Mutex<Vec<Vec<HostTensor>>>> = Arc::default();
        let kept = got.clone();
        (FinalHook::new(move |outputs| kept.lock().unwrap().push(outputs)), got)
    }

    fn release(r: *mut Request) {
        // SAFETY: made by `Box::into_raw` in `request`, freed once.
        drop(unsafe { Box::from_raw(r) });
    }

    #[test]
    fn a_lone_final_response_goes_out_from_response_send() {
        let (hook, got) = keeper();
        let (r, rx) = request(Some(hook));
        send(r, RESPONSE_COMPLETE_FINAL, None);
        assert_eq!(got.lock().unwrap().len(), 1, "the hook took the response");
        assert_eq!(got.lock().unwrap()[0][0].name, "OUT");
        assert_eq!(rx.try_recv().unwrap(), HostEvent::Answered);
        release(r);
    }

    #[test]
    fn responses_after_a_first_one_errors_and_unhooked_requests_go_to_the_channel() {
        let (hook, got) = keeper();
        let (r, rx) = request(Some(hook));
        send(r, 0, None);
        send(r, RESPONSE_COMPLETE_FINAL, None);
        assert!(got.lock().unwrap().is_empty(), "not the request's one response");
        assert!(matches!(rx.try_recv().unwrap(), HostEvent::Response(HostResponse { is_final: false, .. })));
        assert!(matches!(rx.try_recv().unwrap(), HostEvent::Response(HostResponse { is_final: true, .. })));
        release(r);

        let (hook, got) = keeper();
        let (r, rx) = request(Some(hook));
        let error = Error::new(ERROR_INTERNAL, "bad");
        send(r, RESPONSE_COMPLETE_FINAL, Some(&error));
        assert!(got.lock().unwrap().is_empty(), "an error goes the way the instance reads its failures");
        let HostEvent::Response(response) = rx.try_recv().unwrap() else { panic!("no response") };
        assert_eq!(response.error.unwrap().message, "bad");
        release(r);

        let (r, rx) = request(None);
        send(r, RESPONSE_COMPLETE_FINAL, None);
        assert!(matches!(rx.try_recv().unwrap(), HostEvent::Response(HostResponse { is_final: true, .. })));
        release(r);
    }
}
