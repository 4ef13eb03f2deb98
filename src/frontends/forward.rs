//! Header forwarding (`--http-header-forward-pattern`, `--grpc-header-forward-pattern`), as
//! Triton: each HTTP header or gRPC metadata entry whose name the pattern matches anywhere
//! (RE2's PartialMatch; the flag's pattern ignores case, see `cli::network`) becomes a string
//! request parameter of that name, which backends see. HTTP header names reach Tritium in lower
//! case, so the parameters are named in lower case.
//! Names Triton reserves for its own parameters are refused with Triton's error.

use regex::Regex;
use tritium_actors::{Error, ParamValue, Parameters, Result};

/// The parameter names a header may not take (Triton's reserved keys, and any `triton_` name).
const RESERVED: [&str; 7] =
    ["sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers", "binary_data_output"];

/// Adds the matching `(name, value)` headers to `params`; a header overrides a request
/// parameter of the same name, as Triton's later setting does.
pub fn forward_headers<'a>(
    pattern: Option<&Regex>,
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    params: &mut Parameters,
) -> Result<()> {
    let Some(pattern) = pattern else { return Ok(()) };
    for (name, value) in headers {
        if !pattern.is_match(name) {
            continue;
        }
        if RESERVED.contains(&name) || name.starts_with("triton_") {
            return Err(Error::invalid(format!(
                "Header '{name}' is reserved for Triton usage and cannot be forwarded."
            )));
        }
        params.insert(name.to_string(), ParamValue::Str(String::from_utf8_lossy(value).into_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(pattern: &str, headers: &[(&str, &str)]) -> Result<Parameters> {
        let re = Regex::new(pattern).unwrap();
        let mut params = Parameters::new();
        forward_headers(Some(&re), headers.iter().map(|(k, v)| (*k, v.as_bytes())), &mut params)?;
        Ok(params)
    }

    #[test]
    fn matching_headers_become_string_parameters() {
        let p = forward("my_header_.*", &[("my_header_1", "a"), ("other", "b"), ("x-my_header_2", "c")]).unwrap();
        assert_eq!(p.len(), 2, "a partial match counts: {p:?}");
        assert_eq!(p["my_header_1"], ParamValue::Str("a".into()));
        assert_eq!(forward("(?i)MY_HEADER", &[("my_header_1", "a")]).unwrap().len(), 1);
    }

    #[test]
    fn reserved_names_are_refused_and_no_pattern_forwards_nothing() {
        let err = forward(".*", &[("priority", "1")]).unwrap_err();
        assert_eq!(err.message, "Header 'priority' is reserved for Triton usage and cannot be forwarded.");
        assert!(forward(".*", &[("triton_x", "1")]).is_err());
        let mut params = Parameters::new();
        forward_headers(None, [("a", &b"b"[..])], &mut params).unwrap();
        assert!(params.is_empty());
    }
}
