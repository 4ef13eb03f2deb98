//! `ModelStreamInfer`: many requests on one bidirectional stream, each answered (matched by `id`)
//! as soon as it is done, with one rule of order: the answers of one sequence (one model's
//! correlation ID) are written in the order its requests arrived, which is the order the engine
//! runs them, and all responses of one decoupled request in the order the engine produced them.
//! Requests of different sequences, and requests outside any sequence, never wait for each other.
//! A failed request answers with `error_message` and the stream lives on. Flow control: at most
//! `MAX_IN_FLIGHT` requests of a stream are in the engine or have a last answer the writer has not
//! taken yet, so a client that stops reading stops the server from taking more of its requests
//! instead of making it buffer without bound. A request's place is given back when the writer
//! takes its last answer, not when the answer is queued: the answer buffer holds as many answers
//! as there are places, so a request that answers once never waits to queue its answer (with
//! thousands of turns in flight, parked senders were most of what a turn's cost grew by). Only a
//! decoupled model's answers before the last may fill it and wait. A closed stream drops its
//! queued requests (the engine sees their replies closed).

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tonic::{Status, Streaming};
use tracing::Instrument as _;
use tritium_actors::{ParamValue, Reply};

use super::lanes::{Lanes, Turn};
use super::tensors::{decode, encode, Decoded};
use crate::frontends::request_log::request_span;
use crate::observe::trace::{ActiveTrace, RemoteParent};
use crate::proto::inference::{ModelInferRequest, ModelStreamInferResponse};
use crate::server::Server;

/// Requests of one stream that may be in the engine, or answered and not yet written, at once.
pub const MAX_IN_FLIGHT: usize = 256;
/// Answers buffered for the writer: one per place, so a last answer always finds room.
const OUT_BUFFER: usize = MAX_IN_FLIGHT;

/// An answer on its way to the writer, with its request's place under `MAX_IN_FLIGHT` when it is
/// the request's last: the place is given back as the writer takes it.
type Outgoing = (Result<ModelStreamInferResponse, Status>, Option<OwnedSemaphorePermit>);

pub type ResponseStream = Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

fn error_response(message: String) -> ModelStreamInferResponse {
    ModelStreamInferResponse { error_message: message, infer_response: None }
}

/// Serves one stream; `forwarded` (the stream's forwarded headers) joins each request's
/// parameters.
pub fn start(
    server: Arc<Server>,
    mut incoming: Streaming<ModelInferRequest>,
    forwarded: tritium_actors::Parameters,
    parent: Option<RemoteParent>,
) -> ResponseStream {
    let (out_tx, out_rx) = mpsc::channel::<Outgoing>(OUT_BUFFER);
    tokio::spawn(async move {
        let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let lanes = Lanes::default();
        loop {
            let permit = tokio::select! {
                p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
                _ = out_tx.closed() => break,
            };
            let message = tokio::select! {
                m = incoming.message() => m,
                _ = out_tx.closed() => break,
            };
            let request = match message {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(status) if status.code() == tonic::Code::Cancelled => {
                    tracing::debug!("stream closed by the client: {status}");
                    break;
                }
                Err(status) => {
                    // A message the server refuses to read (over the size limit, say) ends the
                    // stream with that status, as gRPC core ends Triton's.
                    tracing::debug!("stream ended: {status}");
                    let _ = out_tx.send((Err(status), None)).await;
                    break;
                }
            };
            // Submitted here, in arrival order, so a sequence's requests reach the engine in the
            // order the client sent them; the answers are awaited concurrently, and a sequence's
            // turn in its lane (taken here, in the same order) keeps its answers in that order.
            match submit(&server, request, &forwarded, parent.as_ref(), &lanes) {
                (Outcome::Failed(message), None) => {
                    // Outside any sequence: nothing to keep in order, answered at once.
                    let _ = out_tx.send((Ok(error_response(message)), Some(permit))).await;
                }
                (mut outcome, mut turn) => {
                    let out = out_tx.clone();
                    let span = match &mut outcome {
                        Outcome::Running(running) => running.span.take(),
                        Outcome::Failed(_) => None,
                    };
                    let mut permit = Some(permit);
                    let task = async move {
                        if let Some(turn) = &mut turn {
                            tokio::select! {
                                _ = turn.wait() => {}
                                _ = out.closed() => return,
                            }
                        }
                        match outcome {
                            Outcome::Running(running) => forward(*running, &out, &mut permit).await,
                            Outcome::Failed(message) => {
                                let _ = out.send((Ok(error_response(message)), permit.take())).await;
                            }
                        }
                        // The next turn of the sequence goes only after this one's last answer;
                        // the place goes with that answer, or here if none was queued.
                        drop(turn);
                        drop(permit);
                    };
                    tokio::spawn(task.instrument(span.unwrap_or_else(tracing::Span::none)));
                }
            }
        }
    });
    // Taking an answer gives its request's place back (the permit is dropped here).
    Box::pin(futures::stream::unfold(out_rx, |mut rx| async move { rx.recv().await.map(|(item, _place)| (item, rx)) }))
}

