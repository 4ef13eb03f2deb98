//! W3C trace context: the `traceparent` (and `tracestate`) a client sends in an HTTP header or
//! gRPC metadata, read through the SDK's `TraceContextPropagator`. A request that carries a
//! valid one is traced in OpenTelemetry mode whatever the rate (as Triton does), and its
//! `InferRequest` span becomes a child of the client's span.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// A client's span, which the request's spans go under.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteParent(pub(crate) SpanContext);

impl RemoteParent {
    /// The client's context from its `traceparent` and `tracestate` values; `None` when there is
    /// none or it is not valid W3C trace context (the request is then sampled as any other).
    pub fn from_headers(traceparent: Option<&[u8]>, tracestate: Option<&[u8]>) -> Option<RemoteParent> {
        let traceparent = std::str::from_utf8(traceparent?).ok()?.trim();
        // The SDK checks the values, not the widths: a field of the wrong width is refused here.
        let widths: Vec<usize> = traceparent.split('-').map(str::len).take(4).collect();
        if widths != [2, 32, 16, 2] {
            return None;
        }
        let mut carrier = HashMap::with_capacity(2);
        carrier.insert("traceparent".to_string(), traceparent.to_string());
        if let Some(state) = tracestate.and_then(|s| std::str::from_utf8(s).ok()) {
            carrier.insert("tracestate".to_string(), state.to_string());
        }
        let cx = TraceContextPropagator::new().extract(&carrier);
        let span = cx.span().span_context().clone();
        span.is_valid().then_some(RemoteParent(span))
    }

    /// The parent from an HTTP request's headers.
    pub fn from_http(headers: &actix_web::http::header::HeaderMap) -> Option<RemoteParent> {
        let get = |name: &str| headers.get(name).map(|v| v.as_bytes());
        RemoteParent::from_headers(get("traceparent"), get("tracestate"))
    }

    /// The parent from a gRPC call's metadata.
    pub fn from_grpc(metadata: &tonic::metadata::MetadataMap) -> Option<RemoteParent> {
        let get = |name: &str| metadata.get(name).map(|v| v.as_bytes());
        RemoteParent::from_headers(get("traceparent"), get("tracestate"))
    }

    /// The client's trace id, as 32 hex digits.
    #[cfg(test)]
    pub fn trace_id(&self) -> String {
        self.0.trace_id().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_w3c_traceparent_and_rejects_malformed_ones() {
        let tp = b"00-0af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-01";
        let p = RemoteParent::from_headers(Some(tp), Some(b"vendor=abc")).unwrap();
        assert_eq!(p.trace_id(), "0af7651916cd43dd8448eb211c12666c");
        assert_eq!(p.0.span_id().to_string(), "b7ad6b7169242424");
        assert!(p.0.is_sampled() && p.0.is_remote());
        assert_eq!(p.0.trace_state().get("vendor"), Some("abc"));
        // Unsampled flags still name a parent (Triton traces such a request too).
        assert!(RemoteParent::from_headers(Some(b"00-0af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-00"), None)
            .is_some());
        for bad in [
            &b""[..],
            b"garbage",
            b"00-00000000000000000000000000000000-b7ad6b7169242424-01",
            b"00-0af7651916cd43dd8448eb211c12666c-0000000000000000-01",
            b"00-0af7651916cd43dd8448eb211c12666c-b7ad6b71692424-01",
            b"00-af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-01",
            b"00-0af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-1",
            b"00-0af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-01-extra",
            b"ff-0af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-01",
            b"00-0AF7651916CD43DD8448EB211C12666C-b7ad6b7169242424-01",
            b"\xff\xfe",
        ] {
            assert!(RemoteParent::from_headers(Some(bad), None).is_none(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(RemoteParent::from_headers(None, Some(b"vendor=abc")).is_none());
    }
}
