//! Between the engine's types and the backend API host's: a batch becomes one request, the
//! backend's output tensors become engine tensors, and Triton's error codes become kinds.

use std::time::Duration;

use tritium_actors::{
    BatchInput, CorrelationId, DataType, Error, ErrorKind, InferRequest, ParamValue, ResponseKind, Result, Tensor,
};
use tritium_ffi::backend_api::{
    abi, HostError, HostParam, HostRequest, HostTensor, HostTrace, ReportedStats, ResponseOutcome, ResponseReport,
};

fn host_tensors(tensors: &[Tensor]) -> Vec<HostTensor> {
    tensors
        .iter()
        .map(|t| HostTensor {
            name: t.name.clone(),
            datatype: t.datatype.as_str().to_string(),
            shape: t.shape.clone(),
            data: t.data.clone(),
        })
        .collect()
}

/// The requests the backend sees for a batch: each request of the batch with its own tensors,
/// id, parameters, sequence flags and timeout, asking for `outputs` (the batch's union, so that
/// their answers line up); or, when the caller gave no requests, the merged batch as one.
pub fn requests(batch: &BatchInput<'_>, outputs: &[String]) -> Vec<HostRequest> {
    if batch.requests.len() > 1 {
        return batch
            .requests
            .iter()
            .map(|req| {
                from_request(
                    HostRequest { inputs: host_tensors(&req.inputs), outputs: outputs.to_vec(), ..Default::default() },
                    Some(req),
                )
            })
            .collect();
    }
    let r = HostRequest { inputs: host_tensors(batch.inputs), outputs: outputs.to_vec(), ..Default::default() };
    vec![from_request(r, batch.request)]
}

/// Adds a request's id, parameters, sequence flags and timeout.
fn from_request(mut r: HostRequest, request: Option<&InferRequest>) -> HostRequest {
    if let Some(req) = request {
        r.id = req.id.clone();
        r.timeout_us = req.timeout_us;
        // A traced request's trace goes to the backend (opaque to it), and comes back on the
        // requests it makes with it (BLS), whose traces become its children.
        r.trace = req.trace.clone().map(|t| HostTrace { context: t.context(), trace: t });
        r.parameters = req.parameters.iter().map(|(k, v)| (k.clone(), host_param(v))).collect();
        if let Some(seq) = &req.sequence {
            match &seq.id {
                CorrelationId::U64(n) => r.correlation_id = *n,
                CorrelationId::Str(s) => r.correlation_text = Some(s.clone()),
            }
            if seq.start {
                r.flags |= abi::REQUEST_FLAG_SEQUENCE_START;
            }
            if seq.end {
                r.flags |= abi::REQUEST_FLAG_SEQUENCE_END;
            }
        }
    }
    r
}

/// The outputs of several requests' responses as one batch: each output's rows, request after
/// request (BYTES elements are self-delimiting, so their bytes concatenate too).
pub fn concat(model: &str, per_request: Vec<Vec<Tensor>>) -> Result<Vec<Tensor>> {
    let mut it = per_request.into_iter();
    let Some(first) = it.next() else { return Ok(Vec::new()) };
    let mut merged: Vec<(Tensor, Vec<bytes::Bytes>)> = first.into_iter().map(|t| (t.clone(), vec![t.data])).collect();
    for outputs in it {
        if outputs.len() != merged.len() {
            return Err(Error::internal(format!("model '{model}': the responses of one batch have different outputs")));
        }
        for t in outputs {
            let Some((m, parts)) = merged.iter_mut().find(|(m, _)| m.name == t.name) else {
                return Err(Error::internal(format!(
                    "model '{model}': output '{}' is missing from a response of the batch",
                    t.name
                )));
            };
            if t.datatype != m.datatype
                || t.shape.len() != m.shape.len()
                || t.shape.get(1..) != m.shape.get(1..)
                || t.shape.is_empty()
            {
                return Err(Error::internal(format!(
                    "model '{model}': output '{}' of the batch's responses cannot be joined: {:?} {} and {:?} {}",
                    t.name, m.shape, m.datatype, t.shape, t.datatype
                )));
            }
            m.shape[0] += t.shape[0];
            parts.push(t.data);
        }
    }
    Ok(merged
        .into_iter()
        .map(|(mut t, parts)| {
            t.data = if parts.len() == 1 { parts.into_iter().next().expect("one part") } else { parts.concat().into() };
            t
        })
        .collect())
}

/// An output tensor of the backend as an engine tensor.
pub fn tensor(t: HostTensor) -> Result<Tensor> {
    let datatype = DataType::parse(&t.datatype).ok_or_else(|| {
        Error::internal(format!("output '{}' has datatype '{}', which Tritium does not know", t.name, t.datatype))
    })?;
    Ok(Tensor { name: t.name, datatype, shape: t.shape, data: t.data })
}

/// Triton's error code as the engine's kind, keeping the backend's message.
pub fn error(e: HostError) -> Error {
    let kind = match e.code {
        abi::ERROR_INVALID_ARG => ErrorKind::InvalidArgument,
        abi::ERROR_NOT_FOUND => ErrorKind::NotFound,
        abi::ERROR_UNAVAILABLE => ErrorKind::Unavailable,
        abi::ERROR_UNSUPPORTED => ErrorKind::Unsupported,
        abi::ERROR_ALREADY_EXISTS => ErrorKind::AlreadyExists,
        abi::ERROR_CANCELLED => ErrorKind::Cancelled,
        _ => ErrorKind::Internal,
    };
    Error::new(kind, e.message)
}

