//! Triton's `nv_gpu_*` families from NVML, loaded at run time (`nvml-wrapper` opens
//! `libnvidia-ml.so` with dlopen): on a machine without the NVIDIA driver the reader does not
//! open and the families are simply absent.

use std::collections::HashMap;
use std::ffi::OsStr;

use nvml_wrapper::Nvml;

/// One GPU's figures at one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSample {
    pub uuid: String,
    /// [0, 1].
    pub utilization: f64,
    pub memory_total: u64,
    pub memory_used: u64,
    /// Watts; None where the GPU does not report it.
    pub power_usage: Option<f64>,
    pub power_limit: Option<f64>,
    /// Joules since the reader opened (Triton: since the server started).
    pub energy: Option<f64>,
}

pub struct GpuReader {
    nvml: Nvml,
    /// Each GPU's energy counter (mJ) when the reader opened.
    energy_start: HashMap<String, u64>,
}

impl GpuReader {
    /// The reader, when NVML loads and sees at least one GPU.
    pub fn open() -> Option<GpuReader> {
        let nvml = Nvml::init().or_else(|_| Nvml::builder().lib_path(OsStr::new("libnvidia-ml.so.1")).init()).ok()?;
        if nvml.device_count().ok()? == 0 {
            return None;
        }
        let mut reader = GpuReader { nvml, energy_start: HashMap::new() };
        for s in reader.read_raw() {
            if let (uuid, Some(mj)) = (s.0.uuid.clone(), s.1) {
                reader.energy_start.insert(uuid, mj);
            }
        }
        tracing::info!("GPU metrics: NVML sees {} GPU(s)", reader.energy_start.len().max(1));
        Some(reader)
    }

    /// Each GPU's sample with its raw energy counter (mJ).
    fn read_raw(&self) -> Vec<(GpuSample, Option<u64>)> {
        let count = self.nvml.device_count().unwrap_or(0);
        let mut out = Vec::new();
        for i in 0..count {
            let Ok(d) = self.nvml.device_by_index(i) else { continue };
            let Ok(uuid) = d.uuid() else { continue };
            let utilization = d.utilization_rates().map(|u| u.gpu as f64 / 100.0).unwrap_or(0.0);
            let (memory_total, memory_used) = d.memory_info().map(|m| (m.total, m.used)).unwrap_or((0, 0));
            let power_usage = d.power_usage().ok().map(|mw| mw as f64 / 1000.0);
            let power_limit =
                d.enforced_power_limit().or_else(|_| d.power_management_limit()).ok().map(|mw| mw as f64 / 1000.0);
            let energy_mj = d.total_energy_consumption().ok();
            out.push((
                GpuSample { uuid, utilization, memory_total, memory_used, power_usage, power_limit, energy: None },
                energy_mj,
            ));
        }
        out
    }

    pub fn sample(&self) -> Vec<GpuSample> {
        self.read_raw()
            .into_iter()
            .map(|(mut s, mj)| {
                s.energy = mj
                    .map(|mj| mj.saturating_sub(self.energy_start.get(&s.uuid).copied().unwrap_or(mj)) as f64 / 1000.0);
                s
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_without_a_driver_and_sane_with_one() {
        // On a machine without the NVIDIA driver NVML does not load: no reader, no panic.
        match GpuReader::open() {
            None => assert!(std::path::Path::new("/dev/nvidiactl").exists() || Nvml::init().is_err()),
            Some(r) => {
                for s in r.sample() {
                    assert!(s.uuid.starts_with("GPU-"), "{s:?}");
                    assert!((0.0..=1.0).contains(&s.utilization) && s.memory_used <= s.memory_total, "{s:?}");
                }
            }
        }
    }
}
