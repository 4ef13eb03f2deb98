//! Built-in decoupled models that need no model file, as in Triton's test suite, usable from
//! `config.pbtxt` with `model_transaction_policy { decoupled: true }`:
//!
//! - `backend: "repeat"`: input `IN` (INT32 [n]) and optional `DELAY` (UINT32 [n], ms) and `WAIT` (UINT32
//!   [1], ms); sends n responses, the i-th with `OUT` = [IN[i]] and `IDX` = [i], each after its delay, then
//!   waits `WAIT` before the final flag.
//! - `backend: "square"`: input `IN` (INT32 [1]) = n; sends n responses, each `OUT` = [n].

use std::marker::PhantomData;
use std::time::Duration;

use bytes::Bytes;
use tritium_actors::{Backend, BackendFactory, BatchInput, DataType, Error, InstanceSpec, Result, Tensor};

use crate::config::ModelConfig;

fn values<const N: usize, T>(tensor: &Tensor, from: impl Fn([u8; N]) -> T) -> Vec<T> {
    tensor.data.chunks_exact(N).map(|c| from(c.try_into().expect("chunks of N"))).collect()
}

fn input<'a>(batch: &'a BatchInput<'_>, name: &str, datatype: DataType) -> Result<Option<&'a Tensor>> {
    match batch.inputs.iter().find(|t| t.name == name) {
        None => Ok(None),
        Some(t) if t.datatype == datatype => Ok(Some(t)),
        Some(t) => Err(Error::invalid(format!("input '{name}' must be {datatype}, got {}", t.datatype))),
    }
}

fn scalar(name: &str, datatype: DataType, data: Bytes) -> Tensor {
    Tensor::new(name, datatype, vec![1], data)
}

fn require_decoupled(config: &ModelConfig, backend: &str) -> Result<()> {
    let decoupled = config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
    if !decoupled {
        return Err(Error::invalid(format!(
            "model '{}': the {backend} backend needs model_transaction_policy {{ decoupled: true }}",
            config.name
        )));
    }
    Ok(())
}

/// The factory of a built-in decoupled backend that keeps no state: the config is checked once,
/// and each instance is a fresh `B`.
pub struct Stateless<B>(PhantomData<fn() -> B>);

impl<B> Stateless<B> {
    fn from_config(config: &ModelConfig, backend: &str) -> Result<Self> {
        require_decoupled(config, backend)?;
        Ok(Stateless(PhantomData))
    }
}

impl<B: Backend + Default + 'static> BackendFactory for Stateless<B> {
    fn create(&self, _: &InstanceSpec) -> Result<Box<dyn Backend>> {
        Ok(Box::<B>::default())
    }
}

/// The factory of the `repeat` backend.
pub fn repeat(config: &ModelConfig) -> Result<Stateless<Repeat>> {
    Stateless::from_config(config, "repeat")
}

/// The factory of the `square` backend.
pub fn square(config: &ModelConfig) -> Result<Stateless<Square>> {
    Stateless::from_config(config, "square")
}

/// `backend: "repeat"` (the module's doc).
#[derive(Default)]
pub struct Repeat;

impl Backend for Repeat {
    fn execute(&mut self, _: BatchInput<'_>) -> Result<Vec<Tensor>> {
        Err(Error::unsupported("the repeat backend is decoupled: it answers through a stream"))
    }

    fn execute_decoupled(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(Vec<Tensor>) -> Result<()>,
    ) -> Result<()> {
        let inp =
            input(&batch, "IN", DataType::I32)?.ok_or_else(|| Error::invalid("the repeat backend needs input 'IN'"))?;
        let items = values(inp, i32::from_le_bytes);
        let delays = match input(&batch, "DELAY", DataType::U32)? {
            Some(t) => values(t, u32::from_le_bytes),
            None => Vec::new(),
        };
        if !delays.is_empty() && delays.len() != items.len() {
            return Err(Error::invalid(format!(
                "input 'DELAY' must have one element per element of 'IN' ({}), got {}",
                items.len(),
                delays.len()
            )));
        }
        let wait = match input(&batch, "WAIT", DataType::U32)? {
            Some(t) => values(t, u32::from_le_bytes).first().copied().unwrap_or(0),
            None => 0,
        };
        for (i, v) in items.iter().enumerate() {
            if let Some(ms) = delays.get(i) {
                std::thread::sleep(Duration::from_millis(u64::from(*ms)));
            }
            let mut outputs = vec![
                scalar("OUT", DataType::I32, Bytes::copy_from_slice(&v.to_le_bytes())),
                scalar("IDX", DataType::U32, Bytes::copy_from_slice(&(i as u32).to_le_bytes())),
            ];
            outputs.retain(|t| batch.outputs.is_empty() || batch.outputs.contains(&t.name));
            // A closed stream ends the work early.
            emit(outputs)?;
        }
        std::thread::sleep(Duration::from_millis(u64::from(wait)));
        Ok(())
    }
}

