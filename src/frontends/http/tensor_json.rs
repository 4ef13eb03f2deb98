//! Tensor data in JSON, both ways: a `data` field (nested or flat lists) into Triton's binary
//! layout, and a tensor's bytes into a JSON list that serializes straight from the buffer.
//! Every datatype round-trips exactly: FP16/BF16 through the `half` crate, FP32 widened to a
//! double as Triton writes it, BYTES as UTF-8 strings.

use bytes::{BufMut, Bytes};
use half::{bf16, f16};
use serde::ser::{Serialize, SerializeSeq, Serializer};
use serde_json::Value;
use tritium_actors::tensor::bytes_element_ranges;
use tritium_actors::{DataType, Error, Result, Tensor};

/// The number of leaves of a nested list (a non-list counts as one).
pub fn count_leaves(v: &Value) -> usize {
    match v {
        Value::Array(items) => items.iter().map(count_leaves).sum(),
        _ => 1,
    }
}

fn for_each_leaf(v: &Value, f: &mut impl FnMut(&Value) -> Result<()>) -> Result<()> {
    match v {
        Value::Array(items) => items.iter().try_for_each(|i| for_each_leaf(i, f)),
        leaf => f(leaf),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a floating-point number",
        Value::Number(n) if n.is_i64() && n.as_i64().unwrap_or(0) < 0 => "a negative integer",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Converts the `data` of input `name` into Triton's binary layout. `elements` is the count the
/// shape gives; the data must hold exactly that many leaves, checked before anything is
/// allocated so an absurd shape costs nothing.
pub fn data_from_json(name: &str, datatype: DataType, elements: usize, data: &Value) -> Result<Bytes> {
    let found = count_leaves(data);
    if found != elements {
        return Err(Error::invalid(format!(
            "Unable to parse 'data': Shape does not match true shape of 'data' field: input '{name}' \
             has {elements} elements by its shape but 'data' holds {found}"
        )));
    }
    let bad = |v: &Value, want: &str| {
        Error::invalid(format!(
            "Unable to parse 'data': input '{name}' of type {datatype} expects {want}, got {}",
            kind_of(v)
        ))
    };
    let capacity = match datatype.element_size() {
        Some(size) => {
            elements.checked_mul(size).ok_or_else(|| Error::invalid(format!("input '{name}' has too many elements")))?
        }
        None => 0,
    };
    let mut out: Vec<u8> = Vec::with_capacity(capacity);
    macro_rules! ints {
        ($t:ty, $get:ident, $want:expr) => {
            for_each_leaf(data, &mut |v| {
                let x = v.$get().and_then(|x| <$t>::try_from(x).ok()).ok_or_else(|| bad(v, $want))?;
                out.extend_from_slice(&x.to_le_bytes());
                Ok(())
            })?
        };
    }
    macro_rules! floats {
        ($conv:expr) => {
            for_each_leaf(data, &mut |v| {
                let x = v.as_f64().ok_or_else(|| bad(v, "numbers"))?;
                out.extend_from_slice(&$conv(x).to_le_bytes());
                Ok(())
            })?
        };
    }
    match datatype {
        DataType::Bool => for_each_leaf(data, &mut |v| {
            out.push(v.as_bool().ok_or_else(|| bad(v, "true/false"))? as u8);
            Ok(())
        })?,
        DataType::U8 => ints!(u8, as_u64, "integers in [0, 255]"),
        DataType::U16 => ints!(u16, as_u64, "integers in [0, 65535]"),
        DataType::U32 => ints!(u32, as_u64, "integers in [0, 4294967295]"),
        DataType::U64 => ints!(u64, as_u64, "non-negative integers"),
        DataType::I8 => ints!(i8, as_i64, "integers in [-128, 127]"),
        DataType::I16 => ints!(i16, as_i64, "integers in [-32768, 32767]"),
        DataType::I32 => ints!(i32, as_i64, "32-bit integers"),
        DataType::I64 => ints!(i64, as_i64, "64-bit integers"),
        DataType::F16 => floats!(f16::from_f64),
        DataType::BF16 => floats!(bf16::from_f64),
        DataType::F32 => floats!(|x: f64| x as f32),
        DataType::F64 => floats!(|x: f64| x),
        DataType::Bytes => for_each_leaf(data, &mut |v| {
            let s = v.as_str().ok_or_else(|| bad(v, "strings"))?;
            let len = u32::try_from(s.len()).map_err(|_| bad(v, "strings under 4 GiB"))?;
            out.put_u32_le(len);
            out.extend_from_slice(s.as_bytes());
            Ok(())
        })?,
    }
    Ok(Bytes::from(out))
}

/// A tensor's data as a flat JSON list, checked and ready to serialize without copying.
pub struct DataJson<'a> {
    tensor: &'a Tensor,
    elements: usize,
    /// For BYTES: each element's byte range, already checked to be UTF-8.
    ranges: Vec<(usize, usize)>,
}

impl<'a> DataJson<'a> {
    /// Checks that `tensor`'s data fits its shape and, for BYTES, that every element is UTF-8
    /// (JSON strings cannot carry other bytes: such outputs must be requested as binary).
    pub fn new(tensor: &'a Tensor, model: &str) -> Result<Self> {
        let mismatch =
            || Error::internal(format!("output tensor shape does not match size of output for '{}'", tensor.name));
        let elements = tensor.element_count().map_err(|_| mismatch())?;
        let ranges = match tensor.datatype.element_size() {
            Some(size) => {
                if elements.checked_mul(size) != Some(tensor.data.len()) {
                    return Err(mismatch());
                }
                Vec::new()
            }
            None => {
                let ranges = bytes_element_ranges(&tensor.data, elements).map_err(|_| mismatch())?;
                for (i, &(s, e)) in ranges.iter().enumerate() {
                    if std::str::from_utf8(&tensor.data[s..e]).is_err() {
                        return Err(Error::invalid(format!(
                            "element {i} of BYTES output '{}' of model '{model}' is not valid UTF-8 \
                             and cannot be sent as JSON; request the output with \"binary_data\": true",
                            tensor.name
                        )));
                    }
                }
                ranges
            }
        };
        Ok(DataJson { tensor, elements, ranges })
    }
}

macro_rules! le {
    ($t:ty, $chunk:expr) => {
        <$t>::from_le_bytes($chunk.try_into().expect("chunk has the element size"))
    };
}

impl Serialize for DataJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let data = &self.tensor.data[..];
        let mut seq = s.serialize_seq(Some(self.elements))?;
        macro_rules! each {
            ($size:expr, |$c:ident| $value:expr) => {
                for $c in data.chunks_exact($size) {
                    seq.serialize_element(&$value)?;
                }
            };
        }
        match self.tensor.datatype {
            DataType::Bool => each!(1, |c| c[0] != 0),
            DataType::U8 => each!(1, |c| c[0]),
            DataType::U16 => each!(2, |c| le!(u16, c)),
            DataType::U32 => each!(4, |c| le!(u32, c)),
            DataType::U64 => each!(8, |c| le!(u64, c)),
            DataType::I8 => each!(1, |c| c[0] as i8),
            DataType::I16 => each!(2, |c| le!(i16, c)),
            DataType::I32 => each!(4, |c| le!(i32, c)),
            DataType::I64 => each!(8, |c| le!(i64, c)),
            DataType::F16 => each!(2, |c| f16::from_bits(le!(u16, c)).to_f64()),
            DataType::BF16 => each!(2, |c| bf16::from_bits(le!(u16, c)).to_f64()),
            DataType::F32 => each!(4, |c| le!(f32, c) as f64),
            DataType::F64 => each!(8, |c| le!(f64, c)),
            DataType::Bytes => {
                for &(start, end) in &self.ranges {
                    let text = std::str::from_utf8(&data[start..end]).expect("checked in DataJson::new");
                    seq.serialize_element(text)?;
                }
            }
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tritium_actors::tensor::serialize_bytes;

    use super::*;

    fn round_trip(dt: DataType, shape: Vec<i64>, data: Value) -> Value {
        let n = tritium_actors::tensor::element_count(&shape).unwrap();
        let bytes = data_from_json("IN", dt, n, &data).unwrap();
        let t = Tensor::new("IN", dt, shape, bytes);
        t.check_size().unwrap();
        serde_json::to_value(DataJson::new(&t, "m").unwrap()).unwrap()
    }

    #[test]
    fn every_numeric_datatype_round_trips_nested_and_flat() {
        let cases = [
            (DataType::U8, json!([[0, 255], [7, 8]])),
            (DataType::U16, json!([[0, 65535], [1, 2]])),
            (DataType::U32, json!([[0, 4294967295u64], [1, 2]])),
            (DataType::U64, json!([[0, u64::MAX], [1, 2]])),
            (DataType::I8, json!([[-128, 127], [0, 1]])),
            (DataType::I16, json!([[-32768, 32767], [0, 1]])),
            (DataType::I32, json!([[i32::MIN, i32::MAX], [0, 1]])),
            (DataType::I64, json!([[i64::MIN, i64::MAX], [0, 1]])),
            (DataType::F16, json!([[0.5, -2.0], [65504.0, 0.0009765625]])),
            (DataType::BF16, json!([[0.5, -2.0], [256.0, 3.3895313892515355e38]])),
            (DataType::F32, json!([[0.5, -2.0], [1048576.0, 3.4028234663852886e38]])),
            (DataType::F64, json!([[0.1, -2.0], [1.0e300, 5e-324]])),
        ];
        for (dt, nested) in cases {
            let flat: Vec<Value> =
                nested.as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap().clone()).collect();
            assert_eq!(round_trip(dt, vec![2, 2], nested.clone()), Value::Array(flat.clone()), "{dt}");
            assert_eq!(round_trip(dt, vec![2, 2], Value::Array(flat.clone())), Value::Array(flat), "{dt} flat");
        }
    }

    #[test]
    fn fp32_is_written_as_the_exact_double() {
        let out = round_trip(DataType::F32, vec![1], json!([0.1]));
        assert_eq!(out, json!([0.1f32 as f64]));
        assert_eq!(out.to_string(), "[0.10000000149011612]");
    }

    #[test]
    fn half_precision_converts_by_rounding() {
        let out = round_trip(DataType::F16, vec![1], json!([0.1]));
        assert_eq!(out, json!([f16::from_f64(0.1).to_f64()]));
    }

    #[test]
    fn bool_and_bytes_round_trip() {
        assert_eq!(round_trip(DataType::Bool, vec![3], json!([true, false, true])), json!([true, false, true]));
        let out = round_trip(DataType::Bytes, vec![1, 3], json!([["ab", "", "héllo"]]));
        assert_eq!(out, json!(["ab", "", "héllo"]));
    }

    #[test]
    fn bytes_data_uses_tritons_length_prefixes() {
        let bytes = data_from_json("IN", DataType::Bytes, 2, &json!(["ab", "c"])).unwrap();
        assert_eq!(bytes, serialize_bytes(["ab", "c"]));
    }

    #[test]
    fn refuses_element_count_that_disagrees_with_shape() {
        let e = data_from_json("IN", DataType::F32, 3, &json!([[1.0, 2.0]])).unwrap_err();
        assert!(e.message.contains("Shape does not match") && e.message.contains("'IN'"), "{e}");
        let e = data_from_json("IN", DataType::Bytes, 1, &json!(["a", "b"])).unwrap_err();
        assert!(e.message.contains("holds 2"), "{e}");
    }

    #[test]
    fn refuses_absurd_counts_before_allocating() {
        let e = data_from_json("IN", DataType::F64, usize::MAX, &json!([1.0])).unwrap_err();
        assert!(e.message.contains("Shape does not match"), "{e}");
    }

    #[test]
    fn refuses_wrong_kinds_of_values() {
        let cases = [
            (DataType::F32, json!(["1.0"])),
            (DataType::I32, json!([1.5])),
            (DataType::U8, json!([-1])),
            (DataType::U8, json!([256])),
            (DataType::I8, json!([128])),
            (DataType::Bool, json!([1])),
            (DataType::Bytes, json!([1])),
            (DataType::I64, json!([null])),
            (DataType::F64, json!([{"a": 1}])),
        ];
        for (dt, data) in cases {
            let e = data_from_json("IN", dt, 1, &data).unwrap_err();
            assert!(e.message.contains("Unable to parse 'data'") && e.message.contains(dt.as_str()), "{dt}: {e}");
            assert_eq!(e.kind, tritium_actors::ErrorKind::InvalidArgument);
        }
    }

    #[test]
    fn json_output_refuses_non_utf8_bytes_and_bad_sizes() {
        let t = Tensor::new("OUT", DataType::Bytes, vec![1], serialize_bytes([[0xffu8, 0xfe]]));
        let e = DataJson::new(&t, "m").err().unwrap();
        assert!(e.message.contains("not valid UTF-8") && e.message.contains("binary_data"), "{e}");
        let t = Tensor::new("OUT", DataType::F32, vec![2], Bytes::from(vec![0u8; 4]));
        assert_eq!(DataJson::new(&t, "m").err().unwrap().kind, tritium_actors::ErrorKind::Internal);
    }
}
