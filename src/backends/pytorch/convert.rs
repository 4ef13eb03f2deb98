//! Tensors between the engine and libtorch: an engine `Tensor` becomes a libtorch tensor of the
//! matching scalar type (BYTES becomes a `List[str]`, as Triton's PyTorch backend passes it),
//! and what `forward` returns becomes engine tensors again, checked against the config.

use bytes::Bytes;
use tch::{Device, IValue, Kind};
use tritium_actors::tensor::serialize_bytes;
use tritium_actors::{DataType, Error, Result, Tensor};

/// The libtorch scalar type of an engine datatype; libtorch has no UINT16/32/64 tensors that
/// TorchScript models can use, so those have none (Triton's PyTorch backend refuses them too).
pub fn kind(datatype: DataType) -> Option<Kind> {
    Some(match datatype {
        DataType::Bool => Kind::Bool,
        DataType::U8 => Kind::Uint8,
        DataType::I8 => Kind::Int8,
        DataType::I16 => Kind::Int16,
        DataType::I32 => Kind::Int,
        DataType::I64 => Kind::Int64,
        DataType::F16 => Kind::Half,
        DataType::BF16 => Kind::BFloat16,
        DataType::F32 => Kind::Float,
        DataType::F64 => Kind::Double,
        DataType::U16 | DataType::U32 | DataType::U64 | DataType::Bytes => return None,
    })
}

fn datatype_of(kind: Kind) -> Option<DataType> {
    DataType::ALL.into_iter().find(|d| self::kind(*d) == Some(kind))
}

/// One input as `forward` takes it.
pub fn to_ivalue(model: &str, tensor: &Tensor, device: Device) -> Result<IValue> {
    if tensor.datatype == DataType::Bytes {
        let mut strings = Vec::new();
        for element in tensor.bytes_elements()? {
            if element.contains(&0) {
                return Err(Error::invalid(format!(
                    "model '{model}': input '{}' has a BYTES element with a NUL byte, which a TorchScript \
                     List[str] cannot take through tch",
                    tensor.name
                )));
            }
            let text = String::from_utf8(element.to_vec()).map_err(|_| {
                Error::invalid(format!(
                    "model '{model}': input '{}' has a BYTES element that is not UTF-8; a TorchScript List[str] \
                     holds text",
                    tensor.name
                ))
            })?;
            strings.push(text);
        }
        return Ok(IValue::StringList(strings));
    }
    let kind = kind(tensor.datatype).ok_or_else(|| {
        Error::invalid(format!(
            "model '{model}': input '{}' has datatype {}, which libtorch tensors do not have",
            tensor.name, tensor.datatype
        ))
    })?;
    let value = if tensor.datatype == DataType::Bool {
        // Triton's BOOL is one byte per element; libtorch wants exactly 0 or 1.
        let normalized: Vec<u8> = tensor.data.iter().map(|b| u8::from(*b != 0)).collect();
        tch::Tensor::f_from_data_size(&normalized, &tensor.shape, kind)
    } else {
        tch::Tensor::f_from_data_size(&tensor.data, &tensor.shape, kind)
    }
    .map_err(|e| Error::invalid(format!("model '{model}': input '{}': {e}", tensor.name)))?;
    let value = if device == Device::Cpu { value } else { value.to_device(device) };
    Ok(IValue::Tensor(value))
}

/// What `forward` returned, as a list of values: a tensor or string list alone, or the
/// elements of a tuple or list.
pub fn flatten(result: IValue) -> Vec<IValue> {
    match result {
        IValue::Tuple(items) | IValue::GenericList(items) => items,
        IValue::TensorList(tensors) => tensors.into_iter().map(IValue::Tensor).collect(),
        other => vec![other],
    }
}

/// One output, checked against the config's datatype and dims (`dims` with the batch
/// dimension already in front for batching models; -1 matches any size).
pub fn from_ivalue(model: &str, name: &str, value: IValue, datatype: DataType, dims: &[i64]) -> Result<Tensor> {
    let mismatch = |what: String| Error::internal(format!("model '{model}': output '{name}' {what}"));
    // A List[str] inside a tuple comes back as a generic list of strings.
    let value = match value {
        IValue::GenericList(items) if items.iter().all(|i| matches!(i, IValue::String(_))) => IValue::StringList(
            items.into_iter().filter_map(|i| if let IValue::String(s) = i { Some(s) } else { None }).collect(),
        ),
        other => other,
    };
    let (shape, data) = match value {
        IValue::StringList(strings) if datatype == DataType::Bytes => {
            (vec![strings.len() as i64], serialize_bytes(strings.iter().map(String::as_bytes)))
        }
        IValue::Tensor(t) => {
            let actual = datatype_of(t.kind());
            if actual != Some(datatype) {
                let got = actual.map(|d| d.to_string()).unwrap_or_else(|| format!("{:?}", t.kind()));
                return Err(mismatch(format!("is {got}, the config says {datatype}")));
            }
            let t = t.to_device(Device::Cpu).contiguous();
            let numel = t.numel();
            let mut buffer = vec![0u8; numel * t.kind().elt_size_in_bytes()];
            t.f_copy_data_u8(&mut buffer, numel).map_err(|e| mismatch(format!("could not be read: {e}")))?;
            (t.size(), Bytes::from(buffer))
        }
        other => {
            let what = match other {
                IValue::StringList(_) => "a List[str]".to_string(),
                IValue::None => "None".to_string(),
                _ => "a value that is not a tensor".to_string(),
            };
            return Err(mismatch(format!("is {what}, the config says {datatype}")));
        }
    };
    let fits = shape.len() == dims.len() && dims.iter().zip(&shape).all(|(d, s)| *d < 0 || d == s);
    if !fits && datatype != DataType::Bytes {
        return Err(mismatch(format!("has shape {shape:?}, the config expects {dims:?}")));
    }
    let shape = if datatype == DataType::Bytes && dims.len() != 1 && fits_elements(&shape, dims) {
        // A List[str] is flat; give it the config's shape when the element count allows.
        resolve(dims, shape[0])
    } else {
        shape
    };
    Ok(Tensor::new(name, datatype, shape, data))
}