/// `backend: "square"` (the module's doc).
#[derive(Default)]
pub struct Square;

impl Backend for Square {
    fn execute(&mut self, _: BatchInput<'_>) -> Result<Vec<Tensor>> {
        Err(Error::unsupported("the square backend is decoupled: it answers through a stream"))
    }

    fn execute_decoupled(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(Vec<Tensor>) -> Result<()>,
    ) -> Result<()> {
        let inp =
            input(&batch, "IN", DataType::I32)?.ok_or_else(|| Error::invalid("the square backend needs input 'IN'"))?;
        let n = *values(inp, i32::from_le_bytes)
            .first()
            .ok_or_else(|| Error::invalid("input 'IN' of the square backend must hold one element"))?;
        if n < 0 {
            return Err(Error::invalid(format!("input 'IN' of the square backend must not be negative, got {n}")));
        }
        for _ in 0..n {
            emit(vec![scalar("OUT", DataType::I32, Bytes::copy_from_slice(&n.to_le_bytes()))])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(name: &str, datatype: DataType, v: &[u32]) -> Tensor {
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        Tensor::new(name, datatype, vec![v.len() as i64], Bytes::from(data))
    }

    /// The responses `backend` sends for `inputs`, in order.
    fn sent(backend: &mut dyn Backend, inputs: &[Tensor]) -> Result<Vec<Vec<Tensor>>> {
        let mut out = Vec::new();
        backend.execute_decoupled(BatchInput::bare(inputs, &[], 1), &mut |o| {
            out.push(o);
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn each_backend_needs_a_decoupled_config_and_makes_its_instances() {
        let path = std::path::Path::new("config.pbtxt");
        let plain = crate::config::parse_pbtxt("name: \"r\"", path).unwrap();
        for (backend, e) in [("repeat", repeat(&plain).err()), ("square", square(&plain).err())] {
            let e = e.expect("a config that is not decoupled is refused");
            assert_eq!(e.kind, tritium_actors::ErrorKind::InvalidArgument, "{e}");
            assert_eq!(
                e.message,
                format!("model 'r': the {backend} backend needs model_transaction_policy {{ decoupled: true }}")
            );
        }
        let decoupled =
            crate::config::parse_pbtxt("name: \"r\" model_transaction_policy { decoupled: true }", path).unwrap();
        let spec = InstanceSpec {
            name: "r_0".into(),
            index: 0,
            kind: tritium_actors::InstanceKind::Cpu,
            device: None,
            cpu_cores: Vec::new(),
            rate_limiter: Default::default(),
        };
        let mut instance = repeat(&decoupled).unwrap().create(&spec).unwrap();
        assert_eq!(sent(instance.as_mut(), &[ints("IN", DataType::I32, &[9])]).unwrap().len(), 1);
        let mut instance = square(&decoupled).unwrap().create(&spec).unwrap();
        assert_eq!(sent(instance.as_mut(), &[ints("IN", DataType::I32, &[2])]).unwrap().len(), 2);
    }

    #[test]
    fn repeat_sends_one_response_per_element_in_order() {
        let inputs = [ints("IN", DataType::I32, &[5, 6, 7]), ints("DELAY", DataType::U32, &[1, 1, 1])];
        let got: Vec<(i32, u32)> = sent(&mut Repeat, &inputs)
            .unwrap()
            .iter()
            .map(|o| (values(&o[0], i32::from_le_bytes)[0], values(&o[1], u32::from_le_bytes)[0]))
            .collect();
        assert_eq!(got, vec![(5, 0), (6, 1), (7, 2)]);
    }

    #[test]
    fn square_sends_n_responses_and_refuses_bad_input() {
        assert_eq!(sent(&mut Square, &[ints("IN", DataType::I32, &[4])]).unwrap().len(), 4);
        assert!(sent(&mut Square, &[ints("IN", DataType::U32, &[4])]).is_err());
    }
}
