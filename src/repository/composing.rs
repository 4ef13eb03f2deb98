//! An ensemble's composing models, as the repository manager sees them: the folders a step's
//! model name may mean, loading the ones not loaded yet, and checking that every step resolves
//! and agrees with its model's inputs and outputs.

use tritium_actors::{Error, Result};

use super::load::{self, LoadFailure};
use super::scan::ModelDir;
use super::{ModelKey, RepositoryManager};

impl RepositoryManager {
    /// The folders an ensemble in `namespace` may mean by a step's model name: the one in its
    /// own namespace, else the only one of that name (none when the name is ambiguous).
    fn composing_dirs(&self, namespace: &str, model: &str) -> Vec<ModelDir> {
        let (found, _) = self.scan();
        if let Some(dir) = found.get(&ModelKey::new(namespace, model)) {
            return vec![dir.clone()];
        }
        let named: Vec<ModelDir> = found.into_values().filter(|d| d.name == model).collect();
        if named.len() == 1 {
            named
        } else {
            Vec::new()
        }
    }

    /// Loads the composing models of an ensemble that are not loaded yet (as Triton does),
    /// resolving each in the ensemble's namespace first. A composing model that is itself an
    /// ensemble must be loaded first.
    pub(super) async fn load_composing(&self, graph: &crate::ensemble::Graph, namespace: &str) -> Result<()> {
        let loaded = |model: &str, version: Option<i64>| {
            self.router.resolve_in(namespace, model).and_then(|k| self.router.get_in(&k, version)).is_ok()
        };
        for (model, version) in graph.composing() {
            if loaded(&model, version) {
                continue;
            }
            let dirs = self.composing_dirs(namespace, &model);
            // A load of it may be running (at startup every model loads at once): wait for it.
            for dir in &dirs {
                drop(self.lock_for(&dir.key()).lock().await);
            }
            if loaded(&model, version) {
                continue;
            }
            for dir in &dirs {
                let config_file = load::config_path(&dir.path, self.opts.config_name.as_deref());
                let text = std::fs::read_to_string(config_file).unwrap_or_default();
                if text.contains("ensemble_scheduling") {
                    return Err(Error::invalid(format!(
                        "ensemble '{}': composing model '{model}' is an ensemble that is not loaded; load it first",
                        graph.name
                    )));
                }
            }
            let result = match dirs.first() {
                Some(dir) => Box::pin(self.load_key(&dir.key(), None)).await,
                // No folder, or one in each of several namespaces: the load of the name says
                // which.
                None => Box::pin(self.load(&model, None, Vec::new())).await,
            };
            result.map_err(|e| {
                Error::new(
                    e.kind,
                    format!("ensemble '{}': composing model '{model}' failed to load: {}", graph.name, e.message),
                )
            })?;
        }
        Ok(())
    }

    /// Every step's model resolves (Triton's text when one does not: "ensemble <key> contains
    /// models that are not available or ambiguous: <names>"), and the graph's tensors agree
    /// with the models' inputs and outputs.
    pub(super) fn check_composing(
        &self,
        key: &ModelKey,
        graph: &crate::ensemble::Graph,
        latest: Option<i64>,
    ) -> Result<(), LoadFailure> {
        let router = &self.router;
        let mut missing: Vec<String> = graph
            .composing()
            .into_iter()
            .filter(|(m, _)| router.resolve_in(&key.namespace, m).is_err())
            .map(|(m, _)| m)
            .collect();
        missing.dedup();
        if !missing.is_empty() {
            return Err(LoadFailure::load(
                None,
                Error::invalid(format!(
                    "ensemble {key} contains models that are not available or ambiguous: {}",
                    missing.join(", ")
                )),
            ));
        }
        graph
            .check_models(|m, v| {
                router.resolve_in(&key.namespace, m).and_then(|k| router.get_in(&k, v)).map(|l| l.handle.policy.clone())
            })
            .map_err(|e| LoadFailure::load(latest, e))
    }
}
