//! Custom metrics (`TRITONSERVER_MetricFamily`, `TRITONSERVER_Metric`, `TRITONSERVER_MetricArgs`):
//! the counters, gauges and histograms a backend (a `model.py`'s `pb_utils.MetricFamily`)
//! creates, kept in one registry and rendered in Prometheus' text format after Tritium's own
//! families on `/metrics`, as Triton shows them.

use std::ffi::c_char;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use super::abi::*;
use super::boundary::{borrow, export, text, write};
use super::error::Error;
use super::message::{ParamValue, Parameter};

/// `TRITONSERVER_MetricKind`.
pub const METRIC_KIND_COUNTER: u32 = 0;
pub const METRIC_KIND_GAUGE: u32 = 1;
pub const METRIC_KIND_HISTOGRAM: u32 = 2;

#[derive(Debug, Default)]
struct Histogram {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// One metric: a family member with its labels.
#[derive(Debug)]
pub struct Metric {
    kind: u32,
    labels: Vec<(String, String)>,
    value: Mutex<f64>,
    histogram: Option<Mutex<Histogram>>,
}

/// A family: name, help text, kind and its metrics.
#[derive(Debug)]
pub struct MetricFamily {
    kind: u32,
    name: String,
    description: String,
    metrics: Mutex<Vec<Arc<Metric>>>,
}

/// `TRITONSERVER_MetricArgs`: histogram buckets.
#[derive(Debug, Default)]
pub struct MetricArgs {
    buckets: Option<Vec<f64>>,
}

static FAMILIES: Mutex<Vec<Arc<MetricFamily>>> = Mutex::new(Vec::new());

fn poisoned() -> Error {
    Error::new(ERROR_INTERNAL, "metrics registry poisoned")
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

export! {
    fn TRITONSERVER_MetricFamilyNew(family: *mut *const MetricFamily, kind: u32, name: *const c_char, description: *const c_char) {
        // SAFETY: C strings (the header's contract).
        let (name, description) = unsafe { (text(name, "name")?, text(description, "description")?) };
        if kind > METRIC_KIND_HISTOGRAM {
            return Err(Error::new(ERROR_INVALID_ARG, format!("unknown metric kind {kind}")));
        }
        if !valid_name(name) {
            return Err(Error::new(ERROR_INVALID_ARG, format!("'{name}' is not a valid metric name")));
        }
        let mut families = FAMILIES.lock().map_err(|_| poisoned())?;
        if let Some(f) = families.iter().find(|f| f.name == name) {
            if f.kind != kind || f.description != description {
                return Err(Error::new(ERROR_ALREADY_EXISTS, format!("metric family '{name}' exists with another kind or description")));
            }
        }
        let new = Arc::new(MetricFamily { kind, name: name.to_string(), description: description.to_string(), metrics: Mutex::new(Vec::new()) });
        families.push(new.clone());
        // SAFETY: the caller's out-parameter; the Arc comes back through `MetricFamilyDelete`.
        unsafe { write(family, Arc::into_raw(new), "family") }
    }
}

export! {
    fn TRITONSERVER_MetricFamilyDelete(family: *const MetricFamily) {
        if family.is_null() {
            return Err(Error::new(ERROR_INVALID_ARG, "family is null"));
        }
        // SAFETY: the caller gives up a family made by `MetricFamilyNew`, once.
        let f = unsafe { Arc::from_raw(family) };
        FAMILIES.lock().map_err(|_| poisoned())?.retain(|g| !Arc::ptr_eq(g, &f));
        Ok(())
    }
}

export! {
    fn TRITONSERVER_GetMetricFamilyKind(family: *const MetricFamily, kind: *mut u32) {
        // SAFETY: a live family and the caller's out-parameter.
        unsafe { write(kind, borrow(family, "family")?.kind, "kind") }
    }
}

export! {
    /// The kind of the metric's family.
    fn TRITONSERVER_GetMetricKind(metric: *mut Metric, kind: *mut u32) {
        // SAFETY: a live metric and the caller's out-parameter.
        unsafe { write(kind, borrow(metric, "metric")?.kind, "kind") }
    }
}

export! {
    fn TRITONSERVER_MetricArgsNew(args: *mut *mut MetricArgs) {
        // SAFETY: the caller's out-parameter.
        unsafe { write(args, Box::into_raw(Box::default()), "args") }
    }
}

export! {
    fn TRITONSERVER_MetricArgsSetHistogram(args: *mut MetricArgs, buckets: *const f64, buckets_count: u64) {
        // SAFETY: live args, used by one thread (the header's contract).
        let a = unsafe { super::boundary::borrow_mut(args, "args")? };
        let bounds = if buckets_count == 0 {
            Vec::new()
        } else if buckets.is_null() {
            return Err(Error::new(ERROR_INVALID_ARG, "buckets is null"));
        } else {
            // SAFETY: the header's contract: `buckets` holds `buckets_count` values.
            unsafe { std::slice::from_raw_parts(buckets, buckets_count as usize) }.to_vec()
        };
        if bounds.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::new(ERROR_INVALID_ARG, "histogram buckets must increase"));
        }
        a.buckets = Some(bounds);
        Ok(())
    }
}

