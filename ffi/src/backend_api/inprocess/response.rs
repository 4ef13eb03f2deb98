//! `TRITONSERVER_ResponseAllocator` and `TRITONSERVER_InferenceResponse`: the answers of an
//! in-process request. Each response's output buffers come from the backend's allocator (the
//! Python backend allocates them in its shared memory with the stub), Tritium copies the output
//! bytes in, and hands the response to the backend's response callback; deleting the response
//! gives each buffer back through the allocator's release function. `Delivery` calls the
//! callbacks: every response, then the final flag exactly once, then the request's release.

use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::super::abi::*;
use super::super::boundary::{borrow, c_string, export, write};
use super::super::error::Error;
use super::super::host::{HostError, HostTensor};
use super::super::request::Param;
use super::request::{InferenceRequest, ReleaseFn};
use super::InProcessEvent;

type AllocFn = Option<
    unsafe extern "C" fn(
        *mut ResponseAllocator,
        *const c_char,
        usize,
        MemoryType,
        i64,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
        *mut MemoryType,
        *mut i64,
    ) -> *mut Error,
>;
type BufferReleaseFn = Option<
    unsafe extern "C" fn(*mut ResponseAllocator, *mut c_void, *mut c_void, usize, MemoryType, i64) -> *mut Error,
>;
type StartFn = Option<unsafe extern "C" fn(*mut ResponseAllocator, *mut c_void) -> *mut Error>;
type QueryFn = Option<
    unsafe extern "C" fn(
        *mut ResponseAllocator,
        *mut c_void,
        *const c_char,
        *mut usize,
        *mut MemoryType,
        *mut i64,
    ) -> *mut Error,
>;
/// `TRITONSERVER_InferenceResponseCompleteFn_t`.
pub type ResponseFn = Option<unsafe extern "C" fn(*mut InferenceResponse, u32, *mut c_void)>;

/// A response allocator's callbacks.
#[derive(Clone, Copy)]
pub struct ResponseAllocator {
    alloc: AllocFn,
    release: BufferReleaseFn,
    start: StartFn,
    /// Kept for the API; Tritium always asks for CPU memory, so it never needs to query.
    _query: QueryFn,
    /// Kept for the API, likewise.
    _buffer_attributes: BufferAttributesFn,
}

/// A request's response callback and allocator, copied when the backend sets them. The
/// pointers are the backend's (kept as addresses so a delivery can move to the thread that
/// answers); the backend keeps them valid until the request's release callback.
#[derive(Clone)]
pub struct ResponseCallback {
    allocator: usize,
    callbacks: Option<ResponseAllocator>,
    allocator_userp: usize,
    response_fn: unsafe extern "C" fn(*mut InferenceResponse, u32, *mut c_void),
    response_userp: usize,
}

impl ResponseCallback {
    pub(super) fn new(
        allocator: *mut ResponseAllocator,
        allocator_userp: *mut c_void,
        response_fn: unsafe extern "C" fn(*mut InferenceResponse, u32, *mut c_void),
        response_userp: *mut c_void,
    ) -> Self {
        // SAFETY: null or a live allocator of the backend (the header's contract).
        let callbacks = unsafe { allocator.as_ref() }.copied();
        ResponseCallback {
            allocator: allocator as usize,
            callbacks,
            allocator_userp: allocator_userp as usize,
            response_fn,
            response_userp: response_userp as usize,
        }
    }
}

/// One output of a response, in a buffer from the backend's allocator.
struct Output {
    name: CString,
    datatype: DataType,
    shape: Vec<i64>,
    buffer: *mut c_void,
    buffer_userp: *mut c_void,
    byte_size: usize,
    memory_type: MemoryType,
    memory_type_id: i64,
}

/// One response behind `TRITONSERVER_InferenceResponse*`; the backend deletes it.
pub struct InferenceResponse {
    error: Option<Error>,
    outputs: Vec<Output>,
    allocator: usize,
    release: BufferReleaseFn,
    /// The request's id and model, the version that answered (the one asked for, -1 for the
    /// latest, when it failed), and the response's parameters.
    id: CString,
    model: CString,
    version: i64,
    parameters: Vec<Param>,
}

/// What every response of one request says about it.
#[derive(Clone)]
pub(super) struct Origin {
    pub(super) id: String,
    pub(super) model: String,
    pub(super) version: i64,
}