type Answer = tritium_actors::Result<tritium_actors::InferResponse>;

/// Where a submitted request's answers arrive. A model that answers once gets a oneshot (one
/// small allocation); only a decoupled model, which may answer many times, gets an unbounded
/// channel, whose first block holds 32 answers (several KiB): allocated for every request of a
/// deep queue and written by the instance long after, those blocks were most of what grew in
/// a turn's cost with thousands of turns in flight (loadtests/PROFILES.md).
enum Answers {
    /// Taken once answered (a oneshot must not be awaited again).
    Once(Option<oneshot::Receiver<Answer>>),
    Stream(mpsc::UnboundedReceiver<Answer>),
}

impl Answers {
    /// The reply and where its answers arrive, for `model`.
    fn for_model(model: &crate::server::LoadedModel) -> (Reply, Answers) {
        if model.handle.policy.decoupled {
            let (tx, rx) = mpsc::unbounded_channel();
            (Reply::Stream(tx), Answers::Stream(rx))
        } else {
            let (tx, rx) = oneshot::channel();
            (Reply::Once(tx), Answers::Once(Some(rx)))
        }
    }

    /// The next answer; `None` once there are no more (or the engine dropped the request).
    async fn next(&mut self) -> Option<Answer> {
        match self {
            Answers::Stream(rx) => rx.recv().await,
            Answers::Once(slot) => {
                let rx = slot.as_mut()?;
                let answer = rx.await.ok();
                *slot = None;
                answer
            }
        }
    }
}

/// A submitted request whose answers are still to come.
struct Running {
    answers: Answers,
    model: Arc<crate::server::LoadedModel>,
    requested: Vec<tritium_actors::RequestedOutput>,
    shm_outputs: std::collections::HashMap<String, crate::shm::Placement>,
    empty_final: bool,
    /// The request's log span, and its trace (with the client's request id) when sampled.
    span: Option<tracing::Span>,
    trace: Option<(ActiveTrace, String)>,
}

/// What became of a request read off the stream.
enum Outcome {
    /// In the engine; its answers are to come (boxed: the other variant is small).
    Running(Box<Running>),
    /// Refused before it reached the engine, with this message.
    Failed(String),
}

/// Decodes and queues one request. A request of a sequence also takes its turn in the
/// sequence's lane, whether the engine took it or not, so even its error keeps its place.
fn submit(
    server: &Server,
    request: ModelInferRequest,
    forwarded: &tritium_actors::Parameters,
    parent: Option<&RemoteParent>,
    lanes: &Lanes,
) -> (Outcome, Option<Turn>) {
    let read = std::time::Instant::now();
    // The stream's trace context (its metadata) is every request's parent.
    let trace = crate::observe::trace::manager().sample(&request.model_name, parent.cloned());
    if let Some(t) = &trace {
        t.record_at("GRPC_WAITREAD_START", read);
        t.record_at("GRPC_WAITREAD_END", read);
    }
    let Decoded { mut request, shm_outputs } = match decode(request) {
        Ok(d) => d,
        Err(e) => return (Outcome::Failed(e.message), None),
    };
    request.parameters.extend(forwarded.iter().map(|(k, v)| (k.clone(), v.clone())));
    let turn = request.sequence.as_ref().map(|s| lanes.take(&request.model, &s.id));
    let empty_final =
        matches!(request.parameters.get("triton_enable_empty_final_response"), Some(ParamValue::Bool(true)));
    let requested = crate::frontends::classification::classified(&request.outputs);
    let span = request_span(&request);
    span.in_scope(|| tracing::debug!("gRPC stream infer request received"));
    let trace = trace.map(|t| {
        t.attach(&mut request);
        t.record("REQUEST_START");
        (t, request.id.clone())
    });
    let mut answers = None;
    let submitted = server.submit_with(request, |model| {
        let (reply, a) = Answers::for_model(model);
        answers = Some(a);
        reply
    });
    let outcome = match submitted {
        Ok(model) => {
            let answers = answers.expect("a submitted request has its reply made");
            let running = Running { answers, model, requested, shm_outputs, empty_final, span: Some(span), trace };
            Outcome::Running(Box::new(running))
        }
        Err(e) => {
            span.in_scope(|| tracing::debug!("gRPC stream infer request failed: {}", e.message));
            Outcome::Failed(e.message)
        }
    };
    (outcome, turn)
}

