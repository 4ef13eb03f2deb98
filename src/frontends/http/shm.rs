//! The shared-memory extensions over HTTP: `/v2/systemsharedmemory/...` and
//! `/v2/cudasharedmemory/...` (register, status, unregister; the same registries gRPC uses).
//! Without CUDA, registering a CUDA region is a clear error, status lists nothing and
//! unregistering (all, or any name) succeeds, as Triton answers on a machine without a GPU.

use actix_web::{web, HttpResponse};
use serde_json::{json, Value};
use tritium_actors::Error;

use super::body::Body;
use super::error::HttpResult;
use super::handlers::{json_body, json_ok, ok_empty};
use crate::shm;

fn status_json(name: &str) -> HttpResult<HttpResponse> {
    let regions: Vec<Value> = shm::system()
        .status(name)?
        .into_iter()
        .map(|r| json!({"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}))
        .collect();
    Ok(json_ok(&Value::Array(regions)))
}

pub async fn system_status_all() -> HttpResult<HttpResponse> {
    status_json("")
}

pub async fn system_status(name: web::Path<String>) -> HttpResult<HttpResponse> {
    status_json(&name)
}

pub async fn system_register(name: web::Path<String>, Body(body): Body) -> HttpResult<HttpResponse> {
    let request = json_body(&body)?;
    let key = request
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::invalid("Unable to parse 'key': expected a string"))?;
    let uint = |field: &str, default: Option<u64>| -> tritium_actors::Result<u64> {
        match request.get(field) {
            Some(v) => v
                .as_u64()
                .ok_or_else(|| Error::invalid(format!("Unable to parse '{field}': expected an unsigned integer"))),
            None => default.ok_or_else(|| Error::invalid(format!("Unable to parse '{field}': the field is missing"))),
        }
    };
    let offset = uint("offset", Some(0))?;
    let byte_size = uint("byte_size", None)?;
    shm::system().register(&name, key, offset, byte_size)?;
    Ok(ok_empty())
}

pub async fn system_unregister_all() -> HttpResult<HttpResponse> {
    shm::system().unregister("");
    Ok(ok_empty())
}

pub async fn system_unregister(name: web::Path<String>) -> HttpResult<HttpResponse> {
    shm::system().unregister(&name);
    Ok(ok_empty())
}

fn cuda_status_json(name: &str) -> HttpResult<HttpResponse> {
    let regions: Vec<Value> = shm::cuda()
        .status(name)?
        .into_iter()
        .map(|r| json!({"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size}))
        .collect();
    Ok(json_ok(&Value::Array(regions)))
}

pub async fn cuda_status_all() -> HttpResult<HttpResponse> {
    cuda_status_json("")
}

pub async fn cuda_status(name: web::Path<String>) -> HttpResult<HttpResponse> {
    cuda_status_json(&name)
}

/// `{"raw_handle": {"b64": <cudaIpcMemHandle_t, base64>}, "device_id": n, "byte_size": n}`.
pub async fn cuda_register(name: web::Path<String>, body: web::Bytes) -> HttpResult<HttpResponse> {
    use base64::Engine as _;
    let request = json_body(&body)?;
    let b64 = request
        .get("raw_handle")
        .and_then(|h| h.get("b64"))
        .and_then(Value::as_str)
        .ok_or_else(|| Error::invalid("Unable to parse 'raw_handle': expected an object with a 'b64' string"))?;
    let handle = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| Error::invalid(format!("Unable to parse 'raw_handle': invalid base64: {e}")))?;
    let uint = |field: &str| -> tritium_actors::Result<u64> {
        request
            .get(field)
            .and_then(Value::as_u64)
            .ok_or_else(|| Error::invalid(format!("Unable to parse '{field}': expected an unsigned integer")))
    };
    shm::cuda().register(&name, &handle, uint("device_id")?, uint("byte_size")?)?;
    Ok(ok_empty())
}

pub async fn cuda_unregister_all() -> HttpResult<HttpResponse> {
    shm::cuda().unregister("");
    Ok(ok_empty())
}

pub async fn cuda_unregister(name: web::Path<String>) -> HttpResult<HttpResponse> {
    shm::cuda().unregister(&name);
    Ok(ok_empty())
}
