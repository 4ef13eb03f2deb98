//! `backend: "<name>"` for Triton backend libraries, as Triton loads them: the library
//! `<backend-directory>/<name>/libtriton_<name>.so` (Triton's Python backend first) runs under
//! Tritium's engine through the backend API host of `tritium-ffi`. One model object per version
//! (`TRITONBACKEND_ModelInitialize` when the version loads), one instance object per instance
//! (`ModelInstanceInitialize` on the instance's thread; the Python backend starts its stub
//! process there), and each batch goes through `ModelInstanceExecute`; the engine keeps the
//! queues, batching and sequences.

pub mod convert;

use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::Instant;

use tritium_actors::{
    Backend, BackendFactory, BackendReport, BatchInput, Error, InstanceKind, InstanceSpec, ModelStats, Result, Tensor,
};
use tritium_ffi::backend_api::{self as host, abi, HostEvent, LoadedInstance, LoadedModel};

use super::watchdog::{self, Executor};
use crate::config::ModelConfig;
use crate::proto::inference::model_config::SchedulingChoice;

/// The library Triton loads for backend `name` from a backend directory.
pub fn library_path(backend_directory: &Path, name: &str) -> PathBuf {
    backend_directory.join(name).join(format!("libtriton_{name}.so"))
}

/// Triton's backend config message for one backend: `{"cmdline": {…}}` from the
/// `--backend-config=<name>,<key>=<value>` flags that name it, and the backend directory.
pub fn backend_config_json(name: &str, backend_directory: &Path, settings: &[String]) -> String {
    let mut cmdline = serde_json::Map::new();
    cmdline.insert("backend-directory".into(), backend_directory.to_string_lossy().into_owned().into());
    for s in settings {
        if let Some((backend, setting)) = s.split_once(',') {
            if backend == name {
                if let Some((k, v)) = setting.split_once('=') {
                    cmdline.insert(k.to_string(), v.to_string().into());
                }
            }
        }
    }
    serde_json::json!({ "cmdline": cmdline }).to_string()
}

/// Triton's auto-complete for a backend library: a model object with auto-complete on runs the
/// backend's own completion (the Python backend: `auto_complete_config` of model.py, in a stub of
/// its own), and the config the backend sets replaces `config`. Without the library nothing
/// happens here (the factory reports it). Returns the backend, for the caller to keep loaded
/// until the model's factory holds it.
pub fn auto_complete(
    config: &mut ModelConfig,
    model_dir: &Path,
    version: i64,
    backend_directory: &Path,
    backend_settings: &[String],
) -> Result<Option<host::LoadedBackend>> {
    let name = config.backend.clone();
    let library = library_path(backend_directory, &name);
    if !library.is_file() {
        return Ok(None);
    }
    let (backend, model) =
        load_on_backend(config, model_dir, version, library, backend_directory, backend_settings, true)?;
    let completed = model.config_json();
    drop(model);
    *config = crate::config::from_json(&completed).map_err(|e| {
        Error::internal(format!(
            "model '{}': the config backend '{name}' completed does not parse: {}",
            config.name, e.message
        ))
    })?;
    Ok(Some(backend))
}

/// Loads (once per process) the model's backend library from `library`, then initializes the
/// version on it, with the backend's auto-complete on or off.
fn load_on_backend(
    config: &ModelConfig,
    model_dir: &Path,
    version: i64,
    library: PathBuf,
    backend_directory: &Path,
    backend_settings: &[String],
    auto_complete: bool,
) -> Result<(host::LoadedBackend, LoadedModel)> {
    let name = config.backend.as_str();
    let backend = host::load_backend(&host::BackendSpec {
        name: name.to_string(),
        library,
        config_json: backend_config_json(name, backend_directory, backend_settings),
    })
    .map_err(convert::error)?;
    let model = backend
        .load_model(&host::ModelSpec {
            name: config.name.clone(),
            version: version as u64,
            repository: model_dir.to_path_buf(),
            config_json: crate::config::to_json(config).to_string(),
            auto_complete,
        })
        .map_err(convert::error_in)?;
    Ok((backend, model))
}

