//! The trace settings: Triton's `--trace-config` flags (and the deprecated `--trace-*` ones), the
//! values a trace request carries, how a model's settings fall back to the global ones, and the
//! view both protocols answer with.

use tritium_actors::{Error, Result};

use super::otel::OtelConfig;

/// Where traces go: Triton's JSON trace file, or spans exported over OTLP (a startup flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceMode {
    #[default]
    Triton,
    OpenTelemetry,
}

impl TraceMode {
    pub fn name(self) -> &'static str {
        match self {
            TraceMode::Triton => "triton",
            TraceMode::OpenTelemetry => "opentelemetry",
        }
    }

    fn parse(value: &str) -> Option<TraceMode> {
        match value.trim().to_ascii_lowercase().as_str() {
            "triton" => Some(TraceMode::Triton),
            "opentelemetry" => Some(TraceMode::OpenTelemetry),
            _ => None,
        }
    }
}

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
    pub mode: TraceMode,
    /// The exporter's settings (used in OpenTelemetry mode).
    pub otel: OtelConfig,
}

impl Default for TraceConfig {
    /// Triton's defaults: off, every 1000th request, no limit, one file, Triton's mode.
    fn default() -> Self {
        TraceConfig {
            level: TraceLevel::default(),
            rate: 1000,
            count: -1,
            log_frequency: 0,
            file: String::new(),
            mode: TraceMode::default(),
            otel: OtelConfig::default(),
        }
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
            let (key, value) = pair.split_once('=').ok_or_else(|| {
                format!("--trace-config '{setting}': expected [triton,|opentelemetry,]<setting>=<value>")
            })?;
            let (key, value) = (key.trim(), value.trim());
            match mode {
                None | Some("triton") => {}
                Some("opentelemetry") => {
                    c.otel.set(key, value)?;
                    continue;
                }
                Some(other) => {
                    return Err(format!(
                        "--trace-config: unknown trace mode '{other}' (expected triton or opentelemetry)"
                    ))
                }
            }
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
                "mode" => {
                    c.mode = TraceMode::parse(value).ok_or_else(|| {
                        format!("--trace-config mode: expected 'triton' or 'opentelemetry', got '{value}'")
                    })?
                }
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
        c.otel.check()?;
        Ok(c)
    }

    /// Why these settings cannot trace, when tracing is on (Triton's words).
    pub(super) fn invalid_reason(&self) -> Option<&'static str> {
        if self.level.is_off() {
            None
        } else if self.rate == 0 && self.mode == TraceMode::Triton {
            // OpenTelemetry mode takes rate 0: only requests that carry a client's trace context.
            Some("sample rate must be non-zero")
        } else if self.file.is_empty() && self.mode == TraceMode::Triton {
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
pub(super) struct Overrides {
    level: Option<TraceLevel>,
    rate: Option<u32>,
    count: Option<i32>,
    log_frequency: Option<u32>,
}

impl Overrides {
    pub(super) fn resolve(&self, base: &TraceConfig) -> TraceConfig {
        TraceConfig {
            level: self.level.unwrap_or(base.level),
            rate: self.rate.unwrap_or(base.rate),
            count: self.count.unwrap_or(base.count),
            log_frequency: self.log_frequency.unwrap_or(base.log_frequency),
            file: base.file.clone(),
            mode: base.mode,
            otel: base.otel.clone(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }

    pub(super) fn is_complete(&self) -> bool {
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
                crate::observe::SettingValue::from_json(other).describe()
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
pub(super) fn apply_changes(over: &mut Overrides, changes: &[(String, TraceValue)], mode: TraceMode) -> Result<()> {
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
                Some(v) if TraceMode::parse(single(key, v)?) == Some(mode) => {}
                Some(_) => {
                    return Err(Error::unsupported(format!(
                        "the trace mode is a startup flag (--trace-config mode=...); this server runs '{}'",
                        mode.name()
                    )))
                }
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

pub(super) fn validate(config: &TraceConfig) -> Result<()> {
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
    pub mode: TraceMode,
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
            ("trace_mode", vec![self.mode.name().into()]),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
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
                file: "/tmp/t.json".into(),
                mode: TraceMode::Triton,
                otel: OtelConfig::default(),
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
        for bad in ["rate=x", "level=LOUD", "count=-2", "colour=blue", "rate", "mode=zipkin", "jaeger,url=http://x"] {
            assert!(TraceConfig::from_flags(&s(&[bad]), &LegacyTraceFlags::default()).is_err(), "{bad}");
        }
    }

    #[test]
    fn opentelemetry_mode_takes_tritons_keys_and_needs_no_file() {
        let flags = s(&[
            "mode=opentelemetry",
            "opentelemetry,url=http://127.0.0.1:4318/v1/traces",
            "opentelemetry,resource=service.name=test_triton",
            "opentelemetry,resource=test.key=test.value",
            "opentelemetry,bsp_schedule_delay=100",
            "level=TIMESTAMPS",
            "rate=0",
        ]);
        let c = TraceConfig::from_flags(&flags, &LegacyTraceFlags::default()).unwrap();
        assert_eq!(c.mode, TraceMode::OpenTelemetry);
        assert_eq!(c.otel.url, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(c.otel.resource.len(), 2);
        assert_eq!(c.otel.bsp_schedule_delay, Some(std::time::Duration::from_millis(100)));
        // No trace file, and rate 0 (trace only requests with a client's context): both valid.
        assert_eq!(c.invalid_reason(), None);
        assert_eq!(
            TraceConfig { mode: TraceMode::Triton, ..c.clone() }.invalid_reason(),
            Some("sample rate must be non-zero")
        );
        for bad in [
            "opentelemetry,url=localhost:4318",
            "opentelemetry,rate=1",
            "opentelemetry,resource=novalue",
            "opentelemetry,bsp_max_queue_size=-1",
        ] {
            let e =
                TraceConfig::from_flags(&s(&["mode=opentelemetry", bad]), &LegacyTraceFlags::default()).unwrap_err();
            assert!(e.contains("opentelemetry"), "{bad}: {e}");
        }
        let e = TraceConfig::from_flags(
            &s(&["opentelemetry,bsp_max_queue_size=8", "opentelemetry,bsp_max_export_batch_size=9"]),
            &LegacyTraceFlags::default(),
        )
        .unwrap_err();
        assert!(e.contains("must not be more than"), "{e}");
        // The mode is reported by the extension and cannot be changed there.
        let mut over = Overrides::default();
        let same = [("trace_mode".to_string(), TraceValue::Values(s(&["OPENTELEMETRY"])))];
        apply_changes(&mut over, &same, TraceMode::OpenTelemetry).unwrap();
        let other = [("trace_mode".to_string(), TraceValue::Values(s(&["triton"])))];
        let e = apply_changes(&mut over, &other, TraceMode::OpenTelemetry).unwrap_err();
        assert_eq!(e.kind, tritium_actors::ErrorKind::Unsupported);
    }
}
