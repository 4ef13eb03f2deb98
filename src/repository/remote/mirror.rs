//! A local copy of an object-storage repository, which the repository manager reads as it reads
//! a local folder (Triton too localizes a remote model into a local folder before it loads).
//!
//! Object storage has no folders to swap atomically: a model being uploaded shows some of its
//! objects and not others. So a model is copied only when its listing (every object's path,
//! size and ETag) is the same in two listings: in poll mode the previous poll's and this one's,
//! at start and on an explicit load the listing before the download and the one after it. The
//! copy is made in a hidden staging folder and renamed into place, so a scan of the mirror sees
//! either the old model or the new one, never a half; a model gone from the bucket is removed.
//! A failed listing or download changes nothing in the mirror: the models it serves keep serving.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::io::AsyncWriteExt;

use super::url::RemoteUrl;

/// One model's objects: path under the model folder → (size, ETag).
pub type Listing = BTreeMap<String, (u64, Option<String>)>;

/// How many objects download at once.
const PARALLEL_DOWNLOADS: usize = 8;

#[derive(Default)]
struct State {
    /// The listing of each model at the previous poll.
    seen: BTreeMap<String, Listing>,
    /// The listing of each model as the mirror holds it.
    copied: BTreeMap<String, Listing>,
}

pub struct Mirror {
    pub url: RemoteUrl,
    store: Arc<dyn ObjectStore>,
    /// The local folder the manager scans as this repository.
    pub dir: PathBuf,
    state: tokio::sync::Mutex<State>,
}

/// Which models a sync looks at, and how it judges that a listing is stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync<'a> {
    /// At start: every model, stable when unchanged over its download.
    Start,
    /// In poll mode: every model, stable when unchanged since the previous poll (and over its
    /// download).
    Poll,
    /// An explicit load of one model: stable when unchanged over its download.
    Model(&'a str),
}

impl Mirror {
    pub fn new(url: RemoteUrl, store: Arc<dyn ObjectStore>, dir: PathBuf) -> Self {
        Mirror { url, store, dir, state: Default::default() }
    }

    fn prefix(&self, model: Option<&str>) -> Option<ObjectPath> {
        let parts: Vec<&str> = [self.url.prefix.as_str()].into_iter().chain(model).filter(|p| !p.is_empty()).collect();
        (!parts.is_empty()).then(|| ObjectPath::from(parts.join("/")))
    }

    /// Every model's listing under the repository (or under one model's folder).
    async fn list(&self, model: Option<&str>) -> Result<BTreeMap<String, Listing>, String> {
        let prefix = self.prefix(None);
        let fail = |e: String| format!("model repository {}: cannot list: {e}", self.url);
        let mut pages = self.store.list(self.prefix(model).as_ref());
        let mut objects = Vec::new();
        while let Some(meta) = next_or_stall(&mut pages).await.map_err(fail)? {
            objects.push(meta);
        }
        let skip = prefix.as_ref().map(|p| p.parts().count()).unwrap_or(0);
        let mut models: BTreeMap<String, Listing> = BTreeMap::new();
        for meta in objects {
            let parts: Vec<String> = meta.location.parts().skip(skip).map(|p| p.as_ref().to_string()).collect();
            // Files beside the model folders, hidden folders, and path tricks are not models.
            let [name, rest @ ..] = parts.as_slice() else { continue };
            if rest.is_empty() || name.starts_with('.') || parts.iter().any(|p| p == ".." || p == ".") {
                continue;
            }
            models.entry(name.clone()).or_default().insert(rest.join("/"), (meta.size, meta.e_tag));
        }
        for listing in models.values_mut() {
            // A zero-size "folder marker" object (what consoles create) that is also a folder.
            let dirs: Vec<String> =
                listing.keys().filter(|k| listing.keys().any(|o| o.starts_with(&format!("{k}/")))).cloned().collect();
            for d in dirs {
                listing.remove(&d);
            }
        }
        Ok(models)
    }

