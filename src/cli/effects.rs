//! What the given flags do at start, beyond their values: every flag that only tunes something
//! Tritium does not have yields one line for the log (said once, at start, with the reason).
//! Triton's own refusals of flag combinations (SageMaker and Vertex AI on one port, a SageMaker
//! safe port range the other endpoints fall outside) are here too. TLS and restricted APIs take
//! effect in the frontends (`frontends::grpc::tls`, `frontends::restricted`), which refuse a bad
//! certificate or restriction at start.

use super::resources::RateLimitMode;
use super::Cli;

/// The refusals: `Err` with the first one found.
pub fn refusals(cli: &Cli) -> Result<(), String> {
    let p = &cli.platforms;
    if p.allow_sagemaker && p.vertex_ai_enabled() {
        let vertex = p.vertex_ai_port()?;
        if vertex == p.sagemaker_port {
            return Err(format!(
                "the SageMaker and Vertex AI endpoints cannot share port {vertex}: set --sagemaker-port or --vertex-ai-port to another port"
            ));
        }
    }
    if let (true, Some((low, high))) = (p.allow_sagemaker, p.sagemaker_safe_port_range) {
        let ports = [
            (cli.allow_http, "--http-port", cli.http_port),
            (cli.allow_grpc, "--grpc-port", cli.grpc_port),
            (cli.allow_metrics, "--metrics-port", cli.metrics_port),
        ];
        for (on, flag, port) in ports {
            if on && !(low..=high).contains(&port) {
                return Err(format!(
                    "{flag} {port} is outside --sagemaker-safe-port-range {low}-{high}: move it into the range or turn that endpoint off"
                ));
            }
        }
    }
    Ok(())
}

