//! PyTorch instances on a GPU: the device context each KIND_GPU instance owns for its lifetime
//! (a CUDA stream from libtorch's pool, made current on the instance's thread for every
//! execution; the CUDA graphs captured at load; event timing of the stream's busy time), and the
//! graph plan read from Triton's `optimization { cuda { graphs graph_spec } }`.
//!
//! A graph is captured per set of input shapes: the `graph_spec` entries (a batch size and, for
//! inputs whose config dims are variable, their shapes), or, without `graph_spec`, every batch
//! size from 1 to `max_batch_size` when all input dims are fixed. A batch whose shapes match a
//! captured graph replays it (inputs copied into the graph's static input tensors, outputs read
//! from its static outputs); any other batch runs eagerly on the same stream.

use std::collections::HashMap;
use std::time::Duration;

use tch::{Device, IValue, Kind};
use tritium_actors::{DataType, Error, Result};
use tritium_ffi::cuda::{Graph, Runtime, Stream, Timer};

use super::convert;
use crate::config::{engine_data_type, ModelConfig};

/// The input shapes (argument order, batch dimension included) of one graph to capture.
pub type GraphShapes = Vec<Vec<i64>>;

static CAPTURE: parking_lot::Mutex<()> = parking_lot::const_mutex(());

/// What to capture, per instance, from the config.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GraphPlan {
    /// Each graph's input shapes, and the libtorch kind of each argument.
    pub shapes: Vec<GraphShapes>,
    pub kinds: Vec<Kind>,
}

impl GraphPlan {
    /// The graphs `config` asks for (none unless `optimization.cuda.graphs`); `arguments` are the
    /// input names in `forward`'s order.
    pub fn new(config: &ModelConfig, arguments: &[String]) -> Result<GraphPlan> {
        let model = &config.name;
        let Some(cuda) = config.optimization.as_ref().and_then(|o| o.cuda.as_ref()).filter(|c| c.graphs) else {
            return Ok(GraphPlan::default());
        };
        let mut kinds = Vec::new();
        let mut dims = Vec::new();
        for name in arguments {
            let input = config.input.iter().find(|i| &i.name == name).ok_or_else(|| {
                Error::invalid(format!(
                    "model '{model}': CUDA graphs need every input of forward in the config's inputs; '{name}' is a \
                     sequence control or state input, which graphs do not take"
                ))
            })?;
            let datatype = engine_data_type(input.data_type)
                .ok_or_else(|| Error::invalid(format!("model '{model}': input '{name}' has no valid data_type")))?;
            let kind = convert::kind(datatype).filter(|_| datatype != DataType::Bytes).ok_or_else(|| {
                Error::invalid(format!("model '{model}': CUDA graphs need tensor inputs; '{name}' is {datatype}"))
            })?;
            kinds.push(kind);
            dims.push(input.dims.clone());
        }
        let batching = config.max_batch_size > 0;
        let with_batch = |batch: i64, dims: &[i64]| -> Vec<i64> {
            if batching {
                std::iter::once(batch).chain(dims.iter().copied()).collect()
            } else {
                dims.to_vec()
            }
        };
        let mut shapes = Vec::new();
        if cuda.graph_spec.is_empty() {
            if let Some(name) = arguments.iter().zip(&dims).find(|(_, d)| d.iter().any(|x| *x < 0)).map(|(n, _)| n) {
                return Err(Error::invalid(format!(
                    "model '{model}': CUDA graphs without graph_spec need fixed input dims, and input '{name}' has a \
                     variable one; list the shapes to capture in optimization.cuda.graph_spec"
                )));
            }
            for batch in 1..=i64::from(config.max_batch_size.max(1)) {
                shapes.push(dims.iter().map(|d| with_batch(batch, d)).collect());
                if !batching {
                    break;
                }
            }
        } else {
            for spec in &cuda.graph_spec {
                if batching && (spec.batch_size < 1 || spec.batch_size > config.max_batch_size) {
                    return Err(Error::invalid(format!(
                        "model '{model}': graph_spec batch_size {} is outside 1..={}",
                        spec.batch_size, config.max_batch_size
                    )));
                }
                let mut graph = Vec::new();
                for (name, config_dims) in arguments.iter().zip(&dims) {
                    let given = spec.input.get(name).map(|s| s.dim.clone());
                    let dims = match given {
                        Some(d)
                            if d.len() == config_dims.len()
                                && d.iter().zip(config_dims).all(|(g, c)| *g > 0 && (*c < 0 || g == c)) =>
                        {
                            d
                        }
                        Some(d) => {
                            return Err(Error::invalid(format!(
                                "model '{model}': graph_spec shape {d:?} of input '{name}' does not fit its dims \
                                 {config_dims:?}"
                            )))
                        }
                        None if config_dims.iter().all(|d| *d > 0) => config_dims.clone(),
                        None => {
                            return Err(Error::invalid(format!(
                                "model '{model}': graph_spec for batch size {} lacks the shape of input '{name}', \
                                 whose dims {config_dims:?} are variable",
                                spec.batch_size
                            )))
                        }
                    };
                    graph.push(with_batch(i64::from(spec.batch_size), &dims));
                }
                shapes.push(graph);
            }
        }
        Ok(GraphPlan { shapes, kinds })
    }
}

