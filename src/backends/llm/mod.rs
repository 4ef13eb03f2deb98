//! `backend: "llm"`: text generation with a decoder-only language model in ONNX whose KV cache is
//! an input and an output, as a decoupled model (one response per token when streaming). The
//! decoding loop (prefill, then one model call per token, sampling, stop strings) runs on the
//! instance's thread; the cache lives in the engine between requests as the implicit state of a
//! sequence model, so the turns of one conversation (one correlation ID) only run their new tokens.
//!
//! The ONNX file (`model.onnx`, or `default_model_filename`) takes `input_ids` INT64 [T] and
//! `past_kv` FP32 [.., P, head_dim] (the sequence on axis `kv_sequence_axis`, default 3) and
//! gives `logits` FP32 [T, vocab] and `present_kv` (P+T on that axis). The tokenizer is a
//! HuggingFace `tokenizer.json` (parameter `tokenizer_file`) run by the `tokenizers` crate.
//!
//! Inputs of the model (config): `text_input` BYTES [1] (the prompt, special tokens as text);
//! optional `max_tokens` INT32, `temperature` FP32 (default 1; 0 = greedy), `top_p` FP32
//! (default 1), `seed` INT64 or UINT64 (default: random), `stop` BYTES [-1], `stream` BOOL
//! (default false: one response with the whole reply). Outputs: `text_output` BYTES (a piece
//! per response when streaming), and on the last response `finish_reason` ("stop" or "length"),
//! `prompt_tokens`, `completion_tokens` (the end token counts) and `cached_tokens` INT32.
//! Implicit state (`sequence_batching { state [...] }`): `past_kv` → `present_kv` and `past_ids`
//! → `present_ids` (INT64, the tokens the cache holds). A turn reuses the longest common prefix
//! of the cached tokens and its prompt; the last sampled token is not run (the next turn runs it).
//! Parameters: `max_context` (tokens, default 2048), `max_tokens_limit` (default 512),
//! `default_max_tokens` (default 128), `end_token` (default "<|end|>").

mod sampling;
mod text;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use ort::session::Session;
use ort::value::{DynValue, Tensor as OrtTensor};
use sampling::{Sampling, SplitMix64};
use tokenizers::Tokenizer;
use tritium_actors::tensor::serialize_bytes;
use tritium_actors::{Backend, BackendFactory, BatchInput, DataType, Error, InstanceSpec, Result, Tensor};

use super::onnx::{self, OnnxOptions};
use crate::config::ModelConfig;

const PAST_KV: &str = "past_kv";
const PRESENT_KV: &str = "present_kv";
const PAST_IDS: &str = "past_ids";
const PRESENT_IDS: &str = "present_ids";

/// The limits and names a config sets.
#[derive(Debug, Clone)]
struct Limits {
    max_context: usize,
    max_tokens_limit: usize,
    default_max_tokens: usize,
    end_token: u32,
    kv_axis: usize,
}

pub struct LlmFactory {
    model: String,
    file: PathBuf,
    options: OnnxOptions,
    tokenizer: Arc<Tokenizer>,
    limits: Limits,
}

fn param(config: &ModelConfig, key: &str) -> Result<Option<usize>> {
    Ok(crate::config::uint_parameter(&config.name, &config.parameters, key)?.map(|n| n as usize))
}

