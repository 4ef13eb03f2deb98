//! Triton's OpenTelemetry trace mode: a finished trace becomes spans laid out as Triton lays
//! them out, exported as OTLP/HTTP protobuf by the SDK's batch span processor.
//!
//! The layout (Triton's `tracer.cc`): a root span `InferRequest` (kind server) holding the
//! frontend's points (`HTTP_RECV_START`, `GRPC_WAITREAD_END`, `INFER_RESPONSE_COMPLETE`,
//! `HTTP_SEND_END`, …) as events, child of the client's span when the request carried a W3C
//! `traceparent`; under it one span named after the model with `REQUEST_START`, `QUEUE_START`
//! and `REQUEST_END` and the attributes `triton.model_name`, `triton.model_version`,
//! `triton.trace_id`, `triton.trace_parent_id` (and `triton.request_id` when set); under that a
//! `compute` span with `COMPUTE_START`, `COMPUTE_INPUT_END`, `COMPUTE_OUTPUT_START`,
//! `COMPUTE_END`. An ensemble's span has no compute span of its own: each composing model's
//! request is a model span (with its compute span) under it, nested ensembles likewise.
//!
//! Nothing here runs on the request path but a channel send: a finished trace (its points and
//! ids, moved, not copied) goes to the `otel-spans` thread over a bounded queue (full: the trace
//! is dropped and counted), which builds the spans and hands them to the batch processor's own
//! bounded queue; the processor exports on its thread. A failed export or a dropped trace is
//! logged (at most once every ten seconds), never returned to a request.

pub mod config;
mod export;
mod ids;
pub mod propagate;

use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime};

pub use config::OtelConfig;
pub use export::Exporter;
use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;
pub use propagate::RemoteParent;
use tritium_actors::Trace;

/// The points that belong to the model's span and to its compute span (Triton's
/// `GetSpanNameForActivity`); every other point belongs to the root span.
const REQUEST_POINTS: [&str; 3] = ["REQUEST_START", "QUEUE_START", "REQUEST_END"];
const COMPUTE_POINTS: [&str; 4] = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"];

/// `Instant` → wall clock, anchored once (span times are wall-clock, as OTLP wants).
fn wall(at: Instant) -> SystemTime {
    static ANCHOR: OnceLock<(Instant, SystemTime)> = OnceLock::new();
    let (i, s) = *ANCHOR.get_or_init(|| (Instant::now(), SystemTime::now()));
    if at >= i {
        s + (at - i)
    } else {
        s - (i - at)
    }
}

/// What one finished trace hands the exporter.
pub struct Finished {
    /// Triton's trace id of the request.
    pub id: u64,
    pub model: String,
    pub version: i64,
    pub request_id: String,
    /// When the request was sampled (the root span's start) and when it finished.
    pub started: Instant,
    pub ended: Instant,
    pub parent: Option<Box<RemoteParent>>,
    /// The timestamps (`None` below TIMESTAMPS level: then only the spans, without events).
    pub events: Option<Arc<Trace>>,
}

/// Builds one finished trace's spans and hands them to the batch processor (on `otel-spans`).
pub(super) fn build(tracer: &SdkTracer, trace: Finished, next_id: &dyn Fn() -> u64) {
    let end = trace.ended;
    let parent_cx = match &trace.parent {
        Some(p) => Context::new().with_remote_span_context(p.0.clone()),
        None => Context::new(),
    };
    let events = trace.events.as_deref().map(Trace::events).unwrap_or_default();
    // A frontend may stamp its first point before sampling (HTTP_RECV_START): the root
    // span starts at whichever is first.
    let start = events.first().map_or(trace.started, |(_, at)| (*at).min(trace.started));
    let own = trace.events.as_deref().and_then(Trace::span);
    // The root starts the trace its model span's ids were chosen in (the client's, when it
    // sent one: then the remote parent gives the root that trace id anyway).
    let mut root = ids::preset(own.map(|i| i.trace_id), None, || {
        tracer
            .span_builder("InferRequest")
            .with_kind(SpanKind::Server)
            .with_start_time(wall(start))
            .start_with_context(tracer, &parent_cx)
    });
    for (name, at) in events.iter().filter(|(n, _)| !REQUEST_POINTS.contains(n) && !COMPUTE_POINTS.contains(n)) {
        root.add_event_with_timestamp(*name, wall(*at), Vec::new());
    }
    let root_cx = Context::new().with_span(root);
    let model = ModelSpan {
        model: &trace.model,
        version: trace.version,
        id: trace.id,
        parent_id: 0,
        request_id: &trace.request_id,
        events: &events,
        children: trace.events.as_deref().map(Trace::children).unwrap_or_default(),
        span_id: own.map(|i| i.span_id),
    };
    model_span(tracer, &root_cx, model, (start, end), next_id);
    root_cx.span().end_with_timestamp(wall(end));
}

