//! The model supervisor: starts a model version's instances from its instance group, restarts
//! one that failed or panicked, reports readiness, and drains the model on unload.

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, AsyncContext, Context, Handler, Message};
use tokio::sync::oneshot;

use crate::backend::BackendFactory;
use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::exit::InstanceExit;
use crate::figures::ModelFigures;
use crate::instance::InstanceActor;
use crate::limiter::Limits;
use crate::policy::ModelPolicy;
use crate::protocol::{Drain, InstanceDown, InstanceExited, InstanceMsg, InstanceReady, InstanceUp, Stop};
use crate::scheduler::SchedulerAddr;
use crate::stats::ModelStats;

/// The longest wait between two restarts of a failing instance.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

struct Member {
    generation: u64,
    alive: bool,
    /// Consecutive failed starts, for the restart backoff.
    failed_starts: u32,
}

pub struct Supervisor {
    policy: Arc<ModelPolicy>,
    stats: Arc<ModelStats>,
    figures: Arc<ModelFigures>,
    factory: Arc<dyn BackendFactory>,
    scheduler: SchedulerAddr,
    members: Vec<Member>,
    /// Answered once every instance has loaded, or the first one failed to.
    loading: Option<oneshot::Sender<Result<()>>>,
    stopping: bool,
    /// For the restart backoff.
    clock: SharedClock,
    /// The rate limiter and each instance's member id in it.
    limits: Limits,
}

impl Supervisor {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        policy: Arc<ModelPolicy>,
        stats: Arc<ModelStats>,
        figures: Arc<ModelFigures>,
        factory: Arc<dyn BackendFactory>,
        scheduler: SchedulerAddr,
        loading: oneshot::Sender<Result<()>>,
        clock: SharedClock,
        limits: Limits,
    ) -> Self {
        let members =
            (0..policy.instances.len()).map(|_| Member { generation: 0, alive: false, failed_starts: 0 }).collect();
        Supervisor {
            policy,
            stats,
            figures,
            factory,
            scheduler,
            members,
            loading: Some(loading),
            stopping: false,
            clock,
            limits,
        }
    }

    fn start_instance(&mut self, index: usize, ctx: &mut Context<Self>) {
        let member = &mut self.members[index];
        member.generation += 1;
        InstanceActor {
            spec: self.policy.instances[index].clone(),
            generation: member.generation,
            policy: self.policy.clone(),
            stats: self.stats.clone(),
            figures: self.figures.clone(),
            factory: self.factory.clone(),
            idle: self.scheduler.idle.clone(),
            lane: self.scheduler.lane.clone(),
            ready: ctx.address().recipient(),
            exited: ctx.address().recipient(),
            limiter: self.limits.as_ref().map(|(l, ids)| (l.clone(), ids[index])),
        }
        .spawn();
    }

    fn stop_all(&mut self) {
        self.stopping = true;
        for (index, m) in self.members.iter_mut().enumerate() {
            m.alive = false;
            self.figures.supervisor.alive(index, false);
            self.scheduler.down.do_send(InstanceDown { index, generation: m.generation, permanent: true });
        }
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.members.is_empty() {
            if let Some(tx) = self.loading.take() {
                let _ = tx.send(Err(Error::invalid(format!("model '{}' has no instances", self.policy.name))));
            }
            return;
        }
        for i in 0..self.members.len() {
            self.start_instance(i, ctx);
        }
    }
}

impl Handler<InstanceReady> for Supervisor {
    type Result = ();
    fn handle(&mut self, m: InstanceReady, _ctx: &mut Context<Self>) {
        let member = &mut self.members[m.index];
        if self.stopping || member.generation != m.generation {
            let _ = m.mailbox.send(InstanceMsg::Shutdown);
            return;
        }
        member.alive = true;
        member.failed_starts = 0;
        // The load is answered by the scheduler once it has the last instance on its lane, so
        // the first request after the load takes the lane, not the scheduler's mailbox.
        let loaded = if self.members.iter().all(|m| m.alive) { self.loading.take() } else { None };
        // The scheduler hears first: whoever sees the figure after this finds the instance's
        // InstanceUp already ahead of its own requests in the scheduler's mailbox.
        self.scheduler.up.do_send(InstanceUp {
            index: m.index,
            generation: m.generation,
            mailbox: m.mailbox,
            inline: m.inline,
            loaded,
        });
        self.figures.supervisor.alive(m.index, true);
    }
}

impl Handler<InstanceExited> for Supervisor {
    type Result = ();
    fn handle(&mut self, m: InstanceExited, ctx: &mut Context<Self>) {
        if self.members[m.index].generation != m.generation || self.stopping || m.exit == InstanceExit::Stopped {
            return;
        }
        if let Some(tx) = self.loading.take() {
            // A model that cannot load all its instances does not become ready; the load
            // answers with the instance's own error.
            tracing::error!(model = %self.policy.name, "instance {} failed to load: {}", m.index, m.exit);
            let _ = tx.send(Err(m.exit.into_error()));
            self.stop_all();
            return;
        }
        let member = &mut self.members[m.index];
        member.alive = false;
        member.failed_starts += 1;
        let backoff = Duration::from_millis(50u64 << member.failed_starts.min(8).saturating_sub(1)).min(MAX_BACKOFF);
        tracing::warn!(model = %self.policy.name, version = self.policy.version,
            "instance {} failed ({}); restarting", self.policy.instances[m.index].name, m.exit);
        self.scheduler.down.do_send(InstanceDown { index: m.index, generation: m.generation, permanent: false });
        let index = m.index;
        let addr = ctx.address();
        self.clock.at(self.clock.now() + backoff, Box::new(move || addr.do_send(Restart(index))));
        // The figures last: whoever sees the restart counted finds its backoff already timed
        // from the failure (a test advancing a manual clock on seeing it must not arm it later).
        self.figures.supervisor.alive(m.index, false);
        self.figures.supervisor.restarted(m.index, m.exit.cause());
    }
}

impl Handler<Stop> for Supervisor {
    type Result = ();
    fn handle(&mut self, Stop(done): Stop, ctx: &mut Context<Self>) {
        self.stopping = true;
        for (index, m) in self.members.iter_mut().enumerate() {
            m.alive = false;
            self.figures.supervisor.alive(index, false);
        }
        self.scheduler.drain.do_send(Drain(done));
        actix::ActorContext::stop(ctx);
    }
}

/// The backoff before restarting an instance is over.
#[derive(Message)]
#[rtype(result = "()")]
struct Restart(usize);

impl Handler<Restart> for Supervisor {
    type Result = ();
    fn handle(&mut self, Restart(index): Restart, ctx: &mut Context<Self>) {
        if !self.stopping {
            self.start_instance(index, ctx);
        }
    }
}
