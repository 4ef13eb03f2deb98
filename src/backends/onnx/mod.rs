//! The ONNX Runtime backend, through `ort` with `load-dynamic`: the shared library comes from
//! the `onnxruntime` wheel (`scripts/setup.sh`), loaded once per process. Each instance owns
//! its own `Session` on its own thread.

mod gpu;
mod placement;
mod strings;
mod values;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

pub use gpu::OnnxGpu;
use ort::environment::Environment;
use ort::session::{RunOptions, Session, SessionInputValue, SessionOutputs};
use ort::value::{TensorElementType, ValueType};
use tritium_actors::tensor::element_count;
use tritium_actors::{Backend, BackendFactory, BatchInput, DataType, Error, InstanceSpec, Result, Tensor};
pub(crate) use values::{le_bytes, le_vec};

use self::placement::Placement;
use super::watchdog;

/// The process's one ONNX Runtime environment; sessions need it alive.
static ENVIRONMENT: OnceLock<Environment> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());

/// Loads ONNX Runtime from `library` and creates the environment; later calls do nothing.
pub fn init_runtime(library: &Path) -> Result<()> {
    if ENVIRONMENT.get().is_some() {
        return Ok(());
    }
    let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if ENVIRONMENT.get().is_some() {
        return Ok(());
    }
    if !library.is_file() {
        return Err(Error::unavailable(format!(
            "ONNX Runtime library not found at {} (run scripts/setup.sh, or pass --onnxruntime-library)",
            library.display()
        )));
    }
    let builder = ort::init_from(library)
        .map_err(|e| Error::unavailable(format!("unable to load ONNX Runtime from {}: {e}", library.display())))?;
    let environment = builder
        .with_name("tritium")
        .build()
        .map_err(|e| Error::unavailable(format!("unable to create the ONNX Runtime environment: {e}")))?;
    let _ = ENVIRONMENT.set(environment);
    Ok(())
}

fn environment() -> Result<&'static Environment> {
    ENVIRONMENT.get().ok_or_else(|| Error::unavailable("ONNX Runtime is not initialized"))
}

/// Session options a config may set through `parameters`.
#[derive(Debug, Clone, Default)]
pub struct OnnxOptions {
    pub intra_op_threads: Option<usize>,
    pub inter_op_threads: Option<usize>,
    /// ONNX Runtime session config entries (`parameters` keys starting `session.`, e.g.
    /// `session.intra_op.allow_spinning`), passed through as they are.
    pub config_entries: Vec<(String, String)>,
    /// What GPU instances ask of ONNX Runtime (providers, CUDA graphs).
    pub gpu: OnnxGpu,
}

impl OnnxOptions {
    /// Whether the intra-op pool threads sleep between parallel sections
    /// (`session.intra_op.allow_spinning` = `0`) rather than spin through every run.
    fn pool_sleeps(&self) -> bool {
        self.config_entries.iter().any(|(k, v)| k == "session.intra_op.allow_spinning" && v == "0")
    }
}

/// One input or output as the ONNX file declares it; `-1` marks a dynamic dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnnxIo {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
}

fn ort_error(context: &str) -> impl Fn(ort::Error) -> Error + '_ {
    move |e| Error::internal(format!("{context}: {e}"))
}

fn open(file: &Path, options: &OnnxOptions, providers: Vec<ort::ep::ExecutionProviderDispatch>) -> Result<Session> {
    let context = format!("unable to load {}", file.display());
    let mut builder = Session::builder(environment()?).map_err(ort_error(&context))?;
    if !providers.is_empty() {
        builder = builder
            .with_execution_providers(providers)
            .map_err(|e| Error::invalid(format!("{context}: registering the GPU execution providers: {e}")))?;
    }
    if let Some(n) = options.intra_op_threads {
        builder = builder.with_intra_threads(n).map_err(|e| Error::internal(format!("{context}: {e}")))?;
    }
    if let Some(n) = options.inter_op_threads {
        builder = builder.with_inter_threads(n).map_err(|e| Error::internal(format!("{context}: {e}")))?;
    }
    for (key, value) in &options.config_entries {
        builder = builder
            .with_config_entry(key, value)
            .map_err(|e| Error::invalid(format!("{context}: session config entry '{key}' = '{value}': {e}")))?;
    }
    builder.commit_from_file(file).map_err(|e| Error::invalid(format!("{context}: {e}")))
}

