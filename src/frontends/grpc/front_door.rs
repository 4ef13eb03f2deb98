//! The front door for unary `ModelInfer`: a tower layer in front of tonic's router that serves
//! the plainest, most frequent call itself and hands every other one to tonic unchanged.
//!
//! Why: a lone add_sub request over gRPC cost the server 95 µs of CPU against 44 for the floor
//! server (`floor_grpc`, the same tonic answering in its handler), and tonic/h2/hyper/tower/prost
//! 25 µs of it (loadtests/PROFILES.md, 2026-12-05). Per unary call tonic routes the path through
//! axum, boxes the call in its generated service and in `Guarded`, wraps the body twice, decodes
//! through its `Streaming` decoder into a buffer of its own and encodes through `EncodeBody`,
//! a stream of one message. Here a call that is plainly a unary `ModelInfer` — `POST
//! /inference.GRPCInferenceService/ModelInfer`, a gRPC content type, no `grpc-encoding` other
//! than `identity`, not refused by `--grpc-restricted-protocol`, and a body that is exactly one
//! uncompressed message — is read (the one message, under the same size limit and read timeout
//! as `Guarded`'s), decoded with prost, given to the same handler (`GrpcService::model_infer`)
//! and answered with one data frame and the `grpc-status` trailers, as tonic writes them.
//!
//! Anything else goes to tonic as it came: another method, a stream, a compressed message, a
//! refused call (answered by `Guarded`), and a body that turns out unusual (a second message, the
//! compressed flag, trailers, an early end, an error such as a message over the size limit or
//! one that did not arrive in time): the frames read so far are handed on in front of the rest,
//! so tonic answers exactly as it would have. tonic's own transport layers (`grpc-timeout`
//! deadlines, connection info) sit outside this one and apply to both paths.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use http_body::{Body as _, Frame};
use prost::Message as _;
use tonic::body::Body;
use tonic::codegen::http::{header, HeaderMap, HeaderValue, Method, Request, Response};
use tonic::codegen::Service;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tonic::Status;

use super::guard::{unavailable_as_503, MessageLimit};
use super::GrpcService;
use crate::frontends::alone;
use crate::frontends::restricted::{Category, Restrictions};
use crate::proto::inference as pb;

/// The one path served here.
const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
/// gRPC's message prefix: a compressed flag and a 4-byte big-endian length.
const PREFIX: usize = 5;

/// What the door needs: the handler and the limits `Guarded` applies on tonic's path.
pub struct Door {
    service: Arc<GrpcService>,
    restrictions: Arc<Restrictions>,
    max_message_bytes: usize,
    /// `--grpc-message-read-timeout` (none: 0).
    read_timeout: Option<Duration>,
}

impl Door {
    pub fn new(
        service: Arc<GrpcService>,
        restrictions: Arc<Restrictions>,
        max_message_bytes: usize,
        read_timeout: Option<Duration>,
    ) -> Self {
        Door { service, restrictions, max_message_bytes, read_timeout }
    }
}

/// Whether a call's head is that of a plain unary `ModelInfer` the restrictions let through (its
/// body is read later).
fn plain_infer<B>(request: &Request<B>, restrictions: &Restrictions) -> bool {
    let headers = request.headers();
    request.method() == Method::POST
        && request.uri().path() == MODEL_INFER
        && headers.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
        && headers.get("grpc-encoding").is_none_or(|v| v.as_bytes() == b"identity")
        && restrictions.refuses(Some(Category::Inference), |key| headers.get(key).map(|v| v.as_bytes())).is_none()
}

/// The layer that puts a `Door` in front of tonic's router (`Server::layer`); without one,
/// every call goes to the router.
#[derive(Clone)]
pub struct FrontDoorLayer {
    door: Option<Arc<Door>>,
}

impl FrontDoorLayer {
    pub fn new(door: Option<Door>) -> Self {
        FrontDoorLayer { door: door.map(Arc::new) }
    }
}

impl<S> tower_layer::Layer<S> for FrontDoorLayer {
    type Service = FrontDoor<S>;

    fn layer(&self, inner: S) -> FrontDoor<S> {
        FrontDoor { inner, door: self.door.clone() }
    }
}

/// tonic's router (`inner`) behind the door.
#[derive(Clone)]
pub struct FrontDoor<S> {
    inner: S,
    door: Option<Arc<Door>>,
}

