//! Triton's object-storage repository URLs, parsed: `s3://bucket/path` (AWS),
//! `s3://host:port/bucket/path` (an S3-compatible endpoint over HTTP),
//! `s3://http://host:port/…` and `s3://https://host:port/…` (the scheme spelled out),
//! `gs://bucket/path` and `as://account/container/path`. A custom S3 endpoint is a host with a
//! numeric port, as in Triton's S3 path regex; anything else before the first `/` is a bucket.

use std::fmt;

/// Where a repository's objects live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    S3 {
        /// `http://host:port` or `https://host:port` for an S3-compatible server; AWS when absent.
        endpoint: Option<String>,
        bucket: String,
    },
    Gcs {
        bucket: String,
    },
    Azure {
        account: String,
        container: String,
    },
}

/// One `--model-repository` on object storage: its location and the folder (object key prefix,
/// without leading or trailing `/`) that holds the model folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteUrl {
    /// The URL as given on the command line (named in every message).
    pub url: String,
    pub location: Location,
    pub prefix: String,
}

impl fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

impl RemoteUrl {
    /// The scheme's short name, as Triton's credential file keys it (`s3`, `gs`, `as`).
    pub fn scheme(&self) -> &'static str {
        match self.location {
            Location::S3 { .. } => "s3",
            Location::Gcs { .. } => "gs",
            Location::Azure { .. } => "as",
        }
    }
}

/// Whether a `--model-repository` names object storage rather than a local folder.
pub fn is_remote(repository: &str) -> bool {
    ["s3://", "gs://", "as://"].iter().any(|s| repository.starts_with(s))
}

/// Parses an object-storage repository URL; the error says what is wrong with it.
pub fn parse(url: &str) -> Result<RemoteUrl, String> {
    let bad = |why: &str| Err(format!("model repository '{url}' is not a valid object-storage URL: {why}"));
    let (scheme, rest) = match url.split_once("://") {
        Some((s @ ("s3" | "gs" | "as"), rest)) => (s, rest),
        _ => return bad("it must start with s3://, gs:// or as://"),
    };
    let (location, path) = match scheme {
        "s3" => {
            let (explicit, rest) = match rest.split_once("://") {
                Some((s @ ("http" | "https"), rest)) => (Some(s), rest),
                Some(_) => return bad("the endpoint's scheme must be http:// or https://"),
                None => (None, rest),
            };
            let (first, after) = split_segment(rest);
            let (endpoint, bucket, path) = if let Some((host, port)) = first.rsplit_once(':') {
                if host.is_empty() || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
                    return bad("a custom endpoint is host:port with a numeric port");
                }
                let (bucket, path) = split_segment(after);
                (Some(format!("{}://{first}", explicit.unwrap_or("http"))), bucket, path)
            } else if explicit.is_some() {
                return bad("an endpoint given with http:// or https:// needs a port (host:port)");
            } else {
                (None, first, after)
            };
            if bucket.is_empty() {
                return bad("no bucket name");
            }
            (Location::S3 { endpoint, bucket: bucket.to_string() }, path)
        }
        "gs" => {
            let (bucket, path) = split_segment(rest);
            if bucket.is_empty() {
                return bad("no bucket name");
            }
            (Location::Gcs { bucket: bucket.to_string() }, path)
        }
        _ => {
            let (account, after) = split_segment(rest);
            let (container, path) = split_segment(after);
            if account.is_empty() || container.is_empty() {
                return bad("Azure storage is as://account/container/path");
            }
            (Location::Azure { account: account.to_string(), container: container.to_string() }, path)
        }
    };
    let prefix = path.trim_matches('/');
    if prefix.split('/').any(|s| s == "." || s == "..") {
        return bad("'.' and '..' are not folders in object storage");
    }
    Ok(RemoteUrl { url: url.to_string(), location, prefix: prefix.to_string() })
}

/// `a/b/c` → (`a`, `b/c`); `/a` → (``, `a`).
fn split_segment(s: &str) -> (&str, &str) {
    s.split_once('/').unwrap_or((s, ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(endpoint: Option<&str>, bucket: &str) -> Location {
        Location::S3 { endpoint: endpoint.map(str::to_string), bucket: bucket.into() }
    }

    #[test]
    fn parses_tritons_s3_forms() {
        let u = parse("s3://bucket/path/to/repo").unwrap();
        assert_eq!((u.location, u.prefix.as_str()), (s3(None, "bucket"), "path/to/repo"));
        let u = parse("s3://127.0.0.1:9000/models/repo/").unwrap();
        assert_eq!((u.location, u.prefix.as_str()), (s3(Some("http://127.0.0.1:9000"), "models"), "repo"));
        let u = parse("s3://https://minio.local:443/models").unwrap();
        assert_eq!((u.location, u.prefix.as_str()), (s3(Some("https://minio.local:443"), "models"), ""));
        let u = parse("s3://http://localhost:9000/b/x").unwrap();
        assert_eq!(u.location, s3(Some("http://localhost:9000"), "b"));
        assert_eq!(parse("s3://bucket").unwrap().prefix, "");
        assert_eq!(parse("s3://bucket").unwrap().scheme(), "s3");
    }

    #[test]
    fn parses_gcs_and_azure() {
        let u = parse("gs://my-bucket/a/b").unwrap();
        assert_eq!(
            (u.scheme(), u.prefix.as_str(), u.location.clone()),
            ("gs", "a/b", Location::Gcs { bucket: "my-bucket".into() })
        );
        let u = parse("as://acct/cont/models").unwrap();
        assert_eq!(
            (u.scheme(), u.prefix.as_str(), u.location.clone()),
            ("as", "models", Location::Azure { account: "acct".into(), container: "cont".into() })
        );
    }

    #[test]
    fn refuses_bad_urls_naming_them() {
        for bad in [
            "s3://",
            "s3:///path",
            "s3://host:port/bucket",
            "s3://:9000/bucket",
            "s3://127.0.0.1:9000",
            "s3://127.0.0.1:9000/",
            "s3://https://host/bucket",
            "s3://ftp://host:1/bucket",
            "gs://",
            "as://account",
            "as://account/",
            "s3://bucket/a/../b",
            "http://bucket/x",
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.contains(&format!("'{bad}'")), "{e}");
        }
    }

    #[test]
    fn tells_remote_from_local() {
        assert!(is_remote("s3://b/p") && is_remote("gs://b") && is_remote("as://a/c"));
        assert!(!is_remote("/models") && !is_remote("model_repository") && !is_remote("s3:/x"));
    }
}
