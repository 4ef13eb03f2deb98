//! The TensorFlow backend (`platform: "tensorflow_savedmodel"` / `backend: "tensorflow"`, cargo
//! feature `tensorflow`): `<version>/model.savedmodel/` SavedModels run by TensorFlow's C API
//! through the `tensorflow` crate, with the conventions of Triton's TensorFlow backend (which
//! Triton dropped after 25.02).
//!
//! - The library is loaded at run time, when the first TensorFlow model loads: the `libtensorflow.so` in
//!   `--tensorflow-dir` (else `$TENSORFLOW_DIR`, else the `.tensorflow/lib` that
//!   scripts/install_tensorflow.sh makes: links to PyPI's tensorflow-cpu wheel's `libtensorflow_cc.so.2`). A
//!   binary built with the feature starts and serves every other model where TensorFlow is absent; only
//!   TensorFlow models then fail to load, saying why.
//! - Config tensors are named after the serving signature's keys (`signature.rs`); the signature is
//!   `serving_default` unless the parameter `TF_SIGNATURE_DEF` names another, and the MetaGraph's tag is
//!   `serve` unless `TF_GRAPH_TAG` says.
//! - Threads, with Triton's parameter names: `TF_NUM_INTRA_THREADS`, `TF_NUM_INTER_THREADS` and
//!   `TF_USE_PER_SESSION_THREADS` go into the session's ConfigProto. Without `TF_NUM_INTRA_THREADS`, N
//!   instances split the cores (cores / N each). Each session has its own intra-op pool (the server sets
//!   TensorFlow's `TF_OVERRIDE_GLOBAL_THREADPOOL=1` at start unless it is set), so those sizes hold per
//!   instance rather than the first session's size holding for all. `MAX_SESSION_SHARE_COUNT` (default 1)
//!   lets up to that many instances share one session, as in Triton.
//! - `platform: "tensorflow_graphdef"`: `<version>/model.graphdef`, config tensors named after the graph's
//!   nodes (`graphdef.rs`).
//! - `TF_INIT_OPS_FILE` names a JSON file of operations each session runs once after it loads
//!   (`init_ops.rs`).
//! - TensorFlow runs on the CPU here (PyPI's tensorflow-cpu); KIND_GPU is refused by validation.

mod convert;
mod graphdef;
mod init_ops;
mod signature;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

pub use signature::{IoPlan, SigTensor, Signature};
use tensorflow::{Code, Graph, Operation, SavedModelBundle, Session, SessionOptions, SessionRunArgs};
use tritium_actors::{Backend, BackendFactory, BatchInput, DataType, Error, InstanceSpec, Result, Tensor};

use super::watchdog;
use crate::config::ModelConfig;

/// Where scripts/install_tensorflow.sh puts `libtensorflow.so` (a link into the wheel).
pub const SETUP_TENSORFLOW_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.tensorflow/lib");

/// The folder the library is loaded from (what the `tensorflow-sys-runtime` loader reads).
const DIR_VARIABLE: &str = "TENSORFLOW_DIR";

/// Sets, before the server starts any thread, what TensorFlow and its loader read from the
/// environment: `TENSORFLOW_DIR` (the flag's folder, else the one already set, else the setup
/// one) and `TF_OVERRIDE_GLOBAL_THREADPOOL=1` unless set. Call from `main` only.
pub fn prepare_process(dir: Option<&Path>) {
    let dir = match (dir, std::env::var_os(DIR_VARIABLE)) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(d)) => PathBuf::from(d),
        (None, None) => PathBuf::from(SETUP_TENSORFLOW_DIR),
    };
    // Single-threaded here (main calls this first), so changing the environment is sound.
    std::env::set_var(DIR_VARIABLE, &dir);
    if std::env::var_os("TF_OVERRIDE_GLOBAL_THREADPOOL").is_none() {
        std::env::set_var("TF_OVERRIDE_GLOBAL_THREADPOOL", "1");
    }
}

