//! `grpc.health.v1.Health`, so Kubernetes gRPC probes and `grpc_health_probe` work: SERVING
//! while the server is ready, for the whole server (`""`) or `inference.GRPCInferenceService`.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tonic::{Request, Response, Status};

use crate::proto::health::health_check_response::ServingStatus;
use crate::proto::health::health_server::{Health, HealthServer};
use crate::proto::health::{HealthCheckRequest, HealthCheckResponse};
use crate::server::Server;

const SERVICES: &[&str] = &["", "inference.GRPCInferenceService"];

pub struct HealthService {
    server: Arc<Server>,
}

pub fn service(server: Arc<Server>) -> HealthServer<HealthService> {
    HealthServer::new(HealthService { server })
}

fn status_of(server: &Server) -> ServingStatus {
    if server.is_ready() {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(&self, request: Request<HealthCheckRequest>) -> Result<Response<HealthCheckResponse>, Status> {
        let service = request.into_inner().service;
        if !SERVICES.contains(&service.as_str()) {
            return Err(Status::not_found(format!("unknown service '{service}'")));
        }
        Ok(Response::new(HealthCheckResponse { status: status_of(&self.server) as i32 }))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(&self, request: Request<HealthCheckRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let service = request.into_inner().service;
        if !SERVICES.contains(&service.as_str()) {
            let once = HealthCheckResponse { status: ServingStatus::ServiceUnknown as i32 };
            return Ok(Response::new(Box::pin(futures::stream::once(async move { Ok(once) }))));
        }
        let server = self.server.clone();
        // The status is checked twice a second; an answer goes out only when it changes.
        let stream = futures::stream::unfold((server, None::<ServingStatus>), |(server, last)| async move {
            loop {
                let now = status_of(&server);
                if last != Some(now) {
                    return Some((Ok(HealthCheckResponse { status: now as i32 }), (server, Some(now))));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}
