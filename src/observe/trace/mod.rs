//! Triton's request tracing: the `--trace-config` flags, the trace extension's settings
//! (global and per model, `/v2[/models/{m}]/trace/setting`, gRPC `TraceSetting`), sampling
//! every `rate`-th request until `count` traces are taken, and the trace file.
//!
//! A sampled request carries an `ActiveTrace`: the frontend stamps its own points on it
//! (`HTTP_RECV_START`, …), the engine stamps queue and compute, and once the response is sent
//! the frontend finishes it; the record goes to a writer thread. With `log_frequency` 0 every
//! trace is appended to `trace_file`, which stays a closed JSON array after each write; with N
//! it is written, every N traces, to `<trace_file>.<index>`. The records are Triton's: one
//! object naming the model and request, then one `{"id", "timestamps": [{name, ns}]}` per point,
//! after the records of its children (ensemble steps, BLS calls made with its trace), which name
//! it as their `parent_id`.
//!
//! The settings are in `settings`, sampling in `sampling`, the active trace in `active`, the
//! file writer in `file`; this module holds the manager that ties them together.

mod active;
mod file;
mod otel;
mod sampling;
mod settings;

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use active::ActiveTrace;
use file::{clock_anchor, Writer};
use otel::Exporter;
pub use otel::RemoteParent;
use parking_lot::Mutex;
use sampling::Setting;
use settings::{apply_changes, validate, Overrides};
pub use settings::{LegacyTraceFlags, TraceConfig, TraceMode, TraceValue, TraceView};
use tritium_actors::{Error, Result, Trace};

struct State {
    /// The startup flags: what a cleared global field returns to.
    defaults: TraceConfig,
    global_overrides: Overrides,
    global: Arc<Setting>,
    models: HashMap<String, (Overrides, Arc<Setting>)>,
}

/// Where finished traces go: the trace file's writer thread, and in OpenTelemetry mode the
/// span exporter.
struct Sinks {
    file: Writer,
    otel: Option<Exporter>,
}

/// Triton's trace ids: one counter for requests and the composing models' traces under them.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(super) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Relaxed)
}

/// The settings, the sampler and the writer.
pub struct TraceManager {
    state: Mutex<State>,
    /// False while no setting can trace: then sampling is one atomic load.
    enabled: AtomicBool,
    sinks: Arc<Sinks>,
}

impl TraceManager {
    /// A manager that writes trace files and exports nothing (see `start` for the exporter).
    pub fn new(defaults: TraceConfig) -> Self {
        Self::with_exporter(defaults, None)
    }

    /// The manager for these startup settings, with the span exporter in OpenTelemetry mode.
    pub fn start(defaults: TraceConfig) -> std::result::Result<Self, String> {
        let exporter = match defaults.mode {
            TraceMode::OpenTelemetry => Some(Exporter::start(&defaults.otel)?),
            TraceMode::Triton => None,
        };
        Ok(Self::with_exporter(defaults, exporter))
    }

    fn with_exporter(defaults: TraceConfig, otel: Option<Exporter>) -> Self {
        clock_anchor();
        let sinks = Arc::new(Sinks { file: Writer::default(), otel });
        let global = Setting::new(defaults.clone(), sinks.clone());
        let enabled = AtomicBool::new(global.can_trace());
        let state = State { defaults, global_overrides: Overrides::default(), global, models: HashMap::new() };
        TraceManager { state: Mutex::new(state), enabled, sinks }
    }

    fn setting_of(&self, st: &State, model: Option<&str>) -> Arc<Setting> {
        model.and_then(|m| st.models.get(m)).map(|(_, s)| s.clone()).unwrap_or_else(|| st.global.clone())
    }

    /// The settings in force for `model` (`None` = global).
    #[cfg(test)]
    pub fn view(&self, model: Option<&str>) -> TraceView {
        let st = self.state.lock();
        self.setting_of(&st, model).view()
    }

