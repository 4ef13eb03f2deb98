//! The OpenAI-compatible endpoints on the HTTP port: `GET /v1/models` (the chat models loaded)
//! and `POST /v1/chat/completions` (`chat`). They translate to the engine's `InferRequest`, like
//! the KServe endpoints, and answer in OpenAI's shapes, errors included (`error`).

mod chat;
mod error;
mod request;

use actix_web::http::header;
use actix_web::{web, HttpResponse};
use serde_json::json;

use crate::frontends::http::HttpState;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/v1/models").get(models).to(crate::frontends::http::method_not_allowed))
        .service(web::resource("/v1/models/{model}").get(model).to(crate::frontends::http::method_not_allowed))
        .service(
            web::resource("/v1/chat/completions")
                .post(chat::completions)
                .to(crate::frontends::http::method_not_allowed),
        );
}

fn entry(name: &str) -> serde_json::Value {
    json!({ "id": name, "object": "model", "created": 0, "owned_by": "tritium" })
}

async fn models(state: web::Data<HttpState>) -> HttpResponse {
    let mut names: Vec<String> =
        state.server.models().iter().filter(|m| chat::is_chat_model(m)).map(|m| m.name().to_string()).collect();
    names.sort();
    names.dedup();
    let data: Vec<_> = names.iter().map(|n| entry(n)).collect();
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "application/json"))
        .body(json!({ "object": "list", "data": data }).to_string())
}

async fn model(state: web::Data<HttpState>, name: web::Path<String>) -> HttpResponse {
    match state.server.model(&name, None) {
        Ok(m) if chat::is_chat_model(&m) => {
            HttpResponse::Ok().insert_header((header::CONTENT_TYPE, "application/json")).body(entry(&name).to_string())
        }
        _ => error::ApiError::model_not_found(&name).response(),
    }
}
