//! Command-line flags, named, grouped and defaulted as `tritonserver` 2.51's are: every flag of
//! Triton's `--help` is known here. This file holds the server, logging, repository, endpoint,
//! metrics and tracing flags Tritium had first; the newer groups live beside it, one file per
//! group of Triton's `--help` (`repository`, `network`, `platforms`, `resources`), and `effects`
//! decides, at start, which given flags have no effect (logged once) and which must stop the
//! server because running without their effect would be unsafe.

pub mod effects;
pub mod host_policy;
pub mod network;
pub mod platforms;
pub mod repository;
pub mod resources;
#[cfg(test)]
mod triton_help;

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{ArgAction, Parser, ValueEnum};

use crate::observe::logging::LogFormat;

/// `--grpc-infer-response-compression-level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Compression {
    None,
    Low,
    Medium,
    High,
}

/// `--model-control-mode`: the repository's own type (what it obeys), named here for the flags.
pub use crate::repository::ControlMode;

/// A boolean flag value as Triton parses one: `true`, `on` or `1`; `false`, `off` or `0`, in
/// any case (Triton refuses `yes` and `no`, and so does Tritium).
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" => Ok(true),
        "0" | "false" | "off" => Ok(false),
        _ => Err(format!("invalid value for bool option: '{s}' (use true/false, on/off or 1/0)")),
    }
}

/// `--metrics-interval-ms`: Triton takes a float; it must be above zero.
fn parse_interval_ms(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("expected a number of milliseconds, got '{s}'"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("the metrics interval must be above 0 ms, got '{s}'"))
    }
}

/// Tritium: a Triton-compatible inference server (KServe v2 HTTP and gRPC) built as actors.
#[derive(Debug, Clone, Parser)]
#[command(name = "tritium", version, about, long_about = None)]
pub struct Cli {
    /// Identifier of this server: the `name` that server metadata (`GET /v2`, gRPC
    /// ServerMetadata) reports.
    #[arg(long, default_value = crate::server::DEFAULT_SERVER_ID, help_heading = "Server")]
    pub id: String,

