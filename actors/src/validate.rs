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

/// Triton's prefix of a request's own errors: `[request id: <id>] `, `<id_unknown>` without one.
pub fn request_tag(id: &str) -> String {
    format!("[request id: {}] ", if id.is_empty() { "<id_unknown>" } else { id })
}

/// Names as Triton lists them in its input-count error: `['A','B']`.
fn fmt_names<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = names.map(|n| format!("'{n}'")).collect();
    format!("[{}]", quoted.join(","))
}

/// Triton's text when a request has fewer inputs than the model requires or more than it has.
fn input_count_error(policy: &ModelPolicy, request: &InferRequest, tag: &str) -> Error {
    let required = policy.inputs.iter().filter(|i| !i.optional).count();
    let given = request.inputs.len();
    let got = fmt_names(request.inputs.iter().map(|t| t.name.as_str()));
    let missing = fmt_names(
        policy
            .inputs
            .iter()
            .filter(|i| !i.optional && request.inputs.iter().all(|t| t.name != i.name))
            .map(|i| i.name.as_str()),
    );
    let expected = if required == policy.inputs.len() {
        format!("expected {required} inputs")
    } else {
        format!("expected number of inputs between {required} and {}", policy.inputs.len())
    };
    Error::invalid(format!(
        "{tag}{expected} but got {given} inputs for model '{}'. Got input(s) {got}, but missing required input(s) {missing}. Please provide all required input(s).",
        policy.name
    ))
}

/// What Triton adds to a shape error of a model that batches.
const BATCH_DIM_NOTE: &str = " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size.";

