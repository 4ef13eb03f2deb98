//! The Prometheus endpoint: Triton's `nv_*` families and Tritium's per-actor `tritium_*`
//! figures, through `metrics` + `metrics-exporter-prometheus`. Every figure is read from the
//! engine's statistics and actor figures at scrape time, into a recorder made for that scrape,
//! so the counters agree exactly with the statistics extension and a model that is unloaded
//! leaves the output (as in Triton, whose per-model reporter goes with the model). The optional
//! per-request families of `--metrics-config` (see `latency`) live in one recorder for the
//! life of the process and are rendered after them.

mod actors;
mod gpu;
mod histogram;
mod latency;
mod system;

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{web, App, HttpResponse, HttpServer};
pub use actors::Guard as ActorsGuard;
pub use latency::MetricsConfig;
use metrics::{counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tritium_actors::stats::StatsObserver;
use tritium_actors::ExitCause;

use crate::drain::Drain;
use crate::repository::{ModelKey, RepositoryManager, Router};

fn describe() {
    describe_counter!("nv_inference_request_success", "Number of successful inference requests, all batch sizes");
    describe_counter!("nv_inference_request_failure", "Number of failed inference requests, all batch sizes");
    describe_counter!("nv_inference_count", "Number of inferences performed (does not include cached requests)");
    describe_counter!(
        "nv_inference_exec_count",
        "Number of model executions performed (does not include cached requests)"
    );
    describe_gauge!(
        "nv_inference_pending_request_count",
        "Instantaneous number of pending requests awaiting execution per-model."
    );
    describe_counter!(
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)"
    );
    describe_counter!(
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)"
    );
    describe_counter!(
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)"
    );
    describe_counter!(
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)"
    );
    describe_counter!(
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)"
    );
    describe_counter!("nv_cache_num_hits_per_model", "Number of cache hits per model");
    describe_counter!("nv_cache_num_misses_per_model", "Number of cache misses per model");
    describe_counter!("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds");
    describe_counter!(
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds"
    );
    describe_gauge!(
        "tritium_inference_in_flight",
        "Requests accepted and not yet answered (queued or running; a decoupled request until its final response)"
    );
    describe_gauge!("nv_pinned_memory_pool_total_bytes", "Pinned memory pool total memory size, in bytes");
    describe_gauge!("nv_pinned_memory_pool_used_bytes", "Pinned memory pool used memory size, in bytes");
    describe_gauge!("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]");
    describe_gauge!("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes");
    describe_gauge!("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes");
    describe_gauge!("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)");
    describe_gauge!("nv_gpu_memory_total_bytes", "GPU total memory, in bytes");
    describe_gauge!("nv_gpu_memory_used_bytes", "GPU used memory, in bytes");
    describe_gauge!("nv_gpu_power_usage", "GPU power usage in watts");
    describe_gauge!("nv_gpu_power_limit", "GPU power management limit in watts");
    describe_counter!("nv_energy_consumption", "GPU energy consumption in joules since the Triton Server started");
    describe_gauge!(
        "tritium_scheduler_queue_length",
        "Requests queued in a model's scheduler, not yet given to an instance"
    );
    describe_gauge!(
        "tritium_scheduler_mailbox_depth",
        "Messages sent to a model's scheduler actor and not yet handled"
    );
    describe_counter!("tritium_batcher_batches_total", "Batches the batcher handed to instances");
    describe_counter!("tritium_batcher_items_total", "Items (batch elements) in the batches handed to instances");
    describe_gauge!("tritium_instance_alive", "1 while the instance actor is running, 0 while it restarts");
    describe_counter!(
        "tritium_instance_busy_us",
        "Cumulative time the instance actor spent executing, in microseconds"
    );
    describe_counter!("tritium_instance_executions_total", "Executions the instance actor ran");
    describe_counter!(
        "tritium_instance_restarts_total",
        "Times the supervisor restarted the instance, by the cause of its exit (load_failed, backend_failed, panicked)"
    );
    describe_gauge!(
        "tritium_instance_mailbox_depth",
        "Batches sent to the instance actor and not yet taken up (at most one)"
    );
    describe_gauge!(
        "tritium_instance_sequence_slots_used",
        "Sequence slots of the instance held by a sequence (direct strategy)"
    );
    describe_gauge!("tritium_sequence_active", "Sequences holding a slot in the sequence actor");
    describe_gauge!("tritium_sequence_backlog", "Sequences waiting in the backlog for a free slot");
    describe_counter!("tritium_sequence_idle_releases_total", "Sequences whose slot was freed by the idle timeout");
    describe_gauge!("tritium_sequence_state_bytes", "Bytes of implicit state the sequence actor holds");
    describe_gauge!(
        "tritium_sequence_state_bytes_limit",
        "The model's max_sequence_state_bytes: the cap on the implicit state held (0: no cap)"
    );
    describe_counter!(
        "tritium_sequence_evictions_total",
        "Idle sequences evicted, their state dropped, to keep the state held within max_sequence_state_bytes"
    );
}

