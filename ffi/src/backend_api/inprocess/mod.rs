//! The in-process inference API a backend calls into the server itself: what the Python
//! backend's BLS (`pb_utils.InferenceRequest(...).exec()`, `async_exec()`, `exec(decoupled=True)`,
//! `pb_utils.load_model`) runs on. A backend builds a `TRITONSERVER_InferenceRequest`, hands it
//! to `TRITONSERVER_ServerInferAsync`, and gets each response through its response callback
//! with the output buffers its response allocator gave; the request comes back through its
//! release callback after the final response.
//!
//! The server behind it is the binary's: it registers an `InferenceServer` at start
//! (`set_inference_server`), and every call goes through the engine's usual entry (schedulers,
//! batching, sequences, ensembles, statistics). Nothing here blocks on inference.

pub(crate) mod request;
pub(crate) mod request_more;
pub(crate) mod response;
pub(crate) mod server_queries;

use std::ffi::{c_char, c_void};
use std::sync::{Arc, RwLock};

use request::InferenceRequest;

use super::abi::*;
use super::boundary::{borrow, export, text, write};
use super::error::Error;
use super::host::{HostError, HostParam, HostRequest, HostTensor};
use super::message::{ParamValue, Parameter};
use super::model::Server;
use super::trace::{HostTrace, InferenceTrace};

/// `TRITONSERVER_TXN_ONE_TO_ONE` and `TRITONSERVER_TXN_DECOUPLED`.
pub const TXN_ONE_TO_ONE: u32 = 1;
pub const TXN_DECOUPLED: u32 = 2;

/// One in-process request, as the server gets it: the model, its version (`None` = the
/// latest ready one), the priority, and the request itself.
#[derive(Debug, Clone, Default)]
pub struct InProcessRequest {
    pub model: String,
    pub version: Option<i64>,
    pub priority: u64,
    pub request: HostRequest,
    /// The trace of the backend's request this one is made for, when the backend handed a
    /// child of it (`ServerInferAsync`'s trace): the server traces this request as its child.
    pub parent_trace: Option<HostTrace>,
}

/// What the server sends back for an in-process request; exactly one `Final` or `Failed` ends it.
#[derive(Debug, Clone, PartialEq)]
pub enum InProcessEvent {
    /// A response with its outputs, the model version that answered and the response's
    /// parameters; `is_final` on the last.
    Response { outputs: Vec<HostTensor>, is_final: bool, version: i64, parameters: Vec<(String, HostParam)> },
    /// The end of a decoupled model's responses, without a response.
    Final,
    /// The request failed; the final event.
    Failed(HostError),
}

/// Where the server delivers an in-process request's events (from any thread).
pub type EventSink = Box<dyn FnMut(InProcessEvent) + Send>;

/// The server the in-process API reaches, implemented by the binary over its server facade.
pub trait InferenceServer: Send + Sync {
    /// Whether the model (version) is loaded and ready; false for an unknown model.
    fn model_ready(&self, model: &str, version: Option<i64>) -> bool;
    /// Whether the model is decoupled; an error for a model the server does not serve.
    fn model_decoupled(&self, model: &str, version: Option<i64>) -> Result<bool, HostError>;
    /// Validates and queues a request; its events go to `sink`, the last of them final. An
    /// error means the request was not queued and `sink` is dropped without a call.
    fn infer(&self, request: InProcessRequest, sink: EventSink) -> Result<(), HostError>;
    /// Loads (or reloads) a model, with an optional config JSON and `file:` contents; waits.
    fn load_model(&self, model: &str, config: Option<String>, files: Files) -> Result<(), HostError>;
    /// Starts unloading a model (and, with `dependents`, the ensembles that use it) and returns,
    /// as Triton does; an error only when the server refuses to.
    fn unload_model(&self, model: &str, dependents: bool) -> Result<(), HostError>;
    /// Whether the server is live, and ready.
    fn is_live(&self) -> bool;
    fn is_ready(&self) -> bool;
    /// The server's metadata, a model's metadata and config, the repository index (ready
    /// models only, or all) and model statistics (`None`: every model; a version `None`: every
    /// version), as the JSON the HTTP endpoints answer.
    fn metadata_json(&self) -> String;
    fn model_metadata_json(&self, model: &str, version: Option<i64>) -> Result<String, HostError>;
    fn model_config_json(&self, model: &str, version: Option<i64>) -> Result<String, HostError>;
    fn index_json(&self, ready_only: bool) -> Result<String, HostError>;
    fn statistics_json(&self, model: Option<&str>, version: Option<i64>) -> Result<String, HostError>;
    /// Whether the model batches along the first dimension (`max_batch_size` > 0).
    fn model_batches(&self, model: &str, version: Option<i64>) -> Result<bool, HostError>;
}

static SERVER: RwLock<Option<Arc<dyn InferenceServer>>> = RwLock::new(None);

/// Makes `server` the one the in-process API reaches (the binary calls it once at start).
pub fn set_inference_server(server: Arc<dyn InferenceServer>) {
    *SERVER.write().unwrap_or_else(|e| e.into_inner()) = Some(server);
}

fn server(handle: *mut Server) -> Result<Arc<dyn InferenceServer>, Error> {
    if handle.is_null() {
        return Err(Error::new(ERROR_INVALID_ARG, "server is null"));
    }
    SERVER
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or_else(|| Error::new(ERROR_UNAVAILABLE, "the server does not take in-process requests yet"))
}

/// Triton's version argument: -1 (or any value below 1) is the latest ready version.
fn version(v: i64) -> Option<i64> {
    (v > 0).then_some(v)
}

fn error(e: HostError) -> Error {
    Error::new(e.code, e.message)
}

