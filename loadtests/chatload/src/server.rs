//! What the load generator reads of the server: its RSS from /proc, the sequence gauges from
//! /metrics, and the model's own compute time from /v2/models/<m>/stats.

use anyhow::{anyhow, Context, Result};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A plain HTTP GET (host:port and path); the body as text.
pub async fn get(address: &str, path: &str) -> Result<String> {
    let tcp = TcpStream::connect(address).await.with_context(|| format!("connecting to {address}"))?;
    let (mut send, conn) = http1::handshake::<_, Empty<bytes::Bytes>>(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let request = hyper::Request::get(path).header("host", address).body(Empty::new())?;
    let response = send.send_request(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        return Err(anyhow!("GET {path}: HTTP {status}"));
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// A sample of a metric with a `model="<model>"` label, from Prometheus text.
pub fn metric(text: &str, name: &str, model: &str) -> Option<f64> {
    let label = format!("model=\"{model}\"");
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (labels, value) = rest.strip_prefix('{')?.split_once('}')?;
        labels.split(',').any(|l| l == label).then(|| value.trim().parse().ok())?
    })
}

/// The sequence gauges of one model.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sequences {
    pub active: f64,
    pub backlog: f64,
    pub state_bytes: f64,
    pub idle_releases: f64,
    pub evictions: f64,
}

pub async fn sequences(metrics_address: &str, model: &str) -> Result<Sequences> {
    let text = get(metrics_address, "/metrics").await?;
    let m = |n: &str| metric(&text, n, model).ok_or_else(|| anyhow!("{n} for {model} is not in /metrics"));
    Ok(Sequences {
        active: m("tritium_sequence_active")?,
        backlog: m("tritium_sequence_backlog")?,
        state_bytes: m("tritium_sequence_state_bytes")?,
        idle_releases: m("tritium_sequence_idle_releases_total")?,
        evictions: m("tritium_sequence_evictions_total")?,
    })
}

/// Resident memory of a process, in bytes (VmRSS of /proc/<pid>/status).
pub fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kb * 1024)
}

/// CPU seconds (user + system) a process has used, from /proc/<pid>/stat (clock ticks of
/// 1/100 s, Linux's USER_HZ).
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command (which may hold spaces) start at state, field 3.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| anyhow!("bad /proc/{pid}/stat"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks =
        |i: usize| f.get(i - 3).and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| anyhow!("bad /proc/{pid}/stat"));
    Ok((ticks(14)? + ticks(15)?) as f64 / 100.0)
}

/// The model's counters that say what its own compute costs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Compute {
    pub inferences: u64,
    pub executions: u64,
    pub compute_infer_ns: u64,
}

impl Compute {
    pub fn since(self, before: Compute) -> Compute {
        Compute {
            inferences: self.inferences - before.inferences,
            executions: self.executions - before.executions,
            compute_infer_ns: self.compute_infer_ns - before.compute_infer_ns,
        }
    }
}

pub async fn compute(http_address: &str, model: &str) -> Result<Compute> {
    let text = get(http_address, &format!("/v2/models/{model}/stats")).await?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let s = &v["model_stats"][0];
    let n = |x: &serde_json::Value| x.as_u64().or_else(|| x.as_str().and_then(|s| s.parse().ok())).unwrap_or(0);
    Ok(Compute {
        inferences: n(&s["inference_count"]),
        executions: n(&s["execution_count"]),
        compute_infer_ns: n(&s["inference_stats"]["compute_infer"]["ns"]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_models_sample() {
        let text = "# HELP tritium_sequence_active x\n\
            tritium_sequence_active{model=\"other\",version=\"1\"} 7\n\
            tritium_sequence_active{model=\"acc\",version=\"1\"} 1000\n\
            tritium_sequence_active_more{model=\"acc\",version=\"1\"} 3\n";
        assert_eq!(metric(text, "tritium_sequence_active", "acc"), Some(1000.0));
        assert_eq!(metric(text, "tritium_sequence_active", "none"), None);
        assert_eq!(metric(text, "tritium_sequence_backlog", "acc"), None);
    }

    #[test]
    fn reads_own_rss_and_cpu() {
        assert!(rss_bytes(std::process::id()).unwrap() > 0);
        let t = std::time::Instant::now();
        while t.elapsed().as_millis() < 50 {
            std::hint::black_box(t.elapsed());
        }
        assert!(cpu_seconds(std::process::id()).unwrap() > 0.0);
    }
}
