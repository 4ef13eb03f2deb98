//! `tritium`: start the engine, load the model repository, serve HTTP (and, as they land,
//! gRPC and metrics), and stop gracefully on SIGINT/SIGTERM.

mod backends;
mod cli;
mod config;
mod drain;
mod ensemble;
mod frontends;
mod memory;
mod metrics;
mod observe;
mod proto;
mod repository;
mod server;
mod shm;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tritium_actors::Engine;

use crate::backends::BackendEnv;
use crate::cli::{Cli, ControlMode};
use crate::frontends::restricted::{Category, Restrictions};
use crate::repository::remote::{self, Remote};
use crate::repository::{RepositoryManager, RepositoryOptions};
use crate::server::Server;

/// The logger (live-changeable settings) and the trace settings, from the flags.
fn init_observe(cli: &Cli) -> anyhow::Result<()> {
    let log = observe::logging::LogOptions {
        info: cli.log_info,
        warning: cli.log_warning,
        error: cli.log_error,
        verbose: cli.log_verbose,
        format: cli.log_format,
        file: cli.log_file.clone(),
    };
    let file = cli.log_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    observe::logging::init(&log).with_context(|| format!("cannot open the log file {file}"))?;
    let legacy = observe::trace::LegacyTraceFlags {
        file: cli.trace_file.clone(),
        level: cli.trace_level.clone(),
        rate: cli.trace_rate,
        count: cli.trace_count,
        log_frequency: cli.trace_log_frequency,
    };
    observe::trace::install(
        observe::trace::TraceConfig::from_flags(&cli.trace_config, &legacy).map_err(anyhow::Error::msg)?,
    )
    .map_err(anyhow::Error::msg)?;
    Ok(())
}

/// Resolves when the process gets SIGINT or SIGTERM. The handlers are installed when this is
/// called, not when it is first awaited: a signal that comes while models load is kept, and the
/// server stops gracefully once loading is done.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    async move { wait_for(&mut term, &mut int).await }
}

async fn wait_for(term: &mut tokio::signal::unix::Signal, int: &mut tokio::signal::unix::Signal) {
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}