fn datatype(ty: TensorElementType) -> Option<DataType> {
    Some(match ty {
        TensorElementType::Bool => DataType::Bool,
        TensorElementType::Uint8 => DataType::U8,
        TensorElementType::Uint16 => DataType::U16,
        TensorElementType::Uint32 => DataType::U32,
        TensorElementType::Uint64 => DataType::U64,
        TensorElementType::Int8 => DataType::I8,
        TensorElementType::Int16 => DataType::I16,
        TensorElementType::Int32 => DataType::I32,
        TensorElementType::Int64 => DataType::I64,
        TensorElementType::Float16 => DataType::F16,
        TensorElementType::Bfloat16 => DataType::BF16,
        TensorElementType::Float32 => DataType::F32,
        TensorElementType::Float64 => DataType::F64,
        TensorElementType::String => DataType::Bytes,
        _ => return None,
    })
}

fn io(file: &Path, name: &str, value_type: &ValueType) -> Result<OnnxIo> {
    match value_type {
        ValueType::Tensor { ty, shape, .. } => {
            let datatype = datatype(*ty).ok_or_else(|| {
                Error::unsupported(format!(
                    "{}: '{name}' has element type {ty:?}, which Tritium does not support",
                    file.display()
                ))
            })?;
            Ok(OnnxIo {
                name: name.to_string(),
                datatype,
                shape: shape.iter().map(|d| if *d < 0 { -1 } else { *d }).collect(),
            })
        }
        other => Err(Error::unsupported(format!("{}: '{name}' is a {other:?}, not a tensor", file.display()))),
    }
}

/// A CPU session of `file` (for backends that drive ONNX Runtime themselves, as `llm`).
pub(crate) fn open_cpu(file: &Path, options: &OnnxOptions) -> Result<Session> {
    open(file, options, Vec::new())
}

/// Reads the inputs and outputs an ONNX file declares (for config auto-complete).
pub fn inspect(file: &Path) -> Result<(Vec<OnnxIo>, Vec<OnnxIo>)> {
    let options = OnnxOptions { intra_op_threads: Some(1), inter_op_threads: Some(1), ..OnnxOptions::default() };
    let session = open(file, &options, Vec::new())?;
    let inputs = session.inputs().iter().map(|o| io(file, o.name(), o.dtype())).collect::<Result<_>>()?;
    let outputs = session.outputs().iter().map(|o| io(file, o.name(), o.dtype())).collect::<Result<_>>()?;
    Ok((inputs, outputs))
}

/// Makes one `Session` per instance.
pub struct OnnxFactory {
    model: String,
    file: PathBuf,
    options: OnnxOptions,
}

impl OnnxFactory {
    pub fn new(model: &str, file: PathBuf, options: OnnxOptions) -> Self {
        OnnxFactory { model: model.to_string(), file, options }
    }
}

impl BackendFactory for OnnxFactory {
    fn create(&self, instance: &InstanceSpec) -> Result<Box<dyn Backend>> {
        let providers = self.options.gpu.providers(&self.model, instance)?;
        // On the CPU a session's run keeps nothing per thread: a lone request may run on the
        // thread that submitted it. A GPU session stays on its instance's thread (its stream).
        let inline = providers.is_empty();
        // The pool threads the session makes are the ones named like this thread that it adds.
        let movable = inline && instance.cpu_cores.is_empty() && self.options.pool_sleeps();
        let before = movable.then(placement::named_like_me);
        let session = open(&self.file, &self.options, providers)?;
        let placement = before.and_then(|before| {
            let pool = placement::named_like_me().difference(&before).copied().collect();
            Placement::new(&instance.name, &pool)
        });
        let inputs =
            session.inputs().iter().map(|o| io(&self.file, o.name(), o.dtype())).collect::<Result<Vec<_>>>()?;
        let outputs = session.outputs().iter().map(|o| o.name().to_string()).collect();
        Ok(Box::new(OnnxBackend { model: self.model.clone(), session, inputs, outputs, inline, placement }))
    }
}

