//! What a backend may ask the server as a whole: whether it is live and ready, its metadata, a
//! model's metadata, config, batching and statistics, and the repository index. Each answer
//! is a new `TRITONSERVER_Message` the caller deletes, holding the JSON Tritium's HTTP
//! endpoints answer (as Triton's are those of its HTTP endpoints).

use std::ffi::{c_char, c_void};

use super::super::abi::*;
use super::super::boundary::{export, text, write};
use super::super::error::Error;
use super::super::message::Message;
use super::super::model::Server;
use super::{error, server, version};

/// `TRITONSERVER_ModelBatchFlag`.
const BATCH_UNKNOWN: u32 = 1;
const BATCH_FIRST_DIM: u32 = 2;
/// `TRITONSERVER_ModelIndexFlag`.
const INDEX_FLAG_READY: u32 = 1;

/// Hands JSON text to the caller as a new message.
///
/// # Safety
/// `out` must be null (refused) or valid for a write of a pointer.
unsafe fn message(out: *mut *mut Message, json: String) -> Result<(), Error> {
    if out.is_null() {
        return Err(Error::new(ERROR_INVALID_ARG, "message is null"));
    }
    // SAFETY: forwarded from the caller, not null.
    unsafe { write(out, Message::new(json.into_bytes()).into_raw(), "message") }
}

export! {
    fn TRITONSERVER_ServerIsLive(srv: *mut Server, live: *mut bool) {
        let server = server(srv)?;
        // SAFETY: the caller's out-parameter.
        unsafe { write(live, server.is_live(), "live") }
    }
}

export! {
    fn TRITONSERVER_ServerIsReady(srv: *mut Server, ready: *mut bool) {
        let server = server(srv)?;
        // SAFETY: the caller's out-parameter.
        unsafe { write(ready, server.is_ready(), "ready") }
    }
}

export! {
    /// `{"name", "version", "extensions"}`.
    fn TRITONSERVER_ServerMetadata(srv: *mut Server, server_metadata: *mut *mut Message) {
        let server = server(srv)?;
        // SAFETY: the caller's out-parameter.
        unsafe { message(server_metadata, server.metadata_json()) }
    }
}

export! {
    fn TRITONSERVER_ServerModelMetadata(srv: *mut Server, model_name: *const c_char, model_version: i64, model_metadata: *mut *mut Message) {
        let server = server(srv)?;
        // SAFETY: a C string argument (the header's contract).
        let name = unsafe { text(model_name, "model_name") }?;
        let json = server.model_metadata_json(name, version(model_version)).map_err(error)?;
        // SAFETY: the caller's out-parameter.
        unsafe { message(model_metadata, json) }
    }
}

export! {
    /// The model's config as JSON; Triton's only config version is 1.
    fn TRITONSERVER_ServerModelConfig(srv: *mut Server, model_name: *const c_char, model_version: i64, config_version: u32, model_config: *mut *mut Message) {
        if config_version != 1 {
            return Err(Error::new(
                ERROR_UNSUPPORTED,
                format!("model configuration version {config_version} not supported, supported versions are: 1"),
            ));
        }
        let server = server(srv)?;
        // SAFETY: a C string argument (the header's contract).
        let name = unsafe { text(model_name, "model_name") }?;
        let json = server.model_config_json(name, version(model_version)).map_err(error)?;
        // SAFETY: the caller's out-parameter.
        unsafe { message(model_config, json) }
    }
}

export! {
    /// The repository index; with `TRITONSERVER_INDEX_FLAG_READY`, the ready models only.
    fn TRITONSERVER_ServerModelIndex(srv: *mut Server, flags: u32, model_index: *mut *mut Message) {
        let server = server(srv)?;
        let json = server.index_json(flags & INDEX_FLAG_READY != 0).map_err(error)?;
        // SAFETY: the caller's out-parameter.
        unsafe { message(model_index, json) }
    }
}

export! {
    /// `{"model_stats": […]}`: of every model when `model_name` is empty, of every version of
    /// the model when `model_version` is -1.
    fn TRITONSERVER_ServerModelStatistics(srv: *mut Server, model_name: *const c_char, model_version: i64, model_stats: *mut *mut Message) {
        let server = server(srv)?;
        // SAFETY: a C string argument (the header's contract).
        let name = unsafe { text(model_name, "model_name") }?;
        let model = (!name.is_empty()).then_some(name);
        let json = server.statistics_json(model, version(model_version)).map_err(error)?;
        // SAFETY: the caller's out-parameter.
        unsafe { message(model_stats, json) }
    }
}

export! {
    /// `TRITONSERVER_BATCH_FIRST_DIM` for a model with `max_batch_size` > 0, else
    /// `TRITONSERVER_BATCH_UNKNOWN`, as Triton answers; `voidp` null.
    fn TRITONSERVER_ServerModelBatchProperties(srv: *mut Server, model_name: *const c_char, model_version: i64, flags: *mut u32, voidp: *mut *mut c_void) {
        let server = server(srv)?;
        // SAFETY: a C string argument (the header's contract).
        let name = unsafe { text(model_name, "model_name") }?;
        let batches = server.model_batches(name, version(model_version)).map_err(error)?;
        // SAFETY: the caller's out-parameter.
        unsafe { write(flags, if batches { BATCH_FIRST_DIM } else { BATCH_UNKNOWN }, "flags") }?;
        if !voidp.is_null() {
            // SAFETY: non-null, the caller's out-parameter.
            unsafe { voidp.write(std::ptr::null_mut()) };
        }
        Ok(())
    }
}
