//! Span ids chosen before the span is built. A traced request's model span gets its ids when
//! the request is sampled (`tritium_actors::trace::SpanIds`), so the backend can be handed that
//! span's W3C context while the request runs; the spans are built later, on the span thread.
//! The SDK takes ids only from the provider's `IdGenerator`, so this one hands out the ids set
//! for the next span built on this thread (`preset`), and random ones otherwise.

use std::cell::Cell;

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

thread_local! {
    static NEXT_TRACE: Cell<Option<TraceId>> = const { Cell::new(None) };
    static NEXT_SPAN: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// The tracer provider's id generator.
#[derive(Debug, Default)]
pub struct PresetIds(RandomIdGenerator);

impl IdGenerator for PresetIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE.with(Cell::take).unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_SPAN.with(Cell::take).unwrap_or_else(|| self.0.new_span_id())
    }
}

/// Runs `start` (which starts one span) with `ids` as the ids the generator hands out: the span
/// id, and the trace id when the span starts a trace (a root without a remote parent). What
/// `start` did not take is cleared, so it never reaches another span.
pub fn preset<T>(trace_id: Option<u128>, span_id: Option<u64>, start: impl FnOnce() -> T) -> T {
    NEXT_TRACE.with(|c| c.set(trace_id.map(TraceId::from)));
    NEXT_SPAN.with(|c| c.set(span_id.map(SpanId::from)));
    let out = start();
    NEXT_TRACE.with(|c| c.set(None));
    NEXT_SPAN.with(|c| c.set(None));
    out
}
