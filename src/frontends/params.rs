//! The request parameters Triton gives a meaning to (`sequence_id`, `sequence_start`,
//! `sequence_end`, `priority`, `timeout`), applied to an `InferRequest` the same way for HTTP
//! and gRPC; any other key travels on to the model as a plain parameter.

use tritium_actors::{CorrelationId, Error, InferRequest, ParamValue, Result, SequenceFlags};

fn parse_error(field: &str, detail: &str) -> Error {
    Error::invalid(format!("Unable to parse '{field}': {detail}"))
}

fn as_bool(key: &str, value: &ParamValue) -> Result<bool> {
    match value {
        ParamValue::Bool(b) => Ok(*b),
        _ => Err(parse_error(key, "expected a boolean")),
    }
}

fn as_uint(key: &str, value: &ParamValue) -> Result<u64> {
    match value {
        ParamValue::UInt(u) => Ok(*u),
        ParamValue::Int(i) if *i >= 0 => Ok(*i as u64),
        _ => Err(parse_error(key, "expected an unsigned integer")),
    }
}

/// Applies `params` to `request`. `ignored` names keys the frontend has already handled
/// (HTTP's `binary_data_output`; gRPC ignores that one too).
pub fn apply(request: &mut InferRequest, params: impl IntoIterator<Item = (String, ParamValue)>) -> Result<()> {
    let mut sequence: Option<SequenceFlags> = None;
    fn seq(s: &mut Option<SequenceFlags>) -> &mut SequenceFlags {
        s.get_or_insert(SequenceFlags { id: CorrelationId::U64(0), start: false, end: false })
    }
    for (key, value) in params {
        match key.as_str() {
            "sequence_id" => {
                seq(&mut sequence).id = match value {
                    ParamValue::Str(s) => CorrelationId::Str(s),
                    ref v => CorrelationId::U64(
                        as_uint(&key, v).map_err(|_| parse_error(&key, "expected an unsigned integer or a string"))?,
                    ),
                }
            }
            "sequence_start" => seq(&mut sequence).start = as_bool(&key, &value)?,
            "sequence_end" => seq(&mut sequence).end = as_bool(&key, &value)?,
            "priority" => request.priority = as_uint(&key, &value)?,
            "timeout" => request.timeout_us = as_uint(&key, &value)?,
            // Output encoding on HTTP (handled there); meaningless on gRPC, where Triton ignores it.
            "binary_data_output" => {}
            // The one `triton_` key a client may set: ask for an empty final response on a
            // decoupled stream.
            "triton_enable_empty_final_response" => {
                request.parameters.insert(key, value);
            }
            k if k.starts_with("triton_") => {
                return Err(Error::invalid(
                    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
                ))
            }
            _ => {
                request.parameters.insert(key, value);
            }
        }
    }
    request.sequence = sequence;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply_all(params: Vec<(&str, ParamValue)>) -> Result<InferRequest> {
        let mut r = InferRequest::new("m", vec![]);
        apply(&mut r, params.into_iter().map(|(k, v)| (k.to_string(), v)))?;
        Ok(r)
    }

    #[test]
    fn sequence_priority_timeout_and_plain_parameters() {
        let r = apply_all(vec![
            ("sequence_id", ParamValue::Int(7)),
            ("sequence_start", ParamValue::Bool(true)),
            ("priority", ParamValue::UInt(2)),
            ("timeout", ParamValue::Int(500)),
            ("note", ParamValue::Str("x".into())),
        ])
        .unwrap();
        let s = r.sequence.unwrap();
        assert_eq!((s.id, s.start, s.end), (CorrelationId::U64(7), true, false));
        assert_eq!((r.priority, r.timeout_us), (2, 500));
        assert_eq!(r.parameters["note"], ParamValue::Str("x".into()));
        let r = apply_all(vec![("sequence_id", ParamValue::Str("chat-1".into()))]).unwrap();
        assert_eq!(r.sequence.unwrap().id, CorrelationId::Str("chat-1".into()));
    }

    #[test]
    fn wrong_types_and_reserved_keys_are_refused() {
        let e = apply_all(vec![("sequence_id", ParamValue::Int(-1))]).unwrap_err();
        assert!(e.message.contains("Unable to parse 'sequence_id'"), "{e}");
        let e = apply_all(vec![("sequence_end", ParamValue::Int(1))]).unwrap_err();
        assert!(e.message.contains("expected a boolean"), "{e}");
        let e = apply_all(vec![("triton_x", ParamValue::Bool(true))]).unwrap_err();
        assert!(e.message.contains("reserved for Triton usage"), "{e}");
    }
}