/// Makes instances of one model version on a loaded backend library.
pub struct TritonFactory {
    model: Arc<LoadedModel>,
    name: String,
    decoupled: bool,
    /// The config's output names: what a request that names none asks for (as in Triton).
    outputs: Vec<String>,
    /// The implicit sequence states' output names, `None` without a state configuration.
    states: Option<Vec<String>>,
    /// `sequence_batching { iterative_sequence: true }`: the backend may reschedule requests.
    iterative: bool,
    /// Each instance group's name, optimization profiles and secondary devices, for the
    /// instances the backend asks about.
    groups: Vec<GroupDevices>,
}

/// What an instance group tells its instances' backend beyond kind and device.
struct GroupDevices {
    name: String,
    profiles: Vec<String>,
    secondary: Vec<(String, i64)>,
}

impl GroupDevices {
    fn of(config: &ModelConfig) -> Vec<GroupDevices> {
        use crate::proto::inference::model_instance_group::secondary_device::SecondaryDeviceKind;
        config
            .instance_group
            .iter()
            .map(|g| GroupDevices {
                name: g.name.clone(),
                profiles: g.profile.clone(),
                secondary: g
                    .secondary_devices
                    .iter()
                    .map(|d| {
                        let kind = SecondaryDeviceKind::try_from(d.kind).map_or("KIND_NVDLA", |k| k.as_str_name());
                        (kind.to_string(), d.device_id)
                    })
                    .collect(),
            })
            .collect()
    }

    /// The group of an instance named `<group>_<i>`.
    fn find<'a>(groups: &'a [GroupDevices], instance: &str) -> Option<&'a GroupDevices> {
        groups.iter().find(|g| {
            instance
                .strip_prefix(g.name.as_str())
                .and_then(|rest| rest.strip_prefix('_'))
                .is_some_and(|i| i.parse::<usize>().is_ok())
        })
    }
}

impl TritonFactory {
    /// Loads (once per process) and initializes the backend, then initializes the version.
    pub fn new(
        config: &ModelConfig,
        model_dir: &Path,
        version: i64,
        backend_directory: &Path,
        backend_settings: &[String],
    ) -> Result<Self> {
        let name = config.backend.as_str();
        let library = library_path(backend_directory, name);
        if !library.is_file() {
            return Err(Error::invalid(format!(
                "model '{}': unable to find backend library for backend '{name}', searched {} (Triton's Python backend comes with scripts/setup.sh; --backend-directory sets the folder)",
                config.name,
                library.display()
            )));
        }
        let (_, model) =
            load_on_backend(config, model_dir, version, library, backend_directory, backend_settings, false)?;
        let decoupled = config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        let outputs = config.output.iter().map(|o| o.name.clone()).collect();
        let states = match &config.scheduling_choice {
            Some(SchedulingChoice::SequenceBatching(sb)) if !sb.state.is_empty() => {
                Some(sb.state.iter().map(|s| s.output_name.clone()).collect())
            }
            _ => None,
        };
        let iterative = matches!(&config.scheduling_choice,
            Some(SchedulingChoice::SequenceBatching(sb)) if sb.iterative_sequence);
        let groups = GroupDevices::of(config);
        Ok(TritonFactory {
            model: Arc::new(model),
            name: config.name.clone(),
            decoupled,
            outputs,
            states,
            iterative,
            groups,
        })
    }
}

impl BackendFactory for TritonFactory {
    /// A backend library takes a decoupled model's requests several at a time, as in Triton.
    fn decoupled_batches(&self) -> bool {
        true
    }

    /// The responses the backend reports (`ReportResponseStatistics`) are the model's
    /// `response_stats`, and the memory it reports its `memory_usage`, as in Triton.
    fn attach_stats(&self, stats: &Arc<ModelStats>) {
        // Weak: the statistics may outlive the model, which must still finalize when unloaded.
        let model = Arc::downgrade(&self.model);
        stats.set_memory_usage_source(Box::new(move || {
            model.upgrade().map_or_else(Vec::new, |m| m.memory_usage().into_iter().map(convert::memory_usage).collect())
        }));
        let stats = stats.clone();
        self.model.on_response_statistics(Box::new(move |r| stats.record_response(&convert::response_report(r))));
    }

