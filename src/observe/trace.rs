//! Triton's request tracing: the `--trace-config` flags, the trace extension's settings
//! (global and per model, `/v2[/models/{m}]/trace/setting`, gRPC `TraceSetting`), sampling
//! every `rate`-th request until `count` traces are taken, and the trace file.
//!
//! A sampled request carries an `ActiveTrace`: the frontend stamps its own points on it
//! (`HTTP_RECV_START`, …), the engine stamps queue and compute, and once the response is sent
//! the frontend finishes it; the record goes to a writer thread. With `log_frequency` 0 every
//! trace is appended to `trace_file`, which stays a closed JSON array after each write; with N
//! it is written, every N traces, to `<trace_file>.<index>`. The records are Triton's: one
//! object naming the model and request, then one `{"id", "timestamps": [{name, ns}]}` per point.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tritium_actors::{Error, InferRequest, Result, Trace};

use super::trace_file::{clock_anchor, ns_of, WriteMsg, Writer};

/// Which details a trace collects; neither is `OFF`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceLevel {
    pub timestamps: bool,
    pub tensors: bool,
}

impl TraceLevel {
    pub fn is_off(self) -> bool {
        !self.timestamps && !self.tensors
    }

    /// `["OFF"]`, or the levels that are on.
    pub fn names(self) -> Vec<String> {
        if self.is_off() {
            return vec!["OFF".into()];
        }
        let mut out = Vec::new();
        if self.timestamps {
            out.push("TIMESTAMPS".into());
        }
        if self.tensors {
            out.push("TENSORS".into());
        }
        out
    }

    fn parse<S: AsRef<str>>(names: &[S]) -> Result<TraceLevel> {
        let mut level = TraceLevel::default();
        for name in names {
            match name.as_ref().to_ascii_uppercase().as_str() {
                "OFF" if names.len() == 1 => {}
                "OFF" => return Err(Error::invalid("Expect only one trace level 'OFF' is specified")),
                "TIMESTAMPS" => level.timestamps = true,
                "TENSORS" => level.tensors = true,
                other => {
                    return Err(Error::invalid(format!(
                        "unknown trace level '{other}': expected OFF, TIMESTAMPS or TENSORS"
                    )))
                }
            }
        }
        Ok(level)
    }
}

/// One resolved set of trace settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceConfig {
    pub level: TraceLevel,
    /// Trace every `rate`-th request.
    pub rate: u32,
    /// Traces still to take; -1 = no limit.
    pub count: i32,
    /// Write every N traces to `<file>.<index>`; 0 = append each to `file`.
    pub log_frequency: u32,
    pub file: String,
}

impl Default for TraceConfig {
    /// Triton's defaults: off, every 1000th request, no limit, one file.
    fn default() -> Self {
        TraceConfig { level: TraceLevel::default(), rate: 1000, count: -1, log_frequency: 0, file: String::new() }
    }
}

/// Triton's deprecated trace flags (`--trace-file`, `--trace-level`, …).
#[derive(Debug, Clone, Default)]
pub struct LegacyTraceFlags {
    pub file: Option<String>,
    pub level: Vec<String>,
    pub rate: Option<u32>,
    pub count: Option<i32>,
    pub log_frequency: Option<u32>,
}

fn flag_number<T: std::str::FromStr>(key: &str, value: &str) -> std::result::Result<T, String> {
    value.trim().parse().map_err(|_| format!("--trace-config {key}: '{value}' is not a valid number"))
}

