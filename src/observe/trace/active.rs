//! The active trace: one sampled request's trace on its way through the server. The frontend
//! stamps its points, the engine stamps queue and compute (through the `Trace` attached to the
//! request), and once the response is sent the record goes to its setting's writer.

use std::sync::Arc;
use std::time::Instant;

use tritium_actors::{InferRequest, Trace};

use super::file::ns_of;
use super::otel::{Finished, RemoteParent};
use super::sampling::Setting;
use super::settings::TraceMode;

/// One sampled request's trace, on its way through the server.
pub struct ActiveTrace {
    pub(super) id: u64,
    pub(super) model: String,
    pub(super) setting: Arc<Setting>,
    /// The timestamps; `None` when the level does not include TIMESTAMPS.
    pub(super) events: Option<Arc<Trace>>,
    /// When it was sampled (the OpenTelemetry root span's start).
    pub(super) started: Instant,
    /// The client's span (OpenTelemetry mode, from a `traceparent`); boxed, as most traces
    /// have none.
    pub(super) parent: Option<Box<RemoteParent>>,
}

impl ActiveTrace {
    pub fn record(&self, activity: &'static str) {
        self.record_at(activity, Instant::now());
    }

    pub fn record_at(&self, activity: &'static str, at: Instant) {
        if let Some(events) = &self.events {
            events.record_at(activity, at);
        }
    }

    /// The engine's answer is complete: `INFER_RESPONSE_COMPLETE`, on the root span in
    /// OpenTelemetry mode and in the record in Triton's trace files (Triton 2.51 writes it in
    /// both).
    pub fn response_complete(&self) {
        self.record("INFER_RESPONSE_COMPLETE");
    }

    /// Hands the trace to the engine, which stamps queue and compute on it.
    pub fn attach(&self, request: &mut InferRequest) {
        request.trace = self.events.clone();
    }

    /// Triton's record of this trace: the records of the requests made under it (an ensemble's
    /// steps, a backend's BLS calls with its trace), each naming its parent's id; then the
    /// model object and one object per timestamp.
    fn record_json(&self, version: i64, request_id: &str) -> String {
        let mut out = String::new();
        if let Some(events) = &self.events {
            children_json(&mut out, self.id, events);
        }
        let head = Head { id: self.id, model: &self.model, version, request_id, parent_id: None };
        let events = self.events.as_ref().map(|e| e.events()).unwrap_or_default();
        model_json(&mut out, head, &events);
        out
    }

    /// The response has gone: the trace is complete and goes to the file, or to the span
    /// exporter in OpenTelemetry mode.
    pub fn finish(self, version: i64, request_id: &str) {
        match self.setting.config.mode {
            TraceMode::Triton => {
                let record = self.record_json(version, request_id);
                self.setting.write(record);
            }
            TraceMode::OpenTelemetry => {
                if let Some(exporter) = &self.setting.sinks.otel {
                    exporter.export(Finished {
                        id: self.id,
                        model: self.model,
                        version,
                        request_id: request_id.to_string(),
                        started: self.started,
                        ended: Instant::now(),
                        parent: self.parent,
                        events: self.events,
                    });
                }
            }
        }
    }
}

/// The first object of a model's record.
struct Head<'a> {
    id: u64,
    model: &'a str,
    version: i64,
    request_id: &'a str,
    parent_id: Option<u64>,
}

/// Appends (after a comma when `out` has records) one model's record: its head, then its
/// timestamps.
fn model_json(out: &mut String, h: Head<'_>, events: &[(&'static str, Instant)]) {
    use std::fmt::Write as _;
    if !out.is_empty() {
        out.push(',');
    }
    let (id, name) = (h.id, serde_json::Value::from(h.model));
    let _ = write!(out, "{{\"id\":{id},\"model_name\":{name},\"model_version\":{}", h.version);
    if !h.request_id.is_empty() {
        let _ = write!(out, ",\"request_id\":{}", serde_json::Value::from(h.request_id));
    }
    if let Some(parent) = h.parent_id {
        let _ = write!(out, ",\"parent_id\":{parent}");
    }
    out.push('}');
    for (activity, at) in events {
        let _ = write!(out, ",{{\"id\":{id},\"timestamps\":[{{\"name\":\"{activity}\",\"ns\":{}}}]}}", ns_of(*at));
    }
}