struct OnnxBackend {
    model: String,
    session: Session,
    inputs: Vec<OnnxIo>,
    /// The model file's output names, in its order.
    outputs: Vec<String>,
    /// Runs on the CPU only: a batch may run on another thread than the instance's.
    inline: bool,
    /// The instance's thread, until it has moved off its pool's cores (`placement.rs`).
    placement: Option<Placement>,
}

impl OnnxBackend {
    fn check_input(&self, tensor: &Tensor) -> Result<()> {
        let Some(expected) = self.inputs.iter().find(|i| i.name == tensor.name) else {
            return Err(Error::invalid(format!("model '{}': unexpected input '{}'", self.model, tensor.name)));
        };
        if expected.datatype != tensor.datatype {
            return Err(Error::invalid(format!(
                "model '{}': input '{}' has datatype {}, the model file expects {}",
                self.model, tensor.name, tensor.datatype, expected.datatype
            )));
        }
        let rank_ok = expected.shape.len() == tensor.shape.len();
        let dims_ok = rank_ok && expected.shape.iter().zip(&tensor.shape).all(|(e, t)| *e < 0 || e == t);
        if !dims_ok {
            return Err(Error::invalid(format!(
                "model '{}': input '{}' has shape {:?}, the model file expects {:?}",
                self.model, tensor.name, tensor.shape, expected.shape
            )));
        }
        element_count(&tensor.shape)?;
        Ok(())
    }
}

impl Backend for OnnxBackend {
    fn runs_inline(&self) -> bool {
        self.inline
    }

    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        if self.placement.as_mut().is_some_and(Placement::after_run) {
            self.placement = None;
        }
        let mut values: Vec<(&str, SessionInputValue<'_>)> = Vec::with_capacity(batch.inputs.len());
        for tensor in batch.inputs {
            self.check_input(tensor)?;
            values.push((tensor.name.as_str(), values::to_ort(tensor)?.0));
        }
        let model = self.model.as_str();
        let run_error = |e: ort::Error| Error::internal(format!("model '{model}': onnxruntime failed: {e}"));
        if let Some(deadline) = watchdog::stop_at(&batch) {
            // Watched until its first request timeout or client deadline: ONNX Runtime stops the run when the
            // alarm sets its terminate flag. (Options that select outputs cannot be shared with
            // the alarm's thread: every output is computed and the wanted ones kept.)
            let options = Arc::new(RunOptions::new().map_err(run_error)?);
            let terminate = Arc::clone(&options);
            let alarm = watchdog::arm(deadline, move || {
                let _ = terminate.terminate();
            });
            let outputs = self.session.run_with_options(values, &options);
            drop(alarm);
            return match outputs {
                Ok(outputs) => collect_outputs(model, outputs, batch.outputs),
                Err(_) if Instant::now() >= deadline => Err(watchdog::stopped(model, "ONNX Runtime")),
                Err(e) => Err(run_error(e)),
            };
        }
        // Every output asked for (perf_analyzer and most clients name them all): a plain run,
        // without a `RunOptions` and an `OutputSelector` of cloned names per request.
        if self.outputs.iter().all(|o| batch.outputs.is_empty() || batch.outputs.contains(o)) {
            let outputs = self.session.run(values).map_err(run_error)?;
            return collect_outputs(model, outputs, batch.outputs);
        }
        let mut selector = ort::session::OutputSelector::no_default();
        for name in batch.outputs {
            selector = selector.with(name.clone());
        }
        let options = RunOptions::new().map_err(run_error)?.with_outputs(selector);
        let outputs = self.session.run_with_options(values, &options).map_err(run_error)?;
        collect_outputs(model, outputs, batch.outputs)
    }
}

