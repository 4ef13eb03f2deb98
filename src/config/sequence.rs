//! `sequence_batching { ... }` of a validated config → the engine's `SequencePolicy`: the
//! strategy, the idle timeout, the control inputs and the implicit state.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use tritium_actors::{
    ControlKind, ControlSpec, DataType, Error, InitialState, Result, SequencePolicy, SequenceStrategy, StateSpec,
};

use super::engine_data_type;
use crate::proto::inference::model_sequence_batching::initial_state::StateData;
use crate::proto::inference::model_sequence_batching::{control, StrategyChoice};
use crate::proto::inference::ModelSequenceBatching;

/// Triton's default `max_sequence_idle_microseconds`: one second.
pub const DEFAULT_MAX_IDLE_US: u64 = 1_000_000;

fn control_spec(
    model: &str,
    input: &str,
    c: &crate::proto::inference::model_sequence_batching::Control,
) -> Result<ControlSpec> {
    let kind = match control::Kind::try_from(c.kind) {
        Ok(control::Kind::ControlSequenceStart) => ControlKind::Start,
        Ok(control::Kind::ControlSequenceEnd) => ControlKind::End,
        Ok(control::Kind::ControlSequenceReady) => ControlKind::Ready,
        Ok(control::Kind::ControlSequenceCorrid) => ControlKind::CorrId,
        Err(_) => {
            return Err(Error::invalid(format!(
                "model '{model}': control input '{input}' has an unknown kind {}",
                c.kind
            )))
        }
    };
    let pair_error = || {
        Error::invalid(format!(
            "model '{model}': control input '{input}' must give exactly two values in one of int32_false_true, fp32_false_true or bool_false_true"
        ))
    };
    let (datatype, f, t) = if kind == ControlKind::CorrId {
        let datatype = engine_data_type(c.data_type).unwrap_or(DataType::U64);
        if !matches!(datatype, DataType::U64 | DataType::Bytes | DataType::I64 | DataType::U32 | DataType::I32) {
            return Err(Error::invalid(format!(
                "model '{model}': CORRID control '{input}' must be TYPE_UINT64 or TYPE_STRING (or another integer type)"
            )));
        }
        let datatype = if datatype == DataType::Bytes { DataType::Bytes } else { DataType::U64 };
        (datatype, Vec::new(), Vec::new())
    } else if c.int32_false_true.len() == 2 {
        (DataType::I32, c.int32_false_true[0].to_le_bytes().to_vec(), c.int32_false_true[1].to_le_bytes().to_vec())
    } else if c.fp32_false_true.len() == 2 {
        (DataType::F32, c.fp32_false_true[0].to_le_bytes().to_vec(), c.fp32_false_true[1].to_le_bytes().to_vec())
    } else if c.bool_false_true.len() == 2 {
        (DataType::Bool, vec![c.bool_false_true[0] as u8], vec![c.bool_false_true[1] as u8])
    } else {
        return Err(pair_error());
    };
    Ok(ControlSpec { kind, input: input.to_string(), datatype, false_value: f, true_value: t })
}

