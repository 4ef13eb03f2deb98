//! The backend against TensorFlow itself, where scripts/setup.sh installed it and made the
//! SavedModels of examples/tensorflow_models/ (skipped, saying so, where it did not).

use bytes::Bytes;
use tritium_actors::InstanceKind;

use super::*;

fn config(json: &str) -> ModelConfig {
    crate::config::from_json(json).expect("config parses")
}

fn savedmodel(name: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/tensorflow_models")
        .join(name)
        .join("1/model.savedmodel");
    let library =
        std::env::var_os(DIR_VARIABLE).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(SETUP_TENSORFLOW_DIR));
    (dir.join("saved_model.pb").is_file() && library.join("libtensorflow.so").exists()).then_some(dir)
}

fn graphdef(name: &str) -> Option<PathBuf> {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/tensorflow_models")
        .join(name)
        .join("1/model.graphdef");
    let library =
        std::env::var_os(DIR_VARIABLE).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(SETUP_TENSORFLOW_DIR));
    (file.is_file() && library.join("libtensorflow.so").exists()).then_some(file)
}

fn spec() -> InstanceSpec {
    InstanceSpec {
        name: "m_0".into(),
        index: 0,
        kind: InstanceKind::Cpu,
        device: None,
        cpu_cores: Vec::new(),
        rate_limiter: Default::default(),
    }
}

fn f32_bytes(values: &[f32]) -> Bytes {
    values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into()
}

