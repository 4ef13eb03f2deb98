//! `POST /v1/chat/completions`, non-streaming and streaming (server-sent events ending with
//! `data: [DONE]`), on a chat model (decoupled, `text_input` → `text_output`, with a chat template).
//!
//! Conversations: a request with the header `X-Conversation-Id: <id>` (the `openai` client sends
//! it with `extra_headers`) is a turn of the sequence `<id>` of the model, whose KV cache the
//! engine keeps between turns. The client sends the whole history as usual; the model runs only
//! the tokens its cache does not hold (the new messages, and the reply's end). A request without
//! assistant messages starts the conversation (again); one with them continues it, and starts it
//! if the server does not know it (a new id, or one released after its idle time), which costs
//! a full run of the history and changes nothing in the answer. A conversation evicted for the
//! state cap is 410 Gone (`conversation_evicted`): the client starts it again, knowingly.
//! Without the header, each request is a one-off sequence (start and end at once): stateless.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tritium_actors::{CorrelationId, InferRequest, InferResponse, Reply, Result, SequenceFlags};

use super::error::ApiError;
use super::request::{self, ChatRequest, Template};
use crate::frontends::http::body::Body;
use crate::frontends::http::HttpState;
use crate::server::{LoadedModel, Server};

/// The header that names a conversation.
pub const CONVERSATION_HEADER: &str = "x-conversation-id";
/// What the sequence actor says of a request without START for a sequence it does not know.
const NO_START: &str = "must specify the START flag";

/// True for the models this endpoint serves.
pub fn is_chat_model(model: &LoadedModel) -> bool {
    let p = &model.handle.policy;
    p.decoupled
        && p.input("text_input").is_some()
        && p.output("text_output").is_some()
        && Template::of(&model.config).is_some()
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn unique() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{:x}{:04x}", nanos, NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff)
}

fn text_of(r: &InferResponse, name: &str) -> Option<String> {
    let t = r.outputs.iter().find(|t| t.name == name)?;
    let first = t.bytes_elements().ok()?.into_iter().next()?;
    Some(String::from_utf8_lossy(&first).into_owned())
}

fn int_of(r: &InferResponse, name: &str) -> Option<i64> {
    let t = r.outputs.iter().find(|t| t.name == name)?;
    Some(i64::from(i32::from_le_bytes(t.data.get(..4)?.try_into().ok()?)))
}

/// The end of a reply: why it ended and what it counted.
#[derive(Debug, Default, Clone)]
struct Usage {
    finish: String,
    prompt: i64,
    completion: i64,
    cached: i64,
}

impl Usage {
    fn read(&mut self, r: &InferResponse) {
        if let Some(f) = text_of(r, "finish_reason") {
            self.finish = f;
        }
        self.prompt = int_of(r, "prompt_tokens").unwrap_or(self.prompt);
        self.completion = int_of(r, "completion_tokens").unwrap_or(self.completion);
        self.cached = int_of(r, "cached_tokens").unwrap_or(self.cached);
    }

    fn json(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
            "prompt_tokens_details": { "cached_tokens": self.cached },
        })
    }
}

type Responses = mpsc::UnboundedReceiver<Result<InferResponse>>;

fn submit(server: &Server, request: InferRequest) -> Result<Responses> {
    let (tx, rx) = mpsc::unbounded_channel();
    server.submit(request, Reply::Stream(tx))?;
    Ok(rx)
}

