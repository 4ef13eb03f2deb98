//! `TRITONBACKEND_Backend`, `TRITONBACKEND_Model` and `TRITONBACKEND_ModelInstance`: the
//! objects a backend attaches its state to. Tritium makes one backend object per loaded
//! library, one model object per model version and one instance object per instance; each
//! lives in an `Arc` (a model holds its backend, an instance its model) and hands C a pointer
//! that stays valid as long as Tritium holds it.

use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::abi::*;
use super::boundary::{borrow, c_string, export, write};
use super::error::Error;
use super::library::Library;
use super::message::Message;

/// One loaded backend library.
pub struct Backend {
    pub(crate) name: CString,
    /// Where the backend's files are (`BackendArtifacts`).
    pub(crate) location: CString,
    /// `{"cmdline": {…}}`, as Triton builds it from `--backend-config`.
    pub(crate) config: Vec<u8>,
    pub(crate) state: AtomicPtr<c_void>,
    /// `Initialize` succeeded, so `Finalize` is due when the last model is gone.
    pub(crate) initialized: AtomicBool,
    pub(crate) library: Library,
    /// What the backend asked with `BackendSetExecutionPolicy` (`TRITONBACKEND_EXECUTION_*`).
    pub(crate) execution_policy: AtomicU32,
}

/// One model version.
pub struct Model {
    pub(crate) name: CString,
    pub(crate) version: u64,
    pub(crate) repository: CString,
    pub(crate) config: Mutex<Vec<u8>>,
    pub(crate) auto_complete: bool,
    pub(crate) state: AtomicPtr<c_void>,
    /// `ModelInitialize` succeeded, so `ModelFinalize` is due.
    pub(crate) initialized: AtomicBool,
    pub(crate) backend: Arc<Backend>,
    /// Where the backend's response reports go (`ReportResponseStatistics`), once the server
    /// set it.
    pub(crate) response_stats: std::sync::OnceLock<super::response_stats::ResponseStatsSink>,
    /// The memory the backend reported the model itself uses (`ModelReportMemoryUsage`).
    pub(crate) memory_usage: Mutex<super::memory_usage::Usage>,
    /// Its instances, for their memory usage.
    pub(crate) instances: Mutex<Vec<std::sync::Weak<Instance>>>,
}

/// One instance of a model version.
pub struct Instance {
    pub(crate) name: CString,
    pub(crate) kind: InstanceGroupKind,
    pub(crate) device_id: i32,
    /// Its group's optimization profiles (`instance_group.profile`).
    pub(crate) profiles: Vec<CString>,
    /// Its group's secondary devices: kind (`KIND_NVDLA`) and id.
    pub(crate) secondary_devices: Vec<(CString, i64)>,
    pub(crate) host_policy: Vec<u8>,
    pub(crate) state: AtomicPtr<c_void>,
    /// `ModelInstanceInitialize` succeeded, so `ModelInstanceFinalize` is due.
    pub(crate) initialized: AtomicBool,
    pub(crate) model: Arc<Model>,
    /// The executions the backend reported (`ReportBatchStatistics`), until the host takes them.
    pub(crate) batch_reports: Mutex<Vec<super::host::ReportedStats>>,
    /// The memory the backend reported the instance uses (`ModelInstanceReportMemoryUsage`).
    pub(crate) memory_usage: Mutex<super::memory_usage::Usage>,
}

/// The server object a model reports (`ModelServer`); the in-process API takes it back.
pub struct Server {
    _private: (),
}

pub(crate) static SERVER: Server = Server { _private: () };

/// The memory manager of every backend (`BackendMemoryManager`).
pub struct MemoryManager {
    _private: (),
}

static MEMORY_MANAGER: MemoryManager = MemoryManager { _private: () };

/// The preferences `TRITONBACKEND_GetBackendAttribute` fills in.
#[derive(Debug, Default)]
pub struct BackendAttribute {
    pub(crate) preferred_groups: Vec<(InstanceGroupKind, u64, Vec<u64>)>,
    pub(crate) parallel_instance_loading: bool,
}