type Served = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl<S> Service<Request<Body>> for FrontDoor<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Served;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // Every call is counted open on this thread until answered (`alone`), from here: the
        // first poll of its stream's task (hyper-util's `Oneshot` calls the tower service then).
        // A stream accepted with it whose task has not run yet is not counted.
        let open = alone::call_from(peer(&request));
        let door = match &self.door {
            Some(door) if plain_infer(&request, &door.restrictions) => door.clone(),
            _ => {
                let answer = self.inner.call(request);
                return Box::pin(async move {
                    let _open = open;
                    answer.await
                });
            }
        };
        // The router is ready (`poll_ready` above); the clone serves a call the door hands on.
        let inner = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, inner);
        Box::pin(async move {
            let _open = open;
            serve(door, request, inner).await
        })
    }
}

/// The client's address, as tonic's transport records it for the connection (over TLS too).
fn peer<B>(request: &Request<B>) -> Option<std::net::SocketAddr> {
    let extensions = request.extensions();
    extensions
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| extensions.get::<TlsConnectInfo<TcpConnectInfo>>().and_then(|tls| tls.get_ref().remote_addr()))
}

/// A plain unary `ModelInfer`: read, decoded, handled and answered here, or handed to tonic.
async fn serve<S>(door: Arc<Door>, request: Request<Body>, mut tonic: S) -> Result<Response<Body>, Infallible>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let (parts, body) = request.into_parts();
    let body = MessageLimit::new(body, door.max_message_bytes).with_read_timeout(door.read_timeout, true);
    let message = match read_one(body).await {
        Ok(message) => message,
        Err(replay) => return tonic.call(Request::from_parts(parts, Body::new(replay))).await,
    };
    let message = match pb::ModelInferRequest::decode(message) {
        Ok(m) => m,
        // tonic's prost codec: a message that does not decode is INTERNAL with prost's words.
        Err(e) => return Ok(Status::internal(e.to_string()).into_http()),
    };
    let call = tonic::Request::from_http(Request::from_parts(parts, message));
    let mut response = match door.service.infer(call).await {
        Ok(answer) => answer_with(answer, door.max_message_bytes),
        Err(status) => status.into_http(),
    };
    unavailable_as_503(&mut response);
    Ok(response)
}

/// The body's one message (its bytes after the prefix), or, for anything else, a body that
/// gives tonic what was read and then the rest.
async fn read_one(mut body: MessageLimit<Body>) -> Result<Bytes, Replay> {
    let mut chunks = Chunks::default();
    let mut read = 0usize;
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        let data = match frame {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(frame) => return Err(Replay::new(chunks, Some(Ok(frame)), Some(body))),
            },
            // An error (the size limit, the read timeout, a reset) or the end: nothing follows.
            Some(Err(status)) => return Err(Replay::new(chunks, Some(Err(status)), None)),
            None => return Err(Replay::new(chunks, None, None)),
        };
        read += data.len();
        if !data.is_empty() {
            chunks.push(data);
        }
        let len = match prefix(chunks.iter()) {
            Prefix::Partial => continue,
            Prefix::Plain(len) => len,
            Prefix::Other => return Err(Replay::new(chunks, None, Some(body))),
        };
        if read < PREFIX + len {
            continue;
        }
        // The message is in: it must be the body's last byte, and the body must end here.
        if read > PREFIX + len {
            return Err(Replay::new(chunks, None, Some(body)));
        }
        while !body.is_end_stream() {
            match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                None => break,
                // An empty frame (END_STREAM sent on its own) adds nothing.
                Some(Ok(frame)) if frame.data_ref().is_some_and(|d| d.is_empty()) => {}
                Some(Ok(frame)) => return Err(Replay::new(chunks, Some(Ok(frame)), Some(body))),
                Some(Err(status)) => return Err(Replay::new(chunks, Some(Err(status)), None)),
            }
        }
        return Ok(message_bytes(chunks, len));
    }
}

/// What the message's 5-byte prefix says, once it is in.
enum Prefix {
    Partial,
    /// An uncompressed message of this many bytes.
    Plain(usize),
    /// The compressed flag or an invalid one: tonic's to answer.
    Other,
}

fn prefix<'a>(chunks: impl Iterator<Item = &'a Bytes>) -> Prefix {
    let mut prefix = [0u8; PREFIX];
    let mut n = 0;
    for chunk in chunks {
        let take = (PREFIX - n).min(chunk.len());
        prefix[n..n + take].copy_from_slice(&chunk[..take]);
        n += take;
        if n == PREFIX {
            break;
        }
    }
    match (n, prefix[0]) {
        (n, _) if n < PREFIX => Prefix::Partial,
        (_, 0) => Prefix::Plain(u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize),
        _ => Prefix::Other,
    }
}