    /// Applies a trace request's settings to the global ones (`model` = None) or one model's,
    /// and answers the settings now in force there.
    pub fn update(&self, model: Option<&str>, changes: &[(String, TraceValue)]) -> Result<TraceView> {
        let mut st = self.state.lock();
        if changes.is_empty() {
            return Ok(self.setting_of(&st, model).view());
        }
        match model {
            None => {
                let mut over = st.global_overrides.clone();
                apply_changes(&mut over, changes, st.defaults.mode)?;
                let config = over.resolve(&st.defaults);
                validate(&config)?;
                // Models that set only some fields follow the global settings in the others.
                let mut rebuilt = Vec::new();
                for (name, (mo, _)) in &st.models {
                    if !mo.is_complete() {
                        let mc = mo.resolve(&config);
                        validate(&mc).map_err(|e| Error::invalid(format!("model '{name}': {}", e.message)))?;
                        rebuilt.push((name.clone(), mc));
                    }
                }
                st.global_overrides = over;
                st.global = Setting::new(config, self.sinks.clone());
                for (name, mc) in rebuilt {
                    if let Some(entry) = st.models.get_mut(&name) {
                        entry.1 = Setting::new(mc, self.sinks.clone());
                    }
                }
            }
            Some(name) => {
                let mut over = st.models.get(name).map(|(o, _)| o.clone()).unwrap_or_default();
                apply_changes(&mut over, changes, st.defaults.mode)?;
                if over.is_empty() {
                    st.models.remove(name);
                } else {
                    let config = over.resolve(&st.global.config);
                    validate(&config)?;
                    let setting = Setting::new(config, self.sinks.clone());
                    st.models.insert(name.to_string(), (over, setting));
                }
            }
        }
        let enabled = st.global.can_trace() || st.models.values().any(|(_, s)| s.can_trace());
        self.enabled.store(enabled, Relaxed);
        Ok(self.setting_of(&st, model).view())
    }

    /// A trace for this request of `model`, when the sampler picks it. In OpenTelemetry mode a
    /// request that carries a client's trace context (`parent`) is traced whatever the rate and
    /// count, as Triton does.
    pub fn sample(&self, model: &str, parent: Option<RemoteParent>) -> Option<ActiveTrace> {
        if !self.enabled.load(Relaxed) {
            return None;
        }
        let setting = {
            let st = self.state.lock();
            self.setting_of(&st, Some(model))
        };
        let propagated = parent.is_some() && setting.config.mode == TraceMode::OpenTelemetry && setting.can_trace();
        if !propagated && !setting.sample() {
            return None;
        }
        let events = setting.config.level.timestamps.then(|| Arc::new(Trace::new()));
        let otel = setting.config.mode == TraceMode::OpenTelemetry;
        let parent = parent.filter(|_| otel).map(Box::new);
        if let (true, Some(events)) = (otel, &events) {
            // The model span's ids are chosen now, so the backend can be handed its context.
            let trace_id = parent.as_ref().map(|p| u128::from_be_bytes(p.0.trace_id().to_bytes()));
            events.set_span(tritium_actors::trace::SpanIds::new(trace_id));
        }
        Some(ActiveTrace {
            id: next_id(),
            model: model.to_string(),
            setting,
            events,
            started: std::time::Instant::now(),
            parent,
        })
    }

    /// Writes what is still buffered and waits (a little) until the writer has written it.
    pub fn shutdown(&self) {
        {
            let st = self.state.lock();
            st.global.flush();
            for (_, s) in st.models.values() {
                s.flush();
            }
        }
        self.sinks.file.sync(Duration::from_secs(5));
        if let Some(exporter) = &self.sinks.otel {
            exporter.shutdown(Duration::from_secs(5));
        }
    }
}

static MANAGER: OnceLock<TraceManager> = OnceLock::new();

/// Sets the startup settings (and starts the span exporter in OpenTelemetry mode); call once,
/// before serving.
pub fn install(defaults: TraceConfig) -> std::result::Result<(), String> {
    let _ = MANAGER.set(TraceManager::start(defaults)?);
    Ok(())
}

/// The process's trace manager (tracing off when `install` was not called).
pub fn manager() -> &'static TraceManager {
    MANAGER.get_or_init(|| TraceManager::new(TraceConfig::default()))
}

