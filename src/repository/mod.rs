//! The model repository manager: which models exist on disk, their states (READY,
//! UNAVAILABLE, LOADING, UNLOADING) and reasons, loading and unloading them under the control
//! modes none, explicit and poll, and keeping the router's view in step. A reload builds the
//! new version beside the old one, which serves until the new one is ready, then is retired
//! (`retire`: the submits under way finish, later ones go to the new version) and drains.
//!
//! A model is a `ModelKey`: its name in a namespace. Without `--model-namespacing` there is one
//! (empty) namespace and a name found in two repositories is refused; with it each repository
//! is a namespace, records and loads are per key, and a load or unload by name acts on that
//! name in every namespace (as Triton's repository API does).

mod composing;
pub mod load;
mod model;
mod options;
pub mod overrides;
pub mod registered;
pub mod remote;
pub mod retire;
pub mod router;
pub mod scan;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};

use actix::ArbiterHandle;
use dashmap::DashMap;
use load::{unknown_model, LoadFailure};
pub use model::{IndexEntry, LoadedModel, ModelKey};
pub use options::{ControlMode, RepositoryOptions};
use parking_lot::Mutex;
pub use router::Router;
use scan::{fingerprint, ModelDir, Scan};
use tritium_actors::stats::StatsObserver;
use tritium_actors::{Error, ModelHandle, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelState {
    Ready,
    Unavailable,
    Loading,
    Unloading,
}

impl ModelState {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelState::Ready => "READY",
            ModelState::Unavailable => "UNAVAILABLE",
            ModelState::Loading => "LOADING",
            ModelState::Unloading => "UNLOADING",
        }
    }
}

/// What the manager knows of one model.
#[derive(Debug, Clone)]
struct Record {
    /// Per version: state and reason. Empty while no version is known (failed before).
    versions: BTreeMap<i64, (ModelState, String)>,
    /// The model-level state when no version could be named.
    state: ModelState,
    reason: String,
    /// The folder fingerprint of the last load attempt (poll mode reloads when it changes).
    fingerprint: Option<u64>,
    /// The model should be loaded (counts for readiness).
    wanted: bool,
}

pub struct RepositoryManager {
    opts: RepositoryOptions,
    engine: ArbiterHandle,
    router: Arc<Router>,
    records: Mutex<BTreeMap<ModelKey, Record>>,
    /// Serializes load and unload of one model.
    locks: DashMap<ModelKey, Arc<tokio::sync::Mutex<()>>>,
    /// Bounds the loads doing work at once (`--model-load-thread-count`). A load holds a permit
    /// while it reads its files and while its instances start, never while it waits for an
    /// ensemble's composing models, so nested loads cannot starve each other.
    load_permits: tokio::sync::Semaphore,
    /// Repositories registered while running (SageMaker's multi-model routes).
    registered: registered::Registered,
    startup_done: AtomicBool,
    observers: OnceLock<ObserverFactory>,
}

/// Makes the observer a loaded model version reports each request to, if it needs one:
/// (model, version, decoupled, its answers are cached).
pub type ObserverFactory = Box<dyn Fn(&ModelKey, i64, bool, bool) -> Option<Box<dyn StatsObserver>> + Send + Sync>;

impl RepositoryManager {
    pub fn new(opts: RepositoryOptions, engine: ArbiterHandle) -> Self {
        RepositoryManager {
            load_permits: tokio::sync::Semaphore::new(opts.load_threads.max(1)),
            registered: registered::Registered::default(),
            router: Arc::new(Router::new(opts.namespacing)),
            opts,
            engine,
            records: Mutex::new(BTreeMap::new()),
            locks: DashMap::new(),
            startup_done: AtomicBool::new(false),
            observers: OnceLock::new(),
        }
    }

    /// Sets what each model version loaded from now on reports its requests to (the metrics
    /// endpoint's per-request families); only the first call has effect.
    pub fn observe_loads(&self, observers: ObserverFactory) {
        let _ = self.observers.set(observers);
    }

    /// Hands a freshly loaded version's requests to its observer, when it has one.
    fn observed(&self, handle: ModelHandle, key: &ModelKey, version: i64, decoupled: bool) -> ModelHandle {
        if let Some(observer) = self.observers.get().and_then(|make| make(key, version, decoupled, handle.caches())) {
            handle.stats.set_observer(observer);
        }
        handle
    }

