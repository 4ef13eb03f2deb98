//! The model repository manager: which models exist on disk, their states (READY,
//! UNAVAILABLE, LOADING, UNLOADING) and reasons, loading and unloading them under the control
//! modes none, explicit and poll, and keeping the router's view in step. A reload builds the
//! new version beside the old one, which serves until the new one is ready, then drains.

pub mod load;
mod model;
pub mod overrides;
pub mod registered;
pub mod router;
pub mod scan;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};

use actix::ArbiterHandle;
use dashmap::DashMap;
use load::LoadFailure;
pub use model::{IndexEntry, LoadedModel};
use parking_lot::Mutex;
pub use router::Router;
use scan::{fingerprint, ModelDir};
use tritium_actors::stats::StatsObserver;
use tritium_actors::{Error, ModelHandle, Result};

use crate::backends::BackendEnv;

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
    pub repositories: Vec<PathBuf>,
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
}

impl Default for RepositoryOptions {
    fn default() -> Self {
        RepositoryOptions {
            repositories: Vec::new(),
            mode: ControlMode::None,
            strict_config: false,
            strict_readiness: true,
            backend_env: BackendEnv::default(),
            config_name: None,
            load_threads: 4,
            load_retries: 0,
            host_cores: BTreeMap::new(),
        }
    }
}