/// One captured graph: its static inputs (argument order) with a pinned host buffer each, and
/// the tensors `forward` returned while it was captured, which each replay rewrites, with a
/// pinned host buffer each: host data moves by DMA through the pinned buffers on the instance's
/// stream (libtorch's `copy_`, which waits for the copy; tch has no non-blocking copy).
struct Captured {
    graph: Graph,
    inputs: Vec<(tch::Tensor, tch::Tensor)>,
    output: Output,
}

/// The tensors of a value `forward` returned (device tensor, pinned host copy), kept in its
/// shape (an `IValue` may hold script objects, which cannot move between threads; a graph's
/// outputs are tensors only).
enum Output {
    Tensor(tch::Tensor, tch::Tensor),
    Tuple(Vec<Output>),
    List(Vec<Output>),
}

fn pinned_like(t: &tch::Tensor, device: Device) -> Result<tch::Tensor> {
    tch::Tensor::zeros(t.size().as_slice(), (t.kind(), Device::Cpu))
        .f_pin_memory(device)
        .map_err(|e| Error::internal(format!("allocating pinned host memory: {e}")))
}

impl Output {
    fn keep(value: IValue, device: Device) -> Result<Output> {
        let all = |items: Vec<IValue>| items.into_iter().map(|v| Output::keep(v, device)).collect::<Result<Vec<_>>>();
        Ok(match value {
            IValue::Tensor(t) => {
                let host = pinned_like(&t, device)?;
                Output::Tensor(t, host)
            }
            IValue::Tuple(items) => Output::Tuple(all(items)?),
            IValue::GenericList(items) => Output::List(all(items)?),
            IValue::TensorList(items) => Output::List(all(items.into_iter().map(IValue::Tensor).collect())?),
            _ => {
                return Err(Error::invalid(
                    "a model run with CUDA graphs must return tensors (or tuples or lists of them)",
                ))
            }
        })
    }

    /// Copies every output to its pinned host buffer (on the current stream, waiting for it).
    fn download(&self) -> Result<()> {
        match self {
            Output::Tensor(device, host) => host
                .shallow_clone()
                .f_copy_(device)
                .map_err(|e| Error::internal(format!("copying a CUDA graph's output to the host: {e}"))),
            Output::Tuple(items) | Output::List(items) => items.iter().try_for_each(Output::download),
        }
    }

    /// A value sharing the host buffers (read before the next execution rewrites them).
    fn share(&self) -> IValue {
        match self {
            Output::Tensor(_, host) => IValue::Tensor(host.shallow_clone()),
            Output::Tuple(items) => IValue::Tuple(items.iter().map(Output::share).collect()),
            Output::List(items) => IValue::GenericList(items.iter().map(Output::share).collect()),
        }
    }
}

/// A KIND_GPU instance's device context.
pub struct GpuContext {
    pub device: Device,
    stream: Stream,
    timer: Timer,
    graphs: HashMap<GraphShapes, Captured>,
    busy: metrics::Counter,
}

