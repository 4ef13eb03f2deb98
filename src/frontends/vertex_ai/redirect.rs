//! Vertex AI's redirect (`X-Vertex-Ai-Triton-Redirect: v2/...` on a POST to the predict
//! route), as Triton's: the read-only v2 endpoints are served through it — server metadata and
//! health, model metadata, readiness, config, statistics and inference, and the repository
//! index, shared-memory status — each answered by the HTTP frontend's own handler.
//! Shared-memory registration and model load/unload are refused with 403 (they need the HTTP
//! endpoint); anything else is 400.

use std::sync::LazyLock;

use actix_web::{web, HttpRequest, HttpResponse, Responder};
use regex::Regex;

use crate::frontends::http::handlers::{self, ModelPathParams};
use crate::frontends::http::{infer, shm, HttpError, HttpState};

static MODEL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|ready|config|stats))?$").expect("valid")
});
static HEALTH: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^/v2/health/(live|ready)$").expect("valid"));
static SHM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)$").expect("valid")
});
static REPOSITORY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^/v2/repository(?:/[^/]+)?/(index|models/[^/]+/(?:load|unload))$").expect("valid"));

/// Answers a redirected request (`target` is the header's value, without the leading `/`).
pub async fn dispatch(
    http: &web::Data<HttpState>,
    target: &str,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    if req.method() != actix_web::http::Method::POST {
        return HttpResponse::MethodNotAllowed().finish();
    }
    let endpoint = format!("/{target}");
    tracing::debug!("redirecting Vertex AI request: {endpoint}");
    let state = http.clone();
    if endpoint == "/v2" {
        return handlers::server_metadata(state).await;
    }
    if endpoint == "/v2/models/stats" {
        return handlers::all_stats(state).await.respond_to(&req).map_into_boxed_body();
    }
    if let Some(c) = HEALTH.captures(&endpoint) {
        return if &c[1] == "live" { handlers::live(state).await } else { handlers::ready(state).await };
    }
    if let Some(c) = MODEL.captures(&endpoint) {
        let path = || ModelPathParams::new(&c[1], c.get(2).map(|m| m.as_str()));
        let answer = match c.get(3).map(|m| m.as_str()) {
            Some("infer") => {
                let header_length = req.headers().get(crate::frontends::http::HEADER_LENGTH).cloned();
                let (model, version) = match handlers::model_and_version(&path()) {
                    Ok(mv) => mv,
                    Err(e) => return actix_web::ResponseError::error_response(&HttpError::from(e)),
                };
                infer::infer_model(http, model, version, &req, payload, header_length).await
            }
            Some("ready") => handlers::model_ready(state, path()).await,
            Some("config") => handlers::model_config(state, path()).await,
            Some("stats") => handlers::model_stats(state, path()).await,
            _ => handlers::model_metadata(state, path()).await,
        };
        return answer.respond_to(&req).map_into_boxed_body();
    }
    if let Some(c) = SHM.captures(&endpoint) {
        if &c[3] != "status" {
            return HttpResponse::Forbidden().finish();
        }
        let region = c.get(2).map(|m| web::Path::from(m.as_str().to_string()));
        let answer = match (&c[1], region) {
            ("system", None) => shm::system_status_all().await,
            ("system", Some(r)) => shm::system_status(r).await,
            (_, None) => shm::cuda_status_all().await,
            (_, Some(r)) => shm::cuda_status(r).await,
        };
        return answer.respond_to(&req).map_into_boxed_body();
    }
    if let Some(c) = REPOSITORY.captures(&endpoint) {
        if &c[1] != "index" {
            return HttpResponse::Forbidden().finish();
        }
        let answer = match infer::read_body(payload, http.max_body_bytes).await {
            Ok(body) => handlers::repository_index(state, crate::frontends::http::body::Body(body)).await,
            Err(e) => Err(e),
        };
        return answer.respond_to(&req).map_into_boxed_body();
    }
    HttpResponse::BadRequest().finish()
}
