//! Ceiling of the PyTorch backend: one TorchScript model run in-process through libtorch (`tch`,
//! as Tritium's PyTorch backend does: one `CModule`, each input copied from request bytes into a
//! host tensor, `forward` without autograd, the outputs copied back to host memory per run),
//! items/s at each batch size. No server, no network, no batcher.
//!
//!   torch_ceiling --model model_repository/torch_mlp/1/model.pt --dims 256
//!                 [--batch 1,8,32,64] [--seconds 3] [--repeats 3] [--intra-threads N]
//!                 [--inputs 1] [--kind f32|i64] [--device cpu|cuda] [--graphs]
//!
//! `--inputs N --kind i64` feeds N INT64 inputs of `dims` (all ones: valid token ids and a full
//! attention mask for an encoder). `--device cuda` runs on GPU 0 the way a KIND_GPU instance does:
//! CUDA enabled through the `libtorch_cuda.so` beside the libtorch in use, a stream from
//! libtorch's pool made current, inputs moved to the GPU per run; `--graphs` captures one CUDA
//! graph per batch size first and replays it, as the backend does with `optimization { cuda {
//! graphs: true } }`: inputs copied through pinned host buffers into the graph's static inputs,
//! outputs back through pinned buffers (libtorch's `copy_`, which waits for each copy). `--capture-upto N`
//! captures every batch size 1..=N first, in that order, as the backend does at load (libtorch's
//! profiling executor then has seen as many shapes as the server's has).
//!
//! Prints one JSON object per (repeat, batch) on stdout, as `ceiling` does:
//! {"repeat":1,"batch":8,"runs":…,"seconds":…,"items_per_s":…,"p50_us":…,"p99_us":…}.

use std::path::PathBuf;

use tch::{CModule, Device, IValue, Kind, Tensor};
use tritium_ceiling::{measure, pattern, BenchResult};

struct Args {
    model: PathBuf,
    dims: Vec<i64>,
    batches: Vec<usize>,
    seconds: f64,
    repeats: usize,
    intra: Option<i32>,
    inputs: usize,
    kind: Kind,
    cuda: bool,
    graphs: bool,
    capture_upto: usize,
}

fn parse() -> Result<Args, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut a = Args {
        model: root.join("model_repository/torch_mlp/1/model.pt"),
        dims: vec![256],
        batches: vec![1, 8, 32, 64],
        seconds: 3.0,
        repeats: 3,
        intra: None,
        inputs: 1,
        kind: Kind::Float,
        cuda: false,
        graphs: false,
        capture_upto: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--help" | "-h" => {
                println!(
                    "torch_ceiling --model FILE.pt --dims 256 [--batch 1,8,32,64] [--seconds 3] [--repeats 3] \
                     [--intra-threads N] [--inputs 1] [--kind f32|i64] [--device cpu|cuda] [--graphs \
                     [--capture-upto N]]"
                );
                std::process::exit(0);
            }
            "--graphs" => {
                a.graphs = true;
                continue;
            }
            _ => {}
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|_| format!("{flag}: not a number: {v}"));
        match flag.as_str() {
            "--model" => a.model = value.into(),
            "--dims" => a.dims = value.split(',').map(|v| num(v).map(|n| n as i64)).collect::<Result<_, _>>()?,
            "--batch" => a.batches = value.split(',').map(num).collect::<Result<_, _>>()?,
            "--seconds" => a.seconds = value.parse().map_err(|_| format!("--seconds: {value}"))?,
            "--repeats" => a.repeats = num(&value)?,
            "--intra-threads" => a.intra = Some(num(&value)? as i32),
            "--inputs" => a.inputs = num(&value)?.max(1),
            "--capture-upto" => a.capture_upto = num(&value)?,
            "--kind" => {
                a.kind = match value.as_str() {
                    "f32" => Kind::Float,
                    "i64" => Kind::Int64,
                    other => return Err(format!("--kind: f32 or i64, not {other}")),
                }
            }
            "--device" => {
                a.cuda = match value.as_str() {
                    "cpu" => false,
                    "cuda" => true,
                    other => return Err(format!("--device: cpu or cuda, not {other}")),
                }
            }
            _ => return Err(format!("unknown flag {flag} (see --help)")),
        }
    }
    if a.graphs && !a.cuda {
        return Err("--graphs needs --device cuda".to_string());
    }
    Ok(a)
}

fn main() {
    let args = parse().unwrap_or_else(|e| {
        eprintln!("torch_ceiling: {e}");
        std::process::exit(2)
    });
    if let Err(e) = run(&args) {
        eprintln!("torch_ceiling: {e}");
        std::process::exit(1);
    }
}

