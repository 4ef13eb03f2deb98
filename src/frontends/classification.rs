//! Triton's classification extension: an output requested with `classification: N` is replaced
//! by a BYTES tensor of its top-N classes, each `"value:index"` or `"value:index:label"`, in
//! descending value order, per batch entry when the model batches. Shared by every frontend.

use bytes::Bytes;
use tritium_actors::tensor::serialize_bytes;
use tritium_actors::{DataType, Error, Result, Tensor};

/// A class score as Triton prints it: integers in decimal, floats as C's `%f` (6 decimals).
trait Score: Copy + PartialOrd {
    const SIZE: usize;
    fn read(b: &[u8]) -> Self;
    fn render(self) -> String;
    fn is_nan(self) -> bool {
        false
    }
}

macro_rules! int_score {
    ($($t:ty),*) => {$(
        impl Score for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().expect("element slice has the element size"))
            }
            fn render(self) -> String {
                self.to_string()
            }
        }
    )*};
}
int_score!(u8, u16, u32, u64, i8, i16, i32, i64);

/// `%f` of a double, including glibc's spelling of the non-finite values.
fn printf_f(v: f64) -> String {
    if v.is_nan() {
        if v.is_sign_negative() {
            "-nan".into()
        } else {
            "nan".into()
        }
    } else if v.is_infinite() {
        if v < 0.0 {
            "-inf".into()
        } else {
            "inf".into()
        }
    } else {
        format!("{v:.6}")
    }
}

impl Score for f32 {
    const SIZE: usize = 4;
    fn read(b: &[u8]) -> Self {
        f32::from_le_bytes(b.try_into().expect("element slice has the element size"))
    }
    fn render(self) -> String {
        printf_f(self as f64)
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}

impl Score for f64 {
    const SIZE: usize = 8;
    fn read(b: &[u8]) -> Self {
        f64::from_le_bytes(b.try_into().expect("element slice has the element size"))
    }
    fn render(self) -> String {
        printf_f(self)
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}

/// The top `k` of one batch entry, highest first; equal scores keep index order, NaN sorts last.
fn top_k<T: Score>(data: &[u8], k: usize, labels: Option<&[String]>, out: &mut Vec<String>) {
    let scores: Vec<T> = data.chunks_exact(T::SIZE).map(T::read).collect();
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| {
        let (x, y) = (scores[a], scores[b]);
        match (x.is_nan(), y.is_nan()) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            _ => y.partial_cmp(&x).unwrap_or(std::cmp::Ordering::Equal),
        }
    });
    for &i in idx.iter().take(k) {
        let mut s = format!("{}:{i}", scores[i].render());
        if let Some(label) = labels.and_then(|l| l.get(i)).filter(|l| !l.is_empty()) {
            s.push(':');
            s.push_str(label);
        }
        out.push(s);
    }
}

/// Replaces `tensor` by its top-`class_count` classes. `batched` says the first dim is the
/// batch (the model's `max_batch_size > 0`); `labels` are the output's label file lines.
pub fn classify(tensor: &Tensor, class_count: u32, batched: bool, labels: Option<&[String]>) -> Result<Tensor> {
    let unsupported = || {
        Error::invalid(format!(
            "class result not available for output '{}' due to unsupported type '{}'",
            tensor.name, tensor.datatype
        ))
    };
    let esize = match tensor.datatype {
        DataType::Bool | DataType::F16 | DataType::BF16 | DataType::Bytes => return Err(unsupported()),
        d => d.element_size().ok_or_else(unsupported)?,
    };
    let (batch, per_entry_dims) = match tensor.shape.split_first() {
        Some((&b, rest)) if batched => (Some(b), rest),
        _ => (None, tensor.shape.as_slice()),
    };
    let batch_n = match batch {
        Some(b) => usize::try_from(b)
            .map_err(|_| Error::internal(format!("output '{}' has a negative batch size", tensor.name)))?,
        None => 1,
    };
    let entry_elems = tritium_actors::tensor::element_count(per_entry_dims)?;
    let entry_bytes = entry_elems
        .checked_mul(esize)
        .ok_or_else(|| Error::internal(format!("output '{}' is too large to classify", tensor.name)))?;
    let need = entry_bytes.checked_mul(batch_n);
    if need != Some(tensor.data.len()) {
        return Err(Error::internal(format!(
            "output tensor shape does not match size of output for '{}'",
            tensor.name
        )));
    }
    let k = (class_count as usize).min(entry_elems);
    let mut strings = Vec::with_capacity(k.saturating_mul(batch_n));
    for b in 0..batch_n {
        let entry = &tensor.data[b * entry_bytes..(b + 1) * entry_bytes];
        match tensor.datatype {
            DataType::U8 => top_k::<u8>(entry, k, labels, &mut strings),
            DataType::U16 => top_k::<u16>(entry, k, labels, &mut strings),
            DataType::U32 => top_k::<u32>(entry, k, labels, &mut strings),
            DataType::U64 => top_k::<u64>(entry, k, labels, &mut strings),
            DataType::I8 => top_k::<i8>(entry, k, labels, &mut strings),
            DataType::I16 => top_k::<i16>(entry, k, labels, &mut strings),
            DataType::I32 => top_k::<i32>(entry, k, labels, &mut strings),
            DataType::I64 => top_k::<i64>(entry, k, labels, &mut strings),
            DataType::F32 => top_k::<f32>(entry, k, labels, &mut strings),
            DataType::F64 => top_k::<f64>(entry, k, labels, &mut strings),
            _ => return Err(unsupported()),
        }
    }
    let shape = match batch {
        Some(b) => vec![b, k as i64],
        None => vec![k as i64],
    };
    let data: Bytes = serialize_bytes(&strings);
    Ok(Tensor::new(tensor.name.clone(), DataType::Bytes, shape, data))
}

