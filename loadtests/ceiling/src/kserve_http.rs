//! What the HTTP floor servers (`floor`, `floor_mlp`) share of KServe v2's infer call with
//! Triton's binary-tensor extension: the body split into its JSON header and binary tail,
//! Triton's rule for which outputs go binary, Triton's error body, and the answer's two shapes
//! (JSON alone, or JSON followed by binary output data).

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use serde_json::{json, Value};

/// The header that says how long a binary-tensor body's JSON part is.
pub const HEADER_LENGTH: &str = "Inference-Header-Content-Length";

/// A response with Triton's `{"error": ...}` body.
pub fn error(status: StatusCode, msg: &str) -> HttpResponse {
    HttpResponse::build(status).content_type("application/json").body(json!({ "error": msg }).to_string())
}

/// Triton's 404 for a model the server does not serve.
pub fn unknown_model(model: &str) -> HttpResponse {
    error(StatusCode::NOT_FOUND, &format!("Request for unknown model: '{model}' is not found"))
}

/// The request's JSON header and the binary data after it (empty without the length header);
/// a malformed header gives the message for a 400.
pub fn split<'b>(req: &HttpRequest, body: &'b [u8]) -> Result<(Value, &'b [u8]), String> {
    let length = req.headers().get(HEADER_LENGTH).and_then(|v| v.to_str().ok()).and_then(|s| s.parse::<usize>().ok());
    split_at(length, body)
}

fn split_at(length: Option<usize>, body: &[u8]) -> Result<(Value, &[u8]), String> {
    let json_len = length.unwrap_or(body.len()).min(body.len());
    match serde_json::from_slice(&body[..json_len]) {
        Ok(header) => Ok((header, &body[json_len..])),
        Err(e) => Err(format!("malformed JSON: {e}")),
    }
}

/// Triton's rule: an output listed with `binary_data` follows it, the others
/// `binary_data_output`.
pub fn wants_binary(header: &Value, name: &str) -> bool {
    let listed = header["outputs"].as_array().and_then(|os| os.iter().find(|o| o["name"] == name));
    match listed {
        Some(o) => o["parameters"]["binary_data"].as_bool().unwrap_or(false),
        None => header["parameters"]["binary_data_output"].as_bool().unwrap_or(false),
    }
}

/// The answer: `head` (the response's JSON) alone, or followed by `tail` (the binary outputs'
/// data, in the order the JSON lists them) with the length header.
pub fn respond(head: String, tail: &[u8]) -> HttpResponse {
    if tail.is_empty() {
        return HttpResponse::Ok().content_type("application/json").body(head);
    }
    let mut bytes = Vec::with_capacity(head.len() + tail.len());
    bytes.extend_from_slice(head.as_bytes());
    bytes.extend_from_slice(tail);
    HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header((HEADER_LENGTH, head.len().to_string()))
        .body(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_length_header_splits_the_json_from_the_binary_data() {
        let body = br#"{"inputs":[]}ABCD"#;
        let (header, tail) = split_at(Some(13), body).unwrap();
        assert_eq!((header, tail), (json!({ "inputs": [] }), &b"ABCD"[..]));
        // Without the header the whole body is JSON; a length past the end is the whole body.
        assert_eq!(split_at(None, br#"{"a":1}"#).unwrap().1, b"");
        assert_eq!(split_at(Some(99), br#"{"a":1}"#).unwrap().0, json!({ "a": 1 }));
    }

    #[test]
    fn a_malformed_header_says_so() {
        for (length, body) in [(None, &b"{not json"[..]), (Some(3), &br#"{"a":1}"#[..])] {
            let e = split_at(length, body).unwrap_err();
            assert!(e.starts_with("malformed JSON: "), "{e}");
        }
        assert_eq!(error(StatusCode::BAD_REQUEST, "x").status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn an_output_follows_its_own_binary_data_else_the_requests_default() {
        let h = json!({ "outputs": [{ "name": "A", "parameters": { "binary_data": false } }],
                        "parameters": { "binary_data_output": true } });
        assert!(!wants_binary(&h, "A"), "listed: its own choice");
        assert!(wants_binary(&h, "B"), "not listed: the request's default");
        assert!(!wants_binary(&json!({}), "A"), "neither: JSON");
    }

    #[test]
    fn an_answer_with_binary_data_says_where_its_json_ends() {
        let r = respond("{}".into(), b"xyz");
        assert_eq!(r.headers().get(HEADER_LENGTH).unwrap(), "2");
        assert_eq!(r.headers().get("content-type").unwrap(), "application/octet-stream");
        let r = respond("{}".into(), b"");
        assert!(r.headers().get(HEADER_LENGTH).is_none());
        assert_eq!(r.headers().get("content-type").unwrap(), "application/json");
    }
}
