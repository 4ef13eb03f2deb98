//! Protocol-neutral requests and responses, and the channel a response goes back on.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};
use crate::ordering::{OrderGate, Release, Ticket};
use crate::tensor::Tensor;
use crate::trace::Trace;

/// A request or response parameter value (KServe v2 parameters).
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Str(String),
}

pub type Parameters = BTreeMap<String, ParamValue>;

/// A sequence's correlation ID: Triton accepts unsigned integers or strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CorrelationId {
    U64(u64),
    Str(String),
}

impl std::fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorrelationId::U64(v) => write!(f, "{v}"),
            CorrelationId::Str(s) => f.write_str(s),
        }
    }
}

/// The sequence fields of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceFlags {
    pub id: CorrelationId,
    pub start: bool,
    pub end: bool,
}

/// An output the client asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestedOutput {
    pub name: String,
    /// `classification` extension: top-N classes instead of the raw tensor (0 = raw).
    pub class_count: u32,
}

/// One inference request, as every frontend hands it to the engine.
#[derive(Debug, Clone)]
pub struct InferRequest {
    pub id: String,
    pub model: String,
    /// `None` selects the model's latest ready version.
    pub version: Option<i64>,
    pub inputs: Vec<Tensor>,
    /// Empty means "all outputs".
    pub outputs: Vec<RequestedOutput>,
    pub parameters: Parameters,
    pub sequence: Option<SequenceFlags>,
    pub priority: u64,
    pub timeout_us: u64,
    /// When the client stops waiting, where it said (a gRPC deadline). Unlike `timeout_us` it
    /// does not time the request out in the queue; a runtime that can stop a run cheaply stops
    /// one still running for the request then.
    pub client_deadline: Option<Instant>,
    pub received: Instant,
    /// Set when the frontend sampled this request for the trace extension.
    pub trace: Option<Arc<Trace>>,
    /// The caller reads the compute times on the answer (`InferResponse::times`: an ensemble's
    /// step): the engine answers it once its backend has reported them, never early (see
    /// `Backend::answers_early`).
    pub wants_times: bool,
}

impl InferRequest {
    pub fn new(model: impl Into<String>, inputs: Vec<Tensor>) -> Self {
        InferRequest {
            id: String::new(),
            model: model.into(),
            version: None,
            inputs,
            outputs: Vec::new(),
            parameters: Parameters::new(),
            sequence: None,
            priority: 0,
            timeout_us: 0,
            client_deadline: None,
            received: Instant::now(),
            trace: None,
            wants_times: false,
        }
    }

    /// The batch size this request contributes: its first dim when the model batches, else 1.
    pub fn batch_size(&self, model_batches: bool) -> usize {
        if !model_batches {
            return 1;
        }
        self.inputs.first().and_then(|t| t.shape.first()).map(|&d| d.max(0) as usize).unwrap_or(1)
    }

    pub fn input(&self, name: &str) -> Option<&Tensor> {
        self.inputs.iter().find(|t| t.name == name)
    }
}

/// One response. A decoupled model may send several for one request; the last has `is_final`.
#[derive(Debug, Clone)]
pub struct InferResponse {
    pub id: String,
    pub model: String,
    pub version: i64,
    pub outputs: Vec<Tensor>,
    pub parameters: Parameters,
    pub is_final: bool,
    /// How the engine spent the request's time (set on the answer of a non-decoupled model),
    /// for an ensemble to report its steps' times as Triton does.
    pub times: Option<crate::stats::ComputeTimes>,
}

/// Builds a response for one request from its outputs (used by the instance actor).
pub(crate) fn response(id: &str, model: &str, version: i64, outputs: Vec<Tensor>, is_final: bool) -> InferResponse {
    InferResponse {
        id: id.to_string(),
        model: model.to_string(),
        version,
        outputs,
        parameters: Default::default(),
        is_final,
        times: None,
    }
}

/// Where the engine sends a request's response(s).
pub enum Reply {
    /// Exactly one response or error.
    Once(oneshot::Sender<Result<InferResponse>>),
    /// Any number of responses; the stream ends with a response whose `is_final` is set,
    /// or with an error.
    Stream(mpsc::UnboundedSender<Result<InferResponse>>),
    /// One answer, released in the model's acceptance order (`preserve_ordering`).
    Ordered(OrderedReply),
    /// Each answer handed to a function on the thread that answers, the last with `is_final`
    /// set, or an error: for a caller that takes its answers by callback (the in-process API a
    /// backend calls; Triton too calls a backend's response callback on the thread that
    /// completes the response). The function must be quick: an instance waits for it.
    Call(Box<dyn Fn(Result<InferResponse>) + Send + Sync>),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reply::Once(_) => "Reply::Once",
            Reply::Stream(_) => "Reply::Stream",
            Reply::Ordered(_) => "Reply::Ordered",
            Reply::Call(_) => "Reply::Call",
        })
    }
}

impl Reply {
    pub fn once() -> (Reply, oneshot::Receiver<Result<InferResponse>>) {
        let (tx, rx) = oneshot::channel();
        (Reply::Once(tx), rx)
    }

    /// Wraps `reply` with the next place in `gate`'s order (call in acceptance order).
    pub fn ordered(gate: &Arc<ReplyGate>, reply: Reply) -> Reply {
        Reply::Ordered(OrderedReply { ticket: gate.ticket(), inner: Box::new(reply) })
    }

    /// True when the client has gone: nobody will read the answer.
    pub fn is_closed(&self) -> bool {
        match self {
            Reply::Once(tx) => tx.is_closed(),
            Reply::Stream(tx) => tx.is_closed(),
            Reply::Ordered(o) => o.inner.is_closed(),
            // The caller takes every answer until the last.
            Reply::Call(_) => false,
        }
    }