/// `parameters` may set `max_sequence_backlog` (Tritium's own): how many new sequences may wait
/// for a slot before one more is refused as unavailable; and `max_sequence_state_bytes`: the most
/// bytes of implicit state all the model's sequences may hold together (0 or absent: no cap),
/// beyond which the longest-idle sequences are evicted and their next request refused.
pub fn sequence_policy(
    model: &str,
    sb: &ModelSequenceBatching,
    parameters: &std::collections::HashMap<String, crate::proto::inference::ModelParameter>,
    model_dir: Option<&Path>,
) -> Result<SequencePolicy> {
    let strategy = match &sb.strategy_choice {
        None | Some(StrategyChoice::Direct(_)) => SequenceStrategy::Direct,
        Some(StrategyChoice::Oldest(o)) => SequenceStrategy::Oldest {
            max_candidate_sequences: o.max_candidate_sequences.max(0) as usize,
            preferred_batch_sizes: o.preferred_batch_size.iter().map(|s| (*s).max(0) as usize).collect(),
            max_queue_delay: Duration::from_micros(o.max_queue_delay_microseconds),
        },
    };
    let mut controls = Vec::new();
    for input in &sb.control_input {
        for c in &input.control {
            controls.push(control_spec(model, &input.name, c)?);
        }
    }
    let mut states = Vec::new();
    for s in &sb.state {
        let datatype = engine_data_type(s.data_type).ok_or_else(|| {
            Error::invalid(format!("model '{model}': state '{}' has no valid data_type", s.input_name))
        })?;
        if s.input_name.is_empty() || s.output_name.is_empty() {
            return Err(Error::invalid(format!(
                "model '{model}': every sequence_batching state needs input_name and output_name"
            )));
        }
        let initial = match s.initial_state.first().and_then(|i| i.state_data.as_ref()) {
            None | Some(StateData::ZeroData(_)) => InitialState::Zero,
            Some(StateData::DataFile(file)) => {
                let dir = model_dir.ok_or_else(|| {
                    Error::invalid(format!("model '{model}': initial_state data_file needs the model folder"))
                })?;
                let path = dir.join("initial_state").join(file);
                let data = std::fs::read(&path).map_err(|e| {
                    Error::invalid(format!("model '{model}': cannot read initial state {}: {e}", path.display()))
                })?;
                InitialState::Data(Bytes::from(data))
            }
        };
        let dims = match s.initial_state.first() {
            Some(i) if !i.dims.is_empty() => i.dims.clone(),
            _ => s.dims.clone(),
        };
        states.push(StateSpec { input: s.input_name.clone(), output: s.output_name.clone(), datatype, dims, initial });
    }
    let max_backlog = super::uint_parameter(model, parameters, "max_sequence_backlog")?
        .map_or(tritium_actors::policy::DEFAULT_QUEUE_CAPACITY, |n| n as usize);
    let start_grace = super::uint_parameter(model, parameters, "sequence_start_grace_ms")?
        .map_or(tritium_actors::policy::DEFAULT_START_GRACE, Duration::from_millis);
    let max_state_bytes = super::uint_parameter(model, parameters, "max_sequence_state_bytes")?.filter(|n| *n > 0);
    let idle =
        if sb.max_sequence_idle_microseconds == 0 { DEFAULT_MAX_IDLE_US } else { sb.max_sequence_idle_microseconds };
    Ok(SequencePolicy {
        strategy,
        max_idle: Duration::from_micros(idle),
        controls,
        states,
        max_backlog,
        start_grace,
        max_state_bytes,
        iterative: sb.iterative_sequence,
    })
}

#[cfg(test)]
mod tests {
    use super::super::from_json;
    use super::*;
    use crate::proto::inference::model_config::SchedulingChoice;

    fn seq(json: &str) -> Result<SequencePolicy> {
        let config = from_json(json).unwrap();
        let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice else {
            panic!("no sequence_batching")
        };
        sequence_policy("m", sb, &config.parameters, None)
    }

