//! `backend: "<name>"` for Triton backend libraries, as Triton loads them: the library
//! `<backend-directory>/<name>/libtriton_<name>.so` (Triton's Python backend first) runs under
//! Tritium's engine through the backend API host of `tritium-ffi`. One model object per version
//! (`TRITONBACKEND_ModelInitialize` when the version loads), one instance object per instance
//! (`ModelInstanceInitialize` on the instance's thread; the Python backend starts its stub
//! process there), and each batch goes through `ModelInstanceExecute`; the engine keeps the
//! queues, batching and sequences.

mod convert;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tritium_actors::{Backend, BackendFactory, BatchInput, Error, InstanceKind, InstanceSpec, Result, Tensor};
use tritium_ffi::backend_api::{self as host, abi, HostEvent, LoadedInstance, LoadedModel};

use crate::config::ModelConfig;

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

/// Makes instances of one model version on a loaded backend library.
pub struct TritonFactory {
    model: Arc<LoadedModel>,
    name: String,
    decoupled: bool,
    /// The config's output names: what a request that names none asks for (as in Triton).
    outputs: Vec<String>,
    /// The instance names the backend sees, by instance index: `<group>_<i>` as Triton names
    /// them (Tritium's own names drop `_0` for a group of one).
    instance_names: Vec<String>,
}

/// Triton's names of a config's instances, in the engine's order (group by group, each
/// group's devices, `count` per device).
fn triton_instance_names(config: &ModelConfig) -> Vec<String> {
    let mut names = Vec::new();
    for group in &config.instance_group {
        let per_device = group.count.max(1) as usize;
        let gpu = group.kind == crate::config::model_instance_group::Kind::Gpu as i32;
        let devices = if gpu { group.gpus.len().max(1) } else { 1 };
        for i in 0..devices * per_device {
            names.push(format!("{}_{}", group.name, i % per_device));
        }
    }
    names
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
                auto_complete: false,
            })
            .map_err(|e| convert::error_in(&config.name, e))?;
        let decoupled = config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        let outputs = config.output.iter().map(|o| o.name.clone()).collect();
        let instance_names = triton_instance_names(config);
        Ok(TritonFactory { model: Arc::new(model), name: config.name.clone(), decoupled, outputs, instance_names })
    }
}

impl BackendFactory for TritonFactory {
    fn create(&self, instance: &InstanceSpec) -> Result<Box<dyn Backend>> {
        let kind = match instance.kind {
            InstanceKind::Cpu => abi::INSTANCEGROUPKIND_CPU,
            InstanceKind::Gpu => abi::INSTANCEGROUPKIND_GPU,
            InstanceKind::Model => abi::INSTANCEGROUPKIND_MODEL,
        };
        let loaded = self
            .model
            .load_instance(&host::InstanceSpec {
                name: self.instance_names.get(instance.index).cloned().unwrap_or_else(|| instance.name.clone()),
                kind,
                device_id: instance.device.unwrap_or(0),
            })
            .map_err(|e| convert::error_in(&self.name, e))?;
        Ok(Box::new(TritonInstance {
            instance: loaded,
            model: self.name.clone(),
            decoupled: self.decoupled,
            outputs: self.outputs.clone(),
        }))
    }
}

/// One instance of a model on a backend library.
pub struct TritonInstance {
    instance: LoadedInstance,
    model: String,
    decoupled: bool,
    outputs: Vec<String>,
}

impl TritonInstance {
    /// Runs one request and hands each response's outputs to `emit`, until the final flag.
    fn run(&mut self, batch: BatchInput<'_>, emit: &mut dyn FnMut(Vec<Tensor>) -> Result<()>) -> Result<()> {
        let mut request = convert::request(&batch);
        if request.outputs.is_empty() {
            request.outputs = self.outputs.clone();
        }
        let pending = self.instance.execute(vec![request]).map_err(|e| convert::error_in(&self.model, e))?;
        let pending = pending.into_iter().next().expect("one pending per request");
        let mut responses = 0usize;
        loop {
            let Ok(event) = pending.events.recv() else {
                return Err(Error::internal(format!(
                    "model '{}': the backend released the request without a final response ({responses} responses sent)",
                    self.model
                )));
            };
            let is_final = event.is_final();
            if let HostEvent::Response(r) = event {
                responses += 1;
                if let Some(e) = r.error {
                    return Err(convert::error(e));
                }
                if !r.outputs.is_empty() || !self.decoupled || !is_final {
                    emit(r.outputs.into_iter().map(convert::tensor).collect::<Result<_>>()?)?;
                }
            }
            if is_final {
                return Ok(());
            }
        }
    }
}

impl Backend for TritonInstance {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let mut outputs = None;
        let model = self.model.clone();
        self.run(batch, &mut |o| {
            if outputs.replace(o).is_some() {
                return Err(Error::internal(format!(
                    "model '{model}' sent more than one response to a request, which only a decoupled model may do"
                )));
            }
            Ok(())
        })?;
        outputs.ok_or_else(|| Error::internal(format!("model '{}': the backend sent no response", self.model)))
    }

    fn execute_decoupled(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(Vec<Tensor>) -> Result<()>,
    ) -> Result<()> {
        self.run(batch, emit)
    }
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
    fn instances_get_tritons_names() {
        use crate::config::ModelInstanceGroup;
        let mut config = ModelConfig { name: "m".into(), ..Default::default() };
        config.instance_group = vec![
            ModelInstanceGroup { name: "m_0".into(), count: 1, ..Default::default() },
            ModelInstanceGroup { name: "g".into(), count: 2, ..Default::default() },
        ];
        assert_eq!(triton_instance_names(&config), ["m_0_0", "g_0", "g_1"]);
    }

    #[test]
    fn the_library_path_is_tritons() {
        assert_eq!(library_path(Path::new("/opt/b"), "python"), PathBuf::from("/opt/b/python/libtriton_python.so"));
    }
}
