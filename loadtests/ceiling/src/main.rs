//! Ceiling: one ONNX model run in-process through ONNX Runtime (`ort`, as Tritium's ONNX backend
//! does: one `Session`, the input copied into an ORT tensor and the output copied out per run),
//! items/s at each batch size. No server, no network, no batcher: the most a server running the
//! same session on the same threads could do.
//!
//!   ceiling --model model_repository/mlp/1/model.onnx [--onnxruntime-library PATH]
//!           [--batch 1,8,32,64] [--seconds 3] [--repeats 3] [--intra-threads N] [--session KEY=VALUE]
//!           [--sessions N [--share-prepacked]]
//!
//! Prints one JSON object per (repeat, batch) on stdout:
//! {"repeat":1,"batch":8,"runs":…,"seconds":…,"items_per_s":…,"p50_us":…,"p99_us":…,"cpu_us_per_item":…}.
//! With `--sessions N` (N > 1), N sessions of the same file and options run at once, each on its
//! own thread, as a server's N instances do (`"sessions":N` in the line; items/s summed).

use std::path::PathBuf;

use ort::environment::Environment;
use ort::session::builder::PrepackedWeights;
use ort::session::Session;
use ort::value::{DynValue, Tensor, ValueType};
use tritium_ceiling::{default_onnxruntime_library, measure, measure_parallel, pattern, repo_root, BenchResult};

struct Args {
    model: PathBuf,
    library: PathBuf,
    batches: Vec<usize>,
    seconds: f64,
    repeats: usize,
    intra: Option<usize>,
    inter: Option<usize>,
    /// ONNX Runtime session config entries, as a model config's `session.*` parameters give them
    /// to Tritium's ONNX backend.
    session: Vec<(String, String)>,
    /// Sessions run at once, each on its own thread (a server's instance count).
    sessions: usize,
    /// The sessions share one container of prepacked weights.
    share_prepacked: bool,
}

const HELP: &str = "ceiling: items/s of an ONNX model run in-process through ONNX Runtime (ort)

  ceiling --model FILE [--onnxruntime-library PATH] [--batch 1,8,32,64] [--seconds 3]
          [--repeats 3] [--intra-threads N] [--inter-threads N] [--session KEY=VALUE]...
          [--sessions N [--share-prepacked]]

--onnxruntime-library defaults to $ORT_DYLIB_PATH, else the repository's
.venv/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.31.1 (what Tritium uses).
--intra-threads unset = ONNX Runtime's default, as Tritium with one instance and no
intra_op_thread_count. --session sets an ONNX Runtime session config entry (repeatable), as a
model config's `session.*` parameter does in Tritium, e.g. session.intra_op.allow_spinning=0.
--sessions N (default 1) runs N sessions of the model with the same options at once, each on its
own thread, as Tritium's N instances of a model (`instance_group { count: N }`): items/s are
summed and the CPU per item is the process's over the common window. --share-prepacked gives
the sessions one container of prepacked weights (ONNX Runtime's PrepackedWeightsContainer: the
GEMM weights as MLAS packs them, held once for all sessions instead of once per session).
Every input must have one leading batch dimension (-1) and fixed other
dimensions; inputs are FP32 filled with a fixed pattern. One JSON line per (repeat, batch).";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        model: repo_root().join("model_repository/mlp/1/model.onnx"),
        library: default_onnxruntime_library(),
        batches: vec![1, 8, 32, 64],
        seconds: 3.0,
        repeats: 3,
        intra: None,
        inter: None,
        session: Vec::new(),
        sessions: 1,
        share_prepacked: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{HELP}");
            std::process::exit(0);
        }
        if flag == "--share-prepacked" {
            a.share_prepacked = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|_| format!("{flag}: not a number: {v}"));
        match flag.as_str() {
            "--model" => a.model = value.into(),
            "--onnxruntime-library" => a.library = value.into(),
            "--batch" => a.batches = value.split(',').map(num).collect::<Result<_, _>>()?,
            "--seconds" => a.seconds = value.parse().map_err(|_| format!("--seconds: {value}"))?,
            "--repeats" => a.repeats = num(&value)?,
            "--intra-threads" => a.intra = Some(num(&value)?),
            "--inter-threads" => a.inter = Some(num(&value)?),
            "--sessions" => a.sessions = num(&value)?.max(1),
            "--session" => {
                let (k, v) = value.split_once('=').ok_or_else(|| format!("--session wants KEY=VALUE, got {value}"))?;
                a.session.push((k.to_string(), v.to_string()));
            }
            _ => return Err(format!("unknown flag {flag} (see --help)")),
        }
    }
    Ok(a)
}

