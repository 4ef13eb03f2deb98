//! A bounded fuzz run of every fuzz target on the stable toolchain, within CI's budget:
//! `cargo-fuzz` needs nightly and a 20-minute instrumented build, so CI drives the same
//! functions (`tritium::fuzzing`) here with a mutation fuzzer of its own, for
//! `TRITIUM_FUZZ_SECS` seconds per target (default 8; the five targets run two at a time on
//! `cargo test`'s threads). It starts from the seeds and regressions that `fuzz_corpus.rs`
//! replays and applies libFuzzer's kinds of mutation (bit flips, interesting integers, byte
//! runs inserted, erased, duplicated and spliced from other inputs, tokens of the input's
//! grammar); inputs a target accepts join the corpus, so the run keeps reaching past the first
//! checks. It has no coverage feedback: the long, guided runs are `cargo +nightly fuzz` (see
//! fuzz/README.md).
//!
//! A panic fails the test, names the seed (`TRITIUM_FUZZ_SEED=<n>` repeats the run) and writes
//! the input to `target/fuzz-bounded/<target>-<seed>`, ready for `fuzz/regressions/<target>/`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// splitmix64: small, fast and reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Values that sit on the edges parsers get wrong.
const INTERESTING: [u64; 14] = [
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 31,
    (1 << 62) + 1,
    i64::MAX as u64,
    u64::MAX,
];

/// Pieces of the inputs' grammars (JSON, pbtxt, shapes, datatypes) to splice in.
const TOKENS: [&[u8]; 22] = [
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b",",
    b":",
    b"-1",
    b"2147483648",
    b"9223372036854775807",
    b"1e308",
    b"\"BYTES\"",
    b"\"FP32\"",
    b"\"shape\"",
    b"\"data\"",
    b"\"binary_data_size\"",
    b"\"shared_memory_region\"",
    b"dims: [ -1 ]",
    b"max_batch_size: ",
    b"input [ { name: \"a\" data_type: TYPE_STRING dims: [ 2 ] } ]",
    b"\xe2\x82\xac",
    b"\0",
];

fn mutate(rng: &mut Rng, corpus: &[Vec<u8>], input: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(6) {
        let len = input.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next() as u8;
            }
            2 => {
                // An interesting integer, little-endian, 1 to 8 bytes wide, over or into the input.
                let value = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
                let width = 1 + rng.below(8);
                let at = rng.below(len + 1);
                let end = (at + width).min(len);
                input.splice(at..end, value[..width].iter().copied());
            }
            3 => {
                let n = 1 + rng.below(16);
                let at = rng.below(len + 1);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                input.splice(at..at, bytes);
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(64));
                input.drain(at..at + n);
            }
            5 if len > 0 => {
                // A run of the input copied elsewhere in it (repeats fields, nests brackets).
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(64));
                let run = input[at..at + n].to_vec();
                let to = rng.below(len + 1);
                input.splice(to..to, run);
            }
            6 => {
                let other = &corpus[rng.below(corpus.len())];
                if !other.is_empty() {
                    let at = rng.below(other.len());
                    let n = 1 + rng.below((other.len() - at).min(256));
                    let to = rng.below(len + 1);
                    let end = (to + rng.below(n + 1)).min(len);
                    input.splice(to..end, other[at..at + n].iter().copied());
                }
            }
            7 => {
                let token = TOKENS[rng.below(TOKENS.len())];
                let at = rng.below(len + 1);
                input.splice(at..at, token.iter().copied());
            }
            _ if len > 1 => input.truncate(rng.below(len)),
            _ => input.push(rng.next() as u8),
        }
    }
    input.truncate(1 << 16);
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut inputs = Vec::new();
    for dir in [fuzz.join("seeds").join(target), fuzz.join("regressions").join(target)] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
        paths.sort();
        inputs.extend(paths.iter().map(|p| std::fs::read(p).expect("read a corpus file")));
    }
    assert!(inputs.len() >= 10, "fuzz/seeds/{target} holds {} inputs", inputs.len());
    inputs
}

fn budget() -> Duration {
    let secs = std::env::var("TRITIUM_FUZZ_SECS").ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(8.0);
    Duration::from_secs_f64(secs)
}

fn seed(target: &str) -> u64 {
    std::env::var("TRITIUM_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        now.as_nanos() as u64 ^ target.len() as u64
    })
}

/// Fuzzes `run` for the budget; returns (executions, inputs accepted, corpus size at the end).
fn fuzz(target: &str, run: fn(&[u8]) -> bool) -> (u64, u64, usize) {
    let seed = seed(target);
    let mut rng = Rng(seed);
    let mut corpus = corpus(target);
    let (start, budget) = (Instant::now(), budget());
    let (mut execs, mut accepted) = (0u64, 0u64);
    while start.elapsed() < budget {
        for _ in 0..64 {
            let mut input = corpus[rng.below(corpus.len())].clone();
            mutate(&mut rng, &corpus, &mut input);
            let outcome = std::panic::catch_unwind(|| run(&input));
            execs += 1;
            match outcome {
                Ok(true) => {
                    accepted += 1;
                    // Accepted inputs reach deepest: keep some, within a bound.
                    if corpus.len() < 4096 && rng.below(8) == 0 {
                        corpus.push(input);
                    }
                }
                Ok(false) => {}
                Err(_) => {
                    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("fuzz-bounded");
                    let _ = std::fs::create_dir_all(&dir);
                    let path = dir.join(format!("{target}-{seed}"));
                    let _ = std::fs::write(&path, &input);
                    panic!(
                        "fuzz target {target} panicked after {execs} executions (TRITIUM_FUZZ_SEED={seed}); input in {}",
                        path.display()
                    );
                }
            }
        }
    }
    eprintln!(
        "fuzz {target}: {execs} executions in {:.1} s, {accepted} accepted, corpus {} (seed {seed})",
        start.elapsed().as_secs_f64(),
        corpus.len()
    );
    (execs, accepted, corpus.len())
}

fn check(target: &str, run: fn(&[u8]) -> bool) {
    let (execs, accepted, _) = fuzz(target, run);
    assert!(execs >= 100, "{target}: only {execs} executions in the budget");
    assert!(accepted > 0, "{target}: no mutated input was accepted; the run never got past the first checks");
}

#[test]
fn mutations_are_reproducible_from_the_seed() {
    let corpus = corpus("infer_body");
    let run = |seed| {
        let mut rng = Rng(seed);
        let mut input = corpus[0].clone();
        for _ in 0..50 {
            mutate(&mut rng, &corpus, &mut input);
        }
        input
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn fuzz_infer_body() {
    check("infer_body", tritium::fuzzing::infer_body);
}

#[test]
fn fuzz_model_config() {
    check("model_config", tritium::fuzzing::model_config);
}

#[test]
fn fuzz_grpc_infer() {
    check("grpc_infer", tritium::fuzzing::grpc_infer);
}

#[test]
fn fuzz_bytes_elements() {
    check("bytes_elements", tritium::fuzzing::bytes_elements);
}

#[test]
fn fuzz_shm_params() {
    check("shm_params", tritium::fuzzing::shm_params);
    // The target's region object is made once per process; this process is done with it.
    let _ = std::fs::remove_file(format!("/dev/shm/tritium-fuzz-{}", std::process::id()));
}
