//! How an instance runs a decoupled model's batch: each request streams its own responses as the
//! backend emits them (`Backend::execute_decoupled_each`) and ends with its final response — the
//! one the backend sent with the final flag, or an empty one once the backend returns — or with
//! its error; a request the backend handed back to run again (an iterative sequence) owes no
//! final response yet and goes back to the scheduler. A batch holds several requests only for a
//! backend whose factory says it takes them (`BackendFactory::decoupled_batches`, Triton's
//! backend API), as Triton batches a decoupled model's requests.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::{panic_message, record_reported_success, InstanceActor};
use crate::backend::{self, Backend, BatchInput};
use crate::error::{Error, Result};
use crate::protocol::Pending;
use crate::stats::{ComputeTimes, FailureReason, RequestTimes};
use crate::tensor::Tensor;
use crate::trace;

/// What one request of the batch has sent so far.
#[derive(Default)]
struct Sent {
    first: bool,
    last: Option<Instant>,
    /// The outputs the backend sent with its final flag: they go out as the final response.
    final_outputs: Option<Vec<Tensor>>,
}

/// Runs a decoupled batch; returns the requests the backend handed back to run again, or
/// `Err(reason)` when the backend panicked (every request answered).
pub(crate) fn execute(
    env: &InstanceActor,
    backend: &mut dyn Backend,
    live: Vec<Pending>,
    input: BatchInput<'_>,
    compute_start: Instant,
    input_end: Instant,
) -> std::result::Result<Vec<Pending>, String> {
    let policy = &env.policy;
    let stats = &env.stats;
    let mut sent: Vec<Sent> = live.iter().map(|_| Sent::default()).collect();
    let mut emit = |i: usize, mut outputs: Vec<Tensor>, is_final: bool| -> Result<()> {
        let (Some(p), Some(s)) = (live.get(i), sent.get_mut(i)) else {
            return Err(Error::internal(format!("a response to request {i} of a batch of {}", live.len())));
        };
        // A response that carries the state outputs sets the sequence's next state (kept before
        // the response goes out, as for a non-decoupled model): a decoupled sequence model sends
        // its state with its last response of the turn.
        if let Some(ticket) = &p.sequence {
            ticket.absorb(&mut outputs);
        }
        if is_final {
            s.final_outputs = Some(outputs);
            return Ok(());
        }
        let now = Instant::now();
        if !s.first {
            s.first = true;
            stats.record_first_response(now.saturating_duration_since(p.request.received));
        }
        p.reply.send_partial(backend::response(&p.request.id, &policy.name, policy.version, outputs, false))?;
        // Only responses that went out count in the response timing.
        match s.last {
            None => stats.responses.first.record_us(now.saturating_duration_since(p.request.received)),
            Some(last) => stats.responses.between.record_us(now.saturating_duration_since(last)),
        }
        s.last = Some(now);
        Ok(())
    };
    let result = catch_unwind(AssertUnwindSafe(|| backend.execute_decoupled_each(input, &mut emit)));
    let infer_end = Instant::now();
    stats.record_execution(live.len() as u64, input_end - compute_start, infer_end - input_end, Duration::ZERO);
    let again = if matches!(result, Ok(Ok(_))) { backend.take_rescheduled() } else { Vec::new() };
    let n = live.len();
    let (failures, panicked) = match result {
        Ok(Ok(failures)) if failures.len() == n => (failures, None),
        Ok(Ok(failures)) => {
            let e = Error::internal(format!(
                "instance '{}' answered {} of the batch's {n} requests",
                env.spec.name,
                failures.len()
            ));
            (vec![Some(e); n], None)
        }
        Ok(Err(e)) => (vec![Some(e); n], None),
        Err(panic) => {
            let reason = format!("instance '{}' panicked: {}", env.spec.name, panic_message(&*panic));
            (vec![Some(Error::internal(reason.clone())); n], Some(reason))
        }
    };
    let compute = ComputeTimes {
        queue: Duration::ZERO,
        compute_input: input_end - compute_start,
        compute_infer: infer_end - input_end,
        compute_output: Duration::ZERO,
    };
    let mut rescheduled = Vec::new();
    for (i, ((p, s), failure)) in live.into_iter().zip(sent).zip(failures).enumerate() {
        if let Some(e) = failure {
            p.fail_as(stats, e, FailureReason::Backend);
            continue;
        }
        if again.contains(&i) {
            record_reported_success(stats, &p, compute_start, compute);
            rescheduled.push(p);
            continue;
        }
        stats.record_success(&RequestTimes {
            total: p.request.received.elapsed(),
            queue: compute_start.saturating_duration_since(p.enqueued),
            compute_input: compute.compute_input,
            compute_infer: compute.compute_infer,
            compute_output: Duration::ZERO,
            batch_size: p.batch_size as u64,
        });
        stats.pending.fetch_sub(1, Relaxed);
        if !s.first {
            stats.record_first_response(p.request.received.elapsed());
        }
        if !p.reply.is_closed() {
            match s.last {
                // The final flag is the request's first (and only) response.
                None => stats.responses.first.record_us(p.request.received.elapsed()),
                // A final response with outputs counts as one more response.
                Some(last) if s.final_outputs.is_some() => stats.responses.between.record_us(last.elapsed()),
                Some(_) => {}
            }
        }
        if let Some(trace) = &p.request.trace {
            trace.record_at(trace::COMPUTE_OUTPUT_START, infer_end);
            trace.record_at(trace::COMPUTE_END, infer_end);
        }
        let outputs = s.final_outputs.unwrap_or_default();
        p.reply.send(Ok(backend::response(&p.request.id, &policy.name, policy.version, outputs, true)));
    }
    match panicked {
        Some(reason) => Err(reason),
        None => Ok(rescheduled),
    }
}
