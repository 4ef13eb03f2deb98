//! What the ceiling benches share: timing one batch size of an in-process model run and printing
//! the one JSON line per (repeat, batch) that loadtests/targets.py and pytorch.py read.

pub mod batcher;
pub mod kserve_http;

use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

pub type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// The repository's root (this crate is `loadtests/ceiling`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// ONNX Runtime's library: `$ORT_DYLIB_PATH`, else the `onnxruntime` wheel's in the repository's
/// venv (what Tritium uses).
pub fn default_onnxruntime_library() -> PathBuf {
    std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from).unwrap_or_else(|| {
        repo_root().join(".venv/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.31.1")
    })
}

/// Runs `once` for 300 ms of warm-up, then for `seconds`, and prints
/// `{"repeat":…,"batch":…,"runs":…,"seconds":…,"items_per_s":…,"p50_us":…,"p99_us":…,"cpu_us_per_item":…}`.
/// `cpu_us_per_item` is the whole process's CPU time (every thread, ONNX Runtime's or libtorch's
/// pool included, spinning counted) over the timed window only, per item: no session setup, no
/// warm-up.
pub fn measure<T>(
    repeat: usize,
    batch: usize,
    seconds: f64,
    mut once: impl FnMut() -> BenchResult<T>,
) -> BenchResult<()> {
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_millis(300) {
        once()?;
    }
    let mut lat = Vec::new();
    let cpu0 = process_cpu_s();
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        let t = Instant::now();
        std::hint::black_box(once()?);
        lat.push(t.elapsed().as_micros() as u64);
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = process_cpu_s().zip(cpu0).map(|(b, a)| b - a);
    print_line(repeat, batch, None, lat, secs, cpu);
    Ok(())
}

/// `measure` for several sessions at once, as a server with N instances runs them: each `once`
/// (one per session, each owning its session) on its own thread, all warmed up for 300 ms, then
/// timed together for `seconds`. Prints the same JSON line, with `"sessions":N`, `items_per_s`
/// the sum over the sessions and `cpu_us_per_item` the process's CPU over the common window per
/// item of all of them.
pub fn measure_parallel<F, T>(repeat: usize, batch: usize, seconds: f64, onces: Vec<F>) -> BenchResult<()>
where
    F: FnMut() -> BenchResult<T> + Send,
{
    let n = onces.len();
    let warmed = Barrier::new(n + 1);
    let timed = Barrier::new(n + 1);
    let window = Duration::from_secs_f64(seconds);
    let (lat, secs, cpu) = std::thread::scope(|scope| -> BenchResult<_> {
        let workers: Vec<_> = onces
            .into_iter()
            .map(|mut once| {
                let (warmed, timed) = (&warmed, &timed);
                scope.spawn(move || -> Result<Vec<u64>, String> {
                    let warm = Instant::now();
                    let mut failed = None;
                    while failed.is_none() && warm.elapsed() < Duration::from_millis(300) {
                        failed = once().err().map(|e| e.to_string());
                    }
                    warmed.wait();
                    timed.wait();
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    let start = Instant::now();
                    let mut lat = Vec::new();
                    while start.elapsed() < window {
                        let t = Instant::now();
                        std::hint::black_box(once().map_err(|e| e.to_string())?);
                        lat.push(t.elapsed().as_micros() as u64);
                    }
                    Ok(lat)
                })
            })
            .collect();
        warmed.wait();
        let cpu0 = process_cpu_s();
        let start = Instant::now();
        timed.wait();
        let mut lat = Vec::new();
        for w in workers {
            lat.extend(w.join().map_err(|_| "a session's thread panicked")??);
        }
        let secs = start.elapsed().as_secs_f64();
        Ok((lat, secs, process_cpu_s().zip(cpu0).map(|(b, a)| b - a)))
    })?;
    print_line(repeat, batch, Some(n), lat, secs, cpu);
    Ok(())
}

fn print_line(repeat: usize, batch: usize, sessions: Option<usize>, mut lat: Vec<u64>, secs: f64, cpu: Option<f64>) {
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize];
    let items = lat.len() * batch;
    let cpu_field = cpu.map(|c| format!(",\"cpu_us_per_item\":{:.1}", c * 1e6 / items as f64)).unwrap_or_default();
    let sessions_field = sessions.map(|n| format!(",\"sessions\":{n}")).unwrap_or_default();
    println!(
        "{{\"repeat\":{repeat},\"batch\":{batch}{sessions_field},\"runs\":{},\"seconds\":{secs:.3},\"items_per_s\":{:.1},\"p50_us\":{},\"p99_us\":{}{cpu_field}}}",
        lat.len(),
        items as f64 / secs,
        pct(0.5),
        pct(0.99)
    );
}

/// CPU seconds (user + system) of this process so far, all threads, from `/proc/self/stat`
/// (clock ticks of 10 ms: a window of seconds reads to within 1 %); `None` where /proc is missing.
fn process_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // After the command's closing parenthesis: state is field 3, utime 14 and stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// The fixed input pattern both benches feed: `n` floats.
pub fn pattern(n: usize) -> Vec<f32> {
    (0..n).map(|k| ((k % 97) as f32) * 0.01 - 0.5).collect()
}
