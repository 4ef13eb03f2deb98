//! `TRITONSERVER_InferenceTrace`: a traced request's trace, as a backend sees it. Tritium hands
//! a backend the trace of a request the trace settings sampled (`TRITONBACKEND_RequestTrace`;
//! null for an untraced one, as in Triton). A backend that makes a request of its own for that
//! request (the Python backend's BLS, `pb_utils.InferenceRequest(..., trace=request.trace())`)
//! spawns a child trace (`TRITONSERVER_InferenceTraceSpawnChildTrace`) and hands it to
//! `TRITONSERVER_ServerInferAsync`, which gives it up with the request: the server traces that
//! request as a child of the caller's, so its record names the caller's trace as its parent.
//!
//! The trace itself is the engine's (`HostTrace::trace`, opaque here); this module only carries
//! it between the backend and the server.

use std::any::Any;
use std::ffi::{c_char, CString};
use std::sync::Arc;

use super::abi::*;
use super::boundary::{borrow, c_string, export, write};
use super::error::Error;

/// A request's trace on its way through a backend: the engine's trace object, which comes back
/// to the engine on the requests a backend makes under it; and its trace context (what
/// `TRITONSERVER_InferenceTraceContext` answers: the W3C context of the model's span in
/// OpenTelemetry mode, empty in Triton's trace mode).
#[derive(Clone)]
pub struct HostTrace {
    pub trace: Arc<dyn Any + Send + Sync>,
    pub context: String,
}

impl std::fmt::Debug for HostTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostTrace").field("context", &self.context).finish_non_exhaustive()
    }
}

/// What a `TRITONSERVER_InferenceTrace*` points to.
pub struct InferenceTrace {
    /// The traced request's trace; for a spawned child, the parent's, until the server makes
    /// the child when the child's request arrives (it then knows the model).
    of: HostTrace,
    context: CString,
    /// A child spawned by the backend, owned by it until `ServerInferAsync` takes it over;
    /// false for a request's own trace, which the request owns.
    spawned: bool,
}

impl InferenceTrace {
    /// A request's own trace.
    pub(crate) fn of_request(trace: HostTrace) -> Box<InferenceTrace> {
        let context = c_string(&trace.context);
        Box::new(InferenceTrace { of: trace, context, spawned: false })
    }

    /// Takes over a child trace handed to `ServerInferAsync`: the trace its request is a child
    /// of. Refuses a request's own trace, which is not the backend's to give.
    ///
    /// # Safety
    /// `trace` must be a live trace object: a request's, or a child spawned by
    /// `InferenceTraceSpawnChildTrace` and not yet given up.
    pub(crate) unsafe fn take_child(trace: *mut InferenceTrace) -> Result<HostTrace, Error> {
        // SAFETY: forwarded from the caller: a live trace object.
        let t = unsafe { borrow(trace, "trace") }?;
        if !t.spawned {
            return Err(Error::new(
                ERROR_INVALID_ARG,
                "the trace given with an inference request must be a child trace from TRITONSERVER_InferenceTraceSpawnChildTrace",
            ));
        }
        // SAFETY: a spawned child is a `Box` given to the backend, which now gives it up, once.
        Ok(unsafe { Box::from_raw(trace) }.of)
    }
}

export! {
    /// The trace context: in OpenTelemetry mode `{"traceparent":"00-…"}` naming the model's span
    /// of the traced request, as Triton gives it (what `request.trace().get_context()` answers
    /// in a model.py); empty in Triton's trace mode.
    fn TRITONSERVER_InferenceTraceContext(trace: *mut InferenceTrace, trace_context: *mut *const c_char) {
        // SAFETY: a live trace object and the caller's out-parameter.
        unsafe { write(trace_context, borrow(trace, "trace")?.context.as_ptr(), "trace_context") }
    }
}

export! {
    /// A child of `trace` for a request the backend makes under it; null for a null trace, as
    /// in Triton. The backend owns the child until it hands it to `ServerInferAsync` (or
    /// deletes it with `InferenceTraceDelete`).
    fn TRITONSERVER_InferenceTraceSpawnChildTrace(trace: *mut InferenceTrace, child_trace: *mut *mut InferenceTrace) {
        // SAFETY: a live trace object or null.
        let child = match unsafe { trace.as_ref() } {
            None => std::ptr::null_mut(),
            Some(parent) => Box::into_raw(Box::new(InferenceTrace {
                of: parent.of.clone(),
                context: parent.context.clone(),
                spawned: true,
            })),
        };
        // SAFETY: the caller's out-parameter.
        unsafe { write(child_trace, child, "child_trace") }
    }
}

