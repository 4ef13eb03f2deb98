//! The PyTorch backend (`platform: "pytorch_libtorch"` / `backend: "pytorch"`): TorchScript
//! `model.pt` files run by libtorch through `tch`, with the conventions of Triton's PyTorch
//! backend. Each instance loads its own `CModule` on its own thread.
//!
//! - Inputs reach `forward` by position: a name `<anything>__<index>` says the position (Triton's
//!   `INPUT__0`); otherwise every input must be named after one of `forward`'s arguments (read from the
//!   archive, `signature.rs`). Control and state inputs of a sequence model are inputs like any other, so the
//!   engine keeps a sequence's state as it does for ONNX.
//! - Outputs: `<anything>__<index>` picks that element of the returned tuple or list; otherwise outputs take
//!   the elements in config order (the config's outputs, then the state outputs).
//! - Parameters, as Triton's: `INFERENCE_MODE` (default true; runs `forward` without autograd),
//!   `DISABLE_OPTIMIZED_EXECUTION`, `ENABLE_JIT_PROFILING`, `ENABLE_JIT_EXECUTOR`, `INTRA_OP_THREAD_COUNT`
//!   (per instance thread; without it N instances split the cores) and `INTER_OP_THREAD_COUNT` (process-wide
//!   in libtorch, so the first model that sets it wins).

mod convert;
mod gpu;
pub mod openmp;
mod signature;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

pub use signature::forward_arguments;
use tch::{CModule, Device, IValue};
use tritium_actors::{
    Backend, BackendFactory, BatchInput, DataType, Error, InstanceKind, InstanceSpec, Result, Tensor,
};

use super::watchdog::{self, Executor};
use crate::config::model_config::SchedulingChoice;
use crate::config::{engine_data_type, ModelConfig};

/// Triton's PyTorch backend parameters, read once from the config.
#[derive(Debug, Clone, PartialEq)]
pub struct PytorchOptions {
    pub inference_mode: bool,
    pub disable_optimized_execution: bool,
    pub jit_profiling: Option<bool>,
    pub jit_executor: Option<bool>,
    pub intra_op_threads: Option<usize>,
    pub inter_op_threads: Option<usize>,
}

/// Where each input goes and where each output comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct IoPlan {
    /// Input name -> argument position of `forward`.
    pub inputs: HashMap<String, usize>,
    /// The input name of each argument `forward` is given, by position (trailing arguments the
    /// config leaves out keep their defaults).
    pub arguments: Vec<String>,
    /// Output name -> (element of the result, datatype, dims with the batch dimension).
    pub outputs: Vec<(String, usize, DataType, Vec<i64>)>,
}

/// `<anything>__<index>` -> index.
fn convention_index(name: &str) -> Option<usize> {
    let (prefix, index) = name.rsplit_once("__")?;
    if prefix.is_empty() || index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    index.parse().ok()
}

fn bool_parameter(config: &ModelConfig, key: &str) -> Result<Option<bool>> {
    let Some(p) = config.parameters.get(key) else { return Ok(None) };
    match p.string_value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(Some(true)),
        "false" | "0" | "no" | "off" => Ok(Some(false)),
        other => Err(Error::invalid(format!(
            "model '{}': parameter '{key}' must be true or false, got '{other}'",
            config.name
        ))),
    }
}

impl PytorchOptions {
    pub fn from_config(config: &ModelConfig) -> Result<Self> {
        let threads = |key: &str| -> Result<Option<usize>> {
            Ok(crate::config::uint_parameter(&config.name, &config.parameters, key)?
                .filter(|n| *n > 0)
                .map(|n| n as usize))
        };
        Ok(PytorchOptions {
            inference_mode: bool_parameter(config, "INFERENCE_MODE")?.unwrap_or(true),
            disable_optimized_execution: bool_parameter(config, "DISABLE_OPTIMIZED_EXECUTION")?.unwrap_or(false),
            jit_profiling: bool_parameter(config, "ENABLE_JIT_PROFILING")?,
            jit_executor: bool_parameter(config, "ENABLE_JIT_EXECUTOR")?,
            intra_op_threads: threads("INTRA_OP_THREAD_COUNT")?.or_else(|| super::shared_intra_threads(config)),
            inter_op_threads: threads("INTER_OP_THREAD_COUNT")?,
        })
    }
}