fn collect_outputs(model: &str, outputs: SessionOutputs<'_>, wanted: &[String]) -> Result<Vec<Tensor>> {
    let mut tensors = Vec::new();
    for (name, value) in outputs {
        if wanted.is_empty() || wanted.iter().any(|w| w == name) {
            tensors.push(values::from_ort(model, name, value)?);
        }
    }
    Ok(tensors)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn library() -> Option<PathBuf> {
        let path = PathBuf::from(super::super::SETUP_ONNXRUNTIME_LIBRARY);
        path.is_file().then_some(path)
    }

    fn repo_model(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("model_repository").join(name).join("1/model.onnx")
    }

    #[test]
    fn inspects_and_runs_add_sub() {
        let (Some(lib), true) = (library(), repo_model("add_sub").is_file()) else {
            eprintln!("skipped: run scripts/setup.sh for ONNX Runtime and the bundled models");
            return;
        };
        init_runtime(&lib).unwrap();
        let (inputs, outputs) = inspect(&repo_model("add_sub")).unwrap();
        assert_eq!(inputs.len(), 2);
        assert_eq!(outputs.len(), 2);
        assert!(inputs.iter().all(|i| i.datatype == DataType::F32));

        let factory = OnnxFactory::new("add_sub", repo_model("add_sub"), OnnxOptions::default());
        let spec = InstanceSpec {
            name: "add_sub_0".into(),
            index: 0,
            kind: tritium_actors::InstanceKind::Cpu,
            device: None,
            cpu_cores: Vec::new(),
            rate_limiter: Default::default(),
        };
        let mut backend = factory.create(&spec).unwrap();
        let shape = inputs[0].shape.iter().map(|d| if *d < 0 { 1 } else { *d }).collect::<Vec<_>>();
        let n = element_count(&shape).unwrap();
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let b: Vec<f32> = vec![1.0; n];
        let tensors = vec![
            Tensor::new(inputs[0].name.clone(), DataType::F32, shape.clone(), le_bytes(&a)),
            Tensor::new(inputs[1].name.clone(), DataType::F32, shape.clone(), le_bytes(&b)),
        ];
        let wanted = vec![outputs[1].name.clone()];
        let out = backend.execute(BatchInput::bare(&tensors, &wanted, 1)).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].name, outputs[1].name);
        let got = le_vec::<f32>(&out[0].data);
        assert_eq!(got.len(), n);

        // Every output named (the plain run, without an output selector), in either order, or
        // none named: both outputs, in the model's order, with the model's values.
        let all = vec![outputs[1].name.clone(), outputs[0].name.clone()];
        for wanted in [all, Vec::new()] {
            let out = backend.execute(BatchInput::bare(&tensors, &wanted, 1)).unwrap();
            let names: Vec<&str> = out.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, vec![outputs[0].name.as_str(), outputs[1].name.as_str()], "asked {wanted:?}");
            let sum = le_vec::<f32>(&out[0].data);
            let difference = le_vec::<f32>(&out[1].data);
            assert_eq!(sum, a.iter().zip(&b).map(|(x, y)| x + y).collect::<Vec<_>>());
            assert_eq!(difference, a.iter().zip(&b).map(|(x, y)| x - y).collect::<Vec<_>>());
        }

        // A wrong datatype is the request's error, not a crash.
        let bad = vec![Tensor::new(inputs[0].name.clone(), DataType::I32, shape.clone(), le_bytes(&vec![0i32; n]))];
        let err = backend.execute(BatchInput::bare(&bad, &[], 1)).unwrap_err();
        assert!(err.to_string().contains("datatype"), "{err}");
    }

    #[test]
    fn bytes_elements_travel_with_their_lengths_nul_and_non_utf8_included() {
        let Some(lib) = library() else {
            eprintln!("skipped: run scripts/setup.sh for ONNX Runtime");
            return;
        };
        init_runtime(&lib).unwrap();
        let elements: Vec<Bytes> = [&b"he\0llo"[..], b"", b"\xff\xfe not utf-8", b"\0", b"plain"]
            .iter()
            .map(|e| Bytes::copy_from_slice(e))
            .collect();
        let value = strings::to_ort(vec![5], &elements).unwrap();
        let (shape, data) = strings::from_ort(&value).unwrap();
        assert_eq!(shape, vec![5]);
        let back = Tensor::new("s", DataType::Bytes, shape, data).bytes_elements().unwrap();
        assert_eq!(back, elements);
        // An empty tensor too.
        let (shape, data) = strings::from_ort(&strings::to_ort(vec![0, 3], &[]).unwrap()).unwrap();
        assert_eq!((shape, data.len()), (vec![0, 3], 0));
    }
}
