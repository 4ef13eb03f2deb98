//! Turns over HTTP/1.1 (KServe v2 JSON): a few keep-alive connections, each carrying the turns of
//! many conversations one after another (HTTP/1.1 has one request in flight per connection):
//! KServe v2 infer for the accumulator, Triton's generate extension for chat turns.

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::chat::ChatReply;

/// A request: its path, its JSON body, where its answer goes.
type Job = (String, Bytes, oneshot::Sender<Result<Bytes, String>>);

pub struct HttpTurns {
    model: String,
    connections: Vec<mpsc::UnboundedSender<Job>>,
}

impl HttpTurns {
    /// `address` is host:port.
    pub async fn connect(address: &str, model: &str, connections: usize) -> Result<Self> {
        let mut senders = Vec::new();
        for _ in 0..connections.max(1) {
            let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
            let tcp = TcpStream::connect(address).await.with_context(|| format!("connecting to {address}"))?;
            tcp.set_nodelay(true)?;
            let (mut send, conn) = http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp)).await?;
            tokio::spawn(conn);
            let host = address.to_string();
            tokio::spawn(async move {
                while let Some((path, body, reply)) = rx.recv().await {
                    let request = hyper::Request::post(&path)
                        .header("host", &host)
                        .header("content-type", "application/json")
                        .body(Full::new(body))
                        .expect("a valid request");
                    let result = async {
                        send.ready().await.map_err(|e| format!("HTTP connection: {e}"))?;
                        let response = send.send_request(request).await.map_err(|e| format!("HTTP: {e}"))?;
                        let status = response.status();
                        let body =
                            response.into_body().collect().await.map_err(|e| format!("HTTP body: {e}"))?.to_bytes();
                        if status.is_success() {
                            Ok(body)
                        } else {
                            Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)))
                        }
                    }
                    .await;
                    let _ = reply.send(result);
                }
            });
            senders.push(tx);
        }
        Ok(HttpTurns { model: model.to_string(), connections: senders })
    }

    pub async fn turn(&self, conversation: u64, sequence_id: u64, value: i32, start: bool) -> Result<i64, String> {
        let body = serde_json::json!({
            "parameters": {"sequence_id": sequence_id, "sequence_start": start},
            "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}],
            "outputs": [{"name": "OUTPUT"}],
        });
        let v = self.post(conversation, format!("/v2/models/{}/infer", self.model), body).await?;
        v["outputs"]
            .as_array()
            .and_then(|o| o.iter().find(|o| o["name"] == "OUTPUT"))
            .and_then(|o| o["data"][0].as_i64())
            .ok_or_else(|| format!("no OUTPUT value in {v}"))
    }

    /// One stateless add_sub request (no sequence parameters): OUTPUT0 and OUTPUT1.
    pub async fn add_sub(&self, conversation: u64, a: &[f32], b: &[f32]) -> Result<(Vec<f32>, Vec<f32>), String> {
        let body = serde_json::json!({
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, a.len()], "data": a},
                {"name": "INPUT1", "datatype": "FP32", "shape": [1, b.len()], "data": b},
            ],
        });
        let v = self.post(conversation, format!("/v2/models/{}/infer", self.model), body).await?;
        let output = |name: &str| -> Result<Vec<f32>, String> {
            v["outputs"]
                .as_array()
                .and_then(|o| o.iter().find(|o| o["name"] == name))
                .and_then(|o| o["data"].as_array())
                .map(|d| d.iter().filter_map(|x| x.as_f64()).map(|x| x as f32).collect())
                .ok_or_else(|| format!("no {name} values in {v}"))
        };
        Ok((output("OUTPUT0")?, output("OUTPUT1")?))
    }

    /// One chat turn through Triton's generate extension (`/v2/models/<m>/generate`: the
    /// model's inputs and the sequence parameters as fields); greedy decoding.
    pub async fn chat(
        &self,
        conversation: u64,
        sequence_id: u64,
        prompt: &str,
        (start, end): (bool, bool),
        max_tokens: i32,
        id: Option<String>,
    ) -> Result<ChatReply, String> {
        let mut body = serde_json::json!({
            "text_input": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "parameters": {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end},
        });
        if let Some(id) = id {
            body["id"] = id.into();
        }
        let v = self.post(conversation, format!("/v2/models/{}/generate", self.model), body).await?;
        let text = |name: &str| v[name].as_str().map(str::to_string).ok_or_else(|| format!("no {name} in {v}"));
        let int = |name: &str| v[name].as_i64().ok_or_else(|| format!("no {name} in {v}"));
        ChatReply::read(text, int)
    }

    /// POSTs `body` to `path` on the conversation's connection; the answer as JSON.
    async fn post(
        &self,
        conversation: u64,
        path: String,
        body: serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let (tx, rx) = oneshot::channel();
        let connection = &self.connections[(conversation as usize) % self.connections.len()];
        connection
            .send((path, Bytes::from(body.to_string()), tx))
            .map_err(|_| "the HTTP connection is closed".to_string())?;
        let bytes = rx.await.map_err(|_| "the HTTP connection ended".to_string())??;
        serde_json::from_slice(&bytes).map_err(|e| format!("reply is not JSON: {e}"))
    }
}
