//! BYTES tensors in and out of ONNX Runtime with each element's length, never as C strings, so
//! elements may hold any bytes, NUL included (Triton's string clients send `"he\x00llo"`), and
//! outputs need not be UTF-8. The `ort` crate's own string helpers go through `CString` and
//! `String`, which refuse both; these use ONNX Runtime's length-carrying C calls instead
//! (`GetResizedStringTensorElementBuffer` in, `GetStringTensorContent` out).

use std::ffi::c_char;

use bytes::Bytes;
use ort::value::{DynValue, Tensor as OrtTensor, ValueType};
use ort::AsPointer as _;
use tritium_actors::tensor::serialize_bytes;

/// A string tensor of `shape` whose elements are `elements`, byte for byte.
pub fn to_ort(shape: Vec<i64>, elements: &[Bytes]) -> ort::Result<DynValue> {
    // A tensor of empty strings of the right shape first; then each non-empty element is given a
    // buffer of its exact length, which is filled with its bytes.
    let empty = vec![""; elements.len()];
    let mut tensor = OrtTensor::<String>::from_string_array((shape, &empty[..]))?;
    let value = tensor.ptr_mut();
    for (index, element) in elements.iter().enumerate().filter(|(_, e)| !e.is_empty()) {
        let mut buffer: *mut c_char = std::ptr::null_mut();
        // SAFETY: `value` is the live string tensor made above, which has `elements.len()`
        // elements, so `index` is in range; `buffer` is a valid place for the out-pointer.
        let status =
            unsafe { (ort::api().GetResizedStringTensorElementBuffer)(value, index, element.len(), &mut buffer) };
        // SAFETY: `status` was just returned by an ONNX Runtime call; this takes ownership of it.
        unsafe { ort::Error::result_from_status(status) }?;
        if buffer.is_null() {
            return Err(ort::Error::new("ONNX Runtime gave no buffer for a string element"));
        }
        // SAFETY: ONNX Runtime sized `buffer` to `element.len()` bytes for this element and keeps
        // it alive with the tensor; the source is a separate Rust allocation.
        unsafe { std::ptr::copy_nonoverlapping(element.as_ptr(), buffer.cast::<u8>(), element.len()) };
    }
    Ok(tensor.into_dyn())
}

/// The shape of a string tensor and its elements serialized as Triton's BYTES (a 4-byte
/// little-endian length before each element).
pub fn from_ort(value: &DynValue) -> ort::Result<(Vec<i64>, Bytes)> {
    let shape: Vec<i64> = match value.dtype() {
        ValueType::Tensor { shape, .. } => shape.to_vec(),
        other => return Err(ort::Error::new(format!("expected a string tensor, got {other:?}"))),
    };
    let count = shape.iter().map(|&d| d.max(0) as usize).product::<usize>();
    let ptr = value.ptr();
    let mut total = 0usize;
    // SAFETY: `ptr` is a live value borrowed for this call; `total` is a valid out-parameter.
    let status = unsafe { (ort::api().GetStringTensorDataLength)(ptr, &mut total) };
    // SAFETY: `status` was just returned by an ONNX Runtime call; this takes ownership of it.
    unsafe { ort::Error::result_from_status(status) }?;
    let mut content = vec![0u8; total];
    let mut offsets = vec![0usize; count];
    if count > 0 {
        // SAFETY: `content` has `total` bytes and `offsets` `count` slots, the sizes ONNX Runtime
        // reported for this tensor, which stays alive for the call.
        let status = unsafe {
            (ort::api().GetStringTensorContent)(ptr, content.as_mut_ptr().cast(), total, offsets.as_mut_ptr(), count)
        };
        // SAFETY: as above, a status just returned by ONNX Runtime.
        unsafe { ort::Error::result_from_status(status) }?;
    }
    let mut ends = offsets.iter().skip(1).copied().chain(std::iter::once(total));
    let mut elements = Vec::with_capacity(count);
    for &start in &offsets {
        let end = ends.next().unwrap_or(total);
        if start > end || end > total {
            return Err(ort::Error::new(format!("ONNX Runtime gave string offsets out of order ({start}..{end})")));
        }
        elements.push(&content[start..end]);
    }
    Ok((shape, serialize_bytes(elements)))
}
