//! Triton's logging: `--log-info/--log-warning/--log-error/--log-verbose/--log-format/--log-file`,
//! a line prefix as `tritonserver` writes it, and the logging extension (`/v2/logging`, gRPC
//! `LogSettings`) changing the settings while the server runs. The settings are atomics that
//! one `tracing` filter reads; a change rebuilds tracing's interest cache, so a disabled level
//! costs what it always did (a static level check) whatever was enabled before.

use std::fmt::Write as _;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::{Context, Filter, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;
use tritium_actors::{Error, Result};

use super::SettingValue;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `I1203 12:00:00.123456 1234 file.rs:12] message`
    #[value(name = "default")]
    Default,
    /// `2026-12-03T12:00:00Z I 1234 file.rs:12] message`
    #[value(name = "ISO8601")]
    Iso8601,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Default => "default",
            LogFormat::Iso8601 => "ISO8601",
        }
    }
}

/// The settings as the extension reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogView {
    pub file: String,
    pub info: bool,
    pub warning: bool,
    pub error: bool,
    pub verbose: u32,
    pub format: LogFormat,
}

/// The live settings every log line is checked against.
pub struct LogSettings {
    info: AtomicBool,
    warning: AtomicBool,
    error: AtomicBool,
    verbose: AtomicU32,
    /// 0 = default, 1 = ISO8601.
    format: AtomicU8,
    file: String,
    /// Serialises updates so that a request's changes apply together.
    update: Mutex<()>,
}

const KEYS: &str = "log_file, log_info, log_warning, log_error, log_verbose_level, log_format";

impl LogSettings {
    pub fn new(view: &LogView) -> Self {
        LogSettings {
            info: AtomicBool::new(view.info),
            warning: AtomicBool::new(view.warning),
            error: AtomicBool::new(view.error),
            verbose: AtomicU32::new(view.verbose),
            format: AtomicU8::new(view.format as u8),
            file: view.file.clone(),
            update: Mutex::new(()),
        }
    }

    pub fn view(&self) -> LogView {
        LogView {
            file: self.file.clone(),
            info: self.info.load(Relaxed),
            warning: self.warning.load(Relaxed),
            error: self.error.load(Relaxed),
            verbose: self.verbose.load(Relaxed),
            format: self.format(),
        }
    }

    fn format(&self) -> LogFormat {
        if self.format.load(Relaxed) == LogFormat::Iso8601 as u8 {
            LogFormat::Iso8601
        } else {
            LogFormat::Default
        }
    }

    /// Verbose level 1 shows Tritium's own debug lines (one per request, …); 2 adds its trace
    /// lines and the libraries' debug lines; 3 and up, everything.
    fn allows(&self, meta: &Metadata<'_>) -> bool {
        let verbose = self.verbose.load(Relaxed);
        let ours = meta.target().starts_with("tritium");
        match *meta.level() {
            Level::ERROR => self.error.load(Relaxed),
            Level::WARN => self.warning.load(Relaxed),
            Level::INFO => self.info.load(Relaxed),
            Level::DEBUG => verbose >= 2 || (verbose >= 1 && ours),
            _ => verbose >= 3 || (verbose >= 2 && ours),
        }
    }

    fn max_level(&self) -> LevelFilter {
        match self.verbose.load(Relaxed) {
            0 if self.info.load(Relaxed) => LevelFilter::INFO,
            0 if self.warning.load(Relaxed) => LevelFilter::WARN,
            0 if self.error.load(Relaxed) => LevelFilter::ERROR,
            0 => LevelFilter::OFF,
            1 => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        }
    }

