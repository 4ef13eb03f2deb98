//! Preparing a model for loading: its config (from config.pbtxt, an API override or nothing),
//! auto-completion from the model file, validation, the versions to load, their policies,
//! backend factories and label files. Blocking file I/O: run off the event loops.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tritium_actors::{BackendFactory, Error, ModelPolicy, Result};

use super::scan::{select_versions, versions_on_disk, ModelDir};
use crate::backends::{self, BackendEnv};
use crate::config::{self, ModelConfig};

/// Where a load failed, which decides Triton's text for it: reading the model's folder and
/// config ("poll", 500) or completing, checking and starting its versions ("load", 400).
#[derive(Debug)]
pub enum Stage {
    Poll,
    Load(Option<i64>),
}

/// A failed load: its stage, and the cause (also the index's reason).
#[derive(Debug)]
pub struct LoadFailure {
    pub stage: Stage,
    pub cause: Error,
}

impl LoadFailure {
    pub fn poll(cause: Error) -> Self {
        LoadFailure { stage: Stage::Poll, cause }
    }

    pub fn load(version: Option<i64>, cause: Error) -> Self {
        LoadFailure { stage: Stage::Load(version), cause }
    }

    /// The answer to the load request: Triton's text, then the cause.
    pub fn into_error(self, model: &str) -> Error {
        let cause = self.cause.message;
        match self.stage {
            Stage::Poll => {
                Error::internal(format!("failed to load '{model}', failed to poll from model repository: {cause}"))
            }
            Stage::Load(Some(v)) => Error::invalid(format!(
                "load failed for model '{model}': version {v} is at UNAVAILABLE state: {cause};"
            )),
            Stage::Load(None) => Error::invalid(format!("load failed for model '{model}': {cause}")),
        }
    }
}

/// The answer to a load of a model that no repository holds: Triton's text, but a client error
/// (HTTP 400, gRPC `INVALID_ARGUMENT`) where Triton 2.51 answers 500 / `INTERNAL`: the request
/// names a model that is not there, and nothing on the server failed.
pub fn unknown_model(model: &str) -> Error {
    Error::invalid(format!("failed to load '{model}', failed to poll from model repository"))
}

/// Everything needed to start a model's versions.
pub struct Prepared {
    pub config: ModelConfig,
    pub versions: Vec<(ModelPolicy, Arc<dyn BackendFactory>)>,
    pub labels: HashMap<String, Vec<String>>,
    /// An ensemble's checked graph (its models are checked once they are loaded).
    pub graph: Option<crate::ensemble::Graph>,
    /// An ensemble's per-step figures, by version.
    pub steps: HashMap<i64, Arc<crate::ensemble::StepFigures>>,
}

/// How a model is read and prepared, from the flags.
#[derive(Debug, Clone, Default)]
pub struct LoadSettings {
    /// No auto-completion (`--disable-auto-complete-config`, `--strict-model-config=true`).
    pub strict: bool,
    /// `--model-config-name`.
    pub config_name: Option<String>,
    pub env: BackendEnv,
    /// `--host-policy <policy>,cpu-cores=...`.
    pub host_cores: BTreeMap<String, Vec<usize>>,
}

/// The config file of a model folder: `configs/<name>.pbtxt` when `--model-config-name` is set
/// and that file exists, else `config.pbtxt` (as Triton).
pub fn config_path(model_dir: &Path, config_name: Option<&str>) -> PathBuf {
    if let Some(name) = config_name {
        let custom = model_dir.join("configs").join(format!("{name}.pbtxt"));
        if custom.is_file() {
            return custom;
        }
    }
    model_dir.join("config.pbtxt")
}

fn read_config(dir: &ModelDir, override_json: Option<&str>, settings: &LoadSettings) -> Result<ModelConfig> {
    let strict = settings.strict;
    let path = config_path(&dir.path, settings.config_name.as_deref());
    if let Some(json) = override_json {
        return config::from_json(json);
    }
    match std::fs::read_to_string(&path) {
        Ok(text) => config::parse_pbtxt(&text, &path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if strict {
                Err(Error::invalid(format!(
                    "model configuration {} is missing (without --disable-auto-complete-config it is completed from the model file)",
                    path.display()
                )))
            } else {
                Ok(ModelConfig::default())
            }
        }
        Err(e) => Err(Error::invalid(format!("cannot read {}: {e}", path.display()))),
    }
}

fn read_labels(model_dir: &Path, config: &ModelConfig) -> Result<HashMap<String, Vec<String>>> {
    let mut labels = HashMap::new();
    for output in &config.output {
        if output.label_filename.is_empty() {
            continue;
        }
        let path = model_dir.join(&output.label_filename);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Error::invalid(format!(
                "label file {} of output '{}' of model '{}' cannot be read: {e}",
                path.display(),
                output.name,
                config.name
            ))
        })?;
        labels.insert(output.name.clone(), text.lines().map(str::to_string).collect());
    }
    Ok(labels)
}

