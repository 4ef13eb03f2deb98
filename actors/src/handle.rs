//! A loaded model version as the rest of the server sees it: validate, submit, await, unload.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr, ArbiterHandle};
use tokio::sync::oneshot;

use crate::backend::BackendFactory;
use crate::cache::{CacheKey, CacheMiss, ResponseCache};
use crate::clock::{SharedClock, SystemClock};
use crate::error::{Error, Result};
use crate::figures::ModelFigures;
use crate::lane::Route;
use crate::limiter::{Limits, RateLimiter};
use crate::policy::{ModelPolicy, SchedulerPolicy};
use crate::protocol::{Conversations, Enqueue, Pending, Stop};
use crate::request::{InferRequest, InferResponse, Reply, ReplyGate};
use crate::scheduler::SchedulerAddr;
use crate::sequence::Conversation;
use crate::stats::{FailureReason, ModelStats};
use crate::supervisor::Supervisor;
use crate::validate::validate_request;

/// The arbiter (one event-loop thread) on which schedulers and supervisors run.
pub struct Engine {
    arbiter: actix::Arbiter,
}

impl Engine {
    /// Must be called inside a running actix system.
    pub fn new() -> Self {
        Engine { arbiter: actix::Arbiter::new() }
    }

    pub fn handle(&self) -> ArbiterHandle {
        self.arbiter.handle()
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

/// What the engine shares among the models it runs: the response cache (`--cache-config`)
/// and the rate limiter (`--rate-limit execution_count`).
#[derive(Clone, Default)]
pub struct Shared {
    pub cache: Option<Arc<ResponseCache>>,
    pub limiter: Option<Arc<RateLimiter>>,
}

pub struct ModelHandle {
    pub policy: Arc<ModelPolicy>,
    pub stats: Arc<ModelStats>,
    pub figures: Arc<ModelFigures>,
    scheduler: SchedulerAddr,
    supervisor: Addr<Supervisor>,
    /// `preserve_ordering`: answers leave in acceptance order.
    order: Option<Arc<ReplyGate>>,
    clock: SharedClock,
    /// The response cache, for a model that asks for it (`response_cache { enable: true }`)
    /// when the engine has one.
    cache: Option<Arc<ResponseCache>>,
    /// This load's number, part of its cache keys.
    load: u64,
    limits: Limits,
}

/// Numbers every model load of the process.
static LOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl std::fmt::Debug for ModelHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ModelHandle({} v{})", self.policy.name, self.policy.version)
    }
}

impl ModelHandle {
    /// Starts the scheduler, the supervisor and the instances; resolves when every instance
    /// has loaded, or with the first load error.
    pub async fn load(
        engine: &ArbiterHandle,
        policy: ModelPolicy,
        factory: Arc<dyn BackendFactory>,
    ) -> Result<ModelHandle> {
        Self::load_with_clock(engine, policy, factory, Arc::new(SystemClock)).await
    }

    /// `load` on the given clock (tests run the engine's time logic on a `ManualClock`).
    pub async fn load_with_clock(
        engine: &ArbiterHandle,
        policy: ModelPolicy,
        factory: Arc<dyn BackendFactory>,
        clock: SharedClock,
    ) -> Result<ModelHandle> {
        Self::load_with(engine, policy, factory, clock, &Shared::default()).await
    }

    /// `load` with what the engine shares among its models (the response cache, the rate
    /// limiter).
    pub async fn load_shared(
        engine: &ArbiterHandle,
        policy: ModelPolicy,
        factory: Arc<dyn BackendFactory>,
        shared: &Shared,
    ) -> Result<ModelHandle> {
        Self::load_with(engine, policy, factory, Arc::new(SystemClock), shared).await
    }

    async fn load_with(
        engine: &ArbiterHandle,
        policy: ModelPolicy,
        factory: Arc<dyn BackendFactory>,
        clock: SharedClock,
        shared: &Shared,
    ) -> Result<ModelHandle> {
        // Triton caches neither sequences nor decoupled models (the config check refuses both).
        let cacheable = policy.response_cache && policy.sequence().is_none() && !policy.decoupled;
        let cache = shared.cache.clone().filter(|_| cacheable);
        let limits: Limits = match &shared.limiter {
            Some(l) => Some((l.clone(), l.register(&policy.name, &policy.instances)?)),
            None => None,
        };
        let policy = Arc::new(policy);
        let stats = Arc::new(ModelStats::default());
        factory.attach_stats(&stats);
        let figures = Arc::new(ModelFigures::new(policy.instances.len()));
        let (p, s, f) = (policy.clone(), stats.clone(), figures.clone());
        let scheduler = SchedulerAddr::start(engine, p, s, f, clock.clone(), factory.decoupled_batches());
        let (tx, rx) = oneshot::channel();
        let (p, s, f, sch, c) = (policy.clone(), stats.clone(), figures.clone(), scheduler.clone(), clock.clone());
        let l = limits.clone();
        let supervisor =
            Supervisor::start_in_arbiter(engine, move |_| Supervisor::new(p, s, f, factory, sch, tx, c, l));
        let ordered =
            matches!(&policy.scheduler, SchedulerPolicy::Dynamic(d) if d.preserve_ordering) && !policy.decoupled;
        let order = ordered.then(|| Arc::new(ReplyGate::default()));
        let handle = ModelHandle {
            policy,
            stats,
            figures,
            scheduler,
            supervisor,
            order,
            clock,
            cache,
            load: LOADS.fetch_add(1, Relaxed),
            limits,
        };
        match rx.await {
            Ok(Ok(())) => Ok(handle),
            Ok(Err(e)) => {
                handle.unload().await;
                Err(e)
            }
            Err(_) => Err(Error::internal("the model supervisor stopped while loading")),
        }
    }

