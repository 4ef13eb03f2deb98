//! The server as the frontends see it: health, metadata, inference, statistics and the
//! repository API, over the router and the repository manager. Frontends call this and
//! nothing below it.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use tritium_actors::{DataType, Error, InferRequest, InferResponse, Reply, Result, StatsSnapshot};

use crate::drain::Drain;
use crate::observe::logging::LogView;
use crate::observe::trace::{TraceValue, TraceView};
use crate::observe::SettingValue;
use crate::repository::retire::{self, Pass};
use crate::repository::RepositoryManager;
pub use crate::repository::{IndexEntry, LoadedModel};

/// The `name` server metadata reports unless `--id` says otherwise (Triton's default).
pub const DEFAULT_SERVER_ID: &str = "triton";
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The protocol extensions this build serves, as `GET /v2` lists them.
pub const EXTENSIONS: &[&str] = &[
    "classification",
    "sequence",
    "model_repository",
    "system_shared_memory",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
];

pub struct ServerMetadata {
    pub name: String,
    pub version: String,
    pub extensions: Vec<&'static str>,
}

pub struct TensorMetadata {
    pub name: String,
    pub datatype: DataType,
    /// With -1 for the batch dimension when the model batches.
    pub shape: Vec<i64>,
}

pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

pub struct ModelStatistics {
    pub name: String,
    pub version: String,
    pub stats: StatsSnapshot,
}

pub struct Server {
    pub repository: Arc<RepositoryManager>,
    /// `--id`: the `name` of server metadata.
    id: String,
    shutting_down: AtomicBool,
    /// The sequence-aware drain (see `drain`), shared with the metrics endpoint.
    pub drain: Arc<Drain>,
}

impl Server {
    pub fn new(repository: Arc<RepositoryManager>, id: String) -> Self {
        Server { repository, id, shutting_down: AtomicBool::new(false), drain: Arc::default() }
    }

    /// After this, the server is not ready and serves only the turns of its live sequences.
    pub fn begin_drain(&self) {
        self.drain.begin();
    }

    /// Sequences the server holds (with a slot or waiting for one), over every model.
    pub fn live_sequences(&self) -> u64 {
        crate::drain::live_sequences(&self.repository)
    }

