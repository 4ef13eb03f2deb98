//! The SageMaker frontend (`--allow-sagemaker`, `--sagemaker-port`), as Triton's: `GET /ping`
//! answers the server's readiness (or liveness with `SAGEMAKER_TRITON_PING_MODE=live`), and
//! `POST /invocations` runs one KServe v2 inference request (JSON, or JSON plus binary tensors
//! with `application/vnd.sagemaker-triton.binary+json;json-header-size=<n>`) on the model
//! `SAGEMAKER_TRITON_DEFAULT_MODEL_NAME` names, decoded and answered by the HTTP frontend's
//! code. The multi-model routes (`/models...`) are in `multi_model`. Any other request gets 400,
//! as from Triton.

mod multi_model;

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};

use super::binary_mime;
use super::http::infer::infer_model;
use super::http::{error_response, HttpState};
use crate::server::Server;

/// The content type of binary tensor data on this endpoint.
pub const BINARY_MIME: &str = "application/vnd.sagemaker-triton.binary+json;json-header-size=";

/// How the endpoint runs.
#[derive(Debug, Clone)]
pub struct SageMakerOptions {
    pub workers: usize,
    pub max_body_bytes: usize,
    pub exit_timeout_secs: u64,
    /// `SAGEMAKER_TRITON_DEFAULT_MODEL_NAME`: the model `/invocations` runs.
    pub model: String,
    /// `SAGEMAKER_TRITON_PING_MODE`: `ready` (default) or `live`.
    pub ping_live: bool,
}

impl SageMakerOptions {
    /// The settings SageMaker's container environment gives, with Triton's defaults.
    pub fn from_env(workers: usize, max_body_bytes: usize, exit_timeout_secs: u64) -> anyhow::Result<Self> {
        let model = std::env::var("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME")
            .unwrap_or_else(|_| "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME".into());
        let ping_live = match std::env::var("SAGEMAKER_TRITON_PING_MODE").as_deref() {
            Err(_) | Ok("ready") => false,
            Ok("live") => true,
            Ok(other) => anyhow::bail!("SAGEMAKER_TRITON_PING_MODE='{other}': use 'ready' or 'live'"),
        };
        if let Ok(kind) = std::env::var("SAGEMAKER_TRITON_INFERENCE_TYPE") {
            anyhow::ensure!(
                kind == "infer",
                "SAGEMAKER_TRITON_INFERENCE_TYPE='{kind}': Tritium serves 'infer' only (not generate or generate_stream)"
            );
        }
        Ok(SageMakerOptions { workers, max_body_bytes, exit_timeout_secs, model, ping_live })
    }
}

struct SageMakerState {
    http: HttpState,
    model: String,
    ping_live: bool,
    multi: multi_model::MultiModels,
}

async fn ping(state: web::Data<SageMakerState>) -> HttpResponse {
    let server = &state.http.server;
    let ok = if state.ping_live { server.is_live() } else { server.is_ready() };
    HttpResponse::build(if ok { StatusCode::OK } else { StatusCode::BAD_REQUEST }).finish()
}

async fn invocations(state: web::Data<SageMakerState>, req: HttpRequest, payload: web::Payload) -> HttpResponse {
    let header_length = match binary_mime::header_size(&req, BINARY_MIME) {
        Ok(h) => h,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, &e.message),
    };
    match infer_model(&state.http, state.model.clone(), None, &req, payload, header_length).await {
        Ok(response) => binary_mime::label_response(response, BINARY_MIME),
        Err(e) => actix_web::ResponseError::error_response(&e),
    }
}

async fn method_not_allowed() -> HttpResponse {
    HttpResponse::MethodNotAllowed().finish()
}

async fn bad_request() -> HttpResponse {
    HttpResponse::BadRequest().finish()
}

/// Binds the endpoint; the returned server runs when spawned and stops through its handle.
pub fn serve(server: Arc<Server>, addr: SocketAddr, opts: SageMakerOptions) -> std::io::Result<actix_web::dev::Server> {
    let max_body_bytes = opts.max_body_bytes;
    let state = web::Data::new(SageMakerState {
        http: HttpState { server, max_body_bytes, header_forward: None },
        model: opts.model,
        ping_live: opts.ping_live,
        multi: multi_model::MultiModels::default(),
    });
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(super::http::body::BodyLimit(max_body_bytes))
            .route("/ping", web::get().to(ping))
            .route("/invocations", web::post().to(invocations))
            .service(web::resource("/models").get(multi_model::list).post(multi_model::load).to(bad_request))
            .service(web::resource("/models/").get(multi_model::list).post(multi_model::load).to(bad_request))
            .service(web::resource("/models/{name}").get(multi_model::get).delete(multi_model::unload).to(bad_request))
            .service(web::resource("/models/{name}/invoke").post(multi_model::invoke).to(method_not_allowed))
            .default_service(web::to(bad_request))
    })
    .on_connect(super::http::disconnect::on_connect)
    .workers(opts.workers.max(1))
    .shutdown_timeout(opts.exit_timeout_secs)
    .disable_signals()
    .bind(addr)?
    .run())
}