    fn create(&self, instance: &InstanceSpec) -> Result<Box<dyn Backend>> {
        let kind = match instance.kind {
            InstanceKind::Cpu => abi::INSTANCEGROUPKIND_CPU,
            InstanceKind::Gpu => abi::INSTANCEGROUPKIND_GPU,
            InstanceKind::Model => abi::INSTANCEGROUPKIND_MODEL,
        };
        let group = GroupDevices::find(&self.groups, &instance.name);
        let loaded = self
            .model
            .load_instance(&host::InstanceSpec {
                name: instance.name.clone(),
                kind,
                device_id: instance.device.unwrap_or(0),
                profiles: group.map(|g| g.profiles.clone()).unwrap_or_default(),
                secondary_devices: group.map(|g| g.secondary.clone()).unwrap_or_default(),
            })
            .map_err(convert::error_in)?;
        Ok(Box::new(TritonInstance {
            instance: loaded,
            executor: None,
            name: instance.name.clone(),
            model: self.name.clone(),
            decoupled: self.decoupled,
            outputs: self.outputs.clone(),
            states: self.states.clone(),
            iterative: self.iterative,
            failure: None,
            report: None,
            rescheduled: Vec::new(),
        }))
    }
}

/// One instance of a model on a backend library.
pub struct TritonInstance {
    /// Calls the backend's execute on a thread of its own for a batch with a timeout (and knows
    /// when such a call hung); started by the first. Declared first so that it ends before
    /// `instance` drops: the instance's finalize then runs on the instance's thread.
    executor: Option<Executor<LoadedInstance, Outcome>>,
    instance: LoadedInstance,
    /// The instance's name (its executor thread's).
    name: String,
    model: String,
    decoupled: bool,
    outputs: Vec<String>,
    states: Option<Vec<String>>,
    iterative: bool,
    /// The first failure since the last health check.
    failure: Option<Error>,
    /// What the backend reported of the last execution's statistics.
    report: Option<BackendReport>,
    /// The requests of the last execution the backend released with
    /// `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE` (their indices).
    rescheduled: Vec<usize>,
}

impl TritonInstance {
    /// Hands the batch's requests to the backend and reads each one's responses until its
    /// final flag, giving `emit` the request index and each response's outputs. Returns each
    /// request's failure (a response carrying an error, a request released without a final
    /// response, or none before the request's timeout); a failure of `execute` itself fails
    /// them all. The requests the backend rescheduled are noted in `rescheduled`.
    ///
    /// The backend's execute runs here, on the instance's thread, as Triton runs it on its
    /// instance's: a request's cancellation reaches the backend through the engine's flags,
    /// set from the thread where the client goes. Only a batch with a timeout runs on the
    /// executor's thread, watched until its first request's deadline.
    fn run(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(usize, Vec<Tensor>, bool) -> Result<()>,
    ) -> Result<Vec<Option<Error>>> {
        let outputs = if batch.outputs.is_empty() { &self.outputs[..] } else { batch.outputs };
        // When each request the backend sees must have its final response: its timeout after it
        // arrived (Triton's timeout covers the queue only; Tritium's also covers a backend that
        // never answers), `None` without a timeout.
        let deadlines = watchdog::deadlines(&batch);
        let mut requests = convert::requests(&batch, outputs);
        for (i, r) in requests.iter_mut().enumerate() {
            r.model.clone_from(&self.model);
            r.state_outputs.clone_from(&self.states);
            r.reschedulable = self.iterative;
            if let Some(gone) = batch.cancelled.get(i) {
                r.cancel = gone.clone();
            }
            // The request's one response goes to its client from inside `ResponseSend`.
            if let Some(Some(early)) = batch.early.get(i).filter(|_| self.answers_early()) {
                let early = early.clone();
                r.on_final = Some(host::FinalHook::new(move |outputs| {
                    early.answer(outputs.into_iter().map(convert::tensor).collect());
                }));
            }
        }
        self.rescheduled.clear();
        let pending = match deadlines.iter().flatten().min().copied() {
            None => self.instance.execute(requests).map_err(convert::error),
            Some(deadline) => {
                let executor = match &mut self.executor {
                    Some(executor) => executor,
                    None => self.executor.insert(Executor::start(self.instance.clone(), &self.name)?),
                };
                executor
                    .execute(&self.model, move |i| i.execute(requests), deadline)
                    .and_then(|o| o.map_err(convert::error))
            }
        };
        let pending = match pending {
            Ok(p) => p,
            Err(e) => {
                self.failure.get_or_insert(e.clone());
                return Err(e);
            }
        };
        let mut failures = Vec::with_capacity(pending.len());
        let mut report = BackendReport::default();
        for (index, (p, deadline)) in pending.into_iter().zip(deadlines).enumerate() {
            let (failure, rescheduled) = self.responses(index, &p, deadline, emit);
            if rescheduled {
                self.rescheduled.push(index);
            }
            if let Some(e) = &failure {
                self.failure.get_or_insert(e.clone());
            }
            failures.push(failure);
            let own = *p.report.lock().unwrap_or_else(|e| e.into_inner());
            report.requests.push(own.map(|r| (r.success, convert::times(&r))));
        }
        report.batches = self.instance.take_batch_reports().iter().map(|r| (r.batch_size, convert::times(r))).collect();
        self.report = Some(report);
        Ok(failures)
    }

