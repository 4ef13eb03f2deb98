//! Triton's generate extension on the HTTP port: `POST /v2/models/{m}[/versions/{v}]/generate`
//! answers one JSON object; `.../generate_stream` answers server-sent events, one `data:` event
//! per response of the model (a decoupled model's final flag alone makes none). A request that
//! fails before inference gets Triton's JSON error and status; once streaming, the status is the
//! first response's (an error there sets it) and a later error is an `{"error": ...}` event.
//! `generate` needs exactly one response from the model. The mapping of fields to inputs and
//! parameters is in `request`, of responses to JSON in `response`. A sampled request is traced
//! as an infer request is (`HTTP_RECV_START` .. `REQUEST_END`, the engine's queue and compute),
//! its record written when its final response has come.

mod request;
mod response;

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures::StreamExt as _;
use serde_json::json;
use tokio::sync::mpsc;
use tritium_actors::{Error, InferResponse, Reply, Result};

use crate::frontends::http::body::{check_length, read_body};
use crate::frontends::http::handlers::{model_and_version, ModelPath};
use crate::frontends::http::{status_of, HttpResult, HttpState};
use crate::frontends::request_log::request_span;
use crate::observe::trace::{ActiveTrace, RemoteParent};

pub const EVENT_STREAM: &str = "text/event-stream; charset=utf-8";

/// Adds the generate routes (both with and without a version).
pub fn routes(cfg: &mut web::ServiceConfig) {
    for prefix in ["/v2/models/{model}", "/v2/models/{model}/versions/{version}"] {
        cfg.service(
            web::resource(format!("{prefix}/generate")).post(generate).to(crate::frontends::http::method_not_allowed),
        )
        .service(
            web::resource(format!("{prefix}/generate_stream"))
                .post(generate_stream)
                .to(crate::frontends::http::method_not_allowed),
        );
    }
}

pub async fn generate(
    state: web::Data<HttpState>,
    path: ModelPath,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResult<HttpResponse> {
    let mut rx = start(&state, &path, &req, payload).await?;
    let mut answers = Vec::new();
    while let Some(item) = rx.next().await {
        answers.push(item?);
    }
    if answers.len() != 1 {
        return Err(Error::invalid(format!(
            "generate expects model to produce exactly 1 response, use generate stream for model that generates \
             various number of responses (model '{}' produced {})",
            path_model(&path),
            answers.len()
        ))
        .into());
    }
    let body = response::encode(&answers[0])?;
    Ok(HttpResponse::Ok().insert_header((header::CONTENT_TYPE, "application/json")).body(body.to_string()))
}

pub async fn generate_stream(
    state: web::Data<HttpState>,
    path: ModelPath,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResult<HttpResponse> {
    let mut rx = start(&state, &path, &req, payload).await?;
    // The first response sets the status, as Triton's does.
    let first = rx.next().await;
    let status = match &first {
        Some(Err(e)) => status_of(e.kind),
        _ => StatusCode::OK,
    };
    let events = futures::stream::unfold((first, Some(rx)), |(pending, rx)| async move {
        let mut rx = rx?;
        let item = match pending {
            Some(item) => item,
            None => rx.next().await?,
        };
        let (event, more) = match item {
            Ok(r) => (response::encode(&r), true),
            Err(e) => (Err(e), false),
        };
        let json = event.unwrap_or_else(|e| json!({ "error": e.message }));
        let chunk = Bytes::from(format!("data: {json}\n\n"));
        Some((Ok::<_, actix_web::Error>(chunk), (None, more.then_some(rx))))
    });
    Ok(HttpResponse::build(status).insert_header((header::CONTENT_TYPE, EVENT_STREAM)).streaming(events.boxed_local()))
}

fn path_model(path: &ModelPath) -> String {
    model_and_version(path).map(|(m, _)| m).unwrap_or_default()
}

/// The responses of one submitted request.
struct Responses {
    rx: mpsc::UnboundedReceiver<Result<InferResponse>>,
    decoupled: bool,
    /// The request's trace (when sampled), its model version and request id: finished with
    /// the final response.
    trace: Option<(ActiveTrace, i64, String)>,
}

/// Decodes the body, submits it, and hands back where its responses come.
async fn start(state: &HttpState, path: &ModelPath, req: &HttpRequest, payload: web::Payload) -> Result<Responses> {
    let (model, version) = model_and_version(path)?;
    check_length(req, state.max_body_bytes)?;
    // Unknown models are answered before the body is read, as for infer.
    let loaded = state.server.model(&model, version)?;
    // Sampled once the model is known to exist, as for infer.
    let trace = crate::observe::trace::manager().sample(&model, RemoteParent::from_http(req.headers()));
    if let Some(t) = &trace {
        t.record("HTTP_RECV_START");
    }
    // A body timeout is answered here as the other refusals of the generate endpoint are (400).
    let body = read_body(payload, state.max_body_bytes).await.map_err(|e| e.error)?;
    if let Some(t) = &trace {
        t.record("HTTP_RECV_END");
    }
    let mut request = request::decode(&model, version, &loaded.handle.policy, &body, state.max_body_bytes)?;
    crate::frontends::forward::forward_headers(
        state.header_forward.as_ref(),
        req.headers().iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
        &mut request.parameters,
    )?;
    let span = request_span(&request);
    if let Some(t) = &trace {
        t.attach(&mut request);
        t.record("REQUEST_START");
    }
    let request_id = request.id.clone();
    let (tx, rx) = mpsc::unbounded_channel();
    let model = span.in_scope(|| state.server.submit(request, Reply::Stream(tx)))?;
    let trace = trace.map(|t| (t, model.version(), request_id));
    Ok(Responses { rx, decoupled: model.handle.policy.decoupled, trace })
}

impl Responses {
    fn finish_trace(&mut self) {
        if let Some((t, version, request_id)) = self.trace.take() {
            t.record("REQUEST_END");
            t.response_complete();
            t.finish(version, &request_id);
        }
    }

    /// The model's next response; `None` once the last has come. A decoupled model's final
    /// flag without outputs is not a response of its own (Triton's flag-only callback).
    async fn next(&mut self) -> Option<Result<InferResponse>> {
        let item = self.rx.recv().await?;
        match item {
            Ok(r) if self.decoupled && r.is_final && r.outputs.is_empty() && r.parameters.is_empty() => {
                self.rx.close();
                self.finish_trace();
                None
            }
            Ok(r) => {
                if r.is_final {
                    self.rx.close();
                    self.finish_trace();
                }
                Some(Ok(r))
            }
            Err(e) => {
                self.rx.close();
                Some(Err(e))
            }
        }
    }
}