/// Queues the request's answers for the writer, the last one with the request's `place`.
async fn forward(mut running: Running, out: &mpsc::Sender<Outgoing>, place: &mut Option<OwnedSemaphorePermit>) {
    let decoupled = running.model.handle.policy.decoupled;
    loop {
        let item = tokio::select! {
            item = running.answers.next() => item,
            // The client went away: dropping the answers' receiver tells the engine nobody reads
            // this request.
            _ = out.closed() => return,
        };
        let answer = match item {
            None => return,
            Some(Err(e)) => {
                tracing::debug!("gRPC stream infer request failed: {}", e.message);
                let _ = out.send((Ok(error_response(e.message)), place.take())).await;
                return;
            }
            Some(Ok(response)) => response,
        };
        let is_final = answer.is_final || !decoupled;
        if is_final {
            tracing::debug!("gRPC stream infer request answered");
            if let Some((t, _)) = &running.trace {
                t.record("REQUEST_END");
                t.response_complete();
            }
        }
        if decoupled && is_final && answer.outputs.is_empty() && !running.empty_final {
            finish_trace(&mut running, false);
            return;
        }
        let flag = decoupled.then_some(("triton_final_response", ParamValue::Bool(is_final)));
        let message = match encode(answer, &running.requested, &running.shm_outputs, &running.model, flag) {
            Ok(r) => ModelStreamInferResponse { error_message: String::new(), infer_response: Some(r) },
            Err(e) => error_response(e.message),
        };
        if is_final {
            if let Some((t, _)) = &running.trace {
                t.record("GRPC_SEND_START");
            }
        }
        let sent = out.send((Ok(message), if is_final { place.take() } else { None })).await.is_ok();
        if is_final {
            finish_trace(&mut running, sent);
        }
        if !sent || is_final {
            return;
        }
    }
}

/// Writes the trace of a request whose final answer has gone (or had nothing to send).
fn finish_trace(running: &mut Running, sent: bool) {
    if let Some((t, request_id)) = running.trace.take() {
        if sent {
            t.record("GRPC_SEND_END");
        }
        t.finish(running.model.version(), &request_id);
    }
}

#[cfg(test)]
mod tests {
    use tritium_actors::{Error, InferResponse};

    use super::*;

    fn response(id: &str) -> InferResponse {
        InferResponse {
            id: id.into(),
            model: "m".into(),
            version: 1,
            outputs: Vec::new(),
            parameters: Default::default(),
            is_final: true,
            times: None,
        }
    }

    #[tokio::test]
    async fn a_oneshot_gives_its_one_answer_then_none() {
        let (tx, rx) = oneshot::channel();
        let mut answers = Answers::Once(Some(rx));
        tx.send(Ok(response("a"))).unwrap();
        assert_eq!(answers.next().await.unwrap().unwrap().id, "a");
        assert!(answers.next().await.is_none(), "a oneshot answers once");
    }

    #[tokio::test]
    async fn a_oneshot_dropped_unanswered_is_the_end_and_an_error_is_an_answer() {
        let (tx, rx) = oneshot::channel::<Answer>();
        let mut answers = Answers::Once(Some(rx));
        drop(tx);
        assert!(answers.next().await.is_none());
        let (tx, rx) = oneshot::channel();
        let mut answers = Answers::Once(Some(rx));
        tx.send(Err(Error::internal("boom"))).unwrap();
        assert_eq!(answers.next().await.unwrap().unwrap_err().message, "boom");
    }

    #[tokio::test]
    async fn a_stream_gives_every_answer_in_order() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut answers = Answers::Stream(rx);
        for id in ["a", "b"] {
            tx.send(Ok(response(id))).unwrap();
        }
        drop(tx);
        assert_eq!(answers.next().await.unwrap().unwrap().id, "a");
        assert_eq!(answers.next().await.unwrap().unwrap().id, "b");
        assert!(answers.next().await.is_none());
    }
}
