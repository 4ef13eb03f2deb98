//! Traces handed to backends: Tritium does not serve them yet. Each function answers
//! UNSUPPORTED with what is missing, so a backend that links them loads, and a model that
//! calls them gets a clear error. (The in-process inference API is `inprocess`.)

use std::ffi::{c_char, c_void};

use super::abi::*;
use super::boundary::export;
use super::error::Error;

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

unsupported! { TRACES =>
    fn TRITONSERVER_InferenceTraceContext(trace: P, trace_context: *mut S);
    fn TRITONSERVER_InferenceTraceSpawnChildTrace(trace: P, child_trace: *mut P);
}
