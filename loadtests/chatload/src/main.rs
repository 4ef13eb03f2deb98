//! chatload: N live conversations on a sequence model (the bundled accumulator), open loop.
//!
//! Turn k of the run (k = 0, 1, ...) is due at k / rate seconds and belongs to conversation
//! k mod N, so every conversation sends a turn every N / rate seconds (its think time) and the
//! total rate is fixed whatever the server does. A turn's latency runs from the time it was due,
//! so a server that falls behind shows it (no coordinated omission). Every reply is checked
//! against the conversation's own running sum (cross-talk). Many conversations share a few
//! connections: gRPC bidirectional streams (`ModelStreamInfer`) or HTTP/1.1 keep-alive.
//!
//! After the load it reads the server's RSS (/proc/<pid>) and `/metrics` (live sequences, state
//! bytes), then, with `--reclaim-wait`, waits for the idle timeout to release every conversation
//! and checks that a released conversation's next turn is refused.

mod conv;
mod grpc;
mod http;
mod report;
mod server;

/// Triton's `inference` package, generated from the server's proto/ (client only).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
mod proto {
    tonic::include_proto!("inference");
}

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::{Parser, ValueEnum};
use conv::{Conversation, Verdict};
use report::{Figures, Latencies};

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq)]
enum Protocol {
    Grpc,
    Http,
}

#[derive(Parser, Debug)]
#[command(about = "Chat-shaped load: N live conversations on a sequence model, open loop")]
struct Args {
    /// The server's HTTP address (host:port): HTTP turns and the model's statistics.
    #[arg(long, default_value = "127.0.0.1:8000")]
    http: String,
    /// The server's gRPC address (host:port).
    #[arg(long, default_value = "127.0.0.1:8001")]
    grpc: String,
    /// The server's metrics address (host:port).
    #[arg(long, default_value = "127.0.0.1:8002")]
    metrics: String,
    #[arg(long, value_enum, default_value = "grpc")]
    protocol: Protocol,
    /// A sequence model whose OUTPUT is the running sum of INPUT since START.
    #[arg(long, default_value = "accumulate_oldest")]
    model: String,
    /// Live conversations.
    #[arg(long, default_value_t = 1000)]
    conversations: u64,
    /// Total turns per second, all conversations together.
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    /// Seconds of load.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Connections (HTTP/2 for gRPC, HTTP/1.1 keep-alive for HTTP).
    #[arg(long, default_value_t = 2)]
    connections: usize,
    /// gRPC streams per connection.
    #[arg(long, default_value_t = 4)]
    streams: usize,
    /// The server's process id, for its RSS.
    #[arg(long)]
    pid: Option<u32>,
    /// Conversation i uses sequence_id base + i.
    #[arg(long, default_value_t = 1)]
    sequence_id_base: u64,
    /// A turn not answered in this many milliseconds counts as an error.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Turns of one conversation, one after another, before the load: the unloaded turn time.
    #[arg(long, default_value_t = 200)]
    baseline_turns: u64,
    /// After the load, wait up to this many seconds for the idle timeout to release every
    /// conversation (0: do not wait).
    #[arg(long, default_value_t = 0.0)]
    reclaim_wait: f64,
    /// The server only answers turns (`chatecho`, the floor under the turn latency): no
    /// statistics or metrics to read.
    #[arg(long)]
    bare_server: bool,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<String>,
}

enum Turns {
    Grpc(grpc::GrpcTurns),
    Http(http::HttpTurns),
}

impl Turns {
    async fn turn(&self, conversation: u64, sequence_id: u64, value: i32, start: bool) -> Result<i64, String> {
        match self {
            Turns::Grpc(g) => g.turn(conversation, sequence_id, value, start).await,
            Turns::Http(h) => h.turn(conversation, sequence_id, value, start).await,
        }
    }

    fn stream_errors(&self) -> u64 {
        match self {
            Turns::Grpc(g) => g.stream_errors.load(Ordering::Relaxed),
            Turns::Http(_) => 0,
        }
    }

    /// The first error message a gRPC stream answered (they carry no request id), if any.
    fn stream_error(&self) -> String {
        match self {
            Turns::Grpc(g) => {
                g.first_stream_error.lock().unwrap().as_ref().map(|e| format!(": {e}")).unwrap_or_default()
            }
            Turns::Http(_) => String::new(),
        }
    }
}

#[derive(Default)]
struct Tally {
    done: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    crosstalk: AtomicU64,
    late: AtomicU64,
    first_error: Mutex<Option<String>>,
    latencies: Mutex<Vec<TurnTimes>>,
}

/// An answered turn's times (µs): from when it was due and from when it was sent to its
/// answer, and how late it was sent (the generator's own lateness: the pacer's wake-up, the
/// runtime's, and a previous turn of its conversation still unanswered).
#[derive(Debug, Clone, Copy)]
struct TurnTimes {
    due: u32,
    sent: u32,
    lag: u32,
}

impl Tally {
    fn error(&self, message: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.first_error.lock().unwrap().get_or_insert(message);
    }
}

