//! The Vertex AI frontend (`--allow-vertex-ai`, `--vertex-ai-port`, `--vertex-ai-default-model`),
//! as Triton's: the health route (`$AIP_HEALTH_ROUTE`) answers readiness; the predict route
//! (`$AIP_PREDICT_ROUTE`, POST) runs a KServe v2 inference request on the default model (JSON,
//! or binary tensors with `application/vnd.vertex-ai-triton.binary+json;json-header-size=<n>`),
//! or, with the `X-Vertex-Ai-Triton-Redirect: <v2 path>` header, the read-only v2 endpoint it
//! names (see `redirect`). Both routes are regular expressions matched against the whole path,
//! as Triton matches them. Any other request gets 400.

mod redirect;

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use regex::Regex;

use super::binary_mime;
use super::http::infer::infer_model;
use super::http::{error_response, HttpState};
use crate::server::Server;

/// The content type of binary tensor data on this endpoint.
pub const BINARY_MIME: &str = "application/vnd.vertex-ai-triton.binary+json;json-header-size=";
/// The header that sends a predict request to another v2 endpoint.
pub const REDIRECT_HEADER: &str = "X-Vertex-Ai-Triton-Redirect";

#[derive(Debug, Clone)]
pub struct VertexOptions {
    pub workers: usize,
    pub max_body_bytes: usize,
    pub exit_timeout_secs: u64,
    pub predict_route: Regex,
    pub health_route: Regex,
    pub default_model: String,
}

/// A route from the environment, matched against whole paths.
fn route(var: &str) -> anyhow::Result<Regex> {
    let value = std::env::var(var).map_err(|_| anyhow::anyhow!("{var} is not defined for Vertex AI endpoint"))?;
    anyhow::ensure!(!value.is_empty(), "{var} is not defined for Vertex AI endpoint");
    Regex::new(&format!("^(?:{value})$")).map_err(|e| anyhow::anyhow!("{var}='{value}' is not a valid route: {e}"))
}

/// The default model, as Triton chooses it: the flag's, which must be loaded, else the only
/// ready model of the repository.
pub fn default_model(server: &Server, flag: Option<&str>) -> anyhow::Result<String> {
    let ready: Vec<String> = server.repository_index(true)?.into_iter().map(|e| e.name).collect();
    match flag {
        Some(name) => {
            anyhow::ensure!(ready.iter().any(|n| n == name), "Expect the default model '{name}' is loaded");
            Ok(name.to_string())
        }
        None => {
            anyhow::ensure!(
                ready.len() == 1,
                "Expect the model repository contains only a single model if default model is not specified"
            );
            Ok(ready[0].clone())
        }
    }
}

impl VertexOptions {
    /// The routes from `AIP_PREDICT_ROUTE` and `AIP_HEALTH_ROUTE` (both required, as Triton).
    pub fn from_env(
        workers: usize,
        max_body_bytes: usize,
        exit_timeout_secs: u64,
        default_model: String,
    ) -> anyhow::Result<Self> {
        Ok(VertexOptions {
            workers,
            max_body_bytes,
            exit_timeout_secs,
            predict_route: route("AIP_PREDICT_ROUTE")?,
            health_route: route("AIP_HEALTH_ROUTE")?,
            default_model,
        })
    }
}

struct VertexState {
    http: web::Data<HttpState>,
    predict_route: Regex,
    health_route: Regex,
    default_model: String,
}

async fn handle(state: web::Data<VertexState>, req: HttpRequest, payload: web::Payload) -> HttpResponse {
    let path = req.path();
    if state.health_route.is_match(path) {
        if req.method() != actix_web::http::Method::GET {
            return HttpResponse::MethodNotAllowed().finish();
        }
        let ok = state.http.server.is_ready();
        return HttpResponse::build(if ok { StatusCode::OK } else { StatusCode::BAD_REQUEST }).finish();
    }
    if !state.predict_route.is_match(path) {
        return HttpResponse::BadRequest().finish();
    }
    if let Some(target) = req.headers().get(REDIRECT_HEADER) {
        let target = target.to_str().unwrap_or("").to_string();
        return redirect::dispatch(&state.http, &target, req, payload).await;
    }
    if req.method() != actix_web::http::Method::POST {
        return HttpResponse::MethodNotAllowed().finish();
    }
    let header_length = match binary_mime::header_size(&req, BINARY_MIME) {
        Ok(h) => h,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, &e.message),
    };
    match infer_model(&state.http, state.default_model.clone(), None, &req, payload, header_length).await {
        Ok(response) => binary_mime::label_response(response, BINARY_MIME),
        Err(e) => actix_web::ResponseError::error_response(&e),
    }
}

/// Binds the endpoint; the returned server runs when spawned and stops through its handle.
pub fn serve(server: Arc<Server>, addr: SocketAddr, opts: VertexOptions) -> std::io::Result<actix_web::dev::Server> {
    let state = web::Data::new(VertexState {
        http: web::Data::new(HttpState { server, max_body_bytes: opts.max_body_bytes, header_forward: None }),
        predict_route: opts.predict_route,
        health_route: opts.health_route,
        default_model: opts.default_model,
    });
    Ok(HttpServer::new(move || App::new().app_data(state.clone()).default_service(web::to(handle)))
        .on_connect(super::http::disconnect::on_connect)
        .workers(opts.workers.max(1))
        .shutdown_timeout(opts.exit_timeout_secs)
        .disable_signals()
        .bind(addr)?
        .run())
}
