//! Model warmup (`model_warmup`), as Triton runs it: on every instance, after its backend is
//! created and before the supervisor hears it is ready, each sample's `batch_size` requests are
//! executed together `count` times. The first failure ends the warmup and the instance's load
//! with Triton's text ("failed to run warmup sample '<name>': <error>; "). At verbose 1 the log
//! says which sample runs, in Triton's words. Warmup executions count in no statistic and no
//! figure, as issue 21 asks; Triton 2.51 itself does count them (its backends report them like
//! any execution: a model warmed with 2 runs of 2 requests shows 4 more successes, inferences
//! and 2 more executions, as recorded in docs/triton-reference.md).

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::backend::{Backend, BatchInput};
use crate::batch::merge_inputs;
use crate::error::{Error, Result};
use crate::policy::{ModelPolicy, WarmupSample};
use crate::request::InferRequest;

/// Runs every sample of `policy.warmup` on `backend` (the instance `instance`).
pub(crate) fn warm_up(policy: &ModelPolicy, instance: &str, backend: &mut dyn Backend) -> Result<()> {
    for sample in &policy.warmup {
        if sample.batch_size == 0 {
            tracing::debug!("Skipping batch 0 warmup sample '{}'", sample.name);
            continue;
        }
        tracing::debug!("Generating warmup sample data for '{}'", sample.name);
        for iteration in 1..=sample.count.max(1) {
            tracing::debug!(
                "model '{}' instance {instance} is running warmup sample '{}' for iteration {iteration}",
                policy.name,
                sample.name
            );
            if let Err(e) = run_sample(policy, sample, backend) {
                tracing::debug!(
                    "model '{}' instance {instance} failed to run warmup sample '{}'",
                    policy.name,
                    sample.name
                );
                return Err(Error::new(
                    e.kind,
                    format!("failed to run warmup sample '{}': {}; ", sample.name, e.message),
                ));
            }
        }
    }
    Ok(())
}

/// One execution of a sample: its requests merged into one batch when the model batches, else
/// each request alone (a model without batching takes one request per execution).
fn run_sample(policy: &ModelPolicy, sample: &WarmupSample, backend: &mut dyn Backend) -> Result<()> {
    let request = || {
        let mut r = InferRequest::new(policy.name.clone(), sample.inputs.clone());
        r.id = format!("warmup:{}", sample.name);
        r.version = Some(policy.version);
        r
    };
    let groups: Vec<Vec<InferRequest>> = if policy.batches() {
        vec![(0..sample.batch_size).map(|_| request()).collect()]
    } else {
        (0..sample.batch_size).map(|_| vec![request()]).collect()
    };
    for requests in groups {
        let inputs: Vec<&[crate::tensor::Tensor]> = requests.iter().map(|r| r.inputs.as_slice()).collect();
        let merged = merge_inputs(&inputs)?;
        let refs: Vec<&InferRequest> = requests.iter().collect();
        let batch_size = if policy.batches() { requests.len() } else { 1 };
        let input = BatchInput {
            inputs: &merged,
            outputs: &[],
            batch_size,
            request: (refs.len() == 1).then(|| refs[0]),
            requests: &refs,
            // Nobody waits on a warmup request: it is never cancelled.
            cancelled: &[],
            early: &[],
        };
        let ran = catch_unwind(AssertUnwindSafe(|| {
            if policy.decoupled {
                // The responses are dropped: warmup does not check them (nor does Triton).
                backend.execute_decoupled(input, &mut |_| Ok(()))
            } else {
                backend.execute(input).map(drop)
            }
        }));
        match ran {
            Ok(r) => r?,
            Err(p) => {
                let why = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                return Err(Error::internal(format!("the backend panicked: {why}")));
            }
        }
    }
    Ok(())
}