    /// Applies every change or none: the first bad one is the error.
    pub fn update(&self, changes: &[(String, SettingValue)]) -> Result<LogView> {
        if changes.is_empty() {
            return Ok(self.view());
        }
        let _serial = self.update.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = self.view();
        for (key, value) in changes {
            if matches!(value, SettingValue::Null) {
                continue;
            }
            let bool_of = |v: &SettingValue| match v {
                SettingValue::Bool(b) => Ok(*b),
                other => Err(Error::invalid(format!("expect boolean for '{key}', got {}", other.describe()))),
            };
            match key.as_str() {
                "log_info" => next.info = bool_of(value)?,
                "log_warning" => next.warning = bool_of(value)?,
                "log_error" => next.error = bool_of(value)?,
                "log_verbose_level" => {
                    next.verbose = match value {
                        SettingValue::UInt(n) if *n <= u32::MAX as u64 => *n as u32,
                        other => {
                            return Err(Error::invalid(format!(
                                "expect a non-negative integer (uint32) for 'log_verbose_level', got {}",
                                other.describe()
                            )))
                        }
                    }
                }
                "log_format" => {
                    next.format = match value {
                        SettingValue::Str(s) if s == "default" => LogFormat::Default,
                        SettingValue::Str(s) if s == "ISO8601" => LogFormat::Iso8601,
                        SettingValue::Str(s) => {
                            return Err(Error::invalid(format!(
                                "invalid argument for --log_format, got: {s} (expected 'default' or 'ISO8601')"
                            )))
                        }
                        other => {
                            return Err(Error::invalid(format!(
                                "expect string for 'log_format', got {}",
                                other.describe()
                            )))
                        }
                    }
                }
                "log_file" => match value {
                    SettingValue::Str(s) if *s == self.file => {}
                    _ => {
                        return Err(Error::unsupported("log file location can not be updated through network protocol"))
                    }
                },
                other => return Err(Error::invalid(format!("unknown log setting '{other}'; the settings are {KEYS}"))),
            }
        }
        self.info.store(next.info, Relaxed);
        self.warning.store(next.warning, Relaxed);
        self.error.store(next.error, Relaxed);
        self.verbose.store(next.verbose, Relaxed);
        self.format.store(next.format as u8, Relaxed);
        // Callsites cached as "never" must be asked again, and the global max level moves.
        tracing::callsite::rebuild_interest_cache();
        Ok(next)
    }
}

static SETTINGS: OnceLock<LogSettings> = OnceLock::new();

/// The process's log settings (Triton's defaults until `init` runs).
pub fn settings() -> &'static LogSettings {
    SETTINGS.get_or_init(|| {
        LogSettings::new(&LogView {
            file: String::new(),
            info: true,
            warning: true,
            error: true,
            verbose: 0,
            format: LogFormat::Default,
        })
    })
}

/// The filter of the one log layer: reads the live settings.
struct SettingsFilter(&'static LogSettings);

impl<S> Filter<S> for SettingsFilter {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        self.0.allows(meta)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.0.max_level())
    }
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// The prefix of a line, as `tritonserver` writes it (UTC), with `file:line` of the callsite.
fn prefix(format: LogFormat, level: Level, now: SystemTime, pid: u32, place: &str) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let tod = secs.rem_euclid(86_400);
    let (h, m, s) = (tod / 3600, tod / 60 % 60, tod % 60);
    let letter = match level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        // Triton writes its verbose lines as info lines too.
        _ => 'I',
    };
    let mut out = String::with_capacity(64);
    let _ = match format {
        LogFormat::Default => {
            write!(out, "{letter}{month:02}{day:02} {h:02}:{m:02}:{s:02}.{:06} {pid} {place}] ", since.subsec_micros())
        }
        LogFormat::Iso8601 => {
            write!(out, "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z {letter} {pid} {place}] ")
        }
    };
    out
}

/// Formats each event as Triton's prefix, the spans it is in (`request{id=… model=…}: `), then
/// the message and fields.
struct TritonFormat(&'static LogSettings);

impl<S, N> FormatEvent<S, N> for TritonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let meta = event.metadata();
        // Tritium's own lines name the file under `src/`; a library's, its module.
        let place = match (meta.file(), meta.line()) {
            (Some(file), Some(line)) if !file.starts_with('/') => {
                format!("{}:{line}", file.strip_prefix("src/").unwrap_or(file))
            }
            _ => meta.target().to_string(),
        };
        writer.write_str(&prefix(self.0.format(), *meta.level(), SystemTime::now(), std::process::id(), &place))?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                writer.write_str(span.name())?;
                let ext = span.extensions();
                if let Some(fields) = ext.get::<FormattedFields<N>>() {
                    if !fields.is_empty() {
                        write!(writer, "{{{fields}}}")?;
                    }
                }
                writer.write_str(": ")?;
            }
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Startup flags of the logger.
#[derive(Debug, Clone)]
pub struct LogOptions {
    pub info: bool,
    pub warning: bool,
    pub error: bool,
    pub verbose: u32,
    pub format: LogFormat,
    pub file: Option<PathBuf>,
}

