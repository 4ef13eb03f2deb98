//! The flags of Triton's backend, repository-agent, response-cache, rate-limiter and
//! memory/device groups. Tritium's backends are built in and it has no rate limiter, pinned or
//! CUDA pools yet (issues 21, 26): their values are checked for Triton's syntax here and
//! `effects` logs at start that they have no effect. `--host-policy` takes effect (see
//! `host_policy`), and so does the response cache: Triton's `local` cache, built in
//! (`response_cache_size`).

use clap::{ArgAction, Args, ValueEnum};

use super::host_policy::{parse_setting, HostPolicySetting};

/// `--rate-limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RateLimitMode {
    #[value(name = "execution_count")]
    ExecutionCount,
    Off,
}

/// `<integer>:<integer>` (a GPU id and a size).
fn parse_device_size(s: &str) -> Result<String, String> {
    let bad = || format!("'{s}' must be <GPU device ID>:<integer>");
    let (d, n) = s.split_once(':').ok_or_else(bad)?;
    d.trim().parse::<u32>().map_err(|_| bad())?;
    n.trim().parse::<u64>().map_err(|_| bad())?;
    Ok(s.to_string())
}

/// `<device_id>:<fraction>`, the fraction in (0, 1].
fn parse_gpu_limit(s: &str) -> Result<String, String> {
    let bad = || format!("'{s}' must be <device_id>:<fraction> with a fraction in (0, 1]");
    let (d, f) = s.split_once(':').ok_or_else(bad)?;
    d.trim().parse::<u32>().map_err(|_| bad())?;
    let f: f64 = f.trim().parse().map_err(|_| bad())?;
    if !(f > 0.0 && f <= 1.0) {
        return Err(bad());
    }
    Ok(s.to_string())
}

/// `<name>,<setting>=<value>` (backend and cache configs).
fn parse_named_setting(s: &str) -> Result<String, String> {
    let bad = || format!("'{s}' must be <name>,<setting>=<value>");
    let (name, kv) = s.split_once(',').ok_or_else(bad)?;
    if name.is_empty() || !kv.contains('=') {
        return Err(bad());
    }
    Ok(s.to_string())
}

/// `<resource_name>:<count>[:<device>]`.
fn parse_resource(s: &str) -> Result<String, String> {
    let bad = || format!("'{s}' must be <resource_name>:<count>[:<device>]");
    let parts: Vec<&str> = s.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts[0].is_empty() {
        return Err(bad());
    }
    for p in &parts[1..] {
        p.trim().parse::<u64>().map_err(|_| bad())?;
    }
    Ok(s.to_string())
}

#[derive(Debug, Clone, Default, Args)]
pub struct ResourceFlags {
    /// Where Triton backend libraries are: `<dir>/<name>/libtriton_<name>.so` serves
    /// `backend: "<name>"` (default: the Python backend that scripts/setup.sh prepares).
    #[arg(long, help_heading = "Backend")]
    pub backend_directory: Option<String>,
    /// `<backend>,<setting>=<value>` for Triton's backend libraries (their `cmdline` config,
    /// e.g. `python,shm-default-byte-size=4194304`).
    #[arg(long, action = ArgAction::Append, value_parser = parse_named_setting, help_heading = "Backend")]
    pub backend_config: Vec<String>,

    /// Where Triton looks for repository agents. Tritium has none: accepted, no effect.
    #[arg(long, help_heading = "Repository Agent")]
    pub repoagent_directory: Option<String>,

    /// `<cache>,<setting>=<value>` for the response cache: `local,size=<bytes>` makes a cache
    /// of that many bytes in memory, shared by every model whose config says
    /// `response_cache { enable: true }` (least recently used answers go first). `local` is
    /// the one cache Tritium has.
    #[arg(long, action = ArgAction::Append, value_parser = parse_named_setting, help_heading = "Response Cache")]
    pub cache_config: Vec<String>,
    /// Where Triton looks for cache libraries. Tritium's `local` cache is built in: accepted,
    /// no effect.
    #[arg(long, help_heading = "Response Cache")]
    pub cache_directory: Option<String>,
    /// Deprecated: the same as --cache-config local,size=<n> (0: no cache).
    #[arg(long, help_heading = "Response Cache")]
    pub response_cache_byte_size: Option<u64>,

    /// `execution_count` or `off` (default). With `execution_count` an instance executes only
    /// once it holds the resources its `instance_group { rate_limiter { resources } }` lists,
    /// and waiting instances go in order of their executions times their `priority`; with
    /// `off` every instance runs as soon as it is free.
    #[arg(long, value_enum, help_heading = "Rate Limiter")]
    pub rate_limit: Option<RateLimitMode>,
    /// `<resource_name>:<count>[:<device>]`, repeatable: the copies of a resource (on one
    /// device, or on each without a device; global resources ignore the device). By default
    /// a resource has the most copies any instance asks for.
    #[arg(long, action = ArgAction::Append, value_parser = parse_resource, help_heading = "Rate Limiter")]
    pub rate_limit_resource: Vec<String>,

