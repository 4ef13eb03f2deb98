//! Prometheus text for the engine's atomic histograms (`tritium_actors::histogram::Histogram`).
//! Their buckets are counted by the actors as they work, so they cannot be replayed into a
//! `metrics` recorder at scrape time; they are written here in the exposition format instead.

use std::fmt::Write as _;

use tritium_actors::histogram::HistogramSnapshot;

/// One series: its labels (in order) and its buckets.
pub type Series = (Vec<(&'static str, String)>, HistogramSnapshot);

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels(pairs: &[(&'static str, String)], le: Option<&str>) -> String {
    let mut parts: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Appends one histogram family; nothing when it has no series.
pub fn write(out: &mut String, name: &str, help: &str, series: &[Series]) {
    if series.is_empty() {
        return;
    }
    if !out.is_empty() && !out.ends_with("\n\n") {
        out.push('\n');
    }
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} histogram");
    for (l, h) in series {
        for (bound, n) in &h.buckets {
            let _ = writeln!(out, "{name}_bucket{} {n}", labels(l, Some(&number(*bound))));
        }
        let _ = writeln!(out, "{name}_bucket{} {}", labels(l, Some("+Inf")), h.count);
        let _ = writeln!(out, "{name}_sum{} {}", labels(l, None), number(h.sum));
        let _ = writeln!(out, "{name}_count{} {}", labels(l, None), h.count);
    }
}

#[cfg(test)]
mod tests {
    use tritium_actors::histogram::Histogram;

    use super::*;

    #[test]
    fn writes_the_exposition_format() {
        let h = Histogram::new(&[1.0, 2.5]);
        h.record(1.0);
        h.record(2.0);
        h.record(7.0);
        let mut out = String::new();
        write(&mut out, "x_h", "A test.", &[(vec![("model", "a\"b".into()), ("version", "1".into())], h.snapshot())]);
        let expected = "# HELP x_h A test.\n# TYPE x_h histogram\n\
            x_h_bucket{model=\"a\\\"b\",version=\"1\",le=\"1\"} 1\n\
            x_h_bucket{model=\"a\\\"b\",version=\"1\",le=\"2.5\"} 2\n\
            x_h_bucket{model=\"a\\\"b\",version=\"1\",le=\"+Inf\"} 3\n\
            x_h_sum{model=\"a\\\"b\",version=\"1\"} 10\n\
            x_h_count{model=\"a\\\"b\",version=\"1\"} 3\n";
        assert_eq!(out, expected);
        let mut empty = String::new();
        write(&mut empty, "x_h", "A test.", &[]);
        assert!(empty.is_empty());
    }
}
