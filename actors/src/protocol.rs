//! The engine's protocol: every message that crosses from one actor to another, and the
//! request as it travels between them (`Pending`). Each actor imports this module, not the
//! other actors: the scheduler (with its batcher or sequence batcher), the instances and the
//! supervisor know the protocol, not each other.
//!
//! Who sends what:
//!
//! ```text
//! ModelHandle --Enqueue--> scheduler --InstanceMsg::Execute--> instance
//! ModelHandle --InstanceMsg::Execute--> instance (the direct lane: nothing queued, one free)
//! ModelHandle runs a lone request on a free instance's backend itself (`lane::Claim`),
//!   then --InstanceMsg::Pull / Exit--> instance when work waits or the instance must end
//! ModelHandle / scheduler --InstanceMsg::Pull--> instance waiting for its batch to grow, when
//!   the batch is ready or the model drains; ModelHandle --Pull--> the idle instance of a
//!   one-instance model, to wait there for a request's company (`lane::waiter`)
//! instance --InstanceIdle (and the requests to run again)--> scheduler (unless it freed
//!   itself in the lane with no work waiting)
//! instance --InstanceReady / InstanceExited--> supervisor
//! supervisor --InstanceUp / InstanceDown / Drain--> scheduler
//! ModelHandle --Stop--> supervisor
//! ModelHandle --Conversations--> sequence actor (a watcher's query, answered between batches)
//! ```

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use actix::Message;
use tokio::sync::oneshot;

use crate::cache::CacheMiss;
use crate::error::{Error, ErrorKind};
use crate::exit::InstanceExit;
use crate::mailbox::Sender;
use crate::request::{InferRequest, Reply};
use crate::sequence::state::SequenceTicket;
use crate::sequence::table::Conversation;
use crate::stats::{FailureReason, ModelStats};

/// A request waiting for, or running in, an execution.
#[derive(Debug)]
pub struct Pending {
    pub request: InferRequest,
    pub reply: Reply,
    pub enqueued: Instant,
    pub batch_size: usize,
    /// For a request of a sequence model: where its implicit state goes.
    pub sequence: Option<SequenceTicket>,
    /// For a request that missed the response cache: where its answer goes.
    pub cache: Option<CacheMiss>,
}

impl Pending {
    /// Answers with an error and counts the failure.
    /// The reason comes from the error's kind: for failures before the backend ran.
    pub(crate) fn fail(self, stats: &ModelStats, error: Error) {
        let reason = match error.kind {
            ErrorKind::Unavailable => FailureReason::Rejected,
            ErrorKind::Cancelled => FailureReason::Canceled,
            ErrorKind::Internal => FailureReason::Backend,
            _ => FailureReason::Other,
        };
        self.fail_as(stats, error, reason)
    }

    /// Answers with an error counted under `reason` (Triton counts every error the backend
    /// reports as BACKEND, whatever its code).
    pub(crate) fn fail_as(self, stats: &ModelStats, error: Error, reason: FailureReason) {
        stats.record_failure(self.request.received.elapsed(), reason);
        stats.pending.fetch_sub(1, Relaxed);
        self.reply.send(Err(error));
    }
}

/// A request a queue could not take, handed back with the reason (boxed: the rare path pays
/// for the move, not every `Ok`).
pub type Refused = Box<(Pending, Error)>;

/// What the batcher says when asked for work.
#[derive(Debug)]
pub enum Next {
    /// Send these requests as one execution now.
    Batch(Vec<Pending>),
    /// A batch could still grow; ask again at this instant.
    WaitUntil(Instant),
    /// Nothing queued.
    Empty,
}

/// The instance actor's mailbox.
pub(crate) enum InstanceMsg {
    Execute(Vec<Pending>),
    /// Take the next batch from the batcher: a lone request ran on the submitter's thread
    /// (`lane::Claim`) and work waits, or the batch the instance waits for is ready
    /// (`lane::waiter`).
    Pull,
    /// A lone request ran on its submitter's thread and the instance cannot go on (its
    /// backend panicked or failed its health check): end so.
    Exit(InstanceExit),
    Shutdown,
}

/// A validated request to queue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Enqueue(pub Pending);

/// An instance finished its batch.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstanceIdle {
    pub index: usize,
    pub generation: u64,
    /// Requests of the batch the backend handed back to run again (iterative sequences),
    /// unanswered: they go back to their sequences.
    pub rescheduled: Vec<Pending>,
    /// Whether the scheduler is to count the instance free: not when it already freed itself
    /// in the lane (`lane::Lane::free_self`; it tells because work waits for it or the model
    /// drains), nor when it is ending (a failed health check: a batch sent to it now would be
    /// lost with its mailbox).
    pub release: bool,
}

/// An instance's backend as the lane lends it to the thread that submitted a lone request
/// (the instance's `InstanceCore`, `instance::inline`): the lane and the messages know it by
/// this, so they need not know the instance.
pub(crate) trait RunHere: Send + Sync {
    /// Whether the recent executions were short enough to run on a submitter's thread.
    fn short(&self) -> bool;
    /// Runs `p` on the calling thread, on the instance `index` the lane gave the caller (its
    /// mailbox is where the instance's thread hears what only it may do next); gives the
    /// request back unrun if the instance ended meanwhile.
    fn run(&self, index: usize, mailbox: &Sender<InstanceMsg>, p: Pending) -> Option<Pending>;
}

/// From the supervisor: an instance (re)started and takes work.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct InstanceUp {
    pub index: usize,
    pub generation: u64,
    pub mailbox: Sender<InstanceMsg>,
    /// Its backend, for a submitter to run a lone request on (`lane::Claim`), if it allows.
    pub inline: Option<Arc<dyn RunHere>>,
    /// The model's load, answered once the scheduler has the instance (the last one up of a
    /// load brings it): a request submitted after the load returns finds the instance on the lane.
    pub loaded: Option<oneshot::Sender<crate::error::Result<()>>>,
}

/// From the supervisor: an instance died; its batch was already answered.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct InstanceDown {
    pub index: usize,
    pub generation: u64,
    /// The supervisor will not restart it (load failure, unload).
    pub permanent: bool,
}

/// Finish queued and running work, stop the instances, then stop; answers when done.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Drain(pub oneshot::Sender<()>);

/// From an instance thread: its backend is loaded and it takes work on `mailbox`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct InstanceReady {
    pub index: usize,
    pub generation: u64,
    pub mailbox: Sender<InstanceMsg>,
    pub inline: Option<Arc<dyn RunHere>>,
}

/// From an instance thread: it ended, and how.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct InstanceExited {
    pub index: usize,
    pub generation: u64,
    pub exit: InstanceExit,
}

/// Unload: no more restarts; the scheduler finishes its work and stops the instances.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Stop(pub oneshot::Sender<()>);

/// From a watcher: the sequence actor's live conversations, as of when it reads the message.
#[derive(Message)]
#[rtype(result = "Vec<Conversation>")]
pub(crate) struct Conversations;

/// From a sequence model's lane (`lane::sequence`): requests wait in the sequence batcher that
/// the scheduler did not see arrive (a batching delay to time, a free instance with work): it
/// takes a turn.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Pump;
