//! A `POST /v1/chat/completions` body, checked, and what it becomes: the prompt (the messages
//! through the model's chat template, from its config parameters `chat_template_message`, with
//! `{role}` and `{content}`, and `chat_template_generation`) and the model's inputs.

use bytes::Bytes;
use serde_json::{Map, Value};
use tritium_actors::tensor::serialize_bytes;
use tritium_actors::{DataType, Tensor};

use super::error::ApiError;
use crate::config::ModelConfig;

/// Roles a message may have; OpenAI's `developer` is a system message.
const ROLES: [&str; 4] = ["system", "developer", "user", "assistant"];

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
}

fn number(obj: &Map<String, Value>, key: &'static str) -> Result<Option<f64>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| ApiError::bad_request(format!("'{key}' must be a number"), key)),
    }
}

fn integer(obj: &Map<String, Value>, key: &'static str) -> Result<Option<i64>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            v.as_i64().map(Some).ok_or_else(|| ApiError::bad_request(format!("'{key}' must be an integer"), key))
        }
    }
}

fn content_text(content: &Value) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                (Some("text"), Some(t)) => Ok(t.to_string()),
                _ => Err(ApiError::bad_request("only text content parts are supported", "messages")),
            })
            .collect(),
        _ => Err(ApiError::bad_request("a message's 'content' must be a string or a list of text parts", "messages")),
    }
}

/// Parses and checks the body.
pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let doc: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}"), "body"))?;
    let obj = doc.as_object().ok_or_else(|| ApiError::bad_request("the body must be a JSON object", "body"))?;
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("'model' is required and must be a string", "model"))?
        .to_string();
    let list = obj
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("'messages' is required and must be a list", "messages"))?;
    if list.is_empty() {
        return Err(ApiError::bad_request("'messages' must hold at least one message", "messages"));
    }
    let mut messages = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if !ROLES.contains(&role) {
            return Err(ApiError::bad_request(
                format!("messages[{i}].role '{role}' is not supported: use one of 'system', 'developer', 'user', 'assistant'"),
                "messages",
            ));
        }
        let content = content_text(m.get("content").unwrap_or(&Value::Null))?;
        let role = if role == "developer" { "system" } else { role };
        messages.push(Message { role: role.to_string(), content });
    }
    if let Some(n) = integer(obj, "n")? {
        if n != 1 {
            return Err(ApiError::bad_request("only n = 1 is supported", "n"));
        }
    }
    let max_tokens = match integer(obj, "max_completion_tokens")? {
        Some(n) => Some(n),
        None => integer(obj, "max_tokens")?,
    };
    if max_tokens.is_some_and(|n| n < 1) {
        return Err(ApiError::bad_request("'max_tokens' must be at least 1", "max_tokens"));
    }
    let temperature = number(obj, "temperature")?;
    if temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
        return Err(ApiError::bad_request("'temperature' must be between 0 and 2", "temperature"));
    }
    let top_p = number(obj, "top_p")?;
    if top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
        return Err(ApiError::bad_request("'top_p' must be greater than 0 and at most 1", "top_p"));
    }
    let stop = match obj.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.len() <= 4 => items
            .iter()
            .map(|s| {
                s.as_str().map(str::to_string).ok_or_else(|| ApiError::bad_request("'stop' must hold strings", "stop"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::bad_request("'stop' must be a string or a list of up to 4 strings", "stop")),
    };
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(v) => v.as_bool().ok_or_else(|| ApiError::bad_request("'stream' must be a boolean", "stream"))?,
    };
    let include_usage =
        obj.get("stream_options").and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
    Ok(ChatRequest {
        model,
        messages,
        max_tokens,
        temperature,
        top_p,
        seed: integer(obj, "seed")?,
        stop,
        stream,
        include_usage,
    })
}

/// The chat template of a model: `None` when its config has none (it is not a chat model).
pub struct Template {
    message: String,
    generation: String,
}

