//! Built-in text backends for pipelines that need no Python:
//!
//! - `backend: "tokenizer"`: a HuggingFace `tokenizer.json` (the `tokenizers` crate; parameter
//!   `tokenizer_file`, default `tokenizer.json` in the version folder) turns the BYTES input (UTF-8 text, one
//!   string per batch element) into INT64 `input_ids`, `attention_mask` and `token_type_ids` [batch, seq],
//!   padded to the longest text of the batch (truncation as the file says); parameter `pad_to_multiple_of`
//!   rounds the length up, so that requests of texts of similar length have one shape and a downstream
//!   model's batcher can merge them.
//! - `backend: "pooling"`: mean pooling of token embeddings (input 0, FP32 [batch, seq, dim]) over the
//!   attention mask (input 1, INT64 or INT32 [batch, seq]) into output 0 (FP32 [batch, dim]); parameter
//!   `normalize` (default "true") divides each by its L2 norm.

use std::path::Path;

use bytes::Bytes;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer};
use tritium_actors::{Backend, BackendFactory, BatchInput, DataType, Error, InstanceSpec, Result, Tensor};

use crate::config::ModelConfig;

fn i64_bytes(values: impl Iterator<Item = i64>) -> Bytes {
    Bytes::from(values.flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())
}

pub struct TokenizerFactory {
    tokenizer: Tokenizer,
    input: String,
    outputs: Vec<String>,
}

impl TokenizerFactory {
    pub fn new(config: &ModelConfig, file: &Path) -> Result<Self> {
        let mut tokenizer = Tokenizer::from_file(file).map_err(|e| {
            Error::invalid(format!("model '{}': cannot load tokenizer {}: {e}", config.name, file.display()))
        })?;
        // Pad to the longest text of each batch rather than a fixed length.
        let padding = tokenizer.get_padding().cloned().unwrap_or_default();
        let multiple = match crate::config::uint_parameter(&config.name, &config.parameters, "pad_to_multiple_of")? {
            None => padding.pad_to_multiple_of,
            Some(0) => None,
            Some(n) => Some(n as usize),
        };
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_to_multiple_of: multiple,
            ..padding
        }));
        let input = config
            .input
            .first()
            .ok_or_else(|| {
                Error::invalid(format!("model '{}': the tokenizer backend needs a BYTES input", config.name))
            })?
            .name
            .clone();
        let known = ["input_ids", "attention_mask", "token_type_ids"];
        if let Some(o) = config.output.iter().find(|o| !known.contains(&o.name.as_str())) {
            return Err(Error::invalid(format!(
                "model '{}': the tokenizer backend gives {known:?}, not '{}'",
                config.name, o.name
            )));
        }
        Ok(TokenizerFactory { tokenizer, input, outputs: config.output.iter().map(|o| o.name.clone()).collect() })
    }
}

impl BackendFactory for TokenizerFactory {
    fn create(&self, _: &InstanceSpec) -> Result<Box<dyn Backend>> {
        Ok(Box::new(TokenizerBackend {
            tokenizer: self.tokenizer.clone(),
            input: self.input.clone(),
            outputs: self.outputs.clone(),
        }))
    }
}

struct TokenizerBackend {
    tokenizer: Tokenizer,
    input: String,
    outputs: Vec<String>,
}

impl Backend for TokenizerBackend {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let text = batch
            .inputs
            .iter()
            .find(|t| t.name == self.input)
            .ok_or_else(|| Error::invalid(format!("the tokenizer needs input '{}'", self.input)))?;
        let texts = text
            .bytes_elements()?
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                String::from_utf8(b.to_vec())
                    .map_err(|_| Error::invalid(format!("input '{}' element {i} is not UTF-8 text", self.input)))
            })
            .collect::<Result<Vec<String>>>()?;
        let n = texts.len();
        let encodings =
            self.tokenizer.encode_batch(texts, true).map_err(|e| Error::invalid(format!("tokenizer: {e}")))?;
        let seq = encodings.first().map(|e| e.get_ids().len()).unwrap_or(0);
        let shape = vec![n as i64, seq as i64];
        let mut out = Vec::new();
        for name in &self.outputs {
            if !batch.outputs.is_empty() && !batch.outputs.contains(name) {
                continue;
            }
            let data = match name.as_str() {
                "input_ids" => i64_bytes(encodings.iter().flat_map(|e| e.get_ids().iter().map(|v| *v as i64))),
                "attention_mask" => {
                    i64_bytes(encodings.iter().flat_map(|e| e.get_attention_mask().iter().map(|v| *v as i64)))
                }
                _ => i64_bytes(encodings.iter().flat_map(|e| e.get_type_ids().iter().map(|v| *v as i64))),
            };
            out.push(Tensor::new(name.clone(), DataType::I64, shape.clone(), data));
        }
        Ok(out)
    }
}