    /// What every loaded model shares (the response cache, the rate limiter).
    pub fn shared(&self) -> &tritium_actors::Shared {
        &self.opts.shared
    }

    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The model folders of the command line's repositories and the registered ones.
    fn scan(&self) -> Scan {
        let found = self.registered.scan_with(&self.opts.repositories, self.opts.namespacing);
        remote::name_namespaces(found, &self.opts.remotes, self.opts.namespacing)
    }

    /// Registers a repository while running; `rename` serves one of its folders under another
    /// name (Triton's repository registration, as SageMaker's multi-model load uses it).
    pub fn register_repository(&self, path: &std::path::Path, rename: Option<(String, String)>) -> Result<()> {
        self.registered.register(path, rename)
    }

    pub fn unregister_repository(&self, path: &std::path::Path) -> Result<()> {
        self.registered.unregister(path)
    }

    /// The start-up loads are done (whatever their outcome).
    pub fn startup_done(&self) -> bool {
        self.startup_done.load(Relaxed)
    }

    /// Ready once the start-up loads are done and (with strict readiness) every model that
    /// should be loaded is READY and every loaded version has a live instance (not so while
    /// its supervisor restarts the last one).
    pub fn is_ready(&self) -> bool {
        if !self.startup_done.load(Relaxed) {
            return false;
        }
        if !self.opts.strict_readiness {
            return true;
        }
        let all_ready = self
            .records
            .lock()
            .values()
            .filter(|r| r.wanted)
            .all(|r| !r.versions.is_empty() && r.versions.values().all(|(s, _)| *s == ModelState::Ready));
        all_ready && self.router.all().iter().all(|m| m.handle.is_ready())
    }

    fn lock_for(&self, key: &ModelKey) -> Arc<tokio::sync::Mutex<()>> {
        self.locks.entry(key.clone()).or_default().clone()
    }

    /// Changes a model's record (making one, and the model known to the router, if needed).
    fn set_record(&self, key: &ModelKey, f: impl FnOnce(&mut Record)) {
        self.router.know(key);
        let mut records = self.records.lock();
        let r = records.entry(key.clone()).or_insert_with(|| Record {
            versions: BTreeMap::new(),
            state: ModelState::Unavailable,
            reason: String::new(),
            fingerprint: None,
            wanted: false,
        });
        f(r);
    }

    /// Loads at start: every model (modes none and poll) or the `--load-model` ones. Returns
    /// the models that failed, with their reasons (`--exit-on-error` stops the server on any).
    pub async fn load_startup(&self, load_models: &[String]) -> Vec<(String, String)> {
        let (found, errors) = self.scan();
        let mut failed: Vec<(String, String)> = Vec::new();
        for (key, reason) in errors {
            tracing::error!("failed to load '{key}': {reason}");
            failed.push((key.to_string(), reason.clone()));
            self.set_record(&key, |r| {
                r.state = ModelState::Unavailable;
                r.reason = reason;
                r.wanted = true;
            });
        }
        let names: BTreeSet<String> = match self.opts.mode {
            ControlMode::Explicit if !load_models.iter().any(|m| m == "*") => load_models.iter().cloned().collect(),
            _ => found.keys().map(|k| k.name.clone()).collect(),
        };
        let loads = names.iter().map(|n| async move {
            let result = self.load(n, None, Vec::new()).await;
            if let Err(e) = &result {
                tracing::error!("failed to load '{n}': {e}");
            }
            result.err().map(|e| (n.clone(), e.message))
        });
        failed.extend(futures::future::join_all(loads).await.into_iter().flatten());
        self.startup_done.store(true, Relaxed);
        failed
    }

    /// The repository API's load, allowed in explicit mode only (as Triton).
    pub async fn api_load(&self, name: &str, config_json: Option<String>, files: Vec<(String, Vec<u8>)>) -> Result<()> {
        self.check_explicit()?;
        self.load(name, config_json, files).await
    }

    pub async fn api_unload(&self, name: &str) -> Result<()> {
        self.check_explicit()?;
        self.unload(name).await
    }

    /// Refuses explicit loads and unloads unless the model control mode is explicit (Triton's texts).
    pub fn check_explicit(&self) -> Result<()> {
        match self.opts.mode {
            ControlMode::Explicit => Ok(()),
            ControlMode::Poll => {
                Err(Error::unavailable("explicit model load / unload is not allowed if polling is enabled"))
            }
            ControlMode::None => {
                Err(Error::unavailable("explicit model load / unload is not allowed if model control mode is 'none'"))
            }
        }
    }

