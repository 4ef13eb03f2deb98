//! How the repository manager is set up: the control mode (`--model-control-mode`) and the
//! options of the command line it works by.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::remote;
use crate::backends::BackendEnv;

/// How models are loaded and unloaded (`--model-control-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ControlMode {
    /// Load every model in the repositories at start; the repository API cannot change them.
    None,
    /// Rescan the repositories every --repository-poll-secs: load new, reload changed and
    /// unload removed models.
    Poll,
    /// Load only --load-model models at start; the repository API loads and unloads.
    Explicit,
}

pub struct RepositoryOptions {
    /// The local folders scanned: the local repositories and the mirrors of the remote ones.
    pub repositories: Vec<PathBuf>,
    /// The repositories on object storage, mirrored in folders of `repositories`.
    pub remotes: Vec<Arc<remote::Remote>>,
    pub mode: ControlMode,
    pub strict_config: bool,
    pub strict_readiness: bool,
    pub backend_env: BackendEnv,
    /// `--model-config-name`: read `configs/<name>.pbtxt` where a model has it.
    pub config_name: Option<String>,
    /// `--model-load-thread-count`: how many loads prepare or start instances at once.
    pub load_threads: usize,
    /// `--model-load-retry-count`: further attempts after a failed load.
    pub load_retries: u32,
    /// `--host-policy ...,cpu-cores=`: policy name → cores for instance threads.
    pub host_cores: BTreeMap<String, Vec<usize>>,
    /// `--model-namespacing`: each repository is a namespace of its own.
    pub namespacing: bool,
    /// What every loaded model shares: the response cache (`--cache-config`).
    pub shared: tritium_actors::Shared,
}

impl Default for RepositoryOptions {
    fn default() -> Self {
        RepositoryOptions {
            repositories: Vec::new(),
            remotes: Vec::new(),
            mode: ControlMode::None,
            strict_config: false,
            strict_readiness: true,
            backend_env: BackendEnv::default(),
            config_name: None,
            load_threads: 4,
            load_retries: 0,
            host_cores: BTreeMap::new(),
            namespacing: false,
            shared: tritium_actors::Shared::default(),
        }
    }
}