    /// Pinned host memory for GPU copies (Triton's default 256 MB). Tritium makes no GPU
    /// copies of its own: accepted, no effect.
    #[arg(long, help_heading = "Memory/Device Management")]
    pub pinned_memory_pool_byte_size: Option<u64>,
    /// `<GPU id>:<bytes>`, repeatable (Triton's default 64 MB). Accepted, no effect.
    #[arg(long, action = ArgAction::Append, value_parser = parse_device_size, help_heading = "Memory/Device Management")]
    pub cuda_memory_pool_byte_size: Vec<String>,
    /// `<GPU id>:<bytes>`, repeatable (Triton's default 1 GB). Accepted, no effect.
    #[arg(long, action = ArgAction::Append, value_parser = parse_device_size, help_heading = "Memory/Device Management")]
    pub cuda_virtual_address_size: Vec<String>,
    /// The lowest CUDA compute capability used. Accepted, no effect.
    #[arg(long, help_heading = "Memory/Device Management")]
    pub min_supported_compute_capability: Option<f64>,
    /// Threads Triton uses for tensor copies (default 0). Accepted, no effect.
    #[arg(long, help_heading = "Memory/Device Management")]
    pub buffer_manager_thread_count: Option<u32>,
    /// `<policy>,<setting>=<value>`, repeatable. `cpu-cores=<list>` (e.g. `0-3,6`) pins every
    /// instance thread of the policy to those cores; an instance's policy is its
    /// instance_group's `host_policy`, else `cpu` for KIND_CPU and `gpu_<id>` for KIND_GPU
    /// instances. `numa-node` is accepted, with no effect.
    #[arg(long, action = ArgAction::Append, value_parser = parse_setting, help_heading = "Memory/Device Management")]
    pub host_policy: Vec<HostPolicySetting>,
    /// `<device_id>:<fraction>`: refuse loads above that share of GPU memory. Accepted, no
    /// effect.
    #[arg(long, action = ArgAction::Append, value_parser = parse_gpu_limit, help_heading = "Memory/Device Management")]
    pub model_load_gpu_limit: Vec<String>,
}

impl ResourceFlags {
    /// The rate limiter's explicit resources (`--rate-limit-resource`), checked by clap.
    pub fn rate_limit_resources(&self) -> Vec<tritium_actors::limiter::ExplicitResource> {
        self.rate_limit_resource
            .iter()
            .filter_map(|s| {
                let parts: Vec<&str> = s.split(':').collect();
                Some(tritium_actors::limiter::ExplicitResource {
                    name: parts.first()?.to_string(),
                    count: parts.get(1)?.trim().parse().ok()?,
                    device: match parts.get(2) {
                        Some(d) => Some(d.trim().parse().ok()?),
                        None => None,
                    },
                })
            })
            .collect()
    }

    /// The response cache's size in bytes from `--cache-config local,size=<n>` (or the
    /// deprecated `--response-cache-byte-size`), None without a cache; an error names a cache
    /// Tritium does not have or a setting it cannot read.
    pub fn response_cache_size(&self) -> Result<Option<u64>, String> {
        let mut size = None;
        for setting in &self.cache_config {
            let (cache, kv) = setting.split_once(',').unwrap_or((setting.as_str(), ""));
            if cache != "local" {
                return Err(format!(
                    "--cache-config {setting}: Tritium has no '{cache}' cache; its one cache is 'local' (--cache-config local,size=<bytes>)"
                ));
            }
            let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
            if key != "size" {
                return Err(format!("--cache-config {setting}: the local cache has one setting, 'size' (in bytes)"));
            }
            let n: u64 = value
                .trim()
                .parse()
                .map_err(|_| format!("--cache-config {setting}: the size must be a whole number of bytes"))?;
            if n == 0 {
                return Err(format!("--cache-config {setting}: the size must be above 0 bytes"));
            }
            size = Some(n);
        }
        if !self.cache_config.is_empty() {
            return Ok(size);
        }
        Ok(self.response_cache_byte_size.filter(|n| *n > 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_cache_size_comes_from_either_flag() {
        use clap::Parser;
        #[derive(Parser)]
        struct F {
            #[command(flatten)]
            r: ResourceFlags,
        }
        let size = |args: &[&str]| {
            F::try_parse_from(std::iter::once("t").chain(args.iter().copied())).unwrap().r.response_cache_size()
        };
        assert_eq!(size(&[]), Ok(None));
        assert_eq!(size(&["--cache-config=local,size=1048576"]), Ok(Some(1_048_576)));
        assert_eq!(size(&["--response-cache-byte-size=4096"]), Ok(Some(4096)));
        assert_eq!(size(&["--response-cache-byte-size=0"]), Ok(None), "0 was Triton's 'no cache'");
        assert_eq!(size(&["--cache-config=local,size=10", "--response-cache-byte-size=99"]), Ok(Some(10)));
        for (bad, want) in [
            ("--cache-config=redis,host=localhost", "no 'redis' cache"),
            ("--cache-config=local,bytes=10", "one setting, 'size'"),
            ("--cache-config=local,size=ten", "whole number"),
            ("--cache-config=local,size=0", "above 0"),
        ] {
            let e = size(&[bad]).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn values_are_checked_for_tritons_syntax() {
        assert!(parse_device_size("0:67108864").is_ok());
        assert!(parse_device_size("67108864").is_err());
        assert!(parse_gpu_limit("0:0.5").is_ok());
        assert!(parse_gpu_limit("0:1.5").is_err());
        assert!(parse_named_setting("local,size=1048576").is_ok());
        assert!(parse_named_setting("local").is_err());
        assert!(parse_resource("R1:10:0").is_ok() && parse_resource("R1:10").is_ok());
        assert!(parse_resource("R1").is_err() && parse_resource("R1:x").is_err());
        let flags =
            ResourceFlags { rate_limit_resource: vec!["R1:10".into(), "R2:5:1".into()], ..ResourceFlags::default() };
        let r = flags.rate_limit_resources();
        assert_eq!((r[0].name.as_str(), r[0].count, r[0].device), ("R1", 10, None));
        assert_eq!((r[1].name.as_str(), r[1].count, r[1].device), ("R2", 5, Some(1)));
    }
}
