//! Backends: the model libraries Tritium runs, each behind the engine's `Backend` trait.
//! `config.pbtxt` picks one with `backend:` or `platform:`; this module maps that choice to a
//! factory, and completes a partial config from the model file where Triton does.

mod autocomplete;
pub mod decoupled;
pub mod identity;
pub mod llm;
pub mod onnx;
pub mod pytorch;
#[cfg(feature = "tensorflow")]
pub mod tensorflow;
pub mod text;
pub mod triton;
pub mod watchdog;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use autocomplete::{autocomplete, Completed};
use tritium_actors::{BackendFactory, Error, Result};

use crate::config::ModelConfig;

/// Where the backends find their libraries, from the command line.
#[derive(Debug, Clone, Default)]
pub struct BackendEnv {
    /// ONNX Runtime's shared library; `None` = the one `scripts/setup.sh` installs.
    pub onnxruntime_library: Option<PathBuf>,
    /// Where Triton backend libraries are (`<dir>/<name>/libtriton_<name>.so`); `None` = the
    /// one `scripts/setup.sh` prepares (Triton's Python backend from nvidia-pytriton).
    pub backend_directory: Option<PathBuf>,
    /// `--backend-config` settings, `<backend>,<key>=<value>`.
    pub backend_config: Vec<String>,
}

/// Where `scripts/setup.sh` puts ONNX Runtime (from the `onnxruntime` wheel in `.venv`).
pub const SETUP_ONNXRUNTIME_LIBRARY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/.venv/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.31.1"
);

/// Where `scripts/setup.sh` puts Triton's backends: those of the nvidia-pytriton wheel in its
/// venv, with the Python backend's stub beside its library.
pub const SETUP_BACKEND_DIRECTORY: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/.pytriton/venv/lib/python3.11/site-packages/pytriton/tritonserver/backends");

/// The venv `scripts/setup.sh` installs Triton's Python backend into; its `bin/` holds the
/// `python3` (with numpy < 2) that the backend's stub processes need.
pub const SETUP_PYTHON_VENV: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.pytriton/venv");

