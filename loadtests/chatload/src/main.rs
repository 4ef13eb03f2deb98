//! chatload: N live conversations on a sequence model, open loop: the bundled accumulator
//! (`--workload sum`) or a chat model (`--workload chat`: `tiny_chat`, whose KV cache is the
//! sequence's implicit state; each turn sends the conversation's history in the model's chat
//! template plus a new user message, greedy decoding).
//!
//! Turn k of the run (k = 0, 1, ...) is due at k / rate seconds and belongs to conversation
//! k mod N, so every conversation sends a turn every N / rate seconds (its think time) and the
//! total rate is fixed whatever the server does. A turn's latency runs from the time it was due,
//! so a server that falls behind shows it (no coordinated omission). With `--closed` nothing
//! paces the turns: each conversation sends its next turn as soon as its previous one is
//! answered (closed.rs), and the achieved rate is the saturation throughput at N live
//! conversations, at a cost per turn to the generator that does not grow with N. Every reply is checked
//! against the conversation's own history (cross-talk): the running sum, or for chat the
//! prompt and cached token counts (chat.rs), and a sample of chat turns against a stateless
//! request after the load. Many conversations share a few
//! connections: gRPC bidirectional streams (`ModelStreamInfer`) or HTTP/1.1 keep-alive.
//!
//! After the load it reads the server's RSS (/proc/<pid>) and `/metrics` (live sequences, state
//! bytes), then, with `--reclaim-wait`, waits for the idle timeout to release every conversation
//! and checks that a released conversation's next turn is refused.

// serde_json's `json!` of the figures (report.rs) nests deeper than the default limit.
#![recursion_limit = "256"]

mod chat;
mod closed;
mod conv;
mod grpc;
mod http;
mod report;
mod server;
mod workload;

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
use report::{Figures, Latencies};
use workload::{ChatSetup, Conv, Outcome, Turns};

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq)]
enum Protocol {
    Grpc,
    Http,
}

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq)]
enum Workload {
    /// A running-sum sequence model (INPUT, OUTPUT INT32): `accumulate_oldest`.
    Sum,
    /// A decoupled text-generation sequence model (`text_input`, `max_tokens`, `temperature`;
    /// `text_output`, `finish_reason` and the token counts): `tiny_chat`. gRPC turns go over
    /// `ModelStreamInfer`, HTTP turns through `/v2/models/<m>/generate`.
    Chat,
    /// Stateless requests to `add_sub` (INPUT0, INPUT1 FP32 [16]; OUTPUT0 = sum, OUTPUT1 =
    /// difference, each checked): "conversations" are independent clients, no sequence.
    AddSub,
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
    #[arg(long, value_enum, default_value = "sum")]
    workload: Workload,
    /// The sequence model: with `--workload sum` one whose OUTPUT is the running sum of INPUT
    /// since START; with `--workload chat` a text-generation model like tiny_chat.
    #[arg(long, default_value = "accumulate_oldest")]
    model: String,
    /// Chat: the model's tokenizer.json, to count each prompt's tokens as the server must.
    #[arg(long)]
    tokenizer: Option<String>,
    /// Chat: max_tokens of every turn (greedy decoding).
    #[arg(long, default_value_t = 8)]
    max_tokens: i32,
    /// Chat: turns before a conversation starts over with START (keeps the context bounded).
    #[arg(long, default_value_t = 20)]
    max_turns: u64,
    /// Chat: every n-th turn is sent again after the load as a stateless request (START and
    /// END at once) whose reply must be the same (0: none).
    #[arg(long, default_value_t = 50)]
    reference_every: u64,
    /// Live conversations.
    #[arg(long, default_value_t = 1000)]
    conversations: u64,
    /// Total turns per second, all conversations together (open loop).
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    /// Closed loop instead of a fixed rate: each conversation sends its next turn as soon as its
    /// previous one is answered (zero think time) for --duration seconds, so the achieved rate is
    /// the server's saturation throughput at --conversations live conversations (--rate unused).
    #[arg(long)]
    closed: bool,
    /// With --closed: at most this many turns in flight at once (the others wait in order), so
    /// N conversations stay live while the server's queue holds at most this many turns.
    #[arg(long)]
    max_in_flight: Option<usize>,
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
    /// Also write every answered turn of the load to this file (CSV: the turn's number k, which
    /// is also its request id `t<k>`, its conversation, START, when it was due, sent and
    /// answered in CLOCK_MONOTONIC nanoseconds, the clock of the server's trace timestamps, and
    /// its prompt, completion and cached tokens), to join with the server's trace file.
    #[arg(long)]
    turns_out: Option<String>,
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
    /// Chat turns kept for the stateless reference check.
    samples: Mutex<Vec<chat::Sample>>,
}

