//! The memory a backend says a model and its instances use (`TRITONBACKEND_ModelReportMemoryUsage`,
//! `TRITONBACKEND_ModelInstanceReportMemoryUsage`), for the statistics extension's
//! `memory_usage`, as Triton keeps it: each report replaces what that model or instance
//! reported before (one figure per memory type and id, the last of a repeated one winning), and
//! the model's figure is its own plus its live instances', summed by memory type and id.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::abi::*;
use super::boundary::{borrow, export};
use super::buffer::BufferAttributes;
use super::error::Error;
use super::model::{Instance, Model};

/// Bytes by (memory type, memory type id).
pub(crate) type Usage = BTreeMap<(MemoryType, i64), u64>;

/// One line of a model's memory usage: Triton's memory type name, the id and the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryUsage {
    pub kind: &'static str,
    pub id: i64,
    pub byte_size: u64,
}

/// Triton's name of a memory type (`TRITONSERVER_MemoryTypeString`).
fn kind_name(kind: MemoryType) -> &'static str {
    match kind {
        MEMORY_CPU => "CPU",
        MEMORY_CPU_PINNED => "CPU_PINNED",
        MEMORY_GPU => "GPU",
        _ => "<invalid>",
    }
}

/// Reads a report: `usage_size` attributes, none of them null.
///
/// # Safety
/// `usage` must be null with `usage_size` 0, or point to `usage_size` pointers, each null or
/// live attributes.
unsafe fn read(usage: *mut *mut BufferAttributes, usage_size: u32) -> Result<Usage, Error> {
    let mut out = Usage::new();
    if usage_size == 0 {
        return Ok(out);
    }
    if usage.is_null() {
        return Err(Error::new(ERROR_INVALID_ARG, "usage is null"));
    }
    // SAFETY: the caller promises `usage_size` pointers at `usage`.
    let all = unsafe { std::slice::from_raw_parts(usage, usage_size as usize) };
    for &a in all {
        // SAFETY: each is null (refused) or live attributes.
        let a = unsafe { borrow(a, "an element of usage") }?;
        out.insert((a.memory_type(), a.memory_type_id()), a.byte_size() as u64);
    }
    Ok(out)
}

/// Replaces a model's or an instance's report.
fn store(slot: &Mutex<Usage>, usage: Usage) {
    *slot.lock().unwrap_or_else(|e| e.into_inner()) = usage;
}

/// A model's memory usage: its own report plus its live instances', by memory type and id.
pub(crate) fn of_model(model: &Model) -> Vec<MemoryUsage> {
    let mut sum = model.memory_usage.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let instances = model.instances.lock().unwrap_or_else(|e| e.into_inner());
    for instance in instances.iter().filter_map(std::sync::Weak::upgrade) {
        for (key, bytes) in instance.memory_usage.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            *sum.entry(*key).or_insert(0) += bytes;
        }
    }
    sum.into_iter().map(|((kind, id), byte_size)| MemoryUsage { kind: kind_name(kind), id, byte_size }).collect()
}

export! {
    fn TRITONBACKEND_ModelReportMemoryUsage(m: *mut Model, usage: *mut *mut BufferAttributes, usage_size: u32) {
        // SAFETY: a live model, and the report as the header describes it.
        let (model, usage) = unsafe { (borrow(m, "model")?, read(usage, usage_size)?) };
        store(&model.memory_usage, usage);
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceReportMemoryUsage(i: *mut Instance, usage: *mut *mut BufferAttributes, usage_size: u32) {
        // SAFETY: a live instance, and the report as the header describes it.
        let (instance, usage) = unsafe { (borrow(i, "instance")?, read(usage, usage_size)?) };
        store(&instance.memory_usage, usage);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_read_by_type_and_id_the_last_of_a_repeat_winning() {
        let mut a = BufferAttributes::cpu(100);
        let mut b = BufferAttributes::cpu(40);
        let mut list: Vec<*mut BufferAttributes> = vec![&mut a, &mut b];
        // SAFETY: pointers to live attributes the test owns.
        let usage = unsafe { read(list.as_mut_ptr(), 2) }.unwrap();
        assert_eq!(usage, Usage::from([((MEMORY_CPU, 0), 40)]));
        // SAFETY: an empty report, and one with a null element (refused).
        unsafe {
            assert!(read(std::ptr::null_mut(), 0).unwrap().is_empty());
            assert!(read(std::ptr::null_mut(), 1).is_err());
            let mut holes: Vec<*mut BufferAttributes> = vec![std::ptr::null_mut()];
            assert!(read(holes.as_mut_ptr(), 1).is_err());
        }
        assert_eq!(kind_name(MEMORY_GPU), "GPU");
    }
}