/// A model's labels with Triton's `namespace` label (the model's repository, with
/// `--model-namespacing`) right after `model`, which keeps the label names in alphabetical order.
fn namespaced(namespace: &str, mut labels: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
    if !namespace.is_empty() {
        let at = labels.iter().position(|(k, _)| *k == "model").map_or(0, |i| i + 1);
        labels.insert(at, ("namespace", namespace.to_string()));
    }
    labels
}

/// Copies every model's statistics and actor figures into the current recorder.
fn refresh(router: &Router, host: &system::HostFigures, config: &MetricsConfig) {
    for model in router.all() {
        let name = model.name().to_string();
        let version = model.version().to_string();
        let ns = |labels: Vec<(&'static str, String)>| namespaced(&model.namespace, labels);
        // Label names in alphabetical order, as Triton writes them.
        let labels = ns(vec![("model", name.clone()), ("version", version.clone())]);
        let s = model.handle.stats.snapshot();
        counter!("nv_inference_request_success", &labels).absolute(s.success.0);
        for reason in ["REJECTED", "CANCELED", "BACKEND", "OTHER"] {
            let n = s.failures.get(reason).copied().unwrap_or(0);
            let l = ns(vec![("model", name.clone()), ("reason", reason.to_string()), ("version", version.clone())]);
            counter!("nv_inference_request_failure", &l).absolute(n);
        }
        counter!("nv_inference_count", &labels).absolute(s.inference_count);
        counter!("nv_inference_exec_count", &labels).absolute(s.execution_count);
        // Each actor's own state, as it published it.
        let f = model.handle.figures.snapshot();
        // Triton: requests received and not yet executing (queued in the scheduler), not the
        // ones an instance runs now.
        let waiting = f.scheduler.mailbox + f.scheduler.queue_len;
        gauge!("nv_inference_pending_request_count", &labels).set(waiting as f64);
        gauge!("tritium_inference_in_flight", &labels).set(s.pending as f64);
        if config.counter_latencies {
            let us = |(_, ns): (u64, u64)| ns / 1000;
            // Triton adds only successful requests to the request duration (`fail.ns` is in the
            // statistics extension alone).
            counter!("nv_inference_request_duration_us", &labels).absolute(us(s.success));
            counter!("nv_inference_queue_duration_us", &labels).absolute(us(s.queue));
            counter!("nv_inference_compute_input_duration_us", &labels).absolute(us(s.compute_input));
            counter!("nv_inference_compute_infer_duration_us", &labels).absolute(us(s.compute_infer));
            counter!("nv_inference_compute_output_duration_us", &labels).absolute(us(s.compute_output));
            // Triton makes these only for a model whose answers are cached.
            if model.handle.caches() {
                counter!("nv_cache_num_hits_per_model", &labels).absolute(s.cache_hit.0);
                counter!("nv_cache_num_misses_per_model", &labels).absolute(s.cache_miss.0);
                counter!("nv_cache_hit_duration_per_model", &labels).absolute(us(s.cache_hit));
                counter!("nv_cache_miss_duration_per_model", &labels).absolute(us(s.cache_miss));
            }
        }

        gauge!("tritium_scheduler_queue_length", &labels).set(f.scheduler.queue_len as f64);
        gauge!("tritium_scheduler_mailbox_depth", &labels).set(f.scheduler.mailbox as f64);
        counter!("tritium_batcher_batches_total", &labels).absolute(f.scheduler.batches);
        counter!("tritium_batcher_items_total", &labels).absolute(f.scheduler.items);
        for (i, (spec, inst)) in model.handle.policy.instances.iter().zip(&f.instances).enumerate() {
            let l = ns(vec![("instance", spec.name.clone()), ("model", name.clone()), ("version", version.clone())]);
            let alive = f.supervisor.alive[i];
            gauge!("tritium_instance_alive", &l).set(if alive { 1.0 } else { 0.0 });
            counter!("tritium_instance_busy_us", &l).absolute(inst.busy_ns / 1000);
            counter!("tritium_instance_executions_total", &l).absolute(inst.executions);
            for cause in ExitCause::RESTARTED {
                let l = ns(vec![
                    ("cause", cause.as_str().to_string()),
                    ("instance", spec.name.clone()),
                    ("model", name.clone()),
                    ("version", version.clone()),
                ]);
                counter!("tritium_instance_restarts_total", &l).absolute(f.supervisor.restarts[i].get(cause));
            }
            gauge!("tritium_instance_mailbox_depth", &l).set(inst.mailbox as f64);
            if model.handle.policy.sequence().is_some() {
                gauge!("tritium_instance_sequence_slots_used", &l).set(f.sequence.slots_used[i] as f64);
            }
        }
        if model.handle.policy.sequence().is_some() {
            gauge!("tritium_sequence_active", &labels).set(f.sequence.active as f64);
            gauge!("tritium_sequence_backlog", &labels).set(f.sequence.backlog as f64);
            counter!("tritium_sequence_idle_releases_total", &labels).absolute(f.sequence.idle_releases);
            gauge!("tritium_sequence_state_bytes", &labels).set(f.sequence.state_bytes as f64);
            gauge!("tritium_sequence_state_bytes_limit", &labels).set(f.sequence.state_bytes_limit as f64);
            counter!("tritium_sequence_evictions_total", &labels).absolute(f.sequence.evictions);
        }
    }
    // Tritium has no pinned host memory pool (Triton's is for GPU copies): a pool of 0 bytes.
    gauge!("nv_pinned_memory_pool_total_bytes").set(0.0);
    gauge!("nv_pinned_memory_pool_used_bytes").set(0.0);
    if host.cpu_enabled() {
        gauge!("nv_cpu_utilization").set(host.cpu_utilization().unwrap_or(0.0));
    }
    for g in host.gpus() {
        let l = [("gpu_uuid", g.uuid.clone())];
        gauge!("nv_gpu_utilization", &l).set(g.utilization);
        gauge!("nv_gpu_memory_total_bytes", &l).set(g.memory_total as f64);
        gauge!("nv_gpu_memory_used_bytes", &l).set(g.memory_used as f64);
        if let Some(w) = g.power_usage {
            gauge!("nv_gpu_power_usage", &l).set(w);
        }
        if let Some(w) = g.power_limit {
            gauge!("nv_gpu_power_limit", &l).set(w);
        }
        if let Some(j) = g.energy {
            // A counter of joules with a fraction: the exporter's counters are integers, so
            // whole joules (Triton's counter is a double).
            counter!("nv_energy_consumption", &l).absolute(j as u64);
        }
    }
    if let Some((total, used)) = host.memory() {
        gauge!("nv_cpu_memory_total_bytes").set(total as f64);
        gauge!("nv_cpu_memory_used_bytes").set(used as f64);
    }
}

/// The engine's own histograms: batch sizes, batcher waits, ensemble steps.
fn histograms(router: &Router, out: &mut String) {
    let (mut sizes, mut delays, mut steps) = (Vec::new(), Vec::new(), Vec::new());
    let (mut firsts, mut betweens) = (Vec::new(), Vec::new());
    for model in router.all() {
        let labels = namespaced(
            &model.namespace,
            vec![("model", model.name().to_string()), ("version", model.version().to_string())],
        );
        let s = model.handle.figures.scheduler();
        let responses = &model.handle.stats.responses;
        firsts.push((labels.clone(), responses.first.snapshot()));
        if model.handle.policy.decoupled {
            betweens.push((labels.clone(), responses.between.snapshot()));
        }
        sizes.push((labels.clone(), s.batch_size));
        delays.push((labels.clone(), s.batch_delay_us));
        if let Some(figures) = &model.steps {
            for (i, (step_model, h)) in figures.steps.iter().enumerate() {
                let mut l = labels.clone();
                l.push(("step", (i + 1).to_string()));
                l.push(("step_model", step_model.clone()));
                steps.push((l, h.snapshot()));
            }
        }
    }
    histogram::write(
        out,
        "tritium_batcher_batch_size",
        "Items in each batch the batcher handed to an instance",
        &sizes,
    );
    histogram::write(
        out,
        "tritium_batcher_delay_us",
        "How long the oldest request of each batch waited in the batcher before dispatch, in microseconds",
        &delays,
    );
    histogram::write(
        out,
        "tritium_time_to_first_response_us",
        "Time from a request's arrival to its first response (a non-decoupled model's only one), in microseconds",
        &firsts,
    );
    histogram::write(
        out,
        "tritium_inter_response_us",
        "Time between consecutive responses of one request of a decoupled model (tokens of a stream), in microseconds",
        &betweens,
    );
    histogram::write(
        out,
        "tritium_ensemble_step_duration_us",
        "Time from an ensemble step's request being queued in its model to its answer, in microseconds",
        &steps,
    );
}

/// One scrape's text: the families rebuilt from the statistics, then the per-request ones.
/// The response cache's own gauges, as Triton 2.51 serves them when a cache is configured.
fn cache_gauges(cache: &tritium_actors::cache::ResponseCache) {
    describe_gauge!("nv_cache_util", "Cache utilization [0.0 - 1.0]");
    describe_gauge!("nv_cache_num_entries", "Number of responses stored in response cache");
    describe_gauge!("nv_cache_num_hits", "Number of cache hits in response cache");
    describe_gauge!("nv_cache_num_misses", "Number of cache misses in response cache");
    describe_gauge!("nv_cache_num_lookups", "Number of cache lookups in response cache");
    describe_gauge!("nv_cache_num_evictions", "Number of cache evictions in response cache");
    describe_gauge!("nv_cache_lookup_duration", "Total cache lookup duration (hit and miss), in microseconds");
    describe_gauge!("nv_cache_insertion_duration", "Total cache insertion duration, in microseconds");
    let c = cache.snapshot();
    gauge!("nv_cache_util").set(c.used_bytes as f64 / c.size_bytes.max(1) as f64);
    gauge!("nv_cache_num_entries").set(c.entries as f64);
    gauge!("nv_cache_num_hits").set(c.hits as f64);
    gauge!("nv_cache_num_misses").set((c.lookups - c.hits) as f64);
    gauge!("nv_cache_num_lookups").set(c.lookups as f64);
    gauge!("nv_cache_num_evictions").set(c.evictions as f64);
    gauge!("nv_cache_lookup_duration").set((c.lookup_ns / 1000) as f64);
    gauge!("nv_cache_insertion_duration").set((c.insertion_ns / 1000) as f64);
}

/// The sequence-aware drain: whether it runs, the sequences still live, what it refused.
fn drain_gauges(drain: &Drain, repository: &RepositoryManager) {
    describe_gauge!("tritium_drain_active", "1 while the server drains (after SIGTERM, until it stops), else 0");
    describe_gauge!(
        "tritium_drain_live_sequences",
        "Sequences the server holds (with a slot or waiting for one), over every model"
    );
    describe_counter!(
        "tritium_drain_refused_total",
        "Requests the drain refused with UNAVAILABLE: a sequence's START (kind=sequence_start) or a request outside any sequence (kind=stateless)"
    );
    gauge!("tritium_drain_active").set(if drain.is_draining() { 1.0 } else { 0.0 });
    gauge!("tritium_drain_live_sequences").set(crate::drain::live_sequences(repository) as f64);
    let refused = drain.refused();
    counter!("tritium_drain_refused_total", &[("kind", "sequence_start")]).absolute(refused.starts);
    counter!("tritium_drain_refused_total", &[("kind", "stateless")]).absolute(refused.stateless);
}

fn render(
    repository: &RepositoryManager,
    drain: &Drain,
    host: &system::HostFigures,
    config: &MetricsConfig,
    latency: &Latency,
) -> String {
    let router = repository.router();
    let recorder = PrometheusBuilder::new().build_recorder();
    metrics::with_local_recorder(&recorder, || {
        describe();
        refresh(router, host, config);
        drain_gauges(drain, repository);
        if let Some(cache) = &repository.shared().cache {
            cache_gauges(cache);
        }
    });
    let mut text = recorder.handle().render();
    histograms(router, &mut text);
    let rest = latency.recorder.render();
    if !rest.trim().is_empty() {
        if !text.ends_with("\n\n") {
            text.push('\n');
        }
        text.push_str(&rest);
    }
    latency.first_responses.write(&mut text);
    // Custom metrics of Triton backend libraries (a model.py's pb_utils.MetricFamily).
    let custom = tritium_ffi::backend_api::metrics_text();
    if !custom.is_empty() {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&custom);
    }
    text
}

