//! Model repositories on object storage (`s3://`, `gs://`, `as://`), as Triton takes them: each
//! is mirrored into a local folder (Triton's `TRITON_AWS_MOUNT_DIRECTORY`,
//! `TRITON_GCS_MOUNT_DIRECTORY`, `TRITON_AZURE_MOUNT_DIRECTORY`, else a temporary folder) that
//! the repository manager then scans and loads like any local repository, so version policies
//! and the control modes work unchanged. The mirror follows the bucket at start, at every poll
//! (mode poll) and at every explicit load of a model (mode explicit).

pub mod credentials;
pub mod mirror;
pub mod url;

use std::path::PathBuf;
use std::sync::Arc;

use mirror::{Mirror, Sync};
use tritium_actors::{Error, Result};

use super::scan::Scan;
use super::ModelKey;

/// One object-storage repository and the local folder it is mirrored in.
pub struct Remote {
    pub mirror: Mirror,
    /// The temporary folder, when no mount directory was set (removed when dropped).
    _temp: Option<tempfile::TempDir>,
}

/// The environment variable naming the local folder of a scheme's repositories (Triton's).
fn mount_variable(scheme: &str) -> &'static str {
    match scheme {
        "s3" => "TRITON_AWS_MOUNT_DIRECTORY",
        "gs" => "TRITON_GCS_MOUNT_DIRECTORY",
        _ => "TRITON_AZURE_MOUNT_DIRECTORY",
    }
}

/// A folder name for a URL (several repositories may share a mount directory).
fn folder_name(url: &str) -> String {
    url.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect()
}

/// Opens an object-storage repository and copies its models: a bad URL, a bad credential
/// file, a missing bucket, refused credentials or an unreachable endpoint fail here, with a
/// message that names the repository.
pub async fn open(repository: &str, env: &credentials::Env) -> std::result::Result<Remote, String> {
    let url = url::parse(repository)?;
    let file = credentials::CredentialFile::from_env(env)?;
    let store = credentials::open_store(&url, env, file.as_ref())?;
    let (dir, temp) = match env(mount_variable(url.scheme())) {
        Some(mount) => (PathBuf::from(mount).join(folder_name(&url.url)), None),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("tritium-repository-")
                .tempdir()
                .map_err(|e| format!("model repository {url}: cannot make a local folder for it: {e}"))?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("model repository {url}: cannot make its local folder {}: {e}", dir.display()))?;
    tracing::info!("model repository {url}: mirrored in {}", dir.display());
    let remote = Remote { mirror: Mirror::new(url, store, dir), _temp: temp };
    remote.mirror.sync(Sync::Start).await?;
    Ok(remote)
}

/// Poll mode: brings every mirror in step. A failure is logged and changes nothing, so the
/// models already serving keep serving.
pub async fn poll(remotes: &[Arc<Remote>]) {
    for r in remotes {
        if let Err(e) = r.mirror.sync(Sync::Poll).await {
            tracing::error!("poll: {e}; its models keep serving as they are");
        }
    }
}

/// An explicit load: copies the model's current objects from every object-storage repository
/// (Triton reads a model from its repository at each load).
pub async fn refresh(remotes: &[Arc<Remote>], model: &str) -> Result<()> {
    for r in remotes {
        r.mirror.sync(Sync::Model(model)).await.map_err(|e| {
            Error::internal(format!("failed to load '{model}', failed to poll from model repository: {e}"))
        })?;
    }
    Ok(())
}

/// With `--model-namespacing`, a mirrored repository's namespace is its URL, as Triton names
/// it, rather than the local folder it is mirrored in.
pub fn name_namespaces(scan: Scan, remotes: &[Arc<Remote>], namespacing: bool) -> Scan {
    if !namespacing || remotes.is_empty() {
        return scan;
    }
    let url_of = |namespace: &str| {
        remotes.iter().find(|r| r.mirror.dir.display().to_string() == namespace).map(|r| r.mirror.url.url.clone())
    };
    let (found, errors) = scan;
    let found = found
        .into_values()
        .map(|mut dir| {
            if let Some(url) = url_of(&dir.namespace) {
                dir.namespace = url;
            }
            (dir.key(), dir)
        })
        .collect();
    let errors = errors
        .into_iter()
        .map(|(key, why)| match url_of(&key.namespace) {
            Some(url) => (ModelKey::new(url, key.name), why),
            None => (key, why),
        })
        .collect();
    (found, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scheme_has_tritons_mount_variable_and_urls_make_folder_names() {
        assert_eq!(mount_variable("s3"), "TRITON_AWS_MOUNT_DIRECTORY");
        assert_eq!(mount_variable("gs"), "TRITON_GCS_MOUNT_DIRECTORY");
        assert_eq!(mount_variable("as"), "TRITON_AZURE_MOUNT_DIRECTORY");
        assert_eq!(folder_name("s3://127.0.0.1:9000/b/p"), "s3___127.0.0.1_9000_b_p");
    }

    #[test]
    fn with_namespacing_a_mirror_is_named_by_its_url() {
        let local = tempfile::tempdir().unwrap();
        let mirrored = tempfile::tempdir().unwrap();
        for d in [&local, &mirrored] {
            std::fs::create_dir_all(d.path().join("m/1")).unwrap();
        }
        let url = url::parse("s3://bucket/repo").unwrap();
        let store = std::sync::Arc::new(object_store::memory::InMemory::new());
        let remote = Arc::new(Remote { mirror: Mirror::new(url, store, mirrored.path().to_path_buf()), _temp: None });
        let repos = [local.path().to_path_buf(), mirrored.path().to_path_buf()];
        let (found, errors) =
            name_namespaces(super::super::scan::scan(&repos, true), std::slice::from_ref(&remote), true);
        assert!(errors.is_empty());
        let keys: Vec<String> = found.keys().map(|k| k.to_string()).collect();
        assert_eq!(keys, vec![format!("{}::m", local.path().display()), "s3://bucket/repo::m".to_string()]);
        // Without namespacing nothing changes (one empty namespace).
        let plain = super::super::scan::scan(&repos[..1], false);
        assert_eq!(name_namespaces(plain.clone(), &[remote], false), plain);
    }

    #[tokio::test]
    async fn open_fails_naming_the_repository() {
        let no_env = |_: &str| None;
        let e = open("s3://host:port/bucket", &no_env).await.err().unwrap();
        assert!(e.contains("'s3://host:port/bucket'"), "{e}");
        // Nothing listens on this port: refused, in seconds, naming the URL.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("s3://127.0.0.1:{port}/bucket/models");
        let env = |k: &str| match k {
            "AWS_ACCESS_KEY_ID" => Some("k".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("s".to_string()),
            _ => None,
        };
        let started = std::time::Instant::now();
        let e = open(&url, &env).await.err().unwrap();
        assert!(e.contains(&url) && e.contains("cannot list"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }
}
