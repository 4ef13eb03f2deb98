//! `TRITONSERVER_InferenceRequest`: a request a backend builds for the in-process API. Its
//! input data is copied when it is submitted (the backend's buffers need not outlive the call),
//! and the request object itself stays the backend's until its release callback.

use std::ffi::{c_char, c_void};

use bytes::Bytes;

use super::super::abi::*;
use super::super::boundary::{borrow_mut, export, text, write};
use super::super::error::Error;
use super::super::host::{HostParam, HostTensor};
use super::super::model::Server;
use super::response::{Delivery, Origin, ResponseAllocator, ResponseCallback};
use super::InProcessRequest;

/// `TRITONSERVER_InferenceRequestReleaseFn_t`.
pub type ReleaseFn = Option<unsafe extern "C" fn(*mut InferenceRequest, u32, *mut c_void)>;

/// An input being built: its data arrives in pieces (`AppendInputData`).
pub(super) struct Input {
    pub(super) name: String,
    datatype: DataType,
    shape: Vec<i64>,
    pub(super) data: Vec<u8>,
}

/// One request as the backend builds it behind `TRITONSERVER_InferenceRequest*`.
pub struct InferenceRequest {
    pub(super) message: InProcessRequest,
    pub(super) inputs: Vec<Input>,
    release: (ReleaseFn, usize),
    response: Option<ResponseCallback>,
    /// The id and string correlation id as C strings, for the getters (the request owns them).
    pub(super) id_text: std::ffi::CString,
    pub(super) correlation_text: std::ffi::CString,
}

impl InferenceRequest {
    fn new(model: &str, version: i64) -> Self {
        InferenceRequest {
            message: InProcessRequest {
                model: model.to_string(),
                version: super::version(version),
                ..Default::default()
            },
            inputs: Vec::new(),
            release: (None, 0),
            response: None,
            id_text: std::ffi::CString::default(),
            correlation_text: std::ffi::CString::default(),
        }
    }

    pub(super) fn input(&mut self, name: &str) -> Result<&mut Input, Error> {
        let model = &self.message.model;
        self.inputs.iter_mut().find(|i| i.name == name).ok_or_else(|| {
            Error::new(ERROR_INVALID_ARG, format!("input '{name}' does not exist in request for model '{model}'"))
        })
    }

    /// The request as the server takes it (inputs copied out) and where its answers go.
    /// `this` is the request's own handle, for the release callback.
    pub(super) fn submit(&mut self, this: *mut InferenceRequest) -> Result<(InProcessRequest, Delivery), Error> {
        let Some(response) = self.response.clone() else {
            return Err(Error::new(
                ERROR_INVALID_ARG,
                format!("inference request for model '{}' has no response callback", self.message.model),
            ));
        };
        let mut message = self.message.clone();
        message.request.inputs = self
            .inputs
            .iter()
            .map(|i| HostTensor {
                name: i.name.clone(),
                datatype: data_type_name(i.datatype).to_string(),
                shape: i.shape.clone(),
                data: Bytes::copy_from_slice(&i.data),
            })
            .collect();
        let origin = Origin {
            id: message.request.id.clone(),
            model: message.model.clone(),
            version: message.version.unwrap_or(-1),
        };
        Ok((message, Delivery::new(response, origin, self.release.0, this as usize, self.release.1)))
    }
}

/// A request handle from the backend, borrowed for one call.
///
/// # Safety
/// `r` must be null or a live request made by `InferenceRequestNew`, used by one thread at a
/// time (the header's contract).
pub(super) unsafe fn req<'a>(r: *mut InferenceRequest) -> Result<&'a mut InferenceRequest, Error> {
    // SAFETY: as the caller promises.
    unsafe { borrow_mut(r, "inference request") }
}

