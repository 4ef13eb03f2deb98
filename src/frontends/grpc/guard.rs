//! What every gRPC call passes before tonic decodes it: Triton's restricted protocols
//! (`--grpc-restricted-protocol`; a call of a restricted category without its metadata is
//! answered UNAVAILABLE with Triton's text and never reaches a handler), and the message size
//! limit, checked on each message's 5-byte length prefix as the bytes arrive so an oversized
//! message is refused before it is read, with gRPC core's RESOURCE_EXHAUSTED "Received message
//! larger than max (N vs. M)" (tonic's own check answers OUT_OF_RANGE with other words). The
//! call fails; the connection and the server keep serving.
//!
//! A message must also arrive whole within `--grpc-message-read-timeout` of its first byte (of
//! the call's start, for every method but the bidirectional `ModelStreamInfer`, whose stream may
//! rest between messages): a client that stalls or trickles a message (slow-loris) gets
//! DEADLINE_EXCEEDED and its stream is reset. Tritium's flag: gRPC core and Triton have none.

use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body::Frame;
use tokio::time::{sleep_until, Instant, Sleep};
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::Service;
use tonic::server::NamedService;
use tonic::{Code, Status};

use crate::frontends::restricted::{self, Restrictions};

/// A gRPC service (tonic's generated server, or the health service) behind the guard.
#[derive(Clone)]
pub struct Guarded<S> {
    inner: S,
    restrictions: Arc<Restrictions>,
    max_message_bytes: usize,
    /// `--grpc-message-read-timeout` (none: 0).
    read_timeout: Option<Duration>,
}

impl<S> Guarded<S> {
    pub fn new(
        inner: S,
        restrictions: Arc<Restrictions>,
        max_message_bytes: usize,
        read_timeout: Option<Duration>,
    ) -> Self {
        Guarded { inner, restrictions, max_message_bytes, read_timeout }
    }
}

impl<S: NamedService> NamedService for Guarded<S> {
    const NAME: &'static str = S::NAME;
}

type Answer = Pin<Box<dyn std::future::Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl<S> Service<Request<Body>> for Guarded<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Answer {
        let category = restricted::grpc_category(request.uri().path());
        if let Some(r) = self.restrictions.refuses(category, |key| request.headers().get(key).map(|v| v.as_bytes())) {
            let refusal = Status::unavailable(restricted::grpc_message(r)).into_http();
            return Box::pin(std::future::ready(Ok(refusal)));
        }
        let (limit, timeout) = (self.max_message_bytes, self.read_timeout);
        let unary_infer = request.uri().path().ends_with("/ModelInfer");
        // Every method but the bidirectional stream sends its one message at once.
        let from_start = !request.uri().path().ends_with("/ModelStreamInfer");
        let request =
            request.map(|body| Body::new(MessageLimit::new(body, limit).with_read_timeout(timeout, from_start)));
        let answer = self.inner.call(request);
        if !unary_infer {
            return Box::pin(answer);
        }
        Box::pin(async move {
            let mut response = answer.await?;
            unavailable_as_503(&mut response);
            Ok(response)
        })
    }
}

/// A ModelInfer refused with UNAVAILABLE (nothing ran: a draining server, a sequence held by
/// another replica, models still loading) goes out with HTTP status 503 beside its
/// `grpc-status`, which gRPC clients prefer: a proxy that reads only the HTTP status (Envoy's
/// `retriable_status_codes`, say) can then retry it on another replica. nginx cannot: it never
/// buffers a gRPC request body, so it retries no gRPC call it has sent.
pub(super) fn unavailable_as_503(response: &mut Response<Body>) {
    const UNAVAILABLE: &[u8] = b"14";
    const _: () = assert!(Code::Unavailable as i32 == 14);
    if response.headers().get("grpc-status").is_some_and(|v| v.as_bytes() == UNAVAILABLE) {
        *response.status_mut() = tonic::codegen::http::StatusCode::SERVICE_UNAVAILABLE;
    }
}