/// One model's span under `parent_cx`, its compute span and its composing models' spans.
fn model_span(
    tracer: &SdkTracer,
    parent_cx: &Context,
    m: ModelSpan<'_>,
    bounds: (Instant, Instant),
    next_id: &dyn Fn() -> u64,
) {
    let at = |name: &str| m.events.iter().find(|(n, _)| *n == name).map(|(_, t)| *t);
    let start = at("REQUEST_START").unwrap_or(bounds.0);
    let end = m.events.iter().rev().find(|(n, _)| *n == "REQUEST_END").map(|(_, t)| *t).unwrap_or(bounds.1);
    let mut attributes = vec![
        KeyValue::new("triton.model_name", m.model.to_string()),
        KeyValue::new("triton.model_version", m.version),
        KeyValue::new("triton.trace_id", m.id as i64),
        KeyValue::new("triton.trace_parent_id", m.parent_id as i64),
    ];
    if !m.request_id.is_empty() {
        attributes.push(KeyValue::new("triton.request_id", m.request_id.to_string()));
    }
    let mut span = ids::preset(None, m.span_id, || {
        tracer
            .span_builder(m.model.to_string())
            .with_kind(SpanKind::Server)
            .with_start_time(wall(start))
            .with_attributes(attributes)
            .start_with_context(tracer, parent_cx)
    });
    for (name, at) in m.events.iter().filter(|(n, _)| REQUEST_POINTS.contains(n)) {
        span.add_event_with_timestamp(*name, wall(*at), Vec::new());
    }
    let cx = parent_cx.with_span(span);
    // A model that ran has a compute span, BLS calls or not; an ensemble (its steps ran, not
    // it) has no compute points, so none.
    let compute: Vec<_> = m.events.iter().filter(|(n, _)| COMPUTE_POINTS.contains(n)).collect();
    if let (Some(first), Some(last)) = (compute.first(), compute.last()) {
        let mut span = tracer
            .span_builder("compute")
            .with_kind(SpanKind::Server)
            .with_start_time(wall(first.1))
            .start_with_context(tracer, &cx);
        for (name, at) in &compute {
            span.add_event_with_timestamp(*name, wall(*at), Vec::new());
        }
        span.end_with_timestamp(wall(last.1));
    }
    for (model, child) in &m.children {
        let events = child.events();
        let sub = ModelSpan {
            model,
            version: child.version(),
            id: next_id(),
            parent_id: m.id,
            // Its own: an ensemble step's is the ensemble's, a BLS call's the call's.
            request_id: child.request_id(),
            events: &events,
            children: child.children(),
            span_id: child.span().map(|i| i.span_id),
        };
        model_span(tracer, &cx, sub, (start, end), next_id);
    }
    cx.span().end_with_timestamp(wall(end));
}