fn main() {
    let args = parse().unwrap_or_else(|e| {
        eprintln!("ceiling: {e}");
        std::process::exit(2)
    });
    if let Err(e) = run(&args) {
        eprintln!("ceiling: {e}");
        std::process::exit(1);
    }
}

fn open(args: &Args, env: &Environment, prepacked: Option<&PrepackedWeights>) -> BenchResult<Session> {
    let mut builder = Session::builder(env)?;
    if let Some(weights) = prepacked {
        builder = builder.with_prepacked_weights(weights)?;
    }
    if let Some(n) = args.intra {
        builder = builder.with_intra_threads(n)?;
    }
    if let Some(n) = args.inter {
        builder = builder.with_inter_threads(n)?;
    }
    for (key, value) in &args.session {
        builder = builder.with_config_entry(key, value)?;
    }
    Ok(builder.commit_from_file(&args.model)?)
}

/// (name, dims after the batch dimension) for every input.
fn inputs(session: &Session) -> BenchResult<Vec<(String, Vec<i64>)>> {
    let mut inputs = Vec::new();
    for i in session.inputs() {
        let ValueType::Tensor { shape, .. } = i.dtype() else {
            return Err(format!("{}: not a tensor", i.name()).into());
        };
        let dims: Vec<i64> = shape.iter().skip(1).copied().collect();
        if dims.iter().any(|d| *d < 0) {
            return Err(format!("input {} has a dynamic non-batch dimension {shape:?}", i.name()).into());
        }
        inputs.push((i.name().to_string(), dims));
    }
    Ok(inputs)
}

/// One run of `batch` items: the request bytes as a server holds them, copied into a fresh ORT
/// tensor, the outputs copied out. Returns the output elements.
fn run_once(
    session: &mut Session,
    inputs: &[(String, Vec<i64>)],
    data: &[Vec<f32>],
    batch: usize,
) -> BenchResult<usize> {
    let mut values: Vec<(String, DynValue)> = Vec::with_capacity(inputs.len());
    for ((name, dims), d) in inputs.iter().zip(data) {
        let mut shape = vec![batch as i64];
        shape.extend(dims);
        values.push((name.clone(), Tensor::<f32>::from_array((shape, d.clone()))?.into_dyn()));
    }
    let outputs = session.run(values)?;
    let mut n = 0;
    for (_, v) in &outputs {
        let (_, out) = v.try_extract_tensor::<f32>()?;
        n += out.to_vec().len();
    }
    Ok(n)
}

fn run(args: &Args) -> BenchResult<()> {
    let env = ort::init_from(&args.library)?.with_name("ceiling").build()?;
    let prepacked = args.share_prepacked.then(PrepackedWeights::new);
    let mut sessions =
        (0..args.sessions).map(|_| open(args, &env, prepacked.as_ref())).collect::<BenchResult<Vec<_>>>()?;
    let inputs = inputs(&sessions[0])?;
    eprintln!(
        "model {} inputs {inputs:?}, {} session(s) (prepacked weights shared: {}), intra threads {:?}, session entries {:?}",
        args.model.display(),
        args.sessions,
        args.share_prepacked,
        args.intra,
        args.session
    );
    for repeat in 1..=args.repeats {
        for &batch in &args.batches {
            let data: Vec<Vec<f32>> =
                inputs.iter().map(|(_, d)| pattern(batch * d.iter().product::<i64>() as usize)).collect();
            if let [session] = sessions.as_mut_slice() {
                measure(repeat, batch, args.seconds, || run_once(session, &inputs, &data, batch))?;
            } else {
                let onces: Vec<_> = sessions
                    .iter_mut()
                    .map(|session| {
                        let (inputs, data) = (&inputs, &data);
                        move || run_once(session, inputs, data, batch)
                    })
                    .collect();
                measure_parallel(repeat, batch, args.seconds, onces)?;
            }
        }
    }
    Ok(())
}
