//! Floor: the least an HTTP server must do to answer perf_analyzer's `add_sub` requests here.
//! The same HTTP stack as Tritium (actix-web, the same worker count), and in the request's own
//! handler: read the body, parse the JSON header, add and subtract the two FP32 inputs, write
//! the two outputs. No router, no scheduler, no instance thread, no statistics.
//! Its latency at concurrency 1 is what perf_analyzer, the loopback and actix-web cost on this
//! machine, below which no server of this shape can answer; `loadtests/floor.py` measures it
//! beside Tritium and Triton in one run.
//!
//!   floor --port 8000 [--workers N]
//!
//! It knows one model, `add_sub` as bundled (INPUT0/INPUT1 FP32 [-1,16] in, OUTPUT0/OUTPUT1
//! out, max_batch_size 8), with binary or JSON tensors; anything else gets a 400 with Triton's
//! `{"error": ...}` body.

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Value};
use tritium_ceiling::kserve_http::{error, respond, split, unknown_model, wants_binary};

const MODEL: &str = "add_sub";
const WIDTH: usize = 16;

fn metadata() -> Value {
    let t = |n: &str| json!({ "name": n, "datatype": "FP32", "shape": [-1, WIDTH] });
    json!({
        "name": MODEL, "versions": ["1"], "platform": "onnxruntime_onnx",
        "inputs": [t("INPUT0"), t("INPUT1")], "outputs": [t("OUTPUT0"), t("OUTPUT1")],
    })
}

fn config() -> Value {
    let t = |n: &str| json!({ "name": n, "data_type": "TYPE_FP32", "dims": [WIDTH.to_string()] });
    json!({
        "name": MODEL, "platform": "onnxruntime_onnx", "backend": "onnxruntime", "max_batch_size": 8,
        "input": [t("INPUT0"), t("INPUT1")], "output": [t("OUTPUT0"), t("OUTPUT1")],
        "instance_group": [{ "name": "add_sub_0", "kind": "KIND_CPU", "count": 1 }],
        "version_policy": { "latest": { "num_versions": 1 } },
    })
}

async fn server_metadata() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(json!({ "name": "floor", "version": "0", "extensions": [] }).to_string())
}

async fn model_get(path: web::Path<String>) -> HttpResponse {
    match path.as_str() {
        MODEL => HttpResponse::Ok().content_type("application/json").body(metadata().to_string()),
        m => unknown_model(m),
    }
}

async fn ready_get(path: web::Path<String>) -> HttpResponse {
    match path.as_str() {
        MODEL => HttpResponse::Ok().finish(),
        m => unknown_model(m),
    }
}

async fn config_get(path: web::Path<String>) -> HttpResponse {
    match path.as_str() {
        MODEL => HttpResponse::Ok().content_type("application/json").body(config().to_string()),
        m => unknown_model(m),
    }
}

/// The two inputs of the request (binary or JSON `data`), each `batch * WIDTH` floats.
fn inputs(header: &Value, binary: &[u8]) -> Result<(usize, Vec<f32>, Vec<f32>), String> {
    let list = header["inputs"].as_array().ok_or("no inputs")?;
    let mut offset = 0usize;
    let (mut a, mut b, mut batch) = (Vec::new(), Vec::new(), 0usize);
    for t in list {
        let floats: Vec<f32> = match t["parameters"]["binary_data_size"].as_u64() {
            Some(size) => {
                let bytes = binary.get(offset..offset + size as usize).ok_or("binary data overruns the body")?;
                offset += size as usize;
                bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
            }
            None => {
                let data = t["data"].as_array().ok_or("an input has neither data nor binary_data_size")?;
                data.iter()
                    .map(|v| v.as_f64().map(|x| x as f32).ok_or("data must be numbers"))
                    .collect::<Result<_, _>>()?
            }
        };
        batch = t["shape"][0].as_u64().unwrap_or(1) as usize;
        match t["name"].as_str() {
            Some("INPUT0") => a = floats,
            Some("INPUT1") => b = floats,
            other => return Err(format!("unknown input {other:?}")),
        }
    }
    if a.len() != batch * WIDTH || b.len() != batch * WIDTH {
        return Err("inputs must be [batch, 16] FP32".into());
    }
    Ok((batch, a, b))
}

async fn infer(path: web::Path<String>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    if path.as_str() != MODEL {
        return unknown_model(path.as_str());
    }
    let (header, binary) = match split(&req, &body) {
        Ok(x) => x,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let (batch, a, b) = match inputs(&header, binary) {
        Ok(x) => x,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let diff: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
    let mut tail = Vec::new();
    let mut outputs = Vec::new();
    for (name, values) in [("OUTPUT0", sum), ("OUTPUT1", diff)] {
        let mut t = json!({ "name": name, "datatype": "FP32", "shape": [batch, WIDTH] });
        if wants_binary(&header, name) {
            t["parameters"] = json!({ "binary_data_size": 4 * values.len() });
            tail.extend(values.iter().flat_map(|x| x.to_le_bytes()));
        } else {
            t["data"] = json!(values);
        }
        outputs.push(t);
    }
    let mut resp = json!({ "model_name": MODEL, "model_version": "1", "outputs": outputs });
    if let Some(id) = header.get("id") {
        resp["id"] = id.clone();
    }
    respond(resp.to_string(), &tail)
}

fn main() -> std::io::Result<()> {
    let mut port = 8000u16;
    let mut workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--port" => port = value.parse().expect("--port: a number"),
            "--workers" => workers = value.parse().expect("--workers: a number"),
            other => {
                eprintln!("floor: unknown flag {other}\nusage: floor --port N [--workers N]");
                std::process::exit(2);
            }
        }
    }
    actix_web::rt::System::new().block_on(async move {
        HttpServer::new(|| {
            App::new()
                .route("/v2/models/{m}/infer", web::post().to(infer))
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
    })
}
