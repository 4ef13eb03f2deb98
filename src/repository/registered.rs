//! Repositories registered while the server runs (Triton's `RegisterModelRepository`, which
//! the SageMaker multi-model routes use): each is scanned beside the command line's, and may
//! serve one of its model folders under another name (SageMaker's target model). A name found
//! twice is an error for that name, as between any two repositories, unless
//! `--model-namespacing` gives each repository a namespace of its own.

use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use tritium_actors::{Error, ErrorKind, Result};

use super::scan::{insert_unique, scan, Scan};

#[derive(Debug, Clone)]
struct Entry {
    path: PathBuf,
    /// (folder, model name): the folder is served under that name.
    rename: Option<(String, String)>,
}

#[derive(Default)]
pub struct Registered {
    entries: Mutex<Vec<Entry>>,
}

impl Registered {
    /// Adds a repository; registering the same path twice is refused (Triton's ALREADY_EXISTS).
    pub fn register(&self, path: &Path, rename: Option<(String, String)>) -> Result<()> {
        if !path.is_dir() {
            return Err(Error::invalid(format!("failed to register '{}', repository not found", path.display())));
        }
        let mut entries = self.entries.lock();
        if entries.iter().any(|e| e.path == path) {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("model repository '{}' has already been registered", path.display()),
            ));
        }
        entries.push(Entry { path: path.to_path_buf(), rename });
        Ok(())
    }

    pub fn unregister(&self, path: &Path) -> Result<()> {
        let mut entries = self.entries.lock();
        let before = entries.len();
        entries.retain(|e| e.path != path);
        if entries.len() == before {
            return Err(Error::invalid(format!("failed to unregister '{}', repository not found", path.display())));
        }
        Ok(())
    }

    /// The model folders of `base` and of every registered repository, and the keys in error.
    /// With `namespacing` a registered repository is a namespace of its own, named by its path.
    pub fn scan_with(&self, base: &[PathBuf], namespacing: bool) -> Scan {
        let (mut found, mut errors) = scan(base, namespacing);
        for entry in self.entries.lock().iter() {
            let (dirs, errs) = scan(std::slice::from_ref(&entry.path), namespacing);
            errors.extend(errs);
            for (_, mut dir) in dirs {
                if let Some((from, to)) = &entry.rename {
                    if &dir.name == from {
                        dir.name = to.clone();
                    }
                }
                insert_unique(&mut found, &mut errors, dir);
            }
        }
        for key in errors.keys() {
            found.remove(key);
        }
        (found, errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repository::ModelKey;

    #[test]
    fn registered_repositories_join_the_scan_with_their_renames() {
        let base = tempfile::tempdir().unwrap();
        let extra = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(base.path().join("a")).unwrap();
        std::fs::create_dir_all(extra.path().join("model")).unwrap();
        std::fs::create_dir_all(extra.path().join("helper")).unwrap();
        let r = Registered::default();
        r.register(extra.path(), Some(("model".into(), "target".into()))).unwrap();
        let err = r.register(extra.path(), None).unwrap_err();
        assert_eq!(err.kind, ErrorKind::AlreadyExists);
        let (found, errors) = r.scan_with(&[base.path().to_path_buf()], false);
        assert!(errors.is_empty());
        assert_eq!(found.keys().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["a", "helper", "target"]);
        assert_eq!(found[&ModelKey::new("", "target")].path, extra.path().join("model"));
        let (found, _) = r.scan_with(&[base.path().to_path_buf()], true);
        let target = ModelKey::new(extra.path().display().to_string(), "target");
        assert_eq!(found[&target].path, extra.path().join("model"));
        r.unregister(extra.path()).unwrap();
        assert!(r.unregister(extra.path()).is_err());
        assert_eq!(r.scan_with(&[base.path().to_path_buf()], false).0.len(), 1);
        assert!(r.register(&base.path().join("nope"), None).is_err());
    }
}
