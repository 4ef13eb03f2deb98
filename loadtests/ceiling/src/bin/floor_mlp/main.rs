//! Batching floor: the least a batching HTTP server must do to serve perf_analyzer's `mlp`
//! requests here. The same HTTP stack as Tritium (actix-web, the same worker count) and the same
//! ONNX Runtime session options as the bundled mlp, with the least engine between them
//! (`tritium_ceiling::batcher`: a queue under a mutex and one thread running the batches). No
//! router, no actors, no lanes, no request statistics beyond the counters perf_analyzer reads.
//!
//! At mlp c16 with batch-1 clients it measures what issue 19's "≥ 0.85 of the CPU bound" asks
//! of a server of this shape on this machine: `loadtests/hotpath.py --floor-mlp` runs it beside
//! Tritium in one run.
//!
//!   floor_mlp --port 8000 [--grpc-port 8001] [--workers N] [--model FILE]
//!             [--onnxruntime-library PATH] [--delay-us 200] [--preferred 8] [--max-batch 64]
//!             [--session KEY=VALUE]...
//!
//! With `--grpc-port` it also serves gRPC (`grpc.rs`), both protocols in front of one engine.
//!
//! It knows one model, `mlp` (INPUT0 FP32 [-1,256] in, OUTPUT0 out), with binary or JSON
//! tensors; anything else gets a 400 or 404 with Triton's `{"error": ...}` body. `--session`
//! sets an ONNX Runtime session config entry, as a model config's `session.*` parameter does in
//! Tritium (hotpath.py passes the bundled mlp's: `session.intra_op.allow_spinning=0`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Value};
use tritium_ceiling::batcher::{Batcher, Options};
use tritium_ceiling::kserve_http::{error, respond, split, unknown_model as unknown, wants_binary};
use tritium_ceiling::{default_onnxruntime_library, repo_root};

mod grpc;

const MODEL: &str = "mlp";

fn metadata(b: &Batcher) -> Value {
    json!({
        "name": MODEL, "versions": ["1"], "platform": "onnxruntime_onnx",
        "inputs": [{ "name": b.input_name, "datatype": "FP32", "shape": [-1, b.input_width] }],
        "outputs": [{ "name": b.output_name, "datatype": "FP32", "shape": [-1, b.output_width] }],
    })
}

fn config(b: &Batcher) -> Value {
    json!({
        "name": MODEL, "platform": "onnxruntime_onnx", "backend": "onnxruntime", "max_batch_size": b.max_batch,
        "input": [{ "name": b.input_name, "data_type": "TYPE_FP32", "dims": [b.input_width.to_string()] }],
        "output": [{ "name": b.output_name, "data_type": "TYPE_FP32", "dims": [b.output_width.to_string()] }],
        "instance_group": [{ "name": "mlp_0", "kind": "KIND_CPU", "count": 1 }],
        "dynamic_batching": {},
        "version_policy": { "latest": { "num_versions": 1 } },
    })
}

async fn server_metadata() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(json!({ "name": "floor_mlp", "version": "0", "extensions": ["statistics"] }).to_string())
}

async fn model_get(path: web::Path<String>, b: web::Data<Batcher>) -> HttpResponse {
    match path.as_str() {
        MODEL => HttpResponse::Ok().content_type("application/json").body(metadata(&b).to_string()),
        m => unknown(m),
    }
}

async fn ready_get(path: web::Path<String>) -> HttpResponse {
    match path.as_str() {
        MODEL => HttpResponse::Ok().finish(),
        m => unknown(m),
    }
}

async fn config_get(path: web::Path<String>, b: web::Data<Batcher>) -> HttpResponse {
    match path.as_str() {
        MODEL => HttpResponse::Ok().content_type("application/json").body(config(&b).to_string()),
        m => unknown(m),
    }
}

async fn stats_get(req: HttpRequest, b: web::Data<Batcher>) -> HttpResponse {
    match req.match_info().get("m") {
        Some(MODEL) => HttpResponse::Ok().content_type("application/json").body(b.stats_json(MODEL).to_string()),
        m => unknown(m.unwrap_or_default()),
    }
}

/// The request's one input (binary or JSON `data`): its rows and floats.
fn input(header: &Value, binary: &[u8], b: &Batcher) -> Result<(usize, Vec<f32>), String> {
    let [t] = header["inputs"].as_array().map(Vec::as_slice).unwrap_or_default() else {
        return Err(format!("expected one input, '{}'", b.input_name));
    };
    if t["name"] != b.input_name.as_str() {
        return Err(format!("unknown input {} for model '{MODEL}'", t["name"]));
    }
    let floats: Vec<f32> = match t["parameters"]["binary_data_size"].as_u64() {
        Some(size) => {
            let bytes = binary.get(..size as usize).ok_or("binary data overruns the body")?;
            bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        }
        None => {
            let data = t["data"].as_array().ok_or("the input has neither data nor binary_data_size")?;
            data.iter().map(|v| v.as_f64().map(|x| x as f32).ok_or("data must be numbers")).collect::<Result<_, _>>()?
        }
    };
    let rows = t["shape"][0].as_u64().unwrap_or(1) as usize;
    if rows == 0 || rows > b.max_batch || floats.len() != rows * b.input_width {
        return Err(format!("the input must be [1..{}, {}] FP32", b.max_batch, b.input_width));
    }
    Ok((rows, floats))
}

