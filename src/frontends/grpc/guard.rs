//! What every gRPC call passes before tonic decodes it: Triton's restricted protocols
//! (`--grpc-restricted-protocol`; a call of a restricted category without its metadata is
//! answered UNAVAILABLE with Triton's text and never reaches a handler), and the message size
//! limit, checked on each message's 5-byte length prefix as the bytes arrive so an oversized
//! message is refused before it is read, with gRPC core's RESOURCE_EXHAUSTED "Received message
//! larger than max (N vs. M)" (tonic's own check answers OUT_OF_RANGE with other words). The
//! call fails; the connection and the server keep serving.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::Frame;
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
}

impl<S> Guarded<S> {
    pub fn new(inner: S, restrictions: Arc<Restrictions>, max_message_bytes: usize) -> Self {
        Guarded { inner, restrictions, max_message_bytes }
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
        let limit = self.max_message_bytes;
        let unary_infer = request.uri().path().ends_with("/ModelInfer");
        let request = request.map(|body| Body::new(MessageLimit::new(body, limit)));
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
fn unavailable_as_503(response: &mut Response<Body>) {
    let unavailable = (Code::Unavailable as i32).to_string();
    if response.headers().get("grpc-status").is_some_and(|v| v.as_bytes() == unavailable.as_bytes()) {
        *response.status_mut() = tonic::codegen::http::StatusCode::SERVICE_UNAVAILABLE;
    }
}

/// gRPC core's refusal of a message over the limit.
fn too_large(len: usize, limit: usize) -> Status {
    Status::resource_exhausted(format!("Received message larger than max ({len} vs. {limit})"))
}

/// A request body that follows the gRPC framing (1 flag byte, 4 length bytes, the message) and
/// fails with RESOURCE_EXHAUSTED at the first length prefix over `limit`, before the message's
/// bytes are read.
pub struct MessageLimit<B> {
    inner: B,
    limit: usize,
    /// Bytes of the current message's body still to pass.
    body_left: usize,
    /// The prefix read so far when it spans frames.
    prefix: [u8; 5],
    prefix_len: usize,
    failed: bool,
}

impl<B> MessageLimit<B> {
    pub fn new(inner: B, limit: usize) -> Self {
        MessageLimit { inner, limit, body_left: 0, prefix: [0; 5], prefix_len: 0, failed: false }
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
        let frame = match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            other => return Poll::Ready(other),
        };
        if let Some(data) = frame.data_ref() {
            if let Err(status) = self.scan(data.chunk()) {
                self.failed = true;
                return Poll::Ready(Some(Err(status)));
            }
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
