//! Reading a model repository from disk: which models exist, which numeric versions each has,
//! which of them the version policy selects, and a fingerprint to notice changes in poll mode.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use tritium_actors::{Error, Result};

use super::model::ModelKey;
use crate::proto::inference::model_version_policy::PolicyChoice;
use crate::proto::inference::ModelVersionPolicy;

/// One model folder found in a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDir {
    pub name: String,
    /// Its repository's path with `--model-namespacing=true`, else empty.
    pub namespace: String,
    pub path: PathBuf,
}

impl ModelDir {
    pub fn key(&self) -> ModelKey {
        ModelKey::new(self.namespace.clone(), self.name.clone())
    }
}

/// The namespace of a repository's models: its path as given with `--model-namespacing=true`
/// (as Triton names it), else the one empty namespace.
pub fn namespace_of(repository: &Path, namespacing: bool) -> String {
    if namespacing {
        repository.display().to_string()
    } else {
        String::new()
    }
}

/// What a scan found: the model folders by key, and the keys in error with their reasons.
pub type Scan = (BTreeMap<ModelKey, ModelDir>, BTreeMap<ModelKey, String>);

/// Adds `dir` to `found`, unless its key is there already: then the key is an error (Triton
/// refuses to guess which folder is meant), reported in `errors`, and neither folder is used.
pub fn insert_unique(found: &mut BTreeMap<ModelKey, ModelDir>, errors: &mut BTreeMap<ModelKey, String>, dir: ModelDir) {
    let key = dir.key();
    if let Some(prev) = found.get(&key) {
        let reason = format!(
            "model '{}' appears in two repositories: {} and {}",
            key.name,
            prev.path.display(),
            dir.path.display()
        );
        errors.insert(key, reason);
        return;
    }
    found.insert(key, dir);
}

/// Lists the model folders of all repositories (a repository given twice is read once). A
/// name found in two repositories is an error for that name, unless `namespacing` puts each
/// repository in a namespace of its own.
pub fn scan(repositories: &[PathBuf], namespacing: bool) -> Scan {
    let mut found = BTreeMap::new();
    let mut errors = BTreeMap::new();
    let mut seen: Vec<&PathBuf> = Vec::new();
    for repo in repositories {
        if seen.contains(&repo) {
            continue;
        }
        seen.push(repo);
        let Ok(entries) = std::fs::read_dir(repo) else {
            tracing::error!("cannot read model repository {}", repo.display());
            continue;
        };
        let namespace = namespace_of(repo, namespacing);
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_string) else { continue };
            if !path.is_dir() || name.starts_with('.') {
                continue;
            }
            insert_unique(&mut found, &mut errors, ModelDir { name, namespace: namespace.clone(), path });
        }
    }
    for key in errors.keys() {
        found.remove(key);
    }
    (found, errors)
}

/// The numeric version folders of a model, ascending.
pub fn versions_on_disk(model_dir: &Path) -> Vec<i64> {
    let mut versions: Vec<i64> = std::fs::read_dir(model_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i64>().ok()))
        .filter(|&v| v >= 0)
        .collect();
    versions.sort_unstable();
    versions
}

/// The versions a `version_policy` selects among those on disk (default: the latest one).
pub fn select_versions(model: &str, policy: Option<&ModelVersionPolicy>, on_disk: &[i64]) -> Result<Vec<i64>> {
    let chosen: Vec<i64> = match policy.and_then(|p| p.policy_choice.as_ref()) {
        None => on_disk.iter().rev().take(1).copied().collect(),
        Some(PolicyChoice::Latest(l)) => {
            let n = if l.num_versions == 0 { 1 } else { l.num_versions as usize };
            let mut v: Vec<i64> = on_disk.iter().rev().take(n).copied().collect();
            v.sort_unstable();
            v
        }
        Some(PolicyChoice::All(_)) => on_disk.to_vec(),
        Some(PolicyChoice::Specific(s)) => {
            for v in &s.versions {
                if !on_disk.contains(v) {
                    return Err(Error::invalid(format!(
                        "version {v} of model '{model}' is named by version_policy specific but has no folder"
                    )));
                }
            }
            let mut v = s.versions.clone();
            v.sort_unstable();
            v.dedup();
            v
        }
    };
    if chosen.is_empty() {
        return Err(Error::invalid(format!(
            "at least one version must be available under the version policy of model '{model}'"
        )));
    }
    Ok(chosen)
}

