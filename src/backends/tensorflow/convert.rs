//! Tritium's tensors to TensorFlow's and back. Numeric tensors are copied once each way (into a
//! tensor TensorFlow allocated, out of the one it returns). BYTES elements travel as TensorFlow
//! strings (`TF_TString`) with their lengths, through the C API's `TF_StringCopy`,
//! `TF_StringGetDataPointer` and `TF_StringGetSize`, so any bytes pass unchanged: the `tensorflow`
//! crate's own `String` tensors refuse elements that are not UTF-8 (and panic on reading one).

use std::ffi::{c_char, c_void};
use std::fmt;

use bytes::Bytes;
use tensorflow::{BFloat16, DataType as TfType, FetchToken, Operation, SessionRunArgs, Tensor as TfTensor, TensorType};
use tensorflow_sys_runtime as sys;
use tritium_actors::tensor::serialize_bytes;
use tritium_actors::{DataType, Error, Result, Tensor};

/// One BYTES element: a TensorFlow string tensor's element type with any bytes in it.
#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub struct TfBytes(pub Vec<u8>);

impl fmt::Display for TfBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// Frees a string tensor's buffer made by `pack`: each element's own allocation, then the array.
unsafe extern "C" fn free_strings(data: *mut c_void, length: usize, _arg: *mut c_void) {
    let size = std::mem::size_of::<sys::TF_TString>();
    let count = length / size;
    let strings = std::slice::from_raw_parts_mut(data.cast::<sys::TF_TString>(), count);
    for s in strings {
        sys::TF_StringDealloc(s);
    }
    if let Ok(layout) = std::alloc::Layout::from_size_align(length.max(size), std::mem::align_of::<sys::TF_TString>()) {
        std::alloc::dealloc(data.cast(), layout);
    }
}

impl TensorType for TfBytes {
    type InnerType = tensorflow::TensorDataNoCRepr<TfBytes>;

    fn data_type() -> TfType {
        TfType::String
    }

    fn zero() -> Self {
        TfBytes(Vec::new())
    }

    fn one() -> Self {
        TfBytes(vec![1])
    }

    fn is_repr_c() -> bool {
        false
    }

    fn unpack(data: &[u8], count: usize) -> tensorflow::Result<Vec<Self>> {
        let size = std::mem::size_of::<sys::TF_TString>();
        if data.len() < count * size {
            return Err(tensorflow::Status::new_set_lossy(
                tensorflow::Code::Internal,
                "a string tensor's buffer is smaller than its elements",
            ));
        }
        // SAFETY: TensorFlow's string tensor buffer holds `count` TF_TString values, suitably
        // aligned (it allocated them), alive for this call.
        let strings = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<sys::TF_TString>(), count) };
        Ok(strings
            .iter()
            .map(|s| {
                // SAFETY: each is an initialized TF_TString; its data pointer is valid for its size.
                unsafe {
                    let (ptr, len) = (sys::TF_StringGetDataPointer(s), sys::TF_StringGetSize(s));
                    if len == 0 || ptr.is_null() {
                        TfBytes(Vec::new())
                    } else {
                        TfBytes(std::slice::from_raw_parts(ptr.cast::<u8>(), len).to_vec())
                    }
                }
            })
            .collect())
    }

    fn pack(data: &[Self], dims: &[u64]) -> tensorflow::Result<*mut sys::TF_Tensor> {
        let size = std::mem::size_of::<sys::TF_TString>();
        let length = data.len() * size;
        let layout = std::alloc::Layout::from_size_align(length.max(size), std::mem::align_of::<sys::TF_TString>())
            .map_err(|e| tensorflow::Status::new_set_lossy(tensorflow::Code::Internal, &e.to_string()))?;
        // SAFETY: a fresh allocation of `data.len()` TF_TStrings (at least one slot), each
        // initialized before TensorFlow sees it; `free_strings` frees it with the same layout.
        unsafe {
            let buffer = std::alloc::alloc(layout);
            if buffer.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            let strings = std::slice::from_raw_parts_mut(buffer.cast::<sys::TF_TString>(), data.len());
            for (s, element) in strings.iter_mut().zip(data) {
                sys::TF_StringInit(s);
                sys::TF_StringCopy(s, element.0.as_ptr().cast::<c_char>(), element.0.len());
            }
            let dims: Vec<i64> = dims.iter().map(|d| *d as i64).collect();
            let tensor = sys::TF_NewTensor(
                sys::TF_STRING,
                dims.as_ptr(),
                dims.len() as i32,
                buffer.cast(),
                length,
                Some(free_strings),
                std::ptr::null_mut(),
            );
            if tensor.is_null() {
                free_strings(buffer.cast(), length, std::ptr::null_mut());
                return Err(tensorflow::Status::new_set_lossy(tensorflow::Code::Internal, "TF_NewTensor failed"));
            }
            Ok(tensor)
        }
    }
}

