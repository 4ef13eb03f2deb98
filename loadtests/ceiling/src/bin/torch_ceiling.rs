//! Ceiling of the PyTorch backend: one TorchScript model run in-process through libtorch (`tch`,
//! as Tritium's PyTorch backend does: one `CModule`, the input copied from request bytes into a
//! tensor, `forward` without autograd, the output copied out per run), items/s at each batch size.
//! No server, no network, no batcher.
//!
//!   torch_ceiling --model model_repository/torch_mlp/1/model.pt --dims 256
//!                 [--batch 1,8,32,64] [--seconds 3] [--repeats 3] [--intra-threads N]
//!
//! Prints one JSON object per (repeat, batch) on stdout, as `ceiling` does:
//! {"repeat":1,"batch":8,"runs":…,"seconds":…,"items_per_s":…,"p50_us":…,"p99_us":…}.

use std::path::PathBuf;

use tch::{CModule, IValue, Kind, Tensor};
use tritium_ceiling::{measure, pattern, BenchResult};

struct Args {
    model: PathBuf,
    dims: Vec<i64>,
    batches: Vec<usize>,
    seconds: f64,
    repeats: usize,
    intra: Option<i32>,
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
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("torch_ceiling --model FILE.pt --dims 256 [--batch 1,8,32,64] [--seconds 3] [--repeats 3] [--intra-threads N]");
            std::process::exit(0);
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
            _ => return Err(format!("unknown flag {flag} (see --help)")),
        }
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

fn run(args: &Args) -> BenchResult<()> {
    if let Some(n) = args.intra {
        tch::set_num_threads(n);
    }
    let mut module = CModule::load(&args.model)?;
    module.set_eval();
    eprintln!("model {} dims {:?}, intra threads {}", args.model.display(), args.dims, tch::get_num_threads());
    for repeat in 1..=args.repeats {
        for &batch in &args.batches {
            let n = batch * args.dims.iter().product::<i64>() as usize;
            let data: Vec<u8> = pattern(n).iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut shape = vec![batch as i64];
            shape.extend(&args.dims);
            let once = || -> BenchResult<usize> {
                let input = Tensor::f_from_data_size(&data, &shape, Kind::Float)?;
                let out = tch::no_grad(|| module.forward_is(&[IValue::Tensor(input)]))?;
                let IValue::Tensor(out) = out else { return Err("forward returned no tensor".into()) };
                let numel = out.numel();
                let mut bytes = vec![0u8; numel * 4];
                out.contiguous().f_copy_data_u8(&mut bytes, numel)?;
                Ok(bytes.len())
            };
            measure(repeat, batch, args.seconds, once)?;
        }
    }
    Ok(())
}