    /// Reads one request's responses until its final flag; its failure, if any, and whether
    /// the backend rescheduled it (released it with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`:
    /// its responses of this iteration are read until the backend holds nothing of it, and it
    /// owes no final flag yet). A request whose client goes meanwhile is marked cancelled by the
    /// engine, which the backend sees (`TRITONBACKEND_RequestIsCancelled`, a model.py's
    /// `request.is_cancelled()`) and decides how to end, as in Triton.
    fn responses(
        &self,
        index: usize,
        p: &host::Pending,
        deadline: Option<Instant>,
        emit: &mut dyn FnMut(usize, Vec<Tensor>, bool) -> Result<()>,
    ) -> (Option<Error>, bool) {
        let mut failure = None;
        let mut responses = 0usize;
        let mut rescheduled = false;
        let mut refusal: Option<String> = None;
        loop {
            let event = match deadline {
                None => p.events.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(d) => p.events.recv_timeout(d.saturating_duration_since(Instant::now())),
            };
            let event = match event {
                Ok(event) => event,
                Err(RecvTimeoutError::Disconnected) if rescheduled => return (failure, true),
                Err(RecvTimeoutError::Disconnected) => {
                    // A refused reschedule says why (Triton's text; Triton itself only logs it and
                    // leaves the client waiting).
                    let why = refusal.map(|r| format!(": {r}")).unwrap_or_default();
                    return (
                        failure.or(Some(Error::internal(format!(
                            "model '{}': the backend released the request without a final response ({responses} responses sent){why}",
                            self.model
                        )))),
                        false,
                    );
                }
                Err(RecvTimeoutError::Timeout) => {
                    // The backend keeps the request; whatever it sends later goes nowhere.
                    p.cancel.store(true, std::sync::atomic::Ordering::Relaxed);
                    return (
                        failure.or(Some(Error::unavailable(format!(
                            "model '{}': the backend sent no final response within the request's timeout ({responses} responses sent)",
                            self.model
                        )))),
                        false,
                    );
                }
            };
            let is_final = event.is_final();
            match &event {
                HostEvent::Rescheduled => rescheduled = true,
                HostEvent::Answered => {
                    // Its client has it; the engine ignores the outcome that stands for it.
                    responses += 1;
                    if let Err(e) = emit(index, Vec::new(), true) {
                        failure.get_or_insert(e);
                    }
                }
                HostEvent::RescheduleRefused(e) => {
                    tracing::error!("model '{}': failed to release request: {e}", self.model);
                    refusal = Some(e.message.clone());
                }
                _ => {}
            }
            if let HostEvent::Response(r) = event {
                responses += 1;
                if let Some(e) = r.error {
                    failure.get_or_insert(convert::error(e));
                } else if failure.is_none() && (!r.outputs.is_empty() || !self.decoupled || !is_final) {
                    let outputs = r.outputs.into_iter().map(convert::tensor).collect::<Result<_>>();
                    if let Err(e) = outputs.and_then(|o| emit(index, o, is_final)) {
                        failure.get_or_insert(e);
                    }
                }
            }
            if is_final {
                // A final response ends the request, even one the backend also rescheduled.
                return (failure, false);
            }
        }
    }
}

