//! A unary call's gRPC deadline, which the client sends as the `grpc-timeout` header (gRPC's
//! HTTP/2 protocol: at most 8 digits and a unit, `H`, `M`, `S`, `m`, `u` or `n`). tonic ends the
//! call when it passes; the request carries it as its `client_deadline`, so that a runtime that
//! can stop a run cheaply stops one still running for a client that has gone.

use std::time::{Duration, Instant};

use tonic::metadata::MetadataMap;

/// The `grpc-timeout` header's duration; None without one, or for one gRPC would refuse.
pub fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// When the client stops waiting, counted from `start` (when the call reached the server).
pub fn client_deadline(metadata: &MetadataMap, start: Instant) -> Option<Instant> {
    grpc_timeout(metadata).and_then(|t| start.checked_add(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("grpc-timeout", value.parse().unwrap());
        m
    }

    #[test]
    fn reads_every_unit_of_grpc_timeout() {
        let cases = [
            ("2H", Duration::from_secs(7200)),
            ("3M", Duration::from_secs(180)),
            ("4S", Duration::from_secs(4)),
            ("1500m", Duration::from_millis(1500)),
            ("99999999u", Duration::from_micros(99_999_999)),
            ("7n", Duration::from_nanos(7)),
        ];
        for (value, expected) in cases {
            assert_eq!(grpc_timeout(&with(value)), Some(expected), "{value}");
        }
    }

    #[test]
    fn a_malformed_or_missing_timeout_is_none() {
        for value in ["", "S", "123456789S", "10s", "-1S", "1.5S", "10"] {
            let m = if value.is_empty() { MetadataMap::new() } else { with(value) };
            assert_eq!(grpc_timeout(&m), None, "{value:?}");
        }
        let start = Instant::now();
        assert_eq!(client_deadline(&with("250m"), start), Some(start + Duration::from_millis(250)));
    }
}
