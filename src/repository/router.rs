//! The router: model name → the namespaces that know it → the versions that are ready, read on
//! every request. A model's version map is replaced whole when it changes, so a request never
//! sees half a reload.
//!
//! A request names a model by name alone. With `--model-namespacing=true` one name may be known
//! in several namespaces (one per repository); such a name is refused as ambiguous, with Triton's
//! text, and a name known nowhere is an invalid argument (Triton's `FindModelIdentifier`). An
//! ensemble's steps resolve in the ensemble's own namespace first, else by a name known in one
//! namespace only (`resolve_in`, Triton's "fuzzy" match of a composing model).

use std::collections::BTreeMap;
use std::sync::Arc;

use dashmap::DashMap;
use tritium_actors::ensemble::Route;
use tritium_actors::{Error, InferRequest, Reply, Result};

use super::{LoadedModel, ModelKey};

type Versions = Arc<BTreeMap<i64, Arc<LoadedModel>>>;

/// What the router holds for one key: `None` while the model is known (found on disk, failed to
/// load) but has never served; an empty map once it was unloaded.
type Slot = Option<Versions>;

#[derive(Default)]
pub struct Router {
    /// `--model-namespacing`: a name may be known in several namespaces.
    namespacing: bool,
    models: DashMap<String, BTreeMap<String, Slot>>,
}

impl Router {
    pub fn new(namespacing: bool) -> Self {
        Router { namespacing, models: DashMap::new() }
    }

    /// The one key a request's model name stands for.
    fn key_of(&self, name: &str) -> Result<(ModelKey, Slot)> {
        let entry = self.models.get(name);
        let namespaces = match entry.as_deref() {
            // Without namespaces Triton answers 404 here; with them FindModelIdentifier's 400.
            None if self.namespacing => {
                return Err(Error::invalid(format!("Request for unknown model: '{name}' is not found")))
            }
            None => return Err(Error::not_found(format!("Request for unknown model: '{name}' is not found"))),
            // Every model of this name was unloaded or left its repository: Triton keeps the
            // name without identifiers.
            Some(n) if n.is_empty() => {
                return Err(Error::not_found(format!("Identifier of model '{name}' is not found in global map")))
            }
            Some(n) => n,
        };
        if namespaces.len() > 1 {
            return Err(Error::invalid(format!(
                "There are {} identifiers of model '{name}' in global map, model namespace must be provided to resolve ambiguity.",
                namespaces.len()
            )));
        }
        let (namespace, slot) = namespaces.iter().next().expect("not empty");
        Ok((ModelKey::new(namespace.clone(), name), slot.clone()))
    }

    /// The named version, or the latest ready one, of the model a request names.
    pub fn get(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        let (key, slot) = self.key_of(name)?;
        Self::pick(&key, slot, version)
    }

    /// The named version, or the latest ready one, of one model.
    pub fn get_in(&self, key: &ModelKey, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        let slot = self.models.get(&key.name).and_then(|n| n.get(&key.namespace).cloned()).flatten();
        Self::pick(key, slot, version)
    }

    fn pick(key: &ModelKey, slot: Slot, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        let versions =
            slot.ok_or_else(|| Error::not_found(format!("Request for unknown model: '{key}' is not found")))?;
        let found = match version {
            Some(v) => versions.get(&v),
            None => versions.values().next_back(),
        };
        found.cloned().ok_or_else(|| match version {
            Some(v) => Error::not_found(format!("Request for unknown model: '{key}' version {v} is not found")),
            // Triton answers 404 for a model it knows but has no version of (e.g. unloaded).
            None => Error::not_found(format!("Request for unknown model: '{key}' has no available versions")),
        })
    }

    /// The model a step of an ensemble in `namespace` names: the one in that namespace, else the
    /// only one of that name (as Triton resolves a composing model).
    pub fn resolve_in(&self, namespace: &str, name: &str) -> Result<ModelKey> {
        let entry = self.models.get(name);
        match entry.as_deref() {
            Some(n) if n.contains_key(namespace) => Ok(ModelKey::new(namespace, name)),
            Some(n) if n.len() == 1 => Ok(ModelKey::new(n.keys().next().expect("one").clone(), name)),
            Some(n) if n.len() > 1 => {
                Err(Error::invalid(format!("model '{name}' is in {} namespaces and none is '{namespace}'", n.len())))
            }
            _ => Err(Error::not_found(format!("Request for unknown model: '{name}' is not found"))),
        }
    }

    /// Every loaded version of the model a request names (none: an error, as `get`'s).
    pub fn all_versions(&self, name: &str) -> Result<Vec<Arc<LoadedModel>>> {
        let (_, slot) = self.key_of(name)?;
        Ok(slot.map(|v| v.values().cloned().collect()).unwrap_or_default())
    }