/// As `error`, for failures at load: the message begins with the code's name, as Triton
/// reports a backend's load failure (`Internal: SyntaxError: …`).
pub fn error_in(e: HostError) -> Error {
    let message = format!("{}: {}", e.code_name(), e.message);
    error(HostError { message, ..e })
}

/// The compute times of a backend's own report: input from the execution's start to the
/// compute's, infer the compute, output from the compute's end to the execution's.
pub fn times(r: &ReportedStats) -> tritium_actors::ComputeTimes {
    let ns = |from: u64, to: u64| Duration::from_nanos(to.saturating_sub(from));
    tritium_actors::ComputeTimes {
        queue: Duration::ZERO,
        compute_input: ns(r.exec_start_ns, r.compute_start_ns),
        compute_infer: ns(r.compute_start_ns, r.compute_end_ns),
        compute_output: ns(r.compute_end_ns, r.exec_end_ns),
    }
}

/// A response the backend reported, as the engine's statistics take it.
pub fn response_report(r: ResponseReport) -> tritium_actors::ResponseReport {
    let kind = match r.outcome {
        ResponseOutcome::Success => ResponseKind::Success,
        ResponseOutcome::Empty => ResponseKind::Empty,
        ResponseOutcome::Cancel => ResponseKind::Cancel,
        ResponseOutcome::Fail => ResponseKind::Fail,
    };
    tritium_actors::ResponseReport {
        index: r.index,
        kind,
        start_ns: r.response_start_ns,
        compute_output_start_ns: r.compute_output_start_ns,
        end_ns: r.response_end_ns,
    }
}

/// A parameter as the backend API types it (an unsigned one as INT: Triton's parameters have
/// no unsigned type).
pub fn host_param(v: &ParamValue) -> HostParam {
    match v {
        ParamValue::Bool(b) => HostParam::Bool(*b),
        ParamValue::Int(i) => HostParam::Int(*i),
        ParamValue::UInt(u) => HostParam::Int(*u as i64),
        ParamValue::Double(d) => HostParam::Double(*d),
        ParamValue::Str(s) => HostParam::Str(s.clone()),
    }
}

/// One line of a model's memory usage, as the statistics show it.
pub fn memory_usage(m: tritium_ffi::backend_api::MemoryUsage) -> tritium_actors::MemoryUsage {
    tritium_actors::MemoryUsage { kind: m.kind.to_string(), id: m.id, byte_size: m.byte_size }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backends_report_splits_into_input_infer_and_output() {
        let r = ReportedStats {
            success: true,
            batch_size: 2,
            exec_start_ns: 1_000,
            compute_start_ns: 1_500,
            compute_end_ns: 4_500,
            exec_end_ns: 4_700,
        };
        let t = times(&r);
        assert_eq!(
            (t.compute_input, t.compute_infer, t.compute_output),
            (Duration::from_nanos(500), Duration::from_nanos(3_000), Duration::from_nanos(200))
        );
        // Timestamps out of order (a backend's mistake) give zero, never an overflow.
        let t = times(&ReportedStats { compute_start_ns: 500, ..r });
        assert_eq!(t.compute_input, Duration::ZERO);
    }

    fn t(shape: Vec<i64>, data: &[u8]) -> Tensor {
        Tensor { name: "O".into(), datatype: DataType::U8, shape, data: bytes::Bytes::copy_from_slice(data) }
    }

    #[test]
    fn responses_of_a_batch_join_row_after_row() {
        let joined = concat("m", vec![vec![t(vec![1, 2], &[1, 2])], vec![t(vec![2, 2], &[3, 4, 5, 6])]]).unwrap();
        assert_eq!(joined, vec![t(vec![3, 2], &[1, 2, 3, 4, 5, 6])]);
        let err = concat("m", vec![vec![t(vec![1, 2], &[1, 2])], vec![t(vec![1, 3], &[3, 4, 5])]]).unwrap_err();
        assert!(err.message.contains("cannot be joined"), "{}", err.message);
    }

    #[test]
    fn every_triton_code_keeps_its_kind() {
        let kind = |code| error(HostError { code, message: "m".into() }).kind;
        assert_eq!(kind(abi::ERROR_INVALID_ARG), ErrorKind::InvalidArgument);
        assert_eq!(kind(abi::ERROR_NOT_FOUND), ErrorKind::NotFound);
        assert_eq!(kind(abi::ERROR_UNAVAILABLE), ErrorKind::Unavailable);
        assert_eq!(kind(abi::ERROR_UNSUPPORTED), ErrorKind::Unsupported);
        assert_eq!(kind(abi::ERROR_ALREADY_EXISTS), ErrorKind::AlreadyExists);
        assert_eq!(kind(abi::ERROR_CANCELLED), ErrorKind::Cancelled);
        assert_eq!(kind(abi::ERROR_INTERNAL), ErrorKind::Internal);
        assert_eq!(kind(abi::ERROR_UNKNOWN), ErrorKind::Internal);
    }
}
