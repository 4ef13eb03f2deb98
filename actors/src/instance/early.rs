//! Answers a backend gives before its `execute` returns, as Triton answers a request from inside
//! `TRITONBACKEND_ResponseSend` when the response carries `TRITONSERVER_RESPONSE_COMPLETE_FINAL`
//! (Triton's Python backend still does one more round trip with its stub after that). The
//! instance lends the backend one [`EarlyReply`](crate::backend::EarlyReply) per request it may answer so
//! ([`Backend::answers_early`](crate::backend::Backend::answers_early)): the request's reply
//! moves into a slot the backend's thread can answer from. What the engine counts of the
//! request (its statistics, the backend's own times) waits until `execute` returns, as Triton's
//! backend reports its statistics after the response; the instance is free for its next batch
//! only then. Until then the model's statistics count the request as answered early, and a
//! reader of them waits for it ([`ModelStats::settled`]), so a client that has its answer still
//! sees statistics that include it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::backend::{AnswerEarly, EarlyReply};
use crate::error::Result;
use crate::protocol::Pending;
use crate::request::{response, InferRequest};
use crate::stats::ModelStats;
use crate::tensor::Tensor;
use crate::trace;

/// Whether a request may be answered before `execute` returns: not when the engine must see
/// its outputs first (a sequence's implicit state, a response cache's entry) or its caller reads
/// the compute times the backend reports after the answer (an ensemble's step).
pub(crate) fn eligible(p: &Pending) -> bool {
    p.sequence.is_none() && p.cache.is_none() && !p.request.wants_times
}

/// A request answered early: what the instance still needs to count it.
#[derive(Debug)]
pub(crate) struct Answered {
    pub request: InferRequest,
    pub enqueued: Instant,
    pub batch_size: usize,
    /// When the answer went out.
    pub at: Instant,
    /// Whether it was answered with outputs (else with an error).
    pub ok: bool,
}

/// Where a request is while its batch runs.
enum Slot {
    /// Unanswered: its reply waits here.
    Waiting(Pending),
    Answered(Answered),
    /// The instance took it back when `execute` returned: a later answer goes nowhere.
    Closed,
}

struct Shared {
    slot: Mutex<Slot>,
    stats: Arc<ModelStats>,
    /// The model's name and version, for the response.
    model: Arc<str>,
    version: i64,
    /// The only request of its batch with nothing else waiting for the instance: the backend's
    /// thread gives its core up after answering.
    yields: bool,
}

/// A request's reply lent to the backend while its batch runs: `answer` sends the request's
/// final response from the backend's thread (handed to the backend as an `EarlyReply`).
#[derive(Clone)]
pub(crate) struct Lent(Arc<Shared>);

impl Lent {
    pub(crate) fn new(p: Pending, stats: &Arc<ModelStats>, model: &Arc<str>, version: i64, yields: bool) -> Self {
        let slot = Mutex::new(Slot::Waiting(p));
        Lent(Arc::new(Shared { slot, stats: stats.clone(), model: model.clone(), version, yields }))
    }

    /// What the backend is handed.
    fn reply(&self) -> EarlyReply {
        self.0.clone()
    }

    /// The instance takes the request back once `execute` returned: unanswered (its reply
    /// again), or answered early. Later answers go nowhere.
    pub(crate) fn close(&self) -> Closed {
        let mut slot = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *slot, Slot::Closed) {
            Slot::Waiting(p) => Closed::Waiting(p),
            Slot::Answered(a) => Closed::Answered(a),
            Slot::Closed => Closed::Gone,
        }
    }
}

impl AnswerEarly for Shared {
    fn answer(&self, outcome: Result<Vec<Tensor>>) -> bool {
        // Held until the answer is out and recorded: the instance, taking the request back
        // meanwhile (a batch that gave up on it), finds it either waiting or answered.
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        let p = match std::mem::replace(&mut *slot, Slot::Closed) {
            Slot::Waiting(p) => p,
            other => {
                *slot = other;
                return false;
            }
        };
        let Pending { request, reply, enqueued, batch_size, .. } = p;
        let now = Instant::now();
        if let Some(t) = &request.trace {
            t.record_at(trace::COMPUTE_OUTPUT_START, now);
            t.record_at(trace::COMPUTE_END, now);
        }
        let ok = outcome.is_ok();
        let answer = outcome.map(|outputs| {
            let outputs = if request.outputs.is_empty() {
                outputs
            } else {
                outputs.into_iter().filter(|t| request.outputs.iter().any(|o| o.name == t.name)).collect()
            };
            response(&request.id, &self.model, self.version, outputs, true)
        });
        let stats = &self.stats;
        stats.answered_early();
        stats.responses.first.record_us(request.received.elapsed());
        *slot = Slot::Answered(Answered { request, enqueued, batch_size, at: now, ok });
        reply.send(answer);
        drop(slot);
        // Whoever takes the answer was just woken (a frontend's connection thread, or a BLS
        // caller's thread through its callback), and the backend goes on with its own work
        // when this returns (Triton's Python backend: one more round trip with its stub). The
        // kernel places a woken thread beside its waker, so where both share a core the answer
        // waited until the backend's thread slept: 20-25 µs a request at c1
        // (loadtests/PROFILES.md, "Python backend at c1: the answer's way out"). Giving the core
        // up once lets it go first, as Triton writes the answer before its backend goes on;
        // with nobody waiting for the core this returns at once. Only for a batch of one with
        // nothing queued behind it: in a larger batch the backend answers the batch's next
        // request next, and with requests waiting (add_sub at c16 without batching) the other
        // runnable threads (the clients', the frontend's) took the core for a whole slice at
        // each yield, while the backend and its stub, the one serial chain every request
        // waits for, stood still (loadtests/PROFILES.md, "add_sub HTTP c16").
        if self.yields {
            std::thread::yield_now();
        }
        true
    }
}