    /// Every loaded version of every model, sorted by namespace, name, then version.
    pub fn all(&self) -> Vec<Arc<LoadedModel>> {
        let mut keys: Vec<ModelKey> = self
            .models
            .iter()
            .flat_map(|e| e.value().keys().map(|ns| ModelKey::new(ns.clone(), e.key().clone())).collect::<Vec<_>>())
            .collect();
        keys.sort();
        keys.iter().flat_map(|k| self.current(k).into_values()).collect()
    }

    /// Makes a model known without serving it (found on disk, or failed to load): its name now
    /// counts in its namespace.
    pub fn know(&self, key: &ModelKey) {
        self.models.entry(key.name.clone()).or_default().entry(key.namespace.clone()).or_insert(None);
    }

    /// Replaces a model's ready versions. An empty map keeps the model known (an unloaded model
    /// answers "has no available versions", as in Triton) until `forget` removes it.
    pub fn set(&self, key: &ModelKey, versions: BTreeMap<i64, Arc<LoadedModel>>) {
        self.models.entry(key.name.clone()).or_default().insert(key.namespace.clone(), Some(Arc::new(versions)));
    }

    /// Drops a model that was unloaded or left its repository, with `--model-namespacing`: its
    /// name no longer counts in its namespace (as Triton drops its identifier).
    pub fn forget(&self, key: &ModelKey) {
        if let Some(mut namespaces) = self.models.get_mut(&key.name) {
            namespaces.remove(&key.namespace);
        }
    }

    pub fn current(&self, key: &ModelKey) -> BTreeMap<i64, Arc<LoadedModel>> {
        self.models
            .get(&key.name)
            .and_then(|n| n.get(&key.namespace).cloned().flatten())
            .map(|v| (*v).clone())
            .unwrap_or_default()
    }
}

/// How an ensemble in a namespace reaches its composing models: by name, resolved in its own
/// namespace first (`Router::resolve_in`) on every request, so a model that becomes known
/// later is found then.
pub struct NamespaceRoute {
    pub router: Arc<Router>,
    pub namespace: String,
}

impl Route for NamespaceRoute {
    fn submit(&self, model: &str, version: Option<i64>, request: InferRequest, reply: Reply) -> Result<()> {
        self.step(model, version)?.handle.submit(request, reply)
    }

    fn submit_here(&self, model: &str, version: Option<i64>, request: InferRequest, reply: Reply) -> Result<()> {
        self.step(model, version)?.handle.submit_here(request, reply)
    }
}

impl NamespaceRoute {
    /// The step's model version, entered (held from retiring while its request is submitted).
    fn step(&self, model: &str, version: Option<i64>) -> Result<super::retire::Pass> {
        let key = self.router.resolve_in(&self.namespace, model)?;
        let lookup = || self.router.get_in(&key, version);
        super::retire::enter(lookup()?, lookup)
    }
}

#[cfg(test)]
mod tests {
    use tritium_actors::ErrorKind;

    use super::*;

    #[test]
    fn a_name_in_two_namespaces_is_ambiguous_and_steps_prefer_their_own() {
        let router = Router::new(true);
        for key in [ModelKey::new("/r1", "m"), ModelKey::new("/r2", "m"), ModelKey::new("/r1", "only1")] {
            router.know(&key);
        }
        let e = router.get("m", None).err().unwrap();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert_eq!(
            e.message,
            "There are 2 identifiers of model 'm' in global map, model namespace must be provided to resolve ambiguity."
        );
        let e = router.get("nope", None).err().unwrap();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::InvalidArgument, "Request for unknown model: 'nope' is not found")
        );
        // Known, never loaded: the key is named, as Triton does.
        let e = router.get("only1", None).err().unwrap();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::NotFound, "Request for unknown model: '/r1::only1' is not found")
        );
        assert_eq!(router.resolve_in("/r2", "m").unwrap(), ModelKey::new("/r2", "m"));
        assert_eq!(router.resolve_in("/r2", "only1").unwrap(), ModelKey::new("/r1", "only1"));
        assert!(router.resolve_in("/r3", "m").is_err());
        router.forget(&ModelKey::new("/r1", "m"));
        assert_eq!(router.resolve_in("/r3", "m").unwrap(), ModelKey::new("/r2", "m"));
        router.set(&ModelKey::new("/r2", "m"), BTreeMap::new());
        let e = router.get("m", None).err().unwrap();
        assert_eq!(e.message, "Request for unknown model: '/r2::m' has no available versions");
        router.forget(&ModelKey::new("/r2", "m"));
        let e = router.get("m", None).err().unwrap();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::NotFound, "Identifier of model 'm' is not found in global map")
        );
        assert!(router.resolve_in("/r2", "m").is_err());
    }

    #[test]
    fn without_namespaces_an_unknown_model_is_not_found() {
        let router = Router::new(false);
        let e = router.get("nope", None).err().unwrap();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::NotFound, "Request for unknown model: 'nope' is not found")
        );
        router.set(&ModelKey::new("", "m"), BTreeMap::new());
        let e = router.get("m", Some(2)).err().unwrap();
        assert_eq!(e.message, "Request for unknown model: 'm' version 2 is not found");
        assert!(router.all_versions("m").unwrap().is_empty());
    }
}
