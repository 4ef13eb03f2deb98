//! Sampling: one live trace setting with its counters, which picks every `rate`-th request
//! until `count` traces are taken and hands finished records to the file writer (grouped by
//! `log_frequency`).

use std::sync::Arc;

use parking_lot::Mutex;

use super::file::WriteMsg;
use super::settings::{TraceConfig, TraceView};
use super::Sinks;

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
pub(super) struct Setting {
    pub(super) config: TraceConfig,
    counters: Mutex<Counters>,
    pub(super) sinks: Arc<Sinks>,
}

impl Setting {
    pub(super) fn new(config: TraceConfig, sinks: Arc<Sinks>) -> Arc<Self> {
        let counters = Counters { remaining: config.count, ..Counters::default() };
        Arc::new(Setting { config, counters: Mutex::new(counters), sinks })
    }

    pub(super) fn can_trace(&self) -> bool {
        !self.config.level.is_off() && self.config.invalid_reason().is_none()
    }

    pub(super) fn sample(&self) -> bool {
        if !self.can_trace() {
            return false;
        }
        let mut c = self.counters.lock();
        // Rate 0 (OpenTelemetry mode): only requests with a client's trace context are traced.
        if c.remaining == 0 || self.config.rate == 0 {
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

    pub(super) fn write(&self, record: String) {
        let every = self.config.log_frequency as usize;
        if every == 0 {
            self.sinks.file.send(WriteMsg::Append { path: self.config.file.clone(), json: record });
            return;
        }
        let mut c = self.counters.lock();
        c.pending.push(record);
        c.collected += 1;
        // As Triton: a full group, or the last of `count` traces, goes out at once.
        if c.pending.len() >= every || (c.remaining == 0 && c.collected == c.created) {
            let group = std::mem::take(&mut c.pending);
            drop(c);
            self.sinks.file.send(WriteMsg::Indexed { path: self.config.file.clone(), json: group.join(",") });
        }
    }

    pub(super) fn flush(&self) {
        let group = std::mem::take(&mut self.counters.lock().pending);
        if !group.is_empty() {
            self.sinks.file.send(WriteMsg::Indexed { path: self.config.file.clone(), json: group.join(",") });
        }
    }

    pub(super) fn view(&self) -> TraceView {
        let c = &self.config;
        TraceView {
            level: c.level,
            rate: c.rate,
            count: self.counters.lock().remaining,
            log_frequency: c.log_frequency,
            file: c.file.clone(),
            mode: c.mode,
        }
    }
}

impl Drop for Setting {
    fn drop(&mut self) {
        self.flush();
    }
}
