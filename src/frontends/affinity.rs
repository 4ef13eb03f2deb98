//! Sequence affinity on the wire: the `x-sequence-id` HTTP header (gRPC metadata key), which a
//! client sets to the sequence id of its request so that a load balancer can route every turn of
//! a conversation to one replica by hashing a header, without reading the body. When the header is
//! present it must name the same sequence as the body's `sequence_id` parameter; a request
//! without a sequence id, or with another one, is refused (HTTP 400, gRPC INVALID_ARGUMENT), so a
//! balancer never routes a turn by one id while the server runs it under another.
//!
//! With the header, a turn of a sequence that this replica does not hold (no START seen) is
//! refused with UNAVAILABLE (HTTP 503) instead of Triton's INVALID_ARGUMENT: the balancer then
//! tries the next replica of its hash ring, which holds the sequence when it started there while
//! this replica drained or was down. Nothing ran, so the retry is safe.

use tritium_actors::sequence::NO_START;
use tritium_actors::{CorrelationId, Error, ErrorKind, InferRequest, Result};

/// The header's name (HTTP header names are case-insensitive; gRPC metadata keys are lower case).
pub const SEQUENCE_ID_HEADER: &str = "x-sequence-id";

/// Checks every `x-sequence-id` value among `headers` (name, value) against `request`'s sequence id.
pub fn check_sequence_header<'a>(
    request: &InferRequest,
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<()> {
    for (name, value) in headers {
        if !name.eq_ignore_ascii_case(SEQUENCE_ID_HEADER) {
            continue;
        }
        let header = String::from_utf8_lossy(value);
        let header = header.trim();
        let body = request.sequence.as_ref().map(|s| &s.id);
        let same = match body {
            Some(CorrelationId::U64(id)) => header.parse::<u64>().is_ok_and(|h| h == *id),
            Some(CorrelationId::Str(id)) => header == id,
            None => false,
        };
        if !same {
            let body = body.map_or_else(|| "none".to_string(), |id| format!("'{id}'"));
            return Err(Error::invalid(format!(
                "the {SEQUENCE_ID_HEADER} header '{header}' does not match the request's sequence_id ({body})"
            )));
        }
    }
    Ok(())
}

/// Whether `headers` hold the affinity header.
pub fn has_header<'a>(mut headers: impl Iterator<Item = &'a str>) -> bool {
    headers.any(|name| name.eq_ignore_ascii_case(SEQUENCE_ID_HEADER))
}

/// The error a request routed by the header gets for `e`: a turn of a sequence held elsewhere is
/// UNAVAILABLE here (see the module's doc); any other error is itself.
pub fn routed_error(e: Error, routed: bool) -> Error {
    if routed && e.kind == ErrorKind::InvalidArgument && e.message.ends_with(NO_START) {
        Error::unavailable(format!("{}; this replica does not hold the sequence: retry on another replica", e.message))
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use tritium_actors::SequenceFlags;

    use super::*;

    fn request(id: Option<CorrelationId>) -> InferRequest {
        let mut r = InferRequest::new("m", vec![]);
        r.sequence = id.map(|id| SequenceFlags { id, start: false, end: false });
        r
    }

    fn check(id: Option<CorrelationId>, headers: &[(&str, &str)]) -> Result<()> {
        check_sequence_header(&request(id), headers.iter().map(|(k, v)| (*k, v.as_bytes())))
    }

    #[test]
    fn a_matching_header_passes_and_no_header_is_no_check() {
        check(Some(CorrelationId::U64(42)), &[("x-sequence-id", "42")]).unwrap();
        check(Some(CorrelationId::U64(42)), &[("X-Sequence-Id", " 42 ")]).unwrap();
        check(Some(CorrelationId::Str("chat-7".into())), &[("x-sequence-id", "chat-7")]).unwrap();
        check(None, &[("other", "1")]).unwrap();
        check(Some(CorrelationId::U64(1)), &[]).unwrap();
    }

    #[test]
    fn a_different_or_missing_body_id_is_refused() {
        let e = check(Some(CorrelationId::U64(42)), &[("x-sequence-id", "43")]).unwrap_err();
        assert_eq!(e.message, "the x-sequence-id header '43' does not match the request's sequence_id ('42')");
        assert_eq!(e.kind, tritium_actors::ErrorKind::InvalidArgument);
        let e = check(None, &[("x-sequence-id", "7")]).unwrap_err();
        assert!(e.message.ends_with("sequence_id (none)"), "{e}");
        // A string id compares as a string; a numeric id only with a header that parses as that number.
        check(Some(CorrelationId::Str("42".into())), &[("x-sequence-id", "42")]).unwrap();
        assert!(check(Some(CorrelationId::U64(42)), &[("x-sequence-id", "042x")]).is_err());
        // Every value must match when the header is repeated.
        assert!(check(Some(CorrelationId::U64(1)), &[("x-sequence-id", "1"), ("x-sequence-id", "2")]).is_err());
    }

    #[test]
    fn a_routed_turn_of_an_unknown_sequence_is_unavailable() {
        let no_start = || Error::invalid(format!("inference request for sequence 3 to model 'm' {NO_START}"));
        assert_eq!(routed_error(no_start(), true).kind, ErrorKind::Unavailable);
        assert_eq!(routed_error(no_start(), false).kind, ErrorKind::InvalidArgument);
        assert_eq!(routed_error(Error::invalid("other"), true).kind, ErrorKind::InvalidArgument);
        assert!(has_header(["a", "X-Sequence-Id"].into_iter()));
        assert!(!has_header(["a"].into_iter()));
    }
}
