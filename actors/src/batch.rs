//! Merging requests into one batch and splitting a batch's outputs back per request.
//! The merge is the one copy on the hot path; the split only slices.

use bytes::{Bytes, BytesMut};

use crate::error::{Error, Result};
use crate::tensor::{bytes_element_ranges, element_count, DataType, Tensor};

/// Concatenates each input of `requests` along the first dimension. All requests must carry
/// the same input names with equal non-batch dims (the batcher groups them so). A single
/// request's inputs are returned as they are, without copying.
pub fn merge_inputs(requests: &[&[Tensor]]) -> Result<Vec<Tensor>> {
    let first = requests.first().ok_or_else(|| Error::internal("empty batch"))?;
    if requests.len() == 1 {
        return Ok(first.to_vec());
    }
    let mut merged = Vec::with_capacity(first.len());
    for proto in first.iter() {
        let parts: Vec<&Tensor> = requests
            .iter()
            .map(|inputs| {
                inputs
                    .iter()
                    .find(|t| t.name == proto.name)
                    .ok_or_else(|| Error::internal(format!("input '{}' missing from a batched request", proto.name)))
            })
            .collect::<Result<_>>()?;
        let total_len: usize = parts.iter().map(|t| t.data.len()).sum();
        let mut data = BytesMut::with_capacity(total_len);
        let mut batch = 0i64;
        for t in &parts {
            if t.shape.get(1..) != proto.shape.get(1..) {
                return Err(Error::internal(format!("input '{}' has differing shapes inside one batch", proto.name)));
            }
            batch += t.shape.first().copied().unwrap_or(1);
            data.extend_from_slice(&t.data);
        }
        let mut shape = proto.shape.clone();
        if let Some(b) = shape.first_mut() {
            *b = batch;
        }
        merged.push(Tensor::new(proto.name.clone(), proto.datatype, shape, data.freeze()));
    }
    Ok(merged)
}

/// Splits each output along its first dimension into pieces of `sizes` items, slicing the
/// output's bytes without copying. One size returns the outputs as they are.
pub fn split_outputs(outputs: Vec<Tensor>, sizes: &[usize]) -> Result<Vec<Vec<Tensor>>> {
    if sizes.len() == 1 {
        return Ok(vec![outputs]);
    }
    let total: usize = sizes.iter().sum();
    let mut per_request: Vec<Vec<Tensor>> = sizes.iter().map(|_| Vec::with_capacity(outputs.len())).collect();
    for out in outputs {
        let first = out.shape.first().copied().unwrap_or(-1);
        if first != total as i64 {
            return Err(Error::internal(format!(
                "output '{}' has batch dimension {first}, but the batch holds {total} items",
                out.name
            )));
        }
        let item_elems = element_count(&out.shape[1..])?;
        let mut ranges_bytes: Option<Vec<(usize, usize)>> = None;
        if out.datatype == DataType::Bytes {
            ranges_bytes = Some(bytes_element_ranges(&out.data, item_elems * total)?);
        }
        let item_size = out.datatype.element_size().map(|s| s * item_elems);
        let mut item = 0usize;
        for (i, &n) in sizes.iter().enumerate() {
            let (start, end) = match (&ranges_bytes, item_size) {
                (None, Some(sz)) => (item * sz, (item + n) * sz),
                (Some(r), _) => {
                    let lo = item * item_elems;
                    let hi = (item + n) * item_elems;
                    // Each element's range excludes its 4-byte length prefix.
                    let s = if lo < r.len() { r[lo].0 - 4 } else { out.data.len() };
                    let e = if hi == 0 {
                        0
                    } else if hi <= r.len() {
                        r[hi - 1].1
                    } else {
                        out.data.len()
                    };
                    (s, e.max(s))
                }
                _ => unreachable!(),
            };
            let mut shape = out.shape.clone();
            shape[0] = n as i64;
            let data: Bytes = out.data.slice(start..end);
            per_request[i].push(Tensor::new(out.name.clone(), out.datatype, shape, data));
            item += n;
        }
    }
    Ok(per_request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::serialize_bytes;

    fn f32t(name: &str, shape: Vec<i64>, vals: &[f32]) -> Tensor {
        let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor::new(name, DataType::F32, shape, Bytes::from(data))
    }

    #[test]
    fn merges_and_splits_fixed_size() {
        let a = vec![f32t("x", vec![1, 2], &[1.0, 2.0])];
        let b = vec![f32t("x", vec![2, 2], &[3.0, 4.0, 5.0, 6.0])];
        let merged = merge_inputs(&[&a, &b]).unwrap();
        assert_eq!(merged[0].shape, vec![3, 2]);
        assert_eq!(merged[0].data.len(), 24);
        let split = split_outputs(merged, &[1, 2]).unwrap();
        assert_eq!(split[0][0], a[0]);
        assert_eq!(split[1][0], b[0]);
    }

    #[test]
    fn splits_bytes_tensors_on_element_boundaries() {
        let out = Tensor::new("s", DataType::Bytes, vec![3, 1], serialize_bytes(["a", "bb", "ccc"]));
        let split = split_outputs(vec![out], &[2, 1]).unwrap();
        assert_eq!(split[0][0].bytes_elements().unwrap(), vec![Bytes::from("a"), Bytes::from("bb")]);
        assert_eq!(split[1][0].bytes_elements().unwrap(), vec![Bytes::from("ccc")]);
    }

    #[test]
    fn refuses_output_with_wrong_batch_dimension() {
        let out = f32t("y", vec![2], &[1.0, 2.0]);
        assert!(split_outputs(vec![out], &[1, 2]).is_err());
    }
}