pub async fn completions(
    state: web::Data<HttpState>,
    req: HttpRequest,
    body: Body,
) -> std::result::Result<HttpResponse, ApiError> {
    let chat = request::parse(&body.0)?;
    let model = state.server.model(&chat.model, None).map_err(|_| ApiError::model_not_found(&chat.model))?;
    if !is_chat_model(&model) {
        return Err(ApiError::model_not_found(&chat.model));
    }
    let limit = crate::config::uint_parameter(&chat.model, &model.config.parameters, "max_tokens_limit").ok().flatten();
    if let (Some(n), Some(limit)) = (chat.max_tokens, limit) {
        if n as u64 > limit {
            return Err(ApiError::bad_request(
                format!("max_tokens is too large: {n}. This model supports at most {limit} completion tokens."),
                "max_tokens",
            ));
        }
    }
    let conversation = match req.headers().get(CONVERSATION_HEADER) {
        None => None,
        Some(v) => match v.to_str().map(str::trim) {
            Ok(id) if !id.is_empty() && id.len() <= 256 => Some(id.to_string()),
            _ => {
                return Err(ApiError::bad_request(
                    "X-Conversation-Id must be 1 to 256 visible ASCII characters",
                    "X-Conversation-Id",
                ))
            }
        },
    };
    if conversation.is_some() && model.handle.policy.sequence().is_none() {
        return Err(ApiError::bad_request(
            format!("model '{}' does not keep conversations", chat.model),
            "X-Conversation-Id",
        ));
    }
    let template = Template::of(&model.config).expect("a chat model has a template");
    let prompt = template.render(&chat.messages);
    let mut request = InferRequest::new(chat.model.clone(), request::inputs(&chat, &prompt, chat.stream));
    let continuing = conversation.is_some() && chat.messages.iter().any(|m| m.role == "assistant");
    if model.handle.policy.sequence().is_some() {
        request.sequence = Some(match &conversation {
            Some(id) => SequenceFlags { id: CorrelationId::Str(id.clone()), start: !continuing, end: false },
            None => {
                SequenceFlags { id: CorrelationId::Str(format!("openai-one-off-{}", unique())), start: true, end: true }
            }
        });
    }
    let retry = continuing.then(|| {
        let mut r = request.clone();
        if let Some(s) = &mut r.sequence {
            s.start = true;
        }
        r
    });
    let mut responses = submit(&state.server, request)?;
    let mut first = responses.recv().await;
    if let (Some(Err(e)), Some(again)) = (&first, retry) {
        if e.message.contains(NO_START) {
            responses = submit(&state.server, again)?;
            first = responses.recv().await;
        }
    }
    let first = match first {
        None => return Err(ApiError::from(tritium_actors::Error::internal("the model gave no response"))),
        Some(Err(e)) => return Err(e.into()),
        Some(Ok(r)) => r,
    };
    let meta = Meta { id: format!("chatcmpl-{}", unique()), created: unix_now(), model: chat.model.clone() };
    let mut out =
        if chat.stream { stream(meta, chat, first, responses) } else { complete(meta, first, responses).await? };
    if let Some(id) = conversation {
        if let Ok(v) = header::HeaderValue::from_str(&id) {
            out.headers_mut().insert(header::HeaderName::from_static(CONVERSATION_HEADER), v);
        }
    }
    Ok(out)
}

struct Meta {
    id: String,
    created: u64,
    model: String,
}

async fn complete(
    meta: Meta,
    first: InferResponse,
    mut responses: Responses,
) -> std::result::Result<HttpResponse, ApiError> {
    let mut text = String::new();
    let mut usage = Usage::default();
    let mut next = Some(first);
    while let Some(r) = next.take() {
        text.push_str(&text_of(&r, "text_output").unwrap_or_default());
        usage.read(&r);
        if r.is_final {
            break;
        }
        next = match responses.recv().await {
            None => None,
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(r)) => Some(r),
        };
    }
    let body = json!({
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": text, "refusal": null },
            "logprobs": null,
            "finish_reason": usage.finish,
        }],
        "usage": usage.json(),
        "system_fingerprint": null,
    });
    Ok(HttpResponse::Ok().insert_header((header::CONTENT_TYPE, "application/json")).body(body.to_string()))
}

fn chunk(meta: &Meta, choices: Value, usage: Option<Value>) -> Bytes {
    let mut c = json!({
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": null,
        "choices": choices,
    });
    if let Some(u) = usage {
        c["usage"] = u;
    }
    Bytes::from(format!("data: {c}\n\n"))
}

fn delta(meta: &Meta, delta: Value, finish: Option<&str>) -> Bytes {
    chunk(meta, json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }]), None)
}

/// The server-sent events of a streamed reply: the role, one chunk per piece of text, the finish
/// reason, the usage if asked (`stream_options.include_usage`), then `[DONE]`.
fn stream(meta: Meta, chat: ChatRequest, first: InferResponse, mut responses: Responses) -> HttpResponse {
    let (tx, mut rx) = mpsc::channel::<Bytes>(32);
    actix_rt::spawn(async move {
        let meta = Arc::new(meta);
        if tx.send(delta(&meta, json!({ "role": "assistant", "content": "" }), None)).await.is_err() {
            return;
        }
        let mut usage = Usage::default();
        let mut next = Some(Ok(first));
        while let Some(item) = next.take() {
            match item {
                Ok(r) => {
                    let piece = text_of(&r, "text_output").unwrap_or_default();
                    usage.read(&r);
                    if !piece.is_empty() && tx.send(delta(&meta, json!({ "content": piece }), None)).await.is_err() {
                        return;
                    }
                    if r.is_final {
                        break;
                    }
                }
                Err(e) => {
                    let body = ApiError::from(e).body();
                    let _ = tx.send(Bytes::from(format!("data: {body}\n\n"))).await;
                    let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
                    return;
                }
            }
            next = responses.recv().await;
        }
        let finish = if usage.finish.is_empty() { "stop".to_string() } else { usage.finish.clone() };
        if tx.send(delta(&meta, json!({}), Some(&finish))).await.is_err() {
            return;
        }
        if chat.include_usage && tx.send(chunk(&meta, json!([]), Some(usage.json()))).await.is_err() {
            return;
        }
        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
    });
    let body = futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|b| b.map(Ok::<_, actix_web::Error>)));
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream; charset=utf-8"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(body)
}
