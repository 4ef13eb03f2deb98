//! The HTTP and gRPC flags Triton 2.51 has beyond addresses and ports: port reuse, header
//! forwarding, TLS, restricted APIs, the gRPC core's keepalive and HTTP/2 ping policy, and
//! connection age. Which of them have no effect is `effects`'s call; TLS and restrictions are
//! parsed and applied by the frontends.

use clap::{ArgAction, Args};
use regex::Regex;

use super::parse_bool;

/// A header-forwarding pattern: a regular expression, anchored at neither end (RE2's partial
/// match), matched without regard to case — Triton prefixes the pattern with `(?i)` since header
/// names are case-insensitive.
fn parse_pattern(s: &str) -> Result<Regex, String> {
    regex::RegexBuilder::new(s)
        .case_insensitive(true)
        .build()
        .map_err(|e| format!("'{s}' is not a valid regular expression: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarding_patterns_ignore_case_and_match_anywhere() {
        let p = parse_pattern("MY_HEADER").unwrap();
        assert!(p.is_match("my_header_1") && p.is_match("x-My_Header") && !p.is_match("other"));
        assert!(parse_pattern("(").is_err());
    }
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "HTTP")]
pub struct HttpFlags {
    /// Let several servers listen on the same HTTP port (SO_REUSEPORT), each with this set.
    #[arg(long, default_value = "false", value_parser = parse_bool, action = ArgAction::Set)]
    pub reuse_http_port: bool,
    /// HTTP headers whose names match this regular expression (anywhere in the name, in any
    /// case) become string request parameters that backends see, named in lower case.
    #[arg(long, value_parser = parse_pattern)]
    pub http_header_forward_pattern: Option<Regex>,
    /// `<apis>:<key>=<value>` (Triton's parser wants the colon its help shows as a comma): the
    /// comma-separated API categories that answer only requests with the header
    /// `<key>: <value>`; others get 403. Repeat the flag for more groups; a category may be in
    /// one group only.
    #[arg(long, action = ArgAction::Append)]
    pub http_restricted_api: Vec<String>,
    /// Seconds a request body may take to arrive once its headers are in (0: no limit). A body
    /// that stalls or trickles past it is answered 408 and its connection closed. Tritium's
    /// flag: Triton has no body timeout.
    #[arg(long, default_value_t = 60)]
    pub http_body_read_timeout: u64,
    /// Most HTTP connections open at once (0: no limit of Tritium's; actix's 25,000 per worker
    /// thread). Past it, new connections wait in the listen backlog until one closes; the
    /// connections being served are not affected. Tritium's flag: Triton has none.
    #[arg(long, default_value_t = 10_000)]
    pub http_max_connections: usize,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "GRPC")]
pub struct GrpcFlags {
    /// Let several servers listen on the same gRPC port (SO_REUSEPORT), each with this set.
    #[arg(long, default_value = "false", value_parser = parse_bool, action = ArgAction::Set)]
    pub reuse_grpc_port: bool,
    /// gRPC metadata whose keys match this regular expression (anywhere in the key, in any
    /// case) become string request parameters that backends see.
    #[arg(long, value_parser = parse_pattern)]
    pub grpc_header_forward_pattern: Option<Regex>,
    /// Triton keeps this many request/response objects for reuse (default 8). Tritium allocates
    /// per request: accepted, no effect.
    #[arg(long)]
    pub grpc_infer_allocation_pool_size: Option<u64>,
    /// Serve gRPC over TLS with --grpc-server-cert and --grpc-server-key.
    #[arg(long, default_value = "false", value_parser = parse_bool, action = ArgAction::Set)]
    pub grpc_use_ssl: bool,
    /// Serve gRPC over mutual TLS: clients must present a certificate signed by
    /// --grpc-root-cert. Implies --grpc-use-ssl.
    #[arg(long, default_value = "false", value_parser = parse_bool, action = ArgAction::Set)]
    pub grpc_use_ssl_mutual: bool,
    /// PEM file with the server's certificate (chain) for gRPC TLS.
    #[arg(long)]
    pub grpc_server_cert: Option<String>,
    /// PEM file with the server's private key for gRPC TLS.
    #[arg(long)]
    pub grpc_server_key: Option<String>,
    /// PEM file with the CA certificate(s) that sign client certificates under mutual TLS.
    #[arg(long)]
    pub grpc_root_cert: Option<String>,
    /// gRPC core's permission to send keepalive pings without calls in flight (default
    /// false). Tritium's HTTP/2 server pings a quiet connection every --grpc-keepalive-time
    /// whether calls run or not, which is what true asks; false is accepted and logged as
    /// having no effect.
    #[arg(long, value_parser = parse_bool, action = ArgAction::Set)]
    pub grpc_keepalive_permit_without_calls: Option<bool>,
    /// gRPC core's limit on pings without data (default 2). Tritium's HTTP/2 server (tonic
    /// 0.14 on hyper) has no such limit: accepted, no effect.
    #[arg(long, allow_negative_numbers = true)]
    pub grpc_http2_max_pings_without_data: Option<i64>,
    /// gRPC core's shortest accepted interval between a client's pings, in ms (default 300000).
    /// Tritium's HTTP/2 layer does not police pings: accepted, no effect.
    #[arg(long, allow_negative_numbers = true)]
    pub grpc_http2_min_recv_ping_interval_without_data: Option<i64>,
    /// gRPC core's bad pings tolerated before GOAWAY (default 2). Tritium's HTTP/2 layer does
    /// not police pings: accepted, no effect.
    #[arg(long, allow_negative_numbers = true)]
    pub grpc_http2_max_ping_strikes: Option<i64>,
    /// Milliseconds a gRPC connection may live; then the server sends GOAWAY (default: no
    /// limit).
    #[arg(long)]
    pub grpc_max_connection_age: Option<u64>,
    /// Milliseconds a connection past --grpc-max-connection-age may finish its calls; then it
    /// is closed whatever still runs (default: no limit).
    #[arg(long)]
    pub grpc_max_connection_age_grace: Option<u64>,
    /// `<protocols>:<key>=<value>`: the gRPC categories that answer only calls with the
    /// metadata `triton-grpc-protocol-<key>: <value>` (Triton's prefix); others get
    /// UNAVAILABLE.
    #[arg(long, action = ArgAction::Append)]
    pub grpc_restricted_protocol: Vec<String>,
    /// Most HTTP/2 streams (calls) open at once on one gRPC connection (0: no limit, gRPC
    /// core's default). A client past it waits for a stream to end. Tritium's flag: Triton
    /// leaves gRPC core's default.
    #[arg(long, default_value_t = 1024)]
    pub grpc_max_concurrent_streams: u32,
    /// Most gRPC connections open at once (0: no limit). Past it, new connections wait in the
    /// listen backlog until one closes; the connections being served are not affected.
    /// Tritium's flag: Triton has none.
    #[arg(long, default_value_t = 10_000)]
    pub grpc_max_connections: usize,
    /// Seconds one request message may take to arrive once it has begun (for calls other than
    /// ModelStreamInfer, once the call has begun); past it the call ends with DEADLINE_EXCEEDED
    /// (0: no limit). Tritium's flag: Triton has none.
    #[arg(long, default_value_t = 60)]
    pub grpc_message_read_timeout: u64,
}