/// The local folders to scan: local repositories as given, object-storage ones (`s3://`,
/// `gs://`, `as://`) mirrored into folders of their own.
async fn open_repositories(given: &[PathBuf]) -> anyhow::Result<(Vec<PathBuf>, Vec<Arc<Remote>>)> {
    let (mut folders, mut remotes) = (Vec::new(), Vec::new());
    for repo in given {
        let text = repo.to_string_lossy();
        if remote::url::is_remote(&text) {
            let opened = remote::open(&text, &remote::credentials::process_env).await.map_err(anyhow::Error::msg)?;
            folders.push(opened.mirror.dir.clone());
            remotes.push(Arc::new(opened));
        } else {
            anyhow::ensure!(repo.is_dir(), "model repository {} is not a folder", repo.display());
            folders.push(repo.clone());
        }
    }
    Ok((folders, remotes))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let shutdown = shutdown_signal();
    let (repositories, remotes) = open_repositories(&cli.model_repository).await?;
    cli::effects::refusals(&cli).map_err(anyhow::Error::msg)?;
    // Triton refuses a bad restriction at start, as it parses the flags.
    let http_restrictions = Restrictions::http(&cli.http_extra.http_restricted_api).map_err(anyhow::Error::msg)?;
    let grpc_restrictions = Restrictions::grpc(&cli.grpc_extra.grpc_restricted_protocol).map_err(anyhow::Error::msg)?;
    // Tritium's `actors` category guards the actor page on the metrics port.
    let actors_restriction = http_restrictions.get(Category::Actors).map(|r| metrics::ActorsGuard {
        key: r.key.clone(),
        value: r.value.clone(),
        message: frontends::restricted::http_message(r),
    });
    for note in cli::effects::no_effect_notes(&cli) {
        tracing::warn!("{note}");
    }
    match tritium_ffi::cuda::enable(cli.libtorch_cuda_library.as_deref()) {
        Ok(cuda) => {
            tracing::info!("CUDA on for PyTorch models: {} GPU(s) through {}", cuda.devices(), cuda.library().display())
        }
        Err(why) => tracing::info!("CUDA off for PyTorch models: {why}"),
    }
    let cache = cli.resources.response_cache_size().map_err(anyhow::Error::msg)?;
    if let Some(size) = cache {
        tracing::info!("response cache: local, {size} bytes");
    }
    let engine = Engine::new();
    let backend_env = BackendEnv {
        onnxruntime_library: cli.onnxruntime_library.clone(),
        backend_directory: cli.resources.backend_directory.clone().map(PathBuf::from),
        backend_config: cli.resources.backend_config.clone(),
    };
    let repository = Arc::new(RepositoryManager::new(
        RepositoryOptions {
            repositories,
            remotes,
            mode: cli.model_control_mode,
            strict_config: cli.strict_config(),
            strict_readiness: cli.strict_readiness,
            backend_env,
            config_name: cli.repo.model_config_name.clone(),
            load_threads: cli.repo.model_load_thread_count as usize,
            load_retries: cli.repo.model_load_retry_count,
            host_cores: cli::host_policy::cpu_cores(&cli.resources.host_policy),
            namespacing: cli.repo.model_namespacing,
            shared: tritium_actors::Shared {
                cache: cache.map(|size| Arc::new(tritium_actors::cache::ResponseCache::new(size))),
                limiter: (cli.resources.rate_limit == Some(cli::resources::RateLimitMode::ExecutionCount))
                    .then(|| Arc::new(tritium_actors::limiter::RateLimiter::new(cli.resources.rate_limit_resources()))),
            },
        },
        engine.handle(),
    ));
    let server = Arc::new(Server::new(repository.clone(), cli.id.clone()));
    // Backends' in-process requests (the Python backend's BLS) reach the same server.
    frontends::bls::install(server.clone());
    let exit_timeout = Duration::from_secs(cli.exit_timeout_secs);

    // Endpoints come up first so that liveness answers while models load.
    frontends::http::body::set_read_timeout(cli.http_extra.http_body_read_timeout);
    let http = if cli.allow_http {
        let addr = SocketAddr::new(cli.http_address, cli.http_port);
        let opts = frontends::http::HttpOptions {
            workers: if cli.http_thread_count == 0 { num_workers() } else { cli.http_thread_count },
            max_body_bytes: cli.http_max_input_size,
            max_connections: cli.http_extra.http_max_connections,
            exit_timeout_secs: cli.exit_timeout_secs,
            reuse_port: cli.http_extra.reuse_http_port,
            header_forward: cli.http_extra.http_header_forward_pattern.clone(),
            restrictions: http_restrictions,
            extra_routes: vec![frontends::generate::routes, frontends::openai::routes],
        };
        let srv = frontends::http::serve(server.clone(), addr, opts)
            .await
            .with_context(|| format!("cannot start the HTTP endpoint on {addr}"))?;
        let handle = srv.handle();
        actix_rt::spawn(srv);
        tracing::info!("started HTTPService at {addr}");
        Some(handle)
    } else {
        None
    };

    let grpc = if cli.allow_grpc {
        let addr = SocketAddr::new(cli.grpc_address, cli.grpc_port);
        let g = &cli.grpc_extra;
        let tls = frontends::grpc::tls::config(&frontends::grpc::tls::TlsFlags {
            use_ssl: g.grpc_use_ssl,
            mutual: g.grpc_use_ssl_mutual,
            server_cert: g.grpc_server_cert.clone(),
            server_key: g.grpc_server_key.clone(),
            root_cert: g.grpc_root_cert.clone(),
        })?;
        let opts = frontends::grpc::GrpcOptions {
            max_message_bytes: cli.grpc_max_message_size,
            keepalive_time: Duration::from_millis(cli.grpc_keepalive_time),
            keepalive_timeout: Duration::from_millis(cli.grpc_keepalive_timeout),
            compress_responses: cli.grpc_infer_response_compression_level != cli::Compression::None,
            threads: num_workers(),
            reuse_port: cli.grpc_extra.reuse_grpc_port,
            header_forward: cli.grpc_extra.grpc_header_forward_pattern.clone(),
            max_connection_age: cli.grpc_extra.grpc_max_connection_age.map(Duration::from_millis),
            max_connection_age_grace: cli.grpc_extra.grpc_max_connection_age_grace.map(Duration::from_millis),
            max_concurrent_streams: cli.grpc_extra.grpc_max_concurrent_streams,
            max_connections: cli.grpc_extra.grpc_max_connections,
            message_read_timeout: match cli.grpc_extra.grpc_message_read_timeout {
                0 => None,
                secs => Some(Duration::from_secs(secs)),
            },
            restrictions: Arc::new(grpc_restrictions),
            tls,
        };
        let handle = frontends::grpc::serve(server.clone(), addr, opts)
            .with_context(|| format!("cannot start the gRPC endpoint on {addr}"))?;
        let scheme = if cli.grpc_extra.grpc_use_ssl || cli.grpc_extra.grpc_use_ssl_mutual { " (TLS)" } else { "" };
        tracing::info!("started GRPCInferenceService at {addr}{scheme}");
        Some(handle)
    } else {
        None
    };

    let metrics = if cli.allow_metrics {
        let addr = SocketAddr::new(cli.metrics_address.unwrap_or(cli.http_address), cli.metrics_port);
        let config = metrics::MetricsConfig::parse(&cli.metrics_config).map_err(anyhow::Error::msg)?;
        let host = metrics::HostMetrics {
            interval: Duration::from_secs_f64(cli.metrics_interval_ms / 1000.0),
            cpu: cli.allow_cpu_metrics,
            gpu: cli.allow_gpu_metrics,
        };
        let srv = metrics::serve_with(
            repository.clone(),
            server.drain.clone(),
            addr,
            config,
            host,
            cli.allow_actors_page,
            actors_restriction,
        )
        .with_context(|| format!("cannot start the metrics endpoint on {addr}"))?;
        let handle = srv.handle();
        actix_rt::spawn(srv);
        tracing::info!("started Metrics Service at {addr}");
        Some(handle)
    } else {
        None
    };

    let sagemaker = if cli.platforms.allow_sagemaker {
        let addr = SocketAddr::new(cli.http_address, cli.platforms.sagemaker_port);
        let opts = frontends::sagemaker::SageMakerOptions::from_env(
            cli.platforms.sagemaker_thread_count as usize,
            cli.http_max_input_size,
            cli.exit_timeout_secs,
        )?;
        let srv = frontends::sagemaker::serve(server.clone(), addr, opts)
            .with_context(|| format!("cannot start the SageMaker endpoint on {addr}"))?;
        let handle = srv.handle();
        actix_rt::spawn(srv);
        tracing::info!("started Sagemaker HTTPService at {addr}");
        Some(handle)
    } else {
        None
    };
    // Checked before loading, as Triton refuses these at start.
    let vertex_routes = if cli.platforms.vertex_ai_enabled() {
        let port = cli.platforms.vertex_ai_port().map_err(anyhow::Error::msg)?;
        let opts = frontends::vertex_ai::VertexOptions::from_env(
            cli.platforms.vertex_ai_thread_count as usize,
            cli.http_max_input_size,
            cli.exit_timeout_secs,
            String::new(),
        )?;
        Some((SocketAddr::new(cli.http_address, port), opts))
    } else {
        None
    };

    let failed = repository.load_startup(&cli.load_model).await;
    if cli.repo.exit_on_error && !failed.is_empty() {
        let names: Vec<String> = failed.iter().map(|(n, _)| format!("'{n}'")).collect();
        anyhow::bail!(
            "failed to load all models ({} failed: {}); exiting as --exit-on-error is true (pass --exit-on-error=false to serve the others)",
            failed.len(),
            names.join(", ")
        );
    }

    // Vertex AI starts once the models are loaded: its default model must be one of them.
    let vertex = match vertex_routes {
        Some((addr, mut opts)) => {
            opts.default_model =
                frontends::vertex_ai::default_model(&server, cli.platforms.vertex_ai_default_model.as_deref())?;
            let srv = frontends::vertex_ai::serve(server.clone(), addr, opts)
                .with_context(|| format!("cannot start the Vertex AI endpoint on {addr}"))?;
            let handle = srv.handle();
            actix_rt::spawn(srv);
            tracing::info!("started Vertex AI HTTPService at {addr}");
            Some(handle)
        }
        None => None,
    };

    if cli.model_control_mode == ControlMode::Poll {
        let repo = repository.clone();
        let every = Duration::from_secs(cli.repository_poll_secs.max(1));
        actix_rt::spawn(async move {
            let mut tick = tokio::time::interval(every);
            // Two polls never come back to back after a slow one: an object-storage model is
            // copied once two polls, a full interval apart, list it the same.
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                repo.poll_once().await;
            }
        });
    }

    memory::spawn_trimmer();
    shutdown.await;
    let deadline = tokio::time::Instant::now() + exit_timeout;
    drain(&server, deadline, cli.exit_timeout_secs).await;
    // What is left of the exit timeout bounds each stop below (at least a second each).
    let exit_timeout = deadline.saturating_duration_since(tokio::time::Instant::now()).max(Duration::from_secs(1));
    server.begin_shutdown();
    // gRPC stops accepting at once; its in-flight calls and streams finish (up to the exit
    // timeout) while HTTP drains alongside.
    let grpc_stopped = grpc.map(|h| tokio::task::spawn_blocking(move || h.stop(exit_timeout)));
    if let Some(h) = http {
        // Stops accepting, lets in-flight requests finish (up to the exit timeout).
        if tokio::time::timeout(exit_timeout, h.stop(true)).await.is_err() {
            tracing::warn!("HTTP requests still running after {}s; exiting anyway", cli.exit_timeout_secs);
        }
    }
    for h in [sagemaker, vertex].into_iter().flatten() {
        if tokio::time::timeout(exit_timeout, h.stop(true)).await.is_err() {
            tracing::warn!("SageMaker / Vertex AI requests still running after {}s", cli.exit_timeout_secs);
        }
    }
    if let Some(stopped) = grpc_stopped {
        stopped.await.ok();
    }
    if let Some(h) = metrics {
        h.stop(false).await;
    }
    if tokio::time::timeout(exit_timeout, repository.unload_all()).await.is_err() {
        tracing::warn!("models still draining after {}s; exiting anyway", cli.exit_timeout_secs);
    }
    observe::trace::manager().shutdown();
    tracing::info!("exiting");
    Ok(())
}