async fn infer(path: web::Path<String>, req: HttpRequest, body: web::Bytes, b: web::Data<Batcher>) -> HttpResponse {
    let arrived = Instant::now();
    if path.as_str() != MODEL {
        return unknown(path.as_str());
    }
    let (header, binary) = match split(&req, &body) {
        Ok(x) => x,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let (rows, floats) = match input(&header, binary, &b) {
        Ok(x) => x,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let values = match b.submit(floats, rows).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e),
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "the engine dropped the request"),
    };
    let mut out = json!({ "name": b.output_name, "datatype": "FP32", "shape": [rows, b.output_width] });
    let binary_out = wants_binary(&header, &b.output_name);
    if binary_out {
        out["parameters"] = json!({ "binary_data_size": 4 * values.len() });
    } else {
        out["data"] = json!(values);
    }
    let mut resp = json!({ "model_name": MODEL, "model_version": "1", "outputs": [out] });
    if let Some(id) = header.get("id") {
        resp["id"] = id.clone();
    }
    let tail: Vec<u8> = if binary_out { values.iter().flat_map(|x| x.to_le_bytes()).collect() } else { Vec::new() };
    b.answered(arrived);
    respond(resp.to_string(), &tail)
}

const USAGE: &str =
    "usage: floor_mlp --port N [--grpc-port N] [--workers N] [--model FILE] [--onnxruntime-library PATH] \
                     [--delay-us 200] [--preferred 8] [--max-batch 64] [--session KEY=VALUE]...";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut port = 8000u16;
    let mut grpc_port = None;
    let mut workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut model = repo_root().join("model_repository/mlp/1/model.onnx");
    let mut library = default_onnxruntime_library();
    let (mut delay_us, mut preferred, mut max_batch) = (200u64, 8usize, 64usize);
    let mut session = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        let number = |what: &str| value.parse::<u64>().unwrap_or_else(|_| panic!("{what}: a number"));
        match flag.as_str() {
            "--port" => port = number("--port") as u16,
            "--grpc-port" => grpc_port = Some(number("--grpc-port") as u16),
            "--workers" => workers = number("--workers") as usize,
            "--model" => model = PathBuf::from(&value),
            "--onnxruntime-library" => library = PathBuf::from(&value),
            "--delay-us" => delay_us = number("--delay-us"),
            "--preferred" => preferred = number("--preferred") as usize,
            "--max-batch" => max_batch = number("--max-batch") as usize,
            "--session" => match value.split_once('=') {
                Some((k, v)) => session.push((k.to_string(), v.to_string())),
                None => panic!("--session: KEY=VALUE"),
            },
            other => {
                eprintln!("floor_mlp: unknown flag {other}\n{USAGE}");
                std::process::exit(2);
            }
        }
    }
    let batcher = Batcher::start(&Options {
        model: &model,
        library: &library,
        session: &session,
        max_batch: max_batch.max(1),
        preferred: preferred.max(1),
        delay: Duration::from_micros(delay_us),
    })?;
    if let Some(p) = grpc_port {
        grpc::serve(batcher.clone(), p, workers)?;
    }
    eprintln!(
        "floor_mlp: {} on port {port} (gRPC {grpc_port:?}), {workers} workers, session {session:?}",
        model.display()
    );
    let data = web::Data::new(batcher);
    actix_web::rt::System::new().block_on(async move {
        HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .route("/v2/models/{m}/infer", web::post().to(infer))
                .route("/v2/models/{m}/versions/{v}/infer", web::post().to(infer_versioned))
                .route("/v2/models/{m}/stats", web::get().to(stats_get))
                .route("/v2/models/{m}/versions/{v}/stats", web::get().to(stats_get))
                .route("/v2/models/{m}", web::get().to(model_get))
                .route("/v2/models/{m}/config", web::get().to(config_get))
                .route("/v2/models/{m}/ready", web::get().to(ready_get))
                .route("/v2", web::get().to(server_metadata))
                .route("/v2/health/ready", web::get().to(HttpResponse::Ok))
                .route("/v2/health/live", web::get().to(HttpResponse::Ok))
        })
        .workers(workers.max(1))
        .bind(("127.0.0.1", port))?
        .run()
        .await
    })?;
    Ok(())
}

async fn infer_versioned(
    path: web::Path<(String, String)>,
    req: HttpRequest,
    body: web::Bytes,
    b: web::Data<Batcher>,
) -> HttpResponse {
    infer(web::Path::from(path.into_inner().0), req, body, b).await
}