export! {
    fn TRITONBACKEND_ApiVersion(major: *mut u32, minor: *mut u32) {
        // SAFETY: the caller's out-parameters.
        unsafe {
            write(major, BACKEND_API_VERSION.0, "major")?;
            write(minor, BACKEND_API_VERSION.1, "minor")
        }
    }
}

export! {
    fn TRITONSERVER_ApiVersion(major: *mut u32, minor: *mut u32) {
        // SAFETY: the caller's out-parameters.
        unsafe {
            write(major, SERVER_API_VERSION.0, "major")?;
            write(minor, SERVER_API_VERSION.1, "minor")
        }
    }
}

export! {
    fn TRITONBACKEND_BackendName(backend: *mut Backend, name: *mut *const c_char) {
        // SAFETY: a live backend and the caller's out-parameter.
        unsafe { write(name, borrow(backend, "backend")?.name.as_ptr(), "name") }
    }
}

export! {
    fn TRITONBACKEND_BackendArtifacts(backend: *mut Backend, artifact_type: *mut ArtifactType, location: *mut *const c_char) {
        // SAFETY: a live backend and the caller's out-parameters.
        unsafe {
            let b = borrow(backend, "backend")?;
            write(artifact_type, ARTIFACT_FILESYSTEM, "artifact_type")?;
            write(location, b.location.as_ptr(), "location")
        }
    }
}

export! {
    /// The backend's configuration as a new message the caller owns.
    fn TRITONBACKEND_BackendConfig(backend: *mut Backend, backend_config: *mut *mut Message) {
        // SAFETY: a live backend and the caller's out-parameter.
        unsafe {
            let b = borrow(backend, "backend")?;
            write(backend_config, Message::new(b.config.clone()).into_raw(), "backend_config")
        }
    }
}

export! {
    fn TRITONBACKEND_BackendState(backend: *mut Backend, state: *mut *mut c_void) {
        // SAFETY: a live backend and the caller's out-parameter.
        unsafe { write(state, borrow(backend, "backend")?.state.load(Ordering::Acquire), "state") }
    }
}

export! {
    fn TRITONBACKEND_BackendSetState(backend: *mut Backend, state: *mut c_void) {
        // SAFETY: a live backend.
        unsafe { borrow(backend, "backend")? }.state.store(state, Ordering::Release);
        Ok(())
    }
}

export! {
    /// The policy the backend set, `TRITONBACKEND_EXECUTION_BLOCKING` by default. Tritium runs
    /// every instance on a thread of its own whichever it is.
    fn TRITONBACKEND_BackendExecutionPolicy(backend: *mut Backend, policy: *mut u32) {
        // SAFETY: a live backend and the caller's out-parameter.
        unsafe { write(policy, borrow(backend, "backend")?.execution_policy.load(Ordering::Relaxed), "policy") }
    }
}