impl Template {
    pub fn of(config: &ModelConfig) -> Option<Template> {
        let message = config.parameters.get("chat_template_message")?.string_value.clone();
        let generation =
            config.parameters.get("chat_template_generation").map(|p| p.string_value.clone()).unwrap_or_default();
        Some(Template { message, generation })
    }

    pub fn render(&self, messages: &[Message]) -> String {
        let mut text: String =
            messages.iter().map(|m| self.message.replace("{role}", &m.role).replace("{content}", &m.content)).collect();
        text.push_str(&self.generation);
        text
    }
}

fn scalar(name: &str, datatype: DataType, data: Vec<u8>) -> Tensor {
    Tensor::new(name, datatype, vec![1], Bytes::from(data))
}

/// The model's inputs for a request whose prompt is `prompt`.
pub fn inputs(req: &ChatRequest, prompt: &str, stream: bool) -> Vec<Tensor> {
    let mut inputs = vec![
        Tensor::new("text_input", DataType::Bytes, vec![1], serialize_bytes([prompt.as_bytes()])),
        scalar("stream", DataType::Bool, vec![stream as u8]),
    ];
    if let Some(n) = req.max_tokens {
        inputs.push(scalar("max_tokens", DataType::I32, (n.min(i64::from(i32::MAX)) as i32).to_le_bytes().to_vec()));
    }
    if let Some(t) = req.temperature {
        inputs.push(scalar("temperature", DataType::F32, (t as f32).to_le_bytes().to_vec()));
    }
    if let Some(p) = req.top_p {
        inputs.push(scalar("top_p", DataType::F32, (p as f32).to_le_bytes().to_vec()));
    }
    if let Some(s) = req.seed {
        inputs.push(scalar("seed", DataType::I64, s.to_le_bytes().to_vec()));
    }
    if !req.stop.is_empty() {
        let n = req.stop.len() as i64;
        inputs.push(Tensor::new(
            "stop",
            DataType::Bytes,
            vec![n],
            serialize_bytes(req.stop.iter().map(String::as_bytes)),
        ));
    }
    inputs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_request() {
        let body = br#"{"model": "m", "messages": [{"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_completion_tokens": 5,
            "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": "x", "stream": true,
            "stream_options": {"include_usage": true}}"#;
        let r = parse(body).unwrap();
        assert_eq!(r.messages[0], Message { role: "system".into(), content: "be brief".into() });
        assert_eq!(r.messages[1].content, "hi");
        assert_eq!(
            (r.max_tokens, r.seed, r.stop.clone(), r.stream, r.include_usage),
            (Some(5), Some(3), vec!["x".to_string()], true, true)
        );
    }

    #[test]
    fn refuses_bad_roles_and_values_naming_the_parameter() {
        let bad = |body: &str| parse(body.as_bytes()).unwrap_err();
        assert_eq!(bad(r#"{"model": "m", "messages": [{"role": "tool", "content": "x"}]}"#).param, Some("messages"));
        assert_eq!(bad(r#"{"model": "m", "messages": []}"#).param, Some("messages"));
        assert_eq!(bad(r#"{"messages": [{"role": "user", "content": "x"}]}"#).param, Some("model"));
        let m = r#""model": "m", "messages": [{"role": "user", "content": "x"}]"#;
        assert_eq!(bad(&format!("{{{m}, \"max_tokens\": 0}}")).param, Some("max_tokens"));
        assert_eq!(bad(&format!("{{{m}, \"temperature\": 3}}")).param, Some("temperature"));
        assert_eq!(bad(&format!("{{{m}, \"n\": 2}}")).param, Some("n"));
        assert_eq!(bad(&format!("{{{m}, \"stop\": [1]}}")).param, Some("stop"));
    }

    #[test]
    fn the_template_renders_each_message_then_the_generation_prompt() {
        let t = Template { message: "<|{role}|>\n{content}<|end|>\n".into(), generation: "<|assistant|>\n".into() };
        let msgs = vec![Message { role: "user".into(), content: "hi".into() }];
        assert_eq!(t.render(&msgs), "<|user|>\nhi<|end|>\n<|assistant|>\n");
    }
}
