//! The exporter: the SDK's tracer provider with a batch span processor (its own thread, a
//! bounded queue) over the OTLP/HTTP protobuf exporter, and the resource attributes.

use std::sync::atomic::{AtomicU64, Ordering};
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

/// How long one export may take before the processor gives it up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The span pipeline of OpenTelemetry mode.
pub struct Exporter {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
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
            .build();
        let tracer = provider.tracer("triton-server");
        Ok(Exporter { provider, tracer })
    }

    pub(super) fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// Exports what is queued and stops the processor (at most `timeout`).
    pub fn shutdown(&self, timeout: Duration) {
        if let Err(e) = self.provider.shutdown_with_timeout(timeout) {
            tracing::warn!("OpenTelemetry trace export did not finish at shutdown: {e}");
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