    /// True when the model's answers go to the response cache.
    pub fn caches(&self) -> bool {
        self.cache.is_some()
    }

    /// True while at least one instance is alive.
    pub fn is_ready(&self) -> bool {
        self.figures.live_instances() > 0 && self.scheduler.enqueue.connected()
    }

    /// Validates and queues a request; its answer comes on `reply`. An error here means the
    /// request was not queued (and `reply` was dropped unanswered).
    pub fn submit(&self, request: InferRequest, reply: Reply) -> Result<()> {
        self.submit_with(request, reply, false)
    }

    /// `submit`, for a caller that awaits the answer at once (a frontend's unary request): a
    /// lone request that finds an instance free, nothing queued and a backend that allows it
    /// runs on this thread, answered before this returns (`lane::Claim`), instead of waking
    /// the instance's thread for it and this one again for the answer.
    pub fn submit_here(&self, request: InferRequest, reply: Reply) -> Result<()> {
        self.submit_with(request, reply, true)
    }

    fn submit_with(&self, mut request: InferRequest, reply: Reply, inline: bool) -> Result<()> {
        // A request that fails validation never reaches the model: Triton counts it in no
        // statistic and no failure reason.
        validate_request(&self.policy, &mut request)?;
        // Where Triton's queue time starts (the scheduler's enqueue).
        let queued = Instant::now();
        let reply = match &self.order {
            Some(gate) => Reply::ordered(gate, reply),
            None => reply,
        };
        let batch_size = request.batch_size(self.policy.batches());
        let received = request.received;
        if let Some(trace) = &request.trace {
            trace.record(crate::trace::QUEUE_START);
        }
        let mut miss = None;
        if let Some(cache) = &self.cache {
            let start = Instant::now();
            let key = CacheKey::of(self.load, &self.policy, &request);
            let found = cache.lookup(key);
            let lookup = start.elapsed();
            match found {
                Some(outputs) => {
                    // A hit never reaches the scheduler: answered here, counted as a success
                    // with no inference, execution or compute time (as Triton counts it).
                    self.stats.record_cache_hit(received.elapsed(), start - queued, lookup);
                    let policy = &self.policy;
                    let mut response =
                        crate::backend::response(&request.id, &policy.name, policy.version, outputs, true);
                    response.times = Some(crate::stats::ComputeTimes::default());
                    reply.send(Ok(response));
                    return Ok(());
                }
                None => miss = Some(CacheMiss { cache: cache.clone(), key, lookup }),
            }
        }
        let pending = Pending { request, reply, enqueued: self.clock.now(), batch_size, sequence: None, cache: miss };
        self.stats.pending.fetch_add(1, Relaxed);
        self.figures.submitted();
        // Nothing queued and an instance free: straight to it, on this thread (the lane).
        let mut route = self.scheduler.lane.route(pending, inline);
        while let Route::Inline(claim, pending) = route {
            match claim.run(pending) {
                None => return Ok(()),
                // The instance ended meanwhile (no longer free): the request goes on elsewhere.
                Some(pending) => route = self.scheduler.lane.route(pending, inline),
            }
        }
        let pending = match route {
            Route::Direct { instance, items, waited } => {
                self.figures.scheduler.direct(items, waited, instance);
                return Ok(());
            }
            Route::Inline(..) => unreachable!("run above"),
            Route::Scheduler(pending) => pending,
            // In the sequence batcher, or in the batcher behind busy instances: an instance or
            // the scheduler actor takes it on.
            Route::Queued => {
                self.figures.scheduler.handled();
                return Ok(());
            }
            Route::Refused(refused) => {
                self.figures.scheduler.handled();
                let (pending, e) = *refused;
                pending.fail(&self.stats, e);
                return Ok(());
            }
        };
        if self.scheduler.enqueue.try_send(Enqueue(pending)).is_err() {
            self.scheduler.lane.unsent();
            self.figures.unsubmitted();
            self.stats.pending.fetch_sub(1, Relaxed);
            self.stats.record_failure(received.elapsed(), FailureReason::Rejected);
            return Err(Error::unavailable(format!(
                "model '{}' version {} cannot take requests now (queue full or unloading)",
                self.policy.name, self.policy.version
            )));
        }
        Ok(())
    }

    /// Runs one request and waits for its single response.
    pub async fn infer(&self, request: InferRequest) -> Result<InferResponse> {
        let (reply, rx) = Reply::once();
        self.submit_here(request, reply)?;
        rx.await.map_err(|_| Error::internal(format!("model '{}' dropped the request", self.policy.name)))?
    }

    /// The sequence actor's live conversations, asked of it with one message that it answers
    /// between batches; unavailable if no answer comes `within` (its mailbox full of requests).
    pub async fn conversations(&self, within: Duration) -> Result<Vec<Conversation>> {
        let (name, version) = (&self.policy.name, self.policy.version);
        let Some(actor) = &self.scheduler.conversations else {
            return Err(Error::invalid(format!(
                "model '{name}' version {version} has no sequence batcher: it holds no conversations"
            )));
        };
        match tokio::time::timeout(within, actor.send(Conversations)).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(_)) => {
                Err(Error::unavailable(format!("the sequence actor of model '{name}' version {version} stopped")))
            }
            Err(_) => Err(Error::unavailable(format!(
                "the sequence actor of model '{name}' version {version} did not answer within {} ms",
                within.as_millis()
            ))),
        }
    }

    /// Stops taking restarts, lets queued and running requests finish, stops the instances.
    pub async fn unload(&self) {
        let (tx, rx) = oneshot::channel();
        if self.supervisor.try_send(Stop(tx)).is_ok() {
            let _ = rx.await;
        }
        if let Some((limiter, ids)) = &self.limits {
            limiter.unregister(ids);
        }
    }
}
