//! The customer-service example's TorchScript text classifier run by libtorch itself (tch, no
//! server): its probabilities against the numpy computation that
//! examples/customer_service/generate.py wrote beside it (intent/reference.json), to 1e-5.
//! tests/test_customer_service.py checks the served answers against the same numbers.
//! Skipped, saying so, where scripts/setup.sh has not made the model.

use std::path::PathBuf;

use tch::{CModule, IValue, Kind};

const TOLERANCE: f64 = 1e-5;

#[test]
fn libtorch_computes_what_numpy_computes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/customer_service/models/intent");
    let (model, reference) = (dir.join("1/model.pt"), dir.join("reference.json"));
    if !model.is_file() || !reference.is_file() {
        eprintln!("skipped: {} is missing (scripts/setup.sh makes it)", model.display());
        return;
    }
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&reference).expect("read reference.json")).expect("json");
    let texts: Vec<String> =
        reference["texts"].as_array().expect("texts").iter().map(|t| t.as_str().expect("a text").to_string()).collect();
    let want: Vec<Vec<f64>> = reference["probs"]
        .as_array()
        .expect("probs")
        .iter()
        .map(|row| row.as_array().expect("a row").iter().map(|p| p.as_f64().expect("a number")).collect())
        .collect();

    let module = CModule::load(&model).expect("libtorch loads the archive");
    let IValue::Tensor(probs) = module.forward_is(&[IValue::StringList(texts.clone())]).expect("forward") else {
        panic!("forward returned something other than a tensor");
    };
    assert_eq!(probs.size(), vec![texts.len() as i64, 4]);
    assert_eq!(probs.kind(), Kind::Float);
    for (i, row) in want.iter().enumerate() {
        for (j, p) in row.iter().enumerate() {
            let got = probs.double_value(&[i as i64, j as i64]);
            assert!((got - p).abs() <= TOLERANCE, "text {:?}, class {j}: libtorch {got}, numpy {p}", texts[i]);
        }
    }
    // One text alone gives what it gives in a batch (the server batches requests).
    let IValue::Tensor(one) = module.forward_is(&[IValue::StringList(vec![texts[1].clone()])]).expect("forward") else {
        panic!("forward returned something other than a tensor");
    };
    for (j, p) in want[1].iter().enumerate() {
        assert!((one.double_value(&[0, j as i64]) - p).abs() <= TOLERANCE);
    }
}
