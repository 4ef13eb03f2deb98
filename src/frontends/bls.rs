//! The in-process frontend: what a backend library's in-process inference API (the Python
//! backend's BLS, `pb_utils.InferenceRequest(...).exec()`) reaches. It is a client of the
//! `Server` facade like the HTTP and gRPC frontends: each request goes through the server's
//! usual entry (version selection, schedulers, batching, sequences, ensembles, statistics),
//! and its answers go to the backend's callbacks on the thread that answers (the target
//! model's instance, as Triton calls them on the thread that completes the response): no
//! hand-off between the answer and the backend. The callbacks are quick (the Python backend's
//! allocates in its shared memory and wakes its waiting thread). Loading and unloading run on
//! a small runtime of this frontend's own.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tritium_actors::{
    CorrelationId, Error, ErrorKind, InferRequest, InferResponse, ParamValue, Reply, RequestedOutput, SequenceFlags,
    Tensor, Trace,
};
use tritium_ffi::backend_api::{
    abi, set_inference_server, EventSink, HostError, HostParam, HostTensor, InProcessEvent, InProcessRequest,
    InferenceServer,
};

use super::http;
use crate::backends::triton::convert::host_param;
use crate::server::Server;

/// Makes `server` the one backends' in-process requests reach.
pub fn install(server: Arc<Server>) {
    set_inference_server(Arc::new(Bls { server }));
}

struct Bls {
    server: Arc<Server>,
}

/// The threads that run the backends' load and unload calls.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("bls")
            .enable_all()
            .build()
            .expect("the in-process frontend's runtime starts")
    })
}

impl InferenceServer for Bls {
    fn model_ready(&self, model: &str, version: Option<i64>) -> bool {
        self.server.model_ready(model, version)
    }

    fn model_decoupled(&self, model: &str, version: Option<i64>) -> Result<bool, HostError> {
        self.server.model(model, version).map(|m| m.handle.policy.decoupled).map_err(host_error)
    }

    fn infer(&self, request: InProcessRequest, sink: EventSink) -> Result<(), HostError> {
        let request = engine_request(request).map_err(host_error)?;
        // A model the server does not serve fails in `submit`, which says why.
        let decoupled = self.server.model(&request.model, request.version).is_ok_and(|m| m.handle.policy.decoupled);
        let answers = Arc::new(Answers {
            state: Mutex::new(State { sink: Some(sink), accepted: false, dropped: false }),
            decoupled,
            trace: request.trace.clone(),
        });
        let guard = Dropped(answers.clone());
        let reply = Reply::Call(Box::new(move |answer| guard.0.answer(answer)));
        match self.server.submit(request, reply) {
            Ok(_) => {
                let mut state = answers.lock();
                state.accepted = true;
                if state.dropped {
                    state.lost();
                }
                Ok(())
            }
            Err(e) => {
                // Refused: the request stays the backend's, and its callbacks are not called.
                answers.lock().sink = None;
                Err(host_error(e))
            }
        }
    }

    fn load_model(&self, model: &str, config: Option<String>, files: Vec<(String, Vec<u8>)>) -> Result<(), HostError> {
        let (server, model) = (self.server.clone(), model.to_string());
        wait(async move { server.load_model(&model, config, files).await })
    }

    /// As Triton's: the unload starts, and this returns once the model no longer takes requests
    /// (its instances finish what they hold afterwards); a model that is not loaded is no error.
    /// Only a refusal (the model control mode is not explicit) comes back.
    fn unload_model(&self, model: &str, dependents: bool) -> Result<(), HostError> {
        self.server.repository.check_explicit().map_err(host_error)?;
        let (server, name) = (self.server.clone(), model.to_string());
        let (tx, rx) = std::sync::mpsc::channel();
        runtime().spawn(async move {
            if let Err(e) = server.unload_model(&name, dependents).await {
                tracing::info!("unloading '{name}' for a backend: {}", e.message);
            }
            let _ = tx.send(());
        });
        let deadline = std::time::Instant::now() + UNLOAD_START;
        while self.server.model_ready(model, None) && std::time::Instant::now() < deadline {
            if rx.recv_timeout(std::time::Duration::from_millis(5)).is_ok() {
                break;
            }
        }
        Ok(())
    }

    fn is_live(&self) -> bool {
        self.server.is_live()
    }

    fn is_ready(&self) -> bool {
        self.server.is_ready()
    }

    fn metadata_json(&self) -> String {
        http::handlers::server_metadata_value(&self.server.metadata()).to_string()
    }

    fn model_metadata_json(&self, model: &str, version: Option<i64>) -> Result<String, HostError> {
        let m = self.server.model_metadata(model, version).map_err(host_error)?;
        Ok(http::handlers::model_metadata_value(&m).to_string())
    }

    fn model_config_json(&self, model: &str, version: Option<i64>) -> Result<String, HostError> {
        let m = self.server.model(model, version).map_err(host_error)?;
        Ok(crate::config::to_json(&m.config).to_string())
    }