export! {
    fn TRITONSERVER_MetricArgsDelete(args: *mut MetricArgs) {
        if !args.is_null() {
            // SAFETY: the caller gives up args made by `MetricArgsNew`, once.
            drop(unsafe { Box::from_raw(args) });
        }
        Ok(())
    }
}

export! {
    /// A metric of a family with labels (string parameters); a histogram needs buckets in `args`.
    fn TRITONSERVER_MetricNewWithArgs(metric: *mut *const Metric, family: *const MetricFamily, labels: *const *const Parameter, label_count: u64, args: *const MetricArgs) {
        // SAFETY: a live family (the header's contract).
        let f = unsafe { borrow(family, "family")? };
        let mut pairs = Vec::new();
        for i in 0..label_count as usize {
            // SAFETY: the header's contract: `labels` holds `label_count` parameter pointers.
            let p = unsafe { borrow(*labels.add(i), "label")? };
            let ParamValue::Str(v) = &p.value else {
                return Err(Error::new(ERROR_INVALID_ARG, format!("label '{}' is not a string", p.name)));
            };
            pairs.push((p.name.clone(), v.to_string_lossy().into_owned()));
        }
        // SAFETY: null or live args.
        let buckets = unsafe { args.as_ref() }.and_then(|a| a.buckets.clone());
        let histogram = match (f.kind, buckets) {
            (METRIC_KIND_HISTOGRAM, Some(bounds)) => Some(Mutex::new(Histogram { counts: vec![0; bounds.len()], bounds, ..Default::default() })),
            (METRIC_KIND_HISTOGRAM, None) => return Err(Error::new(ERROR_INVALID_ARG, "a histogram metric needs buckets (TRITONSERVER_MetricArgsSetHistogram)")),
            (_, Some(_)) => return Err(Error::new(ERROR_INVALID_ARG, "only a histogram metric takes buckets")),
            (_, None) => None,
        };
        let new = Arc::new(Metric { kind: f.kind, labels: pairs, value: Mutex::new(0.0), histogram });
        f.metrics.lock().map_err(|_| poisoned())?.push(new.clone());
        // SAFETY: the caller's out-parameter; the Arc comes back through `MetricDelete`.
        unsafe { write(metric, Arc::into_raw(new), "metric") }
    }
}

