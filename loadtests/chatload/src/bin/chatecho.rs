//! chatecho: the floor under chatload's turn latency. It answers chatload's turns over the same
//! protocols (gRPC `ModelStreamInfer`, KServe v2 HTTP/1.1 JSON) with the accumulator's answer — a
//! running sum per `sequence_id`, reset by `sequence_start` — computed in place, with no engine,
//! no queue and no model. What chatload measures against it at a given rate is what the load
//! generator, the protocol stacks and the operating system's wake-ups cost on this machine before
//! any server work; run chatload with `--bare-server`.
//!
//!   chatecho --http 127.0.0.1:9000 --grpc 127.0.0.1:9001

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use bytes::Bytes;
use clap::Parser;
use futures::Stream;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tonic::{Request, Response, Status, Streaming};

/// Triton's `inference` package, generated from the server's proto/.
#[allow(clippy::all, clippy::pedantic, missing_docs, dead_code)]
mod proto {
    tonic::include_proto!("inference");
}

use proto::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use proto::infer_parameter::ParameterChoice;
use proto::model_infer_response::InferOutputTensor;
use proto::{ModelInferRequest, ModelInferResponse, ModelStreamInferResponse};

#[derive(Parser, Debug)]
#[command(about = "Answers chatload's turns in place (running sum per sequence): the latency floor")]
struct Args {
    /// HTTP address to listen on (host:port).
    #[arg(long, default_value = "127.0.0.1:9000")]
    http: String,
    /// gRPC address to listen on (host:port).
    #[arg(long, default_value = "127.0.0.1:9001")]
    grpc: String,
}

/// The conversations' running sums.
#[derive(Clone, Default)]
struct Sums(Arc<Mutex<HashMap<u64, i64>>>);

impl Sums {
    fn add(&self, sequence_id: u64, start: bool, value: i32) -> i64 {
        let mut sums = self.0.lock().unwrap();
        let sum = sums.entry(sequence_id).or_insert(0);
        if start {
            *sum = 0;
        }
        *sum += value as i64;
        *sum
    }
}

fn grpc_answer(sums: &Sums, r: ModelInferRequest) -> ModelStreamInferResponse {
    let param = |name: &str| r.parameters.get(name).and_then(|p| p.parameter_choice.clone());
    let sequence_id = match param("sequence_id") {
        Some(ParameterChoice::Int64Param(v)) => v as u64,
        Some(ParameterChoice::Uint64Param(v)) => v,
        _ => return error("no sequence_id"),
    };
    let start = matches!(param("sequence_start"), Some(ParameterChoice::BoolParam(true)));
    let value = r.inputs.first().and_then(|i| i.contents.as_ref()).and_then(|c| c.int_contents.first().copied());
    let Some(value) = value else { return error("INPUT has no int_contents") };
    let sum = sums.add(sequence_id, start, value) as i32;
    ModelStreamInferResponse {
        error_message: String::new(),
        infer_response: Some(ModelInferResponse {
            model_name: r.model_name,
            id: r.id,
            outputs: vec![InferOutputTensor {
                name: "OUTPUT".into(),
                datatype: "INT32".into(),
                shape: vec![1, 1],
                ..Default::default()
            }],
            raw_output_contents: vec![Bytes::copy_from_slice(&sum.to_le_bytes())],
            ..Default::default()
        }),
    }
}

fn error(message: &str) -> ModelStreamInferResponse {
    ModelStreamInferResponse { error_message: message.into(), infer_response: None }
}

type Answers = Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

#[tonic::async_trait]
impl GrpcInferenceService for Sums {
    async fn model_stream_infer(
        &self,
        request: Request<Streaming<ModelInferRequest>>,
    ) -> Result<Response<Answers>, Status> {
        let answers =
            futures::stream::unfold((request.into_inner(), self.clone()), |(mut incoming, sums)| async move {
                let r = incoming.message().await.ok().flatten()?;
                Some((Ok(grpc_answer(&sums, r)), (incoming, sums)))
            });
        Ok(Response::new(Box::pin(answers)))
    }
}

fn http_answer(sums: &Sums, body: &[u8]) -> Result<String, String> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let sequence_id = v["parameters"]["sequence_id"].as_u64().ok_or("no sequence_id")?;
    let start = v["parameters"]["sequence_start"].as_bool().unwrap_or(false);
    let value = v["inputs"][0]["data"][0].as_i64().ok_or("no INPUT data")? as i32;
    let sum = sums.add(sequence_id, start, value);
    Ok(serde_json::json!({
        "model_name": "accumulate_oldest",
        "outputs": [{"name": "OUTPUT", "datatype": "INT32", "shape": [1, 1], "data": [sum]}],
    })
    .to_string())
}

async fn serve_http(address: String, sums: Sums) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(&address).await?;
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let sums = sums.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let sums = sums.clone();
                async move {
                    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    let (status, text) = match http_answer(&sums, &body) {
                        Ok(text) => (200, text),
                        Err(e) => (400, serde_json::json!({ "error": e }).to_string()),
                    };
                    let response = hyper::Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(text)))
                        .expect("a valid response");
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(tcp), service).await;
        });
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let sums = Sums::default();
    let http = tokio::spawn(serve_http(args.http.clone(), sums.clone()));
    let grpc = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(GrpcInferenceServiceServer::new(sums))
        .serve(args.grpc.parse()?);
    println!("chatecho: HTTP {} gRPC {}", args.http, args.grpc);
    tokio::select! {
        r = grpc => r?,
        r = http => r??,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_per_sequence_and_restarts() {
        let sums = Sums::default();
        assert_eq!(sums.add(1, true, 5), 5);
        assert_eq!(sums.add(2, true, 7), 7);
        assert_eq!(sums.add(1, false, 3), 8);
        assert_eq!(sums.add(1, true, 2), 2);
        let body = br#"{"parameters":{"sequence_id":2,"sequence_start":false},"inputs":[{"data":[1]}]}"#;
        assert!(http_answer(&sums, body).unwrap().contains("\"data\":[8]"));
        assert!(http_answer(&sums, b"{}").is_err());
    }
}