impl InferenceResponse {
    /// A response whose outputs are copied into buffers from the request's allocator. A
    /// failed allocation becomes the response's error, as in Triton.
    fn allocate(callback: &ResponseCallback, tensors: Vec<HostTensor>, origin: &Origin) -> InferenceResponse {
        let allocator = callback.allocator as *mut ResponseAllocator;
        let userp = callback.allocator_userp as *mut c_void;
        let callbacks = callback.callbacks;
        let mut response = InferenceResponse::of(origin);
        response.allocator = callback.allocator;
        let Some(ResponseAllocator { alloc: Some(alloc), release, start, .. }) = callbacks else {
            response.error =
                Some(Error::new(ERROR_INVALID_ARG, "the request's response allocator has no alloc function"));
            return response;
        };
        response.release = release;
        if let Some(start) = start {
            // SAFETY: the backend's allocator callback with its own allocator and userp.
            if let Some(e) = unsafe { Error::from_raw(start(allocator, userp)) } {
                response.error = Some(e);
                return response;
            }
        }
        for t in tensors {
            let name = c_string(&t.name);
            let (mut buffer, mut buffer_userp) = (std::ptr::null_mut(), std::ptr::null_mut());
            let (mut memory_type, mut memory_type_id) = (MEMORY_CPU, 0i64);
            // SAFETY: the backend's allocator callback with its allocator, its userp, a C
            // string that outlives the call and out-parameters on this stack frame.
            let e = unsafe {
                alloc(
                    allocator,
                    name.as_ptr(),
                    t.data.len(),
                    MEMORY_CPU,
                    0,
                    userp,
                    &mut buffer,
                    &mut buffer_userp,
                    &mut memory_type,
                    &mut memory_type_id,
                )
            };
            // SAFETY: an error object the callback returned, now ours.
            if let Some(e) = unsafe { Error::from_raw(e) } {
                response.error = Some(e);
                return response;
            }
            let byte_size = t.data.len();
            let datatype = data_type_of(&t.datatype);
            let output =
                Output { name, datatype, shape: t.shape, buffer, buffer_userp, byte_size, memory_type, memory_type_id };
            response.outputs.push(output);
            if byte_size == 0 {
                continue;
            }
            let message = if buffer.is_null() {
                format!("the response allocator gave no buffer for output '{}'", t.name)
            } else if memory_type == MEMORY_GPU {
                format!("output '{}': Tritium writes in-process outputs to CPU memory only", t.name)
            } else {
                // SAFETY: the allocator gave `buffer` for `byte_size` bytes in CPU memory
                // (checked above), and the source is the output's own bytes.
                unsafe { std::ptr::copy_nonoverlapping(t.data.as_ptr(), buffer.cast::<u8>(), byte_size) };
                continue;
            };
            response.error = Some(Error::new(ERROR_INTERNAL, message));
            return response;
        }
        response
    }

    /// An empty response of the request `origin` describes.
    fn of(origin: &Origin) -> InferenceResponse {
        InferenceResponse {
            error: None,
            outputs: Vec::new(),
            allocator: 0,
            release: None,
            id: c_string(&origin.id),
            model: c_string(&origin.model),
            version: origin.version,
            parameters: Vec::new(),
        }
    }

    fn failed(e: HostError, origin: &Origin) -> InferenceResponse {
        let mut response = InferenceResponse::of(origin);
        response.error = Some(Error::new(e.code, e.message));
        response
    }
}

impl Drop for InferenceResponse {
    fn drop(&mut self) {
        let Some(release) = self.release else { return };
        for o in self.outputs.iter().filter(|o| !o.buffer.is_null()) {
            let allocator = self.allocator as *mut ResponseAllocator;
            // SAFETY: the allocator's release callback, once per buffer it gave.
            let e =
                unsafe { release(allocator, o.buffer, o.buffer_userp, o.byte_size, o.memory_type, o.memory_type_id) };
            // SAFETY: an error object the callback returned, now ours.
            if let Some(e) = unsafe { Error::from_raw(e) } {
                tracing::warn!("releasing the buffer of output {:?}: {}", o.name, e.message());
            }
        }
    }
}

/// Calls one request's callbacks: each response, then its release. Dropped before its final
/// event once the server has accepted the request (the server lost it), it reports the request
/// failed, so a backend waiting for an answer always gets one; a request the server refused
/// stays the backend's, untouched.
pub struct Delivery {
    callback: ResponseCallback,
    origin: Origin,
    release: ReleaseFn,
    request: usize,
    release_userp: usize,
    done: bool,
    accepted: Arc<AtomicBool>,
}

impl Delivery {
    pub(super) fn new(
        callback: ResponseCallback,
        origin: Origin,
        release: ReleaseFn,
        request: usize,
        release_userp: usize,
    ) -> Self {
        Delivery { callback, origin, release, request, release_userp, done: false, accepted: Arc::default() }
    }

    /// Set once the server has taken the request.
    pub(super) fn accepted(&self) -> Arc<AtomicBool> {
        self.accepted.clone()
    }