#[test]
fn parameters_are_tritons() {
    let c = config(
        r#"{"name":"m","parameters":{"TF_NUM_INTRA_THREADS":{"string_value":"3"},"TF_NUM_INTER_THREADS":{"string_value":"2"},
            "TF_USE_PER_SESSION_THREADS":{"string_value":"On"},"TF_GRAPH_TAG":{"string_value":"serve1"},
            "TF_SIGNATURE_DEF":{"string_value":"serving2"},"MAX_SESSION_SHARE_COUNT":{"string_value":"4"}}}"#,
    );
    let o = TfOptions::from_config(&c).unwrap();
    assert_eq!(
        o,
        TfOptions {
            graph_tag: "serve1".into(),
            signature: "serving2".into(),
            intra_op_threads: Some(3),
            inter_op_threads: Some(2),
            per_session_threads: true,
            max_session_share: 4,
        }
    );
    // ConfigProto: field 2 = 3, field 5 = 2, allow_soft_placement (7) = 1, use_per_session_threads (9) = 1.
    assert_eq!(o.session_config(), vec![0x10, 3, 0x28, 2, 0x38, 1, 0x48, 1]);
    let defaults = TfOptions::from_config(&config(r#"{"name":"m"}"#)).unwrap();
    assert_eq!((defaults.graph_tag.as_str(), defaults.signature.as_str()), ("serve", "serving_default"));
    assert_eq!((defaults.max_session_share, defaults.per_session_threads), (1, false));
    assert_eq!(defaults.session_config(), vec![0x38, 1]);
    let bad = config(r#"{"name":"m","parameters":{"TF_USE_PER_SESSION_THREADS":{"string_value":"maybe"}}}"#);
    assert!(TfOptions::from_config(&bad).unwrap_err().to_string().contains("TF_USE_PER_SESSION_THREADS"));
    let bad = config(r#"{"name":"m","parameters":{"TF_NUM_INTRA_THREADS":{"string_value":"-1"}}}"#);
    assert!(TfOptions::from_config(&bad).unwrap_err().to_string().contains("non-negative integer"));
}

#[test]
fn instances_split_the_cores_unless_the_config_says() {
    let c = config(r#"{"name":"m","instance_group":[{"count":2}]}"#);
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(TfOptions::from_config(&c).unwrap().intra_op_threads, Some((cores / 2).max(1)));
    let c = config(
        r#"{"name":"m","instance_group":[{"count":2}],"parameters":{"TF_NUM_INTRA_THREADS":{"string_value":"5"}}}"#,
    );
    assert_eq!(TfOptions::from_config(&c).unwrap().intra_op_threads, Some(5));
}

#[test]
fn runs_a_savedmodel_through_its_signature() {
    let Some(dir) = savedmodel("tf_add_sub") else {
        eprintln!("skipped: run scripts/setup.sh for TensorFlow and the SavedModels");
        return;
    };
    let c = config(
        r#"{"name":"tf_add_sub","max_batch_size":8,
            "input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":[16]},{"name":"INPUT1","data_type":"TYPE_FP32","dims":[16]}],
            "output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[16]},{"name":"OUTPUT1","data_type":"TYPE_FP32","dims":[16]}]}"#,
    );
    let signature = inspect("tf_add_sub", &dir, &c).unwrap();
    assert_eq!(signature.inputs.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(), ["INPUT0", "INPUT1"]);
    assert_eq!(signature.inputs[0].op, "serving_default_INPUT0");
    assert_eq!(signature.outputs[1].shape, Some(vec![-1, 16]));
    let factory = TensorflowFactory::new(&c, dir).unwrap();
    let mut backend = factory.create(&spec()).unwrap();
    let a: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let inputs = vec![
        Tensor::new("INPUT0", DataType::F32, vec![2, 16], f32_bytes(&a)),
        Tensor::new("INPUT1", DataType::F32, vec![2, 16], f32_bytes(&[1.0; 32])),
    ];
    let wanted = vec!["OUTPUT1".to_string()];
    let out = backend.execute(BatchInput::bare(&inputs, &wanted, 2)).unwrap();
    assert_eq!((out.len(), out[0].name.as_str(), out[0].shape.clone()), (1, "OUTPUT1", vec![2, 16]));
    let want: Vec<f32> = a.iter().map(|v| v - 1.0).collect();
    assert_eq!(out[0].data, f32_bytes(&want));
    // A datatype the signature does not take is the request's error, and the instance serves on.
    let bad = vec![
        Tensor::new("INPUT0", DataType::I32, vec![1, 16], Bytes::from(vec![0u8; 64])),
        Tensor::new("INPUT1", DataType::F32, vec![1, 16], f32_bytes(&[1.0; 16])),
    ];
    let e = backend.execute(BatchInput::bare(&bad, &[], 1)).unwrap_err();
    assert!(e.to_string().contains("the signature expects FP32"), "{e}");
    let out = backend.execute(BatchInput::bare(&inputs, &[], 2)).unwrap();
    assert_eq!(out.len(), 2);
}

#[test]
fn bytes_elements_keep_nul_and_invalid_utf8() {
    let Some(dir) = savedmodel("tf_types") else {
        eprintln!("skipped: run scripts/setup.sh for TensorFlow and the SavedModels");
        return;
    };
    let signature = inspect("tf_types", &dir, &config(r#"{"name":"tf_types"}"#)).unwrap();
    // Not batched: every input is the signature's whole shape, [-1].
    let mut c = config(r#"{"name":"tf_types"}"#);
    c.input = signature
        .inputs
        .iter()
        .map(|t| crate::config::ModelInput {
            name: t.key.clone(),
            data_type: crate::config::proto_data_type(t.datatype.unwrap()) as i32,
            dims: t.shape.clone().unwrap(),
            ..Default::default()
        })
        .collect();
    c.output = Vec::new();
    let strings: Vec<&[u8]> = vec![b"he\0llo", b"\xff\xfe\0 not utf-8", b"", &[b'x'; 100]];
    let mut inputs: Vec<Tensor> = c
        .input
        .iter()
        .filter(|i| i.name != "STRING_in")
        .map(|i| {
            let datatype = crate::config::engine_data_type(i.data_type).unwrap();
            let size = datatype.element_size().unwrap();
            Tensor::new(i.name.clone(), datatype, vec![4], Bytes::from(vec![1u8; 4 * size]))
        })
        .collect();
    inputs.push(Tensor::new("STRING_in", DataType::Bytes, vec![4], tritium_actors::tensor::serialize_bytes(&strings)));
    c.output.push(crate::config::ModelOutput {
        name: "STRING_out".into(),
        data_type: crate::config::proto_data_type(DataType::Bytes) as i32,
        dims: vec![-1],
        ..Default::default()
    });
    c.output.push(crate::config::ModelOutput {
        name: "STRING_len".into(),
        data_type: crate::config::proto_data_type(DataType::I32) as i32,
        dims: vec![-1],
        ..Default::default()
    });
    let mut backend = TensorflowFactory::new(&c, dir).unwrap().create(&spec()).unwrap();
    let out = backend.execute(BatchInput::bare(&inputs, &[], 1)).unwrap();
    let back = out.iter().find(|t| t.name == "STRING_out").unwrap().bytes_elements().unwrap();
    assert_eq!(back.iter().map(|b| b.as_ref()).collect::<Vec<_>>(), strings);
    let lengths = &out.iter().find(|t| t.name == "STRING_len").unwrap().data;
    assert_eq!(lengths, &strings.iter().flat_map(|s| (s.len() as i32).to_le_bytes()).collect::<Vec<u8>>()[..]);
}

#[test]
fn a_missing_signature_and_a_broken_savedmodel_fail_with_the_reason() {
    let Some(dir) = savedmodel("tf_add_sub") else {
        eprintln!("skipped: run scripts/setup.sh for TensorFlow and the SavedModels");
        return;
    };
    let c = config(r#"{"name":"m","parameters":{"TF_SIGNATURE_DEF":{"string_value":"classify"}}}"#);
    let e = inspect("m", &dir, &c).unwrap_err().to_string();
    assert!(e.contains("no signature 'classify'") && e.contains("its signatures: serving_default"), "{e}");
    let c = config(r#"{"name":"m","parameters":{"TF_GRAPH_TAG":{"string_value":"train"}}}"#);
    let e = inspect("m", &dir, &c).unwrap_err().to_string();
    assert!(e.contains("TensorFlow could not load") && e.contains("tag 'train'"), "{e}");
    let broken = tempfile::tempdir().unwrap();
    std::fs::write(broken.path().join("saved_model.pb"), b"\x0a\xff\xff not a protobuf").unwrap();
    let e = inspect("m", broken.path(), &config(r#"{"name":"m"}"#)).unwrap_err();
    assert_eq!(e.kind, tritium_actors::ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("TensorFlow could not load"), "{e}");
}

#[test]
fn a_graphdef_is_served_by_node_name_and_its_init_ops_run_per_session() {
    let Some(file) = graphdef("tf_graphdef_init") else {
        eprintln!("skipped: run scripts/setup.sh for TensorFlow and the GraphDefs");
        return;
    };
    let json = |init: bool| {
        format!(
            r#"{{"name":"g","platform":"tensorflow_graphdef","max_batch_size":8{}
                "input":[{{"name":"INPUT0","data_type":"TYPE_FP32","dims":[4]}}],
                "output":[{{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[4]}}]}}"#,
            if init { r#","parameters":{"TF_INIT_OPS_FILE":{"string_value":"init_ops.json"}},"# } else { "," }
        )
    };
    let x: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let inputs = vec![Tensor::new("INPUT0", DataType::F32, vec![2, 4], f32_bytes(&x))];
    // Two instances, two sessions: each ran `init` (the variable is 2).
    let factory = TensorflowFactory::new(&config(&json(true)), file.clone()).unwrap();
    for _ in 0..2 {
        let mut backend = factory.create(&spec()).unwrap();
        let out = backend.execute(BatchInput::bare(&inputs, &[], 2)).unwrap();
        assert_eq!(out[0].data, f32_bytes(&x.iter().map(|v| v * 2.0).collect::<Vec<_>>()));
    }
    // Without the init ops the variable is unset: TensorFlow's FailedPrecondition, the request's error.
    let mut backend = TensorflowFactory::new(&config(&json(false)), file.clone()).unwrap().create(&spec()).unwrap();
    let e = backend.execute(BatchInput::bare(&inputs, &[], 2)).unwrap_err();
    assert_eq!(e.kind, tritium_actors::ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("uninitialized"), "{e}");
    // A config tensor the graph lacks fails the load, naming it.
    let bad = config(&json(true).replace("\"OUTPUT0\"", "\"OUTPUT9\""));
    let e = TensorflowFactory::new(&bad, file).unwrap().create(&spec()).err().unwrap().to_string();
    assert!(e.contains("the GraphDef has no node 'OUTPUT9'"), "{e}");
}
