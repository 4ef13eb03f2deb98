//! What the repository holds and reports: a model's identity (`ModelKey`: its namespace and
//! name), a ready model version (`LoadedModel`: its engine handle with the config, labels and
//! composing models it was loaded with) and one row of the repository index (`IndexEntry`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use tritium_actors::ensemble::StepFigures;
use tritium_actors::ModelHandle;

use super::retire::Gate;
use crate::config::ModelConfig;

/// Which model: its name within a namespace. With `--model-namespacing=true` each repository is
/// a namespace named by its path as given (Triton's `ModelIdentifier`), so one name can be
/// served from several repositories; without it every model is in the empty namespace. Sorted
/// by namespace, then name, as Triton's index lists them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModelKey {
    pub namespace: String,
    pub name: String,
}

impl ModelKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ModelKey { namespace: namespace.into(), name: name.into() }
    }
}

/// `<namespace>::<name>`, or the name alone in the empty namespace (as Triton writes it).
impl fmt::Display for ModelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}::{}", self.namespace, self.name)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    pub version: Option<String>,
    /// "READY", "UNAVAILABLE", "LOADING" or "UNLOADING"; empty for a model never loaded.
    pub state: String,
    pub reason: String,
}

/// A ready model version: its engine handle and the config it was loaded with.
pub struct LoadedModel {
    /// The namespace it was loaded in (empty without `--model-namespacing`).
    pub namespace: String,
    pub handle: ModelHandle,
    pub config: ModelConfig,
    /// Output name → the lines of its `label_filename`, for the classification extension.
    pub labels: HashMap<String, Vec<String>>,
    /// For an ensemble: the models its steps run (name, version; `None` = latest).
    pub composing: Vec<(String, Option<i64>)>,
    /// For an ensemble: each step's latency.
    pub steps: Option<Arc<StepFigures>>,
    /// The temporary folder of a model loaded from files sent in the load request: kept while
    /// a version loaded from it is held, removed after (only its `Drop` is used).
    #[allow(dead_code)]
    pub files: Option<Arc<tempfile::TempDir>>,
    /// Shut once the version is replaced or unloaded (see `retire`).
    pub(super) gate: Gate,
}

impl LoadedModel {
    pub fn name(&self) -> &str {
        &self.handle.policy.name
    }

    pub fn key(&self) -> ModelKey {
        ModelKey::new(self.namespace.clone(), self.name())
    }

    pub fn version(&self) -> i64 {
        self.handle.policy.version
    }

    /// The platform name Triton reports (`onnxruntime_onnx`, …).
    pub fn platform(&self) -> String {
        if !self.config.platform.is_empty() {
            self.config.platform.clone()
        } else {
            self.config.backend.clone()
        }
    }
}