    #[test]
    fn controls_states_and_strategies() {
        let p = seq(r#"{"name":"m","sequence_batching":{
            "max_sequence_idle_microseconds": 5000,
            "oldest": {"max_candidate_sequences": 4, "preferred_batch_size": [2], "max_queue_delay_microseconds": 100},
            "control_input": [
              {"name":"START","control":[{"kind":"CONTROL_SEQUENCE_START","int32_false_true":[0,1]}]},
              {"name":"READY","control":[{"kind":"CONTROL_SEQUENCE_READY","fp32_false_true":[0,1]}]},
              {"name":"END","control":[{"kind":"CONTROL_SEQUENCE_END","bool_false_true":[false,true]}]},
              {"name":"CORRID","control":[{"kind":"CONTROL_SEQUENCE_CORRID","data_type":"TYPE_STRING"}]}],
            "state": [{"input_name":"S","output_name":"S_OUT","data_type":"TYPE_FP32","dims":[2,3],
                       "initial_state":[{"data_type":"TYPE_FP32","dims":[2,3],"zero_data":true,"name":"z"}]}]}}"#)
        .unwrap();
        assert_eq!(p.max_idle, Duration::from_millis(5));
        assert!(matches!(p.strategy, SequenceStrategy::Oldest { max_candidate_sequences: 4, .. }));
        let start = p.control(ControlKind::Start).unwrap();
        assert_eq!((start.datatype, start.true_value.clone()), (DataType::I32, 1i32.to_le_bytes().to_vec()));
        assert_eq!(p.control(ControlKind::Ready).unwrap().datatype, DataType::F32);
        assert_eq!(p.control(ControlKind::End).unwrap().true_value, vec![1]);
        assert_eq!(p.control(ControlKind::CorrId).unwrap().datatype, DataType::Bytes);
        assert_eq!(p.states[0].dims, vec![2, 3]);
        assert_eq!(p.states[0].initial, InitialState::Zero);
    }

    #[test]
    fn iterative_sequence_is_read_from_the_config() {
        assert!(seq(r#"{"name":"m","sequence_batching":{"iterative_sequence":true}}"#).unwrap().iterative);
        let text = crate::config::parse_pbtxt(
            "name: \"m\" sequence_batching { iterative_sequence: true oldest {} }",
            std::path::Path::new("config.pbtxt"),
        );
        let Some(SchedulingChoice::SequenceBatching(sb)) = text.unwrap().scheduling_choice else { panic!("none") };
        assert!(sb.iterative_sequence);
    }

    #[test]
    fn defaults_and_bad_controls() {
        let p = seq(r#"{"name":"m","sequence_batching":{}}"#).unwrap();
        assert!(!p.iterative);
        assert_eq!(p.strategy, SequenceStrategy::Direct);
        assert_eq!(p.max_idle, Duration::from_secs(1));
        let e = seq(r#"{"name":"m","sequence_batching":{"control_input":[{"name":"S","control":[{"kind":"CONTROL_SEQUENCE_START","int32_false_true":[1]}]}]}}"#)
            .unwrap_err();
        assert!(e.message.contains("exactly two values"), "{e}");
    }

    #[test]
    fn tritium_sequence_parameters() {
        let p = seq(r#"{"name":"m","sequence_batching":{},"parameters":{
            "max_sequence_backlog":{"string_value":"3"},"sequence_start_grace_ms":{"string_value":" 0 "},
            "max_sequence_state_bytes":{"string_value":"4096"}}}"#)
        .unwrap();
        assert_eq!((p.max_backlog, p.start_grace, p.max_state_bytes), (3, Duration::ZERO, Some(4096)));
        let p = seq(r#"{"name":"m","sequence_batching":{}}"#).unwrap();
        assert_eq!((p.start_grace, p.max_state_bytes), (tritium_actors::policy::DEFAULT_START_GRACE, None));
        let p = seq(
            r#"{"name":"m","sequence_batching":{},"parameters":{"max_sequence_state_bytes":{"string_value":"0"}}}"#,
        )
        .unwrap();
        assert_eq!(p.max_state_bytes, None, "0 means no cap");
        for (key, value) in
            [("max_sequence_backlog", "-1"), ("sequence_start_grace_ms", "soon"), ("max_sequence_state_bytes", "1k")]
        {
            let json = format!(
                r#"{{"name":"m","sequence_batching":{{}},"parameters":{{"{key}":{{"string_value":"{value}"}}}}}}"#
            );
            let e = seq(&json).unwrap_err();
            assert!(e.message.contains(key) && e.message.contains("non-negative integer"), "{e}");
        }
    }
}
