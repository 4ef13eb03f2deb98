//! Turns over gRPC `ModelStreamInfer`: a few bidirectional streams on a few HTTP/2 connections,
//! each carrying the turns of many conversations, answers matched back by request `id`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use tokio::sync::{mpsc, oneshot};

use crate::chat::ChatReply;
use crate::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use crate::proto::infer_parameter::ParameterChoice;
use crate::proto::model_infer_request::InferInputTensor;
use crate::proto::{InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse};

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<ModelInferResponse>>>>;

struct Stream {
    tx: mpsc::UnboundedSender<ModelInferRequest>,
    pending: Pending,
}

/// The streams, picked by conversation, so one conversation's turns stay on one stream.
pub struct GrpcTurns {
    model: String,
    streams: Vec<Stream>,
    next_id: AtomicU64,
    /// Error messages the streams answered (they carry no request id).
    pub stream_errors: Arc<AtomicU64>,
    pub first_stream_error: Arc<Mutex<Option<String>>>,
}

impl GrpcTurns {
    pub async fn connect(url: &str, model: &str, connections: usize, streams_per_connection: usize) -> Result<Self> {
        let stream_errors = Arc::new(AtomicU64::new(0));
        let first_stream_error = Arc::new(Mutex::new(None));
        let mut streams = Vec::new();
        for _ in 0..connections.max(1) {
            let channel = tonic::transport::Endpoint::from_shared(url.to_string())?
                .connect()
                .await
                .with_context(|| format!("connecting to {url}"))?;
            let client = GrpcInferenceServiceClient::new(channel)
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(64 << 20);
            for _ in 0..streams_per_connection.max(1) {
                let (tx, rx) = mpsc::unbounded_channel::<ModelInferRequest>();
                let outgoing = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
                let pending: Pending = Arc::default();
                let (p, errors, first, client) =
                    (pending.clone(), stream_errors.clone(), first_stream_error.clone(), client.clone());
                // The call itself runs in the task: the server may send its headers only with
                // the first answer, which needs a first request.
                tokio::spawn(async move {
                    let mut incoming = match client.clone().model_stream_infer(outgoing).await {
                        Ok(r) => r.into_inner(),
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            first.lock().unwrap().get_or_insert(format!("ModelStreamInfer: {e}"));
                            p.lock().unwrap().clear();
                            return;
                        }
                    };
                    while let Ok(Some(msg)) = incoming.message().await {
                        match msg.infer_response {
                            Some(r) if msg.error_message.is_empty() => {
                                if let Some(waiter) = p.lock().unwrap().remove(&r.id) {
                                    let _ = waiter.send(r);
                                }
                            }
                            _ => {
                                errors.fetch_add(1, Ordering::Relaxed);
                                first.lock().unwrap().get_or_insert(msg.error_message);
                            }
                        }
                    }
                    // The stream ended: its waiters see their senders dropped.
                    p.lock().unwrap().clear();
                });
                streams.push(Stream { tx, pending });
            }
        }
        Ok(GrpcTurns {
            model: model.to_string(),
            streams,
            next_id: AtomicU64::new(1),
            stream_errors,
            first_stream_error,
        })
    }

    /// One turn: `value` into the conversation's sequence; the reply's OUTPUT.
    pub async fn turn(&self, conversation: u64, sequence_id: u64, value: i32, start: bool) -> Result<i64, String> {
        let inputs = vec![InferInputTensor {
            name: "INPUT".into(),
            datatype: "INT32".into(),
            shape: vec![1, 1],
            contents: Some(InferTensorContents { int_contents: vec![value], ..Default::default() }),
            ..Default::default()
        }];
        let response = self.call(conversation, sequence_id, (start, false), inputs, None).await?;
        output_value(&response)
    }

    /// One stateless add_sub request (no sequence parameters): OUTPUT0 and OUTPUT1.
    pub async fn add_sub(&self, conversation: u64, a: &[f32], b: &[f32]) -> Result<(Vec<f32>, Vec<f32>), String> {
        let tensor = |name: &str, v: &[f32]| InferInputTensor {
            name: name.into(),
            datatype: "FP32".into(),
            shape: vec![1, v.len() as i64],
            contents: Some(InferTensorContents { fp32_contents: v.to_vec(), ..Default::default() }),
            ..Default::default()
        };
        let response =
            self.call(conversation, 0, (false, false), vec![tensor("INPUT0", a), tensor("INPUT1", b)], None).await?;
        Ok((output_f32(&response, "OUTPUT0")?, output_f32(&response, "OUTPUT1")?))
    }

    /// One chat turn on a decoupled text-generation model (`stream` left false: one response,
    /// the whole reply and its counts); greedy decoding.
    pub async fn chat(
        &self,
        conversation: u64,
        sequence_id: u64,
        prompt: &str,
        (start, end): (bool, bool),
        max_tokens: i32,
        id: Option<String>,
    ) -> Result<ChatReply, String> {
        let tensor = |name: &str, datatype: &str, contents: InferTensorContents| InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape: vec![1],
            contents: Some(contents),
            ..Default::default()
        };
        let inputs = vec![
            tensor(
                "text_input",
                "BYTES",
                InferTensorContents { bytes_contents: vec![prompt.to_string().into()], ..Default::default() },
            ),
            tensor("max_tokens", "INT32", InferTensorContents { int_contents: vec![max_tokens], ..Default::default() }),
            tensor("temperature", "FP32", InferTensorContents { fp32_contents: vec![0.0], ..Default::default() }),
        ];
        let response = self.call(conversation, sequence_id, (start, end), inputs, id).await?;
        let text = |name: &str| -> Result<String, String> {
            let raw = output_bytes(&response, name)?;
            // A BYTES element: its 4-byte little-endian length, then its bytes.
            let len = raw.get(..4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
            len.and_then(|n| raw.get(4..4 + n))
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .ok_or_else(|| format!("{name} is not one BYTES element"))
        };
        let int = |name: &str| -> Result<i64, String> {
            let raw = output_bytes(&response, name)?;
            let b: [u8; 4] = raw.get(..4).and_then(|s| s.try_into().ok()).ok_or(format!("{name} is not one INT32"))?;
            Ok(i32::from_le_bytes(b) as i64)
        };
        ChatReply::read(text, int)
    }

    /// Sends one request on the conversation's stream, with request id `id` (unique among the
    /// requests in flight; a number of its own when `None`); its first response. `sequence_id`
    /// 0 sends no sequence parameters (a stateless request).
    async fn call(
        &self,
        conversation: u64,
        sequence_id: u64,
        (start, end): (bool, bool),
        inputs: Vec<InferInputTensor>,
        id: Option<String>,
    ) -> Result<ModelInferResponse, String> {
        let stream = &self.streams[(conversation as usize) % self.streams.len()];
        let id = id.unwrap_or_else(|| self.next_id.fetch_add(1, Ordering::Relaxed).to_string());
        let mut parameters = HashMap::new();
        if sequence_id != 0 {
            parameters.insert(
                "sequence_id".to_string(),
                InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(sequence_id as i64)) },
            );
        }
        for (flag, on) in [("sequence_start", start), ("sequence_end", end)] {
            if on {
                parameters.insert(
                    flag.to_string(),
                    InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(true)) },
                );
            }
        }
        let request = ModelInferRequest {
            model_name: self.model.clone(),
            id: id.clone(),
            parameters,
            inputs,
            ..Default::default()
        };
        let (tx, rx) = oneshot::channel();
        stream.pending.lock().unwrap().insert(id.clone(), tx);
        if stream.tx.send(request).is_err() {
            stream.pending.lock().unwrap().remove(&id);
            return Err("the gRPC stream is closed".into());
        }
        rx.await.map_err(|_| "the gRPC stream ended before the answer".to_string())
    }
}