    /// Loads (or reloads) a model: the folder of that name in every repository (with
    /// `--model-namespacing`, one model per namespace, as Triton loads them all); the versions
    /// it had keep serving until the new ones are ready, then drain. With `files` (Triton's
    /// `file:` parameters) the model is loaded from those files and `config_json` instead of its
    /// folder, in the empty namespace (as Triton). A failure answers Triton's text ("failed to
    /// load '<m>', failed to poll from model repository" or "load failed for model '<m>': ...")
    /// followed by the cause, which the index shows as the reason; with several namespaces, the
    /// first failure. A failed load of a folder is tried again `--model-load-retry-count` times.
    /// A name that is not one plain path segment is refused first (400 / `INVALID_ARGUMENT`).
    pub async fn load(&self, name: &str, config_json: Option<String>, files: Vec<(String, Vec<u8>)>) -> Result<()> {
        overrides::check_model_name(name)?;
        if !files.is_empty() {
            let key = ModelKey::new(String::new(), name);
            let lock = self.lock_for(&key);
            let _guard = lock.lock().await;
            // Model files can be large: write them off the event loop.
            let (model, has_config) = (name.to_string(), config_json.is_some());
            let written = tokio::task::spawn_blocking(move || overrides::materialize(&model, has_config, &files))
                .await
                .unwrap_or_else(|e| Err(Error::internal(format!("writing the files of model '{name}' panicked: {e}"))));
            let result = match written {
                Ok(o) => self.load_dir(o.dir, config_json, Some(o.keep)).await,
                Err(e) => Err(LoadFailure::poll(e)),
            };
            return self.record_failure(&key, result);
        }
        if self.opts.mode == ControlMode::Explicit {
            remote::refresh(&self.opts.remotes, name).await?;
        }
        let (found, errors) = self.scan();
        let keys: BTreeSet<&ModelKey> = found.keys().chain(errors.keys()).filter(|k| k.name == name).collect();
        if keys.is_empty() {
            // Triton's text; Triton answers 500 (INTERNAL), Tritium a client error (400,
            // INVALID_ARGUMENT): the request names a model no repository has. Nothing to record.
            return Err(unknown_model(name));
        }
        let mut first_error = None;
        for key in keys {
            if let Err(e) = self.load_key(key, config_json.clone()).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Loads (or reloads) one model from its folder, as the repositories hold it now.
    async fn load_key(&self, key: &ModelKey, config_json: Option<String>) -> Result<()> {
        let lock = self.lock_for(key);
        let _guard = lock.lock().await;
        let (found, errors) = self.scan();
        let result = match (found.get(key), errors.get(key)) {
            (_, Some(reason)) => Err(LoadFailure::poll(Error::invalid(reason.clone()))),
            // Gone from its repository since the caller looked.
            (None, None) => return Err(unknown_model(&key.name)),
            (Some(dir), None) => {
                let mut attempt = 0;
                loop {
                    match self.load_dir(dir.clone(), config_json.clone(), None).await {
                        Err(f) if attempt < self.opts.load_retries => {
                            attempt += 1;
                            tracing::warn!(
                                "failed to load '{key}': {}; retrying ({attempt} of {})",
                                f.cause.message,
                                self.opts.load_retries
                            );
                        }
                        other => break other,
                    }
                }
            }
        };
        self.record_failure(key, result)
    }

    /// Records a failed load in the model's record, and answers the load with Triton's text.
    fn record_failure(&self, key: &ModelKey, result: Result<(), LoadFailure>) -> Result<()> {
        if let Err(f) = &result {
            let reason = f.cause.message.clone();
            self.set_record(key, |r| {
                r.wanted = true;
                if r.versions.is_empty() || r.versions.values().all(|(s, _)| *s != ModelState::Ready) {
                    r.state = ModelState::Unavailable;
                    r.reason = reason.clone();
                    for v in r.versions.values_mut() {
                        *v = (ModelState::Unavailable, reason.clone());
                    }
                } else {
                    // The versions already serving stay; the failed reload is reported (in the
                    // index, as their reason, until a reload succeeds).
                    for v in r.versions.values_mut().filter(|v| v.0 == ModelState::Ready) {
                        v.1 = reason.clone();
                    }
                    // load_dir marked the model Loading; it is still serving.
                    r.state = ModelState::Ready;
                    r.reason = reason;
                }
            });
        }
        result.map_err(|f| f.into_error(&key.to_string()))
    }

    /// One of the `--model-load-thread-count` permits.
    async fn acquire_load_permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, LoadFailure> {
        self.load_permits
            .acquire()
            .await
            .map_err(|_| LoadFailure::load(None, Error::unavailable("model loading has stopped")))
    }

    async fn load_dir(
        &self,
        dir: ModelDir,
        config_json: Option<String>,
        files: Option<Arc<tempfile::TempDir>>,
    ) -> Result<(), LoadFailure> {
        let key = dir.key();
        let fp = fingerprint(&dir.path);
        self.set_record(&key, |r| {
            r.fingerprint = Some(fp);
            r.wanted = true;
            r.state = ModelState::Loading;
            r.reason.clear();
            for v in r.versions.values_mut() {
                if v.0 != ModelState::Ready {
                    *v = (ModelState::Loading, String::new());
                }
            }
        });
        let settings = load::LoadSettings {
            strict: self.opts.strict_config,
            config_name: self.opts.config_name.clone(),
            env: self.opts.backend_env.clone(),
            host_cores: self.opts.host_cores.clone(),
        };
        let router = self.router.clone();
        let permit = self.acquire_load_permit().await?;
        tracing::info!("loading '{key}'");
        let prepared =
            tokio::task::spawn_blocking(move || load::prepare(&dir, config_json.as_deref(), &settings, router))
                .await
                .map_err(|e| {
                    LoadFailure::load(None, Error::internal(format!("loading model '{}' panicked: {e}", key.name)))
                })??;
        drop(permit);
        let latest = prepared.versions.last().map(|(p, _)| p.version);
        let composing = match &prepared.graph {
            Some(graph) => {
                self.load_composing(graph, &key.namespace).await.map_err(|e| LoadFailure::load(latest, e))?;
                self.check_composing(&key, graph, latest)?;
                graph.composing()
            }
            None => Vec::new(),
        };
        let _permit = self.acquire_load_permit().await?;
        let mut started: Vec<(i64, Arc<LoadedModel>)> = Vec::new();
        for (policy, factory) in prepared.versions {
            let version = policy.version;
            self.set_record(&key, |r| {
                r.versions.entry(version).or_insert((ModelState::Loading, String::new()));
            });
            let decoupled = policy.decoupled;
            if policy.response_cache && self.opts.shared.cache.is_none() {
                // Triton serves such a model uncached without a word; say so once per load.
                tracing::warn!(
                    "model '{key}' version {version}: response_cache is enabled in its config, but the server has no response cache (start it with --cache-config local,size=<bytes>); its requests are not cached"
                );
            }
            if self.opts.shared.limiter.is_none() {
                for group in prepared.config.instance_group.iter().filter(|g| g.rate_limiter.is_some()) {
                    tracing::warn!(
                        "model '{key}': instance_group '{}' sets rate_limiter, which has no effect while the rate limiter is off (start the server with --rate-limit=execution_count)",
                        group.name
                    );
                }
            }
            // An ensemble's instances only wait for its steps, which the limiter governs.
            let shared = match &prepared.graph {
                Some(_) => tritium_actors::Shared { limiter: None, ..self.opts.shared.clone() },
                None => self.opts.shared.clone(),
            };
            match ModelHandle::load_shared(&self.engine, policy, factory, &shared).await {
                Ok(handle) => started.push((
                    version,
                    Arc::new(LoadedModel {
                        namespace: key.namespace.clone(),
                        handle: self.observed(handle, &key, version, decoupled),
                        config: prepared.config.clone(),
                        labels: prepared.labels.clone(),
                        composing: composing.clone(),
                        steps: prepared.steps.get(&version).cloned(),
                        files: files.clone(),
                        gate: retire::Gate::default(),
                    }),
                )),
                Err(e) => {
                    for (_, m) in &started {
                        m.handle.unload().await;
                    }
                    self.set_record(&key, |r| {
                        r.versions.insert(version, (ModelState::Unavailable, e.message.clone()));
                    });
                    return Err(LoadFailure::load(Some(version), e));
                }
            }
        }
        let new_versions: BTreeSet<i64> = started.iter().map(|(v, _)| *v).collect();
        let old = self.router.current(&key);
        self.router.set(&key, started.into_iter().collect());
        self.set_record(&key, |r| {
            r.state = ModelState::Ready;
            r.reason.clear();
            r.versions.retain(|v, _| new_versions.contains(v) || old.contains_key(v));
            for v in &new_versions {
                r.versions.insert(*v, (ModelState::Ready, String::new()));
            }
            for v in old.keys().filter(|v| !new_versions.contains(v)) {
                r.versions.insert(*v, (ModelState::Unavailable, "unloaded".into()));
            }
        });
        tracing::info!("successfully loaded '{key}' version(s) {new_versions:?}");
        // The replaced handles take no more submits, finish what they hold, then stop.
        for (_, m) in old {
            m.gate.retire().await;
            m.handle.unload().await;
        }
        Ok(())
    }

    /// Stops taking requests for a model (in every namespace that has it), lets in-flight ones
    /// finish, then stops its actors.
    pub async fn unload(&self, name: &str) -> Result<()> {
        let (found, _) = self.scan();
        let mut keys: BTreeSet<ModelKey> = self.records.lock().keys().filter(|k| k.name == name).cloned().collect();
        keys.extend(found.into_keys().filter(|k| k.name == name));
        // Triton answers 200 to unloading a model it does not have.
        for key in keys {
            self.unload_key(&key).await;
        }
        Ok(())
    }

    async fn unload_key(&self, key: &ModelKey) {
        let lock = self.lock_for(key);
        let _guard = lock.lock().await;
        let old = self.router.current(key);
        self.router.set(key, BTreeMap::new());
        self.set_record(key, |r| {
            r.wanted = false;
            for v in old.keys() {
                r.versions.insert(*v, (ModelState::Unloading, String::new()));
            }
        });
        for m in old.values() {
            m.gate.retire().await;
            m.handle.unload().await;
        }
        self.set_record(key, |r| {
            r.state = ModelState::Unavailable;
            r.reason = "unloaded".into();
            for v in r.versions.values_mut() {
                *v = (ModelState::Unavailable, "unloaded".into());
            }
        });
        if self.opts.namespacing {
            // The name no longer counts in that namespace (Triton drops the identifier).
            self.router.forget(key);
        }
        tracing::info!("successfully unloaded '{key}'");
    }

    /// Poll mode: load new models, reload changed ones, unload removed ones.
    pub async fn poll_once(&self) {
        remote::poll(&self.opts.remotes).await;
        let (found, errors) = self.scan();
        let mut todo: Vec<(ModelKey, bool)> = Vec::new();
        {
            let records = self.records.lock();
            for (key, dir) in &found {
                // New, changed, or back after it was removed (and unloaded).
                let changed = records
                    .get(key)
                    .map(|r| !r.wanted || r.fingerprint != Some(fingerprint(&dir.path)))
                    .unwrap_or(true);
                if changed {
                    todo.push((key.clone(), true));
                }
            }
            for (key, r) in records.iter() {
                if !found.contains_key(key) && !errors.contains_key(key) && r.wanted {
                    todo.push((key.clone(), false));
                }
            }
        }
        for (key, load) in todo {
            if load {
                if let Err(e) = self.load_key(&key, None).await {
                    tracing::error!("poll: '{key}': {e}");
                }
            } else {
                self.unload_key(&key).await;
            }
        }
    }

    /// Unloads every model (server shutdown).
    pub async fn unload_all(&self) {
        let keys: Vec<ModelKey> = self.records.lock().keys().cloned().collect();
        let unloads = keys.iter().map(|k| self.unload_key(k));
        futures::future::join_all(unloads).await;
    }

    /// `POST /v2/repository/index`: every model on disk or known, with its versions' states;
    /// with namespaces, a name once per namespace that has it. A repository that cannot be read
    /// (renamed or deleted while serving) fails the index, as in Triton.
    pub fn index(&self, ready_only: bool) -> Result<Vec<IndexEntry>> {
        for repo in &self.opts.repositories {
            if std::fs::read_dir(repo).is_err() {
                return Err(Error::internal(format!("failed to open directory {}", repo.display())));
            }
        }
        let (found, _) = self.scan();
        let records = self.records.lock();
        let keys: BTreeSet<&ModelKey> = found.keys().chain(records.keys()).collect();
        let mut out = Vec::new();
        for key in keys {
            let name = &key.name;
            match records.get(key) {
                None => out.push(IndexEntry {
                    name: name.clone(),
                    version: None,
                    state: String::new(),
                    reason: String::new(),
                }),
                Some(r) if r.versions.is_empty() => out.push(IndexEntry {
                    name: name.clone(),
                    version: None,
                    state: r.state.as_str().into(),
                    reason: r.reason.clone(),
                }),
                Some(r) => {
                    for (v, (state, reason)) in &r.versions {
                        out.push(IndexEntry {
                            name: name.clone(),
                            version: Some(v.to_string()),
                            state: state.as_str().into(),
                            reason: reason.clone(),
                        });
                    }
                }
            }
        }
        if ready_only {
            out.retain(|e| e.state == "READY");
        }
        Ok(out)
    }
}