/// A response's outputs as the client gets them: classification applied where a requested
/// output asked for `class_count`. `batched` = the model's `max_batch_size > 0`; `labels` maps
/// an output name to its label file lines.
/// Outputs that are not classified are borrowed from the response, not copied.
pub fn final_outputs<'a>(
    response: &'a tritium_actors::InferResponse,
    requested: &[tritium_actors::RequestedOutput],
    batched: bool,
    labels: &std::collections::HashMap<String, Vec<String>>,
) -> Result<Vec<std::borrow::Cow<'a, Tensor>>> {
    response.outputs.iter().map(|t| final_output(std::borrow::Cow::Borrowed(t), requested, batched, labels)).collect()
}

/// `final_outputs` for a response the caller owns: its outputs are moved, not copied.
pub fn final_outputs_owned(
    outputs: Vec<Tensor>,
    requested: &[tritium_actors::RequestedOutput],
    batched: bool,
    labels: &std::collections::HashMap<String, Vec<String>>,
) -> Result<Vec<Tensor>> {
    (outputs.into_iter())
        .map(|t| final_output(std::borrow::Cow::Owned(t), requested, batched, labels).map(std::borrow::Cow::into_owned))
        .collect()
}

fn final_output<'a>(
    t: std::borrow::Cow<'a, Tensor>,
    requested: &[tritium_actors::RequestedOutput],
    batched: bool,
    labels: &std::collections::HashMap<String, Vec<String>>,
) -> Result<std::borrow::Cow<'a, Tensor>> {
    match requested.iter().find(|r| r.name == t.name && r.class_count > 0) {
        Some(r) => {
            Ok(std::borrow::Cow::Owned(classify(&t, r.class_count, batched, labels.get(&t.name).map(Vec::as_slice))?))
        }
        None => Ok(t),
    }
}

/// The outputs a response's encoding must know of: those asked to be classified (the others
/// are encoded as they come), so a request without classification keeps no copy of its list.
pub fn classified(outputs: &[tritium_actors::RequestedOutput]) -> Vec<tritium_actors::RequestedOutput> {
    outputs.iter().filter(|o| o.class_count > 0).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_tensor(shape: Vec<i64>, v: &[f32]) -> Tensor {
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        Tensor::new("OUT", DataType::F32, shape, Bytes::from(data))
    }

    fn strings(t: &Tensor) -> Vec<String> {
        t.bytes_elements().unwrap().iter().map(|b| String::from_utf8(b.to_vec()).unwrap()).collect()
    }

    #[test]
    fn formats_top_classes_like_triton() {
        let t = f32_tensor(vec![4], &[0.1, 0.7, 0.05, 0.15]);
        let c = classify(&t, 2, false, None).unwrap();
        assert_eq!(c.datatype, DataType::Bytes);
        assert_eq!(c.shape, vec![2]);
        assert_eq!(strings(&c), vec!["0.700000:1", "0.150000:3"]);
    }

    #[test]
    fn appends_labels_when_known_and_non_empty() {
        let t = f32_tensor(vec![3], &[0.2, 0.5, 0.3]);
        let labels = vec!["cat".to_string(), String::new()];
        let c = classify(&t, 3, false, Some(&labels)).unwrap();
        assert_eq!(strings(&c), vec!["0.500000:1", "0.300000:2", "0.200000:0:cat"]);
    }

    #[test]
    fn classifies_each_batch_entry() {
        let t = f32_tensor(vec![2, 3], &[1.0, 3.0, 2.0, 9.0, 8.0, 7.0]);
        let c = classify(&t, 1, true, None).unwrap();
        assert_eq!(c.shape, vec![2, 1]);
        assert_eq!(strings(&c), vec!["3.000000:1", "9.000000:0"]);
    }

    #[test]
    fn caps_class_count_at_element_count() {
        let t = f32_tensor(vec![1, 2], &[1.0, 2.0]);
        let c = classify(&t, 10, true, None).unwrap();
        assert_eq!(c.shape, vec![1, 2]);
    }

    #[test]
    fn integer_scores_print_as_integers() {
        let data: Vec<u8> = [-3i32, 7, 2].iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = Tensor::new("OUT", DataType::I32, vec![3], Bytes::from(data));
        assert_eq!(strings(&classify(&t, 3, false, None).unwrap()), vec!["7:1", "2:2", "-3:0"]);
    }

    #[test]
    fn nan_sorts_last_and_prints_as_glibc() {
        let t = f32_tensor(vec![3], &[f32::NAN, 1.0, f32::NEG_INFINITY]);
        let c = classify(&t, 3, false, None).unwrap();
        assert_eq!(strings(&c), vec!["1.000000:1", "-inf:2", "nan:0"]);
    }

    #[test]
    fn refuses_unsupported_types_and_bad_sizes() {
        let t = Tensor::new("OUT", DataType::Bytes, vec![1], serialize_bytes(["a"]));
        let e = classify(&t, 1, false, None).unwrap_err();
        assert!(e.message.contains("unsupported type 'BYTES'"), "{e}");
        let t = Tensor::new("OUT", DataType::F16, vec![1], Bytes::from(vec![0u8; 2]));
        assert!(classify(&t, 1, false, None).is_err());
        let t = f32_tensor(vec![3], &[1.0, 2.0]);
        assert!(classify(&t, 1, false, None).is_err());
    }
}