/// Validates `request` against `policy` and applies `reshape`. Returns an `InvalidArgument`
/// error naming the model and the tensor on the first problem found.
pub fn validate_request(policy: &ModelPolicy, request: &mut InferRequest) -> Result<()> {
    let model = &policy.name;
    // The request's tag is only written into an error: a valid request formats nothing.
    let tag = Tag(&request.id);
    if let Some(name) = first_duplicate(request.inputs.iter().map(|t| t.name.as_str())) {
        return Err(Error::invalid(format!("{tag}input '{name}' already exists in request")));
    }
    // Triton counts the inputs before it looks at any of them.
    let required = policy.inputs.iter().filter(|i| !i.optional).count();
    if request.inputs.len() < required || request.inputs.len() > policy.inputs.len() {
        return Err(input_count_error(policy, request, &tag.to_string()));
    }
    let mut batch: Option<i64> = None;
    for tensor in &mut request.inputs {
        let spec: &IoSpec = policy.input(&tensor.name).ok_or_else(|| {
            Error::invalid(format!("unexpected inference input '{}' for model '{model}'", tensor.name))
        })?;
        if tensor.datatype != spec.datatype {
            return Err(Error::invalid(format!(
                "{tag}inference input '{}' data-type is '{}', but model '{model}' expects '{}'",
                tensor.name, tensor.datatype, spec.datatype
            )));
        }
        let body: &[i64] = if policy.batches() && !spec.is_shape_tensor {
            let Some((&b, rest)) = tensor.shape.split_first() else {
                return Err(Error::invalid(format!(
                    "{tag}unexpected shape for input '{}' for model '{model}'. Expected {}, got []. The model batches: give the batch size as the first dimension",
                    tensor.name,
                    fmt_shape(&[&[-1], spec.dims.as_slice()].concat())
                )));
            };
            if b < 1 || b as u64 > policy.max_batch_size as u64 {
                return Err(Error::invalid(format!(
                    "{tag}inference request batch-size must be <= {} for '{model}', got {b} for input '{}'",
                    policy.max_batch_size, tensor.name
                )));
            }
            match batch {
                None => batch = Some(b),
                Some(prev) if prev != b => {
                    return Err(Error::invalid(format!(
                    "{tag}input '{}' has batch size {b} but an earlier input of the request to model '{model}' has {prev}",
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
                "{tag}input '{}' for model '{model}' has a negative dimension in shape {}",
                tensor.name,
                fmt_shape(&tensor.shape)
            )));
        }
        if !dims_match(&spec.dims, body) {
            let (expected, note) = if policy.batches() && !spec.is_shape_tensor {
                (fmt_shape(&[&[-1], spec.dims.as_slice()].concat()), BATCH_DIM_NOTE)
            } else {
                // Triton ends the sentence with ". " and no note for a model that does not batch.
                (fmt_shape(&spec.dims), " ")
            };
            return Err(Error::invalid(format!(
                "{tag}unexpected shape for input '{}' for model '{model}'. Expected {expected}, got {}.{note}",
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
                        "{tag}input byte size mismatch for input '{}' for model '{model}'. Expected {want}, got {}",
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
    // With optional inputs the count can be right while a required one is missing.
    if policy.inputs.iter().any(|spec| !spec.optional && request.inputs.iter().all(|t| t.name != spec.name)) {
        return Err(input_count_error(policy, request, &tag.to_string()));
    }
    // Each output in turn: unknown, or named before it (a set only for many names).
    let many = request.outputs.len() > FEW_NAMES;
    let mut wanted = HashSet::new();
    for (i, out) in request.outputs.iter().enumerate() {
        if policy.output(&out.name).is_none() {
            return Err(Error::invalid(format!("unexpected inference output '{}' for model '{model}'", out.name)));
        }
        let again = if many {
            !wanted.insert(out.name.as_str())
        } else {
            request.outputs[..i].iter().any(|o| o.name == out.name)
        };
        if again {
            return Err(Error::invalid(format!(
                "output '{}' is requested more than once for model '{model}'",
                out.name
            )));
        }
    }
    Ok(())
}

/// The request's tag, written only when an error is: `Display` of [`request_tag`].
struct Tag<'a>(&'a str);

impl std::fmt::Display for Tag<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&request_tag(self.0))
    }
}

/// Up to this many names are checked for repeats pairwise, without a set.
const FEW_NAMES: usize = 16;

/// The first name that occurs twice, in the order the names come; without a set (and its
/// allocation) for the few names a request usually has.
fn first_duplicate<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Option<&'a str> {
    if names.clone().nth(FEW_NAMES).is_none() {
        return names.clone().enumerate().find(|(i, n)| names.clone().take(*i).any(|m| m == *n)).map(|(_, n)| n);
    }
    let mut seen = HashSet::new();
    names.into_iter().find(|n| !seen.insert(*n))
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
            warmup: Vec::new(),
            response_cache: false,
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
    fn rejects_repeated_inputs_and_outputs_with_few_or_many_names() {
        let mut r = req(vec![f32s("IN", vec![1, 2]), f32s("IN", vec![1, 2])]);
        r.id = "r1".into();
        let e = validate_request(&policy(0), &mut r).unwrap_err();
        assert_eq!(e.message, "[request id: r1] input 'IN' already exists in request");
        let mut r = req(vec![f32s("IN", vec![1, 2])]);
        r.outputs = ["OUT", "OUT"].map(|n| RequestedOutput { name: n.into(), class_count: 0 }).into();
        let e = validate_request(&policy(0), &mut r).unwrap_err();
        assert_eq!(e.message, "output 'OUT' is requested more than once for model 'm'");
        // An unknown output before the repeat is named first, as each output is checked in turn.
        r.outputs.insert(1, RequestedOutput { name: "NOPE".into(), class_count: 0 });
        let e = validate_request(&policy(0), &mut r).unwrap_err();
        assert!(e.message.contains("unexpected inference output 'NOPE'"), "{e}");

        // Past the pairwise check's few names, the first repeat is still the one named.
        let names: Vec<String> = (0..40).map(|i| format!("N{i}")).chain(["N7".into(), "N3".into()]).collect();
        assert_eq!(first_duplicate(names.iter().map(String::as_str)), Some("N7"));
        assert_eq!(first_duplicate(names[..20].iter().map(String::as_str)), None);
        assert_eq!(first_duplicate(["a", "b", "b", "a"].into_iter()), Some("b"));
        let mut many = policy(0);
        many.outputs = (0..20).map(|i| IoSpec::new(format!("O{i}"), DataType::F32, vec![2])).collect();
        let mut r = req(vec![f32s("IN", vec![1, 2])]);
        r.outputs = (0..20).chain([5]).map(|i| RequestedOutput { name: format!("O{i}"), class_count: 0 }).collect();
        let e = validate_request(&many, &mut r).unwrap_err();
        assert_eq!(e.message, "output 'O5' is requested more than once for model 'm'");
        r.outputs.pop();
        validate_request(&many, &mut r).unwrap();
    }

    #[test]
    fn request_errors_begin_with_tritons_request_tag() {
        let e = validate_request(&policy(4), &mut req(vec![f32s("IN", vec![5, 1, 2])])).unwrap_err();
        assert!(
            e.message.starts_with("[request id: <id_unknown>] inference request batch-size must be <= 4 for 'm'"),
            "{e}"
        );
        let mut r = req(vec![f32s("IN", vec![1, 3])]);
        r.id = "r7".into();
        let e = validate_request(&policy(0), &mut r).unwrap_err();
        assert_eq!(
            e.message,
            "[request id: r7] unexpected shape for input 'IN' for model 'm'. Expected [-1,2], got [1,3]. "
        );
        let e = validate_request(&policy(4), &mut req(vec![f32s("IN", vec![1, 3])])).unwrap_err();
        assert!(e.message.ends_with("got [1,3]. NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."), "{e}");
    }

    #[test]
    fn input_count_errors_are_tritons() {
        let mut p = policy(0);
        p.inputs.push(IoSpec::new("IN2", DataType::F32, vec![-1, 2]));
        let e = validate_request(&p, &mut req(vec![])).unwrap_err();
        assert_eq!(
            e.message,
            "[request id: <id_unknown>] expected 2 inputs but got 0 inputs for model 'm'. Got input(s) [], but missing required input(s) ['IN','IN2']. Please provide all required input(s)."
        );
        let three = vec![f32s("IN", vec![1, 2]), f32s("IN2", vec![1, 2]), f32s("X", vec![1, 2])];
        let e = validate_request(&p, &mut req(three)).unwrap_err();
        assert!(e.message.starts_with("[request id: <id_unknown>] expected 2 inputs but got 3 inputs for model 'm'. Got input(s) ['IN','IN2','X']"), "{e}");
        p.inputs[1].optional = true;
        let e = validate_request(&p, &mut req(vec![f32s("IN2", vec![1, 2])])).unwrap_err();
        assert!(e.message.starts_with("[request id: <id_unknown>] expected number of inputs between 1 and 2 but got 1 inputs for model 'm'. Got input(s) ['IN2'], but missing required input(s) ['IN']"), "{e}");
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
