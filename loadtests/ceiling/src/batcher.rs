//! The least batching engine a server of Tritium's shape needs: one thread owning one ONNX
//! Runtime session, a queue under a mutex, and a condition variable. A request's thread queues
//! its input and awaits its answer; the engine thread takes what is queued (waiting up to
//! `delay` for `preferred` requests, as Triton's dynamic batcher and Tritium's do), runs the
//! batch, and answers each request from its slice of the output. No actor, no lane, no
//! statistics beyond the counters perf_analyzer reads. `floor_mlp` serves it over HTTP.
//!
//! The engine thread keeps off the cores ONNX Runtime pins its pool threads to, once the pool
//! has worked, as Tritium's ONNX instance does (its `placement.rs`): otherwise the kernel often
//! runs the caller beside its own pool thread while the other core idles.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ort::session::Session;
use ort::value::{DynValue, Tensor, ValueType};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::BenchResult;

/// What the engine answers a request: its output row(s), or why not.
pub type Answer = Result<Vec<f32>, String>;

struct Pending {
    input: Vec<f32>,
    rows: usize,
    queued: Instant,
    reply: oneshot::Sender<Answer>,
}

/// The counters of Triton's statistics extension that perf_analyzer and the loadtests read,
/// each a sum over requests (the compute figures: the time of the execution the request ran in).
#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    executions: AtomicU64,
    success_ns: AtomicU64,
    queue_ns: AtomicU64,
    input_ns: AtomicU64,
    infer_ns: AtomicU64,
    output_ns: AtomicU64,
}

struct Shared {
    queue: Mutex<Vec<Pending>>,
    ready: Condvar,
    counters: Counters,
}

/// The engine's handle, shared by the request threads.
#[derive(Clone)]
pub struct Batcher {
    shared: Arc<Shared>,
    /// Elements per row of the input and of the output (the dims after the batch dimension).
    pub input_width: usize,
    pub output_width: usize,
    pub input_name: String,
    pub output_name: String,
    pub max_batch: usize,
    preferred: usize,
}

/// How the engine batches and how its session is made.
pub struct Options<'a> {
    pub model: &'a Path,
    pub library: &'a Path,
    pub session: &'a [(String, String)],
    pub max_batch: usize,
    pub preferred: usize,
    pub delay: Duration,
}

fn width(dtype: &ValueType, what: &str) -> BenchResult<usize> {
    let ValueType::Tensor { shape, .. } = dtype else { return Err(format!("{what}: not a tensor").into()) };
    let dims: Vec<i64> = shape.iter().skip(1).copied().collect();
    if dims.iter().any(|d| *d < 0) {
        return Err(format!("{what}: a dynamic non-batch dimension {shape:?}").into());
    }
    Ok(dims.iter().product::<i64>() as usize)
}

impl Batcher {
    /// Loads the model (one input, one output, FP32) and starts the engine thread.
    pub fn start(o: &Options) -> BenchResult<Batcher> {
        let env = ort::init_from(o.library)?.with_name("floor_mlp").build()?;
        let (model, session_entries) = (o.model.to_path_buf(), o.session.to_vec());
        let (made_tx, made_rx) = std::sync::mpsc::channel();
        let shared =
            Arc::new(Shared { queue: Mutex::new(Vec::new()), ready: Condvar::new(), counters: Counters::default() });
        let (engine_shared, delay, preferred, max_batch) = (shared.clone(), o.delay, o.preferred, o.max_batch);
        std::thread::Builder::new().name("engine".into()).spawn(move || {
            let made = (|| -> BenchResult<(Session, String, String, usize, usize)> {
                let mut builder = Session::builder(&env)?;
                for (key, value) in &session_entries {
                    builder = builder.with_config_entry(key, value)?;
                }
                let session = builder.commit_from_file(&model)?;
                let (i, out) = match (session.inputs(), session.outputs()) {
                    ([i], [out]) => (i, out),
                    _ => return Err("the model must have one input and one output".into()),
                };
                let (iw, ow) = (width(i.dtype(), i.name())?, width(out.dtype(), out.name())?);
                let (iname, oname) = (i.name().to_string(), out.name().to_string());
                Ok((session, iname, oname, iw, ow))
            })();
            match made {
                Ok((session, iname, oname, iw, ow)) => {
                    let _ = made_tx.send(Ok((iname.clone(), oname, iw, ow)));
                    Engine { shared: engine_shared, session, input_name: iname, input_width: iw, output_width: ow }
                        .run(delay, preferred, max_batch);
                }
                Err(e) => {
                    let _ = made_tx.send(Err(e.to_string()));
                }
            }
        })?;
        let (input_name, output_name, input_width, output_width) = made_rx.recv()??;
        Ok(Batcher { shared, input_width, output_width, input_name, output_name, max_batch, preferred })
    }