static LIBRARY: Mutex<bool> = Mutex::new(false);

/// Loads TensorFlow's library once; a failure is retried by the next model that needs it.
pub fn ensure_library() -> Result<()> {
    let mut loaded = LIBRARY.lock().unwrap_or_else(|e| e.into_inner());
    if *loaded {
        return Ok(());
    }
    let dir = std::env::var_os(DIR_VARIABLE).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(SETUP_TENSORFLOW_DIR));
    let file = dir.join("libtensorflow.so");
    if !file.exists() {
        return Err(Error::unavailable(format!(
            "TensorFlow's library not found at {} (run scripts/install_tensorflow.sh, or pass --tensorflow-dir with \
             a folder holding libtensorflow.so, e.g. a link to a tensorflow wheel's libtensorflow_cc.so.2)",
            file.display()
        )));
    }
    tensorflow_sys_runtime::library::load()
        .map_err(|e| Error::unavailable(format!("unable to load TensorFlow from {}: {e}", file.display())))?;
    *loaded = true;
    tracing::info!("TensorFlow {} loaded from {}", tensorflow::version().unwrap_or_default(), file.display());
    Ok(())
}

fn bool_parameter(config: &ModelConfig, key: &str) -> Result<Option<bool>> {
    let Some(p) = config.parameters.get(key) else { return Ok(None) };
    // Triton's TensorFlow backend takes "true", "on" and "1" (any case) as true.
    match p.string_value.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "1" | "yes" => Ok(Some(true)),
        "false" | "off" | "0" | "no" => Ok(Some(false)),
        other => Err(Error::invalid(format!(
            "model '{}': parameter '{key}' must be true or false, got '{other}'",
            config.name
        ))),
    }
}

/// Triton's TensorFlow parameters, read once from the config.
#[derive(Debug, Clone, PartialEq)]
pub struct TfOptions {
    pub graph_tag: String,
    pub signature: String,
    pub intra_op_threads: Option<usize>,
    pub inter_op_threads: Option<usize>,
    pub per_session_threads: bool,
    pub max_session_share: usize,
}

impl TfOptions {
    pub fn from_config(config: &ModelConfig) -> Result<Self> {
        let string = |key: &str, default: &str| {
            config
                .parameters
                .get(key)
                .map(|p| p.string_value.trim().to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| default.to_string())
        };
        let threads = |key: &str| -> Result<Option<usize>> {
            Ok(crate::config::uint_parameter(&config.name, &config.parameters, key)?
                .filter(|n| *n > 0)
                .map(|n| n as usize))
        };
        Ok(TfOptions {
            graph_tag: string("TF_GRAPH_TAG", "serve"),
            signature: string("TF_SIGNATURE_DEF", "serving_default"),
            intra_op_threads: threads("TF_NUM_INTRA_THREADS")?.or_else(|| super::shared_intra_threads(config)),
            inter_op_threads: threads("TF_NUM_INTER_THREADS")?,
            per_session_threads: bool_parameter(config, "TF_USE_PER_SESSION_THREADS")?.unwrap_or(false),
            max_session_share: threads("MAX_SESSION_SHARE_COUNT")?.unwrap_or(1),
        })
    }

