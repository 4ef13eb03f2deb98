//! `model_warmup` turned into the engine's warmup samples, as Triton builds them: each input of
//! a sample is `zero_data`, `random_data` (zeros for TYPE_STRING: empty strings) or
//! `input_data_file` (raw bytes read from the model's `warmup/` folder; the first bytes the
//! shape needs, or the whole file for TYPE_STRING, which must hold serialized strings). Every
//! dimension must be given; a batching model's requests get a batch dimension of 1.

use std::path::Path;

use bytes::Bytes;
use tritium_actors::tensor::element_count;
use tritium_actors::{DataType, Error, Result, Tensor, WarmupSample};

use super::{engine_data_type, ModelConfig};
use crate::proto::inference::model_warmup::input::InputDataType;

/// The folder of a model that holds warmup input files (Triton's `kWarmupDataFolder`).
pub const WARMUP_FOLDER: &str = "warmup";

fn invalid(config: &ModelConfig, message: impl std::fmt::Display) -> Error {
    Error::invalid(format!("model '{}': {message}", config.name))
}

/// Bytes that differ from one load to the next (xorshift64* seeded by the clock): warmup's
/// `random_data` needs no better randomness than Triton's `rand()`.
fn random_bytes(n: usize) -> Vec<u8> {
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9E37_79B9_7F4A_7C15)
        | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(n);
    out
}

