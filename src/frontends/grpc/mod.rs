//! The gRPC frontend (tonic): Triton's `inference.GRPCInferenceService`, every RPC, plus the
//! standard `grpc.health.v1` service. Like the HTTP frontend it only decodes, calls the
//! `Server` facade and encodes; errors map to status codes in one place (`error.rs`).
//! It runs on threads of its own (`serve.rs`), so gRPC traffic does not share the HTTP
//! workers' threads.

mod deadline;
pub mod decode;
mod error;
mod front_door;
mod guard;
mod health;
mod lanes;
mod serve;
mod stream;
mod tensors;
mod timeout;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

pub use error::status;
use error::IntoStatus;
pub use serve::serve;
use tensors::{decode, encode, parse_version, Decoded};
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument as _;
use tritium_actors::Error;

use crate::frontends::request_log::request_span;
use crate::observe::trace::{RemoteParent, TraceValue};
use crate::observe::SettingValue;
use crate::proto::inference as pb;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceService;
use crate::repository::overrides::FILE_PREFIX;
use crate::server::{ModelStatistics, Server};
use crate::shm;

/// Settings from the command line.
#[derive(Debug, Clone)]
pub struct GrpcOptions {
    /// Largest message accepted or sent (Triton allows up to 2 GiB).
    pub max_message_bytes: usize,
    /// HTTP/2 keepalive ping interval (`--grpc-keepalive-time`, ms in Triton's flag).
    pub keepalive_time: Duration,
    /// How long to wait for a ping's answer (`--grpc-keepalive-timeout`).
    pub keepalive_timeout: Duration,
    /// Compress responses with gzip (`--grpc-infer-response-compression-level` other than none).
    pub compress_responses: bool,
    /// `--reuse-grpc-port`.
    pub reuse_port: bool,
    /// `--grpc-header-forward-pattern`.
    pub header_forward: Option<regex::Regex>,
    /// `--grpc-max-connection-age` and `--grpc-max-connection-age-grace`.
    pub max_connection_age: Option<Duration>,
    pub max_connection_age_grace: Option<Duration>,
    /// Most streams open at once on one connection (`--grpc-max-concurrent-streams`; 0: none).
    pub max_concurrent_streams: u32,
    /// Most connections open at once (`--grpc-max-connections`; 0: none).
    pub max_connections: usize,
    /// How long one request message may take to arrive (`--grpc-message-read-timeout`).
    pub message_read_timeout: Option<Duration>,
    pub threads: usize,
    /// `--grpc-restricted-protocol`.
    pub restrictions: Arc<crate::frontends::restricted::Restrictions>,
    /// `--grpc-use-ssl` and its certificates, read at start (`tls::config`).
    pub tls: Option<tonic::transport::ServerTlsConfig>,
}

pub struct GrpcService {
    pub(crate) server: Arc<Server>,
    /// `--grpc-header-forward-pattern`.
    pub(crate) header_forward: Option<regex::Regex>,
}

/// The metadata entries a request carries, as (key, value) for header forwarding (binary
/// `-bin` entries are not forwarded: Triton's parameters are strings). Lazy: without
/// `--grpc-header-forward-pattern` nothing is read.
fn metadata_pairs(metadata: &tonic::metadata::MetadataMap) -> impl Iterator<Item = (&str, &[u8])> {
    metadata.iter().filter_map(|kv| match kv {
        tonic::metadata::KeyAndValueRef::Ascii(k, v) => Some((k.as_str(), v.as_bytes())),
        tonic::metadata::KeyAndValueRef::Binary(..) => None,
    })
}

fn tensor_metadata(t: &crate::server::TensorMetadata) -> pb::model_metadata_response::TensorMetadata {
    pb::model_metadata_response::TensorMetadata {
        name: t.name.clone(),
        datatype: t.datatype.as_str().to_string(),
        shape: t.shape.clone(),
    }
}

fn duration((count, ns): (u64, u64)) -> Option<pb::StatisticDuration> {
    Some(pb::StatisticDuration { count, ns })
}

