//! Health, server and model metadata, config, statistics and the repository extension.

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpResponse};
use serde_json::{json, Value};
use tritium_actors::{Error, Result};

use super::body::Body;
use super::error::{error_response, HttpResult};
use super::stats_json::stats_json;
use super::HttpState;
use crate::config::to_json;
use crate::repository::overrides::FILE_PREFIX;

/// `{model}` and the optional `{version}` of a path.
#[derive(Debug, serde::Deserialize)]
pub struct ModelPathParams {
    model: String,
    version: Option<String>,
}

impl ModelPathParams {
    /// A model path made by another frontend (Vertex AI's redirect header).
    pub fn new(model: &str, version: Option<&str>) -> ModelPath {
        web::Path::from(ModelPathParams { model: model.to_string(), version: version.map(str::to_string) })
    }
}

/// The model and version of a path. A version that is not a whole number is Triton's 404 (its
/// routes take digits only), with the text gRPC gives for it.
pub fn model_and_version(path: &ModelPath) -> Result<(String, Option<i64>)> {
    Ok((path.model.clone(), path_version(path.version.as_deref())?))
}

/// The version a path names (`None`: the path has no `/versions/{v}`), as `model_and_version`.
pub fn path_version(version: Option<&str>) -> Result<Option<i64>> {
    crate::frontends::version::parse_version(version.unwrap_or("")).map_err(|e| Error::not_found(e.message))
}

pub type ModelPath = web::Path<ModelPathParams>;

pub(super) fn json_ok(value: &Value) -> HttpResponse {
    HttpResponse::Ok().insert_header((header::CONTENT_TYPE, "application/json")).body(value.to_string())
}

fn empty(status: StatusCode) -> HttpResponse {
    HttpResponse::build(status).insert_header((header::CONTENT_TYPE, "text/plain")).finish()
}

/// The server's metadata as `GET /v2` answers it (also the in-process API's).
pub fn server_metadata_value(m: &crate::server::ServerMetadata) -> Value {
    json!({ "name": m.name, "version": m.version, "extensions": m.extensions })
}

pub async fn server_metadata(state: web::Data<HttpState>) -> HttpResponse {
    json_ok(&server_metadata_value(&state.server.metadata()))
}

pub async fn live(state: web::Data<HttpState>) -> HttpResponse {
    empty(if state.server.is_live() { StatusCode::OK } else { StatusCode::BAD_REQUEST })
}

pub async fn ready(state: web::Data<HttpState>) -> HttpResponse {
    empty(if state.server.is_ready() { StatusCode::OK } else { StatusCode::BAD_REQUEST })
}

pub async fn model_metadata(state: web::Data<HttpState>, path: ModelPath) -> HttpResult<HttpResponse> {
    let (model, version) = model_and_version(&path)?;
    Ok(json_ok(&model_metadata_value(&state.server.model_metadata(&model, version)?)))
}

/// A model's metadata as `GET /v2/models/{m}` answers it (also the in-process API's).
pub fn model_metadata_value(m: &crate::server::ModelMetadata) -> Value {
    let tensors = |ts: &[crate::server::TensorMetadata]| -> Vec<Value> {
        ts.iter().map(|t| json!({ "name": t.name, "datatype": t.datatype.as_str(), "shape": t.shape })).collect()
    };
    json!({
        "name": m.name,
        "versions": m.versions,
        "platform": m.platform,
        "inputs": tensors(&m.inputs),
        "outputs": tensors(&m.outputs),
    })
}

pub async fn model_ready(state: web::Data<HttpState>, path: ModelPath) -> HttpResult<HttpResponse> {
    let (model, version) = model_and_version(&path)?;
    Ok(if state.server.model_ready(&model, version) {
        empty(StatusCode::OK)
    } else {
        error_response(StatusCode::BAD_REQUEST, "Model version not ready")
    })
}

pub async fn model_config(state: web::Data<HttpState>, path: ModelPath) -> HttpResult<HttpResponse> {
    let (model, version) = model_and_version(&path)?;
    let m = state.server.model(&model, version)?;
    Ok(json_ok(&to_json(&m.config)))
}

