//! floor_mlp over gRPC: the same stack as Tritium's gRPC (tonic, Triton's `GRPCInferenceService`
//! from `proto/`, generated as for `floor_grpc`) in front of the same engine as the HTTP side.
//! Unary ModelInfer with raw contents or `fp32_contents`, and the RPCs perf_analyzer asks
//! (metadata, config, readiness, statistics); the others answer UNIMPLEMENTED.

use std::collections::HashMap;
use std::time::Instant;

use prost::bytes::Bytes;
use tonic::{Request, Response, Status};
use tritium_ceiling::batcher::Batcher;

/// Generated code: its lints are prost's and tonic's, not the floor's.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
mod pb {
    tonic::include_proto!("inference");
}

use pb::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use pb::model_metadata_response::TensorMetadata;

use super::MODEL;

fn known(model: &str) -> Result<(), Status> {
    if model == MODEL {
        Ok(())
    } else {
        Err(Status::not_found(format!("Request for unknown model: '{model}' is not found")))
    }
}

struct Floor {
    batcher: Batcher,
}

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
            name: "floor_mlp".into(),
            version: "0".into(),
            extensions: vec!["statistics".into()],
        }))
    }

    async fn model_metadata(
        &self,
        req: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        known(&req.get_ref().name)?;
        let b = &self.batcher;
        let t =
            |n: &str, w: usize| TensorMetadata { name: n.into(), datatype: "FP32".into(), shape: vec![-1, w as i64] };
        Ok(Response::new(pb::ModelMetadataResponse {
            name: MODEL.into(),
            versions: vec!["1".into()],
            platform: "onnxruntime_onnx".into(),
            inputs: vec![t(&b.input_name, b.input_width)],
            outputs: vec![t(&b.output_name, b.output_width)],
        }))
    }

    async fn model_config(
        &self,
        req: Request<pb::ModelConfigRequest>,
    ) -> Result<Response<pb::ModelConfigResponse>, Status> {
        known(&req.get_ref().name)?;
        let b = &self.batcher;
        let fp32 = pb::DataType::TypeFp32 as i32;
        let config = pb::ModelConfig {
            name: MODEL.into(),
            platform: "onnxruntime_onnx".into(),
            backend: "onnxruntime".into(),
            max_batch_size: b.max_batch as i32,
            input: vec![pb::ModelInput {
                name: b.input_name.clone(),
                data_type: fp32,
                dims: vec![b.input_width as i64],
                ..Default::default()
            }],
            output: vec![pb::ModelOutput {
                name: b.output_name.clone(),
                data_type: fp32,
                dims: vec![b.output_width as i64],
                ..Default::default()
            }],
            ..Default::default()
        };
        Ok(Response::new(pb::ModelConfigResponse { config: Some(config) }))
    }

    async fn model_statistics(
        &self,
        req: Request<pb::ModelStatisticsRequest>,
    ) -> Result<Response<pb::ModelStatisticsResponse>, Status> {
        let name = &req.get_ref().name;
        if !name.is_empty() {
            known(name)?;
        }
        let s = self.batcher.snapshot();
        let d = |ns: u64| Some(pb::StatisticDuration { count: s.requests, ns });
        let stats = pb::ModelStatistics {
            name: MODEL.into(),
            version: "1".into(),
            inference_count: s.requests,
            execution_count: s.executions,
            inference_stats: Some(pb::InferStatistics {
                success: d(s.success_ns),
                fail: Some(pb::StatisticDuration::default()),
                queue: d(s.queue_ns),
                compute_input: d(s.input_ns),
                compute_infer: d(s.infer_ns),
                compute_output: d(s.output_ns),
                cache_hit: Some(pb::StatisticDuration::default()),
                cache_miss: Some(pb::StatisticDuration::default()),
            }),
            ..Default::default()
        };
        Ok(Response::new(pb::ModelStatisticsResponse { model_stats: vec![stats] }))
    }

    async fn model_infer(
        &self,
        req: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        let arrived = Instant::now();
        let req = req.into_inner();
        known(&req.model_name)?;
        let b = &self.batcher;
        let [t] = req.inputs.as_slice() else {
            return Err(Status::invalid_argument(format!("expected one input, '{}'", b.input_name)));
        };
        if t.name != b.input_name {
            return Err(Status::invalid_argument(format!("unknown input '{}' for model '{MODEL}'", t.name)));
        }
        let floats: Vec<f32> = match (req.raw_input_contents.first(), &t.contents) {
            (Some(raw), _) => raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            (None, Some(c)) => c.fp32_contents.clone(),
            (None, None) => return Err(Status::invalid_argument(format!("input '{}' has no data", t.name))),
        };
        let rows = t.shape.first().copied().unwrap_or(1).max(0) as usize;
        if rows == 0 || rows > b.max_batch || floats.len() != rows * b.input_width {
            return Err(Status::invalid_argument(format!(
                "the input must be [1..{}, {}] FP32",
                b.max_batch, b.input_width
            )));
        }
        let values = match b.submit(floats, rows).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(Status::internal(e)),
            Err(_) => return Err(Status::internal("the engine dropped the request")),
        };
        let raw: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        b.answered(arrived);
        Ok(Response::new(pb::ModelInferResponse {
            model_name: MODEL.into(),
            model_version: "1".into(),
            id: req.id,
            parameters: HashMap::new(),
            outputs: vec![pb::model_infer_response::InferOutputTensor {
                name: b.output_name.clone(),
                datatype: "FP32".into(),
                shape: vec![rows as i64, b.output_width as i64],
                parameters: HashMap::new(),
                contents: None,
            }],
            raw_output_contents: vec![Bytes::from(raw)],
        }))
    }
}

/// Serves gRPC on `port` with `workers` tokio threads, on a thread of its own.
pub fn serve(batcher: Batcher, port: u16, workers: usize) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(workers.max(1)).enable_all().build()?;
    std::thread::Builder::new().name("grpc-main".into()).spawn(move || {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let served = rt.block_on(
            tonic::transport::Server::builder()
                .add_service(GrpcInferenceServiceServer::new(Floor { batcher }))
                .serve(addr),
        );
        if let Err(e) = served {
            eprintln!("floor_mlp: gRPC: {e}");
            std::process::exit(1);
        }
    })?;
    Ok(())
}
