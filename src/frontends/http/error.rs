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

/// The engine's error, carried out of a handler; its status is the kind's unless the HTTP layer
/// has a more precise one (408 for a request body that did not arrive in time).
#[derive(Debug)]
pub struct HttpError {
    pub error: Error,
    status: Option<StatusCode>,
}

impl HttpError {
    /// `error` answered with `status` rather than its kind's.
    pub fn with_status(error: Error, status: StatusCode) -> Self {
        HttpError { error, status: Some(status) }
    }
}

impl From<Error> for HttpError {
    fn from(error: Error) -> Self {
        HttpError { error, status: None }
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error.message)
    }
}

impl ResponseError for HttpError {
    fn status_code(&self) -> StatusCode {
        self.status.unwrap_or_else(|| status_of(self.error.kind))
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = error_response(self.status_code(), &self.error.message);
        if self.status_code() == StatusCode::REQUEST_TIMEOUT {
            // The rest of a late body may still come: the connection cannot carry another request.
            response.head_mut().set_connection_type(actix_web::http::ConnectionType::Close);
        }
        response
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
        let resp = HttpError::from(Error::not_found("no model 'x'")).error_response();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_eq!(resp.headers().get(header::CONTENT_TYPE).unwrap(), "application/json");
        let body = resp.into_body().try_into_bytes().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v, serde_json::json!({"error": "no model 'x'"}));
        let late = HttpError::with_status(Error::invalid("slow"), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(late.error_response().status(), StatusCode::REQUEST_TIMEOUT);
    }
}
