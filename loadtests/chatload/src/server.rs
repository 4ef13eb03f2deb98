//! What the load generator reads of the server: its RSS from /proc, the sequence gauges from
//! /metrics, the model's own compute time from /v2/models/<m>/stats, and a chat model's
//! template from its config.

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

/// A chat model's template, from the config parameters `chat_template_message` and
/// `chat_template_generation` (GET /v2/models/<m>/config).
pub async fn chat_template(http_address: &str, model: &str) -> Result<crate::chat::Template> {
    let text = get(http_address, &format!("/v2/models/{model}/config")).await?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let param = |key: &str| v["parameters"][key]["string_value"].as_str().map(str::to_string);
    Ok(crate::chat::Template {
        message: param("chat_template_message")
            .ok_or_else(|| anyhow!("model '{model}' has no parameter chat_template_message: not a chat model"))?,
        generation: param("chat_template_generation").unwrap_or_default(),
    })
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

/// The model's statistics (Triton's statistics extension) that split a turn's time inside the
/// server. `inference_stats` add, for every request, the durations of the execution it ran in,
/// so dividing them by the requests gives the compute of the execution an average turn ran in;
/// `batch_stats` add each execution once.
#[derive(Debug, Clone, Copy, Default)]
pub struct Compute {
    pub inferences: u64,
    pub executions: u64,
    /// Requests answered, and their time in the server (arrival to response), queue time and
    /// the compute (input, infer, output) of the executions they ran in.
    pub requests: u64,
    pub success_ns: u64,
    pub queue_ns: u64,
    pub request_compute_ns: u64,
    pub compute_infer_ns: u64,
    /// The compute (input, infer, output) of every execution, each counted once.
    pub execution_compute_ns: u64,
}

impl Compute {
    pub fn since(self, before: Compute) -> Compute {
        Compute {
            inferences: self.inferences - before.inferences,
            executions: self.executions - before.executions,
            requests: self.requests - before.requests,
            success_ns: self.success_ns - before.success_ns,
            queue_ns: self.queue_ns - before.queue_ns,
            request_compute_ns: self.request_compute_ns - before.request_compute_ns,
            compute_infer_ns: self.compute_infer_ns - before.compute_infer_ns,
            execution_compute_ns: self.execution_compute_ns - before.execution_compute_ns,
        }
    }

    /// Microseconds of `ns` per request (0 without requests).
    pub fn per_request_us(&self, ns: u64) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            ns as f64 / self.requests as f64 / 1e3
        }
    }
}

pub async fn compute(http_address: &str, model: &str) -> Result<Compute> {
    let text = get(http_address, &format!("/v2/models/{model}/stats")).await?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    Ok(parse_compute(&v["model_stats"][0]))
}

fn parse_compute(s: &serde_json::Value) -> Compute {
    let n = |x: &serde_json::Value| x.as_u64().or_else(|| x.as_str().and_then(|s| s.parse().ok())).unwrap_or(0);
    let i = &s["inference_stats"];
    let phases = ["compute_input", "compute_infer", "compute_output"];
    let execution_compute_ns = s["batch_stats"]
        .as_array()
        .map(|b| b.iter().map(|b| phases.iter().map(|p| n(&b[p]["ns"])).sum::<u64>()).sum())
        .unwrap_or(0);
    Compute {
        inferences: n(&s["inference_count"]),
        executions: n(&s["execution_count"]),
        requests: n(&i["success"]["count"]),
        success_ns: n(&i["success"]["ns"]),
        queue_ns: n(&i["queue"]["ns"]),
        request_compute_ns: phases.iter().map(|p| n(&i[p]["ns"])).sum(),
        compute_infer_ns: n(&i["compute_infer"]["ns"]),
        execution_compute_ns,
    }
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
    fn splits_request_and_execution_compute() {
        // Two executions: one of 2 requests (100 + 10 + 10 ns), one of 1 request (50 ns).
        let stats = serde_json::json!({
            "inference_count": 3, "execution_count": 2,
            "inference_stats": {
                "success": {"count": 3, "ns": 900}, "queue": {"count": 3, "ns": 300},
                "compute_input": {"count": 3, "ns": 20}, "compute_infer": {"count": 3, "ns": 250},
                "compute_output": {"count": 3, "ns": 20}},
            "batch_stats": [
                {"batch_size": 1, "compute_input": {"count": 1, "ns": 0},
                 "compute_infer": {"count": 1, "ns": 50}, "compute_output": {"count": 1, "ns": 0}},
                {"batch_size": 2, "compute_input": {"count": 1, "ns": 10},
                 "compute_infer": {"count": 1, "ns": 100}, "compute_output": {"count": 1, "ns": 10}}]
        });
        let c = parse_compute(&stats);
        assert_eq!((c.requests, c.executions, c.execution_compute_ns, c.request_compute_ns), (3, 2, 170, 290));
        assert_eq!(c.per_request_us(c.queue_ns), 0.1);
    }

    #[test]
    fn reads_own_rss_and_cpu() {
        assert!(rss_bytes(std::process::id()).unwrap() > 0);
        // Spins until the kernel has counted a tick (1/100 s) of its CPU: on a busy machine 50 ms
        // of wall time could hold less than one tick of CPU.
        let t = std::time::Instant::now();
        while cpu_seconds(std::process::id()).unwrap() == 0.0 && t.elapsed().as_secs() < 10 {
            std::hint::black_box(t.elapsed());
        }
        assert!(cpu_seconds(std::process::id()).unwrap() > 0.0);
    }
}
