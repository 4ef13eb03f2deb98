//! The rest of `TRITONSERVER_InferenceRequest`'s functions: reading back what the backend set
//! (id, flags, correlation id, priority, timeout, cancellation), removing one input or one
//! requested output, and the other ways to append input data. A raw input (whose name, type
//! and shape come from the model's config) is refused with a clear error.

use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;

use super::super::abi::*;
use super::super::boundary::{borrow, c_string, export, text, write};
use super::super::buffer::BufferAttributes;
use super::super::error::Error;
use super::request::{req, InferenceRequest, TRITONSERVER_InferenceRequestAppendInputData};

export! {
    /// The id set with `InferenceRequestSetId`; empty when none was.
    fn TRITONSERVER_InferenceRequestId(request: *mut InferenceRequest, id: *mut *const c_char) {
        // SAFETY: a live request (the header's contract).
        let r = unsafe { req(request) }?;
        r.id_text = c_string(&r.message.request.id);
        // SAFETY: the caller's out-parameter; the string lives as long as the request.
        unsafe { write(id, r.id_text.as_ptr(), "id") }
    }
}

export! {
    fn TRITONSERVER_InferenceRequestFlags(request: *mut InferenceRequest, flags: *mut u32) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(flags, req(request)?.message.request.flags, "flags") }
    }
}

export! {
    /// The numeric correlation id; an error when the request has a string one, as in Triton.
    fn TRITONSERVER_InferenceRequestCorrelationId(request: *mut InferenceRequest, correlation_id: *mut u64) {
        // SAFETY: a live request (the header's contract).
        let r = &unsafe { req(request) }?.message.request;
        if r.correlation_text.is_some() {
            return Err(Error::new(ERROR_INVALID_ARG, "given request's correlation id is not an unsigned int"));
        }
        // SAFETY: the caller's out-parameter.
        unsafe { write(correlation_id, r.correlation_id, "correlation_id") }
    }
}

export! {
    /// The string correlation id; an error when the request has a numeric one, as in Triton.
    fn TRITONSERVER_InferenceRequestCorrelationIdString(request: *mut InferenceRequest, correlation_id: *mut *const c_char) {
        // SAFETY: a live request (the header's contract).
        let r = unsafe { req(request) }?;
        let Some(text) = &r.message.request.correlation_text else {
            return Err(Error::new(ERROR_INVALID_ARG, "given request's correlation id is not a string"));
        };
        r.correlation_text = c_string(text);
        // SAFETY: the caller's out-parameter; the string lives as long as the request.
        unsafe { write(correlation_id, r.correlation_text.as_ptr(), "correlation_id") }
    }
}

export! {
    /// The priority, cut to 32 bits as Triton's deprecated getter does.
    fn TRITONSERVER_InferenceRequestPriority(request: *mut InferenceRequest, priority: *mut u32) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(priority, req(request)?.message.priority as u32, "priority") }
    }
}

export! {
    fn TRITONSERVER_InferenceRequestPriorityUInt64(request: *mut InferenceRequest, priority: *mut u64) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(priority, req(request)?.message.priority, "priority") }
    }
}

export! {
    fn TRITONSERVER_InferenceRequestTimeoutMicroseconds(request: *mut InferenceRequest, timeout_us: *mut u64) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe { write(timeout_us, req(request)?.message.request.timeout_us, "timeout_us") }
    }
}

export! {
    /// Marks the request cancelled (`InferenceRequestIsCancelled` answers true). Triton's
    /// cancellation is best effort; Tritium does not stop a request already submitted.
    fn TRITONSERVER_InferenceRequestCancel(request: *mut InferenceRequest) {
        // SAFETY: a live request (the header's contract).
        unsafe { req(request) }?.message.request.cancel.store(true, Ordering::Relaxed);
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestIsCancelled(request: *mut InferenceRequest, is_cancelled: *mut bool) {
        // SAFETY: a live request and the caller's out-parameter.
        unsafe {
            let cancelled = req(request)?.message.request.cancel.load(Ordering::Relaxed);
            write(is_cancelled, cancelled, "is_cancelled")
        }
    }
}

export! {
    fn TRITONSERVER_InferenceRequestRemoveInput(request: *mut InferenceRequest, name: *const c_char) {
        // SAFETY: a live request and a C string (the header's contract).
        let (r, name) = unsafe { (req(request)?, text(name, "name")?) };
        r.input(name)?;
        r.inputs.retain(|i| i.name != name);
        Ok(())
    }
}

export! {
    fn TRITONSERVER_InferenceRequestRemoveRequestedOutput(request: *mut InferenceRequest, name: *const c_char) {
        // SAFETY: a live request and a C string (the header's contract).
        let (r, name) = unsafe { (req(request)?, text(name, "name")?) };
        // As in Triton, an output that was not requested is no error.
        r.message.request.outputs.retain(|o| o != name);
        Ok(())
    }
}

export! {
    /// Refused: Tritium needs each input's datatype and shape from the backend.
    fn TRITONSERVER_InferenceRequestAddRawInput(request: *mut InferenceRequest, name: *const c_char) {
        // SAFETY: a live request and a C string (the header's contract).
        let (r, name) = unsafe { (req(request)?, text(name, "name")?) };
        Err(Error::new(
            ERROR_UNSUPPORTED,
            format!(
                "raw input '{name}' for model '{}': Tritium takes in-process inputs with their datatype and shape (TRITONSERVER_InferenceRequestAddInput)",
                r.message.model
            ),
        ))
    }
}

export! {
    /// As `AppendInputData`: Tritium has one host policy, so the name changes nothing.
    fn TRITONSERVER_InferenceRequestAppendInputDataWithHostPolicy(request: *mut InferenceRequest, name: *const c_char, base: *const c_void, byte_size: usize, memory_type: MemoryType, memory_type_id: i64, host_policy_name: *const c_char) {
        let _ = host_policy_name;
        // SAFETY: forwarded as the backend gave them (the header's contract).
        let e = unsafe { TRITONSERVER_InferenceRequestAppendInputData(request, name, base, byte_size, memory_type, memory_type_id) };
        // SAFETY: an error object just made for this call, or null.
        unsafe { Error::from_raw(e) }.map_or(Ok(()), Err)
    }
}

export! {
    /// As `AppendInputData`, with the size and memory type read from `buffer_attributes`.
    fn TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(request: *mut InferenceRequest, name: *const c_char, base: *const c_void, buffer_attributes: *mut BufferAttributes) {
        // SAFETY: live attributes (the header's contract).
        let a = unsafe { borrow(buffer_attributes, "buffer_attributes") }?;
        // SAFETY: forwarded as the backend gave them (the header's contract).
        let e = unsafe {
            TRITONSERVER_InferenceRequestAppendInputData(request, name, base, a.byte_size(), a.memory_type(), a.memory_type_id())
        };
        // SAFETY: an error object just made for this call, or null.
        unsafe { Error::from_raw(e) }.map_or(Ok(()), Err)
    }
}
