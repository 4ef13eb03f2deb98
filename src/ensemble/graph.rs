//! An ensemble's graph, read from `ensemble_scheduling` and checked before the ensemble can be
//! READY: every step input is an ensemble input or the output of exactly one step, nothing is
//! produced twice, there are no cycles, the composing models exist, and datatypes and shapes
//! agree. Each error names the step and the tensor.

use std::collections::{HashMap, HashSet};

use tritium_actors::ensemble::Plan;
pub use tritium_actors::ensemble::Step;
use tritium_actors::{DataType, Error, ModelPolicy, Result};

use crate::config::model_config::SchedulingChoice;
use crate::config::{engine_data_type, ModelConfig};

#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub name: String,
    pub steps: Vec<Step>,
    /// Ensemble inputs and outputs with their datatypes and dims (without the batch dim).
    pub inputs: Vec<(String, DataType, Vec<i64>)>,
    pub outputs: Vec<(String, DataType, Vec<i64>)>,
    pub batches: bool,
}

fn step_name(i: usize, step: &Step) -> String {
    format!("step {} ('{}')", i + 1, step.model)
}

impl Graph {
    /// Reads and checks the structure (no models needed).
    pub fn from_config(config: &ModelConfig) -> Result<Graph> {
        let name = config.name.clone();
        let invalid = |msg: String| Error::invalid(format!("ensemble '{name}': {msg}"));
        let Some(SchedulingChoice::EnsembleScheduling(es)) = &config.scheduling_choice else {
            return Err(invalid("platform 'ensemble' needs 'ensemble_scheduling { step [...] }'".into()));
        };
        if es.step.is_empty() {
            return Err(invalid("ensemble_scheduling has no step".into()));
        }
        let tensor = |n: &str, dt: i32, dims: &[i64]| -> Result<(String, DataType, Vec<i64>)> {
            let dt = engine_data_type(dt).ok_or_else(|| invalid(format!("tensor '{n}' has no valid data_type")))?;
            Ok((n.to_string(), dt, dims.to_vec()))
        };
        let inputs = config.input.iter().map(|i| tensor(&i.name, i.data_type, &i.dims)).collect::<Result<Vec<_>>>()?;
        let outputs =
            config.output.iter().map(|o| tensor(&o.name, o.data_type, &o.dims)).collect::<Result<Vec<_>>>()?;
        let mut steps = Vec::new();
        for s in &es.step {
            if s.model_name.is_empty() {
                return Err(invalid(format!("step {} has no model_name", steps.len() + 1)));
            }
            if s.model_name == name {
                return Err(invalid(format!("step {} runs the ensemble itself", steps.len() + 1)));
            }
            let mut ins: Vec<(String, String)> = s.input_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let mut outs: Vec<(String, String)> = s.output_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            ins.sort();
            outs.sort();
            steps.push(Step {
                model: s.model_name.clone(),
                version: (s.model_version > 0).then_some(s.model_version),
                inputs: ins,
                outputs: outs,
            });
        }
        let graph = Graph { name: name.clone(), steps, inputs, outputs, batches: config.max_batch_size > 0 };
        graph.check_structure()?;
        Ok(graph)
    }

