//! The check that stays true: every flag in Triton 2.51's `tritonserver --help` (kept verbatim
//! in `tests/fixtures/tritonserver-2.51-help.txt`, from the binary of the `nvidia-pytriton`
//! 0.7.0 wheel) is a flag of `tritium`, and parses with a value of the syntax Triton's help
//! gives it, in both the `--flag=value` and `--flag value` spellings.

use clap::{CommandFactory, Parser};

use super::Cli;

const TRITON_HELP: &str = include_str!("../../tests/fixtures/tritonserver-2.51-help.txt");

/// (flag, value syntax) of each `  --flag <syntax>` line; syntax is empty for a bare flag.
fn triton_flags() -> Vec<(&'static str, &'static str)> {
    TRITON_HELP
        .lines()
        .filter_map(|l| l.strip_prefix("  --"))
        .map(|l| match l.split_once(' ') {
            Some((flag, syntax)) => (flag, syntax.trim()),
            None => (l.trim(), ""),
        })
        .collect()
}

/// A value Triton would accept for the flag, by its help's syntax (with the few string flags
/// that take one of a set of words).
fn sample(flag: &str, syntax: &str) -> Option<&'static str> {
    let by_flag = match flag {
        "model-control-mode" => Some("poll"),
        "model-config-name" => Some("h100"),
        "log-format" => Some("ISO8601"),
        "grpc-infer-response-compression-level" => Some("low"),
        "rate-limit" => Some("execution_count"),
        "trace-level" => Some("TIMESTAMPS"),
        "http-address" | "grpc-address" | "metrics-address" => Some("127.0.0.1"),
        "trace-config" => Some("rate=5"),
        "host-policy" => Some("cpu,cpu-cores=0-1"),
        "backend-config" => Some("onnxruntime,default-max-batch-size=4"),
        "cache-config" => Some("local,size=1048576"),
        _ => None,
    };
    by_flag.or(match syntax {
        "<boolean>" => Some("true"),
        "<integer>" => Some("1"),
        "<float>" => Some("1.5"),
        "<string>" => Some("/models/x"),
        "<<string>:<string>=<string>>" => Some("inference,key=value"),
        "<<string>=<string>>" => Some("counter_latencies=false"),
        "<<integer>-<integer>>" => Some("8000-9000"),
        "<<integer>:<integer>>" => Some("0:67108864"),
        "<<string>:<integer>:<integer>>" => Some("R1:4:0"),
        "<<device_id>:<fraction>>" => Some("0:0.5"),
        _ => None,
    })
}

#[test]
fn the_fixture_is_tritons_whole_help() {
    let flags = triton_flags();
    assert_eq!(flags.len(), 87, "Triton 2.51 lists 87 flags");
    for (flag, syntax) in &flags {
        if !syntax.is_empty() {
            assert!(sample(flag, syntax).is_some(), "no sample value for --{flag} {syntax}: add one");
        }
    }
}

#[test]
fn every_triton_flag_is_a_tritium_flag() {
    let command = Cli::command();
    let known: Vec<String> = command
        .get_arguments()
        .flat_map(|a| a.get_long().into_iter().chain(a.get_all_aliases().unwrap_or_default()).map(str::to_string))
        .chain(["help".to_string()])
        .collect();
    let unknown: Vec<&str> =
        triton_flags().into_iter().map(|(f, _)| f).filter(|f| !known.iter().any(|k| k == f)).collect();
    assert!(unknown.is_empty(), "flags of tritonserver 2.51 that tritium does not know: {unknown:?}");
}

#[test]
fn every_triton_flag_parses_with_tritons_value_syntax() {
    for (flag, syntax) in triton_flags() {
        if flag == "help" {
            continue;
        }
        // The repository flag is required; it is repeatable, so it may come twice.
        let repo = vec!["--model-repository=/m".to_string()];
        let spellings: Vec<Vec<String>> = match sample(flag, syntax) {
            None => vec![vec![format!("--{flag}")]],
            Some(v) => vec![vec![format!("--{flag}={v}")], vec![format!("--{flag}"), v.to_string()]],
        };
        for args in spellings {
            let argv = std::iter::once("tritium".to_string()).chain(repo.clone()).chain(args.clone());
            if let Err(e) = Cli::try_parse_from(argv) {
                panic!("tritium refuses {args:?} (Triton's syntax {syntax}): {e}");
            }
        }
    }
}
