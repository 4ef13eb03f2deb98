//! The parts of the API a backend calls into the server itself: the in-process inference API
//! that BLS uses and traces. Tritium does not serve them yet: each answers
//! UNSUPPORTED with what is missing, so a backend that links them loads, and a model that
//! calls them gets a clear error. Response allocators are real objects (the Python backend
//! makes one per instance at start).

use std::ffi::{c_char, c_void};

use super::abi::*;
use super::boundary::{export, write};
use super::error::Error;

type Fn = Option<unsafe extern "C" fn()>;

/// A response allocator's callbacks, kept for when the in-process API arrives.
pub struct ResponseAllocator {
    _alloc: Fn,
    _release: Fn,
    _start: Fn,
    _query: Fn,
}

export! {
    fn TRITONSERVER_ResponseAllocatorNew(allocator: *mut *mut ResponseAllocator, alloc_fn: Fn, release_fn: Fn, start_fn: Fn) {
        let new = Box::into_raw(Box::new(ResponseAllocator { _alloc: alloc_fn, _release: release_fn, _start: start_fn, _query: None }));
        // SAFETY: the caller's out-parameter.
        unsafe { write(allocator, new, "allocator") }
    }
}

export! {
    fn TRITONSERVER_ResponseAllocatorSetQueryFunction(allocator: *mut ResponseAllocator, query_fn: Fn) {
        // SAFETY: a live allocator, used by one thread at a time (the header's contract).
        unsafe { super::boundary::borrow_mut(allocator, "allocator")? }._query = query_fn;
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

const BLS: &str = "in-process inference (BLS) is not supported by Tritium yet";
const TRACES: &str = "traces are not handed to backends by Tritium yet";

/// Exported functions that answer UNSUPPORTED with a reason.
macro_rules! unsupported {
    ($reason:expr => $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?);)*) => {$(
        export! {
            fn $name($($arg: $ty),*) {
                let _ = ($($arg,)*);
                Err(Error::new(ERROR_UNSUPPORTED, format!("{}: {}", stringify!($name), $reason)))
            }
        }
    )*};
}

type P = *mut c_void;
type S = *const c_char;

unsupported! { BLS =>
    fn TRITONSERVER_InferenceRequestNew(request: *mut P, server: P, model_name: S, model_version: i64);
    fn TRITONSERVER_InferenceRequestDelete(request: P);
    fn TRITONSERVER_InferenceRequestAddInput(request: P, name: S, datatype: DataType, shape: *const i64, dim_count: u64);
    fn TRITONSERVER_InferenceRequestAddRequestedOutput(request: P, name: S);
    fn TRITONSERVER_InferenceRequestAppendInputData(request: P, name: S, base: *const c_void, byte_size: usize, memory_type: MemoryType, memory_type_id: i64);
    fn TRITONSERVER_InferenceRequestSetBoolParameter(request: P, key: S, value: bool);
    fn TRITONSERVER_InferenceRequestSetIntParameter(request: P, key: S, value: i64);
    fn TRITONSERVER_InferenceRequestSetStringParameter(request: P, key: S, value: S);
    fn TRITONSERVER_InferenceRequestSetCorrelationId(request: P, correlation_id: u64);
    fn TRITONSERVER_InferenceRequestSetCorrelationIdString(request: P, correlation_id: S);
    fn TRITONSERVER_InferenceRequestSetFlags(request: P, flags: u32);
    fn TRITONSERVER_InferenceRequestSetId(request: P, id: S);
    fn TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(request: P, timeout_us: u64);
    fn TRITONSERVER_InferenceRequestSetReleaseCallback(request: P, release_fn: Fn, userp: P);
    fn TRITONSERVER_InferenceRequestSetResponseCallback(request: P, allocator: P, allocator_userp: P, response_fn: Fn, response_userp: P);
    fn TRITONSERVER_InferenceResponseDelete(response: P);
    fn TRITONSERVER_InferenceResponseError(response: P);
    fn TRITONSERVER_InferenceResponseOutputCount(response: P, count: *mut u32);
    fn TRITONSERVER_InferenceResponseOutput(response: P, index: u32, name: *mut S, datatype: *mut DataType, shape: *mut *const i64, dim_count: *mut u64, base: *mut *const c_void, byte_size: *mut usize, memory_type: *mut MemoryType, memory_type_id: *mut i64, userp: *mut P);
    fn TRITONSERVER_ServerInferAsync(server: P, request: P, trace: P);
    fn TRITONSERVER_ServerModelIsReady(server: P, model_name: S, model_version: i64, ready: *mut bool);
    fn TRITONSERVER_ServerModelTransactionProperties(server: P, model_name: S, model_version: i64, txn_flags: *mut u32, voidp: *mut P);
    fn TRITONSERVER_ServerLoadModelWithParameters(server: P, model_name: S, parameters: *const P, parameter_count: u64);
    fn TRITONSERVER_ServerUnloadModel(server: P, model_name: S);
    fn TRITONSERVER_ServerUnloadModelAndDependents(server: P, model_name: S);
}

unsupported! { TRACES =>
    fn TRITONSERVER_InferenceTraceContext(trace: P, trace_context: *mut S);
    fn TRITONSERVER_InferenceTraceSpawnChildTrace(trace: P, child_trace: *mut P);
}
