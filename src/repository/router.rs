//! The router: model name → the versions that are ready, read on every request. A model's
//! version map is replaced whole when it changes, so a request never sees half a reload.

use std::collections::BTreeMap;
use std::sync::Arc;

use dashmap::DashMap;
use tritium_actors::ensemble::Route;
use tritium_actors::{Error, InferRequest, Reply, Result};

use super::LoadedModel;

type Versions = Arc<BTreeMap<i64, Arc<LoadedModel>>>;

#[derive(Default)]
pub struct Router {
    models: DashMap<String, Versions>,
}

impl Router {
    /// The named version, or the latest ready one.
    pub fn get(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        let versions = self
            .models
            .get(name)
            .map(|v| v.clone())
            .ok_or_else(|| Error::not_found(format!("Request for unknown model: '{name}' is not found")))?;
        let found = match version {
            Some(v) => versions.get(&v),
            None => versions.values().next_back(),
        };
        found.cloned().ok_or_else(|| match version {
            Some(v) => Error::not_found(format!("Request for unknown model: '{name}' version {v} is not found")),
            // Triton answers 404 for a model it knows but has no version of (e.g. unloaded).
            None => Error::not_found(format!("Request for unknown model: '{name}' has no available versions")),
        })
    }

    pub fn versions(&self, name: &str) -> Vec<i64> {
        self.models.get(name).map(|v| v.keys().copied().collect()).unwrap_or_default()
    }

    pub fn all_versions(&self, name: &str) -> Vec<Arc<LoadedModel>> {
        self.models.get(name).map(|v| v.values().cloned().collect()).unwrap_or_default()
    }

    /// Every loaded version of every model, sorted by name then version.
    pub fn all(&self) -> Vec<Arc<LoadedModel>> {
        let mut names: Vec<String> = self.models.iter().map(|e| e.key().clone()).collect();
        names.sort();
        names.iter().flat_map(|n| self.all_versions(n)).collect()
    }

    /// Replaces a model's ready versions. An empty map keeps the name known (an unloaded model
    /// answers "has no available versions", as in Triton) until `forget` removes it.
    pub fn set(&self, name: &str, versions: BTreeMap<i64, Arc<LoadedModel>>) {
        self.models.insert(name.to_string(), Arc::new(versions));
    }

    pub fn current(&self, name: &str) -> BTreeMap<i64, Arc<LoadedModel>> {
        self.models.get(name).map(|v| (**v).clone()).unwrap_or_default()
    }
}

/// The ensemble actor reaches its composing models through the router.
impl Route for Router {
    fn submit(&self, model: &str, version: Option<i64>, request: InferRequest, reply: Reply) -> Result<()> {
        self.get(model, version)?.handle.submit(request, reply)
    }
}
