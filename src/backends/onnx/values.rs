//! Engine tensors into ONNX Runtime values and back, copying only what the layout forces.
//!
//! In: a numeric tensor whose bytes are aligned for its element type goes to ONNX Runtime as a
//! borrowed view of the bytes the request already holds (the HTTP body, the gRPC message, a
//! shared-memory region, or the batcher's merged buffer); an unaligned one (an HTTP binary
//! tensor behind a JSON header of odd length, say) is copied once into a typed vector.
//! Out: a numeric output stays in the buffer ONNX Runtime allocated for it; the output tensor's
//! `Bytes` own the `ort` value, which is freed when the last response slicing it is gone.
//! BOOL is converted element by element both ways (ONNX's bool must be 0 or 1), BYTES goes
//! through `strings`.

use std::fmt::Debug;

use bytemuck::Pod;
use bytes::Bytes;
use ort::session::SessionInputValue;
use ort::value::{DynValue, PrimitiveTensorElementType, Tensor as OrtTensor, TensorRef, ValueType};
use tritium_actors::tensor::element_count;
use tritium_actors::{DataType, Error, Result, Tensor};

use super::{datatype, strings};

/// Copies little-endian elements into a typed vector (the data may be unaligned).
pub(crate) fn le_vec<T: Pod>(data: &[u8]) -> Vec<T> {
    #[cfg(not(target_endian = "little"))]
    compile_error!("Tritium's tensor layout assumes a little-endian machine");
    bytemuck::pod_collect_to_vec(&data[..data.len() - data.len() % std::mem::size_of::<T>()])
}

/// The little-endian bytes of a typed slice, copied.
pub(crate) fn le_bytes<T: Pod>(values: &[T]) -> Bytes {
    Bytes::copy_from_slice(bytemuck::cast_slice(values))
}

/// A numeric input: borrowed when its bytes are aligned for `T`, else copied once.
fn numeric_input<'a, T>(shape: &'a [i64], data: &'a [u8]) -> ort::Result<(SessionInputValue<'a>, bool)>
where
    T: PrimitiveTensorElementType + Pod + Debug,
{
    match bytemuck::try_cast_slice::<u8, T>(data) {
        Ok(view) if !view.is_empty() => Ok((TensorRef::from_array_view((shape, view))?.into(), true)),
        _ => Ok((OrtTensor::from_array((shape, le_vec::<T>(data)))?.into_dyn().into(), false)),
    }
}

/// `tensor` as an ONNX Runtime input, and whether its bytes were borrowed rather than copied.
pub(crate) fn to_ort(tensor: &Tensor) -> Result<(SessionInputValue<'_>, bool)> {
    // The shape is lent to `ort` (which copies it into its own small vector), not cloned.
    let shape = &tensor.shape[..];
    let data = &tensor.data[..];
    let value = match tensor.datatype {
        DataType::Bool => OrtTensor::<bool>::from_array((shape, data.iter().map(|b| *b != 0).collect::<Vec<_>>()))
            .map(|t| (t.into_dyn().into(), false)),
        DataType::U8 => numeric_input::<u8>(shape, data),
        DataType::U16 => numeric_input::<u16>(shape, data),
        DataType::U32 => numeric_input::<u32>(shape, data),
        DataType::U64 => numeric_input::<u64>(shape, data),
        DataType::I8 => numeric_input::<i8>(shape, data),
        DataType::I16 => numeric_input::<i16>(shape, data),
        DataType::I32 => numeric_input::<i32>(shape, data),
        DataType::I64 => numeric_input::<i64>(shape, data),
        DataType::F16 => numeric_input::<half::f16>(shape, data),
        DataType::BF16 => numeric_input::<half::bf16>(shape, data),
        DataType::F32 => numeric_input::<f32>(shape, data),
        DataType::F64 => numeric_input::<f64>(shape, data),
        DataType::Bytes => strings::to_ort(shape.to_vec(), &tensor.bytes_elements()?).map(|v| (v.into(), false)),
    };
    value.map_err(|e| Error::invalid(format!("input '{}': {e}", tensor.name)))
}

/// An output value whose elements are read in place: `Bytes::from_owner` keeps it alive.
struct InPlace {
    value: DynValue,
    datatype: DataType,
}

fn elements_of<T: PrimitiveTensorElementType + Pod + Debug>(value: &DynValue) -> &[u8] {
    // An extraction that fails yields no bytes; `from_ort` checks the length it gets back.
    value.try_extract_tensor::<T>().map(|(_, s)| bytemuck::cast_slice(s)).unwrap_or(&[])
}

impl AsRef<[u8]> for InPlace {
    fn as_ref(&self) -> &[u8] {
        let v = &self.value;
        match self.datatype {
            DataType::U8 => elements_of::<u8>(v),
            DataType::U16 => elements_of::<u16>(v),
            DataType::U32 => elements_of::<u32>(v),
            DataType::U64 => elements_of::<u64>(v),
            DataType::I8 => elements_of::<i8>(v),
            DataType::I16 => elements_of::<i16>(v),
            DataType::I32 => elements_of::<i32>(v),
            DataType::I64 => elements_of::<i64>(v),
            DataType::F16 => elements_of::<half::f16>(v),
            DataType::BF16 => elements_of::<half::bf16>(v),
            DataType::F32 => elements_of::<f32>(v),
            DataType::F64 => elements_of::<f64>(v),
            DataType::Bool | DataType::Bytes => &[],
        }
    }
}