impl Backend for TritonInstance {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let outputs = self.execute_each(batch, &[])?.into_iter().collect::<Result<Vec<_>>>()?;
        convert::concat(&self.model, outputs)
    }

    /// Each request of the batch is its own request to the backend, answered on its own: one
    /// that fails (an error response, as a model.py returns for one bad request) fails alone,
    /// as in Triton.
    fn execute_each(&mut self, batch: BatchInput<'_>, _sizes: &[usize]) -> Result<Vec<Result<Vec<Tensor>>>> {
        let count = batch.requests.len().max(1);
        let mut outputs: Vec<Option<Result<Vec<Tensor>>>> = vec![None; count];
        let model = self.model.clone();
        let failures = self.run(batch, &mut |index, o, _| {
            if outputs[index].replace(Ok(o)).is_some() {
                return Err(Error::internal(format!(
                    "model '{model}' sent more than one response to a request, which only a decoupled model may do"
                )));
            }
            Ok(())
        })?;
        Ok(outputs
            .into_iter()
            .zip(failures)
            .enumerate()
            .map(|(i, (o, failure))| match failure {
                Some(e) => Err(e),
                // Rescheduled: it answers in a later iteration.
                None if self.rescheduled.contains(&i) => Ok(Vec::new()),
                None => o.unwrap_or_else(|| {
                    Err(Error::internal(format!("model '{}': the backend sent no response", self.model)))
                }),
            })
            .collect())
    }

    /// A backend sees a request's cancellation while it runs (`TRITONBACKEND_RequestIsCancelled`).
    fn sees_cancellation(&self) -> bool {
        true
    }

    /// A non-decoupled request's one response reaches its client from inside
    /// `TRITONBACKEND_ResponseSend`, as in Triton; not that of an iterative sequence (the backend
    /// may still reschedule it) nor one with implicit state (the engine keeps it first).
    fn answers_early(&self) -> bool {
        !self.decoupled && !self.iterative && self.states.is_none()
    }

    fn backend_report(&mut self) -> Option<BackendReport> {
        self.report.take()
    }

    fn take_rescheduled(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.rescheduled)
    }

    fn execute_decoupled(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(Vec<Tensor>) -> Result<()>,
    ) -> Result<()> {
        self.execute_decoupled_final(batch, &mut |o, _| emit(o))
    }

    /// A response the backend sent with the final flag and outputs is the final response, as
    /// Triton sends it (not a response followed by an empty final one).
    fn execute_decoupled_final(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(Vec<Tensor>, bool) -> Result<()>,
    ) -> Result<()> {
        match self.run(batch, &mut |_, o, is_final| emit(o, is_final))?.into_iter().flatten().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Each request of a decoupled batch streams its own responses and fails on its own.
    fn execute_decoupled_each(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(usize, Vec<Tensor>, bool) -> Result<()>,
    ) -> Result<Vec<Option<Error>>> {
        self.run(batch, emit)
    }

    /// After a failed batch: is the instance still able to serve? The backend's
    /// `ModelInstanceReady` says where it has one. Triton 2.51's Python backend has none, and
    /// keeps a dead stub's instance, failing every request with "Stub process '<instance>' is
    /// not healthy."; that error is how it says the stub is gone, so Tritium's supervisor
    /// replaces the instance (a new stub) instead.
    fn health(&mut self) -> Result<()> {
        let Some(failure) = self.failure.take() else { return Ok(()) };
        if self.executor.as_ref().is_some_and(|e| e.hung) {
            return Err(failure);
        }
        match self.instance.ready() {
            Some(ready) => ready.map_err(convert::error),
            None if is_dead_stub(&failure) => Err(failure),
            None => Ok(()),
        }
    }
}

/// What one call of the backend's execute gives back.
type Outcome = std::result::Result<Vec<host::Pending>, host::HostError>;

/// The Python backend's error for a request that found the instance's stub process dead.
fn is_dead_stub(e: &Error) -> bool {
    e.message.starts_with("Stub process '") && e.message.ends_with("' is not healthy.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_config_takes_the_settings_of_its_backend_only() {
        let json = backend_config_json(
            "python",
            Path::new("/b"),
            &["python,shm-default-byte-size=2097152".into(), "onnxruntime,x=1".into()],
        );
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v, serde_json::json!({"cmdline": {"backend-directory": "/b", "shm-default-byte-size": "2097152"}}));
    }

    #[test]
    fn a_dead_stub_is_told_from_other_failures() {
        assert!(is_dead_stub(&Error::internal("Stub process 'errors_0' is not healthy.")));
        assert!(!is_dead_stub(&Error::internal("Failed to process the request(s) for model 'errors_0'")));
    }

    #[test]
    fn the_library_path_is_tritons() {
        assert_eq!(library_path(Path::new("/opt/b"), "python"), PathBuf::from("/opt/b/python/libtriton_python.so"));
    }
}
