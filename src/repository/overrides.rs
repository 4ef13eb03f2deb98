//! Model files sent in a load request (Triton's `file:<path>` load parameters, e.g.
//! `file:1/model.onnx`): they are written into a private temporary folder that stands in for
//! the model's folder for that load, never anywhere else. A path must stay inside the folder
//! (no `..`, no absolute path); a path the file system refuses (a name longer than NAME_MAX)
//! fails the load, as any other write error does. The folder lives as long as a version loaded
//! from it, and is removed after.

use std::path::{Component, Path};
use std::sync::Arc;

use tempfile::TempDir;
use tritium_actors::{Error, Result};

use super::scan::ModelDir;

/// The prefix of a load parameter that carries a model file.
pub const FILE_PREFIX: &str = "file:";

/// A model folder made from the files of a load request.
pub struct OverrideDir {
    pub dir: ModelDir,
    /// Removes the folder when the last version loaded from it is gone.
    pub keep: Arc<TempDir>,
}

fn invalid(key: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid(format!("Invalid file parameter '{key}': {why}"))
}

/// The path inside the model folder that a `file:` parameter names.
fn relative_path<'a>(key: &str, rel: &'a str) -> Result<&'a Path> {
    let path = Path::new(rel);
    if rel.is_empty() || !path.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(invalid(key, "the path must name a file inside the model directory (no '..', no absolute path)"));
    }
    Ok(path)
}

/// Writes `files` (parameter name, content) into a new temporary folder for model `name`.
/// Triton requires a `config` with them; `has_config` says whether the request has one.
pub fn materialize(name: &str, has_config: bool, files: &[(String, Vec<u8>)]) -> Result<OverrideDir> {
    if !has_config {
        return Err(Error::invalid("Load parameter 'config' must be specified for model file override"));
    }
    let keep = tempfile::Builder::new()
        .prefix("tritium-override-")
        .tempdir()
        .map_err(|e| Error::internal(format!("cannot make a folder for the files of model '{name}': {e}")))?;
    let root = keep.path().join(name);
    std::fs::create_dir(&root)
        .map_err(|e| Error::internal(format!("cannot make a folder for the files of model '{name}': {e}")))?;
    for (key, content) in files {
        let rel = relative_path(key, key.strip_prefix(FILE_PREFIX).unwrap_or(key))?;
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| invalid(key, e))?;
        }
        std::fs::write(&path, content).map_err(|e| invalid(key, e))?;
    }
    Ok(OverrideDir {
        dir: ModelDir { name: name.to_string(), namespace: String::new(), path: root },
        keep: Arc::new(keep),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_files_inside_a_private_model_folder() {
        let files = vec![("file:1/model.onnx".to_string(), b"onnx".to_vec())];
        let o = materialize("m", true, &files).unwrap();
        assert_eq!(o.dir.name, "m");
        assert!(o.dir.path.starts_with(o.keep.path()));
        assert_eq!(std::fs::read(o.dir.path.join("1/model.onnx")).unwrap(), b"onnx");
        let root = o.keep.path().to_path_buf();
        drop(o);
        assert!(!root.exists(), "the folder goes with the last holder");
    }

    #[test]
    fn refuses_paths_that_leave_the_model_folder() {
        for key in ["file:../x", "file:1/../../x", "file:/etc/x", "file:", "file:./1/model.onnx"] {
            let e = materialize("m", true, &[(key.to_string(), b"a".to_vec())]).err().unwrap();
            assert!(e.message.starts_with(&format!("Invalid file parameter '{key}'")), "{key}: {}", e.message);
        }
    }

    #[test]
    fn a_name_longer_than_name_max_fails_and_a_config_is_required() {
        let key = format!("file:{}", "A".repeat(256));
        let e = materialize("m", true, &[(key.clone(), b"a".to_vec())]).err().unwrap();
        assert!(e.message.starts_with(&format!("Invalid file parameter '{key}'")), "{}", e.message);
        let e = materialize("m", false, &[("file:1/model.onnx".into(), vec![])]).err().unwrap();
        assert_eq!(e.message, "Load parameter 'config' must be specified for model file override");
    }
}