/// One line per given flag that has no effect in Tritium, with the reason.
pub fn no_effect_notes(cli: &Cli) -> Vec<String> {
    let mut notes = Vec::new();
    let mut note = |given: bool, flag: &str, why: &str| {
        if given {
            notes.push(format!("{flag} has no effect: {why}"));
        }
    };
    let no_gpu_memory = "Tritium keeps no CUDA or pinned memory of its own (issue 26)";
    let g = &cli.grpc_extra;
    let r = &cli.resources;
    note(cli.repo.enable_peer_access.is_some(), "--enable-peer-access", no_gpu_memory);
    note(
        g.grpc_infer_allocation_pool_size.is_some(),
        "--grpc-infer-allocation-pool-size",
        "Tritium allocates each gRPC request and response, it keeps no pool of them",
    );
    let pings = "Tritium's HTTP/2 server (tonic 0.14 on hyper and h2) offers only the keepalive interval and timeout (--grpc-keepalive-time, --grpc-keepalive-timeout): it answers every client ping and has no gRPC-core ping policy";
    // True is what the HTTP/2 server does: it pings quiet connections with or without calls.
    note(
        g.grpc_keepalive_permit_without_calls == Some(false),
        "--grpc-keepalive-permit-without-calls=false",
        "Tritium's HTTP/2 server (tonic 0.14 on hyper) pings a quiet connection every --grpc-keepalive-time whether calls run or not, as with true",
    );
    note(g.grpc_http2_max_pings_without_data.is_some(), "--grpc-http2-max-pings-without-data", pings);
    note(
        g.grpc_http2_min_recv_ping_interval_without_data.is_some(),
        "--grpc-http2-min-recv-ping-interval-without-data",
        pings,
    );
    note(g.grpc_http2_max_ping_strikes.is_some(), "--grpc-http2-max-ping-strikes", pings);
    let plaintext = !g.grpc_use_ssl && !g.grpc_use_ssl_mutual;
    let no_ssl = "it applies only with --grpc-use-ssl=true or --grpc-use-ssl-mutual=true";
    note(plaintext && g.grpc_server_cert.is_some(), "--grpc-server-cert", no_ssl);
    note(plaintext && g.grpc_server_key.is_some(), "--grpc-server-key", no_ssl);
    note(
        !g.grpc_use_ssl_mutual && g.grpc_root_cert.is_some(),
        "--grpc-root-cert",
        "it applies only with --grpc-use-ssl-mutual=true",
    );
    note(
        g.grpc_max_connection_age_grace.is_some() && g.grpc_max_connection_age.is_none(),
        "--grpc-max-connection-age-grace",
        "it applies only with --grpc-max-connection-age",
    );
    note(r.repoagent_directory.is_some(), "--repoagent-directory", "Tritium has no repository agents");
    note(
        r.cache_directory.is_some(),
        "--cache-directory",
        "Tritium's one response cache, 'local', is built in: it loads no cache libraries",
    );
    note(
        r.rate_limit != Some(RateLimitMode::ExecutionCount) && !r.rate_limit_resource.is_empty(),
        "--rate-limit-resource",
        "it applies only with --rate-limit=execution_count (the rate limiter is off)",
    );
    note(r.pinned_memory_pool_byte_size.is_some(), "--pinned-memory-pool-byte-size", no_gpu_memory);
    note(!r.cuda_memory_pool_byte_size.is_empty(), "--cuda-memory-pool-byte-size", no_gpu_memory);
    note(!r.cuda_virtual_address_size.is_empty(), "--cuda-virtual-address-size", no_gpu_memory);
    note(r.min_supported_compute_capability.is_some(), "--min-supported-compute-capability", no_gpu_memory);
    note(
        r.buffer_manager_thread_count.is_some(),
        "--buffer-manager-thread-count",
        "Tritium copies tensors on the threads that handle them",
    );
    note(!r.model_load_gpu_limit.is_empty(), "--model-load-gpu-limit", no_gpu_memory);
    let numa = r.host_policy.iter().any(|s| matches!(s.setting, super::host_policy::HostSetting::NumaNode(_)));
    note(numa, "--host-policy <policy>,numa-node", "Tritium has no pinned memory pool to place on a NUMA node");
    let p = &cli.platforms;
    note(
        p.sagemaker_safe_port_range.is_some() && !p.allow_sagemaker,
        "--sagemaker-safe-port-range",
        "it applies only with --allow-sagemaker=true",
    );
    note(
        p.vertex_ai_default_model.is_some() && !p.vertex_ai_enabled(),
        "--vertex-ai-default-model",
        "it applies only with --allow-vertex-ai=true",
    );
    notes
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(["tritium", "--model-repository=/m"].iter().chain(args)).expect("flags parse")
    }

    #[test]
    fn certificates_without_tls_are_noted() {
        let notes = no_effect_notes(&cli(&["--grpc-server-cert=/c.pem", "--grpc-root-cert=/r.pem"]));
        assert_eq!(notes.len(), 2, "{notes:#?}");
        assert!(notes[0].starts_with("--grpc-server-cert has no effect: it applies only with --grpc-use-ssl"));
        assert!(notes[1].starts_with("--grpc-root-cert has no effect"));
        let tls = ["--grpc-use-ssl=true", "--grpc-server-cert=/c.pem", "--grpc-server-key=/k.pem"];
        assert!(no_effect_notes(&cli(&tls)).is_empty());
        let mutual =
            ["--grpc-use-ssl-mutual=true", "--grpc-server-cert=/c", "--grpc-server-key=/k", "--grpc-root-cert=/r"];
        assert!(no_effect_notes(&cli(&mutual)).is_empty());
    }

    #[test]
    fn sagemaker_and_vertex_ai_cannot_share_a_port() {
        let err = refusals(&cli(&["--allow-sagemaker=true", "--allow-vertex-ai=true"])).unwrap_err();
        assert!(err.contains("cannot share port 8080"), "{err}");
        assert!(refusals(&cli(&["--allow-sagemaker=true", "--allow-vertex-ai=true", "--vertex-ai-port=8081"])).is_ok());
    }

    #[test]
    fn the_safe_port_range_covers_the_other_endpoints() {
        let err = refusals(&cli(&["--allow-sagemaker=true", "--sagemaker-safe-port-range=9000-9100"])).unwrap_err();
        assert!(err.contains("--http-port 8000 is outside"), "{err}");
        let ok = cli(&[
            "--allow-sagemaker=true",
            "--sagemaker-safe-port-range=7000-9000",
            "--allow-metrics=false",
            "--grpc-port=8500",
        ]);
        assert!(refusals(&ok).is_ok());
    }

    #[test]
    fn flags_without_effect_are_each_noted_once() {
        assert!(no_effect_notes(&cli(&[])).is_empty(), "defaults need no note");
        let notes = no_effect_notes(&cli(&[
            "--pinned-memory-pool-byte-size=0",
            "--cuda-memory-pool-byte-size=0:1024",
            "--cache-directory=/opt/tritonserver/caches",
            "--rate-limit-resource=R:1",
            "--grpc-http2-max-ping-strikes=0",
            "--host-policy=cpu,numa-node=0",
        ]));
        assert_eq!(notes.len(), 6, "{notes:#?}");
        assert!(notes.iter().all(|n| n.contains("has no effect: ")));
        assert!(
            notes[0].starts_with("--pinned-memory-pool-byte-size") || notes.iter().any(|n| n.starts_with("--pinned"))
        );
        assert!(no_effect_notes(&cli(&["--rate-limit=off"])).is_empty());
        assert!(no_effect_notes(&cli(&["--rate-limit=execution_count", "--rate-limit-resource=R:1"])).is_empty());
    }
}