    /// Brings the mirror in step with the bucket, as `how` says. An error (the listing failed)
    /// leaves the mirror as it was; a model whose download failed is left as it was too, and
    /// named in the error.
    pub async fn sync(&self, how: Sync<'_>) -> Result<(), String> {
        let mut state = self.state.lock().await;
        let model = match how {
            Sync::Model(m) => Some(m),
            _ => None,
        };
        let listing = self.list(model).await?;
        if how == Sync::Start {
            self.clear_stale(&listing);
        }
        let mut failures = Vec::new();
        for (name, objects) in &listing {
            if state.copied.get(name) == Some(objects) {
                continue;
            }
            if how == Sync::Poll && state.seen.get(name) != Some(objects) {
                tracing::info!("model repository {}: '{name}' changed; waiting for its upload to settle", self.url);
                continue;
            }
            match self.copy(name, objects).await {
                Ok(true) => {
                    tracing::info!("model repository {}: copied '{name}' ({} objects)", self.url, objects.len());
                    state.copied.insert(name.clone(), objects.clone());
                }
                Ok(false) => tracing::info!("model repository {}: '{name}' changed while copied; later", self.url),
                Err(e) => failures.push(e),
            }
        }
        let gone: Vec<String> = state
            .copied
            .keys()
            .filter(|n| !listing.contains_key(*n) && model.is_none_or(|m| m == n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            tracing::info!("model repository {}: '{name}' is gone from the bucket", self.url);
            let removed = std::fs::remove_dir_all(self.dir.join(&name));
            if removed.is_ok() || !self.dir.join(&name).exists() {
                state.copied.remove(&name);
            }
        }
        match model {
            Some(m) => {
                state.seen.remove(m);
                state.seen.extend(listing);
            }
            None => state.seen = listing,
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    /// Downloads a model into a staging folder and moves it into place if its listing did not
    /// change meanwhile (false: it did; nothing changed in the mirror).
    async fn copy(&self, name: &str, objects: &Listing) -> Result<bool, String> {
        let staging = self.dir.join(format!(".staging-{name}"));
        let result = self.download(name, objects, &staging).await;
        let unchanged = match result {
            Ok(()) => self.list(Some(name)).await.map(|l| l.get(name) == Some(objects)),
            Err(e) => Err(e),
        };
        match unchanged {
            Ok(true) => {
                let target = self.dir.join(name);
                if target.exists() {
                    // One atomic exchange: a scan sees the old folder or the new one, never none.
                    let cwd = rustix::fs::CWD;
                    rustix::fs::renameat_with(cwd, &staging, cwd, &target, rustix::fs::RenameFlags::EXCHANGE)
                        .map_err(|e| self.io_error(name, &target, e.into()))?;
                } else {
                    std::fs::rename(&staging, &target).map_err(|e| self.io_error(name, &staging, e))?;
                }
                let _ = std::fs::remove_dir_all(&staging);
                Ok(true)
            }
            other => {
                let _ = std::fs::remove_dir_all(&staging);
                other
            }
        }
    }

    /// At start: whatever a mount directory holds from before (models since deleted, a staging
    /// folder left by a crash) goes, so that only the bucket's models load.
    fn clear_stale(&self, listing: &BTreeMap<String, Listing>) {
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !listing.contains_key(&name) {
                let path = entry.path();
                let removed = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
                if let Err(e) = removed {
                    tracing::warn!("model repository {}: cannot remove {}: {e}", self.url, path.display());
                }
            }
        }
    }

    fn io_error(&self, name: &str, path: &Path, e: std::io::Error) -> String {
        format!("model repository {}: '{name}': {}: {e}", self.url, path.display())
    }

    async fn download(&self, name: &str, objects: &Listing, staging: &Path) -> Result<(), String> {
        let _ = std::fs::remove_dir_all(staging);
        std::fs::create_dir_all(staging).map_err(|e| self.io_error(name, staging, e))?;
        let fetches: Vec<_> = objects.keys().map(|rel| self.fetch(name, rel.clone(), staging)).collect();
        futures::stream::iter(fetches).buffer_unordered(PARALLEL_DOWNLOADS).try_collect::<Vec<()>>().await?;
        Ok(())
    }
}

impl Mirror {
    /// Downloads one object of a model into the staging folder.
    async fn fetch(&self, name: &str, rel: String, staging: &Path) -> Result<(), String> {
        let key = self.prefix(Some(&format!("{name}/{rel}"))).expect("a model path");
        let target = staging.join(&rel);
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| self.io_error(name, parent, e))?;
        }
        let mut file = tokio::fs::File::create(&target).await.map_err(|e| self.io_error(name, &target, e))?;
        let fail = |e: String| format!("model repository {}: cannot download {key}: {e}", self.url);
        let got = tokio::time::timeout(STALL, self.store.get(&key)).await.map_err(|_| fail(stalled()))?;
        let mut body = got.map_err(|e| fail(describe(&e)))?.into_stream();
        while let Some(chunk) = next_or_stall(&mut body).await.map_err(fail)? {
            file.write_all(&chunk).await.map_err(|e| self.io_error(name, &target, e))?;
        }
        file.flush().await.map_err(|e| self.io_error(name, &target, e))
    }
}

