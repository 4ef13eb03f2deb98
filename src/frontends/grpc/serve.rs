//! Where the gRPC service runs: `threads` single-threaded tokio runtimes, each serving the
//! connections an acceptor hands it in turn. All of one connection's calls run on one thread,
//! in the order their HTTP/2 streams arrived, so separate unary calls of one sequence reach the
//! engine in the order the client sent them. On a multi-threaded runtime they did not: the most
//! recently spawned stream task runs first (tokio's LIFO slot) and another worker may take the
//! earlier one, so perf_analyzer's END, sent while the sequence's previous request was still in
//! flight, overtook it and ended the sequence first (9-16 "must specify the START flag" errors
//! per run at 256 sequences; none with this layout, as with Triton). Different connections still
//! spread over every thread.
//!
//! Past `--grpc-max-connections` open connections the acceptor stops accepting, so new ones wait
//! in the listen backlog until one closes; `--grpc-max-concurrent-streams` bounds the calls open
//! at once on one connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS: a client past it waits).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tonic::codec::CompressionEncoding;

use super::deadline::Deadlined;
use super::front_door::{Door, FrontDoorLayer};
use super::guard::Guarded;
use super::{health, GrpcOptions, GrpcService};
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer;
use crate::server::Server;

/// The running endpoint: `stop` lets in-flight calls finish, then returns.
pub struct GrpcHandle {
    stop: watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl GrpcHandle {
    pub fn stop(self, timeout: Duration) {
        let _ = self.stop.send(true);
        let deadline = Instant::now() + timeout;
        for thread in self.threads {
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if thread.is_finished() {
                let _ = thread.join();
            } else {
                tracing::warn!("gRPC calls still running after {}s; exiting anyway", timeout.as_secs());
                return;
            }
        }
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// One serving thread: the connections arriving on `rx`.
fn serving_thread(
    index: usize,
    server: Arc<Server>,
    opts: GrpcOptions,
    rx: mpsc::UnboundedReceiver<Accepted>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let rt = runtime()?;
    std::thread::Builder::new().name(format!("grpc-{index}")).spawn(move || {
        rt.block_on(async move {
            // Past age + grace a connection is closed whatever still runs.
            let cutoff = opts.max_connection_age.zip(opts.max_connection_age_grace).map(|(a, g)| a + g);
            let incoming = futures::stream::unfold(rx, move |mut rx| async move {
                let (stream, place) = rx.recv().await?;
                let stream = tokio::net::TcpStream::from_std(stream);
                if let Ok(s) = &stream {
                    let _ = s.set_nodelay(true);
                }
                Some((stream.map(|s| Deadlined::new(s, cutoff, place)), rx))
            });
            let grpc = Arc::new(GrpcService { server: server.clone(), header_forward: opts.header_forward.clone() });
            let (restrictions, limit, timeout) =
                (opts.restrictions.clone(), opts.max_message_bytes, opts.message_read_timeout);
            // Unary ModelInfer calls are served in front of tonic's router (`front_door.rs`),
            // but not when answers are compressed: that is tonic's to do.
            let door =
                (!opts.compress_responses).then(|| Door::new(grpc.clone(), restrictions.clone(), limit, timeout));
            let mut service = GrpcInferenceServiceServer::from_arc(grpc)
                .max_decoding_message_size(opts.max_message_bytes)
                .max_encoding_message_size(opts.max_message_bytes)
                .accept_compressed(CompressionEncoding::Gzip);
            if opts.compress_responses {
                service = service.send_compressed(CompressionEncoding::Gzip);
            }
            let mut builder = tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(opts.keepalive_time))
                .http2_keepalive_timeout(Some(opts.keepalive_timeout))
                .max_concurrent_streams((opts.max_concurrent_streams > 0).then_some(opts.max_concurrent_streams));
            if let Some(tls) = opts.tls.clone() {
                builder = match builder.tls_config(tls) {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::error!("gRPC TLS: {e}");
                        return;
                    }
                };
            }
            // At its age a connection gets GOAWAY and may finish its calls until the grace ends
            // (`Deadlined`); tonic's own grace would close it at age + grace without a GOAWAY.
            if let Some(age) = opts.max_connection_age {
                builder = builder.max_connection_age(age);
            }
            let result = builder
                .layer(FrontDoorLayer::new(door))
                .add_service(Guarded::new(service, restrictions.clone(), limit, timeout))
                .add_service(Guarded::new(health::service(server), restrictions, limit, timeout))
                .serve_with_incoming_shutdown(incoming, stopped(stop))
                .await;
            if let Err(e) = result {
                tracing::error!("gRPC server: {e}");
            }
        })
    })
}

/// An accepted connection and its place under `--grpc-max-connections`.
type Accepted = (std::net::TcpStream, Option<OwnedSemaphorePermit>);

/// Waits for a free place under `--grpc-max-connections` (none to wait for without a limit).
async fn place(places: &Option<Arc<Semaphore>>) -> Option<OwnedSemaphorePermit> {
    match places {
        Some(p) => p.clone().acquire_owned().await.ok(),
        None => None,
    }
}

/// Binds `addr` and serves on threads of its own; errors binding are returned here.
pub fn serve(server: Arc<Server>, addr: SocketAddr, opts: GrpcOptions) -> anyhow::Result<GrpcHandle> {
    let listener = crate::frontends::listen::bind(addr, opts.reuse_port)?;
    listener.set_nonblocking(true)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut threads = Vec::new();
    let mut lanes = Vec::new();
    for index in 0..opts.threads.max(1) {
        let (tx, rx) = mpsc::unbounded_channel();
        lanes.push(tx);
        threads.push(serving_thread(index, server.clone(), opts.clone(), rx, stop_rx.clone())?);
    }
    let rt = runtime()?;
    let stop = stop_rx.clone();
    let places = (opts.max_connections > 0).then(|| Arc::new(Semaphore::new(opts.max_connections)));
    threads.push(std::thread::Builder::new().name("grpc-accept".into()).spawn(move || {
        rt.block_on(async move {
            let listener = match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!("gRPC listener: {e}");
                    return;
                }
            };
            let mut next = 0usize;
            let mut stop = std::pin::pin!(stopped(stop));
            loop {
                // A place first, then the connection: past the limit, new ones wait unaccepted.
                let place = tokio::select! {
                    place = place(&places) => place,
                    _ = &mut stop => break,
                };
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => match stream.into_std() {
                            Ok(stream) => {
                                let _ = lanes[next % lanes.len()].send((stream, place));
                                next = next.wrapping_add(1);
                            }
                            Err(e) => tracing::warn!("gRPC: cannot hand a connection over: {e}"),
                        },
                        Err(e) => {
                            // Out of file descriptors and the like: wait a little, keep serving.
                            tracing::warn!("gRPC accept: {e}");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    },
                    _ = &mut stop => break,
                }
            }
        })
    })?);
    Ok(GrpcHandle { stop: stop_tx, threads })
}
