//! The Prometheus endpoint: Triton's `nv_*` families and Tritium's per-actor `tritium_*`
//! figures, through `metrics` + `metrics-exporter-prometheus`. Every figure is read from the
//! engine's statistics and actor figures at scrape time, so the counters agree exactly with
//! the statistics extension.

mod system;

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use actix_web::{web, App, HttpResponse, HttpServer};
use metrics::{counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::server::Server;

fn describe() {
    describe_counter!("nv_inference_request_success", "Number of successful inference requests, all batch sizes");
    describe_counter!("nv_inference_request_failure", "Number of failed inference requests, all batch sizes");
    describe_counter!("nv_inference_count", "Number of inferences performed (does not include cached requests)");
    describe_counter!("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)");
    describe_gauge!("nv_inference_pending_request_count", "Instantaneous number of pending requests awaiting execution per-model.");
    describe_counter!("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds (includes cached requests)");
    describe_counter!("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds (includes cached requests)");
    describe_counter!("nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds (does not include cached requests)");
    describe_counter!("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds (does not include cached requests)");
    describe_counter!("nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds (does not include cached requests)");
    describe_gauge!("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]");
    describe_gauge!("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes");
    describe_gauge!("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes");
    describe_gauge!("tritium_scheduler_queue_length", "Requests queued in a model's scheduler, not yet given to an instance");
    describe_gauge!("tritium_scheduler_mailbox_depth", "Messages sent to a model's scheduler actor and not yet handled");
    describe_counter!("tritium_batcher_batches_total", "Batches the batcher handed to instances");
    describe_counter!("tritium_batcher_items_total", "Items (batch elements) in the batches handed to instances");
    describe_gauge!("tritium_instance_alive", "1 while the instance actor is running, 0 while it restarts");
    describe_counter!("tritium_instance_busy_us", "Cumulative time the instance actor spent executing, in microseconds");
    describe_counter!("tritium_instance_executions_total", "Executions the instance actor ran");
    describe_counter!("tritium_instance_restarts_total", "Times the supervisor restarted the instance after a failure");
}

/// Copies every model's statistics and actor figures into the recorder.
fn refresh(server: &Server, cpu: &mut system::CpuSampler) {
    for model in server.repository.router().all() {
        let name = model.name().to_string();
        let version = model.version().to_string();
        let labels = [("model", name.clone()), ("version", version.clone())];
        let s = model.handle.stats.snapshot();
        counter!("nv_inference_request_success", &labels).absolute(s.success.0);
        for reason in ["REJECTED", "CANCELED", "BACKEND", "OTHER"] {
            let n = s.failures.get(reason).copied().unwrap_or(0);
            let l = [("model", name.clone()), ("version", version.clone()), ("reason", reason.to_string())];
            counter!("nv_inference_request_failure", &l).absolute(n);
        }
        counter!("nv_inference_count", &labels).absolute(s.inference_count);
        counter!("nv_inference_exec_count", &labels).absolute(s.execution_count);
        gauge!("nv_inference_pending_request_count", &labels).set(s.pending as f64);
        let us = |(_, ns): (u64, u64)| ns / 1000;
        counter!("nv_inference_request_duration_us", &labels).absolute(us(s.success) + us(s.fail));
        counter!("nv_inference_queue_duration_us", &labels).absolute(us(s.queue));
        counter!("nv_inference_compute_input_duration_us", &labels).absolute(us(s.compute_input));
        counter!("nv_inference_compute_infer_duration_us", &labels).absolute(us(s.compute_infer));
        counter!("nv_inference_compute_output_duration_us", &labels).absolute(us(s.compute_output));

        let f = &model.handle.figures;
        gauge!("tritium_scheduler_queue_length", &labels).set(f.queue_len.load(Relaxed) as f64);
        gauge!("tritium_scheduler_mailbox_depth", &labels).set(f.scheduler_mailbox.load(Relaxed) as f64);
        counter!("tritium_batcher_batches_total", &labels).absolute(f.batches_dispatched.load(Relaxed));
        counter!("tritium_batcher_items_total", &labels).absolute(f.items_dispatched.load(Relaxed));
        for (spec, inst) in model.handle.policy.instances.iter().zip(&f.instances) {
            let l = [("model", name.clone()), ("version", version.clone()), ("instance", spec.name.clone())];
            gauge!("tritium_instance_alive", &l).set(if inst.alive.load(Relaxed) { 1.0 } else { 0.0 });
            counter!("tritium_instance_busy_us", &l).absolute(inst.busy_ns.load(Relaxed) / 1000);
            counter!("tritium_instance_executions_total", &l).absolute(inst.executions.load(Relaxed));
            counter!("tritium_instance_restarts_total", &l).absolute(inst.restarts.load(Relaxed));
        }
    }
    if let Some(u) = cpu.utilization() {
        gauge!("nv_cpu_utilization").set(u);
    }
    if let Some((total, used)) = system::memory() {
        gauge!("nv_cpu_memory_total_bytes").set(total as f64);
        gauge!("nv_cpu_memory_used_bytes").set(used as f64);
    }
}

struct State {
    server: Arc<Server>,
    handle: PrometheusHandle,
    cpu: parking_lot::Mutex<system::CpuSampler>,
}

async fn scrape(state: web::Data<State>) -> HttpResponse {
    refresh(&state.server, &mut state.cpu.lock());
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(state.handle.render())
}

/// Installs the recorder and returns the metrics HTTP server (not yet awaited).
pub fn serve(server: Arc<Server>, addr: SocketAddr) -> anyhow::Result<actix_web::dev::Server> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    describe();
    let state = web::Data::new(State { server, handle, cpu: parking_lot::Mutex::new(system::CpuSampler::default()) });
    let srv = HttpServer::new(move || App::new().app_data(state.clone()).route("/metrics", web::get().to(scrape)))
        .workers(1)
        .disable_signals()
        .bind(addr)?
        .run();
    Ok(srv)
}