impl GpuContext {
    /// Takes a stream on `ordinal`, makes it current on the calling (instance) thread, and
    /// captures the plan's graphs with `run`, the instance's way to call `forward`.
    pub fn new(
        runtime: &'static Runtime,
        ordinal: usize,
        plan: &GraphPlan,
        labels: [(&'static str, String); 2],
        run: impl Fn(&[IValue]) -> Result<IValue>,
    ) -> Result<GpuContext> {
        let cuda = |e: tritium_ffi::cuda::CudaError| Error::unavailable(e.to_string());
        let stream = runtime.stream(ordinal).map_err(cuda)?;
        stream.make_current().map_err(cuda)?;
        let timer = runtime.timer().map_err(cuda)?;
        let device = Device::Cuda(ordinal);
        let mut graphs = HashMap::new();
        for shapes in &plan.shapes {
            let inputs: Vec<tch::Tensor> = shapes
                .iter()
                .zip(&plan.kinds)
                .map(|(shape, kind)| tch::Tensor::zeros(shape.as_slice(), (*kind, device)))
                .collect();
            let arguments = || inputs.iter().map(|t| IValue::Tensor(t.shallow_clone())).collect::<Vec<_>>();
            // One capture at a time in the process: instances load in parallel, and although the
            // capture mode is thread-local, keeping captures apart leaves nothing to chance.
            let _one_at_a_time = CAPTURE.lock();
            // Warm-up runs on this stream first: libtorch's profiling executor settles the graph it
            // runs in the first calls, and capture must see the settled one.
            for _ in 0..3 {
                run(&arguments())?;
            }
            stream.synchronize().map_err(cuda)?;
            let (graph, output) = runtime
                .capture(|| run(&arguments()))
                .map_err(|e| Error::internal(format!("capturing a CUDA graph for input shapes {shapes:?}: {e}")))?;
            let inputs = inputs.into_iter().map(|t| Ok((pinned_like(&t, device)?, t))).collect::<Result<Vec<_>>>()?;
            graphs.insert(shapes.clone(), Captured { graph, inputs, output: Output::keep(output, device)? });
        }
        stream.synchronize().map_err(cuda)?;
        let busy = metrics::counter!("tritium_instance_gpu_busy_us_total", &labels);
        Ok(GpuContext { device, stream, timer, graphs, busy })
    }

    pub fn graphs(&self) -> usize {
        self.graphs.len()
    }

    /// Runs one execution on the instance's stream: the inputs are CPU tensors in argument order;
    /// a captured graph replays when their shapes match one, else `eager` runs `forward` on the
    /// inputs moved to the GPU. Returns forward's value: for a graph already in its pinned host
    /// buffers (the stream synchronized; read it before the next execution), else still on the
    /// GPU. `finish` adds the stream's busy time to the instance's figure.
    pub fn execute(&mut self, inputs: Vec<IValue>, eager: impl FnOnce(&[IValue]) -> Result<IValue>) -> Result<IValue> {
        let cuda = |e: tritium_ffi::cuda::CudaError| Error::internal(e.to_string());
        // The instance thread is the one that made the stream current at load, but libtorch keeps
        // the current stream per thread and per device: set it again, cheaply, every time.
        self.stream.make_current().map_err(cuda)?;
        self.timer.record(&self.stream, false).map_err(cuda)?;
        let shapes: Option<GraphShapes> =
            inputs.iter().map(|v| if let IValue::Tensor(t) = v { Some(t.size()) } else { None }).collect();
        let result = match shapes.as_ref().and_then(|s| self.graphs.get(s)) {
            Some(captured) => {
                for ((staged, target), value) in captured.inputs.iter().zip(&inputs) {
                    let IValue::Tensor(source) = value else { unreachable!("shapes exist only for tensors") };
                    // Host bytes into the pinned buffer, then a DMA from it into the graph's input.
                    let copied =
                        staged.shallow_clone().f_copy_(source).and_then(|_| target.shallow_clone().f_copy_(staged));
                    copied.map_err(|e| Error::internal(format!("copying an input into a CUDA graph: {e}")))?;
                }
                captured.graph.replay().map_err(cuda)?;
                self.timer.record(&self.stream, true).map_err(cuda)?;
                captured.output.download()?;
                return Ok(captured.output.share());
            }
            None => {
                let moved: Vec<IValue> = inputs
                    .into_iter()
                    .map(|v| match v {
                        IValue::Tensor(t) => IValue::Tensor(t.to_device(self.device)),
                        other => other,
                    })
                    .collect();
                eager(&moved)?
            }
        };
        self.timer.record(&self.stream, true).map_err(cuda)?;
        Ok(result)
    }

    /// Adds the last execution's GPU time to the instance's busy figure (waits for the stream,
    /// which reading the outputs has already done).
    pub fn finish(&self) {
        if let Ok(elapsed) = self.timer.elapsed() {
            self.busy.increment(duration_us(elapsed));
        }
    }
}

fn duration_us(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

/// CUDA for a KIND_GPU instance on GPU `ordinal`, or why the instance cannot have it.
pub fn runtime_for(model: &str, instance: &str, ordinal: usize) -> Result<&'static Runtime> {
    let runtime = tritium_ffi::cuda::runtime().map_err(|e| {
        Error::unavailable(format!(
            "model '{model}': instance '{instance}' asks for GPU {ordinal}, but CUDA is off: {e}"
        ))
    })?;
    if ordinal >= runtime.devices() {
        return Err(Error::invalid(format!(
            "model '{model}': instance '{instance}' asks for GPU {ordinal}, but there are {} CUDA device(s)",
            runtime.devices()
        )));
    }
    Ok(runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> ModelConfig {
        crate::config::from_json(&format!(
            r#"{{"name":"enc","max_batch_size":4,
                "input":[{{"name":"ids","data_type":"TYPE_INT64","dims":[8]}},
                         {{"name":"mask","data_type":"TYPE_INT64","dims":[-1]}}],
                "output":[{{"name":"y","data_type":"TYPE_FP32","dims":[2]}}]{extra}}}"#
        ))
        .expect("config parses")
    }

    fn args() -> Vec<String> {
        vec!["ids".to_string(), "mask".to_string()]
    }

    #[test]
    fn no_graphs_unless_the_config_asks() {
        assert_eq!(GraphPlan::new(&config(""), &args()).unwrap(), GraphPlan::default());
        let off = config(r#","optimization":{"cuda":{"graphs":false}}"#);
        assert!(GraphPlan::new(&off, &args()).unwrap().shapes.is_empty());
    }

    #[test]
    fn graph_spec_gives_each_graphs_shapes() {
        let c = config(
            r#","optimization":{"cuda":{"graphs":true,"graph_spec":[
                {"batch_size":2,"input":{"mask":{"dim":[8]}}},
                {"batch_size":4,"input":{"mask":{"dim":[5]},"ids":{"dim":[8]}}}]}}"#,
        );
        let plan = GraphPlan::new(&c, &args()).unwrap();
        assert_eq!(plan.shapes, vec![vec![vec![2, 8], vec![2, 8]], vec![vec![4, 8], vec![4, 5]]]);
        assert_eq!(plan.kinds, vec![Kind::Int64, Kind::Int64]);
    }

    #[test]
    fn variable_dims_need_a_graph_spec_that_fits() {
        let e = GraphPlan::new(&config(r#","optimization":{"cuda":{"graphs":true}}"#), &args()).unwrap_err();
        assert!(e.to_string().contains("input 'mask' has a variable one"), "{e}");
        let lacks = config(r#","optimization":{"cuda":{"graphs":true,"graph_spec":[{"batch_size":1}]}}"#);
        let e = GraphPlan::new(&lacks, &args()).unwrap_err();
        assert!(e.to_string().contains("lacks the shape of input 'mask'"), "{e}");
        let wrong = config(
            r#","optimization":{"cuda":{"graphs":true,"graph_spec":[{"batch_size":1,"input":{"mask":{"dim":[3]},"ids":{"dim":[9]}}}]}}"#,
        );
        let e = GraphPlan::new(&wrong, &args()).unwrap_err();
        assert!(e.to_string().contains("[9] of input 'ids' does not fit its dims [8]"), "{e}");
        let big = config(
            r#","optimization":{"cuda":{"graphs":true,"graph_spec":[{"batch_size":5,"input":{"mask":{"dim":[3]}}}]}}"#,
        );
        assert!(GraphPlan::new(&big, &args()).unwrap_err().to_string().contains("outside 1..=4"));
    }

    #[test]
    fn fixed_dims_capture_every_batch_size() {
        let c = crate::config::from_json(
            r#"{"name":"m","max_batch_size":3,"input":[{"name":"x","data_type":"TYPE_FP16","dims":[2,2]}],
                "output":[{"name":"y","data_type":"TYPE_FP16","dims":[2]}],"optimization":{"cuda":{"graphs":true}}}"#,
        )
        .unwrap();
        let plan = GraphPlan::new(&c, &["x".to_string()]).unwrap();
        assert_eq!(plan.shapes, vec![vec![vec![1, 2, 2]], vec![vec![2, 2, 2]], vec![vec![3, 2, 2]]]);
        assert_eq!(plan.kinds, vec![Kind::Half]);
    }

    #[test]
    fn graphs_take_tensor_inputs_only() {
        let c = crate::config::from_json(
            r#"{"name":"m","max_batch_size":0,"input":[{"name":"s","data_type":"TYPE_STRING","dims":[1]}],
                "output":[{"name":"y","data_type":"TYPE_FP32","dims":[1]}],"optimization":{"cuda":{"graphs":true}}}"#,
        )
        .unwrap();
        let e = GraphPlan::new(&c, &["s".to_string()]).unwrap_err();
        assert!(e.to_string().contains("need tensor inputs; 's' is BYTES"), "{e}");
    }

    #[test]
    fn a_gpu_instance_without_cuda_says_why() {
        let e = runtime_for("m", "m_0", 0).err().expect("CUDA is off in tests");
        assert!(e.to_string().contains("asks for GPU 0, but CUDA is off"), "{e}");
    }
}