impl LlmFactory {
    pub fn new(
        config: &ModelConfig,
        model_dir: &Path,
        version: i64,
        file: PathBuf,
        options: OnnxOptions,
    ) -> Result<Self> {
        let decoupled = config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        if !decoupled {
            return Err(Error::invalid(format!(
                "model '{}': the llm backend needs model_transaction_policy {{ decoupled: true }}",
                config.name
            )));
        }
        let tok_file = match config.parameters.get("tokenizer_file") {
            Some(p) => model_dir.join(version.to_string()).join(p.string_value.trim()),
            None => model_dir.join(version.to_string()).join("tokenizer.json"),
        };
        let tokenizer = Tokenizer::from_file(&tok_file).map_err(|e| {
            Error::invalid(format!("model '{}': cannot load tokenizer {}: {e}", config.name, tok_file.display()))
        })?;
        let end_name = config.parameters.get("end_token").map_or("<|end|>", |p| p.string_value.trim());
        let end_token = tokenizer.token_to_id(end_name).ok_or_else(|| {
            Error::invalid(format!("model '{}': the tokenizer has no end token '{end_name}'", config.name))
        })?;
        let limits = Limits {
            max_context: param(config, "max_context")?.unwrap_or(2048),
            max_tokens_limit: param(config, "max_tokens_limit")?.unwrap_or(512),
            default_max_tokens: param(config, "default_max_tokens")?.unwrap_or(128),
            end_token,
            kv_axis: param(config, "kv_sequence_axis")?.unwrap_or(3),
        };
        if !file.is_file() {
            return Err(Error::invalid(format!(
                "model '{}' version {version}: model file {} does not exist",
                config.name,
                file.display()
            )));
        }
        Ok(LlmFactory { model: config.name.clone(), file, options, tokenizer: Arc::new(tokenizer), limits })
    }
}

impl BackendFactory for LlmFactory {
    fn create(&self, _: &InstanceSpec) -> Result<Box<dyn Backend>> {
        let session = onnx::open_cpu(&self.file, &self.options)?;
        Ok(Box::new(Llm {
            model: self.model.clone(),
            session,
            tokenizer: self.tokenizer.clone(),
            limits: self.limits.clone(),
        }))
    }
}

struct Llm {
    model: String,
    session: Session,
    tokenizer: Arc<Tokenizer>,
    limits: Limits,
}

/// One request's settings, read from its inputs.
struct Turn {
    prompt: String,
    max_tokens: usize,
    sampling: Sampling,
    seed: u64,
    stops: Vec<String>,
    stream: bool,
}

fn find<'a>(batch: &'a BatchInput<'_>, name: &str) -> Option<&'a Tensor> {
    batch.inputs.iter().find(|t| t.name == name)
}

fn first_bytes<const N: usize>(t: &Tensor) -> Result<[u8; N]> {
    t.data
        .get(..N)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| Error::invalid(format!("input '{}' must hold one element", t.name)))
}

fn scalar_f32(batch: &BatchInput<'_>, name: &str, default: f32) -> Result<f32> {
    match find(batch, name) {
        None => Ok(default),
        Some(t) if t.datatype == DataType::F32 => Ok(f32::from_le_bytes(first_bytes(t)?)),
        Some(t) => Err(Error::invalid(format!("input '{name}' must be FP32, got {}", t.datatype))),
    }
}

