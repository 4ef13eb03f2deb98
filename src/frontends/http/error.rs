//! The one mapping from `tritium_actors::ErrorKind` to an HTTP status, and Triton's error body
//! `{"error": "..."}`. Every handler returns `HttpError`; actix's own failures (unknown route,
//! wrong method, body too large) are answered in the same shape.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use tritium_actors::{Error, ErrorKind};

/// Triton's `HttpCodeFromError`: internal → 500, not found → 404, unavailable → 503,
/// unsupported → 501, everything else (invalid argument, already exists, cancelled) → 400.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
        ErrorKind::InvalidArgument | ErrorKind::AlreadyExists | ErrorKind::Cancelled => StatusCode::BAD_REQUEST,
    }
}

/// A response with Triton's error body.
pub fn error_response(status: StatusCode, message: &str) -> HttpResponse {
    let body = serde_json::json!({ "error": message }).to_string();
    HttpResponse::build(status).insert_header((header::CONTENT_TYPE, "application/json")).body(body)
}

/// The engine's error, carried out of a handler.
#[derive(Debug)]
pub struct HttpError(pub Error);

impl From<Error> for HttpError {
    fn from(e: Error) -> Self {
        HttpError(e)
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl ResponseError for HttpError {
    fn status_code(&self) -> StatusCode {
        status_of(self.0.kind)
    }

    fn error_response(&self) -> HttpResponse {
        error_response(self.status_code(), &self.0.message)
    }
}

pub type HttpResult<T> = std::result::Result<T, HttpError>;

#[cfg(test)]
mod tests {
    use actix_web::body::MessageBody;

    use super::*;

    #[test]
    fn maps_kinds_as_triton_does() {
        assert_eq!(status_of(ErrorKind::InvalidArgument), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(ErrorKind::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(status_of(ErrorKind::Unavailable), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status_of(ErrorKind::Unsupported), StatusCode::NOT_IMPLEMENTED);
        assert_eq!(status_of(ErrorKind::Internal), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(status_of(ErrorKind::AlreadyExists), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(ErrorKind::Cancelled), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn error_body_is_tritons_json() {
        let resp = HttpError(Error::not_found("no model 'x'")).error_response();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_eq!(resp.headers().get(header::CONTENT_TYPE).unwrap(), "application/json");
        let body = resp.into_body().try_into_bytes().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v, serde_json::json!({"error": "no model 'x'"}));
    }
}