/// A hash of every file's relative path, size and modification time under a model folder.
pub fn fingerprint(model_dir: &Path) -> u64 {
    fn walk(dir: &Path, base: &Path, depth: usize, out: &mut Vec<(String, u64, u128)>) {
        if depth > 4 {
            return;
        }
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                walk(&path, base, depth + 1, out);
            } else {
                let rel = path.strip_prefix(base).unwrap_or(&path).to_string_lossy().into_owned();
                let mtime = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                out.push((rel, meta.len(), mtime));
            }
        }
    }
    let mut files = Vec::new();
    walk(model_dir, model_dir, 0, &mut files);
    files.sort();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    files.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::model_version_policy::{All, Latest, Specific};

    fn pol(c: PolicyChoice) -> ModelVersionPolicy {
        ModelVersionPolicy { policy_choice: Some(c) }
    }

    #[test]
    fn default_policy_takes_the_latest_version() {
        assert_eq!(select_versions("m", None, &[1, 3, 2]).unwrap_or_default().len(), 1);
        assert_eq!(select_versions("m", None, &[1, 2, 3]).unwrap(), vec![3]);
    }

    #[test]
    fn latest_all_and_specific() {
        let on_disk = [1, 2, 3];
        assert_eq!(
            select_versions("m", Some(&pol(PolicyChoice::Latest(Latest { num_versions: 2 }))), &on_disk).unwrap(),
            vec![2, 3]
        );
        assert_eq!(select_versions("m", Some(&pol(PolicyChoice::All(All {}))), &on_disk).unwrap(), vec![1, 2, 3]);
        assert_eq!(
            select_versions("m", Some(&pol(PolicyChoice::Specific(Specific { versions: vec![3, 1] }))), &on_disk)
                .unwrap(),
            vec![1, 3]
        );
        assert!(
            select_versions("m", Some(&pol(PolicyChoice::Specific(Specific { versions: vec![7] }))), &on_disk).is_err()
        );
        assert!(select_versions("m", None, &[]).is_err());
    }

    #[test]
    fn scan_finds_models_and_versions_and_fingerprint_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/1")).unwrap();
        std::fs::create_dir_all(dir.path().join("a/10")).unwrap();
        std::fs::create_dir_all(dir.path().join("a/notaversion")).unwrap();
        std::fs::create_dir_all(dir.path().join("b")).unwrap();
        let (found, errors) = scan(&[dir.path().to_path_buf()], false);
        assert_eq!(found.keys().map(|k| k.name.as_str()).collect::<Vec<_>>(), vec!["a", "b"]);
        assert!(errors.is_empty());
        assert_eq!(versions_on_disk(&dir.path().join("a")), vec![1, 10]);
        let before = fingerprint(&dir.path().join("a"));
        std::fs::write(dir.path().join("a/config.pbtxt"), "name: \"a\"").unwrap();
        assert_ne!(before, fingerprint(&dir.path().join("a")));
    }

    #[test]
    fn a_name_in_two_repositories_is_an_error() {
        let r1 = tempfile::tempdir().unwrap();
        let r2 = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(r1.path().join("m")).unwrap();
        std::fs::create_dir_all(r2.path().join("m")).unwrap();
        let (found, errors) = scan(&[r1.path().to_path_buf(), r2.path().to_path_buf()], false);
        assert!(found.is_empty());
        assert!(errors[&ModelKey::new("", "m")].contains("two repositories"));
    }

    #[test]
    fn with_namespacing_each_repository_keeps_its_own_model_of_a_name() {
        let r1 = tempfile::tempdir().unwrap();
        let r2 = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(r1.path().join("m")).unwrap();
        std::fs::create_dir_all(r2.path().join("m")).unwrap();
        let repos = [r1.path().to_path_buf(), r2.path().to_path_buf(), r1.path().to_path_buf()];
        let (found, errors) = scan(&repos, true);
        assert!(errors.is_empty(), "{errors:?}");
        let keys: Vec<ModelKey> = found.keys().cloned().collect();
        let mut want = vec![
            ModelKey::new(r1.path().display().to_string(), "m"),
            ModelKey::new(r2.path().display().to_string(), "m"),
        ];
        want.sort();
        assert_eq!(keys, want);
        assert_eq!(found[&want[0]].path.parent().unwrap().display().to_string(), want[0].namespace);
        assert_eq!(want[0].to_string(), format!("{}::m", want[0].namespace));
    }
}
