//! The model-repository flags Triton 2.51 added beside the ones Tritium had first: what a
//! failed load at start does (`--exit-on-error`), auto-completion, custom config names, how many
//! loads run at once and how often a failed one is retried, and model namespacing.

use clap::{ArgAction, Args};

use super::parse_bool;

/// `--model-config-name`: a file stem under `<model>/configs/`; Triton forbids spaces.
fn parse_config_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.chars().any(char::is_whitespace) || s.contains('/') {
        return Err(format!("'{s}' is not a config name: it must be non-empty, without spaces or '/'"));
    }
    Ok(s.to_string())
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Model Repository")]
pub struct RepositoryFlags {
    /// Stop the server when a model fails to load at start (as Triton, default true). With
    /// false the other models keep serving and the repository index shows the failure. Loads
    /// after start (repository API, polling) never stop the server.
    #[arg(long, default_value = "true", value_parser = parse_bool, action = ArgAction::Set)]
    pub exit_on_error: bool,

    /// Do not complete model configurations from the model files: every config.pbtxt must be
    /// present and complete (as --strict-model-config=true).
    #[arg(long, action = ArgAction::SetTrue)]
    pub disable_auto_complete_config: bool,

    /// Load `<model>/configs/<name>.pbtxt` where a model has one, else its config.pbtxt.
    #[arg(long, value_parser = parse_config_name)]
    pub model_config_name: Option<String>,

    /// How many models load at once (start-up, polling, repository API). Default 4.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub model_load_thread_count: u32,

    /// How many times a model that failed to load is tried again. Default 0.
    #[arg(long, default_value_t = 0)]
    pub model_load_retry_count: u32,

    /// Model namespaces: each repository is a namespace, so one model name may be served from
    /// several repositories (a request naming it alone is refused as ambiguous; an ensemble's
    /// steps resolve in its own repository first). Default false: a name in two repositories
    /// is refused.
    #[arg(long, default_value = "false", value_parser = parse_bool, action = ArgAction::Set)]
    pub model_namespacing: bool,

    /// Triton enables CUDA peer access between GPUs (default true). Tritium runs no CUDA
    /// memory of its own: accepted, no effect.
    #[arg(long, value_parser = parse_bool, action = ArgAction::Set)]
    pub enable_peer_access: Option<bool>,
}
