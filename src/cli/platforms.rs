//! The flags of Triton's SageMaker and Vertex AI frontends, with Triton's defaults, including
//! the ones Vertex AI's environment sets (`AIP_MODE=PREDICTION` turns Vertex AI on and, unless
//! asked for, HTTP and gRPC off — see `Cli::parse_with_env`; `AIP_HTTP_PORT` is its port).

use clap::{ArgAction, Args};

use super::parse_bool;

/// `--sagemaker-safe-port-range`: `<low>-<high>`.
fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("'{s}' is not a port range: use <low>-<high>, e.g. 8000-9999");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let (a, b): (u16, u16) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

#[derive(Debug, Clone, Args)]
pub struct PlatformFlags {
    /// Serve the SageMaker routes (`GET /ping`, `POST /invocations`, the multi-model
    /// `/models` routes) on --sagemaker-port. Default false.
    #[arg(long, default_value = "false", value_parser = parse_bool, action = ArgAction::Set, help_heading = "Sagemaker")]
    pub allow_sagemaker: bool,
    /// Port of the SageMaker endpoint (it binds --http-address). Default 8080.
    #[arg(long, default_value_t = 8080, help_heading = "Sagemaker")]
    pub sagemaker_port: u16,
    /// `<low>-<high>`: with SageMaker on, the HTTP, gRPC and metrics ports must lie in it.
    #[arg(long, value_parser = parse_port_range, help_heading = "Sagemaker")]
    pub sagemaker_safe_port_range: Option<(u16, u16)>,
    /// Threads serving SageMaker requests. Default 8.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Sagemaker")]
    pub sagemaker_thread_count: u32,

    /// Serve the Vertex AI routes (health and predict, as $AIP_HEALTH_ROUTE and
    /// $AIP_PREDICT_ROUTE name them) on --vertex-ai-port. Default true when AIP_MODE=PREDICTION
    /// (which also turns HTTP and gRPC off unless --allow-http / --allow-grpc are given), else
    /// false.
    #[arg(long, value_parser = parse_bool, action = ArgAction::Set, help_heading = "Vertex")]
    pub allow_vertex_ai: Option<bool>,
    /// Port of the Vertex AI endpoint. Default $AIP_HTTP_PORT, else 8080.
    #[arg(long, help_heading = "Vertex")]
    pub vertex_ai_port: Option<u16>,
    /// Threads serving Vertex AI requests. Default 8.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Vertex")]
    pub vertex_ai_thread_count: u32,
    /// The model that Vertex AI predict requests go to, unless they name one with the
    /// `X-Vertex-Ai-Triton-Redirect` header. Needed unless the repository has one model.
    #[arg(long, help_heading = "Vertex")]
    pub vertex_ai_default_model: Option<String>,
}

/// True when Vertex AI's environment says the container serves predictions.
pub fn aip_prediction_mode() -> bool {
    std::env::var("AIP_MODE").is_ok_and(|m| m == "PREDICTION")
}

impl PlatformFlags {
    pub fn vertex_ai_enabled(&self) -> bool {
        self.allow_vertex_ai.unwrap_or_else(aip_prediction_mode)
    }

    /// --vertex-ai-port, else $AIP_HTTP_PORT, else 8080.
    pub fn vertex_ai_port(&self) -> Result<u16, String> {
        if let Some(p) = self.vertex_ai_port {
            return Ok(p);
        }
        match std::env::var("AIP_HTTP_PORT") {
            Ok(p) => p.trim().parse().map_err(|_| format!("AIP_HTTP_PORT='{p}' is not a port")),
            Err(_) => Ok(8080),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_ranges_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_port_range("8000-9000"), Ok((8000, 9000)));
        for bad in ["8000", "9000-8000", "a-b", "1-70000"] {
            assert!(parse_port_range(bad).is_err(), "{bad}");
        }
    }
}