    /// After this, the server is not ready and refuses new inference requests.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Relaxed);
    }

    pub fn metadata(&self) -> ServerMetadata {
        ServerMetadata { name: self.id.clone(), version: SERVER_VERSION.into(), extensions: EXTENSIONS.to_vec() }
    }

    pub fn is_live(&self) -> bool {
        true
    }

    pub fn is_ready(&self) -> bool {
        !self.shutting_down.load(Relaxed) && !self.drain.is_draining() && self.repository.is_ready()
    }

    /// The model that serves `name` (and `version`). Before the start-up loads are done a model
    /// may be missing only for now: that is UNAVAILABLE, which a load balancer retries on another
    /// replica (Triton opens no endpoint until then).
    pub fn model(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        self.repository.router().get(name, version).map_err(|e| {
            if self.repository.startup_done() {
                e
            } else {
                Error::unavailable(format!("Server is starting: the start-up model loads are not done ({})", e.message))
            }
        })
    }

    /// Every ready model version.
    pub fn models(&self) -> Vec<Arc<LoadedModel>> {
        self.repository.router().all()
    }

    /// Ready when its instances live and, for an ensemble, every composing model is ready (a
    /// name that is unknown or ambiguous is not ready).
    pub fn model_ready(&self, name: &str, version: Option<i64>) -> bool {
        self.model(name, version).is_ok_and(|m| self.loaded_ready(&m, 0))
    }

    fn loaded_ready(&self, m: &LoadedModel, depth: usize) -> bool {
        let router = self.repository.router();
        let composing_ready = |(n, v): &(String, Option<i64>)| {
            router
                .resolve_in(&m.namespace, n)
                .and_then(|k| router.get_in(&k, *v))
                .is_ok_and(|c| self.loaded_ready(&c, depth + 1))
        };
        m.handle.is_ready() && depth < 8 && m.composing.iter().all(composing_ready)
    }

    pub fn model_metadata(&self, name: &str, version: Option<i64>) -> Result<ModelMetadata> {
        let model = self.model(name, version)?;
        let versions = self.repository.router().current(&model.key()).keys().map(|v| v.to_string()).collect();
        let policy = &model.handle.policy;
        let shape = |dims: &[i64]| -> Vec<i64> {
            if policy.batches() {
                std::iter::once(-1).chain(dims.iter().copied()).collect()
            } else {
                dims.to_vec()
            }
        };
        let tensors = |specs: &[tritium_actors::IoSpec]| {
            specs
                .iter()
                .map(|s| TensorMetadata { name: s.name.clone(), datatype: s.datatype, shape: shape(&s.dims) })
                .collect()
        };
        Ok(ModelMetadata {
            name: name.to_string(),
            versions,
            platform: model.platform(),
            inputs: tensors(&policy.inputs),
            outputs: tensors(&policy.outputs),
        })
    }

    /// Resolves the request's model and version, validates and queues it.
    pub fn submit(&self, request: InferRequest, reply: Reply) -> Result<Arc<LoadedModel>> {
        self.submit_with(request, |_| reply)
    }

    /// As `submit`, with the reply made for the model the request resolved to (a oneshot for a
    /// model that answers once, a stream for a decoupled one).
    pub fn submit_with(
        &self,
        request: InferRequest,
        reply: impl FnOnce(&LoadedModel) -> Reply,
    ) -> Result<Arc<LoadedModel>> {
        self.admit(&request)?;
        let model = self.enter(self.model(&request.model, request.version)?, &request)?;
        let reply = reply(&model);
        model.handle.submit(request, reply)?;
        Ok(model.model().clone())
    }

    /// A pass to submit `request` to `model`, the version its look-up found; if that version was
    /// replaced since, to the one that replaced it (see `repository::retire`).
    fn enter(&self, model: Arc<LoadedModel>, request: &InferRequest) -> Result<Pass> {
        retire::enter(model, || self.model(&request.model, request.version))
    }

    /// A request is refused while the server shuts down or drains.
    fn admit(&self, request: &InferRequest) -> Result<()> {
        if self.shutting_down.load(Relaxed) {
            return Err(Error::unavailable("Server is shutting down: new inference requests are refused"));
        }
        self.drain.admit(request)
    }

    /// Runs a request whose answer the caller awaits at once on `model`, the version
    /// `Server::model` gave the frontend for it (one look-up of the router per request, two only
    /// when that version was replaced meanwhile): validated and queued, or, a lone request on a
    /// thread that serves one client alone (`here`: `frontends::alone`), run on this thread
    /// (`ModelHandle::submit_here`).
    pub async fn infer_on(
        &self,
        model: Arc<LoadedModel>,
        request: InferRequest,
        here: bool,
    ) -> Result<(Arc<LoadedModel>, InferResponse)> {
        self.admit(&request)?;
        let (reply, rx) = Reply::once();
        let model = {
            // Held while the request is queued (or run here), not while its answer is awaited.
            let entered = self.enter(model, &request)?;
            if here {
                entered.handle.submit_here(request, reply)?;
            } else {
                entered.handle.submit(request, reply)?;
            }
            entered.model().clone()
        };
        let response =
            rx.await.map_err(|_| Error::internal(format!("model '{}' dropped the request", model.name())))??;
        Ok((model, response))
    }

    /// Statistics of one version, every version of a model, or (name = None) every model,
    /// including every request whose client has its answer (see `ModelStats::settled`).
    pub async fn statistics(&self, name: Option<&str>, version: Option<i64>) -> Result<Vec<ModelStatistics>> {
        let router = self.repository.router();
        // Triton's answer for a model (or version) it cannot give statistics of.
        let unavailable = |n: &str| Error::invalid(format!("requested model '{n}' is not available"));
        let models: Vec<Arc<LoadedModel>> = match (name, version) {
            (Some(n), Some(_)) => vec![router.get(n, version).map_err(|_| unavailable(n))?],
            (Some(n), None) => {
                let all = router.all_versions(n).unwrap_or_default();
                if all.is_empty() {
                    return Err(unavailable(n));
                }
                all
            }
            (None, _) => router.all(),
        };
        futures::future::join_all(models.iter().map(|m| m.handle.stats.settled())).await;
        Ok(models
            .into_iter()
            .map(|m| ModelStatistics {
                name: m.name().to_string(),
                version: m.version().to_string(),
                stats: m.handle.stats.snapshot(),
            })
            .collect())
    }

    /// The logging extension: applies `changes` (none to read) and answers the settings.
    pub fn log_settings(&self, changes: &[(String, SettingValue)]) -> Result<LogView> {
        crate::observe::logging::settings().update(changes)
    }

    /// The trace extension, for the global settings (`model` = None) or a ready model's.
    pub fn trace_settings(&self, model: Option<&str>, changes: &[(String, TraceValue)]) -> Result<TraceView> {
        if let Some(m) = model {
            if !self.model_ready(m, None) {
                return Err(Error::invalid(format!("Request for unknown model : {m}")));
            }
        }
        crate::observe::trace::manager().update(model, changes)
    }

    pub fn repository_index(&self, ready_only: bool) -> Result<Vec<IndexEntry>> {
        self.repository.index(ready_only)
    }

    /// Loads a model; `files` are Triton's `file:<path>` parameters (name, content).
    pub async fn load_model(
        &self,
        name: &str,
        config_json: Option<String>,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<()> {
        self.repository.api_load(name, config_json, files).await
    }

    pub async fn unload_model(&self, name: &str, unload_dependents: bool) -> Result<()> {
        let _ = unload_dependents; // no model depends on another until ensembles land
        self.repository.api_unload(name).await
    }
}
