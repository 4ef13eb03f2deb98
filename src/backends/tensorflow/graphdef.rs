//! `platform: "tensorflow_graphdef"`: a `<version>/model.graphdef` file (a serialized GraphDef,
//! or the config's `default_model_filename`) imported into a graph and run in a session, as
//! Triton's TensorFlow backend ran them. A GraphDef has no signature: a config tensor is named
//! after the graph's node (`x`, or `x:1` for another output of the node than the first), and
//! its datatype and shape are the node's; the config must list every input and output (there is
//! no auto-complete). The same thread parameters and `TF_INIT_OPS_FILE` apply (a GraphDef with
//! variables names its initializer there, e.g. `{"init_ops": ["init"]}`).

use std::path::Path;

use tensorflow::{Graph, ImportGraphDefOptions, Output, Session, SessionOptions};
use tritium_actors::{Error, Result};

use super::signature::{SigTensor, Signature};
use crate::config::model_config::SchedulingChoice;
use crate::config::ModelConfig;

pub const PLATFORM: &str = "tensorflow_graphdef";

/// The graph of `file` and a session over it.
pub fn import(model: &str, file: &Path, session_options: &SessionOptions) -> Result<(Graph, Session)> {
    let bytes = std::fs::read(file)
        .map_err(|e| Error::invalid(format!("unable to load model '{model}': cannot read {}: {e}", file.display())))?;
    let mut graph = Graph::new();
    graph.import_graph_def(&bytes, &ImportGraphDefOptions::new()).map_err(|e| {
        Error::invalid(format!(
            "unable to load model '{model}': TensorFlow could not import {} as a GraphDef: {e}",
            file.display()
        ))
    })?;
    let session = Session::new(session_options, &graph).map_err(|e| {
        Error::invalid(format!("unable to load model '{model}': TensorFlow could not start a session: {e}"))
    })?;
    Ok((graph, session))
}

/// `node` or `node:index`.
fn split_name(name: &str) -> (&str, i32) {
    match name.rsplit_once(':') {
        Some((node, index)) if !node.is_empty() => match index.parse::<i32>() {
            Ok(i) if i >= 0 => (node, i),
            _ => (name, 0),
        },
        _ => (name, 0),
    }
}

/// The graph's tensor a config name stands for, as a signature entry keyed by that name.
fn tensor(model: &str, graph: &Graph, name: &str, kind: &str) -> Result<SigTensor> {
    let (node, index) = split_name(name);
    let op = graph.operation_by_name(node).ok().flatten().ok_or_else(|| {
        Error::invalid(format!("unable to load model '{model}', {kind} '{name}': the GraphDef has no node '{node}'"))
    })?;
    let outputs = op.num_outputs();
    if index as usize >= outputs {
        return Err(Error::invalid(format!(
            "unable to load model '{model}', {kind} '{name}': node '{node}' has {outputs} output(s)"
        )));
    }
    let tf_type = op.output_type(index as usize);
    let shape = graph.tensor_shape(Output { operation: op, index }).ok();
    Ok(SigTensor {
        key: name.to_string(),
        op: node.to_string(),
        index,
        datatype: super::convert::datatype(tf_type),
        tf_type: tf_type.to_string(),
        shape: shape.and_then(|s| s.dims().map(|rank| (0..rank).map(|i| s[i].unwrap_or(-1).max(-1)).collect())),
    })
}

/// A signature made from the config's names (inputs, sequence controls and states in; outputs
/// and state outputs out), each looked up in the graph.
pub fn signature(config: &ModelConfig, graph: &Graph) -> Result<Signature> {
    let model = &config.name;
    if config.input.is_empty() || config.output.is_empty() {
        return Err(Error::invalid(format!(
            "unable to load model '{model}': a TensorFlow GraphDef has no signature to complete the configuration \
             from; list every input and output (named after the graph's nodes)"
        )));
    }
    let mut inputs: Vec<String> = config.input.iter().map(|i| i.name.clone()).collect();
    let mut outputs: Vec<String> = config.output.iter().map(|o| o.name.clone()).collect();
    if let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice {
        inputs.extend(sb.control_input.iter().map(|c| c.name.clone()));
        inputs.extend(sb.state.iter().map(|s| s.input_name.clone()));
        outputs.extend(sb.state.iter().map(|s| s.output_name.clone()));
    }
    let mut sig_inputs = inputs.iter().map(|n| tensor(model, graph, n, "input")).collect::<Result<Vec<_>>>()?;
    let mut sig_outputs = outputs.iter().map(|n| tensor(model, graph, n, "output")).collect::<Result<Vec<_>>>()?;
    sig_inputs.sort_by(|a, b| a.key.cmp(&b.key));
    sig_outputs.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(Signature { name: "the GraphDef's nodes".into(), inputs: sig_inputs, outputs: sig_outputs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_a_node_and_an_optional_output_index() {
        assert_eq!(split_name("x"), ("x", 0));
        assert_eq!(split_name("scope/x:2"), ("scope/x", 2));
        assert_eq!(split_name("x:y"), ("x:y", 0));
        assert_eq!(split_name(":1"), (":1", 0));
        assert_eq!(split_name("x:-1"), ("x:-1", 0));
    }
}