    fn check_structure(&self) -> Result<()> {
        let invalid = |msg: String| Error::invalid(format!("ensemble '{}': {msg}", self.name));
        // Who produces each tensor.
        let mut producer: HashMap<&str, Option<usize>> =
            self.inputs.iter().map(|(n, _, _)| (n.as_str(), None)).collect();
        for (i, step) in self.steps.iter().enumerate() {
            for (output, tensor) in &step.outputs {
                if let Some(other) = producer.insert(tensor, Some(i)) {
                    let by = match other {
                        None => "it is also an ensemble input".to_string(),
                        Some(j) => format!("{} writes it too", step_name(j, &self.steps[j])),
                    };
                    return Err(invalid(format!(
                        "{} output '{output}' writes tensor '{tensor}', but {by}",
                        step_name(i, step)
                    )));
                }
            }
        }
        for (i, step) in self.steps.iter().enumerate() {
            for (input, tensor) in &step.inputs {
                if !producer.contains_key(tensor.as_str()) {
                    return Err(invalid(format!(
                        "{} input '{input}' reads tensor '{tensor}', which is neither an ensemble input nor any step's output",
                        step_name(i, step)
                    )));
                }
            }
        }
        for (output, _, _) in &self.outputs {
            if !matches!(producer.get(output.as_str()), Some(Some(_))) {
                return Err(invalid(format!("ensemble output '{output}' is not written by any step")));
            }
        }
        // No cycles: every step must become runnable from the ensemble inputs.
        let mut available: HashSet<&str> = self.inputs.iter().map(|(n, _, _)| n.as_str()).collect();
        let mut done = vec![false; self.steps.len()];
        loop {
            let mut progressed = false;
            for (i, step) in self.steps.iter().enumerate() {
                if !done[i] && step.inputs.iter().all(|(_, t)| available.contains(t.as_str())) {
                    done[i] = true;
                    progressed = true;
                    available.extend(step.outputs.iter().map(|(_, t)| t.as_str()));
                }
            }
            if !progressed {
                break;
            }
        }
        if let Some(i) = done.iter().position(|d| !d) {
            let step = &self.steps[i];
            let waiting: Vec<&str> =
                step.inputs.iter().map(|(_, t)| t.as_str()).filter(|t| !available.contains(t)).collect();
            return Err(invalid(format!(
                "{} is part of a cycle: it waits for {waiting:?}, which depend on it",
                step_name(i, step)
            )));
        }
        Ok(())
    }