    /// Queues `rows` rows of input; the answer comes on the receiver.
    pub fn submit(&self, input: Vec<f32>, rows: usize) -> oneshot::Receiver<Answer> {
        let (reply, rx) = oneshot::channel();
        let mut queue = self.shared.queue.lock().unwrap();
        queue.push(Pending { input, rows, queued: Instant::now(), reply });
        let len = queue.len();
        drop(queue);
        // The engine waits for a first request, or for `preferred` of them within the delay.
        if len == 1 || len == self.preferred {
            self.shared.ready.notify_one();
        }
        rx
    }

    /// Adds one answered request's time from arrival to answer.
    pub fn answered(&self, since: Instant) {
        self.shared.counters.success_ns.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// The counters now, each summed over the requests answered.
    pub fn snapshot(&self) -> Snapshot {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Snapshot {
            requests: get(&c.requests),
            executions: get(&c.executions),
            success_ns: get(&c.success_ns),
            queue_ns: get(&c.queue_ns),
            input_ns: get(&c.input_ns),
            infer_ns: get(&c.infer_ns),
            output_ns: get(&c.output_ns),
        }
    }

    /// Triton's statistics extension's answer for `model` (version 1), as HTTP gives it.
    pub fn stats_json(&self, model: &str) -> Value {
        let s = self.snapshot();
        let d = |ns: u64| json!({ "count": s.requests, "ns": ns });
        json!({ "model_stats": [{
            "name": model, "version": "1", "last_inference": 0,
            "inference_count": s.requests, "execution_count": s.executions,
            "inference_stats": {
                "success": d(s.success_ns), "fail": { "count": 0, "ns": 0 }, "queue": d(s.queue_ns),
                "compute_input": d(s.input_ns), "compute_infer": d(s.infer_ns), "compute_output": d(s.output_ns),
                "cache_hit": { "count": 0, "ns": 0 }, "cache_miss": { "count": 0, "ns": 0 },
            },
            "batch_stats": [],
        }]})
    }
}

/// The engine's counters at one moment: requests and executions, and the nanoseconds summed over
/// the requests of each of Triton's statistics durations.
pub struct Snapshot {
    pub requests: u64,
    pub executions: u64,
    pub success_ns: u64,
    pub queue_ns: u64,
    pub input_ns: u64,
    pub infer_ns: u64,
    pub output_ns: u64,
}

struct Engine {
    shared: Arc<Shared>,
    session: Session,
    input_name: String,
    input_width: usize,
    output_width: usize,
}

impl Engine {
    fn run(mut self, delay: Duration, preferred: usize, max_batch: usize) {
        let mut placed = Placement::new();
        loop {
            let batch = self.take(delay, preferred, max_batch);
            self.execute(batch);
            placed.after_run();
        }
    }

    /// What is queued, once there is something: up to `max_batch` requests' rows, after waiting
    /// up to `delay` from the oldest request's arrival for `preferred` of them.
    fn take(&self, delay: Duration, preferred: usize, max_batch: usize) -> Vec<Pending> {
        let mut queue = self.shared.queue.lock().unwrap();
        while queue.is_empty() {
            queue = self.shared.ready.wait(queue).unwrap();
        }
        let deadline = queue[0].queued + delay;
        while queue.len() < preferred {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            queue = self.shared.ready.wait_timeout(queue, deadline - now).unwrap().0;
        }
        let n = fitting(queue.iter().map(|p| p.rows), max_batch);
        queue.drain(..n).collect()
    }

