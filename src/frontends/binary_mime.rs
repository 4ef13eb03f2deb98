//! The binary tensor data of the SageMaker and Vertex AI frontends, as Triton's: the JSON
//! header's size travels in the content type (`<vendor mime>;json-header-size=<n>`) instead of
//! the `Inference-Header-Content-Length` header, both ways.

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse};
use tritium_actors::{Error, Result};

use super::http::HEADER_LENGTH;

/// The JSON header's size from a request's content type, when it is `prefix` + size; `None`
/// when the body is all JSON.
pub fn header_size(req: &HttpRequest, prefix: &str) -> Result<Option<HeaderValue>> {
    let Some(ct) = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return Ok(None) };
    let Some(pos) = ct.find(prefix) else { return Ok(None) };
    if pos != 0 {
        return Err(Error::invalid(format!("expect MIME type for binary data starts with '{prefix}', got: {ct}")));
    }
    let size = &ct[prefix.len()..];
    size.trim()
        .parse::<u64>()
        .map_err(|_| Error::invalid(format!("Unable to parse inference header size, got: {size}")))?;
    Ok(Some(HeaderValue::from_str(size.trim()).expect("digits are a valid header value")))
}

/// A successful binary answer gets `prefix` + its JSON header's size as content type.
pub fn label_response(mut response: HttpResponse, prefix: &str) -> HttpResponse {
    let size = response.headers().get(HEADER_LENGTH).and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(size) = size {
        if let Ok(v) = HeaderValue::from_str(&format!("{prefix}{size}")) {
            response.headers_mut().insert(header::CONTENT_TYPE, v);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    const P: &str = "application/vnd.sagemaker-triton.binary+json;json-header-size=";

    #[test]
    fn the_size_comes_from_the_content_type() {
        let req = TestRequest::default().insert_header((header::CONTENT_TYPE, format!("{P}42"))).to_http_request();
        assert_eq!(header_size(&req, P).unwrap().unwrap(), "42");
        let json = TestRequest::default().insert_header((header::CONTENT_TYPE, "application/json")).to_http_request();
        assert!(header_size(&json, P).unwrap().is_none());
        let bad = TestRequest::default().insert_header((header::CONTENT_TYPE, format!("{P}x"))).to_http_request();
        assert!(header_size(&bad, P).unwrap_err().message.contains("Unable to parse inference header size"));
        let late =
            TestRequest::default().insert_header((header::CONTENT_TYPE, format!("text/x; {P}1"))).to_http_request();
        assert!(header_size(&late, P).is_err());
    }
}
