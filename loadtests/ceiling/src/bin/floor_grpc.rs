//! Floor over gRPC: the least a gRPC server must do to answer perf_analyzer's `add_sub`
//! requests here. The same gRPC stack as Tritium (tonic on tokio, Triton's
//! `GRPCInferenceService` from `proto/`), answering in the call's own handler: read the two
//! FP32 inputs (raw contents or `fp32_contents`), add and subtract them, write the two outputs
//! as raw contents. No router, no scheduler, no instance thread, no statistics. Its latency at
//! concurrency 1 is what perf_analyzer, the loopback, HTTP/2 and tonic cost on this machine;
//! `loadtests/targets.py` measures it beside Tritium's gRPC in one run (the HTTP `floor`'s
//! counterpart).
//!
//!   floor_grpc --port 8001 [--workers N]
//!
//! It knows one model, `add_sub` as bundled (INPUT0/INPUT1 FP32 [-1,16] in, OUTPUT0/OUTPUT1
//! out, max_batch_size 8); anything else gets Triton's NOT_FOUND or INVALID_ARGUMENT status.
//! The RPCs it does not need answer UNIMPLEMENTED.

use std::collections::HashMap;

use prost::bytes::Bytes;
use tonic::{Request, Response, Status};

/// Generated code: its lints are prost's and tonic's, not the floor's.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
mod pb {
    tonic::include_proto!("inference");
}

use pb::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use pb::model_metadata_response::TensorMetadata;

const MODEL: &str = "add_sub";
const WIDTH: usize = 16;

fn unknown(model: &str) -> Status {
    Status::not_found(format!("Request for unknown model: '{model}' is not found"))
}

fn known(model: &str) -> Result<(), Status> {
    if model == MODEL {
        Ok(())
    } else {
        Err(unknown(model))
    }
}

/// An input's floats: its raw contents (the `index`-th of the request's) or its `fp32_contents`.
fn floats(t: &pb::model_infer_request::InferInputTensor, raw: Option<&Bytes>) -> Result<Vec<f32>, Status> {
    if let Some(raw) = raw {
        if raw.len() % 4 != 0 {
            return Err(Status::invalid_argument(format!("input '{}': raw contents not FP32", t.name)));
        }
        return Ok(raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect());
    }
    match &t.contents {
        Some(c) => Ok(c.fp32_contents.clone()),
        None => Err(Status::invalid_argument(format!("input '{}' has no data", t.name))),
    }
}

struct Floor;

#[tonic::async_trait]
impl GrpcInferenceService for Floor {
    async fn server_live(&self, _: Request<pb::ServerLiveRequest>) -> Result<Response<pb::ServerLiveResponse>, Status> {
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        Ok(Response::new(pb::ServerReadyResponse { ready: true }))
    }

    async fn model_ready(
        &self,
        req: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        Ok(Response::new(pb::ModelReadyResponse { ready: req.get_ref().name == MODEL }))
    }

    async fn server_metadata(
        &self,
        _: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        Ok(Response::new(pb::ServerMetadataResponse {
            name: "floor".into(),
            version: "0".into(),
            extensions: Vec::new(),
        }))
    }

    async fn model_metadata(
        &self,
        req: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        known(&req.get_ref().name)?;
        let t = |n: &str| TensorMetadata { name: n.into(), datatype: "FP32".into(), shape: vec![-1, WIDTH as i64] };
        Ok(Response::new(pb::ModelMetadataResponse {
            name: MODEL.into(),
            versions: vec!["1".into()],
            platform: "onnxruntime_onnx".into(),
            inputs: vec![t("INPUT0"), t("INPUT1")],
            outputs: vec![t("OUTPUT0"), t("OUTPUT1")],
        }))
    }

    async fn model_config(
        &self,
        req: Request<pb::ModelConfigRequest>,
    ) -> Result<Response<pb::ModelConfigResponse>, Status> {
        known(&req.get_ref().name)?;
        let fp32 = pb::DataType::TypeFp32 as i32;
        let input = |n: &str| pb::ModelInput {
            name: n.into(),
            data_type: fp32,
            dims: vec![WIDTH as i64],
            ..Default::default()
        };
        let output = |n: &str| pb::ModelOutput {
            name: n.into(),
            data_type: fp32,
            dims: vec![WIDTH as i64],
            ..Default::default()
        };
        let config = pb::ModelConfig {
            name: MODEL.into(),
            platform: "onnxruntime_onnx".into(),
            backend: "onnxruntime".into(),
            max_batch_size: 8,
            input: vec![input("INPUT0"), input("INPUT1")],
            output: vec![output("OUTPUT0"), output("OUTPUT1")],
            ..Default::default()
        };
        Ok(Response::new(pb::ModelConfigResponse { config: Some(config) }))
    }

    async fn model_infer(
        &self,
        req: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        let req = req.into_inner();
        known(&req.model_name)?;
        let (mut a, mut b, mut batch) = (Vec::new(), Vec::new(), 0usize);
        for (i, t) in req.inputs.iter().enumerate() {
            let values = floats(t, req.raw_input_contents.get(i))?;
            batch = t.shape.first().copied().unwrap_or(1).max(0) as usize;
            match t.name.as_str() {
                "INPUT0" => a = values,
                "INPUT1" => b = values,
                other => return Err(Status::invalid_argument(format!("unknown input '{other}' for model '{MODEL}'"))),
            }
        }
        if a.len() != batch * WIDTH || b.len() != batch * WIDTH {
            return Err(Status::invalid_argument("inputs must be [batch, 16] FP32"));
        }
        let sum: Vec<u8> = a.iter().zip(&b).flat_map(|(x, y)| (x + y).to_le_bytes()).collect();
        let diff: Vec<u8> = a.iter().zip(&b).flat_map(|(x, y)| (x - y).to_le_bytes()).collect();
        let out = |n: &str| pb::model_infer_response::InferOutputTensor {
            name: n.into(),
            datatype: "FP32".into(),
            shape: vec![batch as i64, WIDTH as i64],
            parameters: HashMap::new(),
            contents: None,
        };
        Ok(Response::new(pb::ModelInferResponse {
            model_name: MODEL.into(),
            model_version: "1".into(),
            id: req.id,
            parameters: HashMap::new(),
            outputs: vec![out("OUTPUT0"), out("OUTPUT1")],
            raw_output_contents: vec![Bytes::from(sum), Bytes::from(diff)],
        }))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut port = 8001u16;
    let mut workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--port" => port = value.parse().expect("--port: a number"),
            "--workers" => workers = value.parse().expect("--workers: a number"),
            other => {
                eprintln!("floor_grpc: unknown flag {other}\nusage: floor_grpc --port N [--workers N]");
                std::process::exit(2);
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(workers.max(1)).enable_all().build()?;
    rt.block_on(async move {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        tonic::transport::Server::builder().add_service(GrpcInferenceServiceServer::new(Floor)).serve(addr).await
    })?;
    Ok(())
}