pub struct RepositoryManager {
    opts: RepositoryOptions,
    engine: ArbiterHandle,
    router: Arc<Router>,
    records: Mutex<BTreeMap<String, Record>>,
    /// Serializes load and unload of one model.
    locks: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
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
/// (model, version, decoupled).
pub type ObserverFactory = Box<dyn Fn(&str, i64, bool) -> Option<Box<dyn StatsObserver>> + Send + Sync>;

impl RepositoryManager {
    pub fn new(opts: RepositoryOptions, engine: ArbiterHandle) -> Self {
        RepositoryManager {
            load_permits: tokio::sync::Semaphore::new(opts.load_threads.max(1)),
            registered: registered::Registered::default(),
            opts,
            engine,
            router: Arc::new(Router::default()),
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
    fn observed(&self, handle: ModelHandle, name: &str, version: i64, decoupled: bool) -> ModelHandle {
        if let Some(observer) = self.observers.get().and_then(|make| make(name, version, decoupled)) {
            handle.stats.set_observer(observer);
        }
        handle
    }

    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The model folders of the command line's repositories and the registered ones.
    fn scan(&self) -> (BTreeMap<String, ModelDir>, BTreeMap<String, String>) {
        self.registered.scan_with(&self.opts.repositories)
    }

    /// Registers a repository while running; `rename` serves one of its folders under another
    /// name (Triton's repository registration, as SageMaker's multi-model load uses it).
    pub fn register_repository(&self, path: &std::path::Path, rename: Option<(String, String)>) -> Result<()> {
        self.registered.register(path, rename)
    }

    pub fn unregister_repository(&self, path: &std::path::Path) -> Result<()> {
        self.registered.unregister(path)
    }

    /// Ready once the start-up loads are done and (with strict readiness) every model that
    /// should be loaded is READY.
    pub fn is_ready(&self) -> bool {
        if !self.startup_done.load(Relaxed) {
            return false;
        }
        if !self.opts.strict_readiness {
            return true;
        }
        self.records
            .lock()
            .values()
            .filter(|r| r.wanted)
            .all(|r| !r.versions.is_empty() && r.versions.values().all(|(s, _)| *s == ModelState::Ready))
    }

    fn lock_for(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks.entry(name.to_string()).or_default().clone()
    }

    fn set_record(&self, name: &str, f: impl FnOnce(&mut Record)) {
        let mut records = self.records.lock();
        let r = records.entry(name.to_string()).or_insert_with(|| Record {
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
        for (name, reason) in errors {
            tracing::error!("failed to load '{name}': {reason}");
            failed.push((name.clone(), reason.clone()));
            self.set_record(&name, |r| {
                r.state = ModelState::Unavailable;
                r.reason = reason;
                r.wanted = true;
            });
        }
        let names: Vec<String> = match self.opts.mode {
            ControlMode::Explicit if !load_models.iter().any(|m| m == "*") => load_models.to_vec(),
            _ => found.keys().cloned().collect(),
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

    fn check_explicit(&self) -> Result<()> {
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

    /// Loads (or reloads) a model; the versions it had keep serving until the new ones are
    /// ready, then drain. With `files` (Triton's `file:` parameters) the model is loaded from
    /// those files and `config_json` instead of its folder. A failure answers Triton's text
    /// ("failed to load '<m>', failed to poll from model repository" or "load failed for model
    /// '<m>': ...") followed by the cause, which the index shows as the reason. A failed load of
    /// a folder is tried again `--model-load-retry-count` times.
    pub async fn load(&self, name: &str, config_json: Option<String>, files: Vec<(String, Vec<u8>)>) -> Result<()> {
        let lock = self.lock_for(name);
        let _guard = lock.lock().await;
        let (found, errors) = self.scan();
        let result = if !files.is_empty() {
            // Model files can be large: write them off the event loop.
            let (model, has_config) = (name.to_string(), config_json.is_some());
            let written = tokio::task::spawn_blocking(move || overrides::materialize(&model, has_config, &files))
                .await
                .unwrap_or_else(|e| Err(Error::internal(format!("writing the files of model '{name}' panicked: {e}"))));
            match written {
                Ok(o) => self.load_dir(o.dir, config_json, Some(o.keep)).await,
                Err(e) => Err(LoadFailure::poll(e)),
            }
        } else {
            match (found.get(name), errors.get(name)) {
                (_, Some(reason)) => Err(LoadFailure::poll(Error::invalid(reason.clone()))),
                // Triton's answer (500) for a model no repository has; nothing to record.
                (None, None) => {
                    return Err(Error::internal(format!(
                        "failed to load '{name}', failed to poll from model repository"
                    )))
                }
                (Some(dir), None) => {
                    let mut attempt = 0;
                    loop {
                        match self.load_dir(dir.clone(), config_json.clone(), None).await {
                            Err(f) if attempt < self.opts.load_retries => {
                                attempt += 1;
                                tracing::warn!(
                                    "failed to load '{name}': {}; retrying ({attempt} of {})",
                                    f.cause.message,
                                    self.opts.load_retries
                                );
                            }
                            other => break other,
                        }
                    }
                }
            }
        };
        if let Err(f) = &result {
            let reason = f.cause.message.clone();
            self.set_record(name, |r| {
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
        result.map_err(|f| f.into_error(name))
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
        let name = dir.name.clone();
        let fp = fingerprint(&dir.path);
        self.set_record(&name, |r| {
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
        tracing::info!("loading '{name}'");
        let prepared =
            tokio::task::spawn_blocking(move || load::prepare(&dir, config_json.as_deref(), &settings, router))
                .await
                .map_err(|e| {
                    LoadFailure::load(None, Error::internal(format!("loading model '{name}' panicked: {e}")))
                })??;
        drop(permit);
        let latest = prepared.versions.last().map(|(p, _)| p.version);
        let composing = match &prepared.graph {
            Some(graph) => {
                self.load_composing(graph).await.map_err(|e| LoadFailure::load(latest, e))?;
                let router = self.router.clone();
                graph
                    .check_models(|m, v| router.get(m, v).map(|l| l.handle.policy.clone()))
                    .map_err(|e| LoadFailure::load(latest, e))?;
                graph.composing()
            }
            None => Vec::new(),
        };
        let _permit = self.acquire_load_permit().await?;
        let mut started: Vec<(i64, Arc<LoadedModel>)> = Vec::new();
        for (policy, factory) in prepared.versions {
            let version = policy.version;
            self.set_record(&name, |r| {
                r.versions.entry(version).or_insert((ModelState::Loading, String::new()));
            });
            let decoupled = policy.decoupled;
            match ModelHandle::load(&self.engine, policy, factory).await {
                Ok(handle) => started.push((
                    version,
                    Arc::new(LoadedModel {
                        handle: self.observed(handle, &name, version, decoupled),
                        config: prepared.config.clone(),
                        labels: prepared.labels.clone(),
                        composing: composing.clone(),
                        steps: prepared.steps.get(&version).cloned(),
                        files: files.clone(),
                    }),
                )),
                Err(e) => {
                    for (_, m) in &started {
                        m.handle.unload().await;
                    }
                    self.set_record(&name, |r| {
                        r.versions.insert(version, (ModelState::Unavailable, e.message.clone()));
                    });
                    return Err(LoadFailure::load(Some(version), e));
                }
            }
        }
        let new_versions: BTreeSet<i64> = started.iter().map(|(v, _)| *v).collect();
        let old = self.router.current(&name);
        self.router.set(&name, started.into_iter().collect());
        self.set_record(&name, |r| {
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
        tracing::info!("successfully loaded '{name}' version(s) {new_versions:?}");
        // The replaced handles finish what they hold, then stop.
        for (_, m) in old {
            m.handle.unload().await;
        }
        Ok(())
    }

    /// Loads the composing models of an ensemble that are not loaded yet (as Triton does). A
    /// composing model that is itself an ensemble must be loaded first.
    async fn load_composing(&self, graph: &crate::ensemble::Graph) -> Result<()> {
        for (model, version) in graph.composing() {
            if self.router.get(&model, version).is_ok() {
                continue;
            }
            // A load of it may be running (at startup every model loads at once): wait for it.
            drop(self.lock_for(&model).lock().await);
            if self.router.get(&model, version).is_ok() {
                continue;
            }
            let (found, _) = self.scan();
            if let Some(dir) = found.get(&model) {
                let config_file = load::config_path(&dir.path, self.opts.config_name.as_deref());
                let text = std::fs::read_to_string(config_file).unwrap_or_default();
                if text.contains("ensemble_scheduling") {
                    return Err(Error::invalid(format!(
                        "ensemble '{}': composing model '{model}' is an ensemble that is not loaded; load it first",
                        graph.name
                    )));
                }
            }
            Box::pin(self.load(&model, None, Vec::new())).await.map_err(|e| {
                Error::new(
                    e.kind,
                    format!("ensemble '{}': composing model '{model}' failed to load: {}", graph.name, e.message),
                )
            })?;
        }
        Ok(())
    }

    /// Stops taking requests for a model, lets in-flight ones finish, then stops its actors.
    pub async fn unload(&self, name: &str) -> Result<()> {
        let lock = self.lock_for(name);
        let _guard = lock.lock().await;
        let known = self.records.lock().contains_key(name);
        let (found, _) = self.scan();
        if !known && !found.contains_key(name) {
            // Triton answers 200 to unloading a model it does not have.
            return Ok(());
        }
        let old = self.router.current(name);
        self.router.set(name, BTreeMap::new());
        self.set_record(name, |r| {
            r.wanted = false;
            for v in old.keys() {
                r.versions.insert(*v, (ModelState::Unloading, String::new()));
            }
        });
        for m in old.values() {
            m.handle.unload().await;
        }
        self.set_record(name, |r| {
            r.state = ModelState::Unavailable;
            r.reason = "unloaded".into();
            for v in r.versions.values_mut() {
                *v = (ModelState::Unavailable, "unloaded".into());
            }
        });
        tracing::info!("successfully unloaded '{name}'");
        Ok(())
    }

    /// Poll mode: load new models, reload changed ones, unload removed ones.
    pub async fn poll_once(&self) {
        let (found, errors) = self.scan();
        let mut todo: Vec<(String, bool)> = Vec::new();
        {
            let records = self.records.lock();
            for (name, dir) in &found {
                let changed = records.get(name).map(|r| r.fingerprint != Some(fingerprint(&dir.path))).unwrap_or(true);
                if changed {
                    todo.push((name.clone(), true));
                }
            }
            for (name, r) in records.iter() {
                if !found.contains_key(name) && !errors.contains_key(name) && r.wanted {
                    todo.push((name.clone(), false));
                }
            }
        }
        for (name, load) in todo {
            let result = if load { self.load(&name, None, Vec::new()).await } else { self.unload(&name).await };
            if let Err(e) = result {
                tracing::error!("poll: '{name}': {e}");
            }
        }
    }

    /// Unloads every model (server shutdown).
    pub async fn unload_all(&self) {
        let names: Vec<String> = self.records.lock().keys().cloned().collect();
        let unloads = names.iter().map(|n| self.unload(n));
        futures::future::join_all(unloads).await;
    }

    /// `POST /v2/repository/index`: every model on disk or known, with its versions' states.
    pub fn index(&self, ready_only: bool) -> Vec<IndexEntry> {
        let (found, _) = self.scan();
        let records = self.records.lock();
        let names: BTreeSet<&String> = found.keys().chain(records.keys()).collect();
        let mut out = Vec::new();
        for name in names {
            match records.get(name) {
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
        out
    }
}
