//! `POST /v2/models/{m}[/versions/{v}]/infer`: the body (JSON, or JSON plus binary tensors) is
//! read up to `--http-max-input-size`, decoded, run through the engine and encoded back.

use std::sync::Arc;
use std::time::Instant;

use actix_web::{web, HttpRequest, HttpResponse};
use tracing::Instrument as _;
use tritium_actors::{Error, InferRequest};

use super::binary::{split_body, HEADER_LENGTH};
use super::body::check_length;
pub use super::body::read_body;
use super::encode::{encode_response, into_http};
use super::error::HttpResult;
use super::handlers::{model_and_version, path_version, ModelPath};
use super::infer_json::{decode_infer, OutputPlan};
use super::observe::traced;
use super::HttpState;
use crate::frontends::request_log::request_span;
use crate::observe::trace::ActiveTrace;
use crate::server::LoadedModel;

pub async fn infer(
    state: web::Data<HttpState>,
    path: ModelPath,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResult<HttpResponse> {
    let (model, version) = model_and_version(&path)?;
    let header_length = req.headers().get(HEADER_LENGTH).cloned();
    infer_model(&state, model, version, &req, payload, header_length).await
}

/// `infer` for a path the front door matched itself (`super::front_door`): the model's and the
/// version's segments as they appear in the path.
pub async fn infer_at(
    state: &HttpState,
    model: &str,
    version: Option<&str>,
    req: &HttpRequest,
    payload: web::Payload,
) -> HttpResult<HttpResponse> {
    let version = path_version(version)?;
    let header_length = req.headers().get(HEADER_LENGTH).cloned();
    infer_model(state, model.to_string(), version, req, payload, header_length).await
}

/// Runs one inference request of `model` from an HTTP body; `header_length` is the size of
/// the JSON header when binary tensors follow it (the `Inference-Header-Content-Length` header
/// here; the SageMaker and Vertex AI frontends take it from their content types).
pub async fn infer_model(
    state: &HttpState,
    model: String,
    version: Option<i64>,
    req: &HttpRequest,
    payload: web::Payload,
    header_length: Option<actix_web::http::header::HeaderValue>,
) -> HttpResult<HttpResponse> {
    let recv_start = Instant::now();
    // Open on this worker until answered: what `alone` counts.
    let _call = crate::frontends::alone::call_from(req.peer_addr());
    check_length(req, state.max_body_bytes)?;
    // Unknown models are answered before the body is parsed, as Triton does.
    let loaded = state.server.model(&model, version)?;
    if loaded.handle.policy.decoupled {
        return Err(Error::unsupported(format!(
            "HTTP end point doesn't support models with decoupled transaction policy (model '{model}'); use gRPC ModelStreamInfer"
        ))
        .into());
    }
    // Sampled once the model is known to exist, as Triton does.
    let parent = crate::observe::trace::RemoteParent::from_http(req.headers());
    let trace = crate::observe::trace::manager().sample(&model, parent);
    if let Some(t) = &trace {
        t.record_at("HTTP_RECV_START", recv_start);
    }
    let body = read_body(payload, state.max_body_bytes).await?;
    if let Some(t) = &trace {
        t.record("HTTP_RECV_END");
    }
    let (json, binary) = split_body(body, header_length.as_ref())?;
    let (mut request, plan) = decode_infer(&model, version, &json, binary)?;
    crate::frontends::forward::forward_headers(
        state.header_forward.as_ref(),
        req.headers().iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
        &mut request.parameters,
    )?;
    crate::frontends::affinity::check_sequence_header(
        &request,
        req.headers().iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
    )?;
    let routed = crate::frontends::affinity::has_header(req.headers().keys().map(|k| k.as_str()));
    let span = request_span(&request);
    async move {
        tracing::debug!("HTTP infer request received");
        // A client that leaves takes its request with it (out of the queue, or its result).
        let peer = req.conn_data::<super::disconnect::Peer>();
        let answer = tokio::select! {
            // The request first: one run on this thread (a lone request) is answered at its
            // first poll, before the watch's timer is ever set.
            biased;
            answer = run(state, loaded, request, &plan, trace, routed) => answer,
            () = super::disconnect::closed(peer) => {
                tracing::debug!("HTTP client closed the connection; its request is dropped");
                return Err(Error::cancelled("the client closed the connection").into());
            }
        };
        match &answer {
            Ok(_) => tracing::debug!("HTTP infer request answered"),
            Err(e) => tracing::debug!("HTTP infer request failed: {e}"),
        }
        answer
    }
    .instrument(span)
    .await
}

async fn run(
    state: &HttpState,
    loaded: Arc<LoadedModel>,
    mut request: InferRequest,
    plan: &OutputPlan,
    trace: Option<ActiveTrace>,
    routed: bool,
) -> HttpResult<HttpResponse> {
    let request_id = request.id.clone();
    if let Some(t) = &trace {
        t.attach(&mut request);
        t.record("REQUEST_START");
    }
    let requested = crate::frontends::classification::classified(&request.outputs);
    let (model, response) = state
        .server
        .infer_on(loaded, request, crate::frontends::alone::alone())
        .await
        .map_err(|e| crate::frontends::affinity::routed_error(e, routed))?;
    if let Some(t) = &trace {
        t.record("REQUEST_END");
        t.response_complete();
    }
    let encoded = encode_response(&response, &requested, plan, model.handle.policy.batches(), &model.labels)?;
    let response = into_http(encoded);
    Ok(match trace {
        Some(t) => traced(response, t, model.version(), request_id),
        None => response,
    })
}