/// The frames read so far: the first held apart, so that a message in one frame (the usual
/// case) needs no vector.
#[derive(Default)]
struct Chunks {
    first: Option<Bytes>,
    more: Vec<Bytes>,
}

impl Chunks {
    fn push(&mut self, chunk: Bytes) {
        match self.first {
            None => self.first = Some(chunk),
            Some(_) => self.more.push(chunk),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Bytes> {
        self.first.iter().chain(&self.more)
    }

    fn into_vec(self) -> Vec<Bytes> {
        self.first.into_iter().chain(self.more).collect()
    }
}

/// The message after its prefix: a slice of the one frame it came in, or the frames joined.
fn message_bytes(chunks: Chunks, len: usize) -> Bytes {
    match (chunks.first, chunks.more.is_empty()) {
        (Some(one), true) => one.slice(PREFIX..PREFIX + len),
        (first, _) => {
            let mut joined = BytesMut::with_capacity(PREFIX + len);
            for chunk in first.iter().chain(&chunks.more) {
                joined.put_slice(chunk);
            }
            joined.freeze().slice(PREFIX..PREFIX + len)
        }
    }
}

/// The handler's answer as tonic writes a unary one: its metadata and the gRPC content type as
/// headers, the message in one data frame, then `grpc-status: 0` as trailers. A message over
/// `--grpc-max-message-size` ends with tonic's OUT_OF_RANGE trailers instead, as from its encoder.
fn answer_with(answer: tonic::Response<pb::ModelInferResponse>, limit: usize) -> Response<Body> {
    let (metadata, message, extensions) = answer.into_parts();
    let mut headers = metadata.into_headers();
    for reserved in ["te", "content-type", "grpc-message", "grpc-message-type", "grpc-status"] {
        headers.remove(reserved);
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    let len = message.encoded_len();
    let (data, status) = if len > limit {
        let status = Status::out_of_range(format!(
            "Error, encoded message length too large: found {len} bytes, the limit is: {limit} bytes"
        ));
        (None, status)
    } else {
        let mut buf = BytesMut::with_capacity(PREFIX + len);
        buf.put_u8(0);
        buf.put_u32(len as u32);
        message.encode(&mut buf).expect("the buffer holds the encoded length");
        (Some(buf.freeze()), Status::ok(""))
    };
    let mut trailers = HeaderMap::with_capacity(1);
    if let Err(e) = status.add_header(&mut trailers) {
        trailers = HeaderMap::new();
        let _ = e.add_header(&mut trailers);
    }
    let mut response = Response::new(Body::new(Unary { data, trailers: Some(trailers) }));
    *response.version_mut() = tonic::codegen::http::Version::HTTP_2;
    *response.headers_mut() = headers;
    *response.extensions_mut() = extensions;
    response
}

/// A unary answer's body: the message, then the trailers.
struct Unary {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl http_body::Body for Unary {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(data) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }
}

/// A request body handed on to tonic: the frames the door read, then what it stopped at (a
/// frame, an error or the end), then the rest of the body as it comes.
pub struct Replay {
    read: VecDeque<Result<Frame<Bytes>, Status>>,
    rest: Option<Body>,
}

impl Replay {
    /// `chunks` read, then `stopped_at` (a frame or an error; nothing at the body's end), then
    /// what is left of `body`, if anything.
    fn new(chunks: Chunks, stopped_at: Option<Result<Frame<Bytes>, Status>>, body: Option<MessageLimit<Body>>) -> Self {
        let mut read: VecDeque<_> = chunks.into_vec().into_iter().map(|c| Ok(Frame::data(c))).collect();
        read.extend(stopped_at);
        Replay { read, rest: body.map(MessageLimit::into_inner) }
    }
}

impl http_body::Body for Replay {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(frame) = self.read.pop_front() {
            return Poll::Ready(Some(frame));
        }
        match &mut self.rest {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;

    fn call(path: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut r = Request::builder().method(Method::POST).uri(path);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(()).unwrap()
    }

    const GRPC: (&str, &str) = ("content-type", "application/grpc");

    #[test]
    fn takes_only_a_plain_unary_model_infer() {
        let open = Restrictions::default();
        assert!(plain_infer(&call(MODEL_INFER, &[GRPC]), &open));
        assert!(plain_infer(&call(MODEL_INFER, &[GRPC, ("grpc-encoding", "identity")]), &open));
        assert!(plain_infer(&call(MODEL_INFER, &[("content-type", "application/grpc+proto")]), &open));
        assert!(!plain_infer(&call(MODEL_INFER, &[GRPC, ("grpc-encoding", "gzip")]), &open), "compressed");
        assert!(!plain_infer(&call(MODEL_INFER, &[("content-type", "application/json")]), &open));
        assert!(!plain_infer(&call(MODEL_INFER, &[]), &open), "no content type");
        assert!(!plain_infer(&call("/inference.GRPCInferenceService/ModelStreamInfer", &[GRPC]), &open));
        assert!(!plain_infer(&call("/inference.GRPCInferenceService/ModelInferX", &[GRPC]), &open));
        assert!(!plain_infer(&call("/inference.GRPCInferenceService/ServerLive", &[GRPC]), &open));
        let mut get = call(MODEL_INFER, &[GRPC]);
        *get.method_mut() = Method::GET;
        assert!(!plain_infer(&get, &open));
    }

    #[test]
    fn a_call_the_restrictions_refuse_goes_to_tonic_and_one_they_allow_does_not() {
        let restricted = Restrictions::grpc(&["inference:infer-key=secret".to_string()]).unwrap();
        // The header's name with Triton's prefix for gRPC.
        let key = restricted.get(Category::Inference).unwrap().key.clone();
        assert!(key.ends_with("infer-key"), "{key}");
        assert!(!plain_infer(&call(MODEL_INFER, &[GRPC]), &restricted), "refused: Guarded answers it");
        assert!(!plain_infer(&call(MODEL_INFER, &[GRPC, (&key, "wrong")]), &restricted));
        assert!(plain_infer(&call(MODEL_INFER, &[GRPC, (&key, "secret")]), &restricted));
        let other = Restrictions::grpc(&["health:k=v".to_string()]).unwrap();
        assert!(plain_infer(&call(MODEL_INFER, &[GRPC]), &other));
    }

    /// A request body whose frames come from a channel, as a client sends them; the channel's
    /// end is the body's.
    struct Frames(mpsc::UnboundedReceiver<Result<Frame<Bytes>, Status>>);

    impl http_body::Body for Frames {
        type Data = Bytes;
        type Error = Status;

        fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
            self.0.poll_recv(cx)
        }
    }

    /// A frame as a body yields it.
    type Sent = Result<Frame<Bytes>, Status>;

    fn body(frames: Vec<Sent>) -> MessageLimit<Body> {
        let (tx, rx) = mpsc::unbounded_channel();
        for f in frames {
            tx.send(f).unwrap();
        }
        MessageLimit::new(Body::new(Frames(rx)), 1000)
    }

    fn data(bytes: &[u8]) -> Result<Frame<Bytes>, Status> {
        Ok(Frame::data(Bytes::copy_from_slice(bytes)))
    }

    fn message(flag: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![flag];
        v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    /// Everything a replayed body gives: its data joined, its trailers, and its error.
    async fn drain(mut replay: Replay) -> (Vec<u8>, Option<HeaderMap>, Option<Status>) {
        let (mut bytes, mut trailers) = (Vec::new(), None);
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut replay).poll_frame(cx)).await {
            match frame {
                Ok(f) => match f.into_data() {
                    Ok(d) => bytes.extend_from_slice(&d),
                    Err(f) => trailers = f.into_trailers().ok(),
                },
                Err(status) => return (bytes, trailers, Some(status)),
            }
        }
        (bytes, trailers, None)
    }

    #[tokio::test]
    async fn reads_one_message_however_its_frames_split() {
        let wire = message(0, b"hello, model");
        for split in 1..=wire.len() {
            let frames = wire.chunks(split).map(data).collect();
            let got = read_one(body(frames)).await.unwrap_or_else(|_| panic!("split {split}: handed on"));
            assert_eq!(&got[..], b"hello, model", "split {split}");
        }
        // An empty last frame (END_STREAM sent on its own) is still a plain call.
        let frames = vec![data(&wire), data(b"")];
        assert_eq!(&read_one(body(frames)).await.ok().unwrap()[..], b"hello, model");
        let empty = read_one(body(vec![data(&message(0, b""))])).await.ok().unwrap();
        assert!(empty.is_empty(), "an empty message is a message");
    }

    #[tokio::test]
    async fn hands_anything_unusual_to_tonic_with_every_byte_it_read() {
        let one = message(0, b"first");
        let two = [one.clone(), message(0, b"second")].concat();
        let compressed = message(1, b"zipped");
        let cases: Vec<(&str, Vec<Sent>, Vec<u8>)> = vec![
            ("two messages in one frame", vec![data(&two)], two.clone()),
            ("two messages in two frames", vec![data(&one), data(&message(0, b"second"))], two.clone()),
            ("the compressed flag", vec![data(&compressed)], compressed.clone()),
            ("an invalid flag", vec![data(&message(7, b"x"))], message(7, b"x")),
            ("an early end", vec![data(&one[..7])], one[..7].to_vec()),
            ("no message at all", vec![], vec![]),
        ];
        for (name, frames, wire) in cases {
            let replay = match read_one(body(frames)).await {
                Ok(m) => panic!("{name}: served as {m:?}"),
                Err(replay) => replay,
            };
            let (bytes, trailers, error) = drain(replay).await;
            assert_eq!(bytes, wire, "{name}");
            assert!(trailers.is_none() && error.is_none(), "{name}");
        }
    }

    #[tokio::test]
    async fn hands_on_trailers_and_errors_as_they_came() {
        let mut t = HeaderMap::new();
        t.insert("x-after", HeaderValue::from_static("1"));
        let one = message(0, b"first");
        let replay = read_one(body(vec![data(&one), Ok(Frame::trailers(t))])).await.err().unwrap();
        let (bytes, trailers, _) = drain(replay).await;
        assert_eq!((bytes, trailers.unwrap()["x-after"].as_bytes()), (one.clone(), &b"1"[..]));

        let replay = read_one(body(vec![data(&one[..3]), Err(Status::cancelled("reset"))])).await.err().unwrap();
        let (bytes, _, error) = drain(replay).await;
        assert_eq!(bytes, &one[..3]);
        assert_eq!(error.unwrap().code(), tonic::Code::Cancelled);
    }

    #[tokio::test]
    async fn a_message_over_the_limit_is_refused_as_guarded_refuses_it() {
        let big = message(0, &[0u8; 2000]);
        let replay = read_one(body(vec![data(&big)])).await.err().unwrap();
        let (bytes, _, error) = drain(replay).await;
        assert!(bytes.is_empty(), "nothing of the message was kept");
        let error = error.unwrap();
        assert_eq!(error.code(), tonic::Code::ResourceExhausted);
        assert_eq!(error.message(), "Received message larger than max (2000 vs. 1000)");
    }

    async fn frames_of(mut response: Response<Body>) -> (Vec<Bytes>, HeaderMap) {
        let (mut data, mut trailers) = (Vec::new(), None);
        let body = response.body_mut();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await {
            match frame.unwrap().into_data() {
                Ok(d) => data.push(d),
                Err(f) => trailers = f.into_trailers().ok(),
            }
        }
        (data, trailers.expect("trailers"))
    }

    fn answer() -> pb::ModelInferResponse {
        pb::ModelInferResponse {
            model_name: "add_sub".into(),
            model_version: "1".into(),
            raw_output_contents: vec![Bytes::from_static(&[1, 2, 3, 4])],
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn answers_in_one_data_frame_then_the_ok_trailers() {
        let mut r = tonic::Response::new(answer());
        r.metadata_mut().insert("x-kept", "yes".parse().unwrap());
        r.metadata_mut().insert("grpc-status", "13".parse().unwrap());
        let response = answer_with(r, 1000);
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/grpc");
        assert_eq!(response.headers()["x-kept"], "yes");
        assert!(response.headers().get("grpc-status").is_none(), "a reserved header is not the handler's to set");
        let (data, trailers) = frames_of(response).await;
        let encoded = answer().encode_to_vec();
        assert_eq!(data.len(), 1);
        assert_eq!(data[0][..PREFIX], [&[0u8][..], &(encoded.len() as u32).to_be_bytes()].concat()[..]);
        assert_eq!(data[0][PREFIX..], encoded[..]);
        assert_eq!(trailers["grpc-status"], "0");
        assert!(trailers.get("grpc-message").is_none());
    }

    #[tokio::test]
    async fn an_answer_over_the_limit_ends_with_tonics_out_of_range() {
        let len = answer().encoded_len();
        let response = answer_with(tonic::Response::new(answer()), len - 1);
        let (data, trailers) = frames_of(response).await;
        assert!(data.is_empty());
        let status = Status::from_header_map(&trailers).expect("a status");
        assert_eq!(status.code(), tonic::Code::OutOfRange);
        let want =
            format!("Error, encoded message length too large: found {len} bytes, the limit is: {} bytes", len - 1);
        assert_eq!(status.message(), want);
    }
}