impl TraceConfig {
    /// The startup settings: the deprecated flags, then each `--trace-config [mode,]key=value`.
    pub fn from_flags(configs: &[String], legacy: &LegacyTraceFlags) -> std::result::Result<Self, String> {
        let mut c = TraceConfig::default();
        if let Some(f) = &legacy.file {
            c.file = f.clone();
        }
        if !legacy.level.is_empty() {
            c.level = TraceLevel::parse(&legacy.level).map_err(|e| format!("--trace-level: {}", e.message))?;
        }
        c.rate = legacy.rate.unwrap_or(c.rate);
        c.count = legacy.count.unwrap_or(c.count);
        c.log_frequency = legacy.log_frequency.unwrap_or(c.log_frequency);
        let mut levels: Vec<String> = Vec::new();
        for setting in configs {
            let (mode, pair) = match setting.split_once('=') {
                Some((k, _)) if k.contains(',') => {
                    let (mode, rest) = setting.split_once(',').expect("a comma before '='");
                    (Some(mode.trim()), rest)
                }
                _ => (None, setting.as_str()),
            };
            match mode {
                None | Some("triton") => {}
                Some("opentelemetry") => {
                    return Err("--trace-config: the opentelemetry trace mode is not supported".into())
                }
                Some(other) => return Err(format!("--trace-config: unknown trace mode '{other}' (expected triton)")),
            }
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("--trace-config '{setting}': expected [triton,]<setting>=<value>"))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "file" => c.file = value.to_string(),
                "log-frequency" | "log_frequency" => c.log_frequency = flag_number(key, value)?,
                "rate" => c.rate = flag_number(key, value)?,
                "count" => {
                    c.count = flag_number(key, value)?;
                    if c.count < -1 {
                        return Err(format!("--trace-config count: expected -1 or more, got {value}"));
                    }
                }
                "level" => {
                    if value.eq_ignore_ascii_case("OFF") {
                        levels.clear();
                    }
                    levels.push(value.to_string());
                }
                "mode" if value.eq_ignore_ascii_case("triton") => {}
                "mode" => return Err(format!("--trace-config mode: only 'triton' is supported, got '{value}'")),
                other => return Err(format!("--trace-config: unknown setting '{other}'")),
            }
        }
        if !levels.is_empty() {
            // `level=OFF` followed by `level=TIMESTAMPS` means TIMESTAMPS.
            let on: Vec<&String> = levels.iter().filter(|l| !l.eq_ignore_ascii_case("OFF")).collect();
            c.level = if on.is_empty() {
                TraceLevel::default()
            } else {
                TraceLevel::parse(&on).map_err(|e| format!("--trace-config level: {}", e.message))?
            };
        }
        Ok(c)
    }

    /// Why these settings cannot trace, when tracing is on (Triton's words).
    fn invalid_reason(&self) -> Option<&'static str> {
        if self.level.is_off() {
            None
        } else if self.rate == 0 {
            Some("sample rate must be non-zero")
        } else if self.file.is_empty() {
            Some("trace file name is not given")
        } else if self.count == 0 {
            Some("trace count must not be zero")
        } else {
            None
        }
    }
}

/// The fields a request set; the rest come from the fallback (the global settings for a model,
/// the startup flags for the global settings). A `null` clears a field back to the fallback.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Overrides {
    level: Option<TraceLevel>,
    rate: Option<u32>,
    count: Option<i32>,
    log_frequency: Option<u32>,
}

impl Overrides {
    fn resolve(&self, base: &TraceConfig) -> TraceConfig {
        TraceConfig {
            level: self.level.unwrap_or(base.level),
            rate: self.rate.unwrap_or(base.rate),
            count: self.count.unwrap_or(base.count),
            log_frequency: self.log_frequency.unwrap_or(base.log_frequency),
            file: base.file.clone(),
        }
    }

    fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }

    fn is_complete(&self) -> bool {
        self.level.is_some() && self.rate.is_some() && self.count.is_some() && self.log_frequency.is_some()
    }
}

/// One setting's value in a trace request: JSON `null` / an empty gRPC list clears it.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceValue {
    Clear,
    Values(Vec<String>),
    /// A JSON value of the wrong type, with the message to answer.
    Invalid(String),
}