/// A fed tensor of any type (SessionRunArgs borrows each for the run).
pub enum Feed {
    Bool(TfTensor<bool>),
    U8(TfTensor<u8>),
    U16(TfTensor<u16>),
    U32(TfTensor<u32>),
    U64(TfTensor<u64>),
    I8(TfTensor<i8>),
    I16(TfTensor<i16>),
    I32(TfTensor<i32>),
    I64(TfTensor<i64>),
    F16(TfTensor<half::f16>),
    BF16(TfTensor<BFloat16>),
    F32(TfTensor<f32>),
    F64(TfTensor<f64>),
    Bytes(TfTensor<TfBytes>),
}

/// Copies little-endian elements into a TensorFlow tensor of the same element size.
fn fill<T: TensorType + Copy>(dims: &[u64], data: &[u8]) -> TfTensor<T> {
    let mut tensor = TfTensor::<T>::new(dims);
    let bytes = std::mem::size_of_val(&tensor[..]);
    debug_assert_eq!(bytes, data.len());
    // SAFETY: the tensor's buffer holds exactly `bytes` bytes of plain numeric elements (every bit
    // pattern valid; the caller gives `data` of the same length, checked against the shape), and
    // it is a TensorFlow allocation separate from `data`.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), tensor.as_mut_ptr().cast::<u8>(), bytes.min(data.len()));
    }
    tensor
}

/// The tensor TensorFlow is fed for `tensor` (its datatype is the signature's, checked before).
pub fn to_feed(tensor: &Tensor) -> Result<Feed> {
    let dims: Vec<u64> = tensor
        .shape
        .iter()
        .map(|d| {
            u64::try_from(*d).map_err(|_| Error::invalid(format!("input '{}' has a negative dimension", tensor.name)))
        })
        .collect::<Result<_>>()?;
    let count = tritium_actors::tensor::element_count(&tensor.shape)?;
    tensor.check_size()?;
    let data = &tensor.data[..];
    Ok(match tensor.datatype {
        DataType::Bool => {
            let mut t = TfTensor::<bool>::new(&dims);
            for (slot, b) in t.iter_mut().zip(data) {
                *slot = *b != 0;
            }
            Feed::Bool(t)
        }
        DataType::U8 => Feed::U8(fill(&dims, data)),
        DataType::U16 => Feed::U16(fill(&dims, data)),
        DataType::U32 => Feed::U32(fill(&dims, data)),
        DataType::U64 => Feed::U64(fill(&dims, data)),
        DataType::I8 => Feed::I8(fill(&dims, data)),
        DataType::I16 => Feed::I16(fill(&dims, data)),
        DataType::I32 => Feed::I32(fill(&dims, data)),
        DataType::I64 => Feed::I64(fill(&dims, data)),
        DataType::F16 => Feed::F16(fill(&dims, data)),
        DataType::BF16 => Feed::BF16(fill(&dims, data)),
        DataType::F32 => Feed::F32(fill(&dims, data)),
        DataType::F64 => Feed::F64(fill(&dims, data)),
        DataType::Bytes => {
            let elements = tensor.bytes_elements()?;
            if elements.len() != count {
                return Err(Error::invalid(format!(
                    "input '{}' has {} BYTES elements, its shape {:?} needs {count}",
                    tensor.name,
                    elements.len(),
                    tensor.shape
                )));
            }
            let mut t = TfTensor::<TfBytes>::new(&dims);
            for (slot, element) in t.iter_mut().zip(elements) {
                slot.0 = element.to_vec();
            }
            Feed::Bytes(t)
        }
    })
}