impl Turn {
    fn read(batch: &BatchInput<'_>, limits: &Limits) -> Result<Turn> {
        let text =
            find(batch, "text_input").ok_or_else(|| Error::invalid("the llm backend needs input 'text_input'"))?;
        let prompt = text
            .bytes_elements()?
            .first()
            .map(|b| String::from_utf8(b.to_vec()))
            .transpose()
            .map_err(|_| Error::invalid("input 'text_input' is not UTF-8 text"))?
            .ok_or_else(|| Error::invalid("input 'text_input' holds no text"))?;
        let max_tokens = match find(batch, "max_tokens") {
            None => limits.default_max_tokens.min(limits.max_tokens_limit),
            Some(t) if t.datatype == DataType::I32 => {
                let n = i32::from_le_bytes(first_bytes(t)?);
                if n < 1 || n as usize > limits.max_tokens_limit {
                    return Err(Error::invalid(format!(
                        "max_tokens must be between 1 and {} for this model, got {n}",
                        limits.max_tokens_limit
                    )));
                }
                n as usize
            }
            Some(t) => return Err(Error::invalid(format!("input 'max_tokens' must be INT32, got {}", t.datatype))),
        };
        let temperature = scalar_f32(batch, "temperature", 1.0)?;
        let top_p = scalar_f32(batch, "top_p", 1.0)?;
        if !(0.0..=2.0).contains(&temperature) {
            return Err(Error::invalid(format!("temperature must be between 0 and 2, got {temperature}")));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(Error::invalid(format!("top_p must be greater than 0 and at most 1, got {top_p}")));
        }
        let seed = match find(batch, "seed") {
            None => random_seed(),
            Some(t) if matches!(t.datatype, DataType::I64 | DataType::U64) => u64::from_le_bytes(first_bytes(t)?),
            Some(t) => return Err(Error::invalid(format!("input 'seed' must be INT64 or UINT64, got {}", t.datatype))),
        };
        let stops = match find(batch, "stop") {
            None => Vec::new(),
            Some(t) => t
                .bytes_elements()?
                .iter()
                .map(|b| String::from_utf8(b.to_vec()).map_err(|_| Error::invalid("input 'stop' is not UTF-8 text")))
                .collect::<Result<_>>()?,
        };
        let stream = match find(batch, "stream") {
            None => false,
            Some(t) if t.datatype == DataType::Bool => first_bytes::<1>(t)?[0] != 0,
            Some(t) => return Err(Error::invalid(format!("input 'stream' must be BOOL, got {}", t.datatype))),
        };
        Ok(Turn { prompt, max_tokens, sampling: Sampling { temperature, top_p }, seed, stops, stream })
    }
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

fn bytes_output(name: &str, text: &str) -> Tensor {
    Tensor::new(name, DataType::Bytes, vec![1], serialize_bytes([text.as_bytes()]))
}

fn int_output(name: &str, v: usize) -> Tensor {
    Tensor::new(name, DataType::I32, vec![1], Bytes::copy_from_slice(&(v as i32).to_le_bytes()))
}

/// The cache a sequence holds: its tokens and their keys and values.
struct Cache {
    ids: Vec<i64>,
    shape: Vec<i64>,
    kv: Vec<f32>,
}

impl Cache {
    fn from_state(batch: &BatchInput<'_>, axis: usize) -> Result<Option<Cache>> {
        let (Some(kv), Some(ids)) = (find(batch, PAST_KV), find(batch, PAST_IDS)) else { return Ok(None) };
        if kv.datatype != DataType::F32 || ids.datatype != DataType::I64 || kv.shape.len() <= axis {
            return Err(Error::invalid(format!(
                "the llm backend's state must be '{PAST_KV}' FP32 with the sequence on axis {axis} and '{PAST_IDS}' INT64"
            )));
        }
        let ids: Vec<i64> = onnx::le_vec(&ids.data);
        let mut shape = kv.shape.clone();
        let kv: Vec<f32> = onnx::le_vec(&kv.data);
        if shape[axis] as usize != ids.len() {
            // A state that does not cover its tokens (never written by this backend): start over.
            shape[axis] = 0;
            return Ok(Some(Cache { ids: Vec::new(), shape, kv: Vec::new() }));
        }
        Ok(Some(Cache { ids, shape, kv }))
    }

    /// Keeps the first `n` tokens.
    fn truncate(&mut self, n: usize, axis: usize) {
        let len = self.shape[axis] as usize;
        if n >= len {
            return;
        }
        let inner: usize = self.shape[axis + 1..].iter().map(|d| *d as usize).product();
        let outer: usize = self.shape[..axis].iter().map(|d| *d as usize).product();
        let mut kv = Vec::with_capacity(outer * n * inner);
        for block in 0..outer {
            let start = block * len * inner;
            kv.extend_from_slice(&self.kv[start..start + n * inner]);
        }
        self.kv = kv;
        self.shape[axis] = n as i64;
        self.ids.truncate(n);
    }
}

impl Llm {
    fn encode(&self, text: &str) -> Result<Vec<i64>> {
        let enc = self.tokenizer.encode(text, false).map_err(|e| Error::invalid(format!("tokenizer: {e}")))?;
        Ok(enc.get_ids().iter().map(|i| i64::from(*i)).collect())
    }