/// gRPC core's refusal of a message over the limit.
fn too_large(len: usize, limit: usize) -> Status {
    Status::resource_exhausted(format!("Received message larger than max ({len} vs. {limit})"))
}

/// The refusal of a message that did not arrive in time.
fn too_slow(timeout: Duration) -> Status {
    Status::deadline_exceeded(format!(
        "the request message did not arrive within {} s. Use --grpc-message-read-timeout to change the limit.",
        timeout.as_secs_f64()
    ))
}

/// When a message must be in: an instant until the body first waits for bytes, then a timer.
/// A unary call's message has usually arrived whole when tonic first reads it, so its timer is
/// never made (no allocation, nothing in the runtime's timer wheel).
enum Deadline {
    At(Instant),
    Timer(Pin<Box<Sleep>>),
}

impl Deadline {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Deadline::At(at) = *self {
            *self = Deadline::Timer(Box::pin(sleep_until(at)));
        }
        match self {
            Deadline::Timer(timer) => timer.as_mut().poll(cx),
            Deadline::At(_) => unreachable!("made a timer above"),
        }
    }
}

/// A request body that follows the gRPC framing (1 flag byte, 4 length bytes, the message) and
/// fails with RESOURCE_EXHAUSTED at the first length prefix over `limit`, before the message's
/// bytes are read, and with DEADLINE_EXCEEDED when a message takes longer than the read timeout.
pub struct MessageLimit<B> {
    inner: B,
    limit: usize,
    read_timeout: Option<Duration>,
    /// While a message is arriving (or, for a call that sends at once, until its first has):
    /// when it must be in.
    deadline: Option<Deadline>,
    /// Bytes of the current message's body still to pass.
    body_left: usize,
    /// The prefix read so far when it spans frames.
    prefix: [u8; 5],
    prefix_len: usize,
    failed: bool,
}

impl<B> MessageLimit<B> {
    pub fn new(inner: B, limit: usize) -> Self {
        MessageLimit {
            inner,
            limit,
            read_timeout: None,
            deadline: None,
            body_left: 0,
            prefix: [0; 5],
            prefix_len: 0,
            failed: false,
        }
    }

    /// Each message must arrive within `timeout` of its first byte; with `from_start`, the
    /// first one within `timeout` of now. Needs a tokio runtime with time.
    pub fn with_read_timeout(mut self, timeout: Option<Duration>, from_start: bool) -> Self {
        self.read_timeout = timeout;
        if let (Some(t), true) = (timeout, from_start) {
            self.deadline = Some(Deadline::At(Instant::now() + t));
        }
        self
    }

    /// The body it wraps, as it stands.
    pub fn into_inner(self) -> B {
        self.inner
    }

    /// Arms the deadline when a message has begun and clears it when it has ended.
    fn track_deadline(&mut self) {
        let Some(timeout) = self.read_timeout else { return };
        let inside = self.body_left > 0 || self.prefix_len > 0;
        if !inside {
            self.deadline = None;
        } else if self.deadline.is_none() {
            self.deadline = Some(Deadline::At(Instant::now() + timeout));
        }
    }

    /// Follows the framing through `data`; `Err` when a prefix announces too large a message.
    fn scan(&mut self, mut data: &[u8]) -> Result<(), Status> {
        while !data.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + n].copy_from_slice(&data[..n]);
            self.prefix_len += n;
            data = &data[n..];
            if self.prefix_len == 5 {
                self.prefix_len = 0;
                let len = u32::from_be_bytes([self.prefix[1], self.prefix[2], self.prefix[3], self.prefix[4]]) as usize;
                if len > self.limit {
                    return Err(too_large(len, self.limit));
                }
                self.body_left = len;
            }
        }
        Ok(())
    }
}

