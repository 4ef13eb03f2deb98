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

    /// The engine's answer is complete: `INFER_RESPONSE_COMPLETE`, which Triton's
    /// OpenTelemetry mode puts on the root span (its trace files do not have it).
    pub fn response_complete(&self) {
        if self.setting.config.mode == TraceMode::OpenTelemetry {
            self.record("INFER_RESPONSE_COMPLETE");
        }
    }

    /// Hands the trace to the engine, which stamps queue and compute on it.
    pub fn attach(&self, request: &mut InferRequest) {
        request.trace = self.events.clone();
    }

    /// Triton's record of this trace: the model object, then one object per timestamp.
    fn record_json(&self, version: i64, request_id: &str) -> String {
        use std::fmt::Write as _;
        let id = self.id;
        let name = serde_json::Value::from(self.model.as_str());
        let mut out = format!("{{\"id\":{id},\"model_name\":{name},\"model_version\":{version}");
        if !request_id.is_empty() {
            let _ = write!(out, ",\"request_id\":{}", serde_json::Value::from(request_id));
        }
        out.push('}');
        for (activity, at) in self.events.as_ref().map(|e| e.events()).unwrap_or_default() {
            let _ = write!(out, ",{{\"id\":{id},\"timestamps\":[{{\"name\":\"{activity}\",\"ns\":{}}}]}}", ns_of(at));
        }
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
}