impl TraceValue {
    pub fn from_json(key: &str, v: &serde_json::Value) -> Self {
        use serde_json::Value;
        match v {
            Value::Null => TraceValue::Clear,
            Value::String(s) => TraceValue::Values(vec![s.clone()]),
            Value::Array(items) => {
                match items.iter().map(|i| i.as_str().map(str::to_string)).collect::<Option<Vec<_>>>() {
                    Some(list) => TraceValue::Values(list),
                    None => TraceValue::Invalid(format!("expect an array of strings for '{key}'")),
                }
            }
            other => TraceValue::Invalid(format!(
                "expect a string for '{key}', got {} (trace settings are strings, e.g. \"1\")",
                super::SettingValue::from_json(other).describe()
            )),
        }
    }
}

fn single<'a>(key: &str, values: &'a [String]) -> Result<&'a str> {
    match values {
        [v] => Ok(v.as_str()),
        _ => Err(Error::invalid(format!("expect only 1 value for '{key}'"))),
    }
}

const KEYS: &str = "trace_level, trace_rate, trace_count, log_frequency";

/// Applies a request's changes to `over`; nothing is applied when one is bad.
fn apply_changes(over: &mut Overrides, changes: &[(String, TraceValue)]) -> Result<()> {
    let mut next = over.clone();
    for (key, value) in changes {
        let values = match value {
            TraceValue::Invalid(message) => return Err(Error::invalid(message.clone())),
            TraceValue::Clear => None,
            TraceValue::Values(v) => Some(v.as_slice()),
        };
        let unparsable = |v: &str| Error::invalid(format!("Unable to parse '{key}', got: {v}"));
        match key.as_str() {
            "trace_file" => {
                return Err(Error::unsupported("trace file location can not be updated through network protocol"))
            }
            "trace_mode" => match values {
                None => {}
                Some(v) if single(key, v)?.eq_ignore_ascii_case("triton") => {}
                Some(_) => return Err(Error::unsupported("only the 'triton' trace mode is supported")),
            },
            "trace_level" => next.level = values.map(TraceLevel::parse).transpose()?,
            "trace_rate" => {
                next.rate = values
                    .map(|v| single(key, v).and_then(|s| s.trim().parse::<u32>().map_err(|_| unparsable(s))))
                    .transpose()?
            }
            "log_frequency" => {
                next.log_frequency = values
                    .map(|v| single(key, v).and_then(|s| s.trim().parse::<u32>().map_err(|_| unparsable(s))))
                    .transpose()?
            }
            "trace_count" => {
                next.count = values
                    .map(|v| {
                        let s = single(key, v)?;
                        match s.trim().parse::<i32>() {
                            Ok(n) if n >= -1 => Ok(n),
                            Ok(_) => Err(Error::invalid(format!(
                                "Unable to parse 'trace_count'. Expecting value >= -1, got: {s}"
                            ))),
                            Err(_) => Err(unparsable(s)),
                        }
                    })
                    .transpose()?
            }
            other => return Err(Error::invalid(format!("unknown trace setting '{other}'; the settings are {KEYS}"))),
        }
    }
    *over = next;
    Ok(())
}

fn validate(config: &TraceConfig) -> Result<()> {
    match config.invalid_reason() {
        Some(reason) => Err(Error::invalid(format!("Attempting to set invalid trace setting :{reason}"))),
        None => Ok(()),
    }
}

/// The settings as the extension reports them (`trace_count` is the number still to take).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceView {
    pub level: TraceLevel,
    pub rate: u32,
    pub count: i32,
    pub log_frequency: u32,
    pub file: String,
}

impl TraceView {
    /// (name, values) pairs, as both protocols answer them.
    pub fn entries(&self) -> Vec<(&'static str, Vec<String>)> {
        vec![
            ("trace_file", vec![self.file.clone()]),
            ("trace_level", self.level.names()),
            ("trace_rate", vec![self.rate.to_string()]),
            ("trace_count", vec![self.count.to_string()]),
            ("log_frequency", vec![self.log_frequency.to_string()]),
            ("trace_mode", vec!["triton".into()]),
        ]
    }
}

#[derive(Debug, Default)]
struct Counters {
    seen: u64,
    remaining: i32,
    created: u64,
    collected: u64,
    /// Traces waiting for the next `<file>.<index>` (log_frequency > 0).
    pending: Vec<String>,
}