    /// Arranges for `waker` to be woken from the thread where the client goes (its receiver
    /// dropped: a cancelled or disconnected call), at once if it has gone already. A stream's
    /// watch lasts while the returned value lives; a oneshot's until the answer is sent.
    pub fn watch_closed(&mut self, waker: &Waker) -> CloseWatch {
        let mut cx = Context::from_waker(waker);
        match self {
            Reply::Once(tx) => {
                if tx.poll_closed(&mut cx).is_ready() {
                    waker.wake_by_ref();
                }
                CloseWatch(None)
            }
            Reply::Stream(tx) => {
                let tx = tx.clone();
                let mut closed: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move { tx.closed().await });
                if closed.as_mut().poll(&mut cx).is_ready() {
                    waker.wake_by_ref();
                    return CloseWatch(None);
                }
                CloseWatch(Some(closed))
            }
            Reply::Ordered(o) => o.inner.watch_closed(waker),
            Reply::Call(_) => CloseWatch(None),
        }
    }

    /// Sends the final answer, consuming the reply.
    pub fn send(self, result: Result<InferResponse>) {
        match self {
            Reply::Once(tx) => {
                let _ = tx.send(result);
            }
            Reply::Stream(tx) => {
                let _ = tx.send(result);
            }
            Reply::Ordered(o) => o.ticket.complete(Answer(*o.inner, result)),
            Reply::Call(f) => f(result),
        }
    }

    /// Sends a non-final response of a decoupled model. A oneshot reply cannot take one.
    pub fn send_partial(&self, response: InferResponse) -> Result<()> {
        match self {
            Reply::Once(_) => Err(Error::unsupported(
                "this endpoint accepts one response per request; use a stream for decoupled models",
            )),
            Reply::Stream(tx) => tx.send(Ok(response)).map_err(|_| Error::cancelled("the client closed the stream")),
            Reply::Ordered(_) => Err(Error::unsupported("preserve_ordering does not apply to decoupled responses")),
            Reply::Call(f) => {
                f(Ok(response));
                Ok(())
            }
        }
    }
}

/// What keeps a [`Reply::watch_closed`] registered; dropping it ends the watch.
#[must_use = "dropping the watch ends it"]
pub struct CloseWatch(#[allow(dead_code)] Option<Pin<Box<dyn Future<Output = ()> + Send>>>);

/// The ordering gate of a model's replies (`preserve_ordering`).
pub type ReplyGate = OrderGate<Answer>;

/// A reply that waits for its turn in its model's order.
pub struct OrderedReply {
    ticket: Ticket<Answer>,
    inner: Box<Reply>,
}

/// An answer held by the ordering gate until every earlier one has gone.
pub struct Answer(Reply, Result<InferResponse>);

impl Release for Answer {
    fn release(self) {
        self.0.send(self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(id: &str) -> Result<InferResponse> {
        Ok(InferResponse {
            id: id.into(),
            model: "m".into(),
            version: 1,
            outputs: vec![],
            parameters: Default::default(),
            is_final: true,
            times: None,
        })
    }

    /// A waker that counts its wakes.
    struct Count(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(Default::default()));
        (count.clone(), Waker::from(count))
    }

    fn wakes(c: &Count) -> usize {
        c.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn a_watched_reply_wakes_when_its_client_goes_and_not_when_answered() {
        let (count, waker) = counter();
        let (mut once, rx) = Reply::once();
        let _watch = once.watch_closed(&waker);
        assert_eq!(wakes(&count), 0);
        drop(rx);
        assert_eq!(wakes(&count), 1, "a oneshot's receiver dropped");

        let (count, waker) = counter();
        let (tx, rx) = mpsc::unbounded_channel();
        let mut stream = Reply::Ordered(OrderedReply {
            ticket: Arc::new(ReplyGate::default()).ticket(),
            inner: Box::new(Reply::Stream(tx)),
        });
        let watch = stream.watch_closed(&waker);
        drop(rx);
        assert_eq!(wakes(&count), 1, "a stream's receiver dropped, behind an ordering gate");
        drop(watch);

        let (count, waker) = counter();
        let (mut once, mut rx) = Reply::once();
        let _watch = once.watch_closed(&waker);
        once.send(answer("a"));
        assert!(rx.try_recv().is_ok());
        drop(rx);
        assert_eq!(wakes(&count), 0, "an answered request's client is not gone");

        let (count, waker) = counter();
        let (tx, rx) = mpsc::unbounded_channel::<Result<InferResponse>>();
        drop(rx);
        let _watch = Reply::Stream(tx).watch_closed(&waker);
        assert_eq!(wakes(&count), 1, "gone before the watch began");
    }

    #[test]
    fn ordered_replies_answer_in_acceptance_order_and_a_dropped_one_closes() {
        let gate = Arc::new(ReplyGate::default());
        let (r0, mut rx0) = Reply::once();
        let (r1, mut rx1) = Reply::once();
        let (r2, mut rx2) = Reply::once();
        let (o0, o1, o2) = (Reply::ordered(&gate, r0), Reply::ordered(&gate, r1), Reply::ordered(&gate, r2));
        assert!(!o0.is_closed());
        o2.send(answer("2"));
        o1.send(Err(Error::invalid("bad")));
        assert!(rx1.try_recv().is_err() && rx2.try_recv().is_err(), "held behind the first");
        drop(o0);
        assert!(rx0.try_recv().is_err(), "a dropped reply closes its channel");
        assert!(rx1.try_recv().unwrap().is_err());
        assert_eq!(rx2.try_recv().unwrap().unwrap().id, "2");
        assert_eq!(gate.held(), 0);
    }
}
