//! Model files sent in a load request (Triton's `file:<path>` load parameters, e.g.
//! `file:1/model.onnx`): they are written into a private temporary folder that stands in for
//! the model's folder for that load, never anywhere else. A path must stay inside the folder
//! (no `..`, no absolute path); a path the file system refuses (a name longer than NAME_MAX)
//! fails the load, as any other write error does. Each file is created new (never through a
//! link already there). The folder lives as long as a version loaded from it, and is removed
//! after. A model name that a load request gives is one plain path segment
//! ([`check_model_name`]): it names the folder, so `../x` or `/x` would leave it.

use std::io::Write;
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

/// Refuses a model name that is not one plain path segment (empty, `.`, `..`, with `/` or NUL):
/// a load request's name becomes a folder name, in the temporary folder of its files or in an
/// object-storage mirror.
pub fn check_model_name(name: &str) -> Result<()> {
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0']);
    if plain {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "invalid model name '{}': a model name must be one plain path segment (not empty, '.' or '..', \
             without '/' or NUL)",
            name.escape_debug()
        )))
    }
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
    check_model_name(name)?;
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
    materialize_into(&root, files)?;
    Ok(OverrideDir {
        dir: ModelDir { name: name.to_string(), namespace: String::new(), path: root },
        keep: Arc::new(keep),
    })
}

/// Writes `files` into the folder `root`.
fn materialize_into(root: &Path, files: &[(String, Vec<u8>)]) -> Result<()> {
    for (key, content) in files {
        let rel = relative_path(key, key.strip_prefix(FILE_PREFIX).unwrap_or(key))?;
        let path = root.join(rel);
        // No folder on the way may be a link (the folder is new and private, so none should be).
        let mut on_the_way = root.to_path_buf();
        for c in rel.parent().into_iter().flat_map(Path::components) {
            on_the_way.push(c);
            if std::fs::symlink_metadata(&on_the_way).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(invalid(key, "the path goes through a link"));
            }
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| invalid(key, e))?;
        }
        // `create_new` (O_EXCL): a link at the path is refused, never followed.
        let mut file =
            std::fs::OpenOptions::new().write(true).create_new(true).open(&path).map_err(|e| invalid(key, e))?;
        file.write_all(content).map_err(|e| invalid(key, e))?;
    }
    Ok(())
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
    fn model_names_that_are_not_one_plain_segment_are_refused_and_nothing_is_written() {
        let outside = tempfile::tempdir().unwrap();
        let escape = outside.path().join("escaped");
        let escape = escape.to_str().unwrap();
        for name in ["", ".", "..", "../escaped", "a/b", "a\0b", escape] {
            let e = materialize(name, true, &[("file:1/model.onnx".to_string(), b"a".to_vec())]).err().unwrap();
            assert_eq!(e.kind, tritium_actors::ErrorKind::InvalidArgument, "{name:?}");
            assert!(e.message.starts_with("invalid model name '"), "{name:?}: {}", e.message);
        }
        assert!(!outside.path().join("escaped").exists());
        for name in ["m", "a.b", "..a", "model-1_x", "ünï"] {
            check_model_name(name).unwrap();
        }
    }

    #[test]
    fn a_link_inside_the_folder_is_not_followed() {
        // Two parameters cannot name one file (they are keys of a map); were a link there, the
        // write is refused rather than sent through it.
        let outside = tempfile::tempdir().unwrap();
        let o = materialize("m", true, &[]).unwrap();
        std::os::unix::fs::symlink(outside.path().join("target"), o.dir.path.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), o.dir.path.join("dir")).unwrap();
        for key in ["file:link", "file:dir/x", "file:dir/1/x"] {
            let e = super::materialize_into(&o.dir.path, &[(key.to_string(), b"a".to_vec())]).err().unwrap();
            assert!(e.message.starts_with(&format!("Invalid file parameter '{key}'")), "{}", e.message);
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0, "nothing written outside");
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