    fn execute(&mut self, batch: Vec<Pending>) {
        let start = Instant::now();
        let rows: usize = batch.iter().map(|p| p.rows).sum();
        let mut data = Vec::with_capacity(rows * self.input_width);
        for p in &batch {
            data.extend_from_slice(&p.input);
        }
        // The compute figures end once the output is copied out, before the answers go.
        let ran = (|| -> BenchResult<(Vec<f32>, Instant, Instant, Instant)> {
            let tensor = Tensor::<f32>::from_array(([rows as i64, self.input_width as i64], data))?.into_dyn();
            let values: Vec<(String, DynValue)> = vec![(self.input_name.clone(), tensor)];
            let computing = Instant::now();
            let outputs = self.session.run(values)?;
            let computed = Instant::now();
            let (_, out) = outputs[0].try_extract_tensor::<f32>()?;
            let out = out.to_vec();
            Ok((out, computing, computed, Instant::now()))
        })();
        let c = &self.shared.counters;
        let n = batch.len() as u64;
        c.requests.fetch_add(n, Ordering::Relaxed);
        c.executions.fetch_add(1, Ordering::Relaxed);
        match ran {
            Ok((out, computing, computed, copied)) => {
                c.input_ns.fetch_add((computing - start).as_nanos() as u64 * n, Ordering::Relaxed);
                c.infer_ns.fetch_add((computed - computing).as_nanos() as u64 * n, Ordering::Relaxed);
                c.output_ns.fetch_add((copied - computed).as_nanos() as u64 * n, Ordering::Relaxed);
                let mut offset = 0;
                for p in batch {
                    c.queue_ns.fetch_add((start - p.queued).as_nanos() as u64, Ordering::Relaxed);
                    let len = p.rows * self.output_width;
                    let _ = p.reply.send(Ok(out[offset..offset + len].to_vec()));
                    offset += len;
                }
            }
            Err(e) => {
                for p in batch {
                    let _ = p.reply.send(Err(e.to_string()));
                }
            }
        }
    }
}

/// How many of the queued requests (their rows, oldest first) one batch of at most `max_batch`
/// rows takes: the oldest always, then each next one while it fits.
fn fitting(rows: impl Iterator<Item = usize>, max_batch: usize) -> usize {
    let (mut total, mut n) = (0, 0);
    for r in rows {
        if n > 0 && total + r > max_batch {
            break;
        }
        total += r;
        n += 1;
    }
    n
}

/// The engine thread held to the cores ONNX Runtime's pool threads leave, once their CPU time
/// shows they work: the rule of Tritium's `src/backends/onnx/placement.rs`, kept short here.
struct Placement {
    runs: u64,
    pool: Vec<i32>,
    ticks_at_start: Option<u64>,
    done: bool,
}

impl Placement {
    fn new() -> Placement {
        Placement { runs: 0, pool: named_like_me(), ticks_at_start: None, done: false }
    }

    fn after_run(&mut self) {
        self.runs += 1;
        if self.done || !self.runs.is_multiple_of(64) {
            return;
        }
        let now = ticks(&self.pool);
        let start = *self.ticks_at_start.get_or_insert(now);
        if now < start + 2 {
            return;
        }
        self.done = true;
        let me = rustix::thread::sched_getaffinity(None).map(|s| cores(&s)).unwrap_or_default();
        let taken: Vec<usize> = self
            .pool
            .iter()
            .filter_map(|&t| rustix::thread::Pid::from_raw(t))
            .filter_map(|p| rustix::thread::sched_getaffinity(Some(p)).ok())
            .flat_map(|s| cores(&s))
            .collect();
        let left: Vec<usize> = me.iter().copied().filter(|c| !taken.contains(c)).collect();
        if left.is_empty() || left.len() == me.len() {
            return;
        }
        let mut set = rustix::thread::CpuSet::new();
        for &c in &left {
            set.set(c);
        }
        if rustix::thread::sched_setaffinity(None, &set).is_ok() {
            eprintln!("floor_mlp: the engine thread runs on cores {left:?} (its pool's: {taken:?})");
        }
    }
}

fn cores(set: &rustix::thread::CpuSet) -> Vec<usize> {
    (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
}

fn comm(tid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok().map(|c| c.trim_end().to_string())
}

/// ONNX Runtime's pool threads take the name of the thread that made the session.
fn named_like_me() -> Vec<i32> {
    let me = rustix::thread::gettid().as_raw_nonzero().get();
    let mine = comm(me);
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    tasks
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&tid| tid != me && mine.is_some() && comm(tid) == mine)
        .collect()
}

/// The user + system clock ticks of `threads`.
fn ticks(threads: &[i32]) -> u64 {
    threads
        .iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/self/task/{t}/stat")).ok())
        .filter_map(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::fitting;

    #[test]
    fn a_batch_takes_the_oldest_requests_that_fit() {
        assert_eq!(fitting([1, 1, 1].into_iter(), 64), 3);
        assert_eq!(fitting([1; 80].into_iter(), 64), 64);
        assert_eq!(fitting([30, 30, 10].into_iter(), 64), 2, "the third would pass 64 rows");
        assert_eq!(fitting([30, 40, 1].into_iter(), 64), 1, "the batch stops at the first that does not fit");
        assert_eq!(fitting(std::iter::empty(), 64), 0);
    }

    #[test]
    fn the_oldest_request_goes_even_when_larger_than_a_batch() {
        // The frontends refuse more than max_batch rows; the engine still never stalls on one.
        assert_eq!(fitting([100, 1].into_iter(), 64), 1);
    }
}