    /// Path to a model repository; repeat for several. Models are `<repo>/<model>/<version>/`.
    /// Object storage as in Triton: `s3://bucket/path`, `s3://host:port/bucket/path`,
    /// `s3://https://host:port/bucket/path`, `gs://bucket/path`, `as://account/container/path`.
    /// `--model-store` is the same flag.
    #[arg(
        long = "model-repository",
        visible_alias = "model-store",
        required = true,
        action = ArgAction::Append,
        help_heading = "Model Repository"
    )]
    pub model_repository: Vec<PathBuf>,

    /// How models are loaded and unloaded.
    #[arg(help_heading = "Model Repository", long, value_enum, default_value_t = ControlMode::None)]
    pub model_control_mode: ControlMode,

    /// With --model-control-mode=explicit: a model to load at start; repeat for several, `*` for all.
    #[arg(help_heading = "Model Repository", long = "load-model", action = ArgAction::Append)]
    pub load_model: Vec<String>,

    /// With --model-control-mode=poll: seconds between repository scans.
    #[arg(help_heading = "Model Repository", long, default_value_t = 15)]
    pub repository_poll_secs: u64,

    /// When true, every model needs a complete config.pbtxt; when false, missing inputs,
    /// outputs and max_batch_size are completed from the model file.
    #[arg(help_heading = "Model Repository", long, default_value = "false", value_parser = parse_bool, action = ArgAction::Set)]
    pub strict_model_config: bool,

    /// When true, the server is ready only while every model it was asked to load is READY;
    /// when false, once start-up loading has finished.
    #[arg(help_heading = "Model Repository", long, default_value = "true", value_parser = parse_bool, action = ArgAction::Set)]
    pub strict_readiness: bool,

    /// Allow the HTTP/REST endpoint.
    #[arg(help_heading = "HTTP", long, default_value = "true", value_parser = parse_bool, action = ArgAction::Set)]
    pub allow_http: bool,
    /// Address the HTTP endpoint binds.
    #[arg(help_heading = "HTTP", long, default_value = "0.0.0.0")]
    pub http_address: IpAddr,
    /// Port of the HTTP endpoint.
    #[arg(help_heading = "HTTP", long, default_value_t = 8000)]
    pub http_port: u16,
    /// HTTP worker threads. Tritium's default, 0, means one per core (Triton's is 8): its
    /// workers only decode and encode, the models run on their own instance threads, so more
    /// workers than cores only add switching.
    #[arg(help_heading = "HTTP", long, default_value_t = 0)]
    pub http_thread_count: usize,
    /// Largest HTTP request body accepted, in bytes (Triton's default: 64 MiB).
    #[arg(help_heading = "HTTP", long, default_value_t = 1 << 26)]
    pub http_max_input_size: usize,

    /// Allow the gRPC endpoint.
    #[arg(help_heading = "GRPC", long, default_value = "true", value_parser = parse_bool, action = ArgAction::Set)]
    pub allow_grpc: bool,
    /// Address the gRPC endpoint binds.
    #[arg(help_heading = "GRPC", long, default_value = "0.0.0.0")]
    pub grpc_address: IpAddr,
    /// Port of the gRPC endpoint.
    #[arg(help_heading = "GRPC", long, default_value_t = 8001)]
    pub grpc_port: u16,
    /// Milliseconds between HTTP/2 keepalive pings on gRPC connections (Triton's default).
    #[arg(help_heading = "GRPC", long, default_value_t = 7_200_000)]
    pub grpc_keepalive_time: u64,
    /// Milliseconds to wait for a keepalive ping's answer before closing the connection.
    #[arg(help_heading = "GRPC", long, default_value_t = 20_000)]
    pub grpc_keepalive_timeout: u64,
    /// Largest gRPC message accepted or sent, in bytes (Triton allows up to 2 GiB).
    #[arg(help_heading = "GRPC", long, default_value_t = i32::MAX as usize)]
    pub grpc_max_message_size: usize,
    /// Compression of gRPC responses: none, or gzip at any of low, medium, high.
    /// Compressed requests (gzip) are always accepted.
    #[arg(help_heading = "GRPC", long, value_enum, default_value_t = Compression::None)]
    pub grpc_infer_response_compression_level: Compression,

    /// Allow the Prometheus metrics endpoint.
    #[arg(help_heading = "Metrics", long, default_value = "true", value_parser = parse_bool, action = ArgAction::Set)]
    pub allow_metrics: bool,
    /// Address the metrics endpoint binds (default: the HTTP address).
    #[arg(help_heading = "Metrics", long)]
    pub metrics_address: Option<IpAddr>,
    /// Port of the metrics endpoint (`/metrics`).
    #[arg(help_heading = "Metrics", long, default_value_t = 8002)]
    pub metrics_port: u16,
    /// How often host figures (`nv_cpu_*`, `nv_gpu_*`) are sampled, in milliseconds (a number,
    /// fractions allowed, as Triton); the model families are read from the engine at each scrape.
    #[arg(help_heading = "Metrics", long, default_value = "2000", value_parser = parse_interval_ms)]
    pub metrics_interval_ms: f64,
    /// Serve the GPU families (`nv_gpu_*`, `nv_energy_consumption`). Ignored unless
    /// --allow-metrics is true.
    #[arg(help_heading = "Metrics", long, default_value = "true", value_parser = parse_bool, action = ArgAction::Set)]
    pub allow_gpu_metrics: bool,
    /// Serve the CPU families (`nv_cpu_*`). Ignored unless --allow-metrics is true.
    #[arg(help_heading = "Metrics", long, default_value = "true", value_parser = parse_bool, action = ArgAction::Set)]
    pub allow_cpu_metrics: bool,
    /// Serve the live actor tree (`GET /v2/actors`, JSON) and its page (`GET /actors`) on the
    /// metrics port. They show model names and per-instance figures: turn them off where the
    /// metrics port is reachable by those who should not see them. Ignored unless
    /// --allow-metrics is true.
    #[arg(help_heading = "Metrics", long, default_value = "true", value_parser = parse_bool, action = ArgAction::Set)]
    pub allow_actors_page: bool,
    /// `<setting>=<value>`, repeatable, as Triton: `counter_latencies=false` drops the
    /// `*_duration_us` counters; `summary_latencies=true` adds per-request summaries with
    /// `summary_quantiles=0.5:0.05,0.9:0.01,...`; `histogram_latencies=true` adds the first-response
    /// histogram of decoupled models.
    #[arg(help_heading = "Metrics", long = "metrics-config", action = ArgAction::Append)]
    pub metrics_config: Vec<String>,

    /// Seconds to wait, on SIGINT/SIGTERM, for live sequences to drain and in-flight requests to
    /// finish before exiting.
    #[arg(help_heading = "Server", long, default_value_t = 30)]
    pub exit_timeout_secs: u64,

    /// Verbose logging level (0 = off; 1 = Tritium's detail, one line per request received and
    /// answered; 2 adds the libraries' detail; 3 everything). The logging extension
    /// (`/v2/logging`) changes this and the four below while the server runs.
    #[arg(help_heading = "Logging", long, default_value_t = 0)]
    pub log_verbose: u32,
    /// Log info lines.
    #[arg(help_heading = "Logging", long, default_value = "true", value_parser = parse_bool, action = ArgAction::Set)]
    pub log_info: bool,
    /// Log warnings.
    #[arg(help_heading = "Logging", long, default_value = "true", value_parser = parse_bool, action = ArgAction::Set)]
    pub log_warning: bool,
    /// Log errors.
    #[arg(help_heading = "Logging", long, default_value = "true", value_parser = parse_bool, action = ArgAction::Set)]
    pub log_error: bool,
    /// The line prefix: `default` (`I1203 12:00:00.123456 <pid> file.rs:12]`) or `ISO8601`
    /// (`2026-12-03T12:00:00Z I <pid> file.rs:12]`).
    #[arg(help_heading = "Logging", long, value_enum, default_value_t = LogFormat::Default)]
    pub log_format: LogFormat,
    /// Append the log to this file instead of writing it to stderr.
    #[arg(help_heading = "Logging", long)]
    pub log_file: Option<PathBuf>,

    /// Request tracing, `[triton,]<setting>=<value>`, repeatable, as Triton: `level=TIMESTAMPS`
    /// (or TENSORS, OFF), `rate=N` (trace every N-th request, default 1000), `count=N` (stop
    /// after N traces; -1 = never), `triton,file=<path>` (the JSON trace file) and
    /// `triton,log-frequency=N` (write every N traces to `<file>.<index>`; 0 = append each to
    /// the file). `mode=opentelemetry` exports spans over OTLP/HTTP instead, with
    /// `opentelemetry,url=<url>` (default http://localhost:4318/v1/traces),
    /// `opentelemetry,resource=<key>=<value>` and the batch settings `opentelemetry,bsp_max_queue_size=N`,
    /// `opentelemetry,bsp_schedule_delay=<ms>`, `opentelemetry,bsp_max_export_batch_size=N`.
    /// The trace extension (`/v2/trace/setting`) changes all but the file, the mode and these.
    #[arg(help_heading = "Tracing", long = "trace-config", action = ArgAction::Append)]
    pub trace_config: Vec<String>,
    /// Deprecated: `--trace-config triton,file=<path>`.
    #[arg(help_heading = "Tracing (deprecated)", long)]
    pub trace_file: Option<String>,
    /// Deprecated: `--trace-config level=<level>`; repeatable.
    #[arg(help_heading = "Tracing (deprecated)", long, action = ArgAction::Append)]
    pub trace_level: Vec<String>,
    /// Deprecated: `--trace-config rate=<n>`.
    #[arg(help_heading = "Tracing (deprecated)", long)]
    pub trace_rate: Option<u32>,
    /// Deprecated: `--trace-config count=<n>`.
    #[arg(help_heading = "Tracing (deprecated)", long, allow_negative_numbers = true)]
    pub trace_count: Option<i32>,
    /// Deprecated: `--trace-config triton,log-frequency=<n>`.
    #[arg(help_heading = "Tracing (deprecated)", long)]
    pub trace_log_frequency: Option<u32>,

    /// Path of the ONNX Runtime shared library (else $ORT_DYLIB_PATH, else the one that
    /// `scripts/setup.sh` installs). Tritium's own flag.
    #[arg(long, env = "ORT_DYLIB_PATH", help_heading = "Backend")]
    pub onnxruntime_library: Option<PathBuf>,

    /// Path of the `libtorch_cuda.so` that gives PyTorch models a GPU (else the one beside the
    /// `libtorch_cpu.so` the server runs with). Loaded once at start; without it, or without a
    /// GPU, KIND_GPU PyTorch models fail to load with the reason. Tritium's own flag.
    #[arg(long, env = "TRITIUM_LIBTORCH_CUDA", help_heading = "Backend")]
    pub libtorch_cuda_library: Option<PathBuf>,

    /// Folder of TensorFlow's C API library, `libtensorflow.so` (a link to a tensorflow wheel's
    /// `libtensorflow_cc.so.2` does), loaded when the first TensorFlow model loads (else
    /// $TENSORFLOW_DIR, else the `.tensorflow/lib` that scripts/install_tensorflow.sh makes).
    /// Used by builds with the `tensorflow` feature. Tritium's own flag.
    #[arg(long, env = "TENSORFLOW_DIR", help_heading = "Backend")]
    pub tensorflow_dir: Option<PathBuf>,

    #[command(flatten)]
    pub repo: repository::RepositoryFlags,
    #[command(flatten)]
    pub http_extra: network::HttpFlags,
    #[command(flatten)]
    pub grpc_extra: network::GrpcFlags,
    #[command(flatten)]
    pub platforms: platforms::PlatformFlags,
    #[command(flatten)]
    pub resources: resources::ResourceFlags,
}

