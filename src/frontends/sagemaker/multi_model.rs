//! SageMaker's multi-model routes, as Triton's: `POST /models` (`{"model_name": <name>,
//! "url": <path>}`) registers the path as a repository and loads the model the
//! `X-Amzn-SageMaker-Target-Model` header names (else `model_name`), serving the path's model
//! folder under that name; `GET /models` lists the loaded ones (`{"models": [{"modelName",
//! "modelUrl"}]}`), `GET /models/<name>` one of them, `POST /models/<name>/invoke` runs a v2
//! inference request on it, and `DELETE /models/<name>` unloads it and unregisters its path.
//! A name not loaded this way is 404. Loading needs `--model-control-mode=explicit`, as
//! Triton's does. Unlike Triton, the path need not lie under `/opt/ml/models/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use parking_lot::Mutex;
use serde_json::json;
use tritium_actors::ErrorKind;

use super::{SageMakerState, BINARY_MIME};
use crate::frontends::binary_mime;
use crate::frontends::http::body::Body;
use crate::frontends::http::error_response;
use crate::frontends::http::infer::infer_model;

const TARGET_HEADER: &str = "X-Amzn-SageMaker-Target-Model";

/// One model loaded through `POST /models`.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The registered repository.
    pub repository: PathBuf,
    /// The name it is served under.
    pub target: String,
}

/// The models loaded through these routes, by their `model_name`.
#[derive(Default)]
pub struct MultiModels(Mutex<BTreeMap<String, Loaded>>);

fn target(req: &HttpRequest, name: &str) -> String {
    req.headers().get(TARGET_HEADER).and_then(|v| v.to_str().ok()).unwrap_or(name).to_string()
}

fn json_ok(value: serde_json::Value) -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(value.to_string())
}

/// Where the model folder of `url` is: the url itself when it holds a config.pbtxt (then its
/// parent is the repository), else the repository is the url and its model is its only folder,
/// or the folder whose config is an ensemble (as Triton picks it).
fn locate(url: &Path) -> Result<(PathBuf, String), String> {
    if url.join("config.pbtxt").is_file() {
        let folder = url.file_name().and_then(|n| n.to_str()).ok_or("the url has no folder name")?;
        let parent = url.parent().ok_or("the url has no parent folder")?;
        return Ok((parent.to_path_buf(), folder.to_string()));
    }
    let mut folders: Vec<String> = std::fs::read_dir(url)
        .map_err(|e| format!("cannot read '{}': {e}", url.display()))?
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    folders.sort();
    let ensemble = folders.iter().find(|f| {
        std::fs::read_to_string(url.join(f).join("config.pbtxt"))
            .is_ok_and(|t| t.split_whitespace().collect::<String>().contains("platform:\"ensemble\""))
    });
    match (ensemble, folders.as_slice()) {
        (Some(e), _) => Ok((url.to_path_buf(), e.clone())),
        (None, [only]) => Ok((url.to_path_buf(), only.clone())),
        (None, []) => Err(format!("'{}' holds no model folder", url.display())),
        (None, _) => Err(format!("'{}' holds several model folders and no ensemble among them", url.display())),
    }
}

pub async fn list(state: web::Data<SageMakerState>) -> HttpResponse {
    let loaded = state.multi.0.lock().clone();
    let models: Vec<_> = loaded
        .iter()
        .filter(|(_, l)| state.http.server.model_ready(&l.target, None))
        .map(|(name, l)| json!({ "modelName": name, "modelUrl": l.repository.display().to_string() }))
        .collect();
    json_ok(json!({ "models": models }))
}

pub async fn get(state: web::Data<SageMakerState>, name: web::Path<String>) -> HttpResponse {
    match state.multi.0.lock().get(name.as_str()) {
        Some(l) => json_ok(json!({ "modelName": name.as_str(), "modelUrl": l.repository.display().to_string() })),
        None => HttpResponse::NotFound().finish(),
    }
}