/// Installs the process's logger; lines go to `--log-file` (appended) or stderr.
pub fn init(opts: &LogOptions) -> std::io::Result<()> {
    let file = opts.file.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    let view = LogView {
        file,
        info: opts.info,
        warning: opts.warning,
        error: opts.error,
        verbose: opts.verbose,
        format: opts.format,
    };
    let settings = SETTINGS.get_or_init(|| LogSettings::new(&view));
    let writer = match &opts.file {
        Some(path) => {
            let f = File::options().create(true).append(true).open(path)?;
            tracing_subscriber::fmt::writer::BoxMakeWriter::new(Mutex::new(f))
        }
        None => tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr),
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .event_format(TritonFormat(settings))
        .with_writer(writer)
        .with_filter(SettingsFilter(settings));
    tracing_subscriber::registry().with(layer).init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn defaults() -> LogSettings {
        LogSettings::new(&LogView {
            file: String::new(),
            info: true,
            warning: true,
            error: true,
            verbose: 0,
            format: LogFormat::Default,
        })
    }

    fn change(key: &str, v: SettingValue) -> Vec<(String, SettingValue)> {
        vec![(key.to_string(), v)]
    }

    #[test]
    fn updates_apply_and_read_back() {
        let s = defaults();
        let changes = vec![
            ("log_verbose_level".to_string(), SettingValue::UInt(2)),
            ("log_info".to_string(), SettingValue::Bool(false)),
            ("log_format".to_string(), SettingValue::Str("ISO8601".into())),
            ("log_error".to_string(), SettingValue::Null),
        ];
        let v = s.update(&changes).unwrap();
        assert_eq!((v.verbose, v.info, v.error, v.format), (2, false, true, LogFormat::Iso8601));
        assert_eq!(s.view(), v);
    }

    #[test]
    fn rejects_bad_values_and_applies_none_of_the_request() {
        let s = defaults();
        let bad = [
            ("log_info", SettingValue::Str("false".into()), "expect boolean for 'log_info'"),
            ("log_verbose_level", SettingValue::Other("a negative number"), "non-negative"),
            ("log_verbose_level", SettingValue::Str("1".into()), "non-negative"),
            ("log_format", SettingValue::Str("json".into()), "invalid argument for --log_format, got: json"),
            ("log_levels", SettingValue::Bool(true), "unknown log setting 'log_levels'"),
        ];
        for (key, value, text) in bad {
            let changes = vec![("log_warning".to_string(), SettingValue::Bool(false)), (key.to_string(), value)];
            let e = s.update(&changes).unwrap_err();
            assert_eq!(e.kind, tritium_actors::ErrorKind::InvalidArgument, "{key}");
            assert!(e.message.contains(text), "{key}: {}", e.message);
            assert!(s.view().warning, "a rejected request changed nothing");
        }
        let e = s.update(&change("log_file", SettingValue::Str("/tmp/x.log".into()))).unwrap_err();
        assert_eq!(e.kind, tritium_actors::ErrorKind::Unsupported);
    }

    #[test]
    fn verbose_level_gates_our_debug_lines_then_everyones() {
        let s = defaults();
        assert_eq!(s.max_level(), LevelFilter::INFO);
        s.update(&change("log_verbose_level", SettingValue::UInt(1))).unwrap();
        assert_eq!(s.max_level(), LevelFilter::DEBUG);
        s.update(&change("log_info", SettingValue::Bool(false))).unwrap();
        s.update(&change("log_verbose_level", SettingValue::UInt(0))).unwrap();
        assert_eq!(s.max_level(), LevelFilter::WARN);
    }

    #[test]
    fn prefixes_look_like_tritonservers() {
        // 2026-12-03T12:00:00.123456Z
        let t = UNIX_EPOCH + Duration::from_secs(1_796_256_000 + 12 * 3600) + Duration::from_micros(123_456);
        assert_eq!(
            prefix(LogFormat::Default, Level::INFO, t, 42, "infer.rs:7"),
            "I1203 12:00:00.123456 42 infer.rs:7] "
        );
        assert_eq!(
            prefix(LogFormat::Iso8601, Level::WARN, t, 42, "infer.rs:7"),
            "2026-12-03T12:00:00Z W 42 infer.rs:7] "
        );
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }
}