/// The warmup samples of a normalized, validated config; `model_dir` holds the `warmup/`
/// folder that `input_data_file` names.
pub fn warmup_samples(config: &ModelConfig, model_dir: Option<&Path>) -> Result<Vec<WarmupSample>> {
    let mut samples = Vec::with_capacity(config.model_warmup.len());
    for warmup in &config.model_warmup {
        let name = &warmup.name;
        if warmup.batch_size == 0 {
            // Triton skips it at run time; it needs no data.
            samples.push(WarmupSample { name: name.clone(), batch_size: 0, count: 1, inputs: Vec::new() });
            continue;
        }
        if config.max_batch_size > 0 && warmup.batch_size as i64 > config.max_batch_size as i64 {
            return Err(invalid(
                config,
                format!(
                    "warmup sample '{name}' has batch_size {} above the model's max_batch_size {}",
                    warmup.batch_size, config.max_batch_size
                ),
            ));
        }
        // Inputs by name, as Triton's map iterates them in a stable order.
        let mut names: Vec<&String> = warmup.inputs.keys().collect();
        names.sort();
        let mut inputs = Vec::with_capacity(names.len());
        for input_name in names {
            let input = &warmup.inputs[input_name];
            let datatype = engine_data_type(input.data_type).ok_or_else(|| {
                invalid(config, format!("warmup sample '{name}': input '{input_name}' has no valid data_type"))
            })?;
            if input.dims.iter().any(|d| *d < 0) {
                return Err(invalid(
                    config,
                    format!(
                        "warmup setting expects all variable-size dimensions are specified for input '{input_name}'"
                    ),
                ));
            }
            let count = element_count(&input.dims)?;
            let size = datatype.element_size().map(|s| s * count);
            let data: Vec<u8> = match &input.input_data_type {
                Some(InputDataType::ZeroData(_)) => vec![0; size.unwrap_or(4 * count)],
                Some(InputDataType::RandomData(_)) => match size {
                    Some(n) => random_bytes(n),
                    // BYTES elements are length-prefixed: zeros are empty strings.
                    None => vec![0; 4 * count],
                },
                Some(InputDataType::InputDataFile(file)) => {
                    let dir = model_dir.ok_or_else(|| {
                        invalid(config, format!("warmup sample '{name}': input_data_file needs the model's folder"))
                    })?;
                    let path = dir.join(WARMUP_FOLDER).join(file);
                    let bytes = std::fs::read(&path).map_err(|e| {
                        invalid(
                            config,
                            format!("warmup sample '{name}': cannot read input_data_file {}: {e}", path.display()),
                        )
                    })?;
                    match size {
                        Some(n) if bytes.len() < n => {
                            return Err(invalid(
                                config,
                                format!(
                                "warmup setting expects {n} bytes, but the data provided from {file} only has {} bytes",
                                bytes.len()
                            ),
                            ))
                        }
                        Some(n) => bytes[..n].to_vec(),
                        None => bytes,
                    }
                }
                None => {
                    return Err(invalid(
                        config,
                        format!("warmup setting expects input '{input_name}' to have input_data_type set"),
                    ))
                }
            };
            let mut shape = Vec::with_capacity(input.dims.len() + 1);
            if config.max_batch_size > 0 {
                shape.push(1);
            }
            shape.extend_from_slice(&input.dims);
            let tensor = Tensor::new(input_name.clone(), datatype, shape, Bytes::from(data));
            if datatype == DataType::Bytes {
                tensor.check_size().map_err(|e| {
                    invalid(config, format!("warmup sample '{name}': input '{input_name}': {}", e.message))
                })?;
            }
            inputs.push(tensor);
        }
        samples.push(WarmupSample {
            name: name.clone(),
            batch_size: warmup.batch_size as usize,
            count: warmup.count.max(1) as usize,
            inputs,
        });
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::super::from_json;
    use super::*;

    fn config(warmup: &str, max_batch_size: i32) -> ModelConfig {
        from_json(&format!(
            r#"{{"name":"m","backend":"identity","max_batch_size":{max_batch_size},
               "input":[{{"name":"I","data_type":"TYPE_FP32","dims":[2]}}],
               "output":[{{"name":"O","data_type":"TYPE_FP32","dims":[2]}}],
               "model_warmup":[{warmup}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn zero_and_random_data_get_the_batch_dimension_of_a_batching_model() {
        let c = config(
            r#"{"name":"z","batch_size":2,"count":3,"inputs":{"I":{"data_type":"TYPE_FP32","dims":[2],"zero_data":true}}},
               {"name":"r","batch_size":1,"inputs":{"I":{"data_type":"TYPE_FP32","dims":[2],"random_data":true}}},
               {"name":"skipped","batch_size":0}"#,
            4,
        );
        let s = warmup_samples(&c, None).unwrap();
        assert_eq!((s[0].name.as_str(), s[0].batch_size, s[0].count), ("z", 2, 3));
        assert_eq!(s[0].inputs[0].shape, vec![1, 2]);
        assert_eq!(s[0].inputs[0].data, Bytes::from(vec![0u8; 8]));
        assert_eq!((s[1].count, s[1].inputs[0].data.len()), (1, 8), "count 0 runs once");
        assert_eq!(s[2].batch_size, 0);
        let no_batch = warmup_samples(
            &config(
                r#"{"name":"z","batch_size":1,"inputs":{"I":{"data_type":"TYPE_FP32","dims":[2],"zero_data":true}}}"#,
                0,
            ),
            None,
        )
        .unwrap();
        assert_eq!(no_batch[0].inputs[0].shape, vec![2]);
    }

    #[test]
    fn a_file_is_read_from_the_warmup_folder_and_must_be_long_enough() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("warmup")).unwrap();
        std::fs::write(dir.path().join("warmup/in.bin"), [1u8; 12]).unwrap();
        std::fs::write(dir.path().join("warmup/short.bin"), [1u8; 4]).unwrap();
        let c = config(
            r#"{"name":"f","batch_size":1,"inputs":{"I":{"data_type":"TYPE_FP32","dims":[2],"input_data_file":"in.bin"}}}"#,
            4,
        );
        let s = warmup_samples(&c, Some(dir.path())).unwrap();
        assert_eq!(s[0].inputs[0].data, Bytes::from(vec![1u8; 8]), "the first bytes the shape needs");
        let c = config(
            r#"{"name":"f","batch_size":1,"inputs":{"I":{"data_type":"TYPE_FP32","dims":[2],"input_data_file":"short.bin"}}}"#,
            4,
        );
        let e = warmup_samples(&c, Some(dir.path())).unwrap_err();
        assert!(e.message.contains("expects 8 bytes, but the data provided from short.bin only has 4 bytes"), "{e}");
        let c = config(
            r#"{"name":"f","batch_size":1,"inputs":{"I":{"data_type":"TYPE_FP32","dims":[2],"input_data_file":"none.bin"}}}"#,
            4,
        );
        let e = warmup_samples(&c, Some(dir.path())).unwrap_err();
        assert!(e.message.contains("cannot read input_data_file") && e.message.contains("none.bin"), "{e}");
    }

    #[test]
    fn variable_dims_no_data_kind_and_oversized_batches_are_refused() {
        let e = warmup_samples(
            &config(
                r#"{"name":"v","batch_size":1,"inputs":{"I":{"data_type":"TYPE_FP32","dims":[-1],"zero_data":true}}}"#,
                4,
            ),
            None,
        )
        .unwrap_err();
        assert!(e.message.contains("expects all variable-size dimensions are specified for input 'I'"), "{e}");
        let e = warmup_samples(
            &config(r#"{"name":"n","batch_size":1,"inputs":{"I":{"data_type":"TYPE_FP32","dims":[2]}}}"#, 4),
            None,
        )
        .unwrap_err();
        assert!(e.message.contains("expects input 'I' to have input_data_type set"), "{e}");
        let e = warmup_samples(
            &config(
                r#"{"name":"b","batch_size":9,"inputs":{"I":{"data_type":"TYPE_FP32","dims":[2],"zero_data":true}}}"#,
                4,
            ),
            None,
        )
        .unwrap_err();
        assert!(e.message.contains("batch_size 9 above the model's max_batch_size 4"), "{e}");
    }

    #[test]
    fn strings_are_empty_for_zero_and_random_data() {
        let c = from_json(
            r#"{"name":"s","backend":"identity","input":[{"name":"S","data_type":"TYPE_STRING","dims":[3]}],
               "output":[{"name":"O","data_type":"TYPE_STRING","dims":[3]}],
               "model_warmup":[{"name":"s","batch_size":1,"inputs":{"S":{"data_type":"TYPE_STRING","dims":[3],"random_data":true}}}]}"#,
        )
        .unwrap();
        let s = warmup_samples(&c, None).unwrap();
        assert_eq!(s[0].inputs[0].bytes_elements().unwrap(), vec![Bytes::new(); 3]);
    }
}
