//! Percentiles, idle reclaim, and the figures printed (text) and written (JSON).

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{json, Value};

use crate::server;

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latencies {
    pub count: usize,
    pub p50: u32,
    pub p99: u32,
    pub p999: u32,
    pub max: u32,
}

impl Latencies {
    pub fn of(mut v: Vec<u32>) -> Self {
        if v.is_empty() {
            return Latencies::default();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
        Latencies { count: v.len(), p50: at(0.50), p99: at(0.99), p999: at(0.999), max: *v.last().unwrap() }
    }

    fn json(&self) -> Value {
        json!({"count": self.count, "p50": self.p50, "p99": self.p99, "p999": self.p999, "max": self.max})
    }
}

/// How the idle timeout released the conversations after the load.
#[derive(Debug, Clone, Copy)]
pub struct Reclaim {
    /// Seconds from the last turn until no sequence was live (or the wait ended).
    pub seconds: f64,
    pub active_after: f64,
    pub state_bytes_after: f64,
    pub idle_releases: f64,
    pub rss_after: u64,
}

pub async fn reclaim(
    metrics: &str,
    model: &str,
    since: Instant,
    wait_s: f64,
    pid: Option<u32>,
    releases_before: f64,
) -> Result<Reclaim> {
    let end = since + Duration::from_secs_f64(wait_s);
    loop {
        let s = server::sequences(metrics, model).await?;
        if s.active == 0.0 || Instant::now() >= end {
            return Ok(Reclaim {
                seconds: since.elapsed().as_secs_f64(),
                active_after: s.active,
                state_bytes_after: s.state_bytes,
                idle_releases: s.idle_releases - releases_before,
                rss_after: pid.map(server::rss_bytes).transpose()?.unwrap_or(0),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub struct Figures {
    pub protocol: String,
    /// "sum" or "chat"; max_tokens of a chat turn (0 for sum).
    pub workload: String,
    pub max_tokens: i32,
    pub model: String,
    pub conversations: u64,
    pub connections: usize,
    pub streams: usize,
    /// Closed loop (zero think time): no target rate, the achieved rate is the saturation.
    pub closed: bool,
    pub target_rate: f64,
    pub duration_s: f64,
    pub turns: u64,
    pub answered: u64,
    pub achieved_rate: f64,
    pub late_turns: u64,
    pub errors: u64,
    pub timeouts: u64,
    /// Every mismatch: the turns' own checks and the reference check's.
    pub crosstalk: u64,
    /// Turns whose reply did not match the conversation's own history (running sum, or the chat
    /// turn's prompt and cached token counts).
    pub history_mismatches: u64,
    /// Chat: sampled turns sent again as stateless requests, and those answered differently.
    pub references_checked: u64,
    pub reference_mismatches: u64,
    pub first_error: Option<String>,
    /// From the time each turn was due (open loop: the generator's lateness counts).
    pub latency_us: Latencies,
    /// The same, of the turns that STARTed their conversation and of the others.
    pub start_turn_us: Latencies,
    pub later_turn_us: Latencies,
    /// From the time each turn was sent.
    pub from_send_us: Latencies,
    /// How late each turn was sent.
    pub send_lag_us: Latencies,
    pub unloaded_us: Latencies,
    /// Per turn, from the server's statistics: its time in the server (arrival to response),
    /// its queue time, and the compute (input, infer, output) of the execution it ran in — the
    /// model's own compute for that turn.
    pub server_us: f64,
    pub queue_us: f64,
    pub compute_per_turn_us: f64,
    /// The compute of an execution (each counted once, from batch_stats).
    pub compute_per_execution_us: f64,
    pub inferences_per_execution: f64,
    /// CPU time per turn of the server (with --pid) and of this load generator, during the load.
    pub server_cpu_us_per_turn: f64,
    pub client_cpu_us_per_turn: f64,
    pub live_sequences: f64,
    pub backlog: f64,
    pub state_bytes: f64,
    pub evictions: f64,
    pub rss_before: u64,
    pub rss_loaded: u64,
    pub reclaim: Option<Reclaim>,
    pub released_turn_refused: Option<bool>,
}

fn per(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

impl Figures {
    pub fn text(&self) -> String {
        let l = &self.latency_us;
        let u = &self.unloaded_us;
        let mut s = format!(
            "chatload {} {} {}: {} conversations on {} connection(s){}, {}, {:.1} s\n\
             turns {} answered {} achieved {:.1}/s late {} errors {} (timeouts {}) cross-talk {}\n\
             turn latency us (from due): p50 {} p99 {} p99.9 {} max {}\n\
             turns with START: {} p50 {} p99 {}; later turns: {} p50 {} p99 {}\n\
             turn latency us (from sent): p50 {} p99 {}; send lag us: p50 {} p99 {}\n\
             unloaded turn us (one conversation, sequential): p50 {} p99 {}\n\
             server per turn us (statistics): in server {:.1}, queue {:.1}, compute of its execution {:.1}\n\
             model compute per execution {:.1} us ({:.2} inferences/execution); p99 / compute per turn {:.1}x \
             (from sent {:.1}x), p99 / unloaded p50 {:.1}x\n\
             CPU per turn: server {:.0} us, load generator {:.0} us\n\
             live sequences {} backlog {} state bytes {} ({:.1} per live conversation) evictions {}\n\
             server RSS {:.1} MiB before, {:.1} MiB loaded ({:.0} bytes per conversation)\n",
            self.protocol,
            self.workload,
            self.model,
            self.conversations,
            self.connections,
            if self.streams > 0 { format!(" x {} streams", self.streams) } else { String::new() },
            if self.closed {
                "closed loop (zero think time)".to_string()
            } else {
                format!("{:.0} turns/s target", self.target_rate)
            },
            self.duration_s,
            self.turns,
            self.answered,
            self.achieved_rate,
            self.late_turns,
            self.errors,
            self.timeouts,
            self.crosstalk,
            l.p50,
            l.p99,
            l.p999,
            l.max,
            self.start_turn_us.count,
            self.start_turn_us.p50,
            self.start_turn_us.p99,
            self.later_turn_us.count,
            self.later_turn_us.p50,
            self.later_turn_us.p99,
            self.from_send_us.p50,
            self.from_send_us.p99,
            self.send_lag_us.p50,
            self.send_lag_us.p99,
            u.p50,
            u.p99,
            self.server_us,
            self.queue_us,
            self.compute_per_turn_us,
            self.compute_per_execution_us,
            self.inferences_per_execution,
            per(l.p99 as f64, self.compute_per_turn_us),
            per(self.from_send_us.p99 as f64, self.compute_per_turn_us),
            per(l.p99 as f64, u.p50 as f64),
            self.server_cpu_us_per_turn,
            self.client_cpu_us_per_turn,
            self.live_sequences,
            self.backlog,
            self.state_bytes,
            per(self.state_bytes, self.live_sequences),
            self.evictions,
            self.rss_before as f64 / 1048576.0,
            self.rss_loaded as f64 / 1048576.0,
            per(self.rss_loaded as f64 - self.rss_before as f64, self.conversations as f64),
        );
        if self.workload == "chat" {
            s += &format!(
                "chat: max_tokens {}, greedy; turns whose counts did not match their own history {}; \
                 sampled turns checked against a stateless request {}, different {}\n",
                self.max_tokens, self.history_mismatches, self.references_checked, self.reference_mismatches,
            );
        }
        if let Some(r) = &self.reclaim {
            s += &format!(
                "idle reclaim: {} live, {} state bytes {:.1} s after the last turn; {} idle releases; RSS {:.1} MiB; \
                 released conversation's next turn refused: {:?}\n",
                r.active_after,
                r.state_bytes_after,
                r.seconds,
                r.idle_releases,
                r.rss_after as f64 / 1048576.0,
                self.released_turn_refused,
            );
        }
        if let Some(e) = &self.first_error {
            s += &format!("first error: {e}\n");
        }
        s
    }

    pub fn json(&self) -> Value {
        json!({
            "protocol": self.protocol, "workload": self.workload, "max_tokens": self.max_tokens,
            "model": self.model, "conversations": self.conversations,
            "connections": self.connections, "streams": self.streams, "closed": self.closed, "target_rate": self.target_rate,
            "duration_s": self.duration_s, "turns": self.turns, "answered": self.answered,
            "achieved_rate": self.achieved_rate, "late_turns": self.late_turns, "errors": self.errors,
            "timeouts": self.timeouts, "crosstalk": self.crosstalk,
            "history_mismatches": self.history_mismatches, "references_checked": self.references_checked,
            "reference_mismatches": self.reference_mismatches, "first_error": self.first_error,
            "latency_us": self.latency_us.json(),
            "start_turn_us": self.start_turn_us.json(), "later_turn_us": self.later_turn_us.json(), "from_send_us": self.from_send_us.json(),
            "send_lag_us": self.send_lag_us.json(), "unloaded_us": self.unloaded_us.json(),
            "server_us": self.server_us, "queue_us": self.queue_us,
            "compute_per_turn_us": self.compute_per_turn_us,
            "compute_per_execution_us": self.compute_per_execution_us,
            "inferences_per_execution": self.inferences_per_execution,
            "server_cpu_us_per_turn": self.server_cpu_us_per_turn,
            "client_cpu_us_per_turn": self.client_cpu_us_per_turn,
            "live_sequences": self.live_sequences, "backlog": self.backlog, "state_bytes": self.state_bytes,
            "state_bytes_per_conversation": per(self.state_bytes, self.live_sequences),
            "evictions": self.evictions, "rss_before": self.rss_before, "rss_loaded": self.rss_loaded,
            "reclaim": self.reclaim.map(|r| json!({
                "seconds": r.seconds, "active_after": r.active_after, "state_bytes_after": r.state_bytes_after,
                "idle_releases": r.idle_releases, "rss_after": r.rss_after})),
            "released_turn_refused": self.released_turn_refused,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let l = Latencies::of((1..=1000).rev().collect());
        assert_eq!((l.count, l.p50, l.p99, l.p999, l.max), (1000, 500, 990, 999, 1000));
        assert_eq!(Latencies::of(vec![]).count, 0);
        assert_eq!(Latencies::of(vec![7]).p99, 7);
    }
}
