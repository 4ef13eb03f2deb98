//! A normalized, validated config turned into the engine's `ModelPolicy` for one version.

use std::time::Duration;

use tritium_actors::backend::{RateLimiterSpec, ResourceSpec};
use tritium_actors::policy::DEFAULT_QUEUE_CAPACITY;
use tritium_actors::{
    DynamicBatchPolicy, Error, InstanceKind, InstanceSpec, IoSpec, ModelPolicy, QueuePolicy, Result, SchedulerPolicy,
    TimeoutAction,
};

use super::model_config::SchedulingChoice;
use super::model_instance_group::Kind;
use super::{engine_data_type, model_queue_policy, ModelConfig, ModelQueuePolicy};

fn queue_policy(policy: Option<&ModelQueuePolicy>) -> QueuePolicy {
    let Some(p) = policy else { return QueuePolicy::default() };
    QueuePolicy {
        timeout_action: if p.timeout_action == model_queue_policy::TimeoutAction::Delay as i32 {
            TimeoutAction::Delay
        } else {
            TimeoutAction::Reject
        },
        default_timeout: (p.default_timeout_microseconds > 0)
            .then(|| Duration::from_micros(p.default_timeout_microseconds)),
        allow_timeout_override: p.allow_timeout_override,
        max_queue_size: p.max_queue_size as usize,
    }
}

/// The instances of every group, named as Triton names them: `<group>_<i>`, `i` counting the
/// group's instances.
fn instances(config: &ModelConfig) -> Vec<InstanceSpec> {
    let mut out = Vec::new();
    for group in &config.instance_group {
        let kind = match Kind::try_from(group.kind).unwrap_or(Kind::Cpu) {
            Kind::Gpu => InstanceKind::Gpu,
            Kind::Model => InstanceKind::Model,
            Kind::Cpu | Kind::Auto => InstanceKind::Cpu,
        };
        let devices: Vec<Option<i32>> =
            if kind == InstanceKind::Gpu { group.gpus.iter().map(|g| Some(*g)).collect() } else { vec![None] };
        let rate_limiter = group
            .rate_limiter
            .as_ref()
            .map(|r| RateLimiterSpec {
                resources: r
                    .resources
                    .iter()
                    .map(|x| ResourceSpec { name: x.name.clone(), global: x.global, count: u64::from(x.count) })
                    .collect(),
                priority: r.priority,
            })
            .unwrap_or_default();
        let mut i = 0;
        for device in devices {
            for _ in 0..group.count.max(1) {
                let name = format!("{}_{i}", group.name);
                i += 1;
                out.push(InstanceSpec {
                    name,
                    index: out.len(),
                    kind,
                    device,
                    cpu_cores: Vec::new(),
                    rate_limiter: rate_limiter.clone(),
                });
            }
        }
    }
    out
}

/// `--host-policy <policy>,cpu-cores=...`: gives each instance the cores of its host policy —
/// its group's `host_policy` when set, else `cpu` for KIND_CPU (and KIND_MODEL) instances and
/// `gpu_<id>` for KIND_GPU ones, the names Triton gives them. Instances of a policy with no
/// cores keep running anywhere.
pub fn pin_instances(
    policy: &mut ModelPolicy,
    config: &ModelConfig,
    cores: &std::collections::BTreeMap<String, Vec<usize>>,
) {
    if cores.is_empty() || super::is_ensemble(config) {
        return;
    }
    // Instances are made group by group, in order (see `instances`).
    let mut groups = Vec::new();
    for group in &config.instance_group {
        let gpus = if Kind::try_from(group.kind) == Ok(Kind::Gpu) { group.gpus.len().max(1) } else { 1 };
        for _ in 0..gpus * group.count.max(1) as usize {
            groups.push(group);
        }
    }
    for (spec, group) in policy.instances.iter_mut().zip(groups) {
        let name = if !group.host_policy.is_empty() {
            group.host_policy.clone()
        } else {
            match spec.device {
                Some(id) if spec.kind == InstanceKind::Gpu => format!("gpu_{id}"),
                _ => "cpu".to_string(),
            }
        };
        if let Some(c) = cores.get(&name) {
            spec.cpu_cores = c.clone();
        }
    }
}

