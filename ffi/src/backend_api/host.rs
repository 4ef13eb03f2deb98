//! The safe face of the backend API host, for Tritium's `triton` backend: load a backend library
//! (once per path), initialize model versions and instances on it, and run requests through an
//! instance, reading each request's responses from a channel. Nothing here is `extern "C"`;
//! the types are plain Rust.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;

use super::abi::*;
use super::boundary::c_string;
use super::error::{code_name, Error};
use super::library::Library;
use super::model::{name, Backend, BackendAttribute, Instance, Model};
use super::request::Request;
use super::response::Sink;
use super::state::States;

/// A tensor crossing the boundary: a Triton datatype name (`FP32`), a shape and its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub data: Bytes,
}

/// A request parameter's value.
#[derive(Debug, Clone, PartialEq)]
pub enum HostParam {
    Str(String),
    Int(i64),
    Bool(bool),
    Double(f64),
}

/// One request for `execute`.
#[derive(Debug, Clone, Default)]
pub struct HostRequest {
    pub id: String,
    pub correlation_id: u64,
    /// A string correlation ID (then `correlation_id` is unused).
    pub correlation_text: Option<String>,
    /// `TRITONSERVER_REQUEST_FLAG_SEQUENCE_START` / `_END`.
    pub flags: u32,
    pub timeout_us: u64,
    pub inputs: Vec<HostTensor>,
    /// Requested output names; empty = all.
    pub outputs: Vec<String>,
    pub parameters: Vec<(String, HostParam)>,
    /// The model's name, for the backend API's error texts.
    pub model: String,
    /// The model's implicit state outputs (`sequence_batching.state` output names); `None`
    /// when it has no state configuration.
    pub state_outputs: Option<Vec<String>>,
    /// Set by the host once the request's client has gone; the backend reads it through
    /// `TRITONBACKEND_RequestIsCancelled` / `ResponseFactoryIsCancelled`, also while its
    /// `execute` is still running.
    pub cancel: Arc<AtomicBool>,
    /// The model is an iterative sequence (`sequence_batching { iterative_sequence: true }`):
    /// the backend may release the request with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`, which
    /// then arrives as `HostEvent::Rescheduled`. Otherwise that release is refused with
    /// Triton's error.
    pub reschedulable: bool,
    /// The request's trace, when the trace settings sampled it (`TRITONBACKEND_RequestTrace`).
    pub trace: Option<super::trace::HostTrace>,
    /// Where the request's final response goes at once, from inside the backend's
    /// `TRITONBACKEND_ResponseSend`, when it is the request's first response and carries no
    /// error (a non-decoupled model's one response, as Triton answers the client from there);
    /// the request's channel then gets `HostEvent::Answered` instead. `None`: every response
    /// goes to the channel.
    pub on_final: Option<FinalHook>,
}

/// Takes a request's final response (its outputs) on the thread that sends it; called at most
/// once per request.
#[derive(Clone)]
pub struct FinalHook(Arc<dyn Fn(Vec<HostTensor>) + Send + Sync>);

impl FinalHook {
    pub fn new(f: impl Fn(Vec<HostTensor>) + Send + Sync + 'static) -> Self {
        FinalHook(Arc::new(f))
    }

    pub(crate) fn call(&self, outputs: Vec<HostTensor>) {
        (self.0)(outputs)
    }
}

impl std::fmt::Debug for FinalHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FinalHook")
    }
}

/// What a backend reported of one request (`TRITONBACKEND_ModelInstanceReportStatistics`) or
/// of one execution (`ReportBatchStatistics`, then `success` is true and `batch_size` set):
/// its own timestamps in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportedStats {
    pub success: bool,
    pub batch_size: u64,
    pub exec_start_ns: u64,
    pub compute_start_ns: u64,
    pub compute_end_ns: u64,
    pub exec_end_ns: u64,
}

/// An error from the backend or the host: Triton's code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    pub code: ErrorCode,
    pub message: String,
}

impl HostError {
    /// Triton's name of the code (`Invalid argument`, …).
    pub fn code_name(&self) -> &'static str {
        code_name(self.code)
    }

    fn from_raw(ptr: *mut Error) -> Option<HostError> {
        // SAFETY: `ptr` is null or an error object a backend entry point returned (and so gave
        // up to its caller).
        unsafe { Error::from_raw(ptr) }.map(HostError::from)
    }
}