    fn index_json(&self, ready_only: bool) -> Result<String, HostError> {
        let entries = self.server.repository_index(ready_only).map_err(host_error)?;
        Ok(http::handlers::index_value(entries).to_string())
    }

    /// Waits, as the statistics endpoints do, for requests answered early to be counted.
    fn statistics_json(&self, model: Option<&str>, version: Option<i64>) -> Result<String, HostError> {
        let (server, model) = (self.server.clone(), model.map(str::to_string));
        let stats = wait(async move { server.statistics(model.as_deref(), version).await })?;
        Ok(http::stats_json(stats).to_string())
    }

    fn model_batches(&self, model: &str, version: Option<i64>) -> Result<bool, HostError> {
        self.server.model(model, version).map(|m| m.config.max_batch_size > 0).map_err(host_error)
    }
}

/// One in-process request's way to the backend's callbacks.
struct Answers {
    state: Mutex<State>,
    decoupled: bool,
    trace: Option<Arc<Trace>>,
}

struct State {
    /// The backend's callbacks; `None` once the final event went out (or the server refused
    /// the request).
    sink: Option<EventSink>,
    /// The server took the request (`submit` returned).
    accepted: bool,
    /// The engine dropped its reply.
    dropped: bool,
}

impl State {
    /// The engine ended the request without a final answer: it fails, so the backend waiting
    /// for an answer always gets one.
    fn lost(&mut self) {
        if let Some(mut sink) = self.sink.take() {
            let message = "the server dropped the in-process request without a final response";
            sink(InProcessEvent::Failed(HostError { code: abi::ERROR_INTERNAL, message: message.into() }));
        }
    }
}

impl Answers {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands one of the engine's answers to the backend; nothing after the last.
    fn answer(&self, answer: tritium_actors::Result<InferResponse>) {
        if let (Some(t), Ok(r)) = (&self.trace, &answer) {
            t.set_version(r.version);
        }
        let (event, last) = event(answer, self.decoupled);
        if last {
            if let Some(t) = &self.trace {
                t.record(tritium_actors::trace::REQUEST_END);
            }
        }
        let mut state = self.lock();
        let Some(sink) = state.sink.as_mut() else { return };
        sink(event);
        if last {
            state.sink = None;
        }
    }
}

/// Held by the engine's reply: dropped with it, it fails a request the server took and ended
/// without a final answer (a request dropped before `submit` returns fails once it does).
struct Dropped(Arc<Answers>);

impl Drop for Dropped {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.dropped = true;
        if state.accepted {
            state.lost();
        }
    }
}

/// How long an unload for a backend may take to stop the model taking requests before the call
/// returns anyway.
const UNLOAD_START: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs a repository call on the frontend's runtime and waits for it on this (the backend's)
/// thread.
fn wait<T: Send + 'static>(
    call: impl std::future::Future<Output = tritium_actors::Result<T>> + Send + 'static,
) -> Result<T, HostError> {
    let (tx, rx) = std::sync::mpsc::channel();
    runtime().spawn(async move {
        let _ = tx.send(call.await);
    });
    rx.recv()
        .unwrap_or_else(|_| Err(Error::internal("the repository call ended without an answer")))
        .map_err(host_error)
}

/// An engine answer as the backend's event, and whether it is the request's last. A
/// decoupled model's final answer without outputs is the final flag alone, as Triton sends it.
fn event(answer: tritium_actors::Result<InferResponse>, decoupled: bool) -> (InProcessEvent, bool) {
    match answer {
        Err(e) => (InProcessEvent::Failed(host_error(e)), true),
        Ok(r) => {
            let is_final = r.is_final || !decoupled;
            if decoupled && is_final && r.outputs.is_empty() {
                return (InProcessEvent::Final, true);
            }
            let parameters = r.parameters.iter().map(|(k, v)| (k.clone(), host_param(v))).collect();
            let outputs = r.outputs.into_iter().map(host_tensor).collect();
            (InProcessEvent::Response { outputs, is_final, version: r.version, parameters }, is_final)
        }
    }
}

fn host_tensor(t: Tensor) -> HostTensor {
    HostTensor { name: t.name, datatype: t.datatype.as_str().to_string(), shape: t.shape, data: t.data }
}

/// The engine's error as Triton's code and text.
fn host_error(e: Error) -> HostError {
    let code = match e.kind {
        ErrorKind::InvalidArgument => abi::ERROR_INVALID_ARG,
        ErrorKind::NotFound => abi::ERROR_NOT_FOUND,
        ErrorKind::Unavailable => abi::ERROR_UNAVAILABLE,
        ErrorKind::Unsupported => abi::ERROR_UNSUPPORTED,
        ErrorKind::AlreadyExists => abi::ERROR_ALREADY_EXISTS,
        ErrorKind::Cancelled => abi::ERROR_CANCELLED,
        _ => abi::ERROR_INTERNAL,
    };
    HostError { code, message: e.message }
}

