//! Host figures for `nv_cpu_*`: CPU utilization between two scrapes from /proc/stat, and
//! memory from /proc/meminfo.

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
}
