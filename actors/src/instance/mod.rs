//! The instance actor: one loaded copy of a model on its own OS thread, running one batch at a
//! time. It merges the batch's inputs, calls its backend for one outcome per request (the
//! backend splits batched outputs, or answers request by request), answers each request, and
//! stamps the timings that statistics read. A backend panic fails the batch and ends the actor;
//! the supervisor starts a new one. Where its backend allows it, a lone request may run on the
//! thread that submitted it instead (`inline`): the same `InstanceCore::step` runs the batch
//! either way.

mod decoupled;
pub(crate) mod early;
mod gone;
mod inline;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Recipient;

pub(crate) use self::inline::InstanceCore;
use self::inline::Step;
pub use self::inline::INLINE_MAX_COMPUTE;
use crate::backend::{self, Backend, BackendFactory, BatchInput, InstanceSpec};
use crate::batch::merge_inputs;
use crate::error::{Error, Result};
use crate::exit::InstanceExit;
use crate::figures::ModelFigures;
use crate::lane::{self, Finish, Lane};
use crate::mailbox::{mailbox, Receiver, Sender};
use crate::policy::ModelPolicy;
use crate::protocol::{InstanceExited, InstanceIdle, InstanceMsg, InstanceReady, Pending};
use crate::stats::{ComputeTimes, FailureReason, ModelStats, RequestTimes};
use crate::trace;

/// Stamps `activity` on each traced request of a batch.
fn stamp(batch: &[Pending], activity: &'static str, at: Instant) {
    for p in batch {
        if let Some(trace) = &p.request.trace {
            trace.record_at(activity, at);
        }
    }
}