export! {
    /// A counter or gauge of a family with labels (string parameters).
    fn TRITONSERVER_MetricNew(metric: *mut *const Metric, family: *const MetricFamily, labels: *const *const Parameter, label_count: u64) {
        // SAFETY: forwarded under the same contract, without args.
        let e = unsafe { TRITONSERVER_MetricNewWithArgs(metric, family, labels, label_count, std::ptr::null()) };
        // SAFETY: null or an error object just made, given up here.
        match unsafe { Error::from_raw(e) } {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

export! {
    fn TRITONSERVER_MetricDelete(metric: *const Metric) {
        if metric.is_null() {
            return Err(Error::new(ERROR_INVALID_ARG, "metric is null"));
        }
        // SAFETY: the caller gives up a metric made by `MetricNewWithArgs`, once.
        let m = unsafe { Arc::from_raw(metric) };
        for f in FAMILIES.lock().map_err(|_| poisoned())?.iter() {
            f.metrics.lock().map_err(|_| poisoned())?.retain(|n| !Arc::ptr_eq(n, &m));
        }
        Ok(())
    }
}

/// Borrows a metric handle.
///
/// # Safety
/// `metric` must be null or a live metric.
unsafe fn metric<'a>(metric: *const Metric) -> Result<&'a Metric, Error> {
    // SAFETY: forwarded from the caller.
    unsafe { borrow(metric, "metric") }
}

export! {
    fn TRITONSERVER_MetricValue(m: *const Metric, value: *mut f64) {
        // SAFETY: a live metric.
        let m = unsafe { metric(m)? };
        if m.kind == METRIC_KIND_HISTOGRAM {
            return Err(Error::new(ERROR_UNSUPPORTED, "a histogram has no single value"));
        }
        let v = *m.value.lock().map_err(|_| poisoned())?;
        // SAFETY: the caller's out-parameter.
        unsafe { write(value, v, "value") }
    }
}

export! {
    fn TRITONSERVER_MetricIncrement(m: *const Metric, value: f64) {
        // SAFETY: a live metric.
        let m = unsafe { metric(m)? };
        match m.kind {
            METRIC_KIND_COUNTER if value < 0.0 => Err(Error::new(ERROR_INVALID_ARG, "a counter cannot go down")),
            METRIC_KIND_HISTOGRAM => Err(Error::new(ERROR_UNSUPPORTED, "a histogram is observed, not incremented")),
            _ => {
                *m.value.lock().map_err(|_| poisoned())? += value;
                Ok(())
            }
        }
    }
}

export! {
    fn TRITONSERVER_MetricSet(m: *const Metric, value: f64) {
        // SAFETY: a live metric.
        let m = unsafe { metric(m)? };
        if m.kind != METRIC_KIND_GAUGE {
            return Err(Error::new(ERROR_UNSUPPORTED, "only a gauge can be set"));
        }
        *m.value.lock().map_err(|_| poisoned())? = value;
        Ok(())
    }
}

export! {
    fn TRITONSERVER_MetricObserve(m: *const Metric, value: f64) {
        // SAFETY: a live metric.
        let m = unsafe { metric(m)? };
        let Some(h) = &m.histogram else {
            return Err(Error::new(ERROR_UNSUPPORTED, "only a histogram can observe"));
        };
        let mut h = h.lock().map_err(|_| poisoned())?;
        if let Some(i) = h.bounds.iter().position(|b| value <= *b) {
            h.counts[i] += 1;
        }
        h.sum += value;
        h.count += 1;
        Ok(())
    }
}

fn label_text(labels: &[(String, String)], extra: Option<(&str, String)>) -> String {
    let escape = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    let mut parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{v}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// Every custom family in Prometheus' text format (empty when there is none).
pub fn render() -> String {
    let mut out = String::new();
    let Ok(families) = FAMILIES.lock() else { return out };
    for f in families.iter() {
        let Ok(metrics) = f.metrics.lock() else { continue };
        let kind = match f.kind {
            METRIC_KIND_COUNTER => "counter",
            METRIC_KIND_GAUGE => "gauge",
            _ => "histogram",
        };
        let _ = writeln!(out, "# HELP {} {}", f.name, f.description.replace('\\', "\\\\").replace('\n', "\\n"));
        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
        for m in metrics.iter() {
            match &m.histogram {
                None => {
                    let v = m.value.lock().map(|v| *v).unwrap_or(f64::NAN);
                    let _ = writeln!(out, "{}{} {v}", f.name, label_text(&m.labels, None));
                }
                Some(h) => {
                    let Ok(h) = h.lock() else { continue };
                    let mut cumulative = 0;
                    for (bound, count) in h.bounds.iter().zip(&h.counts) {
                        cumulative += count;
                        let _ = writeln!(
                            out,
                            "{}_bucket{} {cumulative}",
                            f.name,
                            label_text(&m.labels, Some(("le", bound.to_string())))
                        );
                    }
                    let _ = writeln!(
                        out,
                        "{}_bucket{} {}",
                        f.name,
                        label_text(&m.labels, Some(("le", "+Inf".into()))),
                        h.count
                    );
                    let _ = writeln!(out, "{}_sum{} {}", f.name, label_text(&m.labels, None), h.sum);
                    let _ = writeln!(out, "{}_count{} {}", f.name, label_text(&m.labels, None), h.count);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_and_a_histogram_render_as_prometheus_text() {
        // SAFETY: the test owns every object it creates and deletes each once.
        unsafe {
            let mut counter_family = std::ptr::null();
            assert!(TRITONSERVER_MetricFamilyNew(
                &mut counter_family,
                METRIC_KIND_COUNTER,
                c"test_ffi_total".as_ptr(),
                c"Things counted".as_ptr()
            )
            .is_null());
            let label = super::super::message::TRITONSERVER_ParameterNew(
                c"model".as_ptr(),
                PARAMETER_STRING,
                c"m".as_ptr().cast(),
            );
            let labels = [label as *const Parameter];
            let mut counter = std::ptr::null();
            assert!(TRITONSERVER_MetricNewWithArgs(&mut counter, counter_family, labels.as_ptr(), 1, std::ptr::null())
                .is_null());
            assert!(TRITONSERVER_MetricIncrement(counter, 2.0).is_null());
            let e = TRITONSERVER_MetricIncrement(counter, -1.0);
            assert!(!e.is_null());
            super::super::error::TRITONSERVER_ErrorDelete(e);

            let mut hist_family = std::ptr::null();
            assert!(TRITONSERVER_MetricFamilyNew(
                &mut hist_family,
                METRIC_KIND_HISTOGRAM,
                c"test_ffi_seconds".as_ptr(),
                c"Times".as_ptr()
            )
            .is_null());
            let mut args = std::ptr::null_mut();
            assert!(TRITONSERVER_MetricArgsNew(&mut args).is_null());
            let buckets = [0.1, 1.0];
            assert!(TRITONSERVER_MetricArgsSetHistogram(args, buckets.as_ptr(), 2).is_null());
            let mut hist = std::ptr::null();
            assert!(TRITONSERVER_MetricNewWithArgs(&mut hist, hist_family, labels.as_ptr(), 1, args).is_null());
            assert!(TRITONSERVER_MetricObserve(hist, 0.5).is_null());

            let text = render();
            assert!(text.contains("# TYPE test_ffi_total counter\ntest_ffi_total{model=\"m\"} 2\n"), "{text}");
            assert!(text.contains("test_ffi_seconds_bucket{model=\"m\",le=\"0.1\"} 0\n"), "{text}");
            assert!(text.contains("test_ffi_seconds_bucket{model=\"m\",le=\"1\"} 1\n"), "{text}");
            assert!(text.contains("test_ffi_seconds_count{model=\"m\"} 1\n"), "{text}");

            for m in [counter, hist] {
                assert!(TRITONSERVER_MetricDelete(m).is_null());
            }
            for f in [counter_family, hist_family] {
                assert!(TRITONSERVER_MetricFamilyDelete(f).is_null());
            }
            assert!(TRITONSERVER_MetricArgsDelete(args).is_null());
            super::super::message::TRITONSERVER_ParameterDelete(label);
            assert!(!render().contains("test_ffi_total"));
        }
    }
}
