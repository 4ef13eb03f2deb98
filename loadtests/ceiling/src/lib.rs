//! What the ceiling benches share: timing one batch size of an in-process model run and printing
//! the one JSON line per (repeat, batch) that loadtests/targets.py and pytorch.py read.

use std::time::{Duration, Instant};

pub type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Runs `once` for 300 ms of warm-up, then for `seconds`, and prints
/// `{"repeat":…,"batch":…,"runs":…,"seconds":…,"items_per_s":…,"p50_us":…,"p99_us":…}`.
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
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        let t = Instant::now();
        std::hint::black_box(once()?);
        lat.push(t.elapsed().as_micros() as u64);
    }
    let secs = start.elapsed().as_secs_f64();
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{{\"repeat\":{repeat},\"batch\":{batch},\"runs\":{},\"seconds\":{secs:.3},\"items_per_s\":{:.1},\"p50_us\":{},\"p99_us\":{}}}",
        lat.len(),
        (lat.len() * batch) as f64 / secs,
        pct(0.5),
        pct(0.99)
    );
    Ok(())
}

/// The fixed input pattern both benches feed: `n` floats.
pub fn pattern(n: usize) -> Vec<f32> {
    (0..n).map(|k| ((k % 97) as f32) * 0.01 - 0.5).collect()
}
