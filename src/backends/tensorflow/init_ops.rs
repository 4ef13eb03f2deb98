//! `TF_INIT_OPS_FILE`, as Triton's TensorFlow backend reads it: the parameter names a JSON file,
//! `{"init_ops": ["op", ...]}`, looked for in the version folder first and then in the model
//! folder; each session runs those operations (as targets: nothing fed, nothing fetched) once,
//! after it loads and before it serves. A file that is missing or malformed, or an operation the
//! graph lacks or TensorFlow fails to run, fails the load saying which.

use std::path::{Path, PathBuf};

use tensorflow::{Graph, Session, SessionRunArgs};
use tritium_actors::{Error, Result};

use crate::config::ModelConfig;

pub const PARAMETER: &str = "TF_INIT_OPS_FILE";

/// The operations the config's `TF_INIT_OPS_FILE` names (none without the parameter). `model_file`
/// is `<model>/<version>/model.savedmodel` or `model.graphdef` (or `default_model_filename`).
pub fn read(config: &ModelConfig, model_file: &Path) -> Result<Vec<String>> {
    let Some(file) = config.parameters.get(PARAMETER).map(|p| p.string_value.trim()).filter(|s| !s.is_empty()) else {
        return Ok(Vec::new());
    };
    let model = &config.name;
    let version_dir = model_file.parent().unwrap_or(Path::new("."));
    let model_dir = version_dir.parent().unwrap_or(Path::new("."));
    let candidates: Vec<PathBuf> = [version_dir, model_dir].iter().map(|d| d.join(file)).collect();
    let Some(path) = candidates.iter().find(|p| p.is_file()) else {
        return Err(Error::invalid(format!(
            "unable to load model '{model}': {PARAMETER} '{file}' is in neither {} nor {}",
            version_dir.display(),
            model_dir.display()
        )));
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::invalid(format!("unable to load model '{model}': cannot read {}: {e}", path.display())))?;
    parse(&text).map_err(|why| Error::invalid(format!("unable to load model '{model}': {}: {why}", path.display())))
}

/// `{"init_ops": [names]}`; the reason otherwise.
fn parse(text: &str) -> std::result::Result<Vec<String>, String> {
    let json: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let ops = json.get("init_ops").ok_or("no \"init_ops\" member")?;
    let ops = ops.as_array().ok_or("\"init_ops\" is not an array")?;
    ops.iter()
        .map(|op| {
            op.as_str().map(str::to_string).ok_or_else(|| format!("\"init_ops\" holds {op}, not an operation name"))
        })
        .collect()
}

/// Runs `ops` as targets of one session run.
pub fn run(model: &str, session: &Session, graph: &Graph, ops: &[String]) -> Result<()> {
    if ops.is_empty() {
        return Ok(());
    }
    let operations = ops
        .iter()
        .map(|name| {
            graph.operation_by_name_required(name).map_err(|e| {
                Error::invalid(format!("unable to load model '{model}': init op '{name}' ({PARAMETER}): {e}"))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut args = SessionRunArgs::new();
    for op in &operations {
        args.add_target(op);
    }
    session.run(&mut args).map_err(|e| {
        Error::invalid(format!(
            "unable to load model '{model}': TensorFlow failed the init ops {ops:?} ({PARAMETER}): {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_an_object_with_an_array_of_names() {
        assert_eq!(parse(r#"{"init_ops": ["init", "tables"]}"#).unwrap(), ["init", "tables"]);
        assert_eq!(parse(r#"{"init_ops": []}"#).unwrap(), Vec::<String>::new());
        assert!(parse("init").unwrap_err().contains("not JSON"));
        assert!(parse(r#"{"ops": ["init"]}"#).unwrap_err().contains("no \"init_ops\""));
        assert!(parse(r#"{"init_ops": "init"}"#).unwrap_err().contains("not an array"));
        assert!(parse(r#"{"init_ops": [1]}"#).unwrap_err().contains("holds 1"));
    }

    #[test]
    fn the_version_folder_wins_over_the_model_folder() {
        let dir = tempfile::tempdir().unwrap();
        let savedmodel = dir.path().join("m/1/model.savedmodel");
        std::fs::create_dir_all(&savedmodel).unwrap();
        let config: ModelConfig = crate::config::from_json(
            r#"{"name":"m","parameters":{"TF_INIT_OPS_FILE":{"string_value":"init_ops.json"}}}"#,
        )
        .unwrap();
        let err = read(&config, &savedmodel).unwrap_err().to_string();
        assert!(err.contains("is in neither"), "{err}");
        std::fs::write(dir.path().join("m/init_ops.json"), r#"{"init_ops": ["from_model"]}"#).unwrap();
        assert_eq!(read(&config, &savedmodel).unwrap(), ["from_model"]);
        std::fs::write(dir.path().join("m/1/init_ops.json"), r#"{"init_ops": ["from_version"]}"#).unwrap();
        assert_eq!(read(&config, &savedmodel).unwrap(), ["from_version"]);
        let none: ModelConfig = crate::config::from_json(r#"{"name":"m"}"#).unwrap();
        assert!(read(&none, &savedmodel).unwrap().is_empty());
    }
}