/// An answered turn's times (µs): from when it was due and from when it was sent to its
/// answer, and how late it was sent (the generator's own lateness: the pacer's wake-up, the
/// runtime's, and a previous turn of its conversation still unanswered).
#[derive(Debug, Clone, Copy)]
struct TurnTimes {
    due: u32,
    sent: u32,
    lag: u32,
    /// The turn STARTed its conversation (for chat: nothing cached, the shortest prompt).
    start: bool,
    k: u64,
    conversation: u64,
    due_at: Instant,
    sent_at: Instant,
    answered_at: Instant,
    /// A chat reply's prompt, completion and cached tokens.
    tokens: [i64; 3],
}

impl Tally {
    fn error(&self, message: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.first_error.lock().unwrap().get_or_insert(message);
    }
}

/// One turn of conversation `index` (the run's turn `k`), due at `scheduled`: waits for the
/// conversation's previous turn, sends, checks the reply and records its times.
#[allow(clippy::too_many_arguments)]
async fn one_turn(
    turns: Arc<Turns>,
    chat: Option<Arc<ChatSetup>>,
    conversations: Arc<Vec<tokio::sync::Mutex<Conv>>>,
    tally: Arc<Tally>,
    index: u64,
    k: u64,
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
    let done = c.turn(&turns, chat.as_deref(), index, k, timeout).await;
    let us = |d: Duration| d.as_micros().min(u32::MAX as u128) as u32;
    match done.outcome {
        Outcome::Timeout => {
            tally.timeouts.fetch_add(1, Ordering::Relaxed);
        }
        Outcome::Error(e) => tally.error(format!("conversation {index}: {e}")),
        Outcome::Answered(mismatch) => {
            if let Some(m) = mismatch {
                tally.crosstalk.fetch_add(1, Ordering::Relaxed);
                tally.error(format!("conversation {index}: {m}"));
            }
            if let Some(sample) = done.sample {
                tally.samples.lock().unwrap().push(sample);
            }
            tally.latencies.lock().unwrap().push(TurnTimes {
                due: us(done.answered - scheduled),
                sent: us(done.answered - done.sent),
                lag: us(done.sent.saturating_duration_since(scheduled)),
                start: done.start,
                k,
                conversation: index,
                due_at: scheduled,
                sent_at: done.sent,
                answered_at: done.answered,
                tokens: done.tokens.unwrap_or_default(),
            });
        }
    }
    tally.done.fetch_add(1, Ordering::Relaxed);
}

/// The answered turns as CSV, their times in CLOCK_MONOTONIC nanoseconds (`Instant` is that
/// clock on Linux; the offset is read once, the clock between two `Instant`s, the closest of a
/// few tries: a pair read across a preemption would shift every time by the pause).
fn write_turns(path: &str, times: &[TurnTimes]) -> Result<()> {
    use std::fmt::Write as _;
    let mut best: Option<(Duration, Instant, i128)> = None;
    for _ in 0..16 {
        let before = Instant::now();
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let width = before.elapsed();
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, before + width / 2, now.tv_sec as i128 * 1_000_000_000 + now.tv_nsec as i128));
        }
        if width < Duration::from_micros(1) {
            break;
        }
    }
    let (_, anchor, anchor_ns) = best.expect("at least one try");
    let ns = |at: Instant| match at.checked_duration_since(anchor) {
        Some(d) => anchor_ns + d.as_nanos() as i128,
        None => anchor_ns - (anchor - at).as_nanos() as i128,
    };
    let mut out =
        String::from("k,conversation,start,due_ns,sent_ns,answered_ns,prompt_tokens,completion_tokens,cached_tokens\n");
    let mut sorted: Vec<&TurnTimes> = times.iter().collect();
    sorted.sort_by_key(|t| t.k);
    for t in sorted {
        let [p, c, cached] = t.tokens;
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{p},{c},{cached}",
            t.k,
            t.conversation,
            u8::from(t.start),
            ns(t.due_at),
            ns(t.sent_at),
            ns(t.answered_at)
        );
    }
    std::fs::write(path, out)?;
    Ok(())
}