impl From<Error> for HostError {
    fn from(e: Error) -> Self {
        HostError { code: e.code, message: e.message().to_string() }
    }
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One response the backend sent.
#[derive(Debug, Clone, PartialEq)]
pub struct HostResponse {
    pub outputs: Vec<HostTensor>,
    pub error: Option<HostError>,
    pub is_final: bool,
}

/// What arrives on a request's channel: responses, or flags sent without one; and how the
/// backend released the request when it asked for more than an ordinary release.
#[derive(Debug, Clone, PartialEq)]
pub enum HostEvent {
    Response(HostResponse),
    Flags(u32),
    /// The backend released the request with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE` and the
    /// model allows it: the engine runs the request again in a later batch.
    Rescheduled,
    /// The backend asked to reschedule the request and was refused with this error (Triton's
    /// text); the backend then releases it as usual.
    RescheduleRefused(HostError),
    /// The request's final response went to its `HostRequest::on_final` when the backend sent
    /// it.
    Answered,
}

impl HostEvent {
    pub fn is_final(&self) -> bool {
        match self {
            HostEvent::Response(r) => r.is_final,
            HostEvent::Flags(f) => f & RESPONSE_COMPLETE_FINAL != 0,
            HostEvent::Answered => true,
            HostEvent::Rescheduled | HostEvent::RescheduleRefused(_) => false,
        }
    }
}

/// Which backend to load and how to present it.
#[derive(Debug, Clone)]
pub struct BackendSpec {
    /// The backend's name (`python`).
    pub name: String,
    /// `<backend-directory>/<name>/libtriton_<name>.so`.
    pub library: PathBuf,
    /// Triton's backend config as JSON: `{"cmdline": {"key": "value", …}}`.
    pub config_json: String,
}

/// A loaded, initialized backend library.
#[derive(Clone)]
pub struct LoadedBackend(Arc<Backend>);

// SAFETY: the library's handle is only used to look up entry points at load, and backends are
// called from any thread in Triton too (the API requires them to be thread-safe).
unsafe impl Send for Library {}
// SAFETY: as above; `Library` holds only function pointers after load.
unsafe impl Sync for Library {}

/// The loaded backends by library path. A backend lives while a model of it does (each model
/// holds its backend): when the last goes, `TRITONBACKEND_Finalize` runs, as Triton unloads a
/// backend that no model uses; a later model initializes it again.
static BACKENDS: Mutex<Option<HashMap<PathBuf, Weak<Backend>>>> = Mutex::new(None);

/// Serializes backends' `Initialize` and `Finalize`, so a backend being finalized (its last
/// model gone) is done before it is initialized again.
static LIFECYCLE: Mutex<()> = Mutex::new(());

/// Loads and initializes a backend library, or returns the one already loaded from that path.
pub fn load_backend(spec: &BackendSpec) -> Result<LoadedBackend, HostError> {
    let mut backends =
        BACKENDS.lock().map_err(|_| HostError::from(Error::new(ERROR_INTERNAL, "backend registry poisoned")))?;
    let backends = backends.get_or_insert_with(HashMap::new);
    if let Some(b) = backends.get(&spec.library).and_then(Weak::upgrade) {
        return Ok(LoadedBackend(b));
    }
    let library = Library::load(&spec.library)?;
    let location = spec.library.parent().unwrap_or(Path::new("/"));
    let backend = Arc::new(Backend {
        name: c_string(&spec.name),
        location: c_string(&location.to_string_lossy()),
        config: spec.config_json.clone().into_bytes(),
        state: AtomicPtr::new(std::ptr::null_mut()),
        initialized: AtomicBool::new(false),
        library,
        execution_policy: std::sync::atomic::AtomicU32::new(EXECUTION_BLOCKING),
    });
    let ptr = Arc::as_ptr(&backend).cast_mut();
    if let Some(init) = backend.library.initialize {
        let _lifecycle = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the backend's entry point, called with a backend object that lives in `backend`.
        if let Some(e) = HostError::from_raw(unsafe { init(ptr) }) {
            return Err(HostError {
                code: e.code,
                message: format!("failed to initialize backend '{}': {e}", spec.name),
            });
        }
    }
    backend.initialized.store(true, std::sync::atomic::Ordering::Release);
    if let Some(attribute) = backend.library.backend_attribute {
        let mut attributes = BackendAttribute::default();
        // SAFETY: the entry point, with a live backend and an attribute object it fills in.
        if let Some(e) = HostError::from_raw(unsafe { attribute(ptr, &mut attributes) }) {
            return Err(HostError { code: e.code, message: format!("backend '{}' attributes: {e}", spec.name) });
        }
        tracing::debug!(backend = spec.name, ?attributes, "backend attributes");
    }
    backends.insert(spec.library.clone(), Arc::downgrade(&backend));
    Ok(LoadedBackend(backend))
}

/// One model version to initialize on a backend.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    pub name: String,
    pub version: u64,
    /// The model's folder in the repository.
    pub repository: PathBuf,
    /// The model config as protobuf JSON.
    pub config_json: String,
    /// Whether the backend may complete the config (Triton's `--strict-model-config=false`).
    pub auto_complete: bool,
}

