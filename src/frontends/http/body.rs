//! Request bodies, read up to `--http-max-input-size` on every endpoint: a body over the limit
//! (by its Content-Length, or as it arrives) is answered 400 with Triton's JSON error body and
//! the limit's flag named, as Triton's infer answers an input over `--http-max-input-size`;
//! nothing past the limit is buffered. The `Body` extractor takes the limit from the app's
//! `BodyLimit` (the main, SageMaker and Vertex AI endpoints each register theirs); actix's own
//! `web::Bytes` would answer a plain-text 413 at a hidden 256 KiB.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest};
use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;
use tritium_actors::{Error, Result};

use super::error::HttpError;

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
/// arrives).
pub async fn read_body(mut payload: web::Payload, limit: usize) -> Result<Bytes> {
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
