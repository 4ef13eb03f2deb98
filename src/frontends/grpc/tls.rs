//! gRPC over TLS with Triton's flags, through tonic's rustls acceptor: `--grpc-use-ssl` serves
//! TLS with `--grpc-server-cert` / `--grpc-server-key`; `--grpc-use-ssl-mutual` also requires a
//! client certificate signed by `--grpc-root-cert` (Triton's
//! `GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY`), and implies TLS as in Triton.
//! Without mutual TLS the root certificate is not used, as in Triton. The files are read and
//! the PEM checked at start, so a bad file stops the server instead of failing each handshake.

use std::path::Path;

use anyhow::{bail, Context as _};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// The TLS flags as given.
#[derive(Debug, Clone, Default)]
pub struct TlsFlags {
    pub use_ssl: bool,
    pub mutual: bool,
    pub server_cert: Option<String>,
    pub server_key: Option<String>,
    pub root_cert: Option<String>,
}

fn read(flag: &str, path: Option<&String>, why: &str) -> anyhow::Result<Vec<u8>> {
    let Some(path) = path else { bail!("{why} needs {flag}") };
    std::fs::read(Path::new(path)).with_context(|| format!("cannot read {flag} {path}"))
}

/// The acceptor's configuration, or `None` for plaintext.
pub fn config(flags: &TlsFlags) -> anyhow::Result<Option<ServerTlsConfig>> {
    if !flags.use_ssl && !flags.mutual {
        return Ok(None);
    }
    let why = if flags.mutual { "--grpc-use-ssl-mutual=true" } else { "--grpc-use-ssl=true" };
    let cert = read("--grpc-server-cert", flags.server_cert.as_ref(), why)?;
    let key = read("--grpc-server-key", flags.server_key.as_ref(), why)?;
    let mut config = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
    if flags.mutual {
        let root = read("--grpc-root-cert", flags.root_cert.as_ref(), why)?;
        config = config.client_ca_root(Certificate::from_pem(root)).client_auth_optional(false);
    }
    // Builds the acceptor once: a certificate or key that does not parse, or that do not
    // match, is refused here.
    tonic::transport::Server::builder()
        .tls_config(config.clone())
        .map_err(|e| anyhow::anyhow!("the gRPC TLS certificate or key cannot be used: {e}"))?;
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_without_the_flags() {
        assert!(config(&TlsFlags::default()).unwrap().is_none());
        let certs_only = TlsFlags { server_cert: Some("/nonexistent".into()), ..TlsFlags::default() };
        assert!(config(&certs_only).unwrap().is_none(), "Triton ignores the files without --grpc-use-ssl");
    }

    #[test]
    fn tls_needs_readable_pem_files() {
        let err = config(&TlsFlags { use_ssl: true, ..TlsFlags::default() }).unwrap_err();
        assert_eq!(err.to_string(), "--grpc-use-ssl=true needs --grpc-server-cert");
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let junk = Some(junk.display().to_string());
        let flags =
            TlsFlags { use_ssl: true, server_cert: junk.clone(), server_key: junk.clone(), ..Default::default() };
        let err = config(&flags).unwrap_err().to_string();
        assert!(err.starts_with("the gRPC TLS certificate or key cannot be used"), "{err}");
        let mutual = TlsFlags { mutual: true, server_cert: junk.clone(), server_key: junk, ..Default::default() };
        assert_eq!(config(&mutual).unwrap_err().to_string(), "--grpc-use-ssl-mutual=true needs --grpc-root-cert");
    }
}