export! {
    /// Queues the request; a child trace given with it is taken over (also when the call
    /// fails, as in Triton) and the request is traced as a child of the trace it came from.
    fn TRITONSERVER_ServerInferAsync(srv: *mut Server, request: *mut InferenceRequest, trace: *mut InferenceTrace) {
        // SAFETY: null or a live trace object (the header's contract).
        let parent_trace = if trace.is_null() { None } else { Some(unsafe { InferenceTrace::take_child(trace) }?) };
        let server = server(srv)?;
        let ptr = request;
        // SAFETY: a live request the caller made with `InferenceRequestNew` and hands over; it
        // stays alive until its release callback runs (the header's contract).
        let request = unsafe { super::boundary::borrow_mut(request, "inference request") }?;
        let (mut message, mut delivery) = request.submit(ptr)?;
        message.parent_trace = parent_trace;
        let accepted = delivery.accepted();
        server.infer(message, Box::new(move |event| delivery.deliver(event))).map_err(error)?;
        accepted.store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }
}

export! {
    fn TRITONSERVER_ServerModelIsReady(srv: *mut Server, model_name: *const c_char, model_version: i64, ready: *mut bool) {
        let server = server(srv)?;
        // SAFETY: a C string argument (the header's contract).
        let name = unsafe { text(model_name, "model_name") }?;
        let is_ready = server.model_ready(name, version(model_version));
        // SAFETY: the caller's out-parameter.
        unsafe { write(ready, is_ready, "ready") }
    }
}

export! {
    fn TRITONSERVER_ServerModelTransactionProperties(srv: *mut Server, model_name: *const c_char, model_version: i64, txn_flags: *mut u32, voidp: *mut *mut c_void) {
        let server = server(srv)?;
        // SAFETY: a C string argument (the header's contract).
        let name = unsafe { text(model_name, "model_name") }?;
        let decoupled = server.model_decoupled(name, version(model_version)).map_err(error)?;
        // SAFETY: the caller's out-parameter.
        unsafe { write(txn_flags, if decoupled { TXN_DECOUPLED } else { TXN_ONE_TO_ONE }, "txn_flags") }?;
        if !voidp.is_null() {
            // SAFETY: non-null, the caller's out-parameter.
            unsafe { voidp.write(std::ptr::null_mut()) };
        }
        Ok(())
    }
}

/// `file:<path>` load parameters: each path with its contents.
type Files = Vec<(String, Vec<u8>)>;

/// The load parameters Triton takes: `config` (a model config JSON string) and `file:<path>`
/// (a file's bytes).
fn load_parameters(parameters: &[&Parameter]) -> Result<(Option<String>, Files), Error> {
    let mut config = None;
    let mut files = Vec::new();
    for p in parameters {
        match (&p.value, p.name.as_str()) {
            (ParamValue::Str(s), "config") => config = Some(s.to_string_lossy().into_owned()),
            (ParamValue::Bytes(b), name) if name.starts_with("file:") => files.push((name.to_string(), b.clone())),
            (_, name) => {
                return Err(Error::new(
                    ERROR_INVALID_ARG,
                    format!("Unrecognized load parameter '{name}' with type '{}'", param_type_name(&p.value)),
                ))
            }
        }
    }
    Ok((config, files))
}

fn param_type_name(v: &ParamValue) -> &'static str {
    match v {
        ParamValue::Str(_) => "STRING",
        ParamValue::Int(_) => "INT",
        ParamValue::Bool(_) => "BOOL",
        ParamValue::Double(_) => "DOUBLE",
        ParamValue::Bytes(_) => "BYTES",
    }
}

export! {
    fn TRITONSERVER_ServerLoadModel(srv: *mut Server, model_name: *const c_char) {
        let server = server(srv)?;
        // SAFETY: a C string argument (the header's contract).
        let name = unsafe { text(model_name, "model_name") }?;
        server.load_model(name, None, Vec::new()).map_err(error)
    }
}

export! {
    fn TRITONSERVER_ServerLoadModelWithParameters(srv: *mut Server, model_name: *const c_char, parameters: *const *const Parameter, parameter_count: u64) {
        let server = server(srv)?;
        // SAFETY: a C string argument (the header's contract).
        let name = unsafe { text(model_name, "model_name") }?;
        let params: Vec<&Parameter> = if parameter_count == 0 {
            Vec::new()
        } else if parameters.is_null() {
            return Err(Error::new(ERROR_INVALID_ARG, "parameters is null"));
        } else {
            // SAFETY: the header's contract: `parameters` holds `parameter_count` pointers to
            // live parameter objects.
            unsafe { std::slice::from_raw_parts(parameters, parameter_count as usize) }
                .iter()
                // SAFETY: each is a live parameter made by `ParameterNew`/`ParameterBytesNew`.
                .map(|&p| unsafe { borrow(p, "parameter") })
                .collect::<Result<_, _>>()?
        };
        let (config, files) = load_parameters(&params)?;
        server.load_model(name, config, files).map_err(error)
    }
}

export! {
    fn TRITONSERVER_ServerUnloadModel(srv: *mut Server, model_name: *const c_char) {
        let server = server(srv)?;
        // SAFETY: a C string argument (the header's contract).
        let name = unsafe { text(model_name, "model_name") }?;
        server.unload_model(name, false).map_err(error)
    }
}

export! {
    fn TRITONSERVER_ServerUnloadModelAndDependents(srv: *mut Server, model_name: *const c_char) {
        let server = server(srv)?;
        // SAFETY: a C string argument (the header's contract).
        let name = unsafe { text(model_name, "model_name") }?;
        server.unload_model(name, true).map_err(error)
    }
}

#[cfg(test)]
mod tests;