/// One turn of conversation `index`, due at `scheduled`: waits for the conversation's previous
/// turn, sends, checks the reply and records its times.
async fn one_turn(
    turns: Arc<Turns>,
    conversations: Arc<Vec<tokio::sync::Mutex<Conversation>>>,
    tally: Arc<Tally>,
    index: u64,
    scheduled: Instant,
    timeout: Duration,
) {
    let conversation = &conversations[index as usize];
    let mut c = match conversation.try_lock() {
        Ok(c) => c,
        Err(_) => {
            // The previous turn is still unanswered: this one waits for it.
            tally.late.fetch_add(1, Ordering::Relaxed);
            conversation.lock().await
        }
    };
    let (value, start) = c.next_turn();
    let sent = Instant::now();
    let result = tokio::time::timeout(timeout, turns.turn(index, c.sequence_id, value, start)).await;
    let answered = Instant::now();
    let us = |d: Duration| d.as_micros().min(u32::MAX as u128) as u32;
    match result {
        Err(_) => {
            tally.timeouts.fetch_add(1, Ordering::Relaxed);
            c.failed();
        }
        Ok(Err(e)) => {
            tally.error(format!("conversation {index}: {e}"));
            c.failed();
        }
        Ok(Ok(reply)) => {
            if let Verdict::Mismatch { expected, got } = c.answer(value, start, reply) {
                tally.crosstalk.fetch_add(1, Ordering::Relaxed);
                tally.error(format!("conversation {index}: expected {expected}, got {got}"));
            }
            tally.latencies.lock().unwrap().push(TurnTimes {
                due: us(answered - scheduled),
                sent: us(answered - sent),
                lag: us(sent.saturating_duration_since(scheduled)),
            });
        }
    }
    tally.done.fetch_add(1, Ordering::Relaxed);
}