pub struct PoolingFactory {
    embeddings: String,
    mask: String,
    output: String,
    normalize: bool,
}

impl PoolingFactory {
    pub fn new(config: &ModelConfig) -> Result<Self> {
        if config.input.len() != 2 || config.output.len() != 1 {
            return Err(Error::invalid(format!(
                "model '{}': the pooling backend takes two inputs (token embeddings, attention mask) and gives one output",
                config.name
            )));
        }
        let normalize = match config.parameters.get("normalize").map(|p| p.string_value.trim().to_ascii_lowercase()) {
            None => true,
            Some(v) if v == "true" || v == "1" => true,
            Some(v) if v == "false" || v == "0" => false,
            Some(v) => {
                return Err(Error::invalid(format!(
                    "model '{}': parameter 'normalize' must be true or false, got '{v}'",
                    config.name
                )))
            }
        };
        Ok(PoolingFactory {
            embeddings: config.input[0].name.clone(),
            mask: config.input[1].name.clone(),
            output: config.output[0].name.clone(),
            normalize,
        })
    }
}

impl BackendFactory for PoolingFactory {
    fn create(&self, _: &InstanceSpec) -> Result<Box<dyn Backend>> {
        Ok(Box::new(Pooling {
            embeddings: self.embeddings.clone(),
            mask: self.mask.clone(),
            output: self.output.clone(),
            normalize: self.normalize,
        }))
    }
}

struct Pooling {
    embeddings: String,
    mask: String,
    output: String,
    normalize: bool,
}

impl Backend for Pooling {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let find = |n: &str| {
            batch
                .inputs
                .iter()
                .find(|t| t.name == n)
                .ok_or_else(|| Error::invalid(format!("pooling needs input '{n}'")))
        };
        let emb = find(&self.embeddings)?;
        let mask = find(&self.mask)?;
        let [b, s, d] = emb.shape[..] else {
            return Err(Error::invalid(format!(
                "input '{}' must be [batch, seq, dim], got {:?}",
                self.embeddings, emb.shape
            )));
        };
        if mask.shape != [b, s] {
            return Err(Error::invalid(format!("input '{}' must be [{b}, {s}], got {:?}", self.mask, mask.shape)));
        }
        let (b, s, d) = (b as usize, s as usize, d as usize);
        let m: Vec<f32> = match mask.datatype {
            DataType::I64 => {
                mask.data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8")) as f32).collect()
            }
            DataType::I32 => {
                mask.data.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().expect("4")) as f32).collect()
            }
            other => return Err(Error::invalid(format!("input '{}' must be INT64 or INT32, got {other}", self.mask))),
        };
        let x: Vec<f32> = emb.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4"))).collect();
        let mut out = vec![0f32; b * d];
        for i in 0..b {
            let row = &mut out[i * d..(i + 1) * d];
            let mut count = 0f32;
            for j in 0..s {
                let w = m[i * s + j];
                if w == 0.0 {
                    continue;
                }
                count += w;
                let tok = &x[(i * s + j) * d..(i * s + j + 1) * d];
                row.iter_mut().zip(tok).for_each(|(r, t)| *r += w * t);
            }
            let count = count.max(1e-9);
            row.iter_mut().for_each(|r| *r /= count);
            if self.normalize {
                let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                row.iter_mut().for_each(|r| *r /= norm);
            }
        }
        let data = Bytes::from(out.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
        Ok(vec![Tensor::new(self.output.clone(), DataType::F32, vec![b as i64, d as i64], data)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Bytes {
        Bytes::from(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
    }

    #[test]
    fn mean_pooling_skips_padding_and_normalizes() {
        let mut p = Pooling { embeddings: "E".into(), mask: "M".into(), output: "O".into(), normalize: false };
        // One sentence of 3 tokens, the last one padding.
        let e = Tensor::new("E", DataType::F32, vec![1, 3, 2], f32s(&[1.0, 2.0, 3.0, 4.0, 100.0, 100.0]));
        let m = Tensor::new("M", DataType::I64, vec![1, 3], i64_bytes([1, 1, 0].into_iter()));
        let out = p.execute(BatchInput::bare(&[e.clone(), m.clone()], &[], 1)).unwrap();
        assert_eq!(&out[0].data[..], &f32s(&[2.0, 3.0])[..]);
        p.normalize = true;
        let out = p.execute(BatchInput::bare(&[e, m], &[], 1)).unwrap();
        let v: Vec<f32> = out[0].data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert!((v[0] * v[0] + v[1] * v[1] - 1.0).abs() < 1e-6);
    }
}