    /// Hands one event to the backend; nothing after the final one.
    pub fn deliver(&mut self, event: InProcessEvent) {
        if self.done {
            return;
        }
        let (response, flags) = match event {
            InProcessEvent::Response { outputs, is_final, version, parameters } => {
                let origin = Origin { version, ..self.origin.clone() };
                let mut response = InferenceResponse::allocate(&self.callback, outputs, &origin);
                response.parameters = parameters.into_iter().map(|(k, v)| Param::new(&k, v)).collect();
                (Some(response), if is_final { RESPONSE_COMPLETE_FINAL } else { 0 })
            }
            InProcessEvent::Final => (None, RESPONSE_COMPLETE_FINAL),
            InProcessEvent::Failed(e) => (Some(InferenceResponse::failed(e, &self.origin)), RESPONSE_COMPLETE_FINAL),
        };
        let response = response.map_or(std::ptr::null_mut(), |r| Box::into_raw(Box::new(r)));
        self.done = flags & RESPONSE_COMPLETE_FINAL != 0;
        // SAFETY: the backend's response callback with its userp; the response (or null) is
        // the backend's now, to delete with `InferenceResponseDelete`.
        unsafe { (self.callback.response_fn)(response, flags, self.callback.response_userp as *mut c_void) };
        if self.done {
            if let Some(release) = self.release {
                // SAFETY: the backend's release callback, once, after the final response; the
                // request object is the backend's again (it deletes it there).
                unsafe {
                    release(
                        self.request as *mut InferenceRequest,
                        REQUEST_RELEASE_ALL,
                        self.release_userp as *mut c_void,
                    )
                };
            }
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if !self.done && self.accepted.load(Ordering::Acquire) {
            let message = "the server ended the in-process request without a final response";
            self.deliver(InProcessEvent::Failed(HostError { code: ERROR_INTERNAL, message: message.into() }));
        }
    }
}

export! {
    fn TRITONSERVER_ResponseAllocatorNew(allocator: *mut *mut ResponseAllocator, alloc_fn: AllocFn, release_fn: BufferReleaseFn, start_fn: StartFn) {
        if alloc_fn.is_none() {
            return Err(Error::new(ERROR_INVALID_ARG, "alloc_fn is null"));
        }
        let new = Box::into_raw(Box::new(ResponseAllocator {
            alloc: alloc_fn,
            release: release_fn,
            start: start_fn,
            _query: None,
            _buffer_attributes: None,
        }));
        // SAFETY: the caller's out-parameter.
        unsafe { write(allocator, new, "allocator") }
    }
}

export! {
    fn TRITONSERVER_ResponseAllocatorSetQueryFunction(allocator: *mut ResponseAllocator, query_fn: QueryFn) {
        // SAFETY: a live allocator, used by one thread at a time (the header's contract).
        unsafe { super::super::boundary::borrow_mut(allocator, "allocator")? }._query = query_fn;
        Ok(())
    }
}

/// `TRITONSERVER_ResponseAllocatorBufferAttributesFn_t`.
type BufferAttributesFn = Option<
    unsafe extern "C" fn(
        *mut ResponseAllocator,
        *const c_char,
        *mut super::super::buffer::BufferAttributes,
        *mut c_void,
        *mut c_void,
    ) -> *mut Error,
>;

export! {
    /// Kept for the API, as the query function: Tritium writes in-process outputs to CPU
    /// buffers only, whose attributes need nothing filled in.
    fn TRITONSERVER_ResponseAllocatorSetBufferAttributesFunction(allocator: *mut ResponseAllocator, buffer_attributes_fn: BufferAttributesFn) {
        // SAFETY: a live allocator, used by one thread at a time (the header's contract).
        unsafe { super::super::boundary::borrow_mut(allocator, "allocator")? }._buffer_attributes = buffer_attributes_fn;
        Ok(())
    }
}

export! {
    fn TRITONSERVER_ResponseAllocatorDelete(allocator: *mut ResponseAllocator) {
        if !allocator.is_null() {
            // SAFETY: the caller gives up an allocator made by `ResponseAllocatorNew`, once.
            drop(unsafe { Box::from_raw(allocator) });
        }
        Ok(())
    }
}

/// A response handle from the backend, borrowed for one call.
///
/// # Safety
/// `r` must be null or a live response handed to the backend's response callback.
unsafe fn resp<'a>(r: *mut InferenceResponse) -> Result<&'a InferenceResponse, Error> {
    // SAFETY: as the caller promises.
    unsafe { borrow(r, "inference response") }
}

export! {
    fn TRITONSERVER_InferenceResponseDelete(response: *mut InferenceResponse) {
        if !response.is_null() {
            // SAFETY: the backend gives up a response Tritium handed to its callback, once.
            drop(unsafe { Box::from_raw(response) });
        }
        Ok(())
    }
}

export! {
    /// The response's error, as a new error object the caller deletes (as Triton's core makes
    /// one from the response's status on each call); null on success.
    fn TRITONSERVER_InferenceResponseError(response: *mut InferenceResponse) {
        // SAFETY: a live response (the header's contract).
        match &unsafe { resp(response) }?.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

export! {
    fn TRITONSERVER_InferenceResponseOutputCount(response: *mut InferenceResponse, count: *mut u32) {
        // SAFETY: a live response and the caller's out-parameter.
        unsafe { write(count, resp(response)?.outputs.len() as u32, "count") }
    }
}

export! {
    fn TRITONSERVER_InferenceResponseOutput(response: *mut InferenceResponse, index: u32, name: *mut *const c_char, datatype: *mut DataType, shape: *mut *const i64, dim_count: *mut u64, base: *mut *const c_void, byte_size: *mut usize, memory_type: *mut MemoryType, memory_type_id: *mut i64, userp: *mut *mut c_void) {
        // SAFETY: a live response (the header's contract).
        let r = unsafe { resp(response) }?;
        let o = r.outputs.get(index as usize).ok_or_else(|| {
            Error::new(ERROR_INVALID_ARG, format!("out of bounds index {index}: response has {} outputs", r.outputs.len()))
        })?;
        // SAFETY: the caller's out-parameters; the pointers written stay valid while the
        // response lives.
        unsafe {
            write(name, o.name.as_ptr(), "name")?;
            write(datatype, o.datatype, "datatype")?;
            write(shape, o.shape.as_ptr(), "shape")?;
            write(dim_count, o.shape.len() as u64, "dim_count")?;
            write(base, o.buffer.cast_const(), "base")?;
            write(byte_size, o.byte_size, "byte_size")?;
            write(memory_type, o.memory_type, "memory_type")?;
            write(memory_type_id, o.memory_type_id, "memory_type_id")?;
            write(userp, o.buffer_userp, "userp")
        }
    }
}

export! {
    /// The id of the request the response answers (empty when it had none).
    fn TRITONSERVER_InferenceResponseId(response: *mut InferenceResponse, request_id: *mut *const c_char) {
        // SAFETY: a live response and the caller's out-parameter; the id lives as long as it.
        unsafe { write(request_id, resp(response)?.id.as_ptr(), "request_id") }
    }
}

export! {
    /// The model that answered, and its version.
    fn TRITONSERVER_InferenceResponseModel(response: *mut InferenceResponse, model_name: *mut *const c_char, model_version: *mut i64) {
        // SAFETY: a live response and the caller's out-parameters; the name lives as long as it.
        unsafe {
            let r = resp(response)?;
            write(model_name, r.model.as_ptr(), "model_name")?;
            write(model_version, r.version, "model_version")
        }
    }
}

export! {
    fn TRITONSERVER_InferenceResponseParameterCount(response: *mut InferenceResponse, count: *mut u32) {
        // SAFETY: a live response and the caller's out-parameter.
        unsafe { write(count, resp(response)?.parameters.len() as u32, "count") }
    }
}

export! {
    fn TRITONSERVER_InferenceResponseParameter(response: *mut InferenceResponse, index: u32, name: *mut *const c_char, kind: *mut ParameterType, vvalue: *mut *const c_void) {
        // SAFETY: a live response (the header's contract).
        let r = unsafe { resp(response) }?;
        let p = r.parameters.get(index as usize).ok_or_else(|| {
            Error::new(ERROR_INVALID_ARG, format!("out of bounds index {index}: response has {} parameters", r.parameters.len()))
        })?;
        // SAFETY: the caller's out-parameters; the values live as long as the response.
        unsafe {
            write(name, p.key.as_ptr(), "name")?;
            write(kind, p.kind, "type")?;
            write(vvalue, p.value(), "vvalue")
        }
    }
}

export! {
    /// Refused: Tritium gives in-process responses no classification labels.
    fn TRITONSERVER_InferenceResponseOutputClassificationLabel(response: *mut InferenceResponse, index: u32, class_index: usize, label: *mut *const c_char) {
        let _ = (class_index, label);
        // SAFETY: a live response (the header's contract).
        let r = unsafe { resp(response) }?;
        if index as usize >= r.outputs.len() {
            return Err(Error::new(ERROR_INVALID_ARG, format!("out of bounds index {index}: response has {} outputs", r.outputs.len())));
        }
        Err(Error::new(ERROR_UNSUPPORTED, "Tritium does not give classification labels to in-process responses"))
    }
}