/// A request of the batch after `execute` returned.
pub(crate) enum Closed {
    Waiting(Pending),
    Answered(Answered),
    /// Taken twice: cannot happen (each slot is closed once).
    Gone,
}

/// A request of a batch while it runs: kept by the instance, or its reply lent to the backend.
/// Unboxed: a batch holds as many as it has requests, and a box would cost each one an
/// allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Held {
    Kept(Pending),
    Lent(Lent),
}

/// Lends the backend the replies of the batch's requests that it may answer early; the
/// second vector is `BatchInput::early`. `waiting`: whether other requests wait for the model's
/// instances (then the backend's thread keeps its core after an answer).
pub(crate) fn lend(
    batch: Vec<Pending>,
    stats: &Arc<ModelStats>,
    model: &str,
    version: i64,
    waiting: bool,
) -> (Vec<Held>, Vec<Option<EarlyReply>>) {
    let model: Arc<str> = Arc::from(model);
    let yields = batch.len() == 1 && !waiting;
    batch
        .into_iter()
        .map(|p| {
            if eligible(&p) {
                let lent = Lent::new(p, stats, &model, version, yields);
                let reply = lent.reply();
                (Held::Lent(lent), Some(reply))
            } else {
                (Held::Kept(p), None)
            }
        })
        .unzip()
}

/// Requests of a batch, each with its index in the batch.
pub(crate) type Indexed<T> = Vec<(usize, T)>;

/// Once `execute` returned: the batch's requests still to answer and those answered early, each
/// with its index in the batch.
pub(crate) fn take_back(held: Vec<Held>) -> (Indexed<Pending>, Indexed<Answered>) {
    let mut waiting = Vec::with_capacity(held.len());
    let mut answered = Vec::new();
    for (i, h) in held.into_iter().enumerate() {
        match h {
            Held::Kept(p) => waiting.push((i, p)),
            Held::Lent(early) => match early.close() {
                Closed::Waiting(p) => waiting.push((i, p)),
                Closed::Answered(a) => answered.push((i, a)),
                Closed::Gone => {}
            },
        }
    }
    (waiting, answered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Reply;

    fn pending(stats: &ModelStats) -> (Pending, tokio::sync::oneshot::Receiver<Result<crate::InferResponse>>) {
        let (reply, rx) = Reply::once();
        let mut request = InferRequest::new("m", vec![]);
        request.outputs = vec![crate::request::RequestedOutput { name: "B".into(), class_count: 0 }];
        stats.pending.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (Pending { request, reply, enqueued: Instant::now(), batch_size: 1, sequence: None, cache: None }, rx)
    }

    fn tensor(name: &str) -> Tensor {
        Tensor::new(name.to_string(), crate::DataType::F32, vec![1], bytes::Bytes::from(vec![0u8; 4]))
    }

    #[test]
    fn an_early_answer_goes_out_at_once_with_the_outputs_asked_for_and_only_once() {
        let stats = Arc::new(ModelStats::default());
        let (p, mut rx) = pending(&stats);
        let early = Lent::new(p, &stats, &Arc::from("m"), 1, true);
        assert!(early.reply().answer(Ok(vec![tensor("A"), tensor("B")])));
        let answer = rx.try_recv().expect("answered at once").expect("an answer, not an error");
        assert_eq!(answer.outputs.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["B"]);
        assert!(answer.is_final);
        assert!(!early.reply().answer(Ok(vec![])), "a second answer goes nowhere");
        match early.close() {
            Closed::Answered(a) => assert!(a.ok),
            _ => panic!("the instance finds the request answered"),
        }
        assert!(matches!(early.close(), Closed::Gone));
    }

    #[test]
    fn an_unanswered_request_comes_back_with_its_reply_and_a_late_answer_goes_nowhere() {
        let stats = Arc::new(ModelStats::default());
        let (p, mut rx) = pending(&stats);
        let early = Lent::new(p, &stats, &Arc::from("m"), 1, true);
        let Closed::Waiting(p) = early.close() else { panic!("the request is still waiting") };
        assert!(!early.reply().answer(Ok(vec![tensor("B")])), "its batch is over");
        assert!(rx.try_recv().is_err(), "nothing went out");
        p.reply.send(Err(crate::Error::internal("x")));
        assert!(rx.try_recv().unwrap().is_err());
    }
}