export! {
    /// Deletes a child trace the backend spawned and did not hand to a request.
    fn TRITONSERVER_InferenceTraceDelete(trace: *mut InferenceTrace) {
        if trace.is_null() {
            return Ok(());
        }
        // SAFETY: a live trace object (the header's contract); only a spawned child is taken.
        drop(unsafe { InferenceTrace::take_child(trace) }?);
        Ok(())
    }
}

/// What Tritium does not give a backend of a trace: its ids, model and request (the trace file
/// numbers a request's records when it writes them), a context set by the backend, and a
/// backend's own activities. A call is told so.
fn trace_unsupported(trace: *mut InferenceTrace, what: &str) -> Result<(), Error> {
    // SAFETY: a live trace object (the header's contract).
    unsafe { borrow(trace, "trace") }?;
    Err(Error::new(ERROR_UNSUPPORTED, format!("Tritium does not give backends {what}")))
}

export! {
    fn TRITONSERVER_InferenceTraceId(trace: *mut InferenceTrace, id: *mut u64) {
        let _ = id;
        trace_unsupported(trace, "a trace's id")
    }
}

export! {
    fn TRITONSERVER_InferenceTraceParentId(trace: *mut InferenceTrace, parent_id: *mut u64) {
        let _ = parent_id;
        trace_unsupported(trace, "a trace's parent id")
    }
}

export! {
    fn TRITONSERVER_InferenceTraceModelName(trace: *mut InferenceTrace, model_name: *mut *const c_char) {
        let _ = model_name;
        trace_unsupported(trace, "a trace's model name")
    }
}

export! {
    fn TRITONSERVER_InferenceTraceModelVersion(trace: *mut InferenceTrace, model_version: *mut i64) {
        let _ = model_version;
        trace_unsupported(trace, "a trace's model version")
    }
}

export! {
    fn TRITONSERVER_InferenceTraceRequestId(trace: *mut InferenceTrace, request_id: *mut *const c_char) {
        let _ = request_id;
        trace_unsupported(trace, "a trace's request id")
    }
}

export! {
    fn TRITONSERVER_InferenceTraceSetContext(trace: *mut InferenceTrace, trace_context: *const c_char) {
        let _ = trace_context;
        trace_unsupported(trace, "a way to set a trace's context")
    }
}

export! {
    fn TRITONSERVER_InferenceTraceReportActivity(trace: *mut InferenceTrace, timestamp: u64, activity_name: *const c_char) {
        let _ = (timestamp, activity_name);
        trace_unsupported(trace, "a way to report their own trace activities")
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    fn engine_trace(context: &str) -> HostTrace {
        HostTrace { trace: Arc::new(7u32), context: context.into() }
    }

    #[test]
    fn a_spawned_child_carries_its_parents_trace_and_is_taken_once() {
        let own = Box::into_raw(InferenceTrace::of_request(engine_trace("{\"k\":1}")));
        let mut child = std::ptr::null_mut();
        // SAFETY: a live trace object and an out-parameter.
        assert!(unsafe { TRITONSERVER_InferenceTraceSpawnChildTrace(own, &mut child) }.is_null());
        assert!(!child.is_null());
        let mut text = std::ptr::null();
        // SAFETY: the child is live; the context lives as long as it.
        assert!(unsafe { TRITONSERVER_InferenceTraceContext(child, &mut text) }.is_null());
        // SAFETY: a C string of the child's.
        assert_eq!(unsafe { CStr::from_ptr(text) }.to_str().unwrap(), "{\"k\":1}");
        // SAFETY: a spawned child, given up once.
        let parent = unsafe { InferenceTrace::take_child(child) }.unwrap();
        assert_eq!(parent.trace.downcast_ref::<u32>(), Some(&7));
        // SAFETY: the request's own trace is live; it is refused, not freed.
        let e = unsafe { InferenceTrace::take_child(own) }.unwrap_err();
        assert!(e.message().contains("child trace"), "{}", e.message());
        // SAFETY: made by `Box::into_raw` above.
        drop(unsafe { Box::from_raw(own) });
    }

    #[test]
    fn a_null_trace_spawns_a_null_child() {
        let mut child = std::ptr::dangling_mut::<InferenceTrace>();
        // SAFETY: null is allowed; an out-parameter.
        assert!(unsafe { TRITONSERVER_InferenceTraceSpawnChildTrace(std::ptr::null_mut(), &mut child) }.is_null());
        assert!(child.is_null());
        // SAFETY: null is allowed.
        assert!(unsafe { TRITONSERVER_InferenceTraceDelete(std::ptr::null_mut()) }.is_null());
    }
}