/// The instance actor: one copy of a model, its backend created and run on its own thread.
/// The supervisor makes one per (re)start; its mailbox is an `InstanceMsg` channel.
pub(crate) struct InstanceActor {
    pub spec: InstanceSpec,
    pub generation: u64,
    pub policy: Arc<ModelPolicy>,
    pub stats: Arc<ModelStats>,
    pub figures: Arc<ModelFigures>,
    pub factory: Arc<dyn BackendFactory>,
    /// The scheduler, told when the instance is free (unless it frees itself in the lane).
    pub idle: Recipient<InstanceIdle>,
    /// The model's free instances: where the instance puts itself back when nothing waits.
    pub lane: Arc<Lane>,
    /// The supervisor, told when the instance is loaded and when it ended.
    pub ready: Recipient<InstanceReady>,
    pub exited: Recipient<InstanceExited>,
    /// The rate limiter and this instance's member id in it (`--rate-limit execution_count`).
    pub limiter: Option<(Arc<crate::limiter::RateLimiter>, u64)>,
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

impl InstanceActor {
    /// Starts the instance's thread. It reports `InstanceReady` once its backend is loaded,
    /// and `InstanceExited` with how it ended.
    pub fn spawn(self) {
        let name = format!("inst-{}", self.spec.name);
        let env = Arc::new(self);
        let result = std::thread::Builder::new().name(name).spawn(move || {
            let exit = run(&env);
            env.exited.do_send(InstanceExited { index: env.spec.index, generation: env.generation, exit });
        });
        if let Err(e) = result {
            tracing::error!("could not start an instance thread: {e}");
        }
    }
}

/// Pins the calling thread to `cores` (Linux `sched_setaffinity`); a failure is logged and the
/// thread runs unpinned.
fn pin_to(cores: &[usize], instance: &str) {
    if cores.is_empty() {
        return;
    }
    let mut set = rustix::thread::CpuSet::new();
    for &c in cores.iter().filter(|&&c| c < rustix::thread::CpuSet::MAX_CPU) {
        set.set(c);
    }
    let pinned = rustix::thread::sched_setaffinity(None, &set);
    if let Err(e) = pinned {
        tracing::warn!("instance '{instance}': cannot pin its thread to cores {cores:?}: {e}");
    } else {
        tracing::info!("instance '{instance}' runs on cores {cores:?}");
    }
}

fn run(env: &Arc<InstanceActor>) -> InstanceExit {
    let idx = env.spec.index;
    pin_to(&env.spec.cpu_cores, &env.spec.name);
    let created = catch_unwind(AssertUnwindSafe(|| env.factory.create(&env.spec)));
    let mut backend: Box<dyn Backend> = match created {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return InstanceExit::LoadFailed(e),
        Err(p) => {
            return InstanceExit::Panicked(format!(
                "instance '{}' panicked while loading: {}",
                env.spec.name,
                panic_message(&*p)
            ))
        }
    };
    // Warmup runs before the supervisor hears the instance is ready: a model turns READY only
    // once every instance has run its samples, and a failing sample fails the load.
    if !env.policy.warmup.is_empty() {
        if let Err(e) = crate::warmup::warm_up(&env.policy, &env.spec.name, backend.as_mut()) {
            drop(catch_unwind(AssertUnwindSafe(move || drop(backend))));
            return InstanceExit::LoadFailed(e);
        }
    }
    let inline = InstanceCore::may_inline(env, backend.as_ref());
    let core = Arc::new(InstanceCore::new(Arc::clone(env), backend));
    let (tx, rx): (Sender<InstanceMsg>, Receiver<InstanceMsg>) = mailbox();
    let shared = inline.then(|| Arc::clone(&core) as Arc<dyn crate::protocol::RunHere>);
    env.ready.do_send(InstanceReady { index: idx, generation: env.generation, mailbox: tx, inline: shared });
    let exit = serve(env, &core, &rx);
    // The backend ends on the instance's own thread, after any run that holds it.
    core.drop_backend();
    exit
}

/// The instance's loop: runs what its mailbox brings until it is told to stop or must end.
fn serve(env: &InstanceActor, core: &InstanceCore, rx: &Receiver<InstanceMsg>) -> InstanceExit {
    // Set while the instance waits out the batcher's delay for its next batch (`lane::waiter`):
    // until then only a `Pull` (the batch is ready) or a `Shutdown` comes.
    let mut waits: Option<Instant> = None;
    loop {
        let received = match waits.take() {
            None => rx.recv().map(Some),
            Some(at) => rx.recv_deadline(at),
        };
        let msg = match received {
            Ok(Some(msg)) => msg,
            // The delay ran out: the batch is the instance's to take, unless a submitter or the
            // scheduler took the wait meanwhile, whose `Pull` is on its way.
            Ok(None) if env.lane.stop_waiting(env.spec.index) => InstanceMsg::Pull,
            Ok(None) => continue,
            // The scheduler dropped the mailbox: the model is gone.
            Err(_) => return InstanceExit::Stopped,
        };
        let batch = match msg {
            InstanceMsg::Shutdown => return InstanceExit::Stopped,
            // A lone request ran on its submitter's thread and could not go on.
            InstanceMsg::Exit(exit) => return exit,
            // A lone request ran on its submitter's thread and work waits, or the batch the
            // instance waited for is ready.
            InstanceMsg::Pull => match pull_next(env) {
                Pulled::Batch(batch) => batch,
                Pulled::Free => continue,
                Pulled::Wait(at) => {
                    waits = env.lane.timed_wait(env.spec.index, at);
                    continue;
                }
            },
            InstanceMsg::Execute(batch) => batch,
        };
        let mut held = core.backend.lock();
        let Some(backend) = held.as_mut() else { return InstanceExit::Stopped };
        // One batch, then the next one the instance pulls itself while requests wait.
        let mut batch = batch;
        loop {
            match core.step(backend.as_mut(), batch) {
                Step::Free => break,
                Step::Pull => match pull_next(env) {
                    Pulled::Batch(next) => batch = next,
                    Pulled::Free => break,
                    Pulled::Wait(at) => {
                        waits = env.lane.timed_wait(env.spec.index, at);
                        break;
                    }
                },
                Step::Exit(exit) => return exit,
            }
        }
    }
}

/// What an instance that asked the batcher for its next batch does (`pull_next`).
enum Pulled {
    Batch(Vec<Pending>),
    /// Free (the scheduler told where it must hear).
    Free,
    /// Waits until then for the batch to grow, unless woken first (`lane::waiter`).
    Wait(Instant),
}

/// How a batch left the instance (`execute`'s answer when the backend did not panic).
enum Done {
    /// The scheduler is still to hear the instance is free, with the requests the backend
    /// handed back to run again.
    Unreleased(Vec<Pending>),
    /// Free already (in the lane, or the scheduler told), just before the answers went out,
    /// so a client's next request finds it free (one answered from inside `execute` went out
    /// before: its client's next request may wait for the instance, as in Triton).
    Released,
    /// Requests wait: the instance takes its next batch itself (`Lane::pull`).
    Pull,
}

/// The inputs of a batch's one request (the batch runs on them when it holds no other).
fn lone_inputs<'a>(requests: &[&'a crate::request::InferRequest]) -> &'a [crate::tensor::Tensor] {
    &requests[0].inputs
}

