//! KServe v2 HTTP/REST with Triton's extensions, on actix-web. `routes` maps paths to the
//! handlers in `handlers` (health, metadata, config, statistics, repository) and `infer`.

mod binary;
pub mod body;
pub mod disconnect;
mod encode;
mod error;
mod front_door;
pub mod handlers;
pub mod infer;
mod infer_header;
mod infer_json;
mod observe;
pub mod shm;
mod stats_json;
pub mod tensor_json;

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::middleware::from_fn;
use actix_web::{web, App, HttpResponse, HttpServer};
pub use binary::HEADER_LENGTH;
pub use error::{error_response, status_of, HttpError, HttpResult};
pub use stats_json::stats_json;

use crate::frontends::restricted::Restrictions;
use crate::server::Server;

/// How the HTTP endpoint runs.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub workers: usize,
    /// Largest request body accepted (`--http-max-input-size`).
    pub max_body_bytes: usize,
    /// Most connections open at once over all workers (`--http-max-connections`; 0: actix's own).
    pub max_connections: usize,
    pub exit_timeout_secs: u64,
    /// `--reuse-http-port`.
    pub reuse_port: bool,
    /// `--http-header-forward-pattern`.
    pub header_forward: Option<regex::Regex>,
    /// `--http-restricted-api`.
    pub restrictions: Restrictions,
    /// The routes of the frontends served on the same port (Triton's generate extension, the
    /// OpenAI-compatible endpoints), wired in by `main`.
    pub extra_routes: Vec<fn(&mut web::ServiceConfig)>,
}

/// Shared by every handler.
pub struct HttpState {
    pub server: Arc<Server>,
    pub max_body_bytes: usize,
    pub header_forward: Option<regex::Regex>,
}

async fn not_found() -> HttpResponse {
    error::error_response(StatusCode::NOT_FOUND, "Not Found")
}

/// Triton's answer to a known path with the wrong method.
pub async fn method_not_allowed() -> HttpResponse {
    error::error_response(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}

/// All routes of the v2 protocol. Inference comes first: actix tries the patterns in order and
/// each dynamic one is a regex match, which showed up as a tenth of a small request's time when
/// infer was last in the list (the usual infer paths do not reach this router at all:
/// `front_door`).
pub fn routes(cfg: &mut web::ServiceConfig) {
    for prefix in ["/v2/models/{model}", "/v2/models/{model}/versions/{version}"] {
        cfg.service(web::resource(format!("{prefix}/infer")).post(infer::infer).to(method_not_allowed));
    }
    cfg.service(web::resource("/v2").get(handlers::server_metadata).to(method_not_allowed))
        .service(web::resource("/v2/health/live").get(handlers::live).to(method_not_allowed))
        .service(web::resource("/v2/health/ready").get(handlers::ready).to(method_not_allowed))
        .service(web::resource("/v2/models/stats").get(handlers::all_stats).to(method_not_allowed))
        .service(web::resource("/v2/repository/index").post(handlers::repository_index).to(method_not_allowed))
        .service(
            web::resource("/v2/logging").get(observe::get_logging).post(observe::post_logging).to(method_not_allowed),
        )
        .service(
            web::resource("/v2/trace/setting").get(observe::get_trace).post(observe::post_trace).to(method_not_allowed),
        )
        .service(
            web::resource("/v2/models/{model}/trace/setting")
                .get(observe::get_model_trace)
                .post(observe::post_model_trace)
                .to(method_not_allowed),
        )
        .service(web::resource("/v2/repository/models/{model}/load").post(handlers::load).to(method_not_allowed))
        .service(web::resource("/v2/repository/models/{model}/unload").post(handlers::unload).to(method_not_allowed))
        .service(web::resource("/v2/systemsharedmemory/status").get(shm::system_status_all).to(method_not_allowed))
        .service(
            web::resource("/v2/systemsharedmemory/region/{name}/status").get(shm::system_status).to(method_not_allowed),
        )
        .service(
            web::resource("/v2/systemsharedmemory/region/{name}/register")
                .post(shm::system_register)
                .to(method_not_allowed),
        )
        .service(
            web::resource("/v2/systemsharedmemory/unregister").post(shm::system_unregister_all).to(method_not_allowed),
        )
        .service(
            web::resource("/v2/systemsharedmemory/region/{name}/unregister")
                .post(shm::system_unregister)
                .to(method_not_allowed),
        )
        .service(web::resource("/v2/cudasharedmemory/status").get(shm::cuda_status_all).to(method_not_allowed))
        .service(
            web::resource("/v2/cudasharedmemory/region/{name}/status").get(shm::cuda_status).to(method_not_allowed),
        )
        .service(
            web::resource("/v2/cudasharedmemory/region/{name}/register")
                .post(shm::cuda_register)
                .to(method_not_allowed),
        )
        .service(web::resource("/v2/cudasharedmemory/unregister").post(shm::cuda_unregister_all).to(method_not_allowed))
        .service(
            web::resource("/v2/cudasharedmemory/region/{name}/unregister")
                .post(shm::cuda_unregister)
                .to(method_not_allowed),
        );
    for prefix in ["/v2/models/{model}", "/v2/models/{model}/versions/{version}"] {
        cfg.service(web::resource(prefix.to_string()).get(handlers::model_metadata).to(method_not_allowed))
            .service(web::resource(format!("{prefix}/ready")).get(handlers::model_ready).to(method_not_allowed))
            .service(web::resource(format!("{prefix}/config")).get(handlers::model_config).to(method_not_allowed))
            .service(web::resource(format!("{prefix}/stats")).get(handlers::model_stats).to(method_not_allowed));
    }
}

/// Binds the endpoint; the returned server runs when spawned and stops through its handle.
pub async fn serve(
    server: Arc<Server>,
    addr: SocketAddr,
    opts: HttpOptions,
) -> std::io::Result<actix_web::dev::Server> {
    let state =
        web::Data::new(HttpState { server, max_body_bytes: opts.max_body_bytes, header_forward: opts.header_forward });
    let restrictions = web::Data::new(opts.restrictions);
    let extra_routes = opts.extra_routes;
    let workers = opts.workers.max(1);
    let srv = HttpServer::new(move || {
        let app = App::new()
            .app_data(state.clone())
            .app_data(restrictions.clone())
            .app_data(body::BodyLimit(opts.max_body_bytes))
            .configure(routes);
        extra_routes
            .iter()
            .fold(app, |app, r| app.configure(r))
            .default_service(web::to(not_found))
            .wrap(from_fn(front_door::front_door))
    })
    .on_connect(disconnect::on_connect)
    .workers(workers);
    // actix counts per worker and stops accepting while every worker is full.
    let srv = if opts.max_connections > 0 { srv.max_connections(opts.max_connections.div_ceil(workers)) } else { srv };
    let srv = srv
        .shutdown_timeout(opts.exit_timeout_secs)
        .disable_signals()
        .listen(crate::frontends::listen::bind(addr, opts.reuse_port)?)?
        .run();
    Ok(srv)
}