/// With the default backend directory (no `--backend-directory`), puts the setup venv's `bin/`
/// first on this process's `PATH`, which the Python backend's stub processes inherit: the stub
/// embeds Python 3.11 and takes its environment from the first `python3` on `PATH` (Triton
/// leaves that to whoever starts the server). Changes the environment, so it is called before
/// any thread starts. Returns the folder put first, if it did.
pub fn setup_venv_first_on_path(backend_directory: Option<&Path>) -> Option<PathBuf> {
    let bin = Path::new(SETUP_PYTHON_VENV).join("bin");
    if backend_directory.is_some() || !bin.join("python3").exists() {
        return None;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let first = path_with_first(&bin, &path)?;
    std::env::set_var("PATH", first);
    Some(bin)
}

/// `path` with `dir` first, `None` when it already is.
fn path_with_first(dir: &Path, path: &std::ffi::OsStr) -> Option<std::ffi::OsString> {
    if path.is_empty() {
        return Some(dir.as_os_str().to_owned());
    }
    let mut dirs: Vec<PathBuf> = std::env::split_paths(path).collect();
    if dirs.first().map(PathBuf::as_path) == Some(dir) {
        return None;
    }
    dirs.retain(|d| d != dir);
    dirs.insert(0, dir.to_path_buf());
    std::env::join_paths(dirs).ok()
}

impl BackendEnv {
    pub fn onnxruntime_library(&self) -> PathBuf {
        self.onnxruntime_library.clone().unwrap_or_else(|| PathBuf::from(SETUP_ONNXRUNTIME_LIBRARY))
    }

    pub fn backend_directory(&self) -> PathBuf {
        self.backend_directory.clone().unwrap_or_else(|| PathBuf::from(SETUP_BACKEND_DIRECTORY))
    }
}

/// The backend a config names, falling back to the model file found in the version folder
/// (Triton does the same when a config gives neither).
pub fn backend_name(config: &ModelConfig, version_dir: &Path) -> Option<String> {
    if !config.backend.is_empty() {
        return Some(config.backend.clone());
    }
    match config.platform.as_str() {
        "onnxruntime_onnx" => return Some("onnxruntime".into()),
        "pytorch_libtorch" => return Some("pytorch".into()),
        "tensorflow_savedmodel" | "tensorflow_graphdef" => return Some("tensorflow".into()),
        "ensemble" => return None,
        _ => {}
    }
    [("model.onnx", "onnxruntime"), ("model.pt", "pytorch"), ("model.savedmodel", "tensorflow"), ("model.py", "python")]
        .iter()
        .find(|(file, _)| version_dir.join(file).exists())
        .map(|(_, backend)| backend.to_string())
}

/// The model file of a version: `<model dir>/<version>/<default_model_filename>`.
pub fn model_file(config: &ModelConfig, model_dir: &Path, version: i64, default: &str) -> PathBuf {
    let file = if config.default_model_filename.is_empty() { default } else { &config.default_model_filename };
    model_dir.join(version.to_string()).join(file)
}

fn thread_parameter(config: &ModelConfig, key: &str) -> Result<Option<usize>> {
    Ok(crate::config::uint_parameter(&config.name, &config.parameters, key)?.filter(|n| *n > 0).map(|n| n as usize))
}

/// Without `intra_op_thread_count`, N instances of a model split the cores between them (each
/// session would otherwise start a thread per core, and N of them on the same cores slow each
/// other down); a single instance keeps ONNX Runtime's default (one thread per core).
fn shared_intra_threads(config: &ModelConfig) -> Option<usize> {
    let instances: usize = config.instance_group.iter().map(|g| g.count.max(1) as usize).sum();
    if instances <= 1 {
        return None;
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    Some((cores / instances).max(1))
}

/// The GPUs a model's backend can run on here, which decides what KIND_AUTO means for it: the
/// CUDA devices for PyTorch models when CUDA is on, none for every other backend (the ONNX
/// Runtime library this build loads has no GPU execution provider enabled).
pub fn usable_gpus(config: &ModelConfig) -> usize {
    let pytorch = config.backend == "pytorch" || (config.backend.is_empty() && config.platform == "pytorch_libtorch");
    if pytorch {
        tritium_ffi::cuda::runtime().map(|r| r.devices()).unwrap_or(0)
    } else {
        0
    }
}

/// ONNX Runtime's session options from a config's `parameters` and instance groups.
fn onnx_options(config: &ModelConfig) -> Result<onnx::OnnxOptions> {
    Ok(onnx::OnnxOptions {
        intra_op_threads: thread_parameter(config, "intra_op_thread_count")?.or_else(|| shared_intra_threads(config)),
        inter_op_threads: thread_parameter(config, "inter_op_thread_count")?,
        config_entries: config
            .parameters
            .iter()
            .filter(|(k, _)| k.starts_with("session."))
            .map(|(k, v)| (k.clone(), v.string_value.trim().to_string()))
            .collect(),
        gpu: onnx::OnnxGpu::from_config(config)?,
    })
}

/// The factory that makes instances of one version of a normalized, validated config.
pub fn factory(
    config: &ModelConfig,
    model_dir: &Path,
    version: i64,
    env: &BackendEnv,
) -> Result<Arc<dyn BackendFactory>> {
    match config.backend.as_str() {
        "onnxruntime" => {
            let file = model_file(config, model_dir, version, "model.onnx");
            if !file.is_file() {
                return Err(Error::invalid(format!(
                    "model '{}' version {version}: model file {} does not exist",
                    config.name,
                    file.display()
                )));
            }
            onnx::init_runtime(&env.onnxruntime_library())?;
            Ok(Arc::new(onnx::OnnxFactory::new(&config.name, file, onnx_options(config)?)))
        }
        "llm" => {
            onnx::init_runtime(&env.onnxruntime_library())?;
            let file = model_file(config, model_dir, version, "model.onnx");
            Ok(Arc::new(llm::LlmFactory::new(config, model_dir, version, file, onnx_options(config)?)?))
        }
        "pytorch" => {
            let file = model_file(config, model_dir, version, "model.pt");
            if !file.is_file() {
                return Err(Error::invalid(format!(
                    "model '{}' version {version}: model file {} does not exist",
                    config.name,
                    file.display()
                )));
            }
            Ok(Arc::new(pytorch::PytorchFactory::new(config, file)?))
        }
        "tensorflow" => tensorflow_factory(config, model_dir, version),
        "identity" => Ok(Arc::new(identity::IdentityFactory::from_config(config)?)),
        "repeat" => Ok(Arc::new(decoupled::repeat(config)?)),
        "tokenizer" => {
            let file = match config.parameters.get("tokenizer_file") {
                Some(p) => model_dir.join(version.to_string()).join(p.string_value.trim()),
                None => model_file(config, model_dir, version, "tokenizer.json"),
            };
            Ok(Arc::new(text::TokenizerFactory::new(config, &file)?))
        }
        "pooling" => Ok(Arc::new(text::PoolingFactory::new(config)?)),
        "square" => Ok(Arc::new(decoupled::square(config)?)),
        "" => Err(Error::invalid(format!("model '{}': unable to tell the backend (set 'backend' or 'platform')", config.name))),
        other if other == "python" || triton::library_path(&env.backend_directory(), other).is_file() => {
            let dir = env.backend_directory();
            Ok(Arc::new(triton::TritonFactory::new(config, model_dir, version, &dir, &env.backend_config)?))
        }
        other => Err(Error::unsupported(format!(
            "model '{}': backend '{other}' is not available in this Tritium build (available: onnxruntime, pytorch, {}identity, repeat, square, tokenizer, pooling, llm, and Triton backend libraries in {})",
            config.name,
            if cfg!(feature = "tensorflow") { "tensorflow, " } else { "" },
            env.backend_directory().display()
        ))),
    }
}

/// A SavedModel's factory: `<version>/model.savedmodel/` (or `default_model_filename`), loaded by
/// each instance; TensorFlow's library is loaded with the first. A GraphDef's: `<version>/model.graphdef`.
#[cfg(feature = "tensorflow")]
fn tensorflow_factory(config: &ModelConfig, model_dir: &Path, version: i64) -> Result<Arc<dyn BackendFactory>> {
    if config.platform == "tensorflow_graphdef" {
        let file = model_file(config, model_dir, version, "model.graphdef");
        if !file.is_file() {
            return Err(Error::invalid(format!(
                "model '{}' version {version}: {} is not a GraphDef file",
                config.name,
                file.display()
            )));
        }
        tensorflow::ensure_library()?;
        return Ok(Arc::new(tensorflow::TensorflowFactory::new(config, file)?));
    }
    let dir = model_file(config, model_dir, version, "model.savedmodel");
    if !dir.join("saved_model.pb").is_file() && !dir.join("saved_model.pbtxt").is_file() {
        return Err(Error::invalid(format!(
            "model '{}' version {version}: {} is not a SavedModel folder (no saved_model.pb in it)",
            config.name,
            dir.display()
        )));
    }
    tensorflow::ensure_library()?;
    Ok(Arc::new(tensorflow::TensorflowFactory::new(config, dir)?))
}

/// Without the `tensorflow` feature a TensorFlow model fails to load, saying how to get one.
#[cfg(not(feature = "tensorflow"))]
fn tensorflow_factory(config: &ModelConfig, _model_dir: &Path, _version: i64) -> Result<Arc<dyn BackendFactory>> {
    Err(Error::unsupported(format!(
        "model '{}': this Tritium build has no TensorFlow backend; build it with `cargo build --features tensorflow` \
         (scripts/setup.sh installs TensorFlow; `TENSORFLOW=1 scripts/serve.sh` builds and serves with it)",
        config.name
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelInstanceGroup;

    #[test]
    fn the_setup_venv_goes_first_on_the_path_once() {
        let bin = Path::new("/v/bin");
        let moved = path_with_first(bin, std::ffi::OsStr::new("/usr/bin:/v/bin:/bin")).unwrap();
        assert_eq!(moved, std::ffi::OsString::from("/v/bin:/usr/bin:/bin"));
        assert_eq!(path_with_first(bin, std::ffi::OsStr::new("/v/bin:/usr/bin")), None);
        assert_eq!(path_with_first(bin, std::ffi::OsStr::new("")).unwrap(), std::ffi::OsString::from("/v/bin"));
    }

    #[test]
    fn instances_share_the_cores_unless_the_config_says() {
        let mut config = ModelConfig { name: "m".into(), ..Default::default() };
        config.instance_group = vec![ModelInstanceGroup { count: 1, ..Default::default() }];
        assert_eq!(shared_intra_threads(&config), None, "one instance keeps ONNX Runtime's default");
        config.instance_group = vec![
            ModelInstanceGroup { count: 2, ..Default::default() },
            ModelInstanceGroup { count: 62, ..Default::default() },
        ];
        assert_eq!(shared_intra_threads(&config), Some(1), "never below one thread");
        let cores = std::thread::available_parallelism().unwrap().get();
        config.instance_group = vec![ModelInstanceGroup { count: 2, ..Default::default() }];
        assert_eq!(shared_intra_threads(&config), Some((cores / 2).max(1)));
    }

    #[test]
    fn a_savedmodel_folder_or_a_tensorflow_platform_means_the_tensorflow_backend() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("model.savedmodel")).unwrap();
        let config = ModelConfig { name: "m".into(), ..Default::default() };
        assert_eq!(backend_name(&config, dir.path()).as_deref(), Some("tensorflow"));
        let config = ModelConfig { name: "m".into(), platform: "tensorflow_graphdef".into(), ..Default::default() };
        assert_eq!(backend_name(&config, Path::new("/nonexistent")).as_deref(), Some("tensorflow"));
    }

    #[cfg(not(feature = "tensorflow"))]
    #[test]
    fn without_the_feature_a_tensorflow_model_is_told_how_to_get_one() {
        let config = ModelConfig { name: "m".into(), backend: "tensorflow".into(), ..Default::default() };
        let e = factory(&config, Path::new("/nonexistent"), 1, &BackendEnv::default()).err().unwrap();
        assert_eq!(e.kind, tritium_actors::ErrorKind::Unsupported);
        assert!(e.message.contains("has no TensorFlow backend") && e.message.contains("--features tensorflow"), "{e}");
    }
}