/// One conversation, sequentially, `n` turns: the turn time without load (µs).
async fn baseline(turns: &Turns, sequence_id: u64, n: u64, timeout: Duration) -> Result<Latencies> {
    let mut c = Conversation::new(0, sequence_id);
    let mut lat = Vec::new();
    for _ in 0..n {
        let (v, start) = c.next_turn();
        let t = Instant::now();
        let reply = tokio::time::timeout(timeout, turns.turn(0, sequence_id, v, start))
            .await
            .map_err(|_| anyhow::anyhow!("baseline: no answer in {timeout:?}{}", turns.stream_error()))?
            .map_err(anyhow::Error::msg)?;
        lat.push(t.elapsed().as_micros() as u32);
        if let Verdict::Mismatch { expected, got } = c.answer(v, start, reply) {
            bail!("baseline: expected {expected}, got {got}");
        }
    }
    Ok(Latencies::of(lat))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.conversations == 0 || args.rate <= 0.0 {
        bail!("--conversations and --rate must be positive");
    }
    let turns = Arc::new(match args.protocol {
        Protocol::Grpc => Turns::Grpc(
            grpc::GrpcTurns::connect(&format!("http://{}", args.grpc), &args.model, args.connections, args.streams)
                .await?,
        ),
        Protocol::Http => Turns::Http(http::HttpTurns::connect(&args.http, &args.model, args.connections).await?),
    });
    let n = args.conversations;
    let base = args.sequence_id_base;
    // The baseline conversation's id is past the load's ones.
    let unloaded = baseline(&turns, base + n, args.baseline_turns, Duration::from_millis(args.timeout_ms)).await?;
    let rss_before = args.pid.map(server::rss_bytes).transpose()?;
    let bare = args.bare_server;
    let compute_before = if bare { Default::default() } else { server::compute(&args.http, &args.model).await? };
    let cpu_before = (args.pid.map(server::cpu_seconds).transpose()?, server::cpu_seconds(std::process::id())?);
    let releases_before = if bare { 0.0 } else { server::sequences(&args.metrics, &args.model).await?.idle_releases };

    let conversations: Arc<Vec<tokio::sync::Mutex<Conversation>>> =
        Arc::new((0..n).map(|i| tokio::sync::Mutex::new(Conversation::new(i, base + i))).collect());
    let tally = Arc::new(Tally::default());
    let total = (args.rate * args.duration).round() as u64;
    let timeout = Duration::from_millis(args.timeout_ms);
    // The pacer: an OS thread that sleeps until each turn is due (nanosleep, tens of
    // microseconds late) and hands the turns due by then to the runtime. Tokio's timer has
    // millisecond resolution: pacing with `sleep_until` sent the turns of each millisecond
    // together, up to a millisecond after they were due, and that lateness counted in every
    // turn's latency (p50 about 1 ms at 10,000 turns/s whatever the server did).
    let start = Instant::now();
    let rate = args.rate;
    let due = move |k: u64| start + Duration::from_secs_f64(k as f64 / rate);
    let runtime = tokio::runtime::Handle::current();
    let pacer = {
        let (turns, conversations, tally) = (turns.clone(), conversations.clone(), tally.clone());
        std::thread::Builder::new().name("chatload-pacer".into()).spawn(move || {
            let mut k = 0;
            while k < total {
                let wait = due(k).saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
                let now_due = ((start.elapsed().as_secs_f64() * rate) as u64 + 1).min(total);
                while k < now_due {
                    let (turns, conversations, tally) = (turns.clone(), conversations.clone(), tally.clone());
                    runtime.spawn(one_turn(turns, conversations, tally, k % n, due(k), timeout));
                    k += 1;
                }
            }
        })?
    };
    tokio::task::spawn_blocking(move || pacer.join()).await?.map_err(|_| anyhow::anyhow!("the pacer panicked"))?;
    while tally.done.load(Ordering::Relaxed) < total {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let last_turn = Instant::now();

    let live = if bare { Default::default() } else { server::sequences(&args.metrics, &args.model).await? };
    let rss_loaded = args.pid.map(server::rss_bytes).transpose()?;
    let server_cpu = match (args.pid, cpu_before.0) {
        (Some(pid), Some(before)) => server::cpu_seconds(pid)? - before,
        _ => 0.0,
    };
    let client_cpu = server::cpu_seconds(std::process::id())? - cpu_before.1;
    let compute =
        if bare { Default::default() } else { server::compute(&args.http, &args.model).await?.since(compute_before) };
    let stream_errors = turns.stream_errors();
    if let Turns::Grpc(g) = &*turns {
        if let Some(e) = g.first_stream_error.lock().unwrap().clone() {
            tally.first_error.lock().unwrap().get_or_insert(e);
        }
    }

    let reclaim = if args.reclaim_wait > 0.0 {
        Some(
            report::reclaim(&args.metrics, &args.model, last_turn, args.reclaim_wait, args.pid, releases_before)
                .await?,
        )
    } else {
        None
    };
    // A released conversation's next turn (without START) must be refused, never answered from
    // a silently reset state.
    let released_turn_refused = match &reclaim {
        Some(r) if r.active_after == 0.0 => {
            let c = conversations[0].lock().await;
            let (value, _) = c.next_turn();
            let errors_before = turns.stream_errors();
            match tokio::time::timeout(Duration::from_secs(5), turns.turn(0, c.sequence_id, value, false)).await {
                Ok(answer) => Some(answer.is_err()),
                // A gRPC stream's error answer carries no request id: it shows as a stream error.
                Err(_) => Some(turns.stream_errors() > errors_before),
            }
        }
        _ => None,
    };

    let times = std::mem::take(&mut *tally.latencies.lock().unwrap());
    let pick = |f: fn(&TurnTimes) -> u32| Latencies::of(times.iter().map(f).collect());
    let figures = Figures {
        protocol: format!("{:?}", args.protocol).to_lowercase(),
        model: args.model.clone(),
        conversations: n,
        connections: args.connections,
        streams: if args.protocol == Protocol::Grpc { args.streams } else { 0 },
        target_rate: args.rate,
        duration_s: elapsed,
        turns: tally.done.load(Ordering::Relaxed),
        answered: times.len() as u64,
        achieved_rate: times.len() as f64 / elapsed,
        late_turns: tally.late.load(Ordering::Relaxed),
        errors: tally.errors.load(Ordering::Relaxed) + tally.timeouts.load(Ordering::Relaxed) + stream_errors,
        timeouts: tally.timeouts.load(Ordering::Relaxed),
        crosstalk: tally.crosstalk.load(Ordering::Relaxed),
        first_error: tally.first_error.lock().unwrap().clone(),
        latency_us: pick(|t| t.due),
        from_send_us: pick(|t| t.sent),
        send_lag_us: pick(|t| t.lag),
        unloaded_us: unloaded,
        server_us: compute.per_request_us(compute.success_ns),
        queue_us: compute.per_request_us(compute.queue_ns),
        compute_per_turn_us: compute.per_request_us(compute.request_compute_ns),
        compute_per_execution_us: if compute.executions > 0 {
            compute.execution_compute_ns as f64 / compute.executions as f64 / 1e3
        } else {
            0.0
        },
        inferences_per_execution: if compute.executions > 0 {
            compute.inferences as f64 / compute.executions as f64
        } else {
            0.0
        },
        server_cpu_us_per_turn: server_cpu * 1e6 / tally.done.load(Ordering::Relaxed).max(1) as f64,
        client_cpu_us_per_turn: client_cpu * 1e6 / tally.done.load(Ordering::Relaxed).max(1) as f64,
        live_sequences: live.active,
        backlog: live.backlog,
        state_bytes: live.state_bytes,
        evictions: live.evictions,
        rss_before: rss_before.unwrap_or(0),
        rss_loaded: rss_loaded.unwrap_or(0),
        reclaim,
        released_turn_refused,
    };
    print!("{}", figures.text());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&figures.json())?)?;
    }
    if figures.errors > 0 || figures.crosstalk > 0 || released_turn_refused == Some(false) {
        std::process::exit(2);
    }
    Ok(())
}