/// One conversation, sequentially, `n` turns: the turn time without load (µs).
async fn baseline(
    turns: &Turns,
    chat: Option<&ChatSetup>,
    sequence_id: u64,
    n: u64,
    timeout: Duration,
    stateless: bool,
) -> Result<Latencies> {
    let mut c = if stateless { Conv::Stateless(conv::Stateless::new(0)) } else { Conv::new(chat, 0, sequence_id) };
    let mut lat = Vec::new();
    for _ in 0..n {
        let done = c.turn(turns, chat, 0, 1, timeout).await;
        match done.outcome {
            Outcome::Timeout => bail!("baseline: no answer in {timeout:?}{}", turns.stream_error()),
            Outcome::Error(e) => bail!("baseline: {e}"),
            Outcome::Answered(Some(m)) => bail!("baseline: {m}"),
            Outcome::Answered(None) => lat.push((done.answered - done.sent).as_micros() as u32),
        }
    }
    Ok(Latencies::of(lat))
}

/// The chat workload's setup: the model's template from its config, the tokenizer file.
async fn chat_setup(args: &Args) -> Result<Option<Arc<ChatSetup>>> {
    if args.workload != Workload::Chat {
        return Ok(None);
    }
    let Some(path) = &args.tokenizer else { bail!("--workload chat needs --tokenizer (the model's tokenizer.json)") };
    let tokenizer = tokenizers::Tokenizer::from_file(path).map_err(|e| anyhow::anyhow!("--tokenizer {path}: {e}"))?;
    let template = server::chat_template(&args.http, &args.model).await?;
    Ok(Some(Arc::new(ChatSetup {
        template,
        tokenizer,
        max_tokens: args.max_tokens,
        max_turns: args.max_turns,
        reference_every: args.reference_every,
    })))
}

