//! The fuzz targets' seeds and every input a campaign found (fuzz/seeds/, fuzz/regressions/),
//! replayed through the same functions (`tritium::fuzzing`) on every `cargo test`: none may
//! panic, and the seeds that are valid requests and configs must still be accepted, so the
//! targets keep reaching past the first check.

use std::path::{Path, PathBuf};

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
    out.sort();
    out
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// Runs `target` on every seed and regression input; returns (file name, accepted) per seed.
fn replay(target: &str, run: fn(&[u8]) -> bool) -> Vec<(String, bool)> {
    let seeds = files(&fuzz_dir().join("seeds").join(target));
    assert!(seeds.len() >= 10, "fuzz/seeds/{target} holds {} files", seeds.len());
    for input in files(&fuzz_dir().join("regressions").join(target)) {
        run(&std::fs::read(&input).expect("read a regression input"));
    }
    seeds
        .iter()
        .map(|p| {
            let name = p.file_name().expect("a file").to_string_lossy().into_owned();
            (name, run(&std::fs::read(p).expect("read a seed")))
        })
        .collect()
}

#[test]
fn infer_bodies_replay_and_the_valid_ones_decode() {
    let results = replay("infer_body", tritium::fuzzing::infer_body);
    let accepted: Vec<&str> = results.iter().filter(|(_, ok)| *ok).map(|(n, _)| n.as_str()).collect();
    for valid in ["json_fp32", "json_params", "json_bytes", "json_types", "binary_mixed"] {
        assert!(accepted.contains(&valid), "{valid} was refused; accepted: {accepted:?}");
    }
    // json_shm names a region that is not registered.
    for invalid in ["json_shm", "binary_short", "deep", "not_object", "absurd_shape", "negative_shape"] {
        assert!(!accepted.contains(&invalid), "{invalid} was accepted");
    }
}

#[test]
fn model_configs_replay_and_the_bundled_ones_are_accepted() {
    let results = replay("model_config", tritium::fuzzing::model_config);
    let refused: Vec<&str> = results.iter().filter(|(_, ok)| !*ok).map(|(n, _)| n.as_str()).collect();
    assert!(refused.is_empty(), "bundled configs refused: {refused:?}");
    assert!(!tritium::fuzzing::model_config(b"name: \"x\" max_batch_size: [ 1 ]"));
}

#[test]
fn grpc_requests_replay_and_the_valid_ones_decode() {
    let results = replay("grpc_infer", tritium::fuzzing::grpc_infer);
    let accepted: Vec<&str> = results.iter().filter(|(_, ok)| *ok).map(|(n, _)| n.as_str()).collect();
    for valid in ["typed_fp32", "raw_two", "typed_bytes_nul", "raw_bytes", "sequence_params"] {
        assert!(accepted.contains(&valid), "{valid} was refused; accepted: {accepted:?}");
    }
    for invalid in ["raw_bytes_lying_length", "negative_shape", "bad_version", "shm_unregistered", "bad_datatype"] {
        assert!(!accepted.contains(&invalid), "{invalid} was accepted");
    }
}

#[test]
fn bytes_tensors_replay_and_round_trip() {
    let results = replay("bytes_elements", tritium::fuzzing::bytes_elements);
    let accepted: Vec<&str> = results.iter().filter(|(_, ok)| *ok).map(|(n, _)| n.as_str()).collect();
    assert_eq!(accepted, ["big_element", "empty", "many_empty", "non_utf8", "three"]);
}

#[test]
fn shared_memory_parameters_replay_and_stay_inside_the_region() {
    let results = replay("shm_params", tritium::fuzzing::shm_params);
    let accepted: Vec<&str> = results.iter().filter(|(_, ok)| *ok).map(|(n, _)| n.as_str()).collect();
    assert_eq!(accepted, ["check_output", "read_all", "read_middle", "register_view", "write_fits"]);
    // The target's region object is made once per process; this process is done with it.
    let _ = std::fs::remove_file(format!("/dev/shm/tritium-fuzz-{}", std::process::id()));
}