fn stats_error(e: Error, model: &str) -> Error {
    match e.kind {
        tritium_actors::ErrorKind::NotFound => Error::invalid(format!("requested model '{model}' is not available")),
        _ => e,
    }
}

pub async fn model_stats(state: web::Data<HttpState>, path: ModelPath) -> HttpResult<HttpResponse> {
    let (model, version) = model_and_version(&path)?;
    let stats = state.server.statistics(Some(&model), version).await.map_err(|e| stats_error(e, &model))?;
    Ok(json_ok(&stats_json(stats)))
}

pub async fn all_stats(state: web::Data<HttpState>) -> HttpResult<HttpResponse> {
    Ok(json_ok(&stats_json(state.server.statistics(None, None).await?)))
}

/// An optional JSON body; an empty body is `{}`.
pub(super) fn json_body(body: &[u8]) -> Result<Value> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|e| Error::invalid(format!("failed to parse the request JSON buffer: {e}")))
}

pub async fn repository_index(state: web::Data<HttpState>, Body(body): Body) -> HttpResult<HttpResponse> {
    let request = json_body(&body)?;
    let ready_only = match request.get("ready") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(Error::invalid("Unable to parse 'ready': expected a boolean").into()),
    };
    Ok(json_ok(&index_value(state.server.repository_index(ready_only)?)))
}

/// The repository index as `POST /v2/repository/index` answers it (also the in-process API's).
pub fn index_value(entries: Vec<crate::server::IndexEntry>) -> Value {
    let entries: Vec<Value> = entries
        .into_iter()
        .map(|e| {
            let mut obj = serde_json::Map::new();
            obj.insert("name".into(), e.name.into());
            if let Some(v) = e.version {
                obj.insert("version".into(), v.into());
            }
            if !e.state.is_empty() {
                obj.insert("state".into(), e.state.into());
            }
            if !e.reason.is_empty() {
                obj.insert("reason".into(), e.reason.into());
            }
            Value::Object(obj)
        })
        .collect();
    Value::Array(entries)
}

fn parameters(request: &Value) -> Result<Option<&serde_json::Map<String, Value>>> {
    match request.get("parameters") {
        None => Ok(None),
        Some(Value::Object(p)) => Ok(Some(p)),
        Some(_) => Err(Error::invalid("Unable to parse 'parameters': expected a JSON object")),
    }
}

pub(super) fn ok_empty() -> HttpResponse {
    HttpResponse::Ok().insert_header((header::CONTENT_TYPE, "application/json")).finish()
}

/// The repository extension's load: `parameters` may hold `config` (the config as a JSON
/// string) and Triton's `file:<path>` model files, each base64 as Triton's HTTP API sends them.
pub async fn load(state: web::Data<HttpState>, path: web::Path<String>, Body(body): Body) -> HttpResult<HttpResponse> {
    use base64::Engine as _;
    let request = json_body(&body)?;
    let mut config = None;
    let mut files = Vec::new();
    for (key, value) in parameters(&request)?.into_iter().flatten() {
        match (key.as_str(), value) {
            ("config", Value::String(s)) => config = Some(s.clone()),
            ("config", _) => {
                return Err(Error::invalid("Unable to parse 'config': expected a string holding the config JSON").into())
            }
            (k, Value::String(s)) if k.starts_with(FILE_PREFIX) => {
                let content = base64::engine::general_purpose::STANDARD.decode(s).map_err(|e| {
                    Error::invalid(format!("Unable to parse '{k}': the file content must be base64 ({e})"))
                })?;
                files.push((k.to_string(), content));
            }
            (k, _) if k.starts_with(FILE_PREFIX) => {
                return Err(Error::invalid(format!("Unable to parse '{k}': expected a base64 string")).into())
            }
            _ => {}
        }
    }
    state.server.load_model(&path, config, files).await?;
    Ok(ok_empty())
}

pub async fn unload(
    state: web::Data<HttpState>,
    path: web::Path<String>,
    Body(body): Body,
) -> HttpResult<HttpResponse> {
    let request = json_body(&body)?;
    let dependents = match parameters(&request)?.and_then(|p| p.get("unload_dependents")) {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(Error::invalid("Unable to parse 'unload_dependents': expected a boolean").into()),
    };
    state.server.unload_model(&path, dependents).await?;
    Ok(ok_empty())
}
