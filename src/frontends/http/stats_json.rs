//! The statistics extension's JSON (`GET /v2/models/.../stats`), field for field as Triton
//! writes it: counts and nanoseconds as numbers, batch stats per batch size.

use serde_json::{json, Value};

use crate::server::ModelStatistics;

fn pair((count, ns): (u64, u64)) -> Value {
    json!({ "count": count, "ns": ns })
}

/// One model version's entry of `model_stats`.
pub fn model_stats_json(m: &ModelStatistics) -> Value {
    let s = &m.stats;
    let batch_stats: Vec<Value> = s
        .batches
        .iter()
        .map(|(size, b)| {
            json!({
                "batch_size": size,
                "compute_input": pair((b.count, b.compute_input_ns)),
                "compute_infer": pair((b.count, b.compute_infer_ns)),
                "compute_output": pair((b.count, b.compute_output_ns)),
            })
        })
        .collect();
    let response_stats: serde_json::Map<String, Value> = s
        .responses
        .iter()
        .map(|(index, r)| {
            let figures = json!({
                "compute_infer": pair(r.compute_infer),
                "compute_output": pair(r.compute_output),
                "success": pair(r.success),
                "fail": pair(r.fail),
                "empty_response": pair(r.empty_response),
                "cancel": pair(r.cancel),
            });
            (index.clone(), figures)
        })
        .collect();
    json!({
        "name": m.name,
        "version": m.version,
        "last_inference": s.last_inference_ms,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": {
            "success": pair(s.success),
            "fail": pair(s.fail),
            "queue": pair(s.queue),
            "compute_input": pair(s.compute_input),
            "compute_infer": pair(s.compute_infer),
            "compute_output": pair(s.compute_output),
            "cache_hit": pair(s.cache_hit),
            "cache_miss": pair(s.cache_miss),
        },
        "response_stats": response_stats,
        "batch_stats": batch_stats,
        "memory_usage": s.memory_usage.iter().map(|m| json!({"type": m.kind, "id": m.id, "byte_size": m.byte_size})).collect::<Vec<_>>(),
    })
}

/// The whole answer: `{"model_stats": [...]}`, sorted by name then version.
pub fn stats_json(mut models: Vec<ModelStatistics>) -> Value {
    models.sort_by(|a, b| {
        (a.name.as_str(), a.version.parse::<i64>().unwrap_or(0))
            .cmp(&(b.name.as_str(), b.version.parse::<i64>().unwrap_or(0)))
    });
    json!({ "model_stats": models.iter().map(model_stats_json).collect::<Vec<_>>() })
}