/// Runs one batch. Returns `Err(reason)` when the backend panicked (requests already
/// answered), else how the batch left the instance.
fn execute(env: &InstanceActor, backend: &mut dyn Backend, batch: Vec<Pending>) -> Result<Done, String> {
    let policy = &env.policy;
    let stats = &env.stats;
    let compute_start = Instant::now();
    // Drop requests whose client has gone before spending compute on them (in place: a
    // second vector per batch would be one more allocation on every request's path).
    let mut live = batch;
    if live.iter().any(|p| p.reply.is_closed()) {
        let (kept, gone): (Vec<Pending>, Vec<Pending>) = live.into_iter().partition(|p| !p.reply.is_closed());
        for p in gone {
            p.fail(stats, Error::cancelled("the client cancelled the request"));
        }
        live = kept;
    }
    if live.is_empty() {
        return Ok(Done::Unreleased(Vec::new()));
    }
    let sizes: Vec<usize> = live.iter().map(|p| p.batch_size).collect();
    let total: usize = sizes.iter().sum();
    let mut wanted: Vec<String> = Vec::new();
    if live.iter().all(|p| !p.request.outputs.is_empty()) {
        for p in &live {
            for o in &p.request.outputs {
                if !wanted.contains(&o.name) {
                    wanted.push(o.name.clone());
                }
            }
        }
    }
    // Whether each client has gone, for backends that let a running request notice.
    let gone = if backend.sees_cancellation() { gone::watch(&mut live) } else { gone::none() };
    // A batch of one runs on its request's own inputs: nothing to merge, nothing cloned.
    let merged = if live.len() == 1 {
        None
    } else {
        let inputs: Vec<&[crate::tensor::Tensor]> = live.iter().map(|p| p.request.inputs.as_slice()).collect();
        match merge_inputs(&inputs) {
            Ok(m) => Some(m),
            Err(e) => {
                for p in live {
                    p.fail_as(stats, e.clone(), FailureReason::Backend);
                }
                return Ok(Done::Unreleased(Vec::new()));
            }
        }
    };
    let input_end = Instant::now();
    stamp(&live, trace::COMPUTE_START, compute_start);
    stamp(&live, trace::COMPUTE_INPUT_END, input_end);
    let batch_input = |requests| BatchInput {
        inputs: merged.as_deref().unwrap_or_else(|| lone_inputs(requests)),
        outputs: &wanted,
        batch_size: total,
        request: (<[&crate::request::InferRequest]>::len(requests) == 1).then(|| requests[0]),
        requests,
        cancelled: &gone.flags,
        early: &[],
    };

    if policy.decoupled {
        // A cheap clone (tensor data is shared): the batch's requests answer while it runs.
        let owned: Vec<crate::request::InferRequest> = live.iter().map(|p| p.request.clone()).collect();
        let requests: Vec<&crate::request::InferRequest> = owned.iter().collect();
        let input = batch_input(&requests);
        return decoupled::execute(env, backend, live, input, compute_start, input_end).map(Done::Unreleased);
    }

    let n = live.len();
    let (result, held) = if backend.answers_early() {
        // A backend that answers from inside `execute` gets the replies it may answer so; the
        // requests move into their lent replies, so the backend sees cheap clones of them
        // (tensor data is shared).
        let owned: Vec<crate::request::InferRequest> = live.iter().map(|p| p.request.clone()).collect();
        let requests: Vec<&crate::request::InferRequest> = owned.iter().collect();
        let (held, lent) = early::lend(live, stats, &policy.name, policy.version, env.lane.waiting());
        let input = BatchInput { early: &lent, ..batch_input(&requests) };
        (catch_unwind(AssertUnwindSafe(|| backend.execute_each(input, &sizes))), held)
    } else {
        // Borrowed from the batch (no clone of each request): the answers go out after the run.
        let requests: Vec<&crate::request::InferRequest> = live.iter().map(|p| &p.request).collect();
        let result = catch_unwind(AssertUnwindSafe(|| backend.execute_each(batch_input(&requests), &sizes)));
        drop(requests);
        (result, live.into_iter().map(early::Held::Kept).collect())
    };
    drop(gone);
    let infer_end = Instant::now();
    // The requests come back, each with its index in the batch; those answered early are
    // only counted here.
    let (live, answered) = early::take_back(held);
    let again = if result.is_ok() { backend.take_rescheduled() } else { Vec::new() };
    let all_ok = matches!(&result, Ok(Ok(v)) if v.iter().all(|o| o.is_ok()));
    let reported = if n == 1 && all_ok { backend.reported_times() } else { None };
    let report = backend.backend_report().unwrap_or_default();
    let panicked = match &result {
        Err(p) => Some(format!("instance '{}' panicked: {}", env.spec.name, panic_message(&**p))),
        Ok(_) => None,
    };
    let outcomes = match result {
        Ok(Ok(v)) if v.len() == n => Ok(v),
        Ok(Ok(v)) => Err(Error::internal(format!(
            "instance '{}' answered {} of the batch's {n} requests",
            env.spec.name,
            v.len()
        ))),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::internal(panicked.clone().unwrap_or_default())),
    };
    // Executions are counted before any reply goes out, so a client that has its answer
    // always sees statistics that include it (for one answered from inside `execute`, the
    // statistics' readers wait for what follows: `ModelStats::settled`).
    let count_execution = || {
        let output_end = Instant::now();
        for (size, r) in &report.batches {
            stats.record_execution(*size, r.compute_input, r.compute_infer, r.compute_output);
        }
        match reported {
            // A backend that measures itself counts its executions (none for a batch of
            // failed requests, as Triton's backends report).
            _ if report.measured() => {}
            Some(r) => stats.record_execution(total as u64, r.compute_input, r.compute_infer, r.compute_output),
            None => stats.record_execution(
                total as u64,
                input_end - compute_start,
                infer_end - input_end,
                output_end - infer_end,
            ),
        }
        env.figures.instance(env.spec.index).executed();
        output_end
    };
    // Counts the requests answered early, after their execution: the backend reported them
    // once `execute` returned.
    let count_answered = |answered: Vec<(usize, early::Answered)>| {
        for (i, a) in answered {
            let own = report.requests.get(i).copied().flatten();
            let mut times = ComputeTimes {
                queue: compute_start.saturating_duration_since(a.enqueued),
                compute_input: input_end - compute_start,
                compute_infer: a.at.saturating_duration_since(input_end),
                compute_output: Duration::ZERO,
            };
            if let Some(r) = reported {
                times = ComputeTimes { queue: times.queue + r.queue, ..r };
            }
            if let Some((_, r)) = own {
                times = ComputeTimes { queue: times.queue, ..r };
            }
            let total = a.at.saturating_duration_since(a.request.received);
            if !a.ok || matches!(own, Some((false, _))) {
                stats.record_failure(total, FailureReason::Backend);
            } else {
                stats.record_success(&RequestTimes {
                    total,
                    queue: times.queue,
                    compute_input: times.compute_input,
                    compute_infer: times.compute_infer,
                    compute_output: times.compute_output,
                    batch_size: a.batch_size as u64,
                });
            }
            stats.pending.fetch_sub(1, Relaxed);
            stats.counted_early();
        }
    };
    let outcomes = match outcomes {
        Ok(v) => v,
        Err(e) => {
            count_execution();
            // Answered before the execution failed: their clients have their answers.
            count_answered(answered);
            for (_, p) in live {
                p.fail_as(stats, e.clone(), FailureReason::Backend);
            }
            return match panicked {
                Some(reason) => Err(reason),
                None => Ok(Done::Unreleased(Vec::new())),
            };
        }
    };
    // Each request has its own outcome: one that failed is answered with its error, the
    // others with their outputs (as Triton answers a dynamic batch request by request).
    let mut failed = Vec::new();
    let mut rescheduled = Vec::new();
    let mut answers: Vec<(Pending, Vec<crate::tensor::Tensor>, Option<Own>)> = Vec::with_capacity(live.len());
    let mut outcomes: Vec<Option<Result<Vec<crate::tensor::Tensor>>>> = outcomes.into_iter().map(Some).collect();
    for (i, p) in live {
        let Some(outcome) = outcomes[i].take() else { continue };
        let own = report.requests.get(i).copied().flatten();
        if again.contains(&i) {
            // Handed back to run again: unanswered; this execution counts as one of its
            // inferences (as Triton counts each iteration of an iterative sequence).
            rescheduled.push((p, own));
            continue;
        }
        let mut outputs = match outcome {
            Ok(outputs) => outputs,
            Err(e) => {
                failed.push((p, e, own));
                continue;
            }
        };
        // The engine keeps a sequence's next state before anyone sees the answer.
        if let Some(ticket) = &p.sequence {
            ticket.absorb(&mut outputs);
        }
        let outputs = if p.request.outputs.is_empty() {
            outputs
        } else {
            outputs.into_iter().filter(|t| p.request.outputs.iter().any(|o| o.name == t.name)).collect()
        };
        answers.push((p, outputs, own));
    }
    let output_end = count_execution();
    count_answered(answered);
    let rescheduled = rescheduled
        .into_iter()
        .map(|(p, own)| {
            let times = match own {
                Some((_, r)) => r,
                None => ComputeTimes {
                    queue: Duration::ZERO,
                    compute_input: input_end - compute_start,
                    compute_infer: infer_end - input_end,
                    compute_output: output_end - infer_end,
                },
            };
            record_reported_success(stats, &p, compute_start, times);
            p
        })
        .collect();
    // The state of every sequence in the batch is stored and the execution counted: the
    // instance is free before its answers go out.
    let pull = free(env, rescheduled, output_end - compute_start);
    for (p, e, own) in failed {
        match own {
            // The backend counted the request a success although it answered an error (as
            // Triton's Python backend does for an error response): so do the statistics.
            Some((true, r)) => {
                record_reported_success(stats, &p, compute_start, r);
                stats.pending.fetch_sub(1, Relaxed);
                p.reply.send(Err(e));
            }
            _ => p.fail_as(stats, e, FailureReason::Backend),
        }
    }
    for (mut p, outputs, own) in answers {
        if let Some(trace) = &p.request.trace {
            trace.record_at(trace::COMPUTE_OUTPUT_START, infer_end);
            trace.record_at(trace::COMPUTE_END, output_end);
        }
        let mut times = ComputeTimes {
            queue: compute_start.saturating_duration_since(p.enqueued),
            compute_input: input_end - compute_start,
            compute_infer: infer_end - input_end,
            compute_output: output_end - infer_end,
        };
        if let Some(r) = reported {
            times = ComputeTimes { queue: times.queue + r.queue, ..r };
        }
        if let Some((_, r)) = own {
            times = ComputeTimes { queue: times.queue, ..r };
        }
        // One clock read for the request's total and its first response.
        let total = p.request.received.elapsed();
        if let Some((false, _)) = own {
            stats.record_failure(total, FailureReason::Backend);
        } else {
            stats.record_success(&RequestTimes {
                total,
                queue: times.queue,
                compute_input: times.compute_input,
                compute_infer: times.compute_infer,
                compute_output: times.compute_output,
                batch_size: p.batch_size as u64,
            });
        }
        if let Some(miss) = &p.cache {
            stats.record_cache_miss(miss.insert(&outputs));
        }
        stats.pending.fetch_sub(1, Relaxed);
        stats.responses.first.record_us(total);
        // The request is done with: its id and model name move into the response, not cloned.
        let id = std::mem::take(&mut p.request.id);
        let model =
            if p.request.model == policy.name { std::mem::take(&mut p.request.model) } else { policy.name.clone() };
        let mut response = backend::response("", "", policy.version, outputs, true);
        (response.id, response.model, response.times) = (id, model, Some(times));
        p.reply.send(Ok(response));
    }
    Ok(if pull { Done::Pull } else { Done::Released })
}

