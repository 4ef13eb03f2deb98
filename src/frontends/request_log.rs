//! The span every inference request's log lines sit in, so that `--log-verbose 1` lines carry
//! the request's id (the client's, or one made up when it sent none) and its model.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use tritium_actors::InferRequest;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn log_id(id: &str) -> String {
    if id.is_empty() {
        format!("tritium-{}", NEXT_ID.fetch_add(1, Relaxed))
    } else {
        id.to_string()
    }
}

/// A debug-level span: free (never built) unless the verbose level is 1 or more.
pub fn request_span(request: &InferRequest) -> tracing::Span {
    tracing::debug_span!("request", id = %log_id(&request.id), model = %request.model)
}
