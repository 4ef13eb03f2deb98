//! The model version a client names, as a string (gRPC's `model_version`, HTTP's
//! `/versions/{v}`): empty means the latest, anything else must be a positive whole number.
//! Both frontends answer a bad one with Triton's texts, so clients that match on them (Triton's
//! own examples do) work unchanged.

use tritium_actors::{Error, Result};

/// `""` = the latest version. A string that is not an integer, or a negative one, is an invalid
/// argument whose message begins as Triton's does.
pub fn parse_version(version: &str) -> Result<Option<i64>> {
    if version.is_empty() {
        return Ok(None);
    }
    let v = version.parse::<i64>().map_err(|_| {
        Error::invalid(format!(
            "failed to get model version from specified version string '{version}': a version is a whole number, e.g. '1'"
        ))
    })?;
    if v < 0 {
        return Err(Error::invalid(format!(
            "invalid model version specified '{version}': a version is a whole number, e.g. '1'"
        )));
    }
    Ok(Some(v))
}

#[cfg(test)]
mod tests {
    use tritium_actors::ErrorKind;

    use super::*;

    #[test]
    fn empty_is_latest_and_digits_are_a_version() {
        assert_eq!(parse_version("").unwrap(), None);
        assert_eq!(parse_version("3").unwrap(), Some(3));
    }

    #[test]
    fn a_non_integer_answers_tritons_text() {
        let e = parse_version("wrong_specification").unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(
            e.message.starts_with("failed to get model version from specified version string 'wrong_specification'"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_negative_version_answers_tritons_text() {
        let e = parse_version("-3").unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.starts_with("invalid model version specified '-3'"), "{}", e.message);
    }
}