/// The output `value`, named `name`, as an engine tensor; numeric elements are not copied.
pub(crate) fn from_ort(model: &str, name: &str, value: DynValue) -> Result<Tensor> {
    let (ty, shape) = match value.dtype() {
        ValueType::Tensor { ty, shape, .. } => (*ty, shape.to_vec()),
        other => return Err(Error::internal(format!("model '{model}': output '{name}' is a {other:?}, not a tensor"))),
    };
    let datatype = datatype(ty).ok_or_else(|| {
        Error::internal(format!("model '{model}': output '{name}' has unsupported element type {ty:?}"))
    })?;
    let data = match datatype {
        DataType::Bool => {
            let (_, values) = value.try_extract_tensor::<bool>().map_err(|e| Error::internal(e.to_string()))?;
            Bytes::from(values.iter().map(|b| *b as u8).collect::<Vec<u8>>())
        }
        DataType::Bytes => {
            let (_, data) = strings::from_ort(&value)
                .map_err(|e| Error::internal(format!("model '{model}': output '{name}': {e}")))?;
            data
        }
        numeric => {
            let size = numeric.element_size().unwrap_or(1);
            let want = element_count(&shape)?.checked_mul(size);
            let data = Bytes::from_owner(InPlace { value, datatype: numeric });
            if Some(data.len()) != want {
                return Err(Error::internal(format!(
                    "model '{model}': output '{name}' holds {} bytes, its shape {shape:?} of {numeric} needs {want:?}",
                    data.len()
                )));
            }
            data
        }
    };
    Ok(Tensor::new(name, datatype, shape, data))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn runtime() -> bool {
        let lib = PathBuf::from(crate::backends::SETUP_ONNXRUNTIME_LIBRARY);
        if !lib.is_file() {
            eprintln!("skipped: run scripts/setup.sh for ONNX Runtime");
            return false;
        }
        super::super::init_runtime(&lib).unwrap();
        true
    }

    /// `values`' bytes, `shift` bytes past a 4-aligned address.
    fn floats_at(values: &[f32], shift: usize) -> Bytes {
        let raw = le_bytes(values);
        let mut buffer = vec![0u8; raw.len() + 8];
        let start = buffer.as_ptr().align_offset(4) + shift;
        buffer[start..start + raw.len()].copy_from_slice(&raw);
        // `Bytes::from` keeps the vector's allocation, so the alignment holds.
        Bytes::from(buffer).slice(start..start + raw.len())
    }

    #[test]
    fn aligned_inputs_are_borrowed_unaligned_ones_copied() {
        if !runtime() {
            return;
        }
        let values = [1.0f32, 2.0, 3.0, 4.0];
        for (shift, borrowed) in [(0, true), (1, false)] {
            let t = Tensor::new("x", DataType::F32, vec![2, 2], floats_at(&values, shift));
            let (value, was_borrowed) = to_ort(&t).unwrap();
            assert_eq!(was_borrowed, borrowed, "shift {shift}");
            let SessionInputValue::View(view) = &value else {
                assert!(!borrowed, "a borrowed input must be a view");
                continue;
            };
            let (_, seen) = view.try_extract_tensor::<f32>().unwrap();
            assert_eq!(seen, &values);
            assert_eq!(seen.as_ptr().cast::<u8>(), t.data.as_ptr(), "the view is the request's own bytes");
        }
    }

    #[test]
    fn numeric_outputs_stay_in_ort_memory() {
        if !runtime() {
            return;
        }
        let value = OrtTensor::from_array((vec![3i64], vec![1.5f32, -2.0, 3.25])).unwrap().into_dyn();
        let at = value.try_extract_tensor::<f32>().unwrap().1.as_ptr().cast::<u8>();
        let t = from_ort("m", "y", value).unwrap();
        assert_eq!(t.data.as_ptr(), at, "the output bytes are ONNX Runtime's buffer, not a copy");
        assert_eq!(le_vec::<f32>(&t.data), vec![1.5, -2.0, 3.25]);
        assert_eq!(t.data.slice(4..8), le_bytes(&[-2.0f32]), "slices of it (the batch split) read right");

        let flags = OrtTensor::from_array((vec![2i64], vec![true, false])).unwrap().into_dyn();
        let t = from_ort("m", "b", flags).unwrap();
        assert_eq!((t.datatype, &t.data[..]), (DataType::Bool, &[1u8, 0][..]));
    }

    #[test]
    fn le_round_trip_and_unaligned_input() {
        let values = [1.5f32, -2.0, 3.25];
        let bytes = le_bytes(&values);
        assert_eq!(le_vec::<f32>(&bytes), values.to_vec());
        // The same elements one byte into a buffer: unaligned for f32, still read right.
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&bytes);
        assert_eq!(le_vec::<f32>(&shifted[1..]), values.to_vec());
    }
}
