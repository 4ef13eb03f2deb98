//! The in-process API driven as a backend drives it: a request built through the exported
//! functions, a fake server answering it, and callbacks written like the Python backend's.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::request::*;
use super::request_more::*;
use super::response::*;
use super::*;
use crate::backend_api::host::HostParam;

/// What the callbacks saw: (outputs as (name, datatype, shape, bytes), error, flags).
type Seen = (Vec<(String, u32, Vec<i64>, Vec<u8>)>, Option<String>, u32);

static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
static RELEASED: AtomicUsize = AtomicUsize::new(0);
static BUFFERS_FREED: AtomicUsize = AtomicUsize::new(0);
/// Tests share the registered server; one runs at a time.
static SERIAL: Mutex<()> = Mutex::new(());

unsafe extern "C" fn alloc(
    _a: *mut ResponseAllocator,
    _name: *const c_char,
    size: usize,
    _t: MemoryType,
    _id: i64,
    _userp: *mut c_void,
    buffer: *mut *mut c_void,
    buffer_userp: *mut *mut c_void,
    actual: *mut MemoryType,
    actual_id: *mut i64,
) -> *mut Error {
    let b = Box::into_raw(vec![0u8; size].into_boxed_slice());
    // SAFETY: out-parameters from the host.
    unsafe {
        *buffer = b.cast();
        *buffer_userp = b.cast();
        *actual = MEMORY_CPU;
        *actual_id = 0;
    }
    std::ptr::null_mut()
}

unsafe extern "C" fn release_buffer(
    _a: *mut ResponseAllocator,
    buffer: *mut c_void,
    _u: *mut c_void,
    size: usize,
    _t: MemoryType,
    _id: i64,
) -> *mut Error {
    // SAFETY: made by `alloc` with this size.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(buffer.cast::<u8>(), size)) });
    BUFFERS_FREED.fetch_add(1, Ordering::SeqCst);
    std::ptr::null_mut()
}

unsafe extern "C" fn on_response(response: *mut InferenceResponse, flags: u32, _userp: *mut c_void) {
    let mut outputs = Vec::new();
    let mut error = None;
    if !response.is_null() {
        // SAFETY: the host's response, read through the exported functions as a backend does.
        unsafe {
            let e = TRITONSERVER_InferenceResponseError(response);
            if !e.is_null() {
                error = Some(
                    CStr::from_ptr(crate::backend_api::error::TRITONSERVER_ErrorMessage(e))
                        .to_string_lossy()
                        .into_owned(),
                );
                crate::backend_api::error::TRITONSERVER_ErrorDelete(e);
            }
            let mut count = 0u32;
            assert!(TRITONSERVER_InferenceResponseOutputCount(response, &mut count).is_null());
            for i in 0..count {
                let (mut name, mut dt, mut shape, mut dims) = (std::ptr::null(), 0u32, std::ptr::null(), 0u64);
                let (mut base, mut size, mut mt, mut mid, mut up) =
                    (std::ptr::null(), 0usize, 0u32, 0i64, std::ptr::null_mut());
                let e = TRITONSERVER_InferenceResponseOutput(
                    response, i, &mut name, &mut dt, &mut shape, &mut dims, &mut base, &mut size, &mut mt, &mut mid,
                    &mut up,
                );
                assert!(e.is_null());
                outputs.push((
                    CStr::from_ptr(name).to_string_lossy().into_owned(),
                    dt,
                    std::slice::from_raw_parts(shape, dims as usize).to_vec(),
                    std::slice::from_raw_parts(base.cast::<u8>(), size).to_vec(),
                ));
            }
            assert!(TRITONSERVER_InferenceResponseDelete(response).is_null());
        }
    }
    SEEN.lock().unwrap().push((outputs, error, flags));
}

unsafe extern "C" fn on_release(request: *mut InferenceRequest, flags: u32, _userp: *mut c_void) {
    assert_eq!(flags, REQUEST_RELEASE_ALL);
    // SAFETY: the request is ours again; deleted once, as the Python backend does.
    assert!(unsafe { TRITONSERVER_InferenceRequestDelete(request) }.is_null());
    RELEASED.fetch_add(1, Ordering::SeqCst);
}

