//! OpenAI's error body, `{"error": {"message", "type", "param", "code"}}`, with the status each
//! kind of failure gets: the engine's errors keep Triton's mapping (400, 404, 503, ...), and an
//! evicted conversation is 410 Gone with code `conversation_evicted`.

use actix_web::http::{header, StatusCode};
use actix_web::HttpResponse;
use serde_json::json;
use tritium_actors::Error;

use crate::frontends::http::status_of;

/// What the sequence actor says of a conversation evicted for the state cap.
const EVICTED: &str = " was evicted";

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>, param: &'static str) -> Self {
        ApiError { status: StatusCode::BAD_REQUEST, message: message.into(), param: Some(param), code: None }
    }

    pub fn model_not_found(model: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{model}` does not exist or is not a chat model served here."),
            param: Some("model"),
            code: Some("model_not_found"),
        }
    }

    pub fn body(&self) -> serde_json::Value {
        let kind = if self.status.is_server_error() { "server_error" } else { "invalid_request_error" };
        json!({ "error": { "message": self.message, "type": kind, "param": self.param, "code": self.code } })
    }

    pub fn response(&self) -> HttpResponse {
        HttpResponse::build(self.status)
            .insert_header((header::CONTENT_TYPE, "application/json"))
            .body(self.body().to_string())
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        if e.message.contains(EVICTED) {
            return ApiError {
                status: StatusCode::GONE,
                message: e.message,
                param: None,
                code: Some("conversation_evicted"),
            };
        }
        ApiError { status: status_of(e.kind), message: e.message, param: None, code: None }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl actix_web::ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        self.response()
    }
}

#[cfg(test)]
mod tests {
    use tritium_actors::ErrorKind;

    use super::*;

    #[test]
    fn engine_errors_keep_their_status_and_eviction_is_gone() {
        let e = ApiError::from(Error::invalid("sequence chat-1 of model 'm' was evicted, its implicit state dropped"));
        assert_eq!((e.status, e.code), (StatusCode::GONE, Some("conversation_evicted")));
        assert_eq!(ApiError::from(Error::new(ErrorKind::Unavailable, "busy")).status, StatusCode::SERVICE_UNAVAILABLE);
        let body = ApiError::model_not_found("x").body();
        assert_eq!(body["error"]["code"], "model_not_found");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["param"], "model");
    }
}