    /// The datatype and dims of each ensemble tensor, from the ensemble inputs and the steps'
    /// model outputs.
    pub fn check_models(
        &self,
        policy_of: impl Fn(&str, Option<i64>) -> Result<std::sync::Arc<ModelPolicy>>,
    ) -> Result<()> {
        let invalid = |msg: String| Error::invalid(format!("ensemble '{}': {msg}", self.name));
        let mut known: HashMap<String, (DataType, Vec<i64>)> =
            self.inputs.iter().map(|(n, dt, dims)| (n.clone(), (*dt, dims.clone()))).collect();
        let mut policies = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let policy = policy_of(&step.model, step.version).map_err(|e| {
                invalid(format!(
                    "{}: composing model '{}' is not available: {}",
                    step_name(i, step),
                    step.model,
                    e.message
                ))
            })?;
            if policy.decoupled {
                return Err(invalid(format!("{}: decoupled composing models are not supported", step_name(i, step))));
            }
            if policy.batches() != self.batches {
                return Err(invalid(format!(
                    "{}: model '{}' {} but the ensemble {}; both must batch or neither",
                    step_name(i, step),
                    step.model,
                    if policy.batches() { "batches" } else { "does not batch" },
                    if self.batches { "does" } else { "does not" }
                )));
            }
            for (output, tensor) in &step.outputs {
                let spec = policy.output(output).ok_or_else(|| {
                    invalid(format!(
                        "{}: model '{}' has no output '{output}' (mapped to '{tensor}')",
                        step_name(i, step),
                        step.model
                    ))
                })?;
                known.insert(tensor.clone(), (spec.datatype, spec.dims.clone()));
            }
            policies.push(policy);
        }
        let agree =
            |a: &[i64], b: &[i64]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| *x < 0 || *y < 0 || x == y);
        for (i, step) in self.steps.iter().enumerate() {
            for (input, tensor) in &step.inputs {
                let spec = policies[i].input(input).ok_or_else(|| {
                    invalid(format!(
                        "{}: model '{}' has no input '{input}' (read from '{tensor}')",
                        step_name(i, step),
                        step.model
                    ))
                })?;
                let (dt, dims) = &known[tensor];
                if *dt != spec.datatype {
                    return Err(invalid(format!(
                        "{} input '{input}' is {}, but tensor '{tensor}' is {dt}",
                        step_name(i, step),
                        spec.datatype
                    )));
                }
                if !agree(dims, &spec.dims) {
                    return Err(invalid(format!(
                        "{} input '{input}' has dims {:?}, but tensor '{tensor}' has dims {dims:?}",
                        step_name(i, step),
                        spec.dims
                    )));
                }
            }
        }
        for (output, dt, dims) in &self.outputs {
            let (have, have_dims) = &known[output];
            if have != dt || !agree(have_dims, dims) {
                return Err(invalid(format!(
                    "ensemble output '{output}' is {dt} {dims:?}, but the step that writes it gives {have} {have_dims:?}"
                )));
            }
        }
        Ok(())
    }

    /// What the ensemble actor runs.
    pub fn plan(&self) -> Plan {
        Plan {
            name: self.name.clone(),
            steps: self.steps.clone(),
            outputs: self.outputs.iter().map(|(n, _, _)| n.clone()).collect(),
        }
    }

    /// The composing models, for readiness.
    pub fn composing(&self) -> Vec<(String, Option<i64>)> {
        let mut out: Vec<(String, Option<i64>)> = self.steps.iter().map(|s| (s.model.clone(), s.version)).collect();
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::from_json;

    fn graph(steps: &str) -> Result<Graph> {
        let json = format!(
            r#"{{"name":"ens","platform":"ensemble","max_batch_size":8,
                "input":[{{"name":"IN","data_type":"TYPE_FP32","dims":[4]}}],
                "output":[{{"name":"OUT","data_type":"TYPE_FP32","dims":[4]}}],
                "ensemble_scheduling":{{"step":{steps}}}}}"#
        );
        Graph::from_config(&from_json(&json).unwrap())
    }

    #[test]
    fn a_chain_and_a_diamond_are_fine() {
        graph(
            r#"[{"model_name":"a","model_version":-1,"input_map":{"X":"IN"},"output_map":{"Y":"mid"}},
                  {"model_name":"b","model_version":1,"input_map":{"X":"mid"},"output_map":{"Y":"OUT"}}]"#,
        )
        .unwrap();
        let g = graph(
            r#"[{"model_name":"a","input_map":{"X":"IN"},"output_map":{"Y":"l"}},
                          {"model_name":"a","input_map":{"X":"IN"},"output_map":{"Y":"r"}},
                          {"model_name":"j","input_map":{"A":"l","B":"r"},"output_map":{"S":"OUT"}}]"#,
        )
        .unwrap();
        assert_eq!(g.composing(), vec![("a".to_string(), None), ("j".to_string(), None)]);
    }

    #[test]
    fn broken_graphs_name_the_step_and_tensor() {
        let e = graph(r#"[{"model_name":"a","input_map":{"X":"nope"},"output_map":{"Y":"OUT"}}]"#).unwrap_err();
        assert!(e.message.contains("step 1 ('a') input 'X' reads tensor 'nope'"), "{e}");
        let e = graph(
            r#"[{"model_name":"a","input_map":{"X":"IN"},"output_map":{"Y":"OUT"}},
                          {"model_name":"b","input_map":{"X":"IN"},"output_map":{"Y":"OUT"}}]"#,
        )
        .unwrap_err();
        assert!(e.message.contains("writes tensor 'OUT', but step 1 ('a') writes it too"), "{e}");
        let e = graph(
            r#"[{"model_name":"a","input_map":{"X":"IN","Z":"q"},"output_map":{"Y":"p"}},
                          {"model_name":"b","input_map":{"X":"p"},"output_map":{"Y":"q","W":"OUT"}}]"#,
        )
        .unwrap_err();
        assert!(e.message.contains("cycle"), "{e}");
        let e = graph(r#"[{"model_name":"a","input_map":{"X":"IN"},"output_map":{"Y":"mid"}}]"#).unwrap_err();
        assert!(e.message.contains("ensemble output 'OUT' is not written by any step"), "{e}");
        let e = graph(r#"[{"model_name":"ens","input_map":{"X":"IN"},"output_map":{"Y":"OUT"}}]"#).unwrap_err();
        assert!(e.message.contains("runs the ensemble itself"), "{e}");
    }
}