/// An initialized model version; finalized when it and its instances are gone.
pub struct LoadedModel(Arc<Model>);

impl LoadedBackend {
    /// Creates the model object and runs the backend's `ModelInitialize`.
    pub fn load_model(&self, spec: &ModelSpec) -> Result<LoadedModel, HostError> {
        let model = Arc::new(Model {
            name: name(&spec.name),
            version: spec.version,
            repository: c_string(&spec.repository.to_string_lossy()),
            config: Mutex::new(spec.config_json.clone().into_bytes()),
            auto_complete: spec.auto_complete,
            state: AtomicPtr::new(std::ptr::null_mut()),
            initialized: AtomicBool::new(false),
            backend: self.0.clone(),
            response_stats: Default::default(),
            memory_usage: Default::default(),
            instances: Default::default(),
        });
        if let Some(init) = self.0.library.model_initialize {
            // SAFETY: the backend's entry point with a model object that `model` keeps alive.
            if let Some(e) = HostError::from_raw(unsafe { init(Arc::as_ptr(&model).cast_mut()) }) {
                return Err(e);
            }
        }
        model.initialized.store(true, std::sync::atomic::Ordering::Release);
        Ok(LoadedModel(model))
    }
}

/// Where an instance runs.
#[derive(Debug, Clone)]
pub struct InstanceSpec {
    pub name: String,
    /// `TRITONSERVER_INSTANCEGROUPKIND_*`.
    pub kind: InstanceGroupKind,
    pub device_id: i32,
    /// Its group's optimization profiles (`instance_group.profile`).
    pub profiles: Vec<String>,
    /// Its group's secondary devices: kind (`KIND_NVDLA`) and id.
    pub secondary_devices: Vec<(String, i64)>,
}

/// An initialized instance; finalized when the last handle to it is dropped (a handle lent to
/// a thread running `execute` keeps it alive until that call returns).
#[derive(Clone)]
pub struct LoadedInstance(Arc<Instance>);

impl LoadedModel {
    /// Sends the responses the backend reports (`TRITONBACKEND_ModelInstanceReportResponseStatistics`)
    /// to `sink`; only the first call has effect. Without one, reports are accepted and dropped.
    pub fn on_response_statistics(&self, sink: super::response_stats::ResponseStatsSink) {
        let _ = self.0.response_stats.set(sink);
    }

    /// The memory the backend reports the model and its live instances use, summed by memory
    /// type and id (`ModelReportMemoryUsage`, `ModelInstanceReportMemoryUsage`).
    pub fn memory_usage(&self) -> Vec<super::memory_usage::MemoryUsage> {
        super::memory_usage::of_model(&self.0)
    }

    /// The model config as the backend left it (after auto-complete), as JSON.
    pub fn config_json(&self) -> String {
        String::from_utf8_lossy(&self.0.config.lock().map(|c| c.clone()).unwrap_or_default()).into_owned()
    }

    /// Creates an instance object and runs the backend's `ModelInstanceInitialize`.
    pub fn load_instance(&self, spec: &InstanceSpec) -> Result<LoadedInstance, HostError> {
        let policy = if spec.kind == INSTANCEGROUPKIND_GPU { format!("gpu_{}", spec.device_id) } else { "cpu".into() };
        let instance = Arc::new(Instance {
            name: name(&spec.name),
            kind: spec.kind,
            device_id: spec.device_id,
            profiles: spec.profiles.iter().map(|p| c_string(p)).collect(),
            secondary_devices: spec.secondary_devices.iter().map(|(k, id)| (c_string(k), *id)).collect(),
            host_policy: format!("{{\"{policy}\":{{}}}}").into_bytes(),
            state: AtomicPtr::new(std::ptr::null_mut()),
            initialized: AtomicBool::new(false),
            model: self.0.clone(),
            batch_reports: Mutex::new(Vec::new()),
            memory_usage: Default::default(),
        });
        if let Some(init) = self.0.backend.library.instance_initialize {
            // SAFETY: the backend's entry point with an instance object `instance` keeps alive.
            if let Some(e) = HostError::from_raw(unsafe { init(Arc::as_ptr(&instance).cast_mut()) }) {
                return Err(e);
            }
        }
        instance.initialized.store(true, std::sync::atomic::Ordering::Release);
        // The model's memory usage counts its live instances' reports.
        let mut instances = self.0.instances.lock().unwrap_or_else(|e| e.into_inner());
        instances.retain(|i| i.strong_count() > 0);
        instances.push(Arc::downgrade(&instance));
        drop(instances);
        Ok(LoadedInstance(instance))
    }
}