struct ModelSpan<'a> {
    model: &'a str,
    version: i64,
    id: u64,
    parent_id: u64,
    request_id: &'a str,
    events: &'a [(&'static str, Instant)],
    children: Vec<(String, std::sync::Arc<Trace>)>,
    /// The span id chosen when the request was sampled (the one its backend was handed).
    span_id: Option<u64>,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use parking_lot::Mutex;
    use tritium_actors::trace::SpanIds;

    use super::*;

    /// Keeps every span it is given.
    #[derive(Debug, Clone, Default)]
    struct Collect(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Collect {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().extend(batch);
            Ok(())
        }
    }

    fn attr(span: &SpanData, key: &str) -> Option<opentelemetry::Value> {
        span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.clone())
    }

    /// A tracer as the exporter makes it (preset ids), its spans kept in memory.
    fn collecting_tracer() -> (Collect, SdkTracerProvider, SdkTracer) {
        let spans = Collect::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .with_id_generator(ids::PresetIds::default())
            .build();
        let tracer = provider.tracer("triton-server");
        (spans, provider, tracer)
    }

    #[test]
    fn nested_ensembles_become_tritons_span_tree() {
        let (spans, _provider, tracer) = collecting_tracer();
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        // outer ensemble → [inner ensemble → [leaf]]; every level stamps its own points.
        let outer = Arc::new(Trace::new());
        // Chosen at sampling, in the client's trace (see `TraceManager::sample`).
        let own = SpanIds { trace_id: 0x0af7651916cd43dd8448eb211c12666c, span_id: 0x1122334455667788 };
        outer.set_span(own);
        // The instance running an ensemble stamps compute points on it as on any request.
        for (name, us) in [("HTTP_RECV_START", 0), ("REQUEST_START", 10), ("QUEUE_START", 11), ("COMPUTE_START", 12)] {
            outer.record_at(name, at(us));
        }
        outer.set_ensemble();
        let inner = outer.child("inner");
        inner.set_ensemble();
        inner.set_version(2);
        let leaf = inner.child("leaf");
        leaf.set_version(7);
        leaf.set_request_id("r");
        for (name, us) in [("REQUEST_START", 20), ("QUEUE_START", 21), ("REQUEST_END", 60)] {
            inner.record_at(name, at(us));
        }
        for (name, us) in [
            ("REQUEST_START", 30),
            ("QUEUE_START", 31),
            ("COMPUTE_START", 40),
            ("COMPUTE_END", 50),
            ("REQUEST_END", 55),
        ] {
            leaf.record_at(name, at(us));
        }
        outer.record_at("REQUEST_END", at(70));
        outer.record_at("HTTP_SEND_END", at(80));
        let parent = RemoteParent::from_headers(Some(b"00-0af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-01"), None);
        let finished = Finished {
            id: 5,
            model: "outer".into(),
            version: 1,
            request_id: "r".into(),
            started: at(5),
            ended: at(90),
            parent: parent.map(Box::new),
            events: Some(outer),
        };
        let next = std::sync::atomic::AtomicU64::new(100);
        let leaf_ids = leaf.span().unwrap();
        build(&tracer, finished, &|| next.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let spans = spans.0.lock().clone();
        let named = |n: &str| spans.iter().find(|s| s.name == n).unwrap_or_else(|| panic!("no span {n}"));
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        // The ensembles have no compute span; the leaf has one.
        assert_eq!(spans.len(), 5, "{names:?}");
        let (root, outer, inner, leaf, compute) =
            (named("InferRequest"), named("outer"), named("inner"), named("leaf"), named("compute"));
        assert_eq!(root.span_context.trace_id().to_string(), "0af7651916cd43dd8448eb211c12666c");
        // The model spans have the ids their backends were handed (`Trace::context`).
        assert_eq!(outer.span_context.span_id().to_string(), "1122334455667788");
        assert_eq!(leaf.span_context.span_id(), SpanId::from(leaf_ids.span_id));
        assert_eq!(root.parent_span_id.to_string(), "b7ad6b7169242424");
        assert!(root.parent_span_is_remote);
        for (child, parent) in [(outer, root), (inner, outer), (leaf, inner), (compute, leaf)] {
            assert_eq!(child.parent_span_id, parent.span_context.span_id(), "{} under {}", child.name, parent.name);
            assert_eq!(child.span_context.trace_id(), root.span_context.trace_id());
        }
        let events = |s: &SpanData| s.events.events.iter().map(|e| e.name.to_string()).collect::<Vec<_>>();
        assert_eq!(events(root), ["HTTP_RECV_START", "HTTP_SEND_END"]);
        assert_eq!(events(outer), ["REQUEST_START", "QUEUE_START", "REQUEST_END"]);
        assert_eq!(events(compute), ["COMPUTE_START", "COMPUTE_END"]);
        // Root from its first point to the end; model spans from REQUEST_START to REQUEST_END.
        assert_eq!((root.start_time, root.end_time), (wall(at(0)), wall(at(90))));
        assert_eq!((leaf.start_time, leaf.end_time), (wall(at(30)), wall(at(55))));
        assert_eq!((compute.start_time, compute.end_time), (wall(at(40)), wall(at(50))));
        // Triton's attributes: a child's parent id is its parent's trace id.
        assert_eq!(attr(outer, "triton.trace_id"), Some(5i64.into()));
        assert_eq!(attr(outer, "triton.trace_parent_id"), Some(0i64.into()));
        assert_eq!(attr(inner, "triton.trace_id"), Some(100i64.into()));
        assert_eq!(attr(inner, "triton.trace_parent_id"), Some(5i64.into()));
        assert_eq!(attr(leaf, "triton.trace_parent_id"), Some(100i64.into()));
        assert_eq!(attr(leaf, "triton.model_version"), Some(7i64.into()));
        assert_eq!(attr(inner, "triton.model_name"), Some("inner".into()));
        assert_eq!(attr(leaf, "triton.request_id"), Some("r".into()));
        assert!(attr(inner, "triton.request_id").is_none(), "a child's request id is its own");
        assert!(attr(root, "triton.model_name").is_none());
    }

    #[test]
    fn a_model_that_makes_bls_calls_has_its_compute_span_and_its_calls_under_it() {
        let (spans, _provider, tracer) = collecting_tracer();
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let caller = Arc::new(Trace::new());
        caller.set_span(SpanIds::new(None));
        for (name, us) in [("REQUEST_START", 10), ("QUEUE_START", 11), ("COMPUTE_START", 12)] {
            caller.record_at(name, at(us));
        }
        let call = caller.child("add_sub");
        for (name, us) in [("REQUEST_START", 20), ("COMPUTE_START", 22), ("COMPUTE_END", 30), ("REQUEST_END", 31)] {
            call.record_at(name, at(us));
        }
        for (name, us) in [("COMPUTE_END", 40), ("REQUEST_END", 41)] {
            caller.record_at(name, at(us));
        }
        let finished = Finished {
            id: 1,
            model: "bls".into(),
            version: 1,
            request_id: String::new(),
            started: at(0),
            ended: at(50),
            parent: None,
            events: Some(caller.clone()),
        };
        build(&tracer, finished, &|| 2);
        let spans = spans.0.lock().clone();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(spans.len(), 5, "{names:?}");
        let bls = spans.iter().find(|s| s.name == "bls").unwrap();
        let ids = caller.span().unwrap();
        // Without a client's context the trace is the one chosen at sampling.
        assert_eq!(bls.span_context.trace_id(), TraceId::from(ids.trace_id));
        assert_eq!(bls.span_context.span_id(), SpanId::from(ids.span_id));
        let computes: Vec<_> = spans.iter().filter(|s| s.name == "compute").collect();
        assert_eq!(computes.len(), 2);
        let under = |s: &SpanData| {
            spans.iter().find(|p| p.span_context.span_id() == s.parent_span_id).unwrap().name.to_string()
        };
        let mut parents: Vec<String> = computes.iter().map(|c| under(c)).collect();
        parents.sort();
        assert_eq!(parents, ["add_sub", "bls"]);
        assert_eq!(under(spans.iter().find(|s| s.name == "add_sub").unwrap()), "bls");
    }
}