fn fits_elements(shape: &[i64], dims: &[i64]) -> bool {
    let fixed: i64 = dims.iter().filter(|d| **d >= 0).product();
    let free = dims.iter().filter(|d| **d < 0).count();
    let n = shape.iter().product::<i64>();
    match free {
        0 => fixed == n,
        1 => fixed > 0 && n % fixed == 0,
        _ => false,
    }
}

/// `dims` with its one free dimension set so that the element count is `n`.
fn resolve(dims: &[i64], n: i64) -> Vec<i64> {
    let fixed: i64 = dims.iter().filter(|d| **d >= 0).product();
    dims.iter().map(|d| if *d < 0 { n / fixed.max(1) } else { *d }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(values: &[i32]) -> Bytes {
        Bytes::from(values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())
    }

    #[test]
    fn every_libtorch_datatype_round_trips() {
        for datatype in DataType::ALL.into_iter().filter(|d| kind(*d).is_some()) {
            let size = datatype.element_size().unwrap();
            let data = Bytes::from(
                (0..6 * size)
                    .map(|i| if datatype == DataType::Bool { (i % 2) as u8 } else { i as u8 })
                    .collect::<Vec<_>>(),
            );
            let input = Tensor::new("x", datatype, vec![2, 3], data.clone());
            let IValue::Tensor(t) = to_ivalue("m", &input, Device::Cpu).unwrap() else { panic!("not a tensor") };
            let back = from_ivalue("m", "y", IValue::Tensor(t), datatype, &[-1, 3]).unwrap();
            assert_eq!((back.shape.clone(), back.data.clone()), (vec![2, 3], data), "{datatype}");
        }
    }

    #[test]
    fn bytes_travel_as_a_list_of_strings() {
        let input = Tensor::new("s", DataType::Bytes, vec![2], serialize_bytes([&b"hello"[..], "é".as_bytes()]));
        let value = to_ivalue("m", &input, Device::Cpu).unwrap();
        assert_eq!(value, IValue::StringList(vec!["hello".into(), "é".into()]));
        let back = from_ivalue("m", "o", value, DataType::Bytes, &[-1, 1]).unwrap();
        assert_eq!(back.shape, vec![2, 1]);
        assert_eq!(back.bytes_elements().unwrap(), vec![Bytes::from_static(b"hello"), Bytes::from("é")]);

        let nul = Tensor::new("s", DataType::Bytes, vec![1], serialize_bytes([&b"he\0llo"[..]]));
        assert!(to_ivalue("m", &nul, Device::Cpu).unwrap_err().to_string().contains("NUL"));
        let binary = Tensor::new("s", DataType::Bytes, vec![1], serialize_bytes([&b"\xff"[..]]));
        assert!(to_ivalue("m", &binary, Device::Cpu).unwrap_err().to_string().contains("not UTF-8"));
    }

    #[test]
    fn outputs_are_checked_against_the_config() {
        let t = tch::Tensor::f_from_data_size(&le(&[1, 2, 3, 4]), &[2, 2], Kind::Int).unwrap();
        let e = from_ivalue("m", "o", IValue::Tensor(t.shallow_clone()), DataType::F32, &[-1, 2]).unwrap_err();
        assert!(e.to_string().contains("is INT32, the config says FP32"), "{e}");
        let e = from_ivalue("m", "o", IValue::Tensor(t), DataType::I32, &[-1, 3]).unwrap_err();
        assert!(e.to_string().contains("has shape [2, 2], the config expects [-1, 3]"), "{e}");
        let e = from_ivalue("m", "o", IValue::None, DataType::I32, &[-1]).unwrap_err();
        assert!(e.to_string().contains("is None"), "{e}");
        let u16 = Tensor::new("x", DataType::U16, vec![1], Bytes::from_static(&[0, 0]));
        assert!(to_ivalue("m", &u16, Device::Cpu).is_err());
    }

    #[test]
    fn results_flatten_from_tuples_and_lists() {
        let t = || IValue::Tensor(tch::Tensor::from(1i64));
        assert_eq!(flatten(IValue::Tuple(vec![t(), IValue::StringList(vec![])])).len(), 2);
        assert_eq!(flatten(t()).len(), 1);
        assert_eq!(flatten(IValue::TensorList(vec![tch::Tensor::from(1i64), tch::Tensor::from(2i64)])).len(), 2);
    }
}