export! {
    fn TRITONBACKEND_BackendSetExecutionPolicy(backend: *mut Backend, policy: u32) {
        if policy > EXECUTION_DEVICE_BLOCKING {
            return Err(Error::new(ERROR_INVALID_ARG, format!("unknown execution policy {policy}")));
        }
        // SAFETY: a live backend.
        unsafe { borrow(backend, "backend")? }.execution_policy.store(policy, Ordering::Relaxed);
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_BackendMemoryManager(backend: *mut Backend, manager: *mut *mut MemoryManager) {
        // SAFETY: a live backend and the caller's out-parameter.
        unsafe {
            borrow(backend, "backend")?;
            write(manager, (&MEMORY_MANAGER as *const MemoryManager).cast_mut(), "manager")
        }
    }
}

export! {
    /// Host memory from `malloc`; Tritium has no GPU memory to give a backend yet.
    fn TRITONBACKEND_MemoryManagerAllocate(manager: *mut MemoryManager, buffer: *mut *mut c_void, memory_type: MemoryType, memory_type_id: i64, byte_size: u64) {
        let _ = (manager, memory_type_id);
        if memory_type == MEMORY_GPU {
            return Err(Error::new(ERROR_UNSUPPORTED, "Tritium's backend API host has no GPU memory to allocate"));
        }
        // SAFETY: malloc of any size is sound; a null result is checked.
        let ptr = unsafe { libc::malloc(byte_size.max(1) as usize) };
        if ptr.is_null() {
            return Err(Error::new(ERROR_UNAVAILABLE, format!("out of host memory allocating {byte_size} bytes")));
        }
        // SAFETY: the caller's out-parameter.
        unsafe { write(buffer, ptr, "buffer") }
    }
}

export! {
    fn TRITONBACKEND_MemoryManagerFree(manager: *mut MemoryManager, buffer: *mut c_void, memory_type: MemoryType, memory_type_id: i64) {
        let _ = (manager, memory_type, memory_type_id);
        // SAFETY: `buffer` came from `MemoryManagerAllocate` (malloc) or is null.
        unsafe { libc::free(buffer) };
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(backend_attributes: *mut BackendAttribute, kind: InstanceGroupKind, count: u64, device_ids: *const u64, id_count: u64) {
        // SAFETY: the attribute object Tritium passed to `GetBackendAttribute`, used by one
        // thread at a time.
        let a = unsafe { super::boundary::borrow_mut(backend_attributes, "backend_attributes")? };
        let ids = if id_count == 0 || device_ids.is_null() {
            Vec::new()
        } else {
            // SAFETY: the header's contract: `device_ids` holds `id_count` values.
            unsafe { std::slice::from_raw_parts(device_ids, id_count as usize) }.to_vec()
        };
        a.preferred_groups.push((kind, count, ids));
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(backend_attributes: *mut BackendAttribute, enabled: bool) {
        // SAFETY: as above.
        unsafe { super::boundary::borrow_mut(backend_attributes, "backend_attributes")? }.parallel_instance_loading = enabled;
        Ok(())
    }
}

/// Borrows a model handle.
///
/// # Safety
/// `model` must be null or a model object Tritium still holds.
unsafe fn model<'a>(model: *mut Model) -> Result<&'a Model, Error> {
    // SAFETY: forwarded from the caller.
    unsafe { borrow(model, "model") }
}

export! {
    fn TRITONBACKEND_ModelName(m: *mut Model, name: *mut *const c_char) {
        // SAFETY: a live model and the caller's out-parameter.
        unsafe { write(name, model(m)?.name.as_ptr(), "name") }
    }
}

export! {
    fn TRITONBACKEND_ModelVersion(m: *mut Model, version: *mut u64) {
        // SAFETY: a live model and the caller's out-parameter.
        unsafe { write(version, model(m)?.version, "version") }
    }
}

export! {
    /// The model's folder in the repository.
    fn TRITONBACKEND_ModelRepository(m: *mut Model, artifact_type: *mut ArtifactType, location: *mut *const c_char) {
        // SAFETY: a live model and the caller's out-parameters.
        unsafe {
            let m = model(m)?;
            write(artifact_type, ARTIFACT_FILESYSTEM, "artifact_type")?;
            write(location, m.repository.as_ptr(), "location")
        }
    }
}

export! {
    /// The model config as protobuf JSON, in a new message the caller owns.
    fn TRITONBACKEND_ModelConfig(m: *mut Model, config_version: u32, model_config: *mut *mut Message) {
        if config_version != 1 {
            return Err(Error::new(ERROR_UNSUPPORTED, format!("model configuration version {config_version} not supported, supported versions are: 1")));
        }
        // SAFETY: a live model.
        let json = unsafe { model(m)? }.config.lock().map_err(|_| Error::new(ERROR_INTERNAL, "model config lock poisoned"))?.clone();
        // SAFETY: the caller's out-parameter.
        unsafe { write(model_config, Message::new(json).into_raw(), "model_config") }
    }
}

export! {
    /// Replaces the model config (auto-complete); the message stays the caller's.
    fn TRITONBACKEND_ModelSetConfig(m: *mut Model, config_version: u32, model_config: *mut Message) {
        if config_version != 1 {
            return Err(Error::new(ERROR_UNSUPPORTED, format!("model configuration version {config_version} not supported, supported versions are: 1")));
        }
        // SAFETY: a live model and a live message.
        let (m, msg) = unsafe { (model(m)?, borrow(model_config, "model_config")?) };
        *m.config.lock().map_err(|_| Error::new(ERROR_INTERNAL, "model config lock poisoned"))? = msg.json().to_vec();
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_ModelAutoCompleteConfig(m: *mut Model, auto_complete_config: *mut bool) {
        // SAFETY: a live model and the caller's out-parameter.
        unsafe { write(auto_complete_config, model(m)?.auto_complete, "auto_complete_config") }
    }
}

export! {
    fn TRITONBACKEND_ModelServer(m: *mut Model, server: *mut *mut Server) {
        // SAFETY: a live model and the caller's out-parameter.
        unsafe {
            model(m)?;
            write(server, (&SERVER as *const Server).cast_mut(), "server")
        }
    }
}

export! {
    fn TRITONBACKEND_ModelBackend(m: *mut Model, backend: *mut *mut Backend) {
        // SAFETY: a live model and the caller's out-parameter; the model holds its backend.
        unsafe { write(backend, Arc::as_ptr(&model(m)?.backend).cast_mut(), "backend") }
    }
}

export! {
    fn TRITONBACKEND_ModelState(m: *mut Model, state: *mut *mut c_void) {
        // SAFETY: a live model and the caller's out-parameter.
        unsafe { write(state, model(m)?.state.load(Ordering::Acquire), "state") }
    }
}

export! {
    fn TRITONBACKEND_ModelSetState(m: *mut Model, state: *mut c_void) {
        // SAFETY: a live model.
        unsafe { model(m)? }.state.store(state, Ordering::Release);
        Ok(())
    }
}

/// Borrows an instance handle.
///
/// # Safety
/// `instance` must be null or an instance object Tritium still holds.
unsafe fn instance<'a>(instance: *mut Instance) -> Result<&'a Instance, Error> {
    // SAFETY: forwarded from the caller.
    unsafe { borrow(instance, "instance") }
}

export! {
    fn TRITONBACKEND_ModelInstanceName(i: *mut Instance, name: *mut *const c_char) {
        // SAFETY: a live instance and the caller's out-parameter.
        unsafe { write(name, instance(i)?.name.as_ptr(), "name") }
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceKind(i: *mut Instance, kind: *mut InstanceGroupKind) {
        // SAFETY: a live instance and the caller's out-parameter.
        unsafe { write(kind, instance(i)?.kind, "kind") }
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceDeviceId(i: *mut Instance, device_id: *mut i32) {
        // SAFETY: a live instance and the caller's out-parameter.
        unsafe { write(device_id, instance(i)?.device_id, "device_id") }
    }
}

export! {
    /// The instance's host policy as a new message (`{"<policy>": {…}}`) the caller owns.
    fn TRITONBACKEND_ModelInstanceHostPolicy(i: *mut Instance, host_policy: *mut *mut Message) {
        // SAFETY: a live instance and the caller's out-parameter.
        unsafe { write(host_policy, Message::new(instance(i)?.host_policy.clone()).into_raw(), "host_policy") }
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceModel(i: *mut Instance, m: *mut *mut Model) {
        // SAFETY: a live instance and the caller's out-parameter; the instance holds its model.
        unsafe { write(m, Arc::as_ptr(&instance(i)?.model).cast_mut(), "model") }
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceState(i: *mut Instance, state: *mut *mut c_void) {
        // SAFETY: a live instance and the caller's out-parameter.
        unsafe { write(state, instance(i)?.state.load(Ordering::Acquire), "state") }
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceSetState(i: *mut Instance, state: *mut c_void) {
        // SAFETY: a live instance.
        unsafe { instance(i)? }.state.store(state, Ordering::Release);
        Ok(())
    }
}

export! {
    /// Tritium schedules every instance it loads: none is passive.
    fn TRITONBACKEND_ModelInstanceIsPassive(i: *mut Instance, is_passive: *mut bool) {
        // SAFETY: a live instance and the caller's out-parameter.
        unsafe {
            instance(i)?;
            write(is_passive, false, "is_passive")
        }
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceProfileCount(i: *mut Instance, count: *mut u32) {
        // SAFETY: a live instance and the caller's out-parameter.
        unsafe { write(count, instance(i)?.profiles.len() as u32, "count") }
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceProfileName(i: *mut Instance, index: u32, profile_name: *mut *const c_char) {
        // SAFETY: a live instance.
        let profiles = &unsafe { instance(i)? }.profiles;
        let Some(name) = profiles.get(index as usize) else {
            return Err(Error::new(
                ERROR_INVALID_ARG,
                format!("out of bounds index {index}: instance is configured with {} profiles", profiles.len()),
            ));
        };
        // SAFETY: the caller's out-parameter; the name lives as long as the instance.
        unsafe { write(profile_name, name.as_ptr(), "profile_name") }
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceSecondaryDeviceCount(i: *mut Instance, count: *mut u32) {
        // SAFETY: a live instance and the caller's out-parameter.
        unsafe { write(count, instance(i)?.secondary_devices.len() as u32, "count") }
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceSecondaryDeviceProperties(i: *mut Instance, index: u32, kind: *mut *const c_char, id: *mut i64) {
        // SAFETY: a live instance.
        let devices = &unsafe { instance(i)? }.secondary_devices;
        let Some((name, device)) = devices.get(index as usize) else {
            return Err(Error::new(
                ERROR_INVALID_ARG,
                format!("out of bounds index {index}: instance is configured with {} secondary devices", devices.len()),
            ));
        };
        // SAFETY: the caller's out-parameters; the kind lives as long as the instance.
        unsafe {
            write(kind, name.as_ptr(), "kind")?;
            write(id, *device, "id")
        }
    }
}

export! {
    /// The backend's own measure of one request: it replaces the instance actor's in the
    /// model's statistics, and `success` decides whether the request counts as a success or a
    /// failure there, as in Triton (a Python model's error response counts as a success; an
    /// exception in its `execute` as a failure).
    fn TRITONBACKEND_ModelInstanceReportStatistics(i: *mut Instance, request: *mut super::request::Request, success: bool, exec_start_ns: u64, compute_start_ns: u64, compute_end_ns: u64, exec_end_ns: u64) {
        // SAFETY: a live instance.
        unsafe { instance(i)? };
        let report = super::host::ReportedStats { success, batch_size: 1, exec_start_ns, compute_start_ns, compute_end_ns, exec_end_ns };
        // SAFETY: a request the backend has not released yet.
        *unsafe { borrow(request, "request")? }.sink.report.lock().unwrap_or_else(|e| e.into_inner()) = Some(report);
        Ok(())
    }
}

export! {
    /// The backend's own measure of one execution of `batch_size` items: the model's execution
    /// count and batch statistics take it instead of the instance actor's.
    fn TRITONBACKEND_ModelInstanceReportBatchStatistics(i: *mut Instance, batch_size: u64, exec_start_ns: u64, compute_start_ns: u64, compute_end_ns: u64, exec_end_ns: u64) {
        // SAFETY: a live instance.
        let instance = unsafe { instance(i)? };
        let report = super::host::ReportedStats { success: true, batch_size, exec_start_ns, compute_start_ns, compute_end_ns, exec_end_ns };
        instance.batch_reports.lock().unwrap_or_else(|e| e.into_inner()).push(report);
        Ok(())
    }
}

/// A C string for a model or instance field.
pub(crate) fn name(s: &str) -> CString {
    c_string(s)
}