/// A live setting: its config and its sampling state. An update replaces the object, so its
/// counters start again (as Triton's do); traces sampled under the old one finish with it.
struct Setting {
    config: TraceConfig,
    counters: Mutex<Counters>,
    writer: Arc<Writer>,
}

impl Setting {
    fn new(config: TraceConfig, writer: Arc<Writer>) -> Arc<Self> {
        let counters = Counters { remaining: config.count, ..Counters::default() };
        Arc::new(Setting { config, counters: Mutex::new(counters), writer })
    }

    fn can_trace(&self) -> bool {
        !self.config.level.is_off() && self.config.invalid_reason().is_none()
    }

    fn sample(&self) -> bool {
        if !self.can_trace() {
            return false;
        }
        let mut c = self.counters.lock();
        if c.remaining == 0 {
            return false;
        }
        c.seen += 1;
        if !c.seen.is_multiple_of(u64::from(self.config.rate)) {
            return false;
        }
        if c.remaining > 0 {
            c.remaining -= 1;
        }
        c.created += 1;
        true
    }

    fn write(&self, record: String) {
        let every = self.config.log_frequency as usize;
        if every == 0 {
            self.writer.send(WriteMsg::Append { path: self.config.file.clone(), json: record });
            return;
        }
        let mut c = self.counters.lock();
        c.pending.push(record);
        c.collected += 1;
        // As Triton: a full group, or the last of `count` traces, goes out at once.
        if c.pending.len() >= every || (c.remaining == 0 && c.collected == c.created) {
            let group = std::mem::take(&mut c.pending);
            drop(c);
            self.writer.send(WriteMsg::Indexed { path: self.config.file.clone(), json: group.join(",") });
        }
    }

    fn flush(&self) {
        let group = std::mem::take(&mut self.counters.lock().pending);
        if !group.is_empty() {
            self.writer.send(WriteMsg::Indexed { path: self.config.file.clone(), json: group.join(",") });
        }
    }

    fn view(&self) -> TraceView {
        let c = &self.config;
        TraceView {
            level: c.level,
            rate: c.rate,
            count: self.counters.lock().remaining,
            log_frequency: c.log_frequency,
            file: c.file.clone(),
        }
    }
}

impl Drop for Setting {
    fn drop(&mut self) {
        self.flush();
    }
}

struct State {
    /// The startup flags: what a cleared global field returns to.
    defaults: TraceConfig,
    global_overrides: Overrides,
    global: Arc<Setting>,
    models: HashMap<String, (Overrides, Arc<Setting>)>,
}

/// The settings, the sampler and the writer.
pub struct TraceManager {
    state: Mutex<State>,
    /// False while no setting can trace: then sampling is one atomic load.
    enabled: AtomicBool,
    next_id: AtomicU64,
    writer: Arc<Writer>,
}

impl TraceManager {
    pub fn new(defaults: TraceConfig) -> Self {
        clock_anchor();
        let writer = Arc::new(Writer::default());
        let global = Setting::new(defaults.clone(), writer.clone());
        let enabled = AtomicBool::new(global.can_trace());
        let state = State { defaults, global_overrides: Overrides::default(), global, models: HashMap::new() };
        TraceManager { state: Mutex::new(state), enabled, next_id: AtomicU64::new(1), writer }
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
                apply_changes(&mut over, changes)?;
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
                st.global = Setting::new(config, self.writer.clone());
                for (name, mc) in rebuilt {
                    if let Some(entry) = st.models.get_mut(&name) {
                        entry.1 = Setting::new(mc, self.writer.clone());
                    }
                }
            }
            Some(name) => {
                let mut over = st.models.get(name).map(|(o, _)| o.clone()).unwrap_or_default();
                apply_changes(&mut over, changes)?;
                if over.is_empty() {
                    st.models.remove(name);
                } else {
                    let config = over.resolve(&st.global.config);
                    validate(&config)?;
                    let setting = Setting::new(config, self.writer.clone());
                    st.models.insert(name.to_string(), (over, setting));
                }
            }
        }
        let enabled = st.global.can_trace() || st.models.values().any(|(_, s)| s.can_trace());
        self.enabled.store(enabled, Relaxed);
        Ok(self.setting_of(&st, model).view())
    }

    /// A trace for this request of `model`, when the sampler picks it.
    pub fn sample(&self, model: &str) -> Option<ActiveTrace> {
        if !self.enabled.load(Relaxed) {
            return None;
        }
        let setting = {
            let st = self.state.lock();
            self.setting_of(&st, Some(model))
        };
        if !setting.sample() {
            return None;
        }
        let events = setting.config.level.timestamps.then(|| Arc::new(Trace::new()));
        Some(ActiveTrace { id: self.next_id.fetch_add(1, Relaxed), model: model.to_string(), setting, events })
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
        self.writer.sync(Duration::from_secs(5));
    }
}