    /// Runs `ids` after the cache `past`; the last position's logits and the new cache.
    fn step(&mut self, ids: &[i64], past: DynValue) -> Result<(Vec<f32>, DynValue)> {
        let model = self.model.clone();
        let err = |e: ort::Error| Error::internal(format!("model '{model}': onnxruntime failed: {e}"));
        let input = OrtTensor::<i64>::from_array((vec![ids.len() as i64], ids.to_vec())).map_err(err)?.into_dyn();
        let mut outputs =
            self.session.run(vec![("input_ids".to_string(), input), (PAST_KV.to_string(), past)]).map_err(err)?;
        let (shape, logits) = outputs
            .get("logits")
            .ok_or_else(|| Error::internal(format!("model '{}': the ONNX file gives no 'logits'", self.model)))?
            .try_extract_tensor::<f32>()
            .map_err(err)?;
        let vocab = *shape.last().unwrap_or(&0) as usize;
        let last = logits[logits.len().saturating_sub(vocab)..].to_vec();
        let present = outputs
            .remove(PRESENT_KV)
            .ok_or_else(|| Error::internal(format!("model '{}': the ONNX file gives no '{PRESENT_KV}'", self.model)))?;
        Ok((last, present))
    }
}

impl Backend for Llm {
    fn execute(&mut self, _: BatchInput<'_>) -> Result<Vec<Tensor>> {
        Err(Error::unsupported("the llm backend is decoupled: it answers through a stream"))
    }