/// A request in flight: its responses arrive on `events`; `cancel` marks it cancelled for the
/// backend (`TRITONBACKEND_RequestIsCancelled`).
pub struct Pending {
    pub events: Receiver<HostEvent>,
    pub cancel: Arc<AtomicBool>,
    /// The request's statistics as the backend reported them, if it did.
    pub report: Arc<Mutex<Option<ReportedStats>>>,
}

impl LoadedInstance {
    /// Hands the requests to the backend's `ModelInstanceExecute`. The channels close when the
    /// backend has released the request and dropped its response factories.
    pub fn execute(&self, requests: Vec<HostRequest>) -> Result<Vec<Pending>, HostError> {
        let mut pending = Vec::with_capacity(requests.len());
        let mut raw: Vec<*mut Request> = Vec::with_capacity(requests.len());
        for mut r in requests {
            let (tx, rx) = channel();
            let cancel = r.cancel.clone();
            let states = States::new(&r.model, r.state_outputs.take());
            let trace = r.trace.take().map(super::trace::InferenceTrace::of_request);
            let sink = Arc::new(Sink::new(tx, cancel.clone(), states, trace, r.on_final.take()));
            let report = sink.report.clone();
            raw.push(Box::into_raw(Box::new(Request::new(r, sink))));
            pending.push(Pending { events: rx, cancel, report });
        }
        let execute = self.0.model.backend.library.instance_execute;
        // SAFETY: the backend's entry point with a live instance and requests it now owns until
        // it releases them.
        let error = unsafe { execute(Arc::as_ptr(&self.0).cast_mut(), raw.as_mut_ptr(), raw.len() as u32) };
        if let Some(e) = HostError::from_raw(error) {
            // On an error the backend has not taken the requests (the header's contract).
            for r in raw {
                // SAFETY: made by `Box::into_raw` above and not released by the backend.
                drop(unsafe { Box::from_raw(r) });
            }
            return Err(e);
        }
        Ok(pending)
    }
}

impl LoadedInstance {
    /// The executions the backend reported (`ReportBatchStatistics`) since the last call.
    pub fn take_batch_reports(&self) -> Vec<ReportedStats> {
        std::mem::take(&mut *self.0.batch_reports.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The backend's `ModelInstanceReady`, `None` when the backend has none (it is optional;
    /// newer Python backends answer whether the instance's stub process is alive).
    pub fn ready(&mut self) -> Option<Result<(), HostError>> {
        let ready = self.0.model.backend.library.instance_ready?;
        // SAFETY: the backend's entry point with a live instance.
        Some(HostError::from_raw(unsafe { ready(Arc::as_ptr(&self.0).cast_mut()) }).map_or(Ok(()), Err))
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        if let (true, Some(fini)) =
            (self.initialized.load(std::sync::atomic::Ordering::Acquire), self.backend.library.model_finalize)
        {
            // SAFETY: the backend's entry point, once, with the model object still alive.
            if let Some(e) = HostError::from_raw(unsafe { fini(self as *mut Model) }) {
                tracing::error!(model = ?self.name, "model finalize failed: {e}");
            }
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let (true, Some(fini)) =
            (self.initialized.load(std::sync::atomic::Ordering::Acquire), self.model.backend.library.instance_finalize)
        {
            // SAFETY: the backend's entry point, once, with the instance object still alive.
            if let Some(e) = HostError::from_raw(unsafe { fini(self as *mut Instance) }) {
                tracing::error!(instance = ?self.name, "instance finalize failed: {e}");
            }
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let (true, Some(fini)) = (self.initialized.load(std::sync::atomic::Ordering::Acquire), self.library.finalize)
        {
            let _lifecycle = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the backend's entry point, once, with the backend object still alive.
            if let Some(e) = HostError::from_raw(unsafe { fini(self as *mut Backend) }) {
                tracing::error!(backend = ?self.name, "backend finalize failed: {e}");
            }
        }
    }
}