/// The open loop: turn k of the run is due at k / rate seconds from `start` and belongs to
/// conversation k mod N; returns once every turn is answered (or has failed).
async fn paced(
    args: &Args,
    turns: &Arc<Turns>,
    chat: &Option<Arc<ChatSetup>>,
    conversations: &Arc<Vec<tokio::sync::Mutex<Conv>>>,
    tally: &Arc<Tally>,
    start: Instant,
) -> Result<()> {
    let n = args.conversations;
    let total = (args.rate * args.duration).round() as u64;
    let timeout = Duration::from_millis(args.timeout_ms);
    // The pacer: an OS thread that sleeps until each turn is due (nanosleep, tens of
    // microseconds late) and hands the turns due by then to the runtime. Tokio's timer has
    // millisecond resolution: pacing with `sleep_until` sent the turns of each millisecond
    // together, up to a millisecond after they were due, and that lateness counted in every
    // turn's latency (p50 about 1 ms at 10,000 turns/s whatever the server did).
    let rate = args.rate;
    let due = move |k: u64| start + Duration::from_secs_f64(k as f64 / rate);
    let runtime = tokio::runtime::Handle::current();
    let pacer = {
        let (turns, conversations, tally, chat) = (turns.clone(), conversations.clone(), tally.clone(), chat.clone());
        std::thread::Builder::new().name("chatload-pacer".into()).spawn(move || {
            let mut k = 0;
            while k < total {
                let wait = due(k).saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
                let now_due = ((start.elapsed().as_secs_f64() * rate) as u64 + 1).min(total);
                while k < now_due {
                    let (turns, conversations, tally, chat) =
                        (turns.clone(), conversations.clone(), tally.clone(), chat.clone());
                    runtime.spawn(one_turn(turns, chat, conversations, tally, k % n, k, due(k), timeout));
                    k += 1;
                }
            }
        })?
    };
    tokio::task::spawn_blocking(move || pacer.join()).await?.map_err(|_| anyhow::anyhow!("the pacer panicked"))?;
    while tally.done.load(Ordering::Relaxed) < total {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.conversations == 0 || (args.rate <= 0.0 && !args.closed) {
        bail!("--conversations and --rate must be positive");
    }
    if args.workload == Workload::AddSub && args.reclaim_wait > 0.0 {
        bail!("--workload add-sub is stateless: nothing to reclaim (--reclaim-wait)");
    }
    let chat = chat_setup(&args).await?;
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
    let unloaded = baseline(
        &turns,
        chat.as_deref(),
        base + n,
        args.baseline_turns,
        Duration::from_millis(args.timeout_ms),
        args.workload == Workload::AddSub,
    )
    .await?;
    let rss_before = args.pid.map(server::rss_bytes).transpose()?;
    let bare = args.bare_server;
    // The sequence gauges: none for a bare server or a stateless model.
    let no_sequences = bare || args.workload == Workload::AddSub;
    let compute_before = if bare { Default::default() } else { server::compute(&args.http, &args.model).await? };
    let cpu_before = (args.pid.map(server::cpu_seconds).transpose()?, server::cpu_seconds(std::process::id())?);
    let releases_before =
        if no_sequences { 0.0 } else { server::sequences(&args.metrics, &args.model).await?.idle_releases };

    let conversations: Arc<Vec<tokio::sync::Mutex<Conv>>> = Arc::new(
        (0..n)
            .map(|i| {
                tokio::sync::Mutex::new(if args.workload == Workload::AddSub {
                    Conv::Stateless(conv::Stateless::new(i))
                } else {
                    Conv::new(chat.as_deref(), i, base + i)
                })
            })
            .collect(),
    );
    let tally = Arc::new(Tally::default());
    let timeout = Duration::from_millis(args.timeout_ms);
    let start = Instant::now();
    if args.closed {
        let until = start + Duration::from_secs_f64(args.duration);
        let (turns, conversations, tally, chat) = (turns.clone(), conversations.clone(), tally.clone(), chat.clone());
        closed::run(n, until, args.max_in_flight, move |index, k| {
            let (turns, conversations, tally, chat) =
                (turns.clone(), conversations.clone(), tally.clone(), chat.clone());
            one_turn(turns, chat, conversations, tally, index, k, Instant::now(), timeout)
        })
        .await;
    } else {
        paced(&args, &turns, &chat, &conversations, &tally, start).await?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let last_turn = Instant::now();

    let live = if no_sequences { Default::default() } else { server::sequences(&args.metrics, &args.model).await? };
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

    // The chat workload's sampled turns again, stateless, after the load and its statistics.
    let references = match &chat {
        Some(setup) => {
            let samples = std::mem::take(&mut *tally.samples.lock().unwrap());
            let r = workload::check_references(&turns, setup, samples, (1 << 40) + base, 8, timeout).await;
            if let Some(p) = &r.first_problem {
                tally.first_error.lock().unwrap().get_or_insert(p.clone());
            }
            r
        }
        None => Default::default(),
    };

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
            let mut c = conversations[0].lock().await;
            let errors_before = turns.stream_errors();
            match tokio::time::timeout(Duration::from_secs(5), c.turn_without_start(&turns, chat.as_deref())).await {
                Ok(answer) => Some(answer.is_err()),
                // A gRPC stream's error answer carries no request id: it shows as a stream error.
                Err(_) => Some(turns.stream_errors() > errors_before),
            }
        }
        _ => None,
    };

    let times = std::mem::take(&mut *tally.latencies.lock().unwrap());
    let pick = |f: fn(&TurnTimes) -> u32| Latencies::of(times.iter().map(f).collect());
    let due_if = |start: bool| Latencies::of(times.iter().filter(|t| t.start == start).map(|t| t.due).collect());
    let figures = Figures {
        protocol: format!("{:?}", args.protocol).to_lowercase(),
        workload: format!("{:?}", args.workload).to_lowercase(),
        max_tokens: if chat.is_some() { args.max_tokens } else { 0 },
        model: args.model.clone(),
        conversations: n,
        connections: args.connections,
        streams: if args.protocol == Protocol::Grpc { args.streams } else { 0 },
        closed: args.closed,
        target_rate: if args.closed { 0.0 } else { args.rate },
        duration_s: elapsed,
        turns: tally.done.load(Ordering::Relaxed),
        answered: times.len() as u64,
        achieved_rate: times.len() as f64 / elapsed,
        late_turns: tally.late.load(Ordering::Relaxed),
        errors: tally.errors.load(Ordering::Relaxed)
            + tally.timeouts.load(Ordering::Relaxed)
            + stream_errors
            + references.errors,
        timeouts: tally.timeouts.load(Ordering::Relaxed),
        crosstalk: tally.crosstalk.load(Ordering::Relaxed) + references.mismatches,
        history_mismatches: tally.crosstalk.load(Ordering::Relaxed),
        references_checked: references.checked,
        reference_mismatches: references.mismatches,
        first_error: tally.first_error.lock().unwrap().clone(),
        latency_us: pick(|t| t.due),
        start_turn_us: due_if(true),
        later_turn_us: due_if(false),
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
    if let Some(path) = &args.turns_out {
        write_turns(path, &times)?;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&figures.json())?)?;
    }
    if figures.errors > 0 || figures.crosstalk > 0 || released_turn_refused == Some(false) {
        std::process::exit(2);
    }
    Ok(())
}