export! {
    fn TRITONSERVER_InferenceRequestNew(request: *mut *mut InferenceRequest, server: *mut Server, model_name: *const c_char, model_version: i64) {
        if server.is_null() {
            return Err(Error::new(ERROR_INVALID_ARG, "server is null"));
        }
        // SAFETY: a C string argument (the header's contract).
        let name = unsafe { text(model_name, "model_name") }?;
        let new = Box::into_raw(Box::new(InferenceRequest::new(name, model_version)));
        // SAFETY: the caller's out-parameter.
        unsafe { write(request, new, "inference request") }.inspect_err(|_| {
            // SAFETY: made just above and never handed out.
            drop(unsafe { Box::from_raw(new) });
        })
    }
}

export! {
    fn TRITONSERVER_InferenceRequestDelete(request: *mut InferenceRequest) {
        if !request.is_null() {
            // SAFETY: the caller gives up a request made by `InferenceRequestNew`, once.
            drop(unsafe { Box::from_raw(request) });
        }
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetId(request: *mut InferenceRequest, id: *const c_char) {
        // SAFETY: a live request and a C string (the header's contract).
        unsafe { req(request)?.message.request.id = text(id, "id")?.to_string() };
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetFlags(request: *mut InferenceRequest, flags: u32) {
        // SAFETY: a live request (the header's contract).
        unsafe { req(request) }?.message.request.flags = flags;
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetCorrelationId(request: *mut InferenceRequest, correlation_id: u64) {
        // SAFETY: a live request (the header's contract).
        let r = &mut unsafe { req(request) }?.message.request;
        r.correlation_id = correlation_id;
        r.correlation_text = None;
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetCorrelationIdString(request: *mut InferenceRequest, correlation_id: *const c_char) {
        // SAFETY: a live request and a C string (the header's contract).
        let (r, id) = unsafe { (req(request)?, text(correlation_id, "correlation_id")?) };
        r.message.request.correlation_id = 0;
        r.message.request.correlation_text = Some(id.to_string());
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetPriority(request: *mut InferenceRequest, priority: u32) {
        // SAFETY: a live request (the header's contract).
        unsafe { req(request) }?.message.priority = u64::from(priority);
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetPriorityUInt64(request: *mut InferenceRequest, priority: u64) {
        // SAFETY: a live request (the header's contract).
        unsafe { req(request) }?.message.priority = priority;
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(request: *mut InferenceRequest, timeout_us: u64) {
        // SAFETY: a live request (the header's contract).
        unsafe { req(request) }?.message.request.timeout_us = timeout_us;
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestAddInput(request: *mut InferenceRequest, name: *const c_char, datatype: DataType, shape: *const i64, dim_count: u64) {
        // SAFETY: a live request and a C string (the header's contract).
        let (r, name) = unsafe { (req(request)?, text(name, "name")?) };
        if data_type_name(datatype) == "INVALID" {
            return Err(Error::new(ERROR_INVALID_ARG, format!("input '{name}' has an invalid datatype {datatype}")));
        }
        if r.inputs.iter().any(|i| i.name == name) {
            return Err(Error::new(ERROR_INVALID_ARG, format!("input '{name}' already exists in request")));
        }
        let shape = if dim_count == 0 {
            Vec::new()
        } else if shape.is_null() {
            return Err(Error::new(ERROR_INVALID_ARG, "shape is null"));
        } else {
            // SAFETY: the header's contract: `shape` holds `dim_count` dims.
            unsafe { std::slice::from_raw_parts(shape, dim_count as usize) }.to_vec()
        };
        r.inputs.push(Input { name: name.to_string(), datatype, shape, data: Vec::new() });
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestRemoveAllInputs(request: *mut InferenceRequest) {
        // SAFETY: a live request (the header's contract).
        unsafe { req(request) }?.inputs.clear();
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestAppendInputData(request: *mut InferenceRequest, name: *const c_char, base: *const c_void, byte_size: usize, memory_type: MemoryType, memory_type_id: i64) {
        let _ = memory_type_id;
        // SAFETY: a live request and a C string (the header's contract).
        let (r, name) = unsafe { (req(request)?, text(name, "name")?) };
        if memory_type == MEMORY_GPU {
            return Err(Error::new(
                ERROR_UNSUPPORTED,
                format!("input '{name}': Tritium takes in-process input data in CPU memory only"),
            ));
        }
        let input = r.input(name)?;
        if byte_size > 0 {
            if base.is_null() {
                return Err(Error::new(ERROR_INVALID_ARG, format!("input '{name}': data is null")));
            }
            // SAFETY: the header's contract: `base` holds `byte_size` readable bytes in CPU
            // memory (checked above) for the duration of this call; they are copied here.
            input.data.extend_from_slice(unsafe { std::slice::from_raw_parts(base.cast::<u8>(), byte_size) });
        }
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestRemoveAllInputData(request: *mut InferenceRequest, name: *const c_char) {
        // SAFETY: a live request and a C string (the header's contract).
        let (r, name) = unsafe { (req(request)?, text(name, "name")?) };
        r.input(name)?.data.clear();
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestAddRequestedOutput(request: *mut InferenceRequest, name: *const c_char) {
        // SAFETY: a live request and a C string (the header's contract).
        let (r, name) = unsafe { (req(request)?, text(name, "name")?) };
        let outputs = &mut r.message.request.outputs;
        if !outputs.iter().any(|o| o == name) {
            outputs.push(name.to_string());
        }
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(request: *mut InferenceRequest) {
        // SAFETY: a live request (the header's contract).
        unsafe { req(request) }?.message.request.outputs.clear();
        Ok(())
    }
}

fn set_parameter(request: *mut InferenceRequest, key: *const c_char, value: HostParam) -> Result<(), Error> {
    // SAFETY: a live request and a C string (the header's contract).
    let (r, key) = unsafe { (req(request)?, text(key, "key")?) };
    let params = &mut r.message.request.parameters;
    params.retain(|(k, _)| k != key);
    params.push((key.to_string(), value));
    Ok(())
}

export! {
    fn TRITONSERVER_InferenceRequestSetStringParameter(request: *mut InferenceRequest, key: *const c_char, value: *const c_char) {
        // SAFETY: a C string argument (the header's contract).
        let value = unsafe { text(value, "value") }?.to_string();
        set_parameter(request, key, HostParam::Str(value))
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetIntParameter(request: *mut InferenceRequest, key: *const c_char, value: i64) {
        set_parameter(request, key, HostParam::Int(value))
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetBoolParameter(request: *mut InferenceRequest, key: *const c_char, value: bool) {
        set_parameter(request, key, HostParam::Bool(value))
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetDoubleParameter(request: *mut InferenceRequest, key: *const c_char, value: f64) {
        set_parameter(request, key, HostParam::Double(value))
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetReleaseCallback(request: *mut InferenceRequest, release_fn: ReleaseFn, userp: *mut c_void) {
        // SAFETY: a live request (the header's contract).
        unsafe { req(request) }?.release = (release_fn, userp as usize);
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestSetResponseCallback(request: *mut InferenceRequest, allocator: *mut ResponseAllocator, allocator_userp: *mut c_void, response_fn: super::response::ResponseFn, response_userp: *mut c_void) {
        // SAFETY: a live request (the header's contract).
        let r = unsafe { req(request) }?;
        let Some(response_fn) = response_fn else {
            return Err(Error::new(ERROR_INVALID_ARG, "response_fn is null"));
        };
        r.response = Some(ResponseCallback::new(allocator, allocator_userp, response_fn, response_userp));
        Ok(())
    }
}

/// Builds a request through the exported functions, for tests.
#[cfg(test)]
pub(super) fn build(model: &str) -> *mut InferenceRequest {
    let name = std::ffi::CString::new(model).unwrap();
    let mut r = std::ptr::null_mut();
    let server = (&super::super::model::SERVER as *const Server).cast_mut();
    // SAFETY: valid out-parameter, server and C string.
    assert!(unsafe { TRITONSERVER_InferenceRequestNew(&mut r, server, name.as_ptr(), -1) }.is_null());
    r
}