/// One batch's input bytes, as a request would bring them.
fn input_bytes(args: &Args, batch: usize) -> Vec<u8> {
    let n = batch * args.dims.iter().product::<i64>() as usize;
    match args.kind {
        Kind::Int64 => (0..n).flat_map(|_| 1i64.to_le_bytes()).collect(),
        _ => pattern(n).iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// Every output tensor of `value`, copied to host memory; returns the bytes copied.
fn read_out(value: IValue) -> BenchResult<usize> {
    let tensors = match value {
        IValue::Tensor(t) => vec![t],
        IValue::Tuple(items) | IValue::GenericList(items) => {
            items.into_iter().filter_map(|v| if let IValue::Tensor(t) = v { Some(t) } else { None }).collect()
        }
        _ => return Err("forward returned no tensor".into()),
    };
    let mut total = 0;
    for t in tensors {
        let t = t.to_device(Device::Cpu).contiguous();
        let numel = t.numel();
        let mut bytes = vec![0u8; numel * t.kind().elt_size_in_bytes()];
        t.f_copy_data_u8(&mut bytes, numel)?;
        total += bytes.len();
    }
    Ok(total)
}

/// One captured graph: (pinned host, static device) per input, (device, pinned host) per output.
struct Captured {
    graph: tritium_ffi::cuda::Graph,
    inputs: Vec<(Tensor, Tensor)>,
    outputs: Vec<(Tensor, Tensor)>,
}

fn run(args: &Args) -> BenchResult<()> {
    if let Some(n) = args.intra {
        tch::set_num_threads(n);
    }
    let (device, stream, runtime) = if args.cuda {
        let runtime = tritium_ffi::cuda::enable(None)?;
        let stream = runtime.stream(0)?;
        stream.make_current()?;
        (Device::Cuda(0), Some(stream), Some(runtime))
    } else {
        (Device::Cpu, None, None)
    };
    let mut module = CModule::load_on_device(&args.model, device)?;
    module.set_eval();
    let forward = |inputs: &[IValue]| tch::no_grad(|| module.forward_is(inputs));
    eprintln!(
        "model {} inputs {}x{:?} {:?} on {device:?}{}, intra threads {}",
        args.model.display(),
        args.inputs,
        args.dims,
        args.kind,
        if args.graphs { " with CUDA graphs" } else { "" },
        tch::get_num_threads()
    );
    let mut graphs = std::collections::HashMap::new();
    if args.graphs {
        let runtime = runtime.expect("cuda");
        let mut sizes: Vec<usize> = (1..=args.capture_upto).collect();
        sizes.extend(args.batches.iter().filter(|b| **b > args.capture_upto));
        for batch in sizes {
            let mut shape = vec![batch as i64];
            shape.extend(&args.dims);
            let statics: Vec<Tensor> =
                (0..args.inputs).map(|_| Tensor::zeros(shape.as_slice(), (args.kind, device))).collect();
            let call = || forward(&statics.iter().map(|t| IValue::Tensor(t.shallow_clone())).collect::<Vec<_>>());
            for _ in 0..3 {
                call()?;
            }
            stream.as_ref().expect("cuda").synchronize()?;
            let (graph, output) = runtime.capture(call)?;
            let outputs: Vec<Tensor> = match output {
                IValue::Tensor(t) => vec![t],
                IValue::Tuple(items) => {
                    items.into_iter().filter_map(|v| if let IValue::Tensor(t) = v { Some(t) } else { None }).collect()
                }
                _ => return Err("forward returned no tensor".into()),
            };
            let pinned = |t: &Tensor| Tensor::zeros(t.size().as_slice(), (t.kind(), Device::Cpu)).f_pin_memory(device);
            let inputs =
                statics.into_iter().map(|t| Ok((pinned(&t)?, t))).collect::<Result<Vec<_>, tch::TchError>>()?;
            let outputs =
                outputs.into_iter().map(|t| Ok((pinned(&t)?, t))).collect::<Result<Vec<_>, tch::TchError>>()?;
            let outputs = outputs.into_iter().map(|(p, t)| (t, p)).collect();
            graphs.insert(batch, Captured { graph, inputs, outputs });
        }
    }
    for repeat in 1..=args.repeats {
        for &batch in &args.batches {
            let data = input_bytes(args, batch);
            let mut shape = vec![batch as i64];
            shape.extend(&args.dims);
            let host = || -> BenchResult<Vec<Tensor>> {
                (0..args.inputs).map(|_| Ok(Tensor::f_from_data_size(&data, &shape, args.kind)?)).collect()
            };
            if args.graphs {
                let captured = graphs.get(&batch).ok_or("no graph for this batch size")?;
                let once = || -> BenchResult<usize> {
                    for ((staged, target), source) in captured.inputs.iter().zip(host()?) {
                        staged.shallow_clone().f_copy_(&source)?;
                        target.shallow_clone().f_copy_(staged)?;
                    }
                    captured.graph.replay()?;
                    for (device, pinned) in &captured.outputs {
                        pinned.shallow_clone().f_copy_(device)?;
                    }
                    let mut total = 0;
                    for (_, pinned) in &captured.outputs {
                        let numel = pinned.numel();
                        let mut bytes = vec![0u8; numel * pinned.kind().elt_size_in_bytes()];
                        pinned.f_copy_data_u8(&mut bytes, numel)?;
                        total += bytes.len();
                    }
                    Ok(total)
                };
                measure(repeat, batch, args.seconds, once)?;
            } else {
                let once = || -> BenchResult<usize> {
                    let inputs: Vec<IValue> =
                        host()?.into_iter().map(|t| IValue::Tensor(t.to_device(device))).collect();
                    read_out(forward(&inputs)?)
                };
                measure(repeat, batch, args.seconds, once)?;
            }
        }
    }
    Ok(())
}
