//! The live actor tree, `GET /v2/actors` (JSON), and the page that follows it, `GET /actors`,
//! served on the metrics port unless `--allow-actors-page=false`. Both read only what the actors
//! publish of themselves (`tritium_actors::figures`) and a 4 Hz sample of the instances' busy
//! times (`busy`): nothing is asked of an actor, so watching costs the engine nothing.

mod busy;
mod tree;

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;

use crate::repository::RepositoryManager;

/// What the handlers share.
pub struct ActorsState {
    repository: Arc<RepositoryManager>,
    busy: Arc<busy::BusySamples>,
}

impl ActorsState {
    /// Starts the busy-time sampler.
    pub fn start(repository: Arc<RepositoryManager>) -> anyhow::Result<Self> {
        let busy = busy::start(repository.clone())?;
        Ok(ActorsState { repository, busy })
    }
}

fn bad_request(msg: String) -> HttpResponse {
    HttpResponse::BadRequest().json(json!({ "error": msg }))
}

async fn tree(req: HttpRequest, state: web::Data<ActorsState>) -> HttpResponse {
    let filter = match tree::Filter::parse(req.query_string()) {
        Ok(f) => f,
        Err(e) => return bad_request(e),
    };
    let at = Instant::now();
    let models: Vec<serde_json::Value> = state
        .repository
        .router()
        .all()
        .iter()
        .filter(|m| filter.wants(m))
        .map(|m| tree::version(m, &state.busy, at))
        .collect();
    if let (Some(name), true) = (&filter.model, models.is_empty()) {
        let version = filter.version.map(|v| format!(" version {v}")).unwrap_or_default();
        return bad_request(format!("Request for unknown model: '{name}'{version} is not loaded"));
    }
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    HttpResponse::Ok().insert_header(("Cache-Control", "no-store")).json(json!({
        "timestamp_ms": now_ms,
        "busy_sample_interval_ms": busy::SAMPLE_EVERY.as_millis() as u64,
        "models": models,
    }))
}

const PAGE_HTML: &str = include_str!("page/index.html");
const PAGE_JS: &str = include_str!("page/page.js");
const PAGE_CSS: &str = include_str!("page/page.css");

fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok().content_type(content_type).insert_header(("Cache-Control", "no-cache")).body(body)
}

/// The routes, for the metrics server's `App`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v2/actors", web::get().to(tree))
        .route("/actors", web::get().to(|| async { asset("text/html; charset=utf-8", PAGE_HTML) }))
        .route("/actors/page.js", web::get().to(|| async { asset("text/javascript; charset=utf-8", PAGE_JS) }))
        .route("/actors/page.css", web::get().to(|| async { asset("text/css; charset=utf-8", PAGE_CSS) }));
}
