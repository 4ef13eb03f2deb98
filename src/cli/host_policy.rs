//! `--host-policy=<policy>,<setting>=<value>`, as Triton: named policies with `numa-node` and
//! `cpu-cores` settings. `cpu-cores` takes effect: each instance thread of a policy is pinned to
//! its cores (the engine gets the core list as plain data). An instance's policy is its
//! instance_group's `host_policy` when set, else `cpu` (KIND_CPU) or `gpu_<id>` (KIND_GPU), the
//! names Triton gives them.

use std::collections::BTreeMap;

/// One `--host-policy` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPolicySetting {
    pub policy: String,
    pub setting: HostSetting,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostSetting {
    NumaNode(u32),
    CpuCores(Vec<usize>),
}

/// `0-3,6` → [0, 1, 2, 3, 6].
fn parse_cores(s: &str) -> Result<Vec<usize>, String> {
    let mut cores = Vec::new();
    for part in s.split(',') {
        let bad = || format!("'{s}' is not a core list: use numbers and ranges, e.g. 0-3,6");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                cores.extend(a..=b);
            }
            None => cores.push(part.trim().parse().map_err(|_| bad())?),
        }
    }
    cores.sort_unstable();
    cores.dedup();
    Ok(cores)
}

pub fn parse_setting(s: &str) -> Result<HostPolicySetting, String> {
    let bad = || format!("'{s}' must be <policy_name>,<setting>=<value>");
    let (policy, kv) = s.split_once(',').ok_or_else(bad)?;
    let (key, value) = kv.split_once('=').ok_or_else(bad)?;
    if policy.is_empty() {
        return Err(bad());
    }
    let setting = match key {
        "cpu-cores" => HostSetting::CpuCores(parse_cores(value)?),
        "numa-node" => HostSetting::NumaNode(
            value
                .trim()
                .parse()
                .map_err(|_| format!("numa-node of host policy '{policy}' must be a number, got '{value}'"))?,
        ),
        other => {
            return Err(format!("unknown host policy setting '{other}' (Triton's are 'numa-node' and 'cpu-cores')"))
        }
    };
    Ok(HostPolicySetting { policy: policy.to_string(), setting })
}

/// Policy name → the cores its instance threads run on (the last `cpu-cores` of a policy wins,
/// as a later flag does in Triton).
pub fn cpu_cores(settings: &[HostPolicySetting]) -> BTreeMap<String, Vec<usize>> {
    let mut out = BTreeMap::new();
    for s in settings {
        if let HostSetting::CpuCores(c) = &s.setting {
            out.insert(s.policy.clone(), c.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_as_tritons() {
        let s = parse_setting("cpu,cpu-cores=0-2,5").unwrap();
        assert_eq!(s, HostPolicySetting { policy: "cpu".into(), setting: HostSetting::CpuCores(vec![0, 1, 2, 5]) });
        assert_eq!(parse_setting("gpu_0,numa-node=1").unwrap().setting, HostSetting::NumaNode(1));
        for bad in ["cpu", "cpu,cpu-cores", "cpu,cpu-cores=3-1", "cpu,cpu-cores=x", "cpu,colour=red", ",cpu-cores=1"] {
            assert!(parse_setting(bad).is_err(), "{bad}");
        }
        let map = cpu_cores(&[parse_setting("cpu,cpu-cores=1").unwrap(), parse_setting("cpu,cpu-cores=0").unwrap()]);
        assert_eq!(map["cpu"], vec![0]);
    }
}
