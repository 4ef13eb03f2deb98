//! The defaults Triton writes into a config after loading it, so `GET .../config` shows what
//! the server actually runs: the version policy, instance groups with names, kinds and counts,
//! the optimization block, the backend/platform pair and the default model file name.

use super::model_instance_group::Kind;
use super::{model_version_policy, ModelConfig, ModelInstanceGroup, ModelVersionPolicy};
use crate::proto::inference::model_optimization_policy::PinnedMemoryBuffer;
use crate::proto::inference::ModelOptimizationPolicy;

/// The platform Triton pairs with a backend name, and back.
const PLATFORMS: &[(&str, &str)] = &[
    ("onnxruntime", "onnxruntime_onnx"),
    ("pytorch", "pytorch_libtorch"),
    ("tensorflow", "tensorflow_savedmodel"),
    ("tensorflow", "tensorflow_graphdef"),
];

/// The model file a backend looks for in a version folder when `default_model_filename` is empty.
pub fn default_model_filename(backend: &str) -> Option<&'static str> {
    match backend {
        "onnxruntime" => Some("model.onnx"),
        "pytorch" => Some("model.pt"),
        "tensorflow" => Some("model.savedmodel"),
        "python" => Some("model.py"),
        _ => None,
    }
}

/// Fills in Triton's defaults. `gpus` is the number of visible GPUs (0 here without CUDA):
/// `KIND_AUTO` becomes `KIND_GPU` only when there is one.
pub fn normalize(config: &mut ModelConfig, gpus: usize) {
    if config.backend.is_empty() {
        if let Some((backend, _)) = PLATFORMS.iter().find(|(_, p)| *p == config.platform) {
            config.backend = backend.to_string();
        }
    }
    if config.platform.is_empty() {
        if let Some((_, platform)) = PLATFORMS.iter().find(|(b, _)| *b == config.backend) {
            config.platform = platform.to_string();
        }
    }
    if config.default_model_filename.is_empty() {
        // TensorFlow's two platforms have two files, as in Triton.
        let graphdef = (config.platform == "tensorflow_graphdef").then_some("model.graphdef");
        if let Some(file) = graphdef.or_else(|| default_model_filename(&config.backend)) {
            config.default_model_filename = file.to_string();
        }
    }
    if config.version_policy.as_ref().and_then(|p| p.policy_choice.as_ref()).is_none() {
        config.version_policy = Some(ModelVersionPolicy {
            policy_choice: Some(model_version_policy::PolicyChoice::Latest(model_version_policy::Latest {
                num_versions: 1,
            })),
        });
    }
    let optimization = config.optimization.get_or_insert_with(ModelOptimizationPolicy::default);
    optimization.input_pinned_memory.get_or_insert(PinnedMemoryBuffer { enable: true });
    optimization.output_pinned_memory.get_or_insert(PinnedMemoryBuffer { enable: true });

    if config.instance_group.is_empty() {
        // Triton names the group it adds after the model (its instances `<model>_0`, …).
        config.instance_group.push(ModelInstanceGroup { name: config.name.clone(), ..Default::default() });
    }
    for (index, group) in config.instance_group.iter_mut().enumerate() {
        if group.name.is_empty() {
            group.name = format!("{}_{index}", config.name);
        }
        if group.count < 1 {
            group.count = 1;
        }
        if group.kind == Kind::Auto as i32 {
            group.kind = if gpus > 0 { Kind::Gpu as i32 } else { Kind::Cpu as i32 };
        }
        if group.kind == Kind::Gpu as i32 && group.gpus.is_empty() {
            group.gpus = (0..gpus as i32).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_triton_defaults() {
        let mut config =
            ModelConfig { name: "add_sub".into(), platform: "onnxruntime_onnx".into(), ..Default::default() };
        normalize(&mut config, 0);
        assert_eq!(config.backend, "onnxruntime");
        assert_eq!(config.default_model_filename, "model.onnx");
        let group = &config.instance_group[0];
        assert_eq!((group.name.as_str(), group.kind, group.count), ("add_sub", Kind::Cpu as i32, 1));
        assert!(config.optimization.clone().unwrap().input_pinned_memory.unwrap().enable);
        let json = super::super::to_json(&ModelConfig { ..config.clone() });
        assert_eq!(json["version_policy"], serde_json::json!({"latest": {"num_versions": 1}}));
    }

    #[test]
    fn keeps_what_the_user_wrote() {
        let mut config = ModelConfig {
            name: "m".into(),
            backend: "onnxruntime".into(),
            instance_group: vec![ModelInstanceGroup {
                name: "mine".into(),
                count: 3,
                kind: Kind::Cpu as i32,
                ..Default::default()
            }],
            ..Default::default()
        };
        normalize(&mut config, 0);
        assert_eq!(config.platform, "onnxruntime_onnx");
        assert_eq!(config.instance_group[0].name, "mine");
        assert_eq!(config.instance_group[0].count, 3);
    }

    #[test]
    fn tensorflow_pairs_with_savedmodel_and_both_platforms_name_it() {
        let mut config = ModelConfig { name: "m".into(), backend: "tensorflow".into(), ..Default::default() };
        normalize(&mut config, 0);
        assert_eq!(
            (config.platform.as_str(), config.default_model_filename.as_str()),
            ("tensorflow_savedmodel", "model.savedmodel")
        );
        for platform in ["tensorflow_savedmodel", "tensorflow_graphdef"] {
            let mut config = ModelConfig { name: "m".into(), platform: platform.into(), ..Default::default() };
            normalize(&mut config, 0);
            assert_eq!((config.backend.as_str(), config.platform.as_str()), ("tensorflow", platform));
            let file = if platform == "tensorflow_graphdef" { "model.graphdef" } else { "model.savedmodel" };
            assert_eq!(config.default_model_filename, file);
        }
    }
}