    fn execute_decoupled(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(Vec<Tensor>) -> Result<()>,
    ) -> Result<()> {
        let limits = self.limits.clone();
        let turn = Turn::read(&batch, &limits)?;
        let prompt = self.encode(&turn.prompt)?;
        if prompt.is_empty() {
            return Err(Error::invalid("input 'text_input' holds no tokens"));
        }
        if prompt.len() + turn.max_tokens > limits.max_context {
            return Err(Error::invalid(format!(
                "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the \
                 messages, {} in the completion). Please reduce the length of the messages or completion.",
                limits.max_context,
                prompt.len() + turn.max_tokens,
                prompt.len(),
                turn.max_tokens
            )));
        }
        let stateful = Cache::from_state(&batch, limits.kv_axis)?;
        let mut cache = match stateful {
            Some(c) => c,
            None => Cache { ids: Vec::new(), shape: empty_kv_shape(&self.session, limits.kv_axis)?, kv: Vec::new() },
        };
        // The state goes back to the engine unless the sequence ends here (a one-off request).
        let ends = batch.request.and_then(|r| r.sequence.as_ref()).is_some_and(|s| s.end);
        let keep_state = find(&batch, PAST_KV).is_some() && !ends;
        // Reuse what the cache shares with the prompt; at least the prompt's last token runs.
        let common = cache.ids.iter().zip(&prompt).take(prompt.len() - 1).take_while(|(a, b)| a == b).count();
        cache.truncate(common, limits.kv_axis);
        let err = |e: ort::Error| Error::internal(format!("onnxruntime: {e}"));
        let past =
            OrtTensor::<f32>::from_array((cache.shape.clone(), std::mem::take(&mut cache.kv))).map_err(err)?.into_dyn();
        let (mut logits, mut present) = self.step(&prompt[common..], past)?;
        let mut fed = prompt.clone();
        let mut rng = SplitMix64::new(turn.seed);
        let tokenizer = self.tokenizer.clone();
        let mut reply = text::Reply::new(&tokenizer, turn.stops.clone());
        let mut generated = 0usize;
        let mut finish = "length";
        let mut whole = String::new();
        loop {
            let token = sampling::sample(&logits, turn.sampling, &mut rng) as u32;
            generated += 1;
            if token == limits.end_token {
                finish = "stop";
                break;
            }
            let (piece, stopped) = match reply.push(token)? {
                text::Step::Piece(p) => (p, false),
                text::Step::Stopped(p) => (p, true),
            };
            if turn.stream && !piece.is_empty() {
                emit(vec![bytes_output("text_output", &piece)])?;
            }
            whole.push_str(&piece);
            if stopped {
                finish = "stop";
                break;
            }
            if generated >= turn.max_tokens {
                break;
            }
            let (l, p) = self.step(&[i64::from(token)], present)?;
            logits = l;
            present = p;
            fed.push(i64::from(token));
        }
        let rest = reply.rest();
        whole.push_str(&rest);
        let last_text = if turn.stream { rest } else { whole };
        let mut outputs = vec![
            bytes_output("text_output", &last_text),
            bytes_output("finish_reason", finish),
            int_output("prompt_tokens", prompt.len()),
            int_output("completion_tokens", generated),
            int_output("cached_tokens", common),
        ];
        if keep_state {
            let (shape, kv) = present.try_extract_tensor::<f32>().map_err(err)?;
            outputs.push(Tensor::new(PRESENT_KV, DataType::F32, shape.to_vec(), onnx::le_bytes(kv)));
            outputs.push(Tensor::new(PRESENT_IDS, DataType::I64, vec![fed.len() as i64], onnx::le_bytes(&fed)));
        }
        outputs.retain(|t| batch.outputs.is_empty() || batch.outputs.contains(&t.name));
        emit(outputs)
    }
}

/// The shape of an empty cache, from the ONNX file's `past_kv` (its dynamic sequence dim 0).
fn empty_kv_shape(session: &Session, axis: usize) -> Result<Vec<i64>> {
    let input = session
        .inputs()
        .iter()
        .find(|i| i.name() == PAST_KV)
        .ok_or_else(|| Error::invalid(format!("the ONNX file has no input '{PAST_KV}'")))?;
    match input.dtype() {
        ort::value::ValueType::Tensor { shape, .. } => {
            let mut dims: Vec<i64> = shape.iter().map(|d| (*d).max(0)).collect();
            if let Some(d) = dims.get_mut(axis) {
                *d = 0;
            }
            Ok(dims)
        }
        other => Err(Error::invalid(format!("input '{PAST_KV}' is a {other:?}, not a tensor"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits { max_context: 64, max_tokens_limit: 16, default_max_tokens: 8, end_token: 3, kv_axis: 1 }
    }

    fn batch_of(inputs: &[Tensor]) -> BatchInput<'_> {
        BatchInput::bare(inputs, &[], 1)
    }

    fn text(s: &str) -> Tensor {
        bytes_output("text_input", s)
    }

    #[test]
    fn a_turn_reads_its_settings_with_defaults_and_limits() {
        let inputs = [text("hi")];
        let t = Turn::read(&batch_of(&inputs), &limits()).unwrap();
        assert_eq!((t.prompt.as_str(), t.max_tokens, t.stream), ("hi", 8, false));
        assert_eq!(t.sampling, Sampling { temperature: 1.0, top_p: 1.0 });
        let over = [text("hi"), int_output("max_tokens", 17)];
        let e = Turn::read(&batch_of(&over), &limits()).err().unwrap();
        assert!(e.message.contains("max_tokens must be between 1 and 16"), "{e}");
        let hot = [
            text("hi"),
            Tensor::new("temperature", DataType::F32, vec![1], Bytes::copy_from_slice(&3f32.to_le_bytes())),
        ];
        assert!(Turn::read(&batch_of(&hot), &limits()).is_err());
        assert!(Turn::read(&batch_of(&[]), &limits()).err().unwrap().message.contains("text_input"));
    }

    #[test]
    fn the_cache_keeps_the_first_tokens_of_every_block() {
        // Two blocks (axis 0), four tokens (axis 1) of two values each.
        let kv: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let mut c = Cache { ids: vec![10, 11, 12, 13], shape: vec![2, 4, 2], kv };
        c.truncate(2, 1);
        assert_eq!(c.shape, vec![2, 2, 2]);
        assert_eq!(c.ids, vec![10, 11]);
        assert_eq!(c.kv, vec![0.0, 1.0, 2.0, 3.0, 8.0, 9.0, 10.0, 11.0]);
        c.truncate(5, 1);
        assert_eq!(c.shape, vec![2, 2, 2], "keeping more than it holds changes nothing");
    }

    #[test]
    fn a_state_that_does_not_cover_its_tokens_starts_over() {
        let inputs = [
            Tensor::new(PAST_KV, DataType::F32, vec![1, 2, 1], onnx::le_bytes(&[1f32, 2.0])),
            Tensor::new(PAST_IDS, DataType::I64, vec![3], onnx::le_bytes(&[1i64, 2, 3])),
        ];
        let c = Cache::from_state(&batch_of(&inputs), 1).unwrap().unwrap();
        assert_eq!((c.ids.len(), c.shape.clone()), (0, vec![1, 0, 1]));
        assert!(Cache::from_state(&batch_of(&[]), 1).unwrap().is_none(), "no state: a model without sequences");
    }
}
