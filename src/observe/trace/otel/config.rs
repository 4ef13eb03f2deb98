//! The OpenTelemetry mode's own settings: Triton's `--trace-config opentelemetry,<key>=<value>`
//! keys (`url`, `resource`, and the batch span processor's `bsp_max_queue_size`,
//! `bsp_schedule_delay`, `bsp_max_export_batch_size`). They are startup flags: the trace
//! extension neither reports nor changes them, as in Triton.

use std::time::Duration;

/// Triton's default collector endpoint (OTLP over HTTP).
pub const DEFAULT_URL: &str = "http://localhost:4318/v1/traces";
/// Triton's default `service.name` resource attribute.
pub const DEFAULT_SERVICE_NAME: &str = "triton-inference-server";

/// Where and how spans are exported. A batch setting left `None` takes the SDK's value: its
/// `OTEL_BSP_*` environment variable, else the specification's default (2048, 5000 ms, 512),
/// which are Triton's defaults too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtelConfig {
    pub url: String,
    /// `resource=key=value` pairs, in flag order (a later key wins).
    pub resource: Vec<(String, String)>,
    pub bsp_max_queue_size: Option<usize>,
    pub bsp_schedule_delay: Option<Duration>,
    pub bsp_max_export_batch_size: Option<usize>,
}

impl Default for OtelConfig {
    fn default() -> Self {
        OtelConfig {
            url: DEFAULT_URL.into(),
            resource: Vec::new(),
            bsp_max_queue_size: None,
            bsp_schedule_delay: None,
            bsp_max_export_batch_size: None,
        }
    }
}

fn positive(key: &str, value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("--trace-config opentelemetry,{key}: expected a positive whole number, got '{value}'")),
    }
}

impl OtelConfig {
    /// Applies one `opentelemetry,<key>=<value>` flag.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "url" => {
                let url = value.trim();
                if url.starts_with("https://") {
                    // The exporter is built without a TLS stack; a collector's TLS is typically
                    // terminated by a sidecar or agent on the node.
                    return Err(format!(
                        "--trace-config opentelemetry,url: https is not supported (OTLP over plain HTTP only), \
                         got '{value}'"
                    ));
                }
                if !url.starts_with("http://") || url.len() <= "http://".len() {
                    return Err(format!(
                        "--trace-config opentelemetry,url: expected an http:// URL of the OTLP/HTTP receiver \
                         (e.g. {DEFAULT_URL}), got '{value}'"
                    ));
                }
                self.url = url.to_string();
            }
            "resource" => {
                let (k, v) = value.split_once('=').filter(|(k, _)| !k.trim().is_empty()).ok_or_else(|| {
                    format!("--trace-config opentelemetry,resource: expected <key>=<value>, got '{value}'")
                })?;
                self.resource.push((k.trim().to_string(), v.trim().to_string()));
            }
            "bsp_max_queue_size" => self.bsp_max_queue_size = Some(positive(key, value)?),
            "bsp_max_export_batch_size" => self.bsp_max_export_batch_size = Some(positive(key, value)?),
            "bsp_schedule_delay" => {
                self.bsp_schedule_delay = Some(Duration::from_millis(positive(key, value)? as u64));
            }
            other => {
                return Err(format!(
                    "--trace-config opentelemetry: unknown setting '{other}' (expected url, resource, \
                     bsp_max_queue_size, bsp_schedule_delay or bsp_max_export_batch_size)"
                ))
            }
        }
        Ok(())
    }

    /// Checks what only holds of the settings together.
    pub fn check(&self) -> Result<(), String> {
        if let (Some(batch), Some(queue)) = (self.bsp_max_export_batch_size, self.bsp_max_queue_size) {
            if batch > queue {
                return Err(format!(
                    "--trace-config opentelemetry: bsp_max_export_batch_size ({batch}) must not be more than \
                     bsp_max_queue_size ({queue})"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_as_tritons_and_bad_values_are_named() {
        let mut c = OtelConfig::default();
        c.set("url", "http://collector:4318/v1/traces").unwrap();
        c.set("resource", "service.name=tritium-test").unwrap();
        c.set("resource", "deployment.environment=ci=1").unwrap();
        c.set("bsp_max_queue_size", "64").unwrap();
        c.set("bsp_schedule_delay", "250").unwrap();
        c.set("bsp_max_export_batch_size", "16").unwrap();
        assert_eq!(c.url, "http://collector:4318/v1/traces");
        assert_eq!(
            c.resource,
            [("service.name".into(), "tritium-test".into()), ("deployment.environment".into(), "ci=1".into())]
        );
        assert_eq!(
            (c.bsp_max_queue_size, c.bsp_schedule_delay, c.bsp_max_export_batch_size),
            (Some(64), Some(Duration::from_millis(250)), Some(16))
        );
        c.check().unwrap();
        for (key, value, text) in [
            ("url", "collector:4318", "expected an http:// URL"),
            ("url", "https://collector:4318/v1/traces", "https is not supported"),
            ("resource", "service.name", "expected <key>=<value>"),
            ("resource", "=x", "expected <key>=<value>"),
            ("bsp_max_queue_size", "0", "positive whole number"),
            ("bsp_schedule_delay", "soon", "positive whole number"),
            ("exporter", "grpc", "unknown setting 'exporter'"),
        ] {
            let e = OtelConfig::default().set(key, value).unwrap_err();
            assert!(e.contains(text), "{key}={value}: {e}");
        }
        c.bsp_max_export_batch_size = Some(65);
        assert!(c.check().unwrap_err().contains("must not be more than"));
    }
}