/// How long a listing or a download may go without progress. The client has no overall
/// request timeout (a large model takes as long as it takes), so this is what ends a stalled
/// transfer.
const STALL: Duration = Duration::from_secs(60);

fn stalled() -> String {
    format!("no progress for {} s", STALL.as_secs())
}

/// The stream's next item, or an error when it fails or makes no progress for `STALL`.
async fn next_or_stall<T>(
    stream: &mut (impl futures::Stream<Item = object_store::Result<T>> + Unpin),
) -> Result<Option<T>, String> {
    match tokio::time::timeout(STALL, stream.next()).await {
        Err(_) => Err(stalled()),
        Ok(None) => Ok(None),
        Ok(Some(item)) => item.map(Some).map_err(|e| describe(&e)),
    }
}

/// An object_store error with its causes, which carry what the server said (a missing bucket,
/// a refused signature, a refused connection).
pub fn describe(e: &object_store::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::PutPayload;

    use super::super::url::parse;
    use super::*;

    async fn put(store: &InMemory, key: &str, body: &str) {
        store.put(&ObjectPath::from(key), PutPayload::from(body.to_string())).await.unwrap();
    }

    async fn delete(store: &InMemory, key: &str) {
        store.delete(&ObjectPath::from(key)).await.unwrap();
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        fn walk(d: &Path, base: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(d).unwrap().flatten() {
                if e.path().is_dir() {
                    walk(&e.path(), base, out);
                } else {
                    out.push(e.path().strip_prefix(base).unwrap().display().to_string());
                }
            }
        }
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    fn mirror(store: &Arc<InMemory>, dir: &Path) -> Mirror {
        Mirror::new(parse("s3://bucket/repo").unwrap(), store.clone(), dir.to_path_buf())
    }

    #[tokio::test]
    async fn start_copies_every_model_and_skips_what_is_not_one() {
        let store = Arc::new(InMemory::new());
        put(&store, "repo/m/config.pbtxt", "name: \"m\"").await;
        put(&store, "repo/m/1/model.onnx", "onnx").await;
        put(&store, "repo/README.md", "not a model").await;
        put(&store, "repo/.hidden/x", "hidden").await;
        put(&store, "other/n/1/model.onnx", "another repository").await;
        let dir = tempfile::tempdir().unwrap();
        let m = mirror(&store, dir.path());
        m.sync(Sync::Start).await.unwrap();
        assert_eq!(files(dir.path()), vec!["m/1/model.onnx", "m/config.pbtxt"]);
        assert_eq!(std::fs::read_to_string(dir.path().join("m/1/model.onnx")).unwrap(), "onnx");
    }

    #[tokio::test]
    async fn poll_copies_a_change_only_once_two_listings_agree() {
        let store = Arc::new(InMemory::new());
        put(&store, "repo/m/config.pbtxt", "c").await;
        put(&store, "repo/m/1/model.onnx", "v1").await;
        let dir = tempfile::tempdir().unwrap();
        let m = mirror(&store, dir.path());
        m.sync(Sync::Start).await.unwrap();
        // Half of version 2 is there: not copied at this poll, nor at the next while it grows.
        put(&store, "repo/m/2/model.onnx", "v2").await;
        m.sync(Sync::Poll).await.unwrap();
        assert!(!dir.path().join("m/2").exists());
        put(&store, "repo/m/2/extra.bin", "more").await;
        m.sync(Sync::Poll).await.unwrap();
        assert!(!dir.path().join("m/2").exists());
        // Settled: the next poll copies the whole model; v1 is still there.
        m.sync(Sync::Poll).await.unwrap();
        assert_eq!(files(dir.path()), vec!["m/1/model.onnx", "m/2/extra.bin", "m/2/model.onnx", "m/config.pbtxt"]);
        // A new model settles the same way; a deleted one goes at once.
        put(&store, "repo/n/1/model.onnx", "n").await;
        delete(&store, "repo/m/config.pbtxt").await;
        delete(&store, "repo/m/1/model.onnx").await;
        delete(&store, "repo/m/2/model.onnx").await;
        delete(&store, "repo/m/2/extra.bin").await;
        m.sync(Sync::Poll).await.unwrap();
        assert_eq!(files(dir.path()), Vec::<String>::new());
        m.sync(Sync::Poll).await.unwrap();
        assert_eq!(files(dir.path()), vec!["n/1/model.onnx"]);
    }

    #[tokio::test]
    async fn a_changed_object_of_the_same_size_is_seen_by_its_etag() {
        let store = Arc::new(InMemory::new());
        put(&store, "repo/m/1/model.onnx", "aaaa").await;
        let dir = tempfile::tempdir().unwrap();
        let m = mirror(&store, dir.path());
        m.sync(Sync::Start).await.unwrap();
        put(&store, "repo/m/1/model.onnx", "bbbb").await;
        m.sync(Sync::Poll).await.unwrap();
        m.sync(Sync::Poll).await.unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("m/1/model.onnx")).unwrap(), "bbbb");
    }

    #[tokio::test]
    async fn an_explicit_load_copies_one_model_at_once() {
        let store = Arc::new(InMemory::new());
        put(&store, "repo/a/1/model.onnx", "a").await;
        let dir = tempfile::tempdir().unwrap();
        let m = mirror(&store, dir.path());
        m.sync(Sync::Start).await.unwrap();
        put(&store, "repo/a/2/model.onnx", "a2").await;
        put(&store, "repo/b/1/model.onnx", "b").await;
        m.sync(Sync::Model("a")).await.unwrap();
        assert_eq!(files(dir.path()), vec!["a/1/model.onnx", "a/2/model.onnx"]);
        delete(&store, "repo/a/1/model.onnx").await;
        delete(&store, "repo/a/2/model.onnx").await;
        m.sync(Sync::Model("a")).await.unwrap();
        assert_eq!(files(dir.path()), Vec::<String>::new());
    }

    #[tokio::test]
    async fn start_clears_what_a_mount_directory_held_from_before() {
        let store = Arc::new(InMemory::new());
        put(&store, "repo/m/1/model.onnx", "new").await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("deleted/1")).unwrap();
        std::fs::create_dir_all(dir.path().join(".staging-m")).unwrap();
        std::fs::create_dir_all(dir.path().join("m/1")).unwrap();
        std::fs::write(dir.path().join("m/1/model.onnx"), "old").unwrap();
        std::fs::write(dir.path().join("m/1/stale.bin"), "old").unwrap();
        mirror(&store, dir.path()).sync(Sync::Start).await.unwrap();
        assert_eq!(files(dir.path()), vec!["m/1/model.onnx"]);
        assert_eq!(std::fs::read_to_string(dir.path().join("m/1/model.onnx")).unwrap(), "new");
        assert!(!dir.path().join(".staging-m").exists());
    }

    #[tokio::test]
    async fn folder_markers_are_not_files() {
        let store = Arc::new(InMemory::new());
        put(&store, "repo/m/1/model.onnx", "x").await;
        put(&store, "repo/m/1", "").await;
        let dir = tempfile::tempdir().unwrap();
        mirror(&store, dir.path()).sync(Sync::Start).await.unwrap();
        assert_eq!(files(dir.path()), vec!["m/1/model.onnx"]);
    }
}