/// The instance finished its batch: it puts itself back among the free instances of the lane
/// when it hands no request back and nothing waits; returns true when requests wait, for it to
/// pull its next batch once its answers are out. Otherwise the scheduler hears it is free, with
/// the requests to run again.
fn free(env: &InstanceActor, rescheduled: Vec<Pending>, took: Duration) -> bool {
    let (index, generation) = (env.spec.index, env.generation);
    if rescheduled.is_empty() {
        let (finish, failed) = env.lane.finish(index, generation, took);
        // Requests of the batch's sequences that can no longer run (no START after an END).
        for (p, e) in failed {
            p.fail(&env.stats, e);
        }
        match finish {
            Finish::Freed => return false,
            Finish::Pull => return true,
            Finish::Scheduler => {}
        }
    }
    env.idle.do_send(InstanceIdle { index, generation, rescheduled, release: true });
    false
}

/// Takes the instance's next batch from the batcher, as the scheduler would hand it.
fn pull_next(env: &InstanceActor) -> Pulled {
    let (index, generation) = (env.spec.index, env.generation);
    let (pulled, expired) = env.lane.pull(index, generation);
    for p in expired {
        p.fail(&env.stats, Error::unavailable("Request timeout expired"));
    }
    let (rescheduled, release) = (Vec::new(), false);
    match pulled {
        lane::Pulled::Batch(batch) => {
            let items: usize = batch.iter().map(|p| p.batch_size).sum();
            // On the model's clock, as the scheduler measures the batches it hands out.
            let now = env.lane.now();
            let waited = batch.iter().map(|p| now.saturating_duration_since(p.enqueued)).max();
            env.figures.scheduler.pulled(items, waited, index);
            return Pulled::Batch(batch);
        }
        lane::Pulled::Wait(at) => return Pulled::Wait(at),
        lane::Pulled::Free { tell: false } => {}
        lane::Pulled::Free { tell: true } => {
            env.idle.do_send(InstanceIdle { index, generation, rescheduled, release });
        }
        lane::Pulled::NotMine => env.idle.do_send(InstanceIdle { index, generation, rescheduled, release: true }),
    }
    Pulled::Free
}

/// Counts as a success, with the compute times the backend reported, a request it answered, or
/// one iteration of a request its backend handed back to run again (the request stays pending).
pub(crate) fn record_reported_success(stats: &ModelStats, p: &Pending, compute_start: Instant, r: ComputeTimes) {
    stats.record_success(&RequestTimes {
        total: p.request.received.elapsed(),
        queue: compute_start.saturating_duration_since(p.enqueued),
        compute_input: r.compute_input,
        compute_infer: r.compute_infer,
        compute_output: r.compute_output,
        batch_size: p.batch_size as u64,
    });
}

/// What a backend reported of one request: whether it counts as a success, its compute times.
type Own = (bool, ComputeTimes);