pub async fn load(state: web::Data<SageMakerState>, req: HttpRequest, Body(body): Body) -> HttpResponse {
    let bad = |m: &str| error_response(StatusCode::BAD_REQUEST, m);
    let request: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad(&format!("failed to parse the load request: {e}")),
    };
    let (Some(name), Some(url)) = (request["model_name"].as_str(), request["url"].as_str()) else {
        return bad("the load request needs 'model_name' and 'url' strings");
    };
    let url = Path::new(url);
    if !url.is_absolute() || ["/dev/", "/proc/", "/sys/"].iter().any(|p| url.starts_with(p)) {
        return bad(&format!("Invalid \"url\" '{}': an absolute path outside /dev, /proc and /sys", url.display()));
    }
    let target = target(&req, name);
    tracing::info!("Loading SageMaker TargetModel: {target}");
    let (repository, folder) = match locate(url) {
        Ok(found) => found,
        Err(e) => return bad(&e),
    };
    let server = &state.http.server;
    if let Err(e) = server.repository.register_repository(&repository, Some((folder, target.clone()))) {
        let status = if e.kind == ErrorKind::AlreadyExists { StatusCode::CONFLICT } else { StatusCode::BAD_REQUEST };
        return error_response(status, &e.message);
    }
    if let Err(e) = server.load_model(&target, None, Vec::new()).await {
        let _ = server.repository.unregister_repository(&repository);
        return bad(&e.message);
    }
    state.multi.0.lock().insert(name.to_string(), Loaded { repository, target });
    HttpResponse::Ok().finish()
}

pub async fn invoke(
    state: web::Data<SageMakerState>,
    name: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    if !state.multi.0.lock().contains_key(name.as_str()) {
        return HttpResponse::NotFound().finish();
    }
    let model = target(&req, &name);
    let header_length = match binary_mime::header_size(&req, BINARY_MIME) {
        Ok(h) => h,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, &e.message),
    };
    match infer_model(&state.http, model, None, &req, payload, header_length).await {
        Ok(response) => binary_mime::label_response(response, BINARY_MIME),
        Err(e) => actix_web::ResponseError::error_response(&e),
    }
}

pub async fn unload(state: web::Data<SageMakerState>, name: web::Path<String>) -> HttpResponse {
    let Some(loaded) = state.multi.0.lock().get(name.as_str()).cloned() else {
        return HttpResponse::NotFound().finish();
    };
    tracing::info!("Unloading SageMaker TargetModel: {}", loaded.target);
    let server = &state.http.server;
    if let Err(e) = server.unload_model(&loaded.target, true).await {
        return error_response(StatusCode::BAD_REQUEST, &e.message);
    }
    state.multi.0.lock().remove(name.as_str());
    match server.repository.unregister_repository(&loaded.repository) {
        Ok(()) => HttpResponse::Ok().finish(),
        Err(e) => error_response(StatusCode::BAD_REQUEST, &e.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_folder_is_found_as_triton_finds_it() {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one");
        std::fs::create_dir_all(one.join("model/1")).unwrap();
        std::fs::write(one.join("model/config.pbtxt"), "").unwrap();
        assert_eq!(locate(&one).unwrap(), (one.clone(), "model".to_string()));
        assert_eq!(locate(&one.join("model")).unwrap(), (one.clone(), "model".to_string()));
        let ens = dir.path().join("ens");
        for m in ["a", "b", "pipe"] {
            std::fs::create_dir_all(ens.join(m)).unwrap();
        }
        std::fs::write(ens.join("pipe/config.pbtxt"), "platform: \"ensemble\"").unwrap();
        assert_eq!(locate(&ens).unwrap().1, "pipe");
        std::fs::remove_file(ens.join("pipe/config.pbtxt")).unwrap();
        assert!(locate(&ens).unwrap_err().contains("several model folders"));
    }
}