/// The per-request families: the summaries in their recorder, the first-response histograms.
struct Latency {
    recorder: PrometheusHandle,
    first_responses: Arc<latency::FirstResponses>,
}

struct State {
    repository: Arc<RepositoryManager>,
    drain: Arc<Drain>,
    config: MetricsConfig,
    latency: Latency,
    host: Arc<system::HostFigures>,
}

async fn scrape(state: web::Data<State>) -> HttpResponse {
    // Requests whose clients have their answers are counted (see `ModelStats::settled`).
    let models = state.repository.router().all();
    futures::future::join_all(models.iter().map(|m| m.handle.stats.settled())).await;
    let text = render(&state.repository, &state.drain, &state.host, &state.config, &state.latency);
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(text)
}

/// The recorder of the per-request latency families, shaped by `config`.
fn latency_builder(config: &MetricsConfig) -> anyhow::Result<PrometheusBuilder> {
    Ok(PrometheusBuilder::new()
        .set_quantiles(&config.quantiles())?
        // prometheus-cpp's summary window, as Triton uses it: 60 s in 5 age buckets.
        .set_bucket_duration(Duration::from_secs(12))?
        .set_bucket_count(NonZeroU32::new(5).expect("non-zero")))
}

/// Installs the process-wide recorder of the per-request latency families.
fn install_latency_recorder(config: &MetricsConfig) -> anyhow::Result<PrometheusHandle> {
    let handle = latency_builder(config)?.install_recorder()?;
    latency::describe();
    // Drains recorded samples into the summaries now and then, so memory stays bounded between
    // scrapes.
    let h = handle.clone();
    std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || loop {
        std::thread::sleep(Duration::from_secs(5));
        h.run_upkeep();
    })?;
    Ok(handle)
}

