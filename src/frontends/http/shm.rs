//! The shared-memory extensions over HTTP: `/v2/systemsharedmemory/...` (register, status,
//! unregister; the same registry gRPC uses) and `/v2/cudasharedmemory/...`: as Triton answers
//! on a machine without a GPU, status lists nothing and unregistering (all, or any name)
//! succeeds, since nothing can be registered; registering is a clear error.

use actix_web::{web, HttpResponse};
use serde_json::{json, Value};
use tritium_actors::Error;

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

pub async fn system_register(name: web::Path<String>, body: web::Bytes) -> HttpResult<HttpResponse> {
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

pub async fn cuda_status_all() -> HttpResult<HttpResponse> {
    Ok(json_ok(&json!([])))
}

pub async fn cuda_status(name: web::Path<String>) -> HttpResult<HttpResponse> {
    Err(Error::not_found(format!("Unable to find cuda shared memory region: '{name}'")).into())
}

/// Nothing is ever registered without a GPU, so there is nothing to remove: success, as Triton.
pub async fn cuda_unregister() -> HttpResult<HttpResponse> {
    Ok(ok_empty())
}

pub async fn cuda_unavailable() -> HttpResult<HttpResponse> {
    Err(Error::unsupported("CUDA shared memory is not available: this server runs without a GPU").into())
}
