//! Checks a request against its model before it is queued, so that every frontend rejects the
//! same bad input with the same message, and a backend only ever sees well-formed batches.

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::policy::{IoSpec, ModelPolicy};
use crate::request::InferRequest;

fn dims_match(expected: &[i64], got: &[i64]) -> bool {
    expected.len() == got.len() && expected.iter().zip(got).all(|(&e, &g)| e == -1 || e == g)
}

fn fmt_shape(s: &[i64]) -> String {
    let parts: Vec<String> = s.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(","))
}

/// Validates `request` against `policy` and applies `reshape`. Returns an `InvalidArgument`
/// error naming the model and the tensor on the first problem found.
pub fn validate_request(policy: &ModelPolicy, request: &mut InferRequest) -> Result<()> {
    let model = &policy.name;
    let mut seen = HashSet::new();
    let mut batch: Option<i64> = None;
    for tensor in &mut request.inputs {
        if !seen.insert(tensor.name.clone()) {
            return Err(Error::invalid(format!("input '{}' already exists in request", tensor.name)));
        }
        let spec: &IoSpec = policy.input(&tensor.name).ok_or_else(|| {
            Error::invalid(format!("unexpected inference input '{}' for model '{model}'", tensor.name))
        })?;
        if tensor.datatype != spec.datatype {
            return Err(Error::invalid(format!(
                "inference input '{}' data-type is '{}', but model '{model}' expects '{}'",
                tensor.name, tensor.datatype, spec.datatype
            )));
        }
        let body: &[i64] = if policy.batches() && !spec.is_shape_tensor {
            let Some((&b, rest)) = tensor.shape.split_first() else {
                return Err(Error::invalid(format!(
                    "input '{}' for model '{model}' has no batch dimension; expected shape {}",
                    tensor.name,
                    fmt_shape(&[&[-1], spec.dims.as_slice()].concat())
                )));
            };
            if b < 1 || b as u64 > policy.max_batch_size as u64 {
                return Err(Error::invalid(format!(
                    "inference request batch-size must be <= {} for '{model}', got {b} for input '{}'",
                    policy.max_batch_size, tensor.name
                )));
            }
            match batch {
                None => batch = Some(b),
                Some(prev) if prev != b => {
                    return Err(Error::invalid(format!(
                    "input '{}' has batch size {b} but an earlier input of the request to model '{model}' has {prev}",
                    tensor.name
                )))
                }
                _ => {}
            }
            rest
        } else {
            &tensor.shape
        };
        if body.iter().any(|&d| d < 0) {
            return Err(Error::invalid(format!(
                "input '{}' for model '{model}' has a negative dimension in shape {}",
                tensor.name,
                fmt_shape(&tensor.shape)
            )));
        }
        if !dims_match(&spec.dims, body) {
            let expected = if policy.batches() && !spec.is_shape_tensor {
                fmt_shape(&[&[-1], spec.dims.as_slice()].concat())
            } else {
                fmt_shape(&spec.dims)
            };
            return Err(Error::invalid(format!(
                "unexpected shape for input '{}' for model '{model}'. Expected {expected}, got {}",
                tensor.name,
                fmt_shape(&tensor.shape)
            )));
        }
        match tensor.datatype.element_size() {
            // Triton's words for a fixed-size tensor whose data disagrees with its shape.
            Some(size) => {
                let want = tensor.element_count()?.checked_mul(size).ok_or_else(|| {
                    Error::invalid(format!("input '{}' for model '{model}' has too many elements", tensor.name))
                })?;
                if tensor.data.len() != want {
                    return Err(Error::invalid(format!(
                        "input byte size mismatch for input '{}' for model '{model}'. Expected {want}, got {}",
                        tensor.name,
                        tensor.data.len()
                    )));
                }
            }
            None => tensor.check_size().map_err(|e| Error::invalid(format!("{} (model '{model}')", e.message)))?,
        }
        if let Some(reshape) = &spec.reshape {
            let mut shape = Vec::with_capacity(reshape.len() + 1);
            if policy.batches() {
                shape.push(tensor.shape[0]);
            }
            // A reshape may hold -1 where the dims are variable: take the size from the data.
            let known: i64 = reshape.iter().filter(|&&d| d >= 0).product();
            let elements = tensor.element_count()? as i64 / shape.first().copied().unwrap_or(1).max(1);
            for &d in reshape {
                shape.push(if d < 0 && known > 0 { elements / known } else { d });
            }
            tensor.shape = shape;
        }
    }
    for spec in &policy.inputs {
        if !spec.optional && !seen.contains(&spec.name) {
            return Err(Error::invalid(format!(
                "expected {} inputs but got {} inputs for model '{model}'. Got input(s) {:?}, but missing required input(s) ['{}']",
                policy.inputs.iter().filter(|i| !i.optional).count(),
                request.inputs.len(),
                request.inputs.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
                spec.name
            )));
        }
    }
    let mut wanted = HashSet::new();
    for out in &request.outputs {
        if policy.output(&out.name).is_none() {
            return Err(Error::invalid(format!("unexpected inference output '{}' for model '{model}'", out.name)));
        }
        if !wanted.insert(out.name.as_str()) {
            return Err(Error::invalid(format!(
                "output '{}' is requested more than once for model '{model}'",
                out.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::policy::{SchedulerPolicy, DEFAULT_QUEUE_CAPACITY};
    use crate::request::RequestedOutput;
    use crate::tensor::{DataType, Tensor};

    fn policy(max_batch_size: usize) -> ModelPolicy {
        ModelPolicy {
            name: "m".into(),
            version: 1,
            max_batch_size,
            inputs: vec![IoSpec::new("IN", DataType::F32, vec![-1, 2])],
            outputs: vec![IoSpec::new("OUT", DataType::F32, vec![-1, 2])],
            instances: vec![],
            scheduler: SchedulerPolicy::Direct,
            decoupled: false,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
        }
    }

    fn f32s(name: &str, shape: Vec<i64>) -> Tensor {
        let n: i64 = shape.iter().product();
        Tensor::new(name, DataType::F32, shape, Bytes::from(vec![0u8; n.max(0) as usize * 4]))
    }

    fn req(inputs: Vec<Tensor>) -> InferRequest {
        InferRequest::new("m", inputs)
    }

    #[test]
    fn accepts_wildcard_dims_with_batch() {
        validate_request(&policy(4), &mut req(vec![f32s("IN", vec![3, 5, 2])])).unwrap();
        validate_request(&policy(0), &mut req(vec![f32s("IN", vec![5, 2])])).unwrap();
    }

    #[test]
    fn rejects_batch_larger_than_max_batch_size() {
        let e = validate_request(&policy(4), &mut req(vec![f32s("IN", vec![5, 1, 2])])).unwrap_err();
        assert!(e.message.contains("batch-size must be <= 4"), "{e}");
    }

    #[test]
    fn rejects_wrong_shape_datatype_unknown_and_missing() {
        let e = validate_request(&policy(0), &mut req(vec![f32s("IN", vec![5, 3])])).unwrap_err();
        assert!(e.message.contains("unexpected shape for input 'IN'"), "{e}");
        let mut t = f32s("IN", vec![1, 2]);
        t.datatype = DataType::I32;
        let e = validate_request(&policy(0), &mut req(vec![t])).unwrap_err();
        assert!(e.message.contains("expects 'FP32'"), "{e}");
        let e = validate_request(&policy(0), &mut req(vec![f32s("X", vec![1, 2])])).unwrap_err();
        assert!(e.message.contains("unexpected inference input 'X'"), "{e}");
        let e = validate_request(&policy(0), &mut req(vec![])).unwrap_err();
        assert!(e.message.contains("missing required input(s) ['IN']"), "{e}");
    }

    #[test]
    fn rejects_byte_size_mismatch_and_unknown_output() {
        let mut t = f32s("IN", vec![1, 2]);
        t.data = Bytes::from(vec![0u8; 4]);
        let e = validate_request(&policy(0), &mut req(vec![t])).unwrap_err();
        assert!(e.message.contains("input byte size mismatch for input 'IN' for model"), "{e}");
        assert!(e.message.contains("Expected 8, got 4"), "{e}");
        let mut r = req(vec![f32s("IN", vec![1, 2])]);
        r.outputs.push(RequestedOutput { name: "NOPE".into(), class_count: 0 });
        let e = validate_request(&policy(0), &mut r).unwrap_err();
        assert!(e.message.contains("unexpected inference output 'NOPE'"), "{e}");
    }

    #[test]
    fn applies_reshape() {
        let mut p = policy(4);
        p.inputs[0].dims = vec![4];
        p.inputs[0].reshape = Some(vec![2, 2]);
        let mut r = req(vec![f32s("IN", vec![3, 4])]);
        validate_request(&p, &mut r).unwrap();
        assert_eq!(r.inputs[0].shape, vec![3, 2, 2]);
    }
}
