//! The live actor tree, `GET /v2/actors` (JSON) and `GET /v2/actors/events` (the same as
//! server-sent events, `events`), a sequence model's live conversations, `GET
//! /v2/actors/conversations` (`conversations`), and the page that follows them, `GET /actors`, served on the
//! metrics port unless `--allow-actors-page=false`. The tree reads only what the actors publish of themselves
//! (`tritium_actors::figures`) and a 4 Hz sample of the instances' busy times (`busy`): nothing is asked of
//! an actor. The conversations are asked of the sequence actor, at most once a second (see `conversations`).

mod busy;
mod conversations;
mod events;
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
    tables: conversations::Tables,
    /// `--http-restricted-api actors:<header>=<value>`: every path here wants the header.
    restriction: Option<Guard>,
}

/// The `actors` restricted-API category as the metrics server applies it: the header, the value
/// it must have, and the refusal's message (made by `frontends::restricted`, wired in `main`).
#[derive(Debug, Clone)]
pub struct Guard {
    pub key: String,
    pub value: String,
    pub message: String,
}

impl ActorsState {
    /// Starts the busy-time sampler.
    pub fn start(repository: Arc<RepositoryManager>, restriction: Option<Guard>) -> anyhow::Result<Self> {
        let busy = busy::start(repository.clone())?;
        Ok(ActorsState { repository, busy, tables: conversations::Tables::default(), restriction })
    }

    /// The refusal of a request without the `actors` category's header, as the HTTP port
    /// refuses a restricted category (403, Triton's body and content type).
    fn refuses(&self, req: &HttpRequest) -> Option<HttpResponse> {
        let r = self.restriction.as_ref()?;
        if req.headers().get(&r.key).is_some_and(|v| v.as_bytes() == r.value.as_bytes()) {
            return None;
        }
        let body = json!({ "error": r.message }).to_string();
        Some(HttpResponse::Forbidden().content_type("text/plain").body(body))
    }
}

fn bad_request(msg: String) -> HttpResponse {
    HttpResponse::BadRequest().json(json!({ "error": msg }))
}

/// The tree of the versions `filter` wants, as JSON; an error if it names a model not loaded.
fn tree_json(state: &ActorsState, filter: &tree::Filter) -> Result<serde_json::Value, String> {
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
        return Err(format!("Request for unknown model: '{name}'{version} is not loaded"));
    }
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    Ok(json!({
        "timestamp_ms": now_ms,
        "busy_sample_interval_ms": busy::SAMPLE_EVERY.as_millis() as u64,
        "models": models,
    }))
}

async fn tree(req: HttpRequest, state: web::Data<ActorsState>) -> HttpResponse {
    if let Some(refusal) = state.refuses(&req) {
        return refusal;
    }
    match tree::Filter::parse(req.query_string()).and_then(|f| tree_json(&state, &f)) {
        Ok(tree) => HttpResponse::Ok().insert_header(("Cache-Control", "no-store")).json(tree),
        Err(e) => bad_request(e),
    }
}

/// The tree as server-sent events (`events`): a bad filter is refused before the stream starts.
async fn tree_events(req: HttpRequest, state: web::Data<ActorsState>) -> HttpResponse {
    if let Some(refusal) = state.refuses(&req) {
        return refusal;
    }
    let filter = match tree::Filter::parse(req.query_string()) {
        Ok(f) => f,
        Err(e) => return bad_request(e),
    };
    if let Err(e) = tree_json(&state, &filter) {
        return bad_request(e);
    }
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-store"))
        .streaming(events::stream(state, filter))
}

async fn conversation_table(req: HttpRequest, state: web::Data<ActorsState>) -> HttpResponse {
    if let Some(refusal) = state.refuses(&req) {
        return refusal;
    }
    let params = match conversations::Params::parse(req.query_string()) {
        Ok(p) => p,
        Err(e) => return bad_request(e),
    };
    let model = match conversations::pick(state.repository.router().all(), &params) {
        Ok(m) => m,
        Err(e) => return bad_request(e),
    };
    match state.tables.rows(&model).await {
        Ok((read_at, rows)) => HttpResponse::Ok()
            .insert_header(("Cache-Control", "no-store"))
            .json(conversations::page(&model, &params.table, &rows, read_at)),
        Err(conversations::Refusal(400, e)) => bad_request(e),
        Err(conversations::Refusal(_, e)) => HttpResponse::ServiceUnavailable().json(json!({ "error": e })),
    }
}

const PAGE_HTML: &str = include_str!("page/index.html");
const PAGE_JS: &str = include_str!("page/page.js");
const PAGE_CSS: &str = include_str!("page/page.css");

/// The page and its files, by path.
const ASSETS: [(&str, &str, &str); 3] = [
    ("/actors", "text/html; charset=utf-8", PAGE_HTML),
    ("/actors/page.js", "text/javascript; charset=utf-8", PAGE_JS),
    ("/actors/page.css", "text/css; charset=utf-8", PAGE_CSS),
];

async fn asset(req: HttpRequest, state: web::Data<ActorsState>) -> HttpResponse {
    if let Some(refusal) = state.refuses(&req) {
        return refusal;
    }
    let (_, content_type, body) = ASSETS.iter().find(|(path, _, _)| *path == req.path()).expect("routed here");
    HttpResponse::Ok().content_type(*content_type).insert_header(("Cache-Control", "no-cache")).body(*body)
}

/// The routes, for the metrics server's `App`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v2/actors", web::get().to(tree))
        .route("/v2/actors/events", web::get().to(tree_events))
        .route("/v2/actors/conversations", web::get().to(conversation_table));
    for (path, _, _) in ASSETS {
        cfg.route(path, web::get().to(asset));
    }
}
