//! Between the engine's types and the backend API host's: a batch becomes one request, the
//! backend's output tensors become engine tensors, and Triton's error codes become kinds.

use tritium_actors::{BatchInput, CorrelationId, DataType, Error, ErrorKind, ParamValue, Result, Tensor};
use tritium_ffi::backend_api::{abi, HostError, HostParam, HostRequest, HostTensor};

/// The request the backend sees for a batch: the batch's tensors, and the single request's id,
/// parameters, sequence flags and timeout when the batch holds one.
pub fn request(batch: &BatchInput<'_>) -> HostRequest {
    let mut r = HostRequest {
        inputs: batch
            .inputs
            .iter()
            .map(|t| HostTensor {
                name: t.name.clone(),
                datatype: t.datatype.as_str().to_string(),
                shape: t.shape.clone(),
                data: t.data.clone(),
            })
            .collect(),
        outputs: batch.outputs.to_vec(),
        ..Default::default()
    };
    if let Some(req) = batch.request {
        r.id = req.id.clone();
        r.timeout_us = req.timeout_us;
        r.parameters = req
            .parameters
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    ParamValue::Bool(b) => HostParam::Bool(*b),
                    ParamValue::Int(i) => HostParam::Int(*i),
                    ParamValue::UInt(u) => HostParam::Int(*u as i64),
                    ParamValue::Double(d) => HostParam::Double(*d),
                    ParamValue::Str(s) => HostParam::Str(s.clone()),
                };
                (k.clone(), v)
            })
            .collect();
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

/// As `error`, for failures at load: the message names the model.
pub fn error_in(model: &str, e: HostError) -> Error {
    let message = format!("model '{model}': {}", e.message);
    error(HostError { message, ..e })
}

#[cfg(test)]
mod tests {
    use super::*;

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