#[cfg(test)]
mod tests {
    use super::settings::TraceLevel;
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn set(key: &str, values: &[&str]) -> (String, TraceValue) {
        (key.to_string(), TraceValue::Values(s(values)))
    }

    /// Every request traced at TIMESTAMPS into `file` (shared with the other trace tests).
    pub(super) fn on(file: &str) -> TraceConfig {
        TraceConfig {
            level: TraceLevel { timestamps: true, tensors: false },
            rate: 1,
            file: file.into(),
            ..TraceConfig::default()
        }
    }

    #[test]
    fn model_settings_override_and_fall_back_to_global() {
        let m = TraceManager::new(on("/tmp/never-written.json"));
        let v = m.update(Some("add_sub"), &[set("trace_rate", &["12"]), set("log_frequency", &["34"])]).unwrap();
        assert_eq!((v.rate, v.log_frequency, v.level.timestamps), (12, 34, true));
        // The global change reaches the model's unset fields only.
        m.update(None, &[set("trace_rate", &["56"]), set("trace_level", &["OFF"])]).unwrap();
        let v = m.view(Some("add_sub"));
        assert_eq!((v.rate, v.log_frequency, v.level.is_off()), (12, 34, true));
        // Clearing every field drops the override.
        let clear = [("trace_rate".to_string(), TraceValue::Clear), ("log_frequency".to_string(), TraceValue::Clear)];
        assert_eq!(m.update(Some("add_sub"), &clear).unwrap(), m.view(None));
        // Clearing a global field returns it to the startup value.
        assert_eq!(m.update(None, &[("trace_rate".to_string(), TraceValue::Clear)]).unwrap().rate, 1);
    }

    #[test]
    fn rejects_bad_settings_and_changes_nothing() {
        let m = TraceManager::new(on("/tmp/never-written.json"));
        let before = m.view(None);
        let cases = [
            (set("trace_rate", &["abc"]), "Unable to parse 'trace_rate', got: abc"),
            (set("trace_count", &["-5"]), "Expecting value >= -1"),
            (set("trace_level", &["OFF", "TIMESTAMPS"]), "only one trace level 'OFF'"),
            (set("trace_level", &["LOUD"]), "unknown trace level 'LOUD'"),
            (set("trace_rate", &["1", "2"]), "expect only 1 value for 'trace_rate'"),
            (set("trace_rate", &["0"]), "sample rate must be non-zero"),
            (set("sampling", &["1"]), "unknown trace setting 'sampling'"),
            (
                ("trace_rate".into(), TraceValue::from_json("trace_rate", &serde_json::json!(5))),
                "expect a string for 'trace_rate'",
            ),
        ];
        for ((key, value), text) in cases {
            let e = m.update(None, &[set("log_frequency", &["9"]), (key.clone(), value)]).unwrap_err();
            assert_eq!(e.kind, tritium_actors::ErrorKind::InvalidArgument, "{key}");
            assert!(e.message.contains(text), "{key}: {}", e.message);
        }
        let e = m.update(None, &[set("trace_file", &["/tmp/other"])]).unwrap_err();
        assert_eq!(e.kind, tritium_actors::ErrorKind::Unsupported);
        assert_eq!(m.view(None), before);
        // No file: tracing cannot be turned on (the file is a startup flag).
        let off = TraceManager::new(TraceConfig::default());
        let e = off.update(None, &[set("trace_level", &["TIMESTAMPS"])]).unwrap_err();
        assert!(e.message.contains("trace file name is not given"), "{}", e.message);
    }

    #[test]
    fn samples_every_rate_th_request_until_count() {
        let m = TraceManager::new(TraceConfig { rate: 3, count: 2, ..on("/tmp/never-written.json") });
        let picked: Vec<bool> = (0..12).map(|_| m.sample("m", None).map(drop).is_some()).collect();
        let expected = [false, false, true, false, false, true, false, false, false, false, false, false];
        assert_eq!(picked, expected);
        assert_eq!(m.view(None).count, 0);
        assert!(TraceManager::new(TraceConfig::default()).sample("m", None).is_none());
    }
}