/// The backend's request as the engine's.
fn engine_request(r: InProcessRequest) -> tritium_actors::Result<InferRequest> {
    let InProcessRequest { model, version, priority, request: host, parent_trace } = r;
    let inputs = host
        .inputs
        .into_iter()
        .map(|t| {
            let datatype = tritium_actors::DataType::parse(&t.datatype).ok_or_else(|| {
                Error::invalid(format!("input '{}' has datatype '{}', which Tritium does not know", t.name, t.datatype))
            })?;
            Ok(Tensor { name: t.name, datatype, shape: t.shape, data: t.data })
        })
        .collect::<tritium_actors::Result<_>>()?;
    let mut request = InferRequest::new(model, inputs);
    request.id = host.id;
    request.version = version;
    request.priority = priority;
    request.timeout_us = host.timeout_us;
    request.outputs = host.outputs.into_iter().map(|name| RequestedOutput { name, class_count: 0 }).collect();
    request.parameters = host
        .parameters
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                HostParam::Str(s) => ParamValue::Str(s),
                HostParam::Int(i) => ParamValue::Int(i),
                HostParam::Bool(b) => ParamValue::Bool(b),
                HostParam::Double(d) => ParamValue::Double(d),
            };
            (k, v)
        })
        .collect();
    let id = match host.correlation_text {
        Some(s) if !s.is_empty() => Some(CorrelationId::Str(s)),
        _ => (host.correlation_id != 0).then_some(CorrelationId::U64(host.correlation_id)),
    };
    let (start, end) =
        (host.flags & abi::REQUEST_FLAG_SEQUENCE_START != 0, host.flags & abi::REQUEST_FLAG_SEQUENCE_END != 0);
    request.sequence = id.map(|id| SequenceFlags { id, start, end });
    // Made with its caller's trace: traced as a child of it, as Triton does.
    let parent = parent_trace.and_then(|p| p.trace.downcast::<tritium_actors::Trace>().ok());
    if let Some(parent) = parent {
        let child = parent.child(&request.model);
        child.record(tritium_actors::trace::REQUEST_START);
        child.set_request_id(&request.id);
        request.trace = Some(child);
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use tritium_ffi::backend_api::HostRequest;

    use super::*;

    #[test]
    fn a_backends_request_keeps_its_sequence_parameters_and_outputs() {
        let host = HostRequest {
            id: "r".into(),
            correlation_id: 7,
            flags: abi::REQUEST_FLAG_SEQUENCE_START | abi::REQUEST_FLAG_SEQUENCE_END,
            timeout_us: 5,
            inputs: vec![HostTensor {
                name: "I".into(),
                datatype: "INT32".into(),
                shape: vec![1],
                data: vec![0; 4].into(),
            }],
            outputs: vec!["O".into()],
            parameters: vec![("p".into(), HostParam::Bool(true))],
            ..Default::default()
        };
        let r = engine_request(InProcessRequest {
            model: "m".into(),
            version: Some(2),
            priority: 3,
            request: host,
            parent_trace: None,
        })
        .unwrap();
        assert_eq!((r.model.as_str(), r.version, r.priority, r.timeout_us, r.id.as_str()), ("m", Some(2), 3, 5, "r"));
        assert_eq!(r.sequence, Some(SequenceFlags { id: CorrelationId::U64(7), start: true, end: true }));
        assert_eq!(r.outputs[0].name, "O");
        assert_eq!(r.parameters.get("p"), Some(&ParamValue::Bool(true)));
        assert_eq!(r.inputs[0].datatype, tritium_actors::DataType::I32);
        let text = InProcessRequest {
            request: HostRequest { correlation_text: Some("s".into()), ..Default::default() },
            ..Default::default()
        };
        assert_eq!(engine_request(text).unwrap().sequence.unwrap().id, CorrelationId::Str("s".into()));
        assert_eq!(engine_request(InProcessRequest::default()).unwrap().sequence, None, "id 0 is no sequence");
    }

    #[test]
    fn a_decoupled_models_empty_final_answer_is_the_final_flag_alone() {
        let response = |outputs: Vec<Tensor>, is_final| InferResponse {
            id: String::new(),
            model: "m".into(),
            version: 1,
            outputs,
            parameters: Default::default(),
            is_final,
            times: None,
        };
        let t =
            Tensor { name: "O".into(), datatype: tritium_actors::DataType::U8, shape: vec![1], data: vec![1].into() };
        assert_eq!(event(Ok(response(vec![], true)), true), (InProcessEvent::Final, true));
        assert!(matches!(
            event(Ok(response(vec![t.clone()], false)), true),
            (InProcessEvent::Response { is_final: false, .. }, false)
        ));
        // A model that is not decoupled answers once, and that answer is final.
        assert!(matches!(
            event(Ok(response(vec![t], false)), false),
            (InProcessEvent::Response { is_final: true, .. }, true)
        ));
        let (e, last) = event(Err(Error::invalid("bad")), false);
        assert!(last);
        assert_eq!(e, InProcessEvent::Failed(HostError { code: abi::ERROR_INVALID_ARG, message: "bad".into() }));
    }
}
