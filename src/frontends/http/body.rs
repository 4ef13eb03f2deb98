//! Request bodies, read up to `--http-max-input-size` on every endpoint: a body over the limit
//! (by its Content-Length, or as it arrives) is answered 400 with Triton's JSON error body and
//! the limit's flag named, as Triton's infer answers an input over `--http-max-input-size`;
//! nothing past the limit is buffered. The `Body` extractor takes the limit from the app's
//! `BodyLimit` (the main, SageMaker and Vertex AI endpoints each register theirs); actix's own
//! `web::Bytes` would answer a plain-text 413 at a hidden 256 KiB.
//!
//! A body must also arrive whole within `--http-body-read-timeout` seconds of the handler
//! starting to read it (Tritium's flag: Triton has no such limit). A client that sends its
//! headers and then stalls or trickles its body (slow-loris) is answered 408 with Triton's JSON
//! error and its connection closed, so it holds no task or buffer past the timeout. The request
//! head has its own limit (actix's 5 s, answered 408 before any handler runs).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{web, FromRequest, HttpRequest};
use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;
use tritium_actors::{Error, Result};

use super::error::{HttpError, HttpResult};

/// `--http-body-read-timeout`'s default, in seconds.
pub const DEFAULT_READ_TIMEOUT_SECS: u64 = 60;

/// Seconds a whole body may take to arrive (0: no limit); set once at start from the flag, for
/// every endpoint that reads bodies.
static READ_TIMEOUT_SECS: AtomicU64 = AtomicU64::new(DEFAULT_READ_TIMEOUT_SECS);

/// Sets `--http-body-read-timeout` (0: no limit).
pub fn set_read_timeout(secs: u64) {
    READ_TIMEOUT_SECS.store(secs, Ordering::Relaxed);
}

fn read_timeout() -> Option<Duration> {
    match READ_TIMEOUT_SECS.load(Ordering::Relaxed) {
        0 => None,
        secs => Some(Duration::from_secs(secs)),
    }
}

/// The largest body an endpoint reads (`--http-max-input-size`).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

fn too_large(n: usize, limit: usize) -> Error {
    Error::invalid(format!(
        "request body size {n} bytes exceeds the maximum allowed value of {limit} bytes. Use --http-max-input-size to increase the limit."
    ))
}

/// Refuses a request whose Content-Length is over `limit` before any of its body is read.
pub fn check_length(req: &HttpRequest, limit: usize) -> Result<()> {
    let length = req.headers().get(actix_web::http::header::CONTENT_LENGTH);
    match length.and_then(|v| v.to_str().ok()).and_then(|s| s.parse::<usize>().ok()) {
        Some(n) if n > limit => Err(too_large(n, limit)),
        _ => Ok(()),
    }
}

/// Reads the whole body, refusing more than `limit` bytes (a chunked body is counted as it
/// arrives) and a body that has not arrived whole within `--http-body-read-timeout` (408).
pub async fn read_body(payload: web::Payload, limit: usize) -> HttpResult<Bytes> {
    let Some(timeout) = read_timeout() else { return Ok(read_all(payload, limit).await?) };
    match tokio::time::timeout(timeout, read_all(payload, limit)).await {
        Ok(body) => Ok(body?),
        Err(_) => Err(HttpError::with_status(
            Error::invalid(format!(
                "the request body did not arrive within {} s. Use --http-body-read-timeout to change the limit.",
                timeout.as_secs()
            )),
            StatusCode::REQUEST_TIMEOUT,
        )),
    }
}

async fn read_all(mut payload: web::Payload, limit: usize) -> Result<Bytes> {
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| Error::invalid(format!("failed to read the request body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(too_large(body.len() + chunk.len(), limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// A whole request body within the app's `BodyLimit`.
pub struct Body(pub Bytes);

impl FromRequest for Body {
    type Error = HttpError;
    type Future = Pin<Box<dyn Future<Output = std::result::Result<Body, HttpError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let limit = req.app_data::<BodyLimit>().expect("every HTTP app registers its BodyLimit").0;
        let checked = check_length(req, limit);
        let payload = web::Payload::from_request(req, payload);
        Box::pin(async move {
            checked?;
            let payload = payload.await.map_err(|e| Error::invalid(format!("failed to read the request body: {e}")))?;
            Ok(Body(read_body(payload, limit).await?))
        })
    }
}