impl IoPlan {
    /// The plan for `config`, given `forward`'s argument names when the archive told them.
    pub fn new(config: &ModelConfig, arguments: Option<&[String]>) -> Result<Self> {
        let model = &config.name;
        let mut input_names: Vec<String> = config.input.iter().map(|i| i.name.clone()).collect();
        let mut output_specs: Vec<(String, i32, Vec<i64>)> =
            config.output.iter().map(|o| (o.name.clone(), o.data_type, o.dims.clone())).collect();
        if let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice {
            input_names.extend(sb.control_input.iter().map(|c| c.name.clone()));
            for s in &sb.state {
                input_names.push(s.input_name.clone());
                output_specs.push((s.output_name.clone(), s.data_type, s.dims.clone()));
            }
        }
        let mut inputs = HashMap::new();
        if input_names.iter().all(|n| convention_index(n).is_some()) {
            for name in &input_names {
                inputs.insert(name.clone(), convention_index(name).unwrap_or_default());
            }
        } else {
            let Some(arguments) = arguments else {
                return Err(Error::invalid(format!(
                    "model '{model}': input names must follow the naming convention <name>__<index> (e.g. \
                     INPUT__0) or name forward's arguments, and forward's arguments could not be read from the \
                     model file"
                )));
            };
            for name in &input_names {
                let position = arguments.iter().position(|a| a == name).ok_or_else(|| {
                    Error::invalid(format!(
                        "model '{model}': input '{name}' neither follows the naming convention <name>__<index> \
                         nor names an argument of forward (its arguments: {})",
                        arguments.join(", ")
                    ))
                })?;
                inputs.insert(name.clone(), position);
            }
        }
        // Every argument up to the last one given must have an input; only trailing ones may be
        // left to their defaults.
        let arity = inputs.values().max().map_or(0, |m| m + 1);
        if let Some(taken) = arguments.map(<[String]>::len).filter(|n| arity > *n) {
            let (name, position) = inputs.iter().max_by_key(|(_, p)| **p).expect("arity > 0 means an input");
            return Err(Error::invalid(format!(
                "model '{model}': input '{name}' goes to argument {position}, but forward takes {taken}"
            )));
        }
        let mut by_position: Vec<Option<String>> = vec![None; arity];
        for (name, position) in &inputs {
            if let Some(other) = by_position[*position].replace(name.clone()) {
                return Err(Error::invalid(format!(
                    "model '{model}': inputs '{other}' and '{name}' both go to argument {position} of forward"
                )));
            }
        }
        let by_position = by_position
            .into_iter()
            .enumerate()
            .map(|(position, name)| {
                name.ok_or_else(|| {
                    let argument =
                        arguments.and_then(|a| a.get(position)).map(|a| format!(" ('{a}')")).unwrap_or_default();
                    Error::invalid(format!(
                        "model '{model}': no input of the config goes to argument {position}{argument} of forward; \
                         only trailing arguments may be left out"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let by_convention = output_specs.iter().all(|(n, _, _)| convention_index(n).is_some());
        let batch = config.max_batch_size > 0;
        let mut outputs = Vec::with_capacity(output_specs.len());
        for (order, (name, data_type, dims)) in output_specs.into_iter().enumerate() {
            let datatype = engine_data_type(data_type)
                .ok_or_else(|| Error::invalid(format!("model '{model}': output '{name}' has no valid data_type")))?;
            if datatype != DataType::Bytes && convert::kind(datatype).is_none() {
                return Err(Error::invalid(format!(
                    "model '{model}': output '{name}' has datatype {datatype}, which libtorch tensors do not have"
                )));
            }
            let index = if by_convention { convention_index(&name).unwrap_or(order) } else { order };
            let dims = if batch { std::iter::once(-1).chain(dims).collect() } else { dims };
            outputs.push((name, index, datatype, dims));
        }
        Ok(IoPlan { inputs, arguments: by_position, outputs })
    }
}

/// libtorch's inter-op pool is process-wide and can be sized once, before it starts.
fn set_inter_op_threads(model: &str, n: usize) {
    static SET: OnceLock<(String, usize)> = OnceLock::new();
    let (first, size) = SET.get_or_init(|| {
        // tch panics where libtorch refuses (its pool already started): a warning, not a crash.
        if std::panic::catch_unwind(|| tch::set_num_interop_threads(n as i32)).is_err() {
            tracing::warn!("model '{model}': INTER_OP_THREAD_COUNT {n} has no effect: libtorch refused it");
        }
        (model.to_string(), n)
    });
    if *size != n {
        tracing::warn!(
            "model '{model}': INTER_OP_THREAD_COUNT {n} has no effect: libtorch's inter-op pool is shared by the \
             process and model '{first}' already sized it to {size}"
        );
    }
}

/// Makes one `CModule` per instance.
pub struct PytorchFactory {
    model: String,
    file: PathBuf,
    options: PytorchOptions,
    plan: IoPlan,
    graphs: gpu::GraphPlan,
}

impl PytorchFactory {
    pub fn new(config: &ModelConfig, file: PathBuf) -> Result<Self> {
        let options = PytorchOptions::from_config(config)?;
        let arguments = signature::forward_arguments(&file);
        let plan = IoPlan::new(config, arguments.as_deref())?;
        if options.jit_executor.is_some() {
            tracing::warn!(
                "model '{}': ENABLE_JIT_EXECUTOR has no effect in Tritium: tch gives no access to libtorch's executor \
                 mode, so libtorch's default executor runs",
                config.name
            );
        }
        if let Some(n) = options.inter_op_threads {
            set_inter_op_threads(&config.name, n);
        }
        let graphs = gpu::GraphPlan::new(config, &plan.arguments)?;
        Ok(PytorchFactory { model: config.name.clone(), file, options, plan, graphs })
    }
}

/// The instance's device, and for a GPU the CUDA runtime that serves it.
fn device(model: &str, instance: &InstanceSpec) -> Result<(Device, Option<&'static tritium_ffi::cuda::Runtime>)> {
    match instance.kind {
        InstanceKind::Gpu => {
            let ordinal = instance.device.unwrap_or(0).max(0) as usize;
            let runtime = gpu::runtime_for(model, &instance.name, ordinal)?;
            Ok((Device::Cuda(ordinal), Some(runtime)))
        }
        InstanceKind::Cpu | InstanceKind::Model => Ok((Device::Cpu, None)),
    }
}

/// Loads a TorchScript file, turning libtorch's refusal into a load error with its message.
pub fn load(model: &str, file: &Path, device: Device) -> Result<CModule> {
    if !file.is_file() {
        return Err(Error::invalid(format!("model '{model}': model file {} does not exist", file.display())));
    }
    let mut module = CModule::load_on_device(file, device).map_err(|e| {
        Error::invalid(format!("model '{model}': unable to load {} as TorchScript: {e}", file.display()))
    })?;
    module.f_set_eval().map_err(|e| Error::internal(format!("model '{model}': {e}")))?;
    Ok(module)
}

impl BackendFactory for PytorchFactory {
    fn create(&self, instance: &InstanceSpec) -> Result<Box<dyn Backend>> {
        // Runs on the instance's own thread: the intra-op setting is that thread's.
        if let Some(n) = self.options.intra_op_threads {
            // tch panics where libtorch refuses; the load fails with a message instead.
            std::panic::catch_unwind(|| tch::set_num_threads(n as i32)).map_err(|_| {
                Error::internal(format!("model '{}': libtorch refused INTRA_OP_THREAD_COUNT {n}", self.model))
            })?;
        }
        let (device, runtime) = device(&self.model, instance)?;
        let module = load(&self.model, &self.file, device)?;
        let gpu = match (device, runtime) {
            (Device::Cuda(ordinal), Some(runtime)) => {
                let labels = [("model", self.model.clone()), ("instance", instance.name.clone())];
                let run = |arguments: &[IValue]| forward(&self.model, &module, &self.options, arguments);
                let context = gpu::GpuContext::new(runtime, ordinal, &self.graphs, labels, run)?;
                tracing::info!(
                    "model '{}': instance '{}' runs on GPU {ordinal} on its own CUDA stream, {} CUDA graph(s) captured",
                    self.model,
                    instance.name,
                    context.graphs()
                );
                Some(context)
            }
            _ => {
                if !self.graphs.shapes.is_empty() {
                    tracing::warn!(
                        "model '{}': instance '{}' runs on the CPU, where CUDA graphs do not apply",
                        self.model,
                        instance.name
                    );
                }
                None
            }
        };
        let runner =
            Runner { model: self.model.clone(), module, gpu, options: self.options.clone(), plan: self.plan.clone() };
        Ok(Box::new(PytorchBackend {
            model: self.model.clone(),
            instance: instance.name.clone(),
            runner: Arc::new(Mutex::new(runner)),
            executor: None,
            intra_op_threads: self.options.intra_op_threads,
        }))
    }
}

struct PytorchBackend {
    model: String,
    instance: String,
    /// Taken by the instance's thread for a batch without a timeout, and by the executor's
    /// thread for a batch with one.
    runner: Shared,
    /// The thread that runs the batches with a timeout (libtorch cannot be stopped, so the
    /// instance's thread waits for it up to the timeout), started by the first of them.
    executor: Option<Executor<Shared, Result<Vec<Tensor>>>>,
    intra_op_threads: Option<usize>,
}

/// What runs a batch: the module and, on a GPU, its context. libtorch's values cannot cross
/// threads, so the thread that runs `forward` also converts the tensors both ways.
struct Runner {
    model: String,
    module: CModule,
    /// A KIND_GPU instance's stream, graphs and timing; None on the CPU.
    gpu: Option<gpu::GpuContext>,
    options: PytorchOptions,
    plan: IoPlan,
}

/// The runner, as the instance's and the executor's threads share it.
type Shared = Arc<Mutex<Runner>>;

fn lock(runner: &Mutex<Runner>) -> MutexGuard<'_, Runner> {
    runner.lock().unwrap_or_else(|e| e.into_inner())
}

/// One call of `forward`, with Triton's per-call settings (thread-local in libtorch, set before
/// each run as Triton does).
fn forward(model: &str, module: &CModule, options: &PytorchOptions, arguments: &[IValue]) -> Result<IValue> {
    let setting = |e: tch::TchError| Error::internal(format!("model '{model}': {e}"));
    tch::jit::f_set_graph_executor_optimize(!options.disable_optimized_execution).map_err(setting)?;
    if let Some(profiling) = options.jit_profiling {
        tch::jit::f_set_profiling_mode(profiling).map_err(setting)?;
    }
    let call = || module.forward_is(arguments);
    let result = if options.inference_mode { tch::no_grad(call) } else { call() };
    result.map_err(|e| Error::internal(format!("model '{model}': PyTorch execute failure: {e}")))
}

impl Runner {
    /// Runs one batch: `inputs` to `forward`'s arguments, its result to the `wanted` outputs
    /// (empty = all).
    fn run(&mut self, inputs: &[Tensor], wanted: &[String]) -> Result<Vec<Tensor>> {
        let arguments = self.arguments(inputs)?;
        let (model, module, options) = (&self.model, &self.module, &self.options);
        let value = match &mut self.gpu {
            Some(gpu) => gpu.execute(arguments, |moved| forward(model, module, options, moved))?,
            None => forward(model, module, options, &arguments)?,
        };
        let mut results: Vec<Option<IValue>> = convert::flatten(value).into_iter().map(Some).collect();
        let wanted = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
        let mut outputs = Vec::new();
        for (name, index, datatype, dims) in self.plan.outputs.iter().filter(|(n, ..)| wanted(n)) {
            let count = results.len();
            let value = results.get_mut(*index).and_then(Option::take).ok_or_else(|| {
                Error::internal(format!(
                    "model '{}': output '{name}' is element {index} of forward's result, which has {count}",
                    self.model
                ))
            })?;
            outputs.push(convert::from_ivalue(&self.model, name, value, *datatype, dims)?);
        }
        if let Some(gpu) = &self.gpu {
            gpu.finish();
        }
        Ok(outputs)
    }

    fn arguments(&self, inputs: &[Tensor]) -> Result<Vec<IValue>> {
        let mut slots: Vec<Option<IValue>> = self.plan.arguments.iter().map(|_| None).collect();
        for tensor in inputs {
            let position =
                *self.plan.inputs.get(&tensor.name).ok_or_else(|| {
                    Error::invalid(format!("model '{}': unexpected input '{}'", self.model, tensor.name))
                })?;
            // On a GPU the context moves the host tensors (or copies them into a graph's inputs).
            slots[position] = Some(convert::to_ivalue(&self.model, tensor, Device::Cpu)?);
        }
        slots
            .into_iter()
            .enumerate()
            .map(|(position, slot)| {
                slot.ok_or_else(|| {
                    let name = &self.plan.arguments[position];
                    Error::invalid(format!("model '{}': input '{name}' is missing", self.model))
                })
            })
            .collect()
    }
}

impl PytorchBackend {
    /// Runs a batch that has a timeout on the executor's thread, waiting up to `deadline`.
    fn run_watched(&mut self, batch: &BatchInput<'_>, deadline: Instant) -> Result<Vec<Tensor>> {
        let executor = match &mut self.executor {
            Some(executor) => executor,
            None => self.executor.insert(Executor::start(Arc::clone(&self.runner), &self.instance)?),
        };
        let (inputs, wanted, threads) = (batch.inputs.to_vec(), batch.outputs.to_vec(), self.intra_op_threads);
        let job = move |runner: &mut Shared| {
            // libtorch's intra-op setting is per thread: this one's as the instance thread's.
            if let Some(n) = threads {
                let _ = std::panic::catch_unwind(|| tch::set_num_threads(n as i32));
            }
            lock(runner).run(&inputs, &wanted)
        };
        executor.execute(&self.model, job, deadline)?
    }
}

impl Backend for PytorchBackend {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        if self.executor.as_ref().is_some_and(|e| e.hung) {
            return Err(watchdog::hung(&self.model));
        }
        match watchdog::deadline(&batch) {
            None => lock(&self.runner).run(batch.inputs, batch.outputs),
            Some(deadline) => self.run_watched(&batch, deadline),
        }
    }

    /// After a batch whose execution never returned: the instance is replaced.
    fn health(&mut self) -> Result<()> {
        match &self.executor {
            Some(executor) if executor.hung => Err(watchdog::hung(&self.model)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> ModelConfig {
        crate::config::from_json(json).expect("config parses")
    }

    #[test]
    fn the_naming_convention_gives_positions() {
        assert_eq!(convention_index("INPUT__0"), Some(0));
        assert_eq!(convention_index("my__input__12"), Some(12));
        for name in ["INPUT0", "__3", "INPUT__", "INPUT__x"] {
            assert_eq!(convention_index(name), None, "{name}");
        }
    }

    #[test]
    fn inputs_by_convention_or_by_forward_argument_names() {
        let c = config(
            r#"{"name":"m","max_batch_size":4,
                "input":[{"name":"INPUT__1","data_type":"TYPE_FP32","dims":[2]},
                         {"name":"INPUT__0","data_type":"TYPE_INT32","dims":[2]}],
                "output":[{"name":"OUTPUT__1","data_type":"TYPE_FP32","dims":[2]},
                          {"name":"OUTPUT__0","data_type":"TYPE_INT32","dims":[2]}]}"#,
        );
        let plan = IoPlan::new(&c, None).unwrap();
        assert_eq!((plan.inputs["INPUT__0"], plan.inputs["INPUT__1"]), (0, 1));
        assert_eq!(plan.arguments, ["INPUT__0", "INPUT__1"]);
        assert_eq!(plan.outputs[0], ("OUTPUT__1".to_string(), 1, DataType::F32, vec![-1, 2]));

        let c = config(
            r#"{"name":"m","input":[{"name":"b","data_type":"TYPE_FP32","dims":[1]},
                                      {"name":"a","data_type":"TYPE_FP32","dims":[1]}],
                "output":[{"name":"y","data_type":"TYPE_FP32","dims":[1]},
                          {"name":"z","data_type":"TYPE_STRING","dims":[-1]}]}"#,
        );
        let args = vec!["a".to_string(), "b".to_string()];
        let plan = IoPlan::new(&c, Some(&args)).unwrap();
        assert_eq!((plan.inputs["a"], plan.inputs["b"]), (0, 1));
        assert_eq!((plan.outputs[0].1, plan.outputs[1].1), (0, 1), "outputs in config order");

        let e = IoPlan::new(&c, None).unwrap_err();
        assert!(e.to_string().contains("naming convention <name>__<index>"), "{e}");
        let e = IoPlan::new(&c, Some(&["a".to_string(), "c".to_string()])).unwrap_err();
        assert!(e.to_string().contains("input 'b' neither follows"), "{e}");
        // A trailing argument with a default may be left out; one in the middle may not.
        let args = vec!["a".to_string(), "b".to_string(), "rest".to_string()];
        assert_eq!(IoPlan::new(&c, Some(&args)).unwrap().arguments, ["a", "b"]);
        let args = vec!["a".to_string(), "gap".to_string(), "b".to_string()];
        let e = IoPlan::new(&c, Some(&args)).unwrap_err();
        assert!(e.to_string().contains("no input of the config goes to argument 1 ('gap')"), "{e}");
    }

    #[test]
    fn sequence_control_and_state_travel_as_inputs_and_outputs() {
        let c = config(
            r#"{"name":"acc","max_batch_size":4,
                "input":[{"name":"INPUT__0","data_type":"TYPE_INT32","dims":[1]}],
                "output":[{"name":"OUTPUT__0","data_type":"TYPE_INT32","dims":[1]}],
                "sequence_batching":{"control_input":[{"name":"START__1","control":[{"kind":"CONTROL_SEQUENCE_START","int32_false_true":[0,1]}]}],
                  "state":[{"input_name":"ACC__2","output_name":"ACC_OUT__1","data_type":"TYPE_INT32","dims":[1]}]}}"#,
        );
        let plan = IoPlan::new(&c, None).unwrap();
        assert_eq!(plan.arguments, ["INPUT__0", "START__1", "ACC__2"]);
        assert_eq!(plan.outputs[1], ("ACC_OUT__1".to_string(), 1, DataType::I32, vec![-1, 1]));
    }

    #[test]
    fn refuses_types_libtorch_lacks_and_two_inputs_on_one_argument() {
        let c = config(
            r#"{"name":"m","input":[{"name":"A__0","data_type":"TYPE_FP32","dims":[1]}],
                "output":[{"name":"B__0","data_type":"TYPE_UINT32","dims":[1]}]}"#,
        );
        assert!(IoPlan::new(&c, None).unwrap_err().to_string().contains("UINT32"));
        let c = config(
            r#"{"name":"m","input":[{"name":"A__0","data_type":"TYPE_FP32","dims":[1]},
                                      {"name":"B__0","data_type":"TYPE_FP32","dims":[1]}],
                "output":[{"name":"C__0","data_type":"TYPE_FP32","dims":[1]}]}"#,
        );
        assert!(IoPlan::new(&c, None).unwrap_err().to_string().contains("both go to argument 0"));
        let c = config(
            r#"{"name":"m","input":[{"name":"A__0","data_type":"TYPE_FP32","dims":[1]},
                                      {"name":"C__2","data_type":"TYPE_FP32","dims":[1]}],
                "output":[{"name":"Y__0","data_type":"TYPE_FP32","dims":[1]}]}"#,
        );
        assert!(IoPlan::new(&c, None).unwrap_err().to_string().contains("goes to argument 1 of forward"));
        let e = IoPlan::new(&c, Some(&["a".to_string(), "b".to_string()])).unwrap_err();
        assert!(e.to_string().contains("input 'C__2' goes to argument 2, but forward takes 2"), "{e}");
    }

    #[test]
    fn parameters_are_tritons() {
        let c = config(
            r#"{"name":"m","parameters":{"INFERENCE_MODE":{"string_value":"false"},
                "DISABLE_OPTIMIZED_EXECUTION":{"string_value":"true"},"ENABLE_JIT_PROFILING":{"string_value":"false"},
                "INTRA_OP_THREAD_COUNT":{"string_value":"3"},"INTER_OP_THREAD_COUNT":{"string_value":"1"}}}"#,
        );
        let o = PytorchOptions::from_config(&c).unwrap();
        assert!(!o.inference_mode && o.disable_optimized_execution);
        assert_eq!(
            (o.jit_profiling, o.jit_executor, o.intra_op_threads, o.inter_op_threads),
            (Some(false), None, Some(3), Some(1))
        );
        let bad = config(r#"{"name":"m","parameters":{"INFERENCE_MODE":{"string_value":"maybe"}}}"#);
        assert!(PytorchOptions::from_config(&bad).unwrap_err().to_string().contains("INFERENCE_MODE"));
        assert!(PytorchOptions::from_config(&config(r#"{"name":"m"}"#)).unwrap().inference_mode, "Triton's default");
    }
}
