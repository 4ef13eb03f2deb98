//! Tensors as the engine sees them: a name, a Triton datatype, a shape and the raw bytes.
//!
//! Data is always `Bytes` in Triton's binary layout (little-endian elements; BYTES elements as a
//! 4-byte little-endian length followed by the bytes), so a tensor can borrow the request body,
//! a shared-memory region or a backend's output without copying.

use bytes::Bytes;

use crate::error::{Error, Result};

/// Triton's tensor datatypes, by their protocol names (`FP32`, `BYTES`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
    Bytes,
}

impl DataType {
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::U8,
        DataType::U16,
        DataType::U32,
        DataType::U64,
        DataType::I8,
        DataType::I16,
        DataType::I32,
        DataType::I64,
        DataType::F16,
        DataType::BF16,
        DataType::F32,
        DataType::F64,
        DataType::Bytes,
    ];

    /// The protocol name: `BOOL`, `UINT8`, …, `FP32`, `BF16`, `BYTES`.
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::U8 => "UINT8",
            DataType::U16 => "UINT16",
            DataType::U32 => "UINT32",
            DataType::U64 => "UINT64",
            DataType::I8 => "INT8",
            DataType::I16 => "INT16",
            DataType::I32 => "INT32",
            DataType::I64 => "INT64",
            DataType::F16 => "FP16",
            DataType::BF16 => "BF16",
            DataType::F32 => "FP32",
            DataType::F64 => "FP64",
            DataType::Bytes => "BYTES",
        }
    }

    /// Parses a protocol name (`FP32`) or a model-config name (`TYPE_FP32`, `TYPE_STRING`).
    pub fn parse(name: &str) -> Option<DataType> {
        let bare = name.strip_prefix("TYPE_").unwrap_or(name);
        if bare == "STRING" {
            return Some(DataType::Bytes);
        }
        DataType::ALL.into_iter().find(|d| d.as_str() == bare)
    }

    /// Bytes per element; `None` for BYTES, whose elements vary in length.
    pub fn element_size(self) -> Option<usize> {
        Some(match self {
            DataType::Bool | DataType::U8 | DataType::I8 => 1,
            DataType::U16 | DataType::I16 | DataType::F16 | DataType::BF16 => 2,
            DataType::U32 | DataType::I32 | DataType::F32 => 4,
            DataType::U64 | DataType::I64 | DataType::F64 => 8,
            DataType::Bytes => return None,
        })
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One named tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub data: Bytes,
}

/// The number of elements of a shape, refusing negative dims and overflow.
pub fn element_count(shape: &[i64]) -> Result<usize> {
    let mut n: usize = 1;
    for &d in shape {
        let d = usize::try_from(d).map_err(|_| Error::invalid(format!("shape {shape:?} has a negative dimension")))?;
        n = n.checked_mul(d).ok_or_else(|| Error::invalid(format!("shape {shape:?} has too many elements")))?;
    }
    Ok(n)
}

/// Walks Triton's serialized BYTES layout and returns each element's (start, end) byte range.
/// Fails when the buffer is truncated or has bytes left over. What is reserved up front is
/// bounded by the data (each element takes at least its 4-byte length), never by the count a
/// shape only claims.
pub fn bytes_element_ranges(data: &[u8], expected: usize) -> Result<Vec<(usize, usize)>> {
    let mut ranges = Vec::with_capacity(expected.min(data.len() / 4));
    let mut pos = 0usize;
    while pos < data.len() {
        if data.len() - pos < 4 {
            return Err(Error::invalid("BYTES tensor data is truncated inside a length prefix"));
        }
        let len = u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
        pos += 4;
        if data.len() - pos < len {
            return Err(Error::invalid(format!(
                "BYTES tensor element {} claims {len} bytes but only {} remain",
                ranges.len(),
                data.len() - pos
            )));
        }
        ranges.push((pos, pos + len));
        pos += len;
    }
    if ranges.len() != expected {
        return Err(Error::invalid(format!("BYTES tensor holds {} elements, expected {expected}", ranges.len())));
    }
    Ok(ranges)
}

/// Serializes strings into Triton's BYTES layout.
pub fn serialize_bytes<I, B>(items: I) -> Bytes
where
    I: IntoIterator<Item = B>,
    B: AsRef<[u8]>,
{
    let mut out = Vec::new();
    for item in items {
        let item = item.as_ref();
        out.extend_from_slice(&(item.len() as u32).to_le_bytes());
        out.extend_from_slice(item);
    }
    Bytes::from(out)
}

impl Tensor {
    pub fn new(name: impl Into<String>, datatype: DataType, shape: Vec<i64>, data: Bytes) -> Self {
        Tensor { name: name.into(), datatype, shape, data }
    }

    pub fn element_count(&self) -> Result<usize> {
        element_count(&self.shape)
    }

    /// Checks that the data holds exactly the elements the shape says.
    pub fn check_size(&self) -> Result<()> {
        let n = self.element_count()?;
        match self.datatype.element_size() {
            Some(size) => {
                let want = n
                    .checked_mul(size)
                    .ok_or_else(|| Error::invalid(format!("tensor '{}' has too many elements", self.name)))?;
                if self.data.len() != want {
                    return Err(Error::invalid(format!(
                        "unexpected total byte size {} for input '{}', expecting {want}",
                        self.data.len(),
                        self.name
                    )));
                }
            }
            None => {
                bytes_element_ranges(&self.data, n)
                    .map_err(|e| Error::invalid(format!("input '{}': {}", self.name, e.message)))?;
            }
        }
        Ok(())
    }

    /// The elements of a BYTES tensor, as slices of its data.
    pub fn bytes_elements(&self) -> Result<Vec<Bytes>> {
        let n = self.element_count()?;
        Ok(bytes_element_ranges(&self.data, n)?.into_iter().map(|(s, e)| self.data.slice(s..e)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_protocol_and_config_names() {
        assert_eq!(DataType::parse("FP32"), Some(DataType::F32));
        assert_eq!(DataType::parse("TYPE_FP16"), Some(DataType::F16));
        assert_eq!(DataType::parse("TYPE_STRING"), Some(DataType::Bytes));
        assert_eq!(DataType::parse("BYTES"), Some(DataType::Bytes));
        assert_eq!(DataType::parse("FLOAT"), None);
    }

    #[test]
    fn element_count_refuses_overflow_and_negatives() {
        assert_eq!(element_count(&[2, 3]).unwrap(), 6);
        assert_eq!(element_count(&[]).unwrap(), 1);
        assert!(element_count(&[-1, 3]).is_err());
        assert!(element_count(&[i64::MAX, i64::MAX]).is_err());
    }

    #[test]
    fn bytes_round_trip_and_truncation() {
        let data = serialize_bytes(["ab", "", "xyz"]);
        let t = Tensor::new("s", DataType::Bytes, vec![3], data.clone());
        let items = t.bytes_elements().unwrap();
        assert_eq!(items, vec![Bytes::from("ab"), Bytes::new(), Bytes::from("xyz")]);
        assert!(bytes_element_ranges(&data[..data.len() - 1], 3).is_err());
        assert!(bytes_element_ranges(&data, 2).is_err());
    }

    #[test]
    fn check_size_names_the_tensor() {
        let t = Tensor::new("IN", DataType::F32, vec![2], Bytes::from(vec![0u8; 4]));
        let e = t.check_size().unwrap_err();
        assert!(e.message.contains("'IN'") && e.message.contains("expecting 8"), "{e}");
    }
}