/// Answers with the events it was given, after recording the request.
struct Fake {
    got: Mutex<Vec<InProcessRequest>>,
    answer: Mutex<Vec<InProcessEvent>>,
    refuse: Option<HostError>,
    /// The sink of a request answered without a final event, kept until the test drops it.
    kept: Mutex<Vec<EventSink>>,
}

impl InferenceServer for Fake {
    fn model_ready(&self, model: &str, _v: Option<i64>) -> bool {
        model == "add_sub"
    }
    fn model_decoupled(&self, model: &str, _v: Option<i64>) -> Result<bool, HostError> {
        match model {
            "add_sub" => Ok(false),
            _ => Err(HostError { code: ERROR_NOT_FOUND, message: format!("unknown model '{model}'") }),
        }
    }
    fn infer(&self, request: InProcessRequest, mut sink: EventSink) -> Result<(), HostError> {
        if let Some(e) = &self.refuse {
            return Err(e.clone());
        }
        self.got.lock().unwrap().push(request);
        let events = std::mem::take(&mut *self.answer.lock().unwrap());
        let ends = events.iter().any(|e| !matches!(e, InProcessEvent::Response { is_final: false, .. }));
        // Answered from another thread, as the engine does.
        let sink = std::thread::spawn(move || {
            events.into_iter().for_each(&mut sink);
            sink
        })
        .join()
        .unwrap();
        if !ends {
            self.kept.lock().unwrap().push(sink);
        }
        Ok(())
    }
    fn load_model(&self, _m: &str, config: Option<String>, files: Vec<(String, Vec<u8>)>) -> Result<(), HostError> {
        assert_eq!(config.as_deref(), Some("{}"));
        assert_eq!(files, vec![("file:1/model.py".to_string(), b"x".to_vec())]);
        Ok(())
    }
    fn unload_model(&self, _m: &str, _d: bool) -> Result<(), HostError> {
        Ok(())
    }
    fn is_live(&self) -> bool {
        true
    }
    fn is_ready(&self) -> bool {
        true
    }
    fn metadata_json(&self) -> String {
        r#"{"name":"fake"}"#.into()
    }
    fn model_metadata_json(&self, model: &str, _v: Option<i64>) -> Result<String, HostError> {
        Ok(format!(r#"{{"name":"{model}"}}"#))
    }
    fn model_config_json(&self, model: &str, _v: Option<i64>) -> Result<String, HostError> {
        Ok(format!(r#"{{"name":"{model}","max_batch_size":8}}"#))
    }
    fn index_json(&self, _ready_only: bool) -> Result<String, HostError> {
        Ok("[]".into())
    }
    fn statistics_json(&self, _m: Option<&str>, _v: Option<i64>) -> Result<String, HostError> {
        Ok(r#"{"model_stats":[]}"#.into())
    }
    fn model_batches(&self, model: &str, _v: Option<i64>) -> Result<bool, HostError> {
        self.model_decoupled(model, None).map(|_| true)
    }
}

fn server_handle() -> *mut Server {
    (&crate::backend_api::model::SERVER as *const Server).cast_mut()
}

/// Builds an add_sub request with one FP32 input (in two pieces), the callbacks set.
fn request(allocator: *mut ResponseAllocator) -> *mut InferenceRequest {
    let r = build("add_sub");
    let data = [1f32, 2.0, 3.0, 4.0].map(f32::to_le_bytes).concat();
    // SAFETY: a live request and valid pointers, as a backend calls these.
    unsafe {
        assert!(TRITONSERVER_InferenceRequestSetId(r, c"r1".as_ptr()).is_null());
        assert!(TRITONSERVER_InferenceRequestSetCorrelationId(r, 42).is_null());
        assert!(TRITONSERVER_InferenceRequestSetFlags(r, REQUEST_FLAG_SEQUENCE_START).is_null());
        assert!(TRITONSERVER_InferenceRequestSetIntParameter(r, c"k".as_ptr(), 7).is_null());
        assert!(TRITONSERVER_InferenceRequestAddInput(r, c"INPUT0".as_ptr(), 11, [4i64].as_ptr(), 1).is_null());
        let again = TRITONSERVER_InferenceRequestAddInput(r, c"INPUT0".as_ptr(), 11, [4i64].as_ptr(), 1);
        assert!(!again.is_null(), "a second input of the same name is refused");
        crate::backend_api::error::TRITONSERVER_ErrorDelete(again);
        for half in data.chunks(8) {
            let e = TRITONSERVER_InferenceRequestAppendInputData(
                r,
                c"INPUT0".as_ptr(),
                half.as_ptr().cast(),
                8,
                MEMORY_CPU,
                0,
            );
            assert!(e.is_null());
        }
        assert!(TRITONSERVER_InferenceRequestAddRequestedOutput(r, c"OUTPUT0".as_ptr()).is_null());
        assert!(TRITONSERVER_InferenceRequestSetReleaseCallback(r, Some(on_release), std::ptr::null_mut()).is_null());
        let e = TRITONSERVER_InferenceRequestSetResponseCallback(
            r,
            allocator,
            std::ptr::null_mut(),
            Some(on_response),
            std::ptr::null_mut(),
        );
        assert!(e.is_null());
    }
    r
}

fn allocator() -> *mut ResponseAllocator {
    let mut a = std::ptr::null_mut();
    // SAFETY: a valid out-parameter and callbacks.
    assert!(unsafe { TRITONSERVER_ResponseAllocatorNew(&mut a, Some(alloc), Some(release_buffer), None) }.is_null());
    a
}

fn reset() {
    SEEN.lock().unwrap().clear();
    RELEASED.store(0, Ordering::SeqCst);
    BUFFERS_FREED.store(0, Ordering::SeqCst);
}

#[test]
fn a_request_reaches_the_server_and_its_response_comes_back_in_the_allocators_buffers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    reset();
    let out =
        HostTensor { name: "OUTPUT0".into(), datatype: "FP32".into(), shape: vec![4], data: vec![9u8; 16].into() };
    let fake = Arc::new(Fake {
        got: Mutex::default(),
        answer: Mutex::new(vec![InProcessEvent::Response {
            outputs: vec![out],
            is_final: true,
            version: 1,
            parameters: Vec::new(),
        }]),
        refuse: None,
        kept: Mutex::default(),
    });
    set_inference_server(fake.clone());
    let a = allocator();
    let r = request(a);
    // SAFETY: the server handle and a complete request.
    assert!(unsafe { TRITONSERVER_ServerInferAsync(server_handle(), r, std::ptr::null_mut()) }.is_null());
    let got = fake.got.lock().unwrap().remove(0);
    assert_eq!((got.model.as_str(), got.version), ("add_sub", None));
    assert_eq!(got.request.correlation_id, 42);
    assert_eq!(got.request.flags, REQUEST_FLAG_SEQUENCE_START);
    assert_eq!(got.request.outputs, vec!["OUTPUT0".to_string()]);
    assert_eq!(got.request.parameters, vec![("k".to_string(), HostParam::Int(7))]);
    assert_eq!(got.request.inputs[0].data.as_ref(), [1f32, 2.0, 3.0, 4.0].map(f32::to_le_bytes).concat());
    assert_eq!(got.request.inputs[0].datatype, "FP32");
    let seen = SEEN.lock().unwrap().clone();
    assert_eq!(seen, vec![(vec![("OUTPUT0".to_string(), 11, vec![4], vec![9u8; 16])], None, RESPONSE_COMPLETE_FINAL)]);
    assert_eq!(RELEASED.load(Ordering::SeqCst), 1, "released once, after the final response");
    assert_eq!(BUFFERS_FREED.load(Ordering::SeqCst), 1, "the buffer went back through the allocator");
    // SAFETY: the allocator made above, deleted once.
    unsafe { TRITONSERVER_ResponseAllocatorDelete(a) };
}

#[test]
fn decoupled_responses_end_with_one_final_flag_and_failures_reach_the_callback() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    reset();
    let out = |v: u8| HostTensor { name: "OUT".into(), datatype: "UINT8".into(), shape: vec![1], data: vec![v].into() };
    let fake = Arc::new(Fake {
        got: Mutex::default(),
        answer: Mutex::new(vec![
            InProcessEvent::Response { outputs: vec![out(1)], is_final: false, version: 1, parameters: Vec::new() },
            InProcessEvent::Response { outputs: vec![out(2)], is_final: false, version: 1, parameters: Vec::new() },
            InProcessEvent::Final,
            InProcessEvent::Response { outputs: vec![out(3)], is_final: false, version: 1, parameters: Vec::new() },
        ]),
        refuse: None,
        kept: Mutex::default(),
    });
    set_inference_server(fake.clone());
    let a = allocator();
    // SAFETY: the server handle and a complete request.
    assert!(unsafe { TRITONSERVER_ServerInferAsync(server_handle(), request(a), std::ptr::null_mut()) }.is_null());
    let flags: Vec<u32> = SEEN.lock().unwrap().iter().map(|s| s.2).collect();
    assert_eq!(flags, vec![0, 0, RESPONSE_COMPLETE_FINAL], "nothing after the final flag");
    assert!(SEEN.lock().unwrap()[2].0.is_empty(), "the final flag alone comes with a null response");

    // A server that drops the request without a final answer: the backend still gets one.
    reset();
    *fake.answer.lock().unwrap() =
        vec![InProcessEvent::Response { outputs: vec![out(1)], is_final: false, version: 1, parameters: Vec::new() }];
    // SAFETY: as above.
    assert!(unsafe { TRITONSERVER_ServerInferAsync(server_handle(), request(a), std::ptr::null_mut()) }.is_null());
    assert_eq!(SEEN.lock().unwrap().len(), 1);
    fake.kept.lock().unwrap().clear();
    let seen = SEEN.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].2, RESPONSE_COMPLETE_FINAL);
    assert!(seen[1].1.as_deref().unwrap().contains("without a final response"), "{seen:?}");
    assert_eq!(RELEASED.load(Ordering::SeqCst), 1);

    // An error the server answers with is the response's error, with its text.
    reset();
    let e = HostError { code: ERROR_INVALID_ARG, message: "unexpected shape for input 'INPUT0'".into() };
    *fake.answer.lock().unwrap() = vec![InProcessEvent::Failed(e)];
    // SAFETY: as above.
    assert!(unsafe { TRITONSERVER_ServerInferAsync(server_handle(), request(a), std::ptr::null_mut()) }.is_null());
    let seen = SEEN.lock().unwrap().clone();
    assert_eq!(seen, vec![(vec![], Some("unexpected shape for input 'INPUT0'".to_string()), RESPONSE_COMPLETE_FINAL)]);
    // SAFETY: the allocator made above, deleted once.
    unsafe { TRITONSERVER_ResponseAllocatorDelete(a) };
}

#[test]
fn a_refused_request_stays_the_callers_and_model_queries_answer() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    reset();
    let refuse = HostError { code: ERROR_INVALID_ARG, message: "no such input".into() };
    set_inference_server(Arc::new(Fake {
        got: Mutex::default(),
        answer: Mutex::default(),
        refuse: Some(refuse),
        kept: Mutex::default(),
    }));
    let a = allocator();
    let r = request(a);
    // SAFETY: the server handle and a complete request; on the error it stays ours.
    unsafe {
        let e = TRITONSERVER_ServerInferAsync(server_handle(), r, std::ptr::null_mut());
        assert_eq!(crate::backend_api::error::TRITONSERVER_ErrorCode(e), ERROR_INVALID_ARG);
        crate::backend_api::error::TRITONSERVER_ErrorDelete(e);
        assert!(SEEN.lock().unwrap().is_empty(), "no callback for a request that was not queued");
        assert_eq!(RELEASED.load(Ordering::SeqCst), 0);
        assert!(TRITONSERVER_InferenceRequestDelete(r).is_null());

        let mut ready = true;
        assert!(TRITONSERVER_ServerModelIsReady(server_handle(), c"nope".as_ptr(), -1, &mut ready).is_null());
        assert!(!ready);
        assert!(TRITONSERVER_ServerModelIsReady(server_handle(), c"add_sub".as_ptr(), -1, &mut ready).is_null());
        assert!(ready);
        let mut txn = 0u32;
        let e = TRITONSERVER_ServerModelTransactionProperties(
            server_handle(),
            c"add_sub".as_ptr(),
            -1,
            &mut txn,
            std::ptr::null_mut(),
        );
        assert!(e.is_null());
        assert_eq!(txn, TXN_ONE_TO_ONE);
        let e = TRITONSERVER_ServerModelTransactionProperties(
            server_handle(),
            c"nope".as_ptr(),
            -1,
            &mut txn,
            std::ptr::null_mut(),
        );
        assert_eq!(crate::backend_api::error::TRITONSERVER_ErrorCode(e), ERROR_NOT_FOUND);
        crate::backend_api::error::TRITONSERVER_ErrorDelete(e);

        let config = crate::backend_api::message::TRITONSERVER_ParameterNew(
            c"config".as_ptr(),
            PARAMETER_STRING,
            c"{}".as_ptr().cast(),
        );
        let file = crate::backend_api::message::TRITONSERVER_ParameterBytesNew(
            c"file:1/model.py".as_ptr(),
            b"x".as_ptr().cast(),
            1,
        );
        let params = [config.cast_const(), file.cast_const()];
        assert!(
            TRITONSERVER_ServerLoadModelWithParameters(server_handle(), c"m".as_ptr(), params.as_ptr(), 2).is_null()
        );
        let int = crate::backend_api::message::TRITONSERVER_ParameterNew(
            c"x".as_ptr(),
            PARAMETER_INT,
            (&5i64 as *const i64).cast(),
        );
        let e =
            TRITONSERVER_ServerLoadModelWithParameters(server_handle(), c"m".as_ptr(), [int.cast_const()].as_ptr(), 1);
        assert_eq!(crate::backend_api::error::TRITONSERVER_ErrorCode(e), ERROR_INVALID_ARG);
        crate::backend_api::error::TRITONSERVER_ErrorDelete(e);
        for p in [config, file, int] {
            crate::backend_api::message::TRITONSERVER_ParameterDelete(p);
        }
        TRITONSERVER_ResponseAllocatorDelete(a);
    }
}