fn model_statistics(m: &ModelStatistics) -> pb::ModelStatistics {
    let s = &m.stats;
    pb::ModelStatistics {
        name: m.name.clone(),
        version: m.version.clone(),
        last_inference: s.last_inference_ms,
        inference_count: s.inference_count,
        execution_count: s.execution_count,
        inference_stats: Some(pb::InferStatistics {
            success: duration(s.success),
            fail: duration(s.fail),
            queue: duration(s.queue),
            compute_input: duration(s.compute_input),
            compute_infer: duration(s.compute_infer),
            compute_output: duration(s.compute_output),
            cache_hit: duration(s.cache_hit),
            cache_miss: duration(s.cache_miss),
        }),
        batch_stats: s
            .batches
            .iter()
            .map(|(size, b)| pb::InferBatchStatistics {
                batch_size: *size,
                compute_input: duration((b.count, b.compute_input_ns)),
                compute_infer: duration((b.count, b.compute_infer_ns)),
                compute_output: duration((b.count, b.compute_output_ns)),
            })
            .collect(),
        memory_usage: s
            .memory_usage
            .iter()
            .map(|m| pb::MemoryUsage { r#type: m.kind.clone(), id: m.id, byte_size: m.byte_size })
            .collect(),
        response_stats: s
            .responses
            .iter()
            .map(|(index, r)| {
                let figures = pb::InferResponseStatistics {
                    compute_infer: duration(r.compute_infer),
                    compute_output: duration(r.compute_output),
                    success: duration(r.success),
                    fail: duration(r.fail),
                    empty_response: duration(r.empty_response),
                    cancel: duration(r.cancel),
                };
                (index.clone(), figures)
            })
            .collect(),
    }
}

impl GrpcService {
    /// `ModelInfer`: tonic's generated service and the front door (`front_door.rs`) both call
    /// this; the door without the trait's boxed future.
    pub(crate) async fn infer(
        &self,
        request: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        let read = std::time::Instant::now();
        let mut forwarded = tritium_actors::Parameters::new();
        crate::frontends::forward::forward_headers(
            self.header_forward.as_ref(),
            metadata_pairs(request.metadata()),
            &mut forwarded,
        )
        .or_status()?;
        let affinity: Vec<Vec<u8>> =
            (request.metadata().get_all(crate::frontends::affinity::SEQUENCE_ID_HEADER).iter())
                .map(|v| v.as_bytes().to_vec())
                .collect();
        let parent = RemoteParent::from_grpc(request.metadata());
        let client_deadline = timeout::client_deadline(request.metadata(), read);
        let Decoded { mut request, shm_outputs } = decode(request.into_inner()).or_status()?;
        request.client_deadline = client_deadline;
        let header = crate::frontends::affinity::SEQUENCE_ID_HEADER;
        crate::frontends::affinity::check_sequence_header(&request, affinity.iter().map(|v| (header, v.as_slice())))
            .or_status()?;
        request.parameters.extend(forwarded);
        let model = self.server.model(&request.model, request.version).or_status()?;
        if model.handle.policy.decoupled {
            return Err(status(Error::unsupported(format!(
                "ModelInfer RPC doesn't support models with decoupled transaction policy (model '{}'); use ModelStreamInfer",
                request.model
            ))));
        }
        let trace = crate::observe::trace::manager().sample(&request.model, parent);
        if let Some(t) = &trace {
            // tonic has read the message before this handler runs: both points fall at its start.
            t.record_at("GRPC_WAITREAD_START", read);
            t.record_at("GRPC_WAITREAD_END", read);
        }
        let span = request_span(&request);
        let work = async move {
            tracing::debug!("gRPC infer request received");
            // Kept for the trace only: an untraced request clones nothing.
            let request_id = trace.as_ref().map(|_| request.id.clone()).unwrap_or_default();
            if let Some(t) = &trace {
                t.attach(&mut request);
                t.record("REQUEST_START");
            }
            let requested = crate::frontends::classification::classified(&request.outputs);
            // Dropping this future (the client cancelled) closes the reply; the engine then drops
            // the request if it is still queued.
            let routed = !affinity.is_empty();
            // On this thread only while it serves one client alone (the call is counted by
            // the front door, `front_door::FrontDoor::call`).
            let here = crate::frontends::alone::alone();
            let answer = self.server.infer_on(model, request, here).await;
            let answer = answer.map_err(|e| crate::frontends::affinity::routed_error(e, routed));
            let answer = answer.or_status().and_then(|(model, response)| {
                if let Some(t) = &trace {
                    t.record("REQUEST_END");
                    t.response_complete();
                    t.record("GRPC_SEND_START");
                }
                Ok((encode(response, &requested, &shm_outputs, &model, None).or_status()?, model))
            });
            match &answer {
                Ok(_) => tracing::debug!("gRPC infer request answered"),
                Err(e) => tracing::debug!("gRPC infer request failed: {}", e.message()),
            }
            let (response, model) = answer?;
            if let Some(t) = trace {
                t.record("GRPC_SEND_END");
                t.finish(model.version(), &request_id);
            }
            Ok(Response::new(response))
        };
        // A disabled span (below verbose level 1) is not worth the `Instrumented` around it.
        if span.is_disabled() {
            work.await
        } else {
            work.instrument(span).await
        }
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for GrpcService {
    async fn server_live(&self, _: Request<pb::ServerLiveRequest>) -> Result<Response<pb::ServerLiveResponse>, Status> {
        Ok(Response::new(pb::ServerLiveResponse { live: self.server.is_live() }))
    }

    async fn server_ready(
        &self,
        _: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        Ok(Response::new(pb::ServerReadyResponse { ready: self.server.is_ready() }))
    }

    async fn model_ready(
        &self,
        request: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        let r = request.into_inner();
        let version = parse_version(&r.version).or_status()?;
        Ok(Response::new(pb::ModelReadyResponse { ready: self.server.model_ready(&r.name, version) }))
    }

    async fn server_metadata(
        &self,
        _: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        let m = self.server.metadata();
        Ok(Response::new(pb::ServerMetadataResponse {
            name: m.name,
            version: m.version,
            extensions: m.extensions.iter().map(|e| e.to_string()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        let r = request.into_inner();
        let m = self.server.model_metadata(&r.name, parse_version(&r.version).or_status()?).or_status()?;
        Ok(Response::new(pb::ModelMetadataResponse {
            name: m.name,
            versions: m.versions,
            platform: m.platform,
            inputs: m.inputs.iter().map(tensor_metadata).collect(),
            outputs: m.outputs.iter().map(tensor_metadata).collect(),
        }))
    }

    async fn model_infer(
        &self,
        request: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        self.infer(request).await
    }

    type ModelStreamInferStream = stream::ResponseStream;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<pb::ModelInferRequest>>,
    ) -> Result<Response<Self::ModelStreamInferStream>, Status> {
        let mut forwarded = tritium_actors::Parameters::new();
        crate::frontends::forward::forward_headers(
            self.header_forward.as_ref(),
            metadata_pairs(request.metadata()),
            &mut forwarded,
        )
        .or_status()?;
        let parent = RemoteParent::from_grpc(request.metadata());
        Ok(Response::new(stream::start(self.server.clone(), request.into_inner(), forwarded, parent)))
    }

    async fn model_config(
        &self,
        request: Request<pb::ModelConfigRequest>,
    ) -> Result<Response<pb::ModelConfigResponse>, Status> {
        let r = request.into_inner();
        let model = self.server.model(&r.name, parse_version(&r.version).or_status()?).or_status()?;
        Ok(Response::new(pb::ModelConfigResponse { config: Some(model.config.clone()) }))
    }

    async fn model_statistics(
        &self,
        request: Request<pb::ModelStatisticsRequest>,
    ) -> Result<Response<pb::ModelStatisticsResponse>, Status> {
        let r = request.into_inner();
        let name = (!r.name.is_empty()).then_some(r.name.as_str());
        let version = parse_version(&r.version).or_status()?;
        let mut stats = self.server.statistics(name, version).await.or_status()?;
        stats.sort_by(|a, b| {
            (&a.name, a.version.parse::<i64>().unwrap_or(0)).cmp(&(&b.name, b.version.parse::<i64>().unwrap_or(0)))
        });
        Ok(Response::new(pb::ModelStatisticsResponse { model_stats: stats.iter().map(model_statistics).collect() }))
    }

    async fn repository_index(
        &self,
        request: Request<pb::RepositoryIndexRequest>,
    ) -> Result<Response<pb::RepositoryIndexResponse>, Status> {
        let r = request.into_inner();
        let models = self
            .server
            .repository_index(r.ready)
            .map_err(error::status)?
            .into_iter()
            .map(|e| pb::repository_index_response::ModelIndex {
                name: e.name,
                version: e.version.unwrap_or_default(),
                state: e.state,
                reason: e.reason,
            })
            .collect();
        Ok(Response::new(pb::RepositoryIndexResponse { models }))
    }

    async fn repository_model_load(
        &self,
        request: Request<pb::RepositoryModelLoadRequest>,
    ) -> Result<Response<pb::RepositoryModelLoadResponse>, Status> {
        use pb::model_repository_parameter::ParameterChoice;
        let r = request.into_inner();
        let mut config = None;
        let mut files = Vec::new();
        for (key, value) in &r.parameters {
            match (key.as_str(), value.parameter_choice.as_ref()) {
                ("config", Some(ParameterChoice::StringParam(s))) => config = Some(s.clone()),
                ("config", _) => return Err(status(Error::invalid("parameter 'config' must be a string of JSON"))),
                (k, Some(ParameterChoice::BytesParam(b))) if k.starts_with(FILE_PREFIX) => {
                    files.push((k.to_string(), b.to_vec()))
                }
                (k, _) if k.starts_with(FILE_PREFIX) => {
                    return Err(status(Error::invalid(format!(
                        "File parameter '{k}' must have bytes type for its value"
                    ))))
                }
                _ => {}
            }
        }
        self.server.load_model(&r.model_name, config, files).await.or_status()?;
        Ok(Response::new(pb::RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        request: Request<pb::RepositoryModelUnloadRequest>,
    ) -> Result<Response<pb::RepositoryModelUnloadResponse>, Status> {
        use pb::model_repository_parameter::ParameterChoice;
        let r = request.into_inner();
        let dependents = matches!(
            r.parameters.get("unload_dependents").and_then(|p| p.parameter_choice.as_ref()),
            Some(ParameterChoice::BoolParam(true))
        );
        self.server.unload_model(&r.model_name, dependents).await.or_status()?;
        Ok(Response::new(pb::RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<pb::SystemSharedMemoryStatusRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryStatusResponse>, Status> {
        let r = request.into_inner();
        let regions = shm::system()
            .status(&r.name)
            .or_status()?
            .into_iter()
            .map(|s| {
                let status = pb::system_shared_memory_status_response::RegionStatus {
                    name: s.name.clone(),
                    key: s.key,
                    offset: s.offset,
                    byte_size: s.byte_size,
                };
                (s.name, status)
            })
            .collect();
        Ok(Response::new(pb::SystemSharedMemoryStatusResponse { regions }))
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<pb::SystemSharedMemoryRegisterRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryRegisterResponse>, Status> {
        let r = request.into_inner();
        shm::system().register(&r.name, &r.key, r.offset, r.byte_size).or_status()?;
        Ok(Response::new(pb::SystemSharedMemoryRegisterResponse {}))
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<pb::SystemSharedMemoryUnregisterRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryUnregisterResponse>, Status> {
        shm::system().unregister(&request.into_inner().name);
        Ok(Response::new(pb::SystemSharedMemoryUnregisterResponse {}))
    }

    async fn cuda_shared_memory_status(
        &self,
        request: Request<pb::CudaSharedMemoryStatusRequest>,
    ) -> Result<Response<pb::CudaSharedMemoryStatusResponse>, Status> {
        let regions = shm::cuda()
            .status(&request.into_inner().name)
            .or_status()?
            .into_iter()
            .map(|s| {
                let status = pb::cuda_shared_memory_status_response::RegionStatus {
                    name: s.name.clone(),
                    device_id: s.device_id,
                    byte_size: s.byte_size,
                };
                (s.name, status)
            })
            .collect();
        Ok(Response::new(pb::CudaSharedMemoryStatusResponse { regions }))
    }

    async fn cuda_shared_memory_register(
        &self,
        request: Request<pb::CudaSharedMemoryRegisterRequest>,
    ) -> Result<Response<pb::CudaSharedMemoryRegisterResponse>, Status> {
        let r = request.into_inner();
        shm::cuda().register(&r.name, &r.raw_handle, r.device_id as u64, r.byte_size).or_status()?;
        Ok(Response::new(pb::CudaSharedMemoryRegisterResponse {}))
    }

    async fn cuda_shared_memory_unregister(
        &self,
        request: Request<pb::CudaSharedMemoryUnregisterRequest>,
    ) -> Result<Response<pb::CudaSharedMemoryUnregisterResponse>, Status> {
        shm::cuda().unregister(&request.into_inner().name);
        Ok(Response::new(pb::CudaSharedMemoryUnregisterResponse {}))
    }

    async fn trace_setting(
        &self,
        request: Request<pb::TraceSettingRequest>,
    ) -> Result<Response<pb::TraceSettingResponse>, Status> {
        let r = request.into_inner();
        let changes: Vec<(String, TraceValue)> = r
            .settings
            .into_iter()
            .map(|(k, v)| (k, if v.value.is_empty() { TraceValue::Clear } else { TraceValue::Values(v.value) }))
            .collect();
        let model = (!r.model_name.is_empty()).then_some(r.model_name.as_str());
        let view = self.server.trace_settings(model, &changes).or_status()?;
        let settings = view
            .entries()
            .into_iter()
            .map(|(k, value)| (k.to_string(), pb::trace_setting_response::SettingValue { value }))
            .collect();
        Ok(Response::new(pb::TraceSettingResponse { settings }))
    }

    async fn log_settings(
        &self,
        request: Request<pb::LogSettingsRequest>,
    ) -> Result<Response<pb::LogSettingsResponse>, Status> {
        use pb::log_settings_request::setting_value::ParameterChoice as In;
        use pb::log_settings_response::setting_value::ParameterChoice as Out;
        use pb::log_settings_response::SettingValue as OutValue;
        let changes: Vec<(String, SettingValue)> = request
            .into_inner()
            .settings
            .into_iter()
            .map(|(k, v)| {
                let value = match v.parameter_choice {
                    None => SettingValue::Null,
                    Some(In::BoolParam(b)) => SettingValue::Bool(b),
                    Some(In::Uint32Param(n)) => SettingValue::UInt(n.into()),
                    Some(In::StringParam(s)) => SettingValue::Str(s),
                };
                (k, value)
            })
            .collect();
        let v = self.server.log_settings(&changes).or_status()?;
        let entry = |k: &str, choice: Out| (k.to_string(), OutValue { parameter_choice: Some(choice) });
        let settings = [
            entry("log_file", Out::StringParam(v.file)),
            entry("log_info", Out::BoolParam(v.info)),
            entry("log_warning", Out::BoolParam(v.warning)),
            entry("log_error", Out::BoolParam(v.error)),
            entry("log_verbose_level", Out::Uint32Param(v.verbose)),
            entry("log_format", Out::StringParam(v.format.as_str().into())),
        ]
        .into_iter()
        .collect();
        Ok(Response::new(pb::LogSettingsResponse { settings }))
    }
}
