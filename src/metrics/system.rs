//! Host figures for `nv_cpu_*`: CPU utilization from /proc/stat and memory from /proc/meminfo,
//! sampled every `--metrics-interval-ms` (utilization is over the last interval, as Triton's).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::gpu::{GpuReader, GpuSample};

/// Remembers the last /proc/stat reading to compute utilization over the interval.
#[derive(Default)]
pub struct CpuSampler {
    last: Option<(u64, u64)>,
}

fn read_cpu() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    if v.len() < 5 {
        return None;
    }
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    let total: u64 = v.iter().take(8).sum();
    Some((idle, total))
}

impl CpuSampler {
    /// Utilization in [0, 1] since the previous call (or since boot on the first call).
    pub fn utilization(&mut self) -> Option<f64> {
        let (idle, total) = read_cpu()?;
        let (pi, pt) = self.last.replace((idle, total)).unwrap_or((0, 0));
        let dt = total.saturating_sub(pt);
        if dt == 0 {
            return Some(0.0);
        }
        Some(1.0 - idle.saturating_sub(pi) as f64 / dt as f64)
    }
}

/// The latest host sample, refreshed by a background thread.
#[derive(Default)]
pub struct HostFigures {
    /// Utilization as f64 bits; `u64::MAX` until the first interval ends.
    cpu_bits: AtomicU64,
    mem_total: AtomicU64,
    mem_used: AtomicU64,
    /// The GPUs NVML reports, at the last sample (empty without NVML).
    gpus: Mutex<Vec<GpuSample>>,
    /// The CPU and RAM figures are sampled (`--allow-cpu-metrics`).
    cpu: bool,
}

impl HostFigures {
    /// Starts sampling every `interval`: the CPU and RAM figures unless `cpu` is false
    /// (`--allow-cpu-metrics`), the GPUs unless `gpu` is false (`--allow-gpu-metrics`; NVML is
    /// then never opened). Figures not sampled stay absent.
    pub fn start(interval: Duration, cpu: bool, gpu: bool) -> std::io::Result<Arc<HostFigures>> {
        let figures = Arc::new(HostFigures { cpu_bits: AtomicU64::new(u64::MAX), cpu, ..Default::default() });
        if !cpu && !gpu {
            return Ok(figures);
        }
        let f = figures.clone();
        let mut sampler = CpuSampler::default();
        if cpu {
            let _ = sampler.utilization();
            f.sample_memory();
        }
        std::thread::Builder::new().name("metrics-host".into()).spawn(move || {
            let reader = if gpu { GpuReader::open() } else { None };
            loop {
                if let Some(g) = &reader {
                    *f.gpus.lock() = g.sample();
                }
                std::thread::sleep(interval);
                if cpu {
                    if let Some(u) = sampler.utilization() {
                        f.cpu_bits.store(u.to_bits(), Relaxed);
                    }
                    f.sample_memory();
                }
            }
        })?;
        Ok(figures)
    }

    fn sample_memory(&self) {
        if let Some((total, used)) = memory() {
            self.mem_total.store(total, Relaxed);
            self.mem_used.store(used, Relaxed);
        }
    }

    /// Whether the `nv_cpu_*` families are served.
    pub fn cpu_enabled(&self) -> bool {
        self.cpu
    }

    /// CPU utilization over the last interval, once one has passed.
    pub fn cpu_utilization(&self) -> Option<f64> {
        let bits = self.cpu_bits.load(Relaxed);
        (bits != u64::MAX).then(|| f64::from_bits(bits))
    }

    pub fn gpus(&self) -> Vec<GpuSample> {
        self.gpus.lock().clone()
    }

    /// (total, used) bytes of RAM at the last sample.
    pub fn memory(&self) -> Option<(u64, u64)> {
        let total = self.mem_total.load(Relaxed);
        (total > 0).then(|| (total, self.mem_used.load(Relaxed)))
    }
}

/// (total, used) bytes of RAM.
pub fn memory() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
    };
    let total = field("MemTotal:")?;
    let available = field("MemAvailable:")?;
    Some((total, total.saturating_sub(available)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_host_figures() {
        let (total, used) = memory().expect("/proc/meminfo");
        assert!(total > 0 && used <= total);
        let mut cpu = CpuSampler::default();
        let u = cpu.utilization().expect("/proc/stat");
        assert!((0.0..=1.0).contains(&u));
    }

    #[test]
    fn samples_every_interval() {
        let host = HostFigures::start(Duration::from_millis(20), true, true).unwrap();
        assert!(host.memory().is_some());
        std::thread::sleep(Duration::from_millis(200));
        let u = host.cpu_utilization().expect("an interval has passed");
        assert!((0.0..=1.0).contains(&u));
    }

    #[test]
    fn cpu_figures_off_stay_absent() {
        let host = HostFigures::start(Duration::from_millis(20), false, false).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!host.cpu_enabled() && host.memory().is_none() && host.cpu_utilization().is_none());
        assert!(host.gpus().is_empty());
    }
}