/// What `on_response_origin` read of a response: request id, model, version, parameters.
type Origin = (String, String, i64, Vec<(String, u32, i64)>);
static ORIGINS: Mutex<Vec<Origin>> = Mutex::new(Vec::new());

unsafe extern "C" fn on_response_origin(response: *mut InferenceResponse, _flags: u32, _userp: *mut c_void) {
    if response.is_null() {
        return;
    }
    // SAFETY: the host's response, read through the exported functions, then deleted once.
    unsafe {
        let (mut id, mut model, mut version, mut count) = (std::ptr::null(), std::ptr::null(), 0i64, 0u32);
        assert!(TRITONSERVER_InferenceResponseId(response, &mut id).is_null());
        assert!(TRITONSERVER_InferenceResponseModel(response, &mut model, &mut version).is_null());
        assert!(TRITONSERVER_InferenceResponseParameterCount(response, &mut count).is_null());
        let mut params = Vec::new();
        for i in 0..count {
            let (mut name, mut kind, mut value) = (std::ptr::null(), 0u32, std::ptr::null());
            assert!(TRITONSERVER_InferenceResponseParameter(response, i, &mut name, &mut kind, &mut value).is_null());
            params.push((CStr::from_ptr(name).to_string_lossy().into_owned(), kind, *value.cast::<i64>()));
        }
        let e = TRITONSERVER_InferenceResponseParameter(
            response,
            count,
            &mut std::ptr::null(),
            &mut 0,
            &mut std::ptr::null(),
        );
        assert!(!e.is_null(), "an index past the parameters is refused");
        crate::backend_api::error::TRITONSERVER_ErrorDelete(e);
        let e = TRITONSERVER_InferenceResponseOutputClassificationLabel(response, 0, 0, &mut std::ptr::null());
        assert_eq!(crate::backend_api::error::TRITONSERVER_ErrorCode(e), ERROR_UNSUPPORTED);
        crate::backend_api::error::TRITONSERVER_ErrorDelete(e);
        ORIGINS.lock().unwrap().push((
            CStr::from_ptr(id).to_string_lossy().into_owned(),
            CStr::from_ptr(model).to_string_lossy().into_owned(),
            version,
            params,
        ));
        assert!(TRITONSERVER_InferenceResponseDelete(response).is_null());
    }
}

