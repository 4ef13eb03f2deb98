//! The exporter: the `otel-spans` thread that turns finished traces into spans, the SDK's
//! tracer provider with a batch span processor (its own thread, a bounded queue) over the
//! OTLP/HTTP protobuf exporter, and the resource attributes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, SpanData, SpanExporter,
};
use opentelemetry_sdk::Resource;
use parking_lot::Mutex;

use super::config::{OtelConfig, DEFAULT_SERVICE_NAME};
use super::{build, Finished};

/// How long one export may take before the processor gives it up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished traces waiting for the span thread (the SDK's default span queue, in traces).
const TRACE_QUEUE: usize = 2048;

enum Job {
    Trace(Finished),
    /// Answered once every trace sent before it has become spans.
    Flush(SyncSender<()>),
}

/// The span pipeline of OpenTelemetry mode.
pub struct Exporter {
    provider: SdkTracerProvider,
    jobs: SyncSender<Job>,
    /// Traces dropped because the span thread's queue was full (logged by the thread).
    dropped: Arc<AtomicU64>,
}

impl Exporter {
    /// Starts the pipeline; nothing is sent until the first trace ends.
    pub fn start(config: &OtelConfig) -> Result<Exporter, String> {
        let otlp = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("--trace-config opentelemetry,url={}: {e}", config.url))?;
        // Unset settings come from OTEL_BSP_* or the specification's defaults.
        let mut batch = BatchConfigBuilder::default();
        if let Some(n) = config.bsp_max_queue_size {
            batch = batch.with_max_queue_size(n);
        }
        if let Some(d) = config.bsp_schedule_delay {
            batch = batch.with_scheduled_delay(d);
        }
        if let Some(n) = config.bsp_max_export_batch_size {
            batch = batch.with_max_export_batch_size(n);
        }
        let processor =
            BatchSpanProcessor::builder(Logged::new(otlp, &config.url)).with_batch_config(batch.build()).build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource(config))
            // Sampling is the trace extension's (rate, count, a client's context): every span
            // built is exported.
            .with_sampler(Sampler::AlwaysOn)
            .with_id_generator(super::ids::PresetIds::default())
            .build();
        let tracer = provider.tracer("triton-server");
        let (jobs, rx) = sync_channel(TRACE_QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let lost = dropped.clone();
        std::thread::Builder::new()
            .name("otel-spans".into())
            .spawn(move || span_thread(&tracer, rx, &lost))
            .map_err(|e| format!("cannot start the OpenTelemetry span thread: {e}"))?;
        Ok(Exporter { provider, jobs, dropped })
    }

    /// Queues a finished trace for the span thread; never waits (a full queue drops it).
    pub fn export(&self, trace: Finished) {
        if let Err(TrySendError::Full(_)) = self.jobs.try_send(Job::Trace(trace)) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Turns what is queued into spans, exports them and stops the processor (each step at
    /// most `timeout`).
    pub fn shutdown(&self, timeout: Duration) {
        let (tx, rx) = sync_channel(1);
        // The span thread never waits on the network: the queue ahead of the flush drains.
        if self.jobs.send(Job::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(timeout);
        }
        if let Err(e) = self.provider.shutdown_with_timeout(timeout) {
            tracing::warn!("OpenTelemetry trace export did not finish at shutdown: {e}");
        }
    }
}

fn span_thread(tracer: &SdkTracer, jobs: Receiver<Job>, dropped: &AtomicU64) {
    let mut last_warning: Option<Instant> = None;
    for job in jobs {
        match job {
            Job::Trace(trace) => build(tracer, trace, &super::super::next_id),
            Job::Flush(done) => {
                let _ = done.send(());
            }
        }
        if dropped.load(Ordering::Relaxed) > 0 && last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            last_warning = Some(Instant::now());
            let n = dropped.swap(0, Ordering::Relaxed);
            tracing::warn!("OpenTelemetry traces: {n} traces dropped, more finished than the span thread could build");
        }
    }
}

/// `service.name` is Triton's default unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
/// name one; `resource=` flags come last and win.
fn resource(config: &OtelConfig) -> Resource {
    let from_env = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let mut builder = Resource::builder();
    if !from_env {
        builder = builder.with_service_name(DEFAULT_SERVICE_NAME);
    }
    builder.with_attributes(config.resource.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone()))).build()
}

/// The OTLP exporter, logging failed exports (the collector down, a 4xx/5xx) at most once every
/// ten seconds with the spans lost since the last message.
#[derive(Debug)]
struct Logged<E> {
    inner: E,
    url: String,
    lost: AtomicU64,
    last_warning: Mutex<Option<Instant>>,
}

impl<E> Logged<E> {
    fn new(inner: E, url: &str) -> Self {
        Logged { inner, url: url.to_string(), lost: AtomicU64::new(0), last_warning: Mutex::new(None) }
    }

    fn failed(&self, spans: usize, error: &dyn std::fmt::Display) {
        let lost = self.lost.fetch_add(spans as u64, Ordering::Relaxed) + spans as u64;
        let mut last = self.last_warning.lock();
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(10)) {
            return;
        }
        *last = Some(Instant::now());
        self.lost.store(0, Ordering::Relaxed);
        tracing::warn!("OpenTelemetry trace export to {} failed ({lost} spans dropped): {error}", self.url);
    }
}

impl<E: SpanExporter> SpanExporter for Logged<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            self.failed(spans, e);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