/// Reads, completes and validates a model's config, and builds each version's policy and
/// backend factory.
pub fn prepare(
    dir: &ModelDir,
    override_json: Option<&str>,
    settings: &LoadSettings,
    router: Arc<super::Router>,
) -> Result<Prepared, LoadFailure> {
    let mut config = read_config(dir, override_json, settings).map_err(LoadFailure::poll)?;
    // A folder served under another name (a registered repository's rename, SageMaker's target
    // model) takes that name whatever its config says.
    let folder = dir.path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if config.name.is_empty() || folder != dir.name {
        config.name = dir.name.clone();
    } else if config.name != dir.name {
        return Err(LoadFailure::poll(Error::invalid(format!(
            "model name '{}' in the configuration of {} does not match its folder name '{}'",
            config.name,
            dir.path.display(),
            dir.name
        ))));
    }
    let on_disk = versions_on_disk(&dir.path);
    let versions =
        select_versions(&dir.name, config.version_policy.as_ref(), &on_disk).map_err(|e| LoadFailure::load(None, e))?;
    let latest = *versions.last().expect("select_versions returns at least one");
    prepare_versions(dir, config, versions, settings, router).map_err(|e| LoadFailure::load(Some(latest), e))
}

/// Completes and checks the config, then builds each selected version's policy and factory.
fn prepare_versions(
    dir: &ModelDir,
    mut config: ModelConfig,
    versions: Vec<i64>,
    settings: &LoadSettings,
    router: Arc<super::Router>,
) -> Result<Prepared> {
    let (strict, env) = (settings.strict, &settings.env);
    // Held until the factories are made (a backend library loaded for auto-complete stays up).
    let _completed = if strict {
        backends::Completed::default()
    } else {
        let latest = *versions.last().expect("select_versions returns at least one");
        backends::autocomplete(&mut config, &dir.path, latest, env)?
    };
    let gpus = backends::usable_gpus(&config);
    config::normalize(&mut config, gpus);
    config::validate(&config)?;
    let labels = read_labels(&dir.path, &config)?;
    let graph = if config::is_ensemble(&config) { Some(crate::ensemble::Graph::from_config(&config)?) } else { None };
    let mut steps = HashMap::new();
    let versions = versions
        .into_iter()
        .map(|v| {
            let mut policy = config::to_policy(&config, v, Some(&dir.path))?;
            config::pin_instances(&mut policy, &config, &settings.host_cores);
            let factory: Arc<dyn BackendFactory> = match &graph {
                Some(g) => {
                    let plan = g.plan();
                    let figures = Arc::new(crate::ensemble::StepFigures::new(&plan));
                    steps.insert(v, figures.clone());
                    let route = Arc::new(super::router::NamespaceRoute {
                        router: router.clone(),
                        namespace: dir.namespace.clone(),
                    });
                    Arc::new(crate::ensemble::EnsembleFactory::new(plan, route, figures))
                }
                None => backends::factory(&config, &dir.path, v, env)?,
            };
            Ok((policy, factory))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Prepared { config, versions, labels, graph, steps })
}

#[cfg(test)]
mod tests {
    use tritium_actors::ErrorKind;

    use super::*;

    #[test]
    fn a_model_no_repository_holds_is_a_client_error_with_tritons_text() {
        let e = unknown_model("nope");
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert_eq!(e.message, "failed to load 'nope', failed to poll from model repository");
    }

    #[test]
    fn a_poll_failure_is_tritons_500_text_then_the_cause() {
        let e = LoadFailure::poll(Error::invalid("Invalid config override: bad")).into_error("m");
        assert_eq!(e.kind, ErrorKind::Internal);
        assert_eq!(e.message, "failed to load 'm', failed to poll from model repository: Invalid config override: bad");
    }

    #[test]
    fn a_load_failure_is_tritons_400_text_then_the_cause() {
        let e = LoadFailure::load(Some(3), Error::internal("no session")).into_error("m");
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert_eq!(e.message, "load failed for model 'm': version 3 is at UNAVAILABLE state: no session;");
        let e = LoadFailure::load(None, Error::invalid("no version")).into_error("m");
        assert_eq!(e.message, "load failed for model 'm': no version");
    }

    #[test]
    fn a_malformed_override_fails_the_poll_and_a_wrong_name_too() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("m/1")).unwrap();
        let model = ModelDir { name: "m".into(), namespace: String::new(), path: dir.path().join("m") };
        let settings = LoadSettings::default();
        let router = Arc::new(super::super::Router::default());
        for json in [r#""parameters": {"config": {{"max_batch_size": "16"}}}"#, r#"{"name":"other"}"#] {
            let f = prepare(&model, Some(json), &settings, router.clone()).err().expect(json);
            assert!(matches!(f.stage, Stage::Poll), "{json}: {f:?}");
        }
    }
}