#[test]
fn a_request_reads_back_what_was_set_and_a_response_names_its_request_model_and_parameters() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    reset();
    ORIGINS.lock().unwrap().clear();
    let out = HostTensor { name: "OUTPUT0".into(), datatype: "FP32".into(), shape: vec![1], data: vec![0u8; 4].into() };
    let parameters = vec![("n".to_string(), HostParam::Int(5))];
    let fake = Arc::new(Fake {
        got: Mutex::default(),
        answer: Mutex::new(vec![InProcessEvent::Response {
            outputs: vec![out],
            is_final: true,
            version: 3,
            parameters,
        }]),
        refuse: None,
        kept: Mutex::default(),
    });
    set_inference_server(fake.clone());
    let a = allocator();
    let r = request(a);
    // SAFETY: a live request and out-parameters on this frame, as a backend calls these.
    unsafe {
        let (mut id, mut flags, mut correlation, mut priority, mut cancelled) =
            (std::ptr::null(), 0u32, 0u64, 9u64, true);
        assert!(TRITONSERVER_InferenceRequestId(r, &mut id).is_null());
        assert_eq!(CStr::from_ptr(id).to_str().unwrap(), "r1");
        assert!(TRITONSERVER_InferenceRequestFlags(r, &mut flags).is_null());
        assert_eq!(flags, REQUEST_FLAG_SEQUENCE_START);
        assert!(TRITONSERVER_InferenceRequestCorrelationId(r, &mut correlation).is_null());
        assert_eq!(correlation, 42);
        let e = TRITONSERVER_InferenceRequestCorrelationIdString(r, &mut std::ptr::null());
        assert_eq!(crate::backend_api::error::TRITONSERVER_ErrorCode(e), ERROR_INVALID_ARG);
        crate::backend_api::error::TRITONSERVER_ErrorDelete(e);
        assert!(TRITONSERVER_InferenceRequestSetPriorityUInt64(r, 1 << 40).is_null());
        assert!(TRITONSERVER_InferenceRequestPriorityUInt64(r, &mut priority).is_null());
        assert_eq!(priority, 1 << 40);
        assert!(TRITONSERVER_InferenceRequestIsCancelled(r, &mut cancelled).is_null());
        assert!(!cancelled);
        // An output that was not requested goes without error; one that was, goes.
        assert!(TRITONSERVER_InferenceRequestRemoveRequestedOutput(r, c"OTHER".as_ptr()).is_null());
        assert!(TRITONSERVER_InferenceRequestAddRequestedOutput(r, c"OUTPUT1".as_ptr()).is_null());
        assert!(TRITONSERVER_InferenceRequestRemoveRequestedOutput(r, c"OUTPUT1".as_ptr()).is_null());
        let e = TRITONSERVER_InferenceRequestRemoveInput(r, c"NOPE".as_ptr());
        assert_eq!(crate::backend_api::error::TRITONSERVER_ErrorCode(e), ERROR_INVALID_ARG);
        crate::backend_api::error::TRITONSERVER_ErrorDelete(e);
        let e = TRITONSERVER_InferenceRequestAddRawInput(r, c"RAW".as_ptr());
        assert_eq!(crate::backend_api::error::TRITONSERVER_ErrorCode(e), ERROR_UNSUPPORTED);
        crate::backend_api::error::TRITONSERVER_ErrorDelete(e);
        let e = TRITONSERVER_InferenceRequestSetResponseCallback(
            r,
            a,
            std::ptr::null_mut(),
            Some(on_response_origin),
            std::ptr::null_mut(),
        );
        assert!(e.is_null());
        assert!(TRITONSERVER_ServerInferAsync(server_handle(), r, std::ptr::null_mut()).is_null());
    }
    let got = fake.got.lock().unwrap().remove(0);
    assert_eq!(got.request.outputs, vec!["OUTPUT0".to_string()]);
    assert_eq!(got.priority, 1 << 40);
    let origins = ORIGINS.lock().unwrap().clone();
    assert_eq!(origins, vec![("r1".to_string(), "add_sub".to_string(), 3, vec![("n".to_string(), PARAMETER_INT, 5)])]);
    assert_eq!(RELEASED.load(Ordering::SeqCst), 1);
    // SAFETY: the allocator made above, deleted once.
    unsafe { TRITONSERVER_ResponseAllocatorDelete(a) };
}
