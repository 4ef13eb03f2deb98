//! What the fuzz targets (`fuzz/fuzz_targets/`) and the corpus replay (`tests/fuzz_corpus.rs`)
//! run on arbitrary bytes: the same calls the server makes on a request body or a config file,
//! with the rule that any input may be refused with an error but none may panic, hang or
//! allocate for a size it only claims.

use std::path::Path;

use actix_web::http::header::HeaderValue;
use bytes::Bytes;

use crate::config;
use crate::frontends::http::binary::split_body;
use crate::frontends::http::infer_json::decode_infer;

/// An HTTP infer body: the first line of `data` is the `Inference-Header-Content-Length`
/// header's value (none when the line is empty or there is no newline), the rest is the body,
/// decoded as `POST /v2/models/m/infer` decodes it. True when the request was accepted.
pub fn infer_body(data: &[u8]) -> bool {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&[][..], data),
    };
    let header = if header.is_empty() { None } else { HeaderValue::from_bytes(header).ok() };
    let Ok((json, binary)) = split_body(Bytes::copy_from_slice(body), header.as_ref()) else { return false };
    decode_infer("m", None, &json, binary).is_ok()
}

/// A `config.pbtxt`: parsed, completed and checked as a load does, then turned into the
/// engine's policy. True when the config was accepted.
pub fn model_config(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let Ok(mut config) = config::parse_pbtxt(text, Path::new("fuzz/config.pbtxt")) else { return false };
    config::normalize(&mut config, 0);
    if config::validate(&config).is_err() {
        return false;
    }
    let _ = config::to_json(&config);
    config::to_policy(&config, 1, None).is_ok()
}