impl<B> http_body::Body for MessageLimit<B>
where
    B: http_body::Body<Data = Bytes, Error = Status> + Unpin,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(other) => return Poll::Ready(other),
            Poll::Pending => {
                let late = self.deadline.as_mut().is_some_and(|d| d.poll(cx).is_ready());
                if let (true, Some(timeout)) = (late, self.read_timeout) {
                    self.failed = true;
                    return Poll::Ready(Some(Err(too_slow(timeout))));
                }
                return Poll::Pending;
            }
        };
        if let Some(data) = frame.data_ref() {
            if let Err(status) = self.scan(data.chunk()) {
                self.failed = true;
                return Poll::Ready(Some(Err(status)));
            }
            self.track_deadline();
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body::Body as _;

    use super::*;

    #[test]
    fn an_unavailable_answer_gets_http_503_and_others_keep_200() {
        let mut r = Status::unavailable("draining").into_http();
        unavailable_as_503(&mut r);
        assert_eq!(r.status(), 503);
        let mut r = Status::invalid_argument("bad").into_http();
        unavailable_as_503(&mut r);
        assert_eq!(r.status(), 200);
    }

    fn framed(len: u32) -> Vec<u8> {
        let mut v = vec![0u8];
        v.extend_from_slice(&len.to_be_bytes());
        v
    }

    #[test]
    fn passes_messages_within_the_limit_across_any_split() {
        let mut wire = framed(3);
        wire.extend_from_slice(b"abc");
        wire.extend(framed(0));
        wire.extend(framed(4));
        wire.extend_from_slice(b"defg");
        for split in 1..wire.len() {
            let mut m = MessageLimit::new((), 4);
            for chunk in wire.chunks(split) {
                m.scan(chunk).unwrap_or_else(|e| panic!("split {split}: {e}"));
            }
            assert_eq!((m.body_left, m.prefix_len), (0, 0), "split {split}: ends on a message boundary");
        }
    }

    /// A body whose frames come from a channel, as a client sends them.
    struct Chunks(tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>);

    impl http_body::Body for Chunks {
        type Data = Bytes;
        type Error = Status;

        fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
            self.0.poll_recv(cx).map(|c| c.map(|c| Ok(Frame::data(Bytes::from(c)))))
        }
    }

    async fn next(body: &mut MessageLimit<Chunks>) -> Option<Result<Frame<Bytes>, Status>> {
        std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
    }

    #[tokio::test]
    async fn a_message_that_stalls_fails_but_a_stream_may_rest_between_messages() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let timeout = Duration::from_millis(200);
        let mut body = MessageLimit::new(Chunks(rx), 100).with_read_timeout(Some(timeout), false);
        let mut whole = framed(2);
        whole.extend_from_slice(b"ok");
        tx.send(whole).unwrap();
        assert!(next(&mut body).await.unwrap().is_ok());
        // Between messages a stream may rest as long as it likes.
        let resting = tokio::time::timeout(timeout * 3, next(&mut body)).await;
        assert!(resting.is_err(), "a resting stream was cut off");
        // A message begun and stalled is cut off at the timeout.
        tx.send(framed(10)).unwrap();
        assert!(next(&mut body).await.unwrap().is_ok());
        let started = tokio::time::Instant::now();
        let err = next(&mut body).await.unwrap().unwrap_err();
        assert_eq!(err.code(), Code::DeadlineExceeded);
        assert!(err.message().contains("--grpc-message-read-timeout"), "{}", err.message());
        assert!(started.elapsed() >= timeout);
        assert!(next(&mut body).await.is_none());
    }

    #[tokio::test]
    async fn a_call_that_sends_nothing_fails_from_its_start() {
        let (_tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut body = MessageLimit::new(Chunks(rx), 100).with_read_timeout(Some(Duration::from_millis(100)), true);
        assert_eq!(next(&mut body).await.unwrap().unwrap_err().code(), Code::DeadlineExceeded);
    }

    #[test]
    fn refuses_an_oversized_message_at_its_prefix() {
        let mut wire = framed(2);
        wire.extend_from_slice(b"ok");
        wire.extend(framed(1 << 20));
        for split in 1..wire.len() {
            let mut m = MessageLimit::new((), 1000);
            let err = wire.chunks(split).map(|c| m.scan(c)).find_map(Result::err).expect("refused");
            assert_eq!(err.code(), Code::ResourceExhausted);
            assert_eq!(err.message(), "Received message larger than max (1048576 vs. 1000)");
        }
    }
}