impl Feed {
    pub fn add_to<'a>(&'a self, args: &mut SessionRunArgs<'a>, op: &Operation, index: i32) {
        match self {
            Feed::Bool(t) => args.add_feed(op, index, t),
            Feed::U8(t) => args.add_feed(op, index, t),
            Feed::U16(t) => args.add_feed(op, index, t),
            Feed::U32(t) => args.add_feed(op, index, t),
            Feed::U64(t) => args.add_feed(op, index, t),
            Feed::I8(t) => args.add_feed(op, index, t),
            Feed::I16(t) => args.add_feed(op, index, t),
            Feed::I32(t) => args.add_feed(op, index, t),
            Feed::I64(t) => args.add_feed(op, index, t),
            Feed::F16(t) => args.add_feed(op, index, t),
            Feed::BF16(t) => args.add_feed(op, index, t),
            Feed::F32(t) => args.add_feed(op, index, t),
            Feed::F64(t) => args.add_feed(op, index, t),
            Feed::Bytes(t) => args.add_feed(op, index, t),
        }
    }
}

/// The engine datatype of a TensorFlow type; `None` for those Triton does not map.
pub fn datatype(t: TfType) -> Option<DataType> {
    Some(match t {
        TfType::Bool => DataType::Bool,
        TfType::UInt8 => DataType::U8,
        TfType::UInt16 => DataType::U16,
        TfType::UInt32 => DataType::U32,
        TfType::UInt64 => DataType::U64,
        TfType::Int8 => DataType::I8,
        TfType::Int16 => DataType::I16,
        TfType::Int32 => DataType::I32,
        TfType::Int64 => DataType::I64,
        TfType::Half => DataType::F16,
        TfType::BFloat16 => DataType::BF16,
        TfType::Float => DataType::F32,
        TfType::Double => DataType::F64,
        TfType::String => DataType::Bytes,
        _ => return None,
    })
}

fn raw_bytes<T: TensorType + Copy>(tensor: &TfTensor<T>) -> Bytes {
    let values: &[T] = tensor;
    // SAFETY: reading the initialized elements of a plain numeric tensor as bytes.
    let raw = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) };
    Bytes::copy_from_slice(raw)
}

fn shape(dims: &[u64]) -> Vec<i64> {
    dims.iter().map(|d| *d as i64).collect()
}

/// Takes the fetched output `token` (the `position`-th fetch of the run) as a Tritium tensor.
pub fn take_output(
    model: &str,
    name: &str,
    args: &mut SessionRunArgs<'_>,
    token: FetchToken,
    position: usize,
) -> Result<Tensor> {
    let fetch_error = |e: tensorflow::Status| Error::internal(format!("model '{model}': output '{name}': {e}"));
    let tf_type = args
        .output_data_type(position)
        .ok_or_else(|| Error::internal(format!("model '{model}': TensorFlow gave no output '{name}'")))?;
    let datatype = datatype(tf_type).ok_or_else(|| {
        Error::internal(format!(
            "model '{model}': output '{name}' has TensorFlow type {tf_type}, which Triton does not map"
        ))
    })?;
    macro_rules! numeric {
        ($t:ty) => {{
            let t = args.fetch::<$t>(token).map_err(fetch_error)?;
            (shape(t.dims()), raw_bytes(&t))
        }};
    }
    let (shape, data) = match datatype {
        DataType::Bool => {
            let t = args.fetch::<bool>(token).map_err(fetch_error)?;
            (shape(t.dims()), Bytes::from(t.iter().map(|b| u8::from(*b)).collect::<Vec<u8>>()))
        }
        DataType::U8 => numeric!(u8),
        DataType::U16 => numeric!(u16),
        DataType::U32 => numeric!(u32),
        DataType::U64 => numeric!(u64),
        DataType::I8 => numeric!(i8),
        DataType::I16 => numeric!(i16),
        DataType::I32 => numeric!(i32),
        DataType::I64 => numeric!(i64),
        DataType::F16 => numeric!(half::f16),
        DataType::BF16 => numeric!(BFloat16),
        DataType::F32 => numeric!(f32),
        DataType::F64 => numeric!(f64),
        DataType::Bytes => {
            let t = args.fetch::<TfBytes>(token).map_err(fetch_error)?;
            let elements: Vec<&[u8]> = t.iter().map(|e| e.0.as_slice()).collect();
            (shape(t.dims()), serialize_bytes(elements))
        }
    };
    Ok(Tensor::new(name, datatype, shape, data))
}