impl Cli {
    /// The command line, with Vertex AI's environment applied as Triton applies it:
    /// `AIP_MODE=PREDICTION` turns the HTTP and gRPC endpoints off unless their `--allow-*`
    /// flags are given (Vertex AI's own endpoint serves instead).
    pub fn parse_with_env() -> Cli {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Cli::command().get_matches();
        let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        cli.apply_aip_mode(&matches, platforms::aip_prediction_mode());
        cli
    }

    fn apply_aip_mode(&mut self, matches: &clap::ArgMatches, prediction: bool) {
        use clap::parser::ValueSource;
        if !prediction {
            return;
        }
        let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
        if !given("allow_http") {
            self.allow_http = false;
        }
        if !given("allow_grpc") {
            self.allow_grpc = false;
        }
    }

    /// Auto-completion of configs is off with `--disable-auto-complete-config` or the
    /// deprecated `--strict-model-config=true`.
    pub fn strict_config(&self) -> bool {
        self.strict_model_config || self.repo.disable_auto_complete_config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("tritium").chain(args.iter().copied())).expect("flags parse")
    }

    #[test]
    fn defaults_are_tritons() {
        let cli = parse(&["--model-repository", "/models"]);
        assert_eq!(cli.model_repository, vec![PathBuf::from("/models")]);
        assert_eq!((cli.http_port, cli.grpc_port, cli.metrics_port), (8000, 8001, 8002));
        assert_eq!(cli.http_address, "0.0.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(cli.grpc_address, "0.0.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(cli.metrics_address, None, "metrics bind the HTTP address by default");
        assert_eq!(cli.model_control_mode, ControlMode::None);
        assert!(cli.load_model.is_empty());
        assert_eq!(cli.repository_poll_secs, 15);
        assert!(!cli.strict_model_config);
        assert!(cli.strict_readiness);
        assert_eq!(cli.exit_timeout_secs, 30);
        assert_eq!(cli.http_max_input_size, 1 << 26, "Triton's --http-max-input-size is 64 MiB");
        assert!(cli.allow_http && cli.allow_grpc && cli.allow_metrics);
        assert_eq!(cli.log_verbose, 0);
        assert!(cli.log_info && cli.log_warning && cli.log_error);
        assert_eq!(cli.grpc_infer_response_compression_level, Compression::None);
    }

    #[test]
    fn aip_mode_prediction_turns_http_and_grpc_off_unless_asked() {
        use clap::{CommandFactory, FromArgMatches};
        let run = |args: &[&str], prediction: bool| {
            let argv = ["tritium", "--model-repository=/m"].iter().chain(args).copied();
            let matches = Cli::command().try_get_matches_from(argv).unwrap();
            let mut cli = Cli::from_arg_matches(&matches).unwrap();
            cli.apply_aip_mode(&matches, prediction);
            (cli.allow_http, cli.allow_grpc)
        };
        assert_eq!(run(&[], false), (true, true));
        assert_eq!(run(&[], true), (false, false));
        assert_eq!(run(&["--allow-http=true"], true), (true, false));
        assert_eq!(run(&["--allow-grpc", "1"], true), (false, true));
    }

    #[test]
    fn model_repository_is_required_and_repeatable() {
        assert!(Cli::try_parse_from(["tritium"]).is_err());
        let cli = parse(&["--model-repository", "/a", "--model-store", "/b", "--model-repository=/c"]);
        assert_eq!(cli.model_repository, ["/a", "/b", "/c"].map(PathBuf::from).to_vec());
        let cli = parse(&["--model-repository=s3://https://host:9000/bucket/models", "--model-repository=/local"]);
        assert_eq!(cli.model_repository[0].to_str(), Some("s3://https://host:9000/bucket/models"));
    }

    #[test]
    fn tritons_flag_spellings_parse() {
        let cli = parse(&[
            "--model-repository=/m",
            "--model-control-mode=explicit",
            "--load-model=*",
            "--load-model",
            "add_sub",
            "--strict-model-config=true",
            "--allow-grpc=false",
            "--allow-metrics",
            "0",
            "--http-max-input-size",
            "1024",
            "--repository-poll-secs",
            "2",
            "--exit-timeout-secs=5",
        ]);
        assert_eq!(cli.model_control_mode, ControlMode::Explicit);
        assert_eq!(cli.load_model, ["*", "add_sub"]);
        assert!(cli.strict_model_config);
        assert!(!cli.allow_grpc && !cli.allow_metrics && cli.allow_http);
        assert_eq!(cli.http_max_input_size, 1024);
        assert_eq!(cli.repository_poll_secs, 2);
        assert_eq!(cli.exit_timeout_secs, 5);
        assert!(Cli::try_parse_from(["tritium", "--model-repository=/m", "--strict-model-config=maybe"]).is_err());
        assert!(Cli::try_parse_from(["tritium", "--model-repository=/m", "--model-control-mode=sometimes"]).is_err());
    }
}
