//! The logging (`/v2/logging`) and trace (`/v2[/models/{m}]/trace/setting`) extensions, and the
//! response body that finishes a traced request once it has been sent.

use std::pin::Pin;
use std::task::{Context, Poll};

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::{web, HttpResponse};
use bytes::Bytes;
use serde_json::{json, Map, Value};
use tritium_actors::{Error, Result};

use super::body::Body;
use super::error::HttpResult;
use super::handlers::{json_body, json_ok};
use super::HttpState;
use crate::observe::logging::LogView;
use crate::observe::trace::{ActiveTrace, TraceValue, TraceView};
use crate::observe::SettingValue;

fn settings_object(body: &[u8], what: &str) -> Result<Map<String, Value>> {
    match json_body(body)? {
        Value::Object(o) => Ok(o),
        _ => Err(Error::invalid(format!("the {what} request must be a JSON object of settings"))),
    }
}

fn log_json(v: &LogView) -> Value {
    json!({
        "log_file": v.file,
        "log_info": v.info,
        "log_warning": v.warning,
        "log_error": v.error,
        "log_verbose_level": v.verbose,
        "log_format": v.format.as_str(),
    })
}

pub async fn get_logging(state: web::Data<HttpState>) -> HttpResult<HttpResponse> {
    Ok(json_ok(&log_json(&state.server.log_settings(&[])?)))
}

pub async fn post_logging(state: web::Data<HttpState>, Body(body): Body) -> HttpResult<HttpResponse> {
    let changes: Vec<(String, SettingValue)> =
        settings_object(&body, "logging")?.iter().map(|(k, v)| (k.clone(), SettingValue::from_json(v))).collect();
    Ok(json_ok(&log_json(&state.server.log_settings(&changes)?)))
}

fn trace_json(v: &TraceView) -> Value {
    let mut out = Map::new();
    for (key, mut values) in v.entries() {
        let value = if key == "trace_level" { json!(values) } else { Value::String(values.remove(0)) };
        out.insert(key.into(), value);
    }
    Value::Object(out)
}

fn trace_setting(state: &HttpState, model: Option<&str>, body: Option<&[u8]>) -> HttpResult<HttpResponse> {
    let changes: Vec<(String, TraceValue)> = match body {
        None => Vec::new(),
        Some(b) => {
            settings_object(b, "trace setting")?.iter().map(|(k, v)| (k.clone(), TraceValue::from_json(k, v))).collect()
        }
    };
    Ok(json_ok(&trace_json(&state.server.trace_settings(model, &changes)?)))
}

pub async fn get_trace(state: web::Data<HttpState>) -> HttpResult<HttpResponse> {
    trace_setting(&state, None, None)
}

pub async fn post_trace(state: web::Data<HttpState>, Body(body): Body) -> HttpResult<HttpResponse> {
    trace_setting(&state, None, Some(&body))
}

pub async fn get_model_trace(state: web::Data<HttpState>, model: web::Path<String>) -> HttpResult<HttpResponse> {
    trace_setting(&state, Some(&model), None)
}

pub async fn post_model_trace(
    state: web::Data<HttpState>,
    model: web::Path<String>,
    Body(body): Body,
) -> HttpResult<HttpResponse> {
    trace_setting(&state, Some(&model), Some(&body))
}

/// A response body that stamps `HTTP_SEND_END` and writes its request's trace when actix is
/// done with it (all of it written out, or the client gone).
struct TracedBody {
    inner: BoxBody,
    trace: Option<(ActiveTrace, i64, String)>,
}

impl MessageBody for TracedBody {
    type Error = <BoxBody as MessageBody>::Error;

    fn size(&self) -> BodySize {
        self.inner.size()
    }

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.inner).poll_next(cx)
    }
}

impl Drop for TracedBody {
    fn drop(&mut self) {
        if let Some((trace, version, request_id)) = self.trace.take() {
            trace.record("HTTP_SEND_END");
            trace.finish(version, &request_id);
        }
    }
}

/// `response`, finishing `trace` once sent.
pub fn traced(response: HttpResponse, trace: ActiveTrace, version: i64, request_id: String) -> HttpResponse {
    trace.record("HTTP_SEND_START");
    response.map_body(|_, inner| TracedBody { inner, trace: Some((trace, version, request_id)) }).map_into_boxed_body()
}