/// The engine policy of one version of a normalized, validated config.
pub fn to_policy(config: &ModelConfig, version: i64, model_dir: Option<&std::path::Path>) -> Result<ModelPolicy> {
    let scheduler =
        match &config.scheduling_choice {
            None => SchedulerPolicy::Direct,
            Some(SchedulingChoice::DynamicBatching(db)) => SchedulerPolicy::Dynamic(DynamicBatchPolicy {
                preferred_batch_sizes: db.preferred_batch_size.iter().map(|s| *s as usize).collect(),
                max_queue_delay: Duration::from_micros(db.max_queue_delay_microseconds),
                preserve_ordering: db.preserve_ordering,
                priority_levels: db.priority_levels,
                default_priority_level: db.default_priority_level,
                default_queue_policy: queue_policy(db.default_queue_policy.as_ref()),
                priority_queue_policy: {
                    let mut levels: Vec<_> =
                        db.priority_queue_policy.iter().map(|(l, p)| (*l, queue_policy(Some(p)))).collect();
                    levels.sort_by_key(|(l, _)| *l);
                    levels
                },
            }),
            Some(SchedulingChoice::SequenceBatching(sb)) => SchedulerPolicy::Sequence(
                super::sequence::sequence_policy(&config.name, sb, &config.parameters, model_dir)?,
            ),
            // The ensemble actor takes each request alone; its steps batch in their own models.
            Some(SchedulingChoice::EnsembleScheduling(_)) => SchedulerPolicy::Direct,
        };
    let io = |name: &str, data_type: i32, dims: &[i64], reshape: Option<&[i64]>| -> Result<IoSpec> {
        let datatype = engine_data_type(data_type).ok_or_else(|| {
            Error::invalid(format!("model '{}': tensor '{name}' has no valid data_type", config.name))
        })?;
        let mut spec = IoSpec::new(name, datatype, dims.to_vec());
        spec.reshape = reshape.map(<[i64]>::to_vec);
        Ok(spec)
    };
    let inputs = config
        .input
        .iter()
        .map(|i| {
            let mut spec = io(&i.name, i.data_type, &i.dims, i.reshape.as_ref().map(|r| r.shape.as_slice()))?;
            spec.optional = i.optional;
            spec.allow_ragged_batch = i.allow_ragged_batch;
            spec.is_shape_tensor = i.is_shape_tensor;
            Ok(spec)
        })
        .collect::<Result<Vec<_>>>()?;
    let outputs = config
        .output
        .iter()
        .map(|o| {
            let mut spec = io(&o.name, o.data_type, &o.dims, o.reshape.as_ref().map(|r| r.shape.as_slice()))?;
            spec.is_shape_tensor = o.is_shape_tensor;
            Ok(spec)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ModelPolicy {
        name: config.name.clone(),
        version,
        max_batch_size: config.max_batch_size.max(0) as usize,
        inputs,
        outputs,
        instances: if super::is_ensemble(config) {
            (0..tritium_actors::ensemble::ENSEMBLE_CONCURRENCY)
                .map(|i| InstanceSpec {
                    name: format!("{}_ensemble_{i}", config.name),
                    index: i,
                    kind: InstanceKind::Cpu,
                    device: None,
                    cpu_cores: Vec::new(),
                    rate_limiter: Default::default(),
                })
                .collect()
        } else {
            instances(config)
        },
        scheduler,
        decoupled: config.model_transaction_policy.as_ref().is_some_and(|t| t.decoupled),
        queue_capacity: DEFAULT_QUEUE_CAPACITY,
        warmup: super::warmup::warmup_samples(config, model_dir)?,
        response_cache: config.response_cache.as_ref().is_some_and(|c| c.enable),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{from_json, normalize};
    use super::*;

    fn policy(json: &str) -> ModelPolicy {
        let mut config = from_json(json).unwrap();
        normalize(&mut config, 0);
        to_policy(&config, 3, None).unwrap()
    }

    #[test]
    fn dynamic_batching_and_instances() {
        let p = policy(
            r#"{"name":"m","backend":"onnxruntime","max_batch_size":8,
               "input":[{"name":"I","data_type":"TYPE_FP32","dims":[4],"reshape":{"shape":[2,2]}}],
               "output":[{"name":"O","data_type":"TYPE_STRING","dims":[-1]}],
               "instance_group":[{"count":2,"kind":"KIND_CPU"}],
               "dynamic_batching":{"preferred_batch_size":[4],"max_queue_delay_microseconds":500,
                 "priority_levels":2,"default_priority_level":1,
                 "default_queue_policy":{"max_queue_size":7,"timeout_action":"DELAY","default_timeout_microseconds":10},
                 "priority_queue_policy":{"2":{"max_queue_size":3}}}}"#,
        );
        assert_eq!(p.version, 3);
        assert_eq!(p.max_batch_size, 8);
        assert_eq!(p.inputs[0].reshape, Some(vec![2, 2]));
        assert_eq!(p.outputs[0].datatype, tritium_actors::DataType::Bytes);
        let names: Vec<_> = p.instances.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["m_0_0", "m_0_1"]);
        let SchedulerPolicy::Dynamic(db) = p.scheduler else { panic!("not dynamic") };
        assert_eq!(db.max_queue_delay, Duration::from_micros(500));
        assert_eq!(db.default_queue_policy.max_queue_size, 7);
        assert_eq!(db.default_queue_policy.timeout_action, TimeoutAction::Delay);
        assert_eq!(db.priority_queue_policy[0].0, 2);
        assert_eq!(db.priority_queue_policy[0].1.max_queue_size, 3);
    }

    #[test]
    fn no_scheduler_is_direct_and_the_default_group_is_named_after_the_model() {
        let p = policy(
            r#"{"name":"m","backend":"onnxruntime","input":[{"name":"I","data_type":"TYPE_FP32","dims":[4]}],"output":[{"name":"O","data_type":"TYPE_FP32","dims":[4]}]}"#,
        );
        assert_eq!(p.scheduler, SchedulerPolicy::Direct);
        assert_eq!(p.instances[0].name, "m_0");
    }
}