/// An output's bytes: its raw_output_contents (the server's choice), else its typed contents
/// re-encoded as raw (BYTES and INT32 only: what the chat turns read).
fn output_bytes(r: &ModelInferResponse, name: &str) -> Result<Vec<u8>, String> {
    let at = r.outputs.iter().position(|o| o.name == name).ok_or(format!("no {name} in the response"))?;
    if let Some(raw) = r.raw_output_contents.get(at) {
        return Ok(raw.to_vec());
    }
    let c = r.outputs[at].contents.as_ref().ok_or(format!("{name} has no contents"))?;
    if let Some(b) = c.bytes_contents.first() {
        let mut v = (b.len() as u32).to_le_bytes().to_vec();
        v.extend_from_slice(b);
        return Ok(v);
    }
    c.int_contents.first().map(|i| i.to_le_bytes().to_vec()).ok_or(format!("{name} has no contents"))
}

/// An FP32 output's values, from raw_output_contents or typed contents.
fn output_f32(r: &ModelInferResponse, name: &str) -> Result<Vec<f32>, String> {
    let at = r.outputs.iter().position(|o| o.name == name).ok_or(format!("no {name} in the response"))?;
    if let Some(raw) = r.raw_output_contents.get(at) {
        return Ok(raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect());
    }
    r.outputs[at].contents.as_ref().map(|c| c.fp32_contents.clone()).ok_or(format!("{name} has no contents"))
}

/// OUTPUT's one INT32, from raw_output_contents or typed contents.
fn output_value(r: &ModelInferResponse) -> Result<i64, String> {
    let at = r.outputs.iter().position(|o| o.name == "OUTPUT").ok_or("no OUTPUT in the response")?;
    if let Some(raw) = r.raw_output_contents.get(at) {
        let b: [u8; 4] = raw.get(..4).and_then(|s| s.try_into().ok()).ok_or("OUTPUT is not one INT32")?;
        return Ok(i32::from_le_bytes(b) as i64);
    }
    r.outputs[at]
        .contents
        .as_ref()
        .and_then(|c| c.int_contents.first())
        .map(|v| *v as i64)
        .ok_or_else(|| "OUTPUT has no contents".to_string())
}