/// The host families: how often they are sampled (`--metrics-interval-ms`) and which are
/// served (`--allow-cpu-metrics`, `--allow-gpu-metrics`).
#[derive(Debug, Clone, Copy)]
pub struct HostMetrics {
    pub interval: Duration,
    pub cpu: bool,
    pub gpu: bool,
}

/// Installs the recorder and returns the metrics HTTP server (not yet awaited), with the
/// settings of `--metrics-config` and host figures sampled every `host.interval`. Call it before
/// models load: the per-request families of a model are made when it loads (`observer`). With
/// `actors_page`, the same server serves the live actor tree (`/v2/actors`) and its page
/// (`/actors`), behind `actors_restriction` (`--http-restricted-api actors:…`) if given.
pub fn serve_with(
    repository: Arc<RepositoryManager>,
    drain: Arc<Drain>,
    addr: SocketAddr,
    config: MetricsConfig,
    host: HostMetrics,
    actors_page: bool,
    actors_restriction: Option<actors::Guard>,
) -> anyhow::Result<actix_web::dev::Server> {
    let latency = Latency { recorder: install_latency_recorder(&config)?, first_responses: Arc::default() };
    // Each model version loaded from now on reports its requests to its latency families.
    let (families, first_responses) = (config.clone(), latency.first_responses.clone());
    repository.observe_loads(Box::new(move |model: &ModelKey, version: i64, decoupled: bool, cached: bool| {
        latency::ModelLatency::new(&families, model, &version.to_string(), decoupled, cached, &first_responses)
            .map(|l| Box::new(l) as Box<dyn StatsObserver>)
    }));
    let host = system::HostFigures::start(host.interval, host.cpu, host.gpu)?;
    let actors = if actors_page {
        Some(web::Data::new(actors::ActorsState::start(repository.clone(), actors_restriction)?))
    } else {
        None
    };
    let state = web::Data::new(State { repository, drain, config, latency, host });
    let srv = HttpServer::new(move || {
        let app = App::new().app_data(state.clone()).route("/metrics", web::get().to(scrape));
        match &actors {
            Some(a) => app.app_data(a.clone()).configure(actors::routes),
            None => app,
        }
    })
    .workers(1)
    .disable_signals()
    .bind(addr)?
    .run();
    Ok(srv)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tritium_actors::stats::{RequestTimes, StatsObserver};

    use super::latency::ModelLatency;
    use super::*;

    #[test]
    fn the_namespace_label_follows_the_model_label_only_with_namespaces() {
        let l = |v: &[(&'static str, &str)]| v.iter().map(|(k, v)| (*k, v.to_string())).collect::<Vec<_>>();
        let labels = l(&[("instance", "i"), ("model", "m"), ("version", "1")]);
        assert_eq!(namespaced("", labels.clone()), labels);
        assert_eq!(
            namespaced("/r1", labels),
            l(&[("instance", "i"), ("model", "m"), ("namespace", "/r1"), ("version", "1")])
        );
    }

    #[test]
    fn latency_families_render_as_tritons_summaries_and_histogram() {
        let config = MetricsConfig::parse(&["summary_latencies=true", "histogram_latencies=true"]).unwrap();
        let recorder = latency_builder(&config).unwrap().build_recorder();
        let first_responses = latency::FirstResponses::default();
        metrics::with_local_recorder(&recorder, || {
            latency::describe();
            let m = ModelLatency::new(&config, &ModelKey::new("", "m"), "1", true, false, &first_responses).unwrap();
            let t = |us: u64| Duration::from_micros(us);
            for i in 1..=4u64 {
                m.success(&RequestTimes {
                    total: t(1000 * i),
                    queue: t(100 * i),
                    compute_input: t(10),
                    compute_infer: t(800 * i),
                    compute_output: t(20),
                    batch_size: 1,
                });
            }
            m.first_response(Duration::from_millis(250));
            m.first_response(Duration::from_millis(3000));
        });
        let mut text = recorder.handle().render();
        first_responses.write(&mut text);
        assert!(text.contains("# TYPE nv_inference_queue_summary_us summary"), "{text}");
        assert!(text.contains("# HELP nv_inference_request_summary_us Summary of inference request duration in microseconds (includes cached requests)"), "{text}");
        assert!(text.contains("nv_inference_request_summary_us_count{model=\"m\",version=\"1\"} 4"), "{text}");
        assert!(text.contains("nv_inference_request_summary_us_sum{model=\"m\",version=\"1\"} 10000"), "{text}");
        for q in ["0.5", "0.9", "0.95", "0.99", "0.999"] {
            assert!(
                text.contains(&format!("nv_inference_queue_summary_us{{model=\"m\",version=\"1\",quantile=\"{q}\"}}")),
                "{q}: {text}"
            );
        }
        assert!(text.contains("# TYPE nv_inference_first_response_histogram_ms histogram"), "{text}");
        assert!(
            text.contains("nv_inference_first_response_histogram_ms_bucket{model=\"m\",version=\"1\",le=\"100\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("nv_inference_first_response_histogram_ms_bucket{model=\"m\",version=\"1\",le=\"500\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("nv_inference_first_response_histogram_ms_bucket{model=\"m\",version=\"1\",le=\"5000\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("nv_inference_first_response_histogram_ms_bucket{model=\"m\",version=\"1\",le=\"+Inf\"} 2"),
            "{text}"
        );
        assert!(text.contains("nv_inference_first_response_histogram_ms_count{model=\"m\",version=\"1\"} 2"), "{text}");
    }
}