/// Appends the records of `trace`'s children (whose parent's id is `parent_id`), each after
/// its own children's, as Triton writes a child when it ends, before its parent.
fn children_json(out: &mut String, parent_id: u64, trace: &Trace) {
    for (model, child) in trace.children() {
        let id = super::next_id();
        children_json(out, id, &child);
        let head = Head {
            id,
            model: &model,
            version: child.version(),
            request_id: child.request_id(),
            parent_id: Some(parent_id),
        };
        model_json(out, head, &child.events());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::on;
    use super::super::TraceManager;
    use super::*;

    #[test]
    fn records_are_tritons_objects_in_time_order() {
        let m = TraceManager::new(on("/tmp/never-written.json"));
        let t = m.sample("add_sub", None).unwrap();
        let start = Instant::now();
        t.record_at("REQUEST_END", start + Duration::from_micros(3));
        t.record_at("HTTP_RECV_START", start);
        let json: serde_json::Value = serde_json::from_str(&format!("[{}]", t.record_json(1, "r\"1"))).unwrap();
        assert_eq!(
            json[0],
            serde_json::json!({"id": t.id, "model_name": "add_sub", "model_version": 1, "request_id": "r\"1"})
        );
        assert_eq!(json[1]["timestamps"][0]["name"], "HTTP_RECV_START");
        assert_eq!(json[2]["timestamps"][0]["name"], "REQUEST_END");
        let (a, b) =
            (json[1]["timestamps"][0]["ns"].as_u64().unwrap(), json[2]["timestamps"][0]["ns"].as_u64().unwrap());
        assert_eq!(b - a, 3000);
    }

    #[test]
    fn a_child_is_recorded_before_its_parent_and_names_it() {
        let m = TraceManager::new(on("/tmp/never-written.json"));
        let t = m.sample("bls", None).unwrap();
        t.record("REQUEST_START");
        let child = t.events.as_ref().unwrap().child("add_sub");
        child.record("REQUEST_START");
        child.set_version(3);
        child.set_request_id("call");
        let grandchild = child.child("leaf");
        grandchild.record("COMPUTE_START");
        child.record("REQUEST_END");
        let json: serde_json::Value = serde_json::from_str(&format!("[{}]", t.record_json(1, ""))).unwrap();
        let heads: Vec<&serde_json::Value> =
            json.as_array().unwrap().iter().filter(|o| o.get("model_name").is_some()).collect();
        let (leaf, add_sub, bls) = (heads[0], heads[1], heads[2]);
        assert_eq!((leaf["model_name"].as_str(), leaf["parent_id"].as_u64()), (Some("leaf"), add_sub["id"].as_u64()));
        let child_id = add_sub["id"].as_u64().unwrap();
        assert_eq!(
            add_sub,
            &serde_json::json!({"id": child_id, "model_name": "add_sub", "model_version": 3, "request_id": "call", "parent_id": t.id})
        );
        assert_eq!(bls, &serde_json::json!({"id": t.id, "model_name": "bls", "model_version": 1}));
        let of = |id: u64| -> Vec<&str> {
            json.as_array()
                .unwrap()
                .iter()
                .filter(|o| o["id"] == id && o.get("timestamps").is_some())
                .map(|o| o["timestamps"][0]["name"].as_str().unwrap())
                .collect()
        };
        assert_eq!(of(child_id), ["REQUEST_START", "REQUEST_END"]);
        assert_eq!(of(t.id), ["REQUEST_START"]);
    }
}