    /// The session's serialized ConfigProto: intra_op_parallelism_threads (2),
    /// inter_op_parallelism_threads (5), allow_soft_placement (7, Triton's default true) and
    /// use_per_session_threads (9).
    pub fn session_config(&self) -> Vec<u8> {
        fn varint(out: &mut Vec<u8>, mut v: u64) {
            while v >= 0x80 {
                out.push((v as u8) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        }
        let mut out = Vec::new();
        let mut field = |number: u64, value: u64| {
            varint(&mut out, number << 3);
            varint(&mut out, value);
        };
        if let Some(n) = self.intra_op_threads {
            field(2, n as u64);
        }
        if let Some(n) = self.inter_op_threads {
            field(5, n as u64);
        }
        field(7, 1);
        if self.per_session_threads {
            field(9, 1);
        }
        out
    }
}

/// A loaded SavedModel: its session, graph and the signature it is served through.
struct Loaded {
    session: Session,
    graph: Graph,
    signature: Signature,
}

/// The signature `name` of a loaded MetaGraph, as `signature.rs` sees it.
fn read_signature(model: &str, bundle: &SavedModelBundle, name: &str, tag: &str) -> Result<Signature> {
    let signatures = bundle.meta_graph_def().signatures();
    let Some(def) = signatures.get(name) else {
        // `__saved_model_init_op` and the like are TensorFlow's own, not servable signatures.
        let mut names: Vec<&str> = signatures.keys().map(String::as_str).filter(|n| !n.starts_with("__")).collect();
        names.sort_unstable();
        return Err(Error::invalid(format!(
            "unable to load model '{model}': the SavedModel's MetaGraph tagged '{tag}' has no signature '{name}' \
             (TF_SIGNATURE_DEF; its signatures: {})",
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        )));
    };
    let tensors = |map: &HashMap<String, tensorflow::TensorInfo>| {
        let mut out: Vec<SigTensor> = map
            .iter()
            .map(|(key, info)| {
                let shape = info.shape();
                SigTensor {
                    key: key.clone(),
                    op: info.name().name.clone(),
                    index: info.name().index,
                    datatype: convert::datatype(info.dtype()),
                    tf_type: info.dtype().to_string(),
                    shape: shape.dims().map(|rank| (0..rank).map(|i| shape[i].unwrap_or(-1).max(-1)).collect()),
                }
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    };
    Ok(Signature { name: name.to_string(), inputs: tensors(def.inputs()), outputs: tensors(def.outputs()) })
}

fn session_options(model: &str, options: &TfOptions) -> Result<SessionOptions> {
    ensure_library()?;
    let mut session_options = SessionOptions::new();
    session_options
        .set_config(&options.session_config())
        .map_err(|e| Error::internal(format!("model '{model}': TensorFlow refused the session options: {e}")))?;
    Ok(session_options)
}

/// Loads the SavedModel in a session and runs `init_ops` (TF_INIT_OPS_FILE) in it.
fn load(model: &str, dir: &Path, options: &TfOptions, init_ops: &[String]) -> Result<Loaded> {
    let session_options = session_options(model, options)?;
    let mut graph = Graph::new();
    let bundle =
        SavedModelBundle::load(&session_options, [options.graph_tag.as_str()], &mut graph, dir).map_err(|e| {
            Error::invalid(format!(
                "unable to load model '{model}': TensorFlow could not load {} as a SavedModel with tag '{}': {e}",
                dir.display(),
                options.graph_tag
            ))
        })?;
    let signature = read_signature(model, &bundle, &options.signature, &options.graph_tag)?;
    init_ops::run(model, &bundle.session, &graph, init_ops)?;
    Ok(Loaded { session: bundle.session, graph, signature })
}

/// Imports a GraphDef into a session, its "signature" made from the config's node names, and
/// runs `init_ops` in it.
fn load_graphdef(config: &ModelConfig, file: &Path, options: &TfOptions, init_ops: &[String]) -> Result<Loaded> {
    let model = &config.name;
    let (graph, session) = graphdef::import(model, file, &session_options(model, options)?)?;
    let signature = graphdef::signature(config, &graph)?;
    init_ops::run(model, &session, &graph, init_ops)?;
    Ok(Loaded { session, graph, signature })
}

/// The signature a SavedModel is served through (for config auto-complete).
pub fn inspect(model: &str, dir: &Path, config: &ModelConfig) -> Result<Signature> {
    let mut options = TfOptions::from_config(config)?;
    options.intra_op_threads = Some(1);
    options.inter_op_threads = Some(1);
    Ok(load(model, dir, &options, &[])?.signature)
}

/// Completes a config from the signature, as for ONNX (`autocomplete::complete`); tensors of a
/// type Triton does not map, or of unknown rank, are left for the config to give.
pub fn auto_complete(config: &mut ModelConfig, dir: &Path) -> Result<()> {
    let signature = inspect(&config.name.clone(), dir, config)?;
    let io = |tensors: &[SigTensor]| -> Vec<super::onnx::OnnxIo> {
        tensors
            .iter()
            .filter_map(|t| {
                Some(super::onnx::OnnxIo { name: t.key.clone(), datatype: t.datatype?, shape: t.shape.clone()? })
            })
            .collect()
    };
    super::autocomplete::complete(config, &io(&signature.inputs), &io(&signature.outputs));
    Ok(())
}

/// Makes the instances of one version (a SavedModel folder or a GraphDef file in `dir`): a session each, or
/// shared by up to `MAX_SESSION_SHARE_COUNT` instances.
pub struct TensorflowFactory {
    model: String,
    dir: PathBuf,
    config: ModelConfig,
    options: TfOptions,
    init_ops: Vec<String>,
    sessions: Mutex<Vec<Weak<Loaded>>>,
}

impl TensorflowFactory {
    pub fn new(config: &ModelConfig, dir: PathBuf) -> Result<Self> {
        let options = TfOptions::from_config(config)?;
        let init_ops = init_ops::read(config, &dir)?;
        Ok(TensorflowFactory {
            model: config.name.clone(),
            dir,
            config: config.clone(),
            options,
            init_ops,
            sessions: Mutex::new(Vec::new()),
        })
    }

    fn session(&self) -> Result<Arc<Loaded>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|w| w.strong_count() > 0);
        if let Some(shared) = sessions.iter().find(|w| w.strong_count() < self.options.max_session_share) {
            if let Some(loaded) = shared.upgrade() {
                return Ok(loaded);
            }
        }
        let loaded = Arc::new(if self.config.platform == graphdef::PLATFORM {
            load_graphdef(&self.config, &self.dir, &self.options, &self.init_ops)?
        } else {
            load(&self.model, &self.dir, &self.options, &self.init_ops)?
        });
        sessions.push(Arc::downgrade(&loaded));
        Ok(loaded)
    }
}

struct BoundOp {
    op: Operation,
    index: i32,
    datatype: DataType,
    shape: Option<Vec<i64>>,
}

fn bind_ops(model: &str, graph: &Graph, bound: &[signature::Bound]) -> Result<Vec<(String, BoundOp)>> {
    bound
        .iter()
        .map(|b| {
            let op = graph.operation_by_name_required(&b.op).map_err(|e| {
                Error::invalid(format!(
                    "unable to load model '{model}': tensor '{}' stands for '{}:{}', which the graph lacks: {e}",
                    b.name, b.op, b.index
                ))
            })?;
            Ok((b.name.clone(), BoundOp { op, index: b.index, datatype: b.datatype, shape: b.shape.clone() }))
        })
        .collect()
}

impl BackendFactory for TensorflowFactory {
    fn create(&self, instance: &InstanceSpec) -> Result<Box<dyn Backend>> {
        let loaded = self.session()?;
        let plan = IoPlan::new(&self.config, &loaded.signature)?;
        let inputs = bind_ops(&self.model, &loaded.graph, &plan.inputs)?.into_iter().collect();
        let outputs = bind_ops(&self.model, &loaded.graph, &plan.outputs)?;
        tracing::info!(
            "model '{}': instance '{}' serves signature '{}' of {}",
            self.model,
            instance.name,
            loaded.signature.name,
            self.dir.display()
        );
        Ok(Box::new(TensorflowBackend { model: self.model.clone(), loaded, inputs, outputs }))
    }
}

struct TensorflowBackend {
    model: String,
    loaded: Arc<Loaded>,
    inputs: HashMap<String, BoundOp>,
    outputs: Vec<(String, BoundOp)>,
}

/// TensorFlow's refusal of a run: the request's fault (400 / INVALID_ARGUMENT) for the codes
/// that say so, the server's otherwise; TensorFlow's own text either way.
fn run_error(model: &str, status: tensorflow::Status) -> Error {
    let text = format!("model '{model}': TensorFlow: {status}");
    match status.code() {
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => Error::invalid(text),
        Code::ResourceExhausted | Code::Unavailable => Error::unavailable(text),
        _ => Error::internal(text),
    }
}

impl TensorflowBackend {
    fn check_input(&self, tensor: &Tensor) -> Result<&BoundOp> {
        let bound = self
            .inputs
            .get(&tensor.name)
            .ok_or_else(|| Error::invalid(format!("model '{}': unexpected input '{}'", self.model, tensor.name)))?;
        if bound.datatype != tensor.datatype {
            return Err(Error::invalid(format!(
                "model '{}': input '{}' has datatype {}, the signature expects {}",
                self.model, tensor.name, tensor.datatype, bound.datatype
            )));
        }
        if let Some(shape) = &bound.shape {
            let fits =
                shape.len() == tensor.shape.len() && shape.iter().zip(&tensor.shape).all(|(s, t)| *s < 0 || s == t);
            if !fits {
                return Err(Error::invalid(format!(
                    "model '{}': input '{}' has shape {:?}, the signature expects {:?} (-1: any size)",
                    self.model, tensor.name, tensor.shape, shape
                )));
            }
        }
        Ok(bound)
    }
}

impl Backend for TensorflowBackend {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let mut feeds = Vec::with_capacity(batch.inputs.len());
        for tensor in batch.inputs {
            let bound = self.check_input(tensor)?;
            let feed = convert::to_feed(tensor)
                .map_err(|e| Error::new(e.kind, format!("model '{}': {}", self.model, e.message)))?;
            feeds.push((feed, bound));
        }
        if feeds.len() != self.inputs.len() {
            let missing: Vec<&str> = self
                .inputs
                .keys()
                .filter(|k| !batch.inputs.iter().any(|t| &t.name == *k))
                .map(String::as_str)
                .collect();
            return Err(Error::invalid(format!(
                "model '{}': expected {} inputs but got {}; missing: {}",
                self.model,
                self.inputs.len(),
                batch.inputs.len(),
                missing.join(", ")
            )));
        }
        let mut args = SessionRunArgs::new();
        for (feed, bound) in &feeds {
            feed.add_to(&mut args, &bound.op, bound.index);
        }
        let wanted = |name: &str| batch.outputs.is_empty() || batch.outputs.iter().any(|w| w == name);
        let fetches: Vec<(&str, tensorflow::FetchToken)> = self
            .outputs
            .iter()
            .filter(|(name, _)| wanted(name))
            .map(|(name, bound)| (name.as_str(), args.request_fetch(&bound.op, bound.index)))
            .collect();
        // Watched until its first request timeout or client deadline: TensorFlow cancels the step itself when
        // RunOptions.timeout_in_ms (field 2) runs out, and answers DEADLINE_EXCEEDED.
        let deadline = watchdog::stop_at(&batch);
        if let Some(deadline) = deadline {
            let mut options = Vec::with_capacity(11);
            prost::encoding::int64::encode(2, &watchdog::left_ms(deadline), &mut options);
            args.set_run_options(&options);
        }
        self.loaded.session.run(&mut args).map_err(|e| match deadline {
            Some(_) if e.code() == Code::DeadlineExceeded => watchdog::stopped(&self.model, "TensorFlow"),
            _ => run_error(&self.model, e),
        })?;
        fetches
            .into_iter()
            .enumerate()
            .map(|(position, (name, token))| convert::take_output(&self.model, name, &mut args, token, position))
            .collect()
    }
}

#[cfg(test)]
mod tests;