/// One sampled request's trace, on its way through the server.
pub struct ActiveTrace {
    id: u64,
    model: String,
    setting: Arc<Setting>,
    /// The timestamps; `None` when the level does not include TIMESTAMPS.
    events: Option<Arc<Trace>>,
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

    /// The response has gone: the trace is complete and goes to the file.
    pub fn finish(self, version: i64, request_id: &str) {
        let record = self.record_json(version, request_id);
        self.setting.write(record);
    }
}

static MANAGER: OnceLock<TraceManager> = OnceLock::new();

/// Sets the startup settings; call once, before serving.
pub fn install(defaults: TraceConfig) {
    let _ = MANAGER.set(TraceManager::new(defaults));
}

/// The process's trace manager (tracing off when `install` was not called).
pub fn manager() -> &'static TraceManager {
    MANAGER.get_or_init(|| TraceManager::new(TraceConfig::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn set(key: &str, values: &[&str]) -> (String, TraceValue) {
        (key.to_string(), TraceValue::Values(s(values)))
    }

    fn on(file: &str) -> TraceConfig {
        TraceConfig {
            level: TraceLevel { timestamps: true, tensors: false },
            rate: 1,
            file: file.into(),
            ..TraceConfig::default()
        }
    }

    #[test]
    fn trace_config_flags_parse_as_tritons() {
        let flags = s(&[
            "triton,file=/tmp/t.json",
            "level=TIMESTAMPS",
            "rate=1",
            "count=-1",
            "log_frequency=0",
            "triton,log-frequency=5",
        ]);
        let c = TraceConfig::from_flags(&flags, &LegacyTraceFlags::default()).unwrap();
        assert_eq!(
            c,
            TraceConfig {
                level: TraceLevel { timestamps: true, tensors: false },
                rate: 1,
                count: -1,
                log_frequency: 5,
                file: "/tmp/t.json".into()
            }
        );
        let legacy = LegacyTraceFlags {
            file: Some("/x".into()),
            level: s(&["TIMESTAMPS", "TENSORS"]),
            rate: Some(7),
            ..Default::default()
        };
        let c = TraceConfig::from_flags(&[], &legacy).unwrap();
        assert!(c.level.timestamps && c.level.tensors && c.rate == 7 && c.file == "/x");
        for bad in ["rate=x", "level=LOUD", "opentelemetry,url=http://x", "count=-2", "colour=blue", "rate"] {
            assert!(TraceConfig::from_flags(&s(&[bad]), &LegacyTraceFlags::default()).is_err(), "{bad}");
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
        let picked: Vec<bool> = (0..12).map(|_| m.sample("m").map(drop).is_some()).collect();
        let expected = [false, false, true, false, false, true, false, false, false, false, false, false];
        assert_eq!(picked, expected);
        assert_eq!(m.view(None).count, 0);
        assert!(TraceManager::new(TraceConfig::default()).sample("m").is_none());
    }

    #[test]
    fn records_are_tritons_objects_in_time_order() {
        let m = TraceManager::new(on("/tmp/never-written.json"));
        let t = m.sample("add_sub").unwrap();
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