/// The sequence-aware drain (see `drain`): while the server holds live sequences, it serves only
/// their turns, until none is left or `deadline`; logs what it served and refused.
async fn drain(server: &Server, deadline: tokio::time::Instant, exit_timeout_secs: u64) {
    let live = server.live_sequences();
    if live == 0 {
        return;
    }
    server.begin_drain();
    tracing::info!(
        "draining: {live} live sequence(s); new sequences are refused; exiting when none is left or in {exit_timeout_secs}s"
    );
    let mut last_logged = live;
    let live = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let live = server.live_sequences();
        if live == 0 || tokio::time::Instant::now() >= deadline {
            break live;
        }
        if live != last_logged {
            tracing::info!("draining: {live} live sequence(s)");
            last_logged = live;
        }
    };
    let refused = server.drain.refused();
    let how = if live == 0 {
        "done".to_string()
    } else {
        format!("cut short by --exit-timeout-secs with {live} live sequence(s)")
    };
    tracing::info!(
        "drain {how}: refused {} sequence start(s) and {} request(s) outside a sequence",
        refused.starts,
        refused.stateless
    );
}

fn num_workers() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
}

fn main() {
    // First of all, while the process has one thread: libtorch's OpenMP threads sleep when idle.
    backends::pytorch::openmp::passive_wait_by_default();
    let cli = Cli::parse_with_env();
    // Before any thread starts: the environment the Python backend's stubs inherit.
    let venv = backends::setup_venv_first_on_path(cli.resources.backend_directory.as_deref().map(std::path::Path::new));
    // And what TensorFlow reads from the environment.
    #[cfg(feature = "tensorflow")]
    backends::tensorflow::prepare_process(cli.tensorflow_dir.as_deref());
    if let Err(e) = init_observe(&cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
    if let Some(bin) = venv {
        tracing::info!("{} is first on PATH for the Python backend's stubs", bin.display());
    }
    let system = actix_rt::System::new();
    match system.block_on(run(cli)) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::exit(1);
        }
    }
}
