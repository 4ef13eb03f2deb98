//! `TRITONSERVER_BufferAttributes`: where a buffer lives (memory type and id), its size, and
//! its CUDA IPC handle. Tritium hands backends CPU buffers only, so the attributes it gives for
//! an input, an output or a state say CPU memory, id 0 and the buffer's size. A backend may
//! also make its own (`BufferAttributesNew`: the `triton-backend` utilities' input collector
//! does, and `ModelReportMemoryUsage` takes them), set and read them, and delete them; the
//! attributes Tritium gives belong to their input, output or state, and a backend may only
//! read those.

use std::ffi::c_void;

use super::abi::*;
use super::boundary::{borrow, borrow_mut, export, write};
use super::error::Error;

/// One buffer's attributes.
#[derive(Debug, Clone)]
pub struct BufferAttributes {
    memory_type: MemoryType,
    memory_type_id: i64,
    byte_size: usize,
    /// The CUDA IPC handle's address (0 for none): kept as a number, never dereferenced.
    cuda_ipc_handle: usize,
    /// Made by the backend (`BufferAttributesNew`), which may change and delete it; false for
    /// the attributes of Tritium's own buffers.
    owned: bool,
}

impl BufferAttributes {
    /// The attributes of a CPU buffer of `byte_size` bytes that Tritium owns.
    pub(crate) fn cpu(byte_size: usize) -> BufferAttributes {
        BufferAttributes { memory_type: MEMORY_CPU, memory_type_id: 0, byte_size, cuda_ipc_handle: 0, owned: false }
    }

    /// The size Tritium's buffer now has (an output's once allocated).
    pub(crate) fn set_size(&mut self, byte_size: usize) {
        self.byte_size = byte_size;
    }

    pub(crate) fn memory_type(&self) -> MemoryType {
        self.memory_type
    }

    pub(crate) fn memory_type_id(&self) -> i64 {
        self.memory_type_id
    }

    pub(crate) fn byte_size(&self) -> usize {
        self.byte_size
    }
}

impl Default for BufferAttributes {
    fn default() -> Self {
        BufferAttributes::cpu(0)
    }
}

/// The backend's own attributes, to change.
///
/// # Safety
/// A non-null `attributes` must be live attributes no one else borrows meanwhile.
unsafe fn own<'a>(attributes: *mut BufferAttributes) -> Result<&'a mut BufferAttributes, Error> {
    // SAFETY: forwarded from the caller; shared first, to check whose they are before any
    // mutable borrow (Tritium's own attributes may be borrowed elsewhere).
    if !unsafe { borrow(attributes, "buffer_attributes") }?.owned {
        return Err(Error::new(
            ERROR_INVALID_ARG,
            "these buffer attributes belong to Tritium's buffer: only attributes made by TRITONSERVER_BufferAttributesNew can be changed or deleted",
        ));
    }
    // SAFETY: forwarded from the caller: the backend's own attributes, borrowed by no one else.
    unsafe { borrow_mut(attributes, "buffer_attributes") }
}

export! {
    /// New attributes, owned by the caller until `BufferAttributesDelete`: CPU memory, id 0,
    /// size 0, no CUDA IPC handle (as Triton's defaults).
    fn TRITONSERVER_BufferAttributesNew(buffer_attributes: *mut *mut BufferAttributes) {
        let new = Box::into_raw(Box::new(BufferAttributes { owned: true, ..BufferAttributes::cpu(0) }));
        // SAFETY: the caller's out-parameter; on a null one the new object is freed again.
        if let Err(e) = unsafe { write(buffer_attributes, new, "buffer_attributes") } {
            // SAFETY: `new` was just made by `Box::into_raw` and handed to no one.
            drop(unsafe { Box::from_raw(new) });
            return Err(e);
        }
        Ok(())
    }
}

export! {
    fn TRITONSERVER_BufferAttributesDelete(buffer_attributes: *mut BufferAttributes) {
        // SAFETY: live attributes (the header's contract), checked to be the backend's own.
        unsafe { own(buffer_attributes) }?;
        // SAFETY: the backend's own attributes were made by `Box::into_raw` in
        // `BufferAttributesNew`, and it gives them up here, once.
        drop(unsafe { Box::from_raw(buffer_attributes) });
        Ok(())
    }
}

export! {
    fn TRITONSERVER_BufferAttributesSetMemoryTypeId(buffer_attributes: *mut BufferAttributes, memory_type_id: i64) {
        // SAFETY: live attributes of the backend's own.
        unsafe { own(buffer_attributes) }?.memory_type_id = memory_type_id;
        Ok(())
    }
}

export! {
    fn TRITONSERVER_BufferAttributesSetMemoryType(buffer_attributes: *mut BufferAttributes, memory_type: MemoryType) {
        if memory_type > MEMORY_GPU {
            return Err(Error::new(ERROR_INVALID_ARG, format!("unknown memory type {memory_type}")));
        }
        // SAFETY: live attributes of the backend's own.
        unsafe { own(buffer_attributes) }?.memory_type = memory_type;
        Ok(())
    }
}

export! {
    fn TRITONSERVER_BufferAttributesSetCudaIpcHandle(buffer_attributes: *mut BufferAttributes, cuda_ipc_handle: *mut c_void) {
        // SAFETY: live attributes of the backend's own.
        unsafe { own(buffer_attributes) }?.cuda_ipc_handle = cuda_ipc_handle as usize;
        Ok(())
    }
}

export! {
    fn TRITONSERVER_BufferAttributesSetByteSize(buffer_attributes: *mut BufferAttributes, byte_size: usize) {
        // SAFETY: live attributes of the backend's own.
        unsafe { own(buffer_attributes) }?.byte_size = byte_size;
        Ok(())
    }
}

export! {
    fn TRITONSERVER_BufferAttributesMemoryTypeId(buffer_attributes: *mut BufferAttributes, memory_type_id: *mut i64) {
        // SAFETY: live attributes and the caller's out-parameter.
        unsafe { write(memory_type_id, borrow(buffer_attributes, "buffer_attributes")?.memory_type_id, "memory_type_id") }
    }
}

export! {
    fn TRITONSERVER_BufferAttributesMemoryType(buffer_attributes: *mut BufferAttributes, memory_type: *mut MemoryType) {
        // SAFETY: live attributes and the caller's out-parameter.
        unsafe { write(memory_type, borrow(buffer_attributes, "buffer_attributes")?.memory_type, "memory_type") }
    }
}

export! {
    /// The CUDA IPC handle set on the attributes; null for Tritium's own (CPU) buffers.
    fn TRITONSERVER_BufferAttributesCudaIpcHandle(buffer_attributes: *mut BufferAttributes, cuda_ipc_handle: *mut *mut c_void) {
        // SAFETY: live attributes and the caller's out-parameter.
        unsafe {
            let handle = borrow(buffer_attributes, "buffer_attributes")?.cuda_ipc_handle;
            write(cuda_ipc_handle, handle as *mut c_void, "cuda_ipc_handle")
        }
    }
}

export! {
    fn TRITONSERVER_BufferAttributesByteSize(buffer_attributes: *mut BufferAttributes, byte_size: *mut usize) {
        // SAFETY: live attributes and the caller's out-parameter.
        unsafe { write(byte_size, borrow(buffer_attributes, "buffer_attributes")?.byte_size, "byte_size") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(e: *mut Error) {
        assert!(e.is_null(), "an error where none was expected");
    }

    /// Frees an error object and gives its code.
    fn code(e: *mut Error) -> ErrorCode {
        assert!(!e.is_null(), "no error where one was expected");
        // SAFETY: a live error object from an exported function, given up here.
        unsafe { Error::from_raw(e) }.expect("not null").code
    }

    #[test]
    fn a_backends_own_attributes_are_set_read_and_deleted() {
        let mut a: *mut BufferAttributes = std::ptr::null_mut();
        // SAFETY: each call gets live pointers the test owns, as a backend would pass them.
        unsafe {
            ok(TRITONSERVER_BufferAttributesNew(&mut a));
            let (mut kind, mut id, mut size, mut handle) = (99u32, 99i64, 99usize, std::ptr::dangling_mut::<c_void>());
            ok(TRITONSERVER_BufferAttributesMemoryType(a, &mut kind));
            ok(TRITONSERVER_BufferAttributesMemoryTypeId(a, &mut id));
            ok(TRITONSERVER_BufferAttributesByteSize(a, &mut size));
            ok(TRITONSERVER_BufferAttributesCudaIpcHandle(a, &mut handle));
            assert_eq!((kind, id, size, handle), (MEMORY_CPU, 0, 0, std::ptr::null_mut()));
            ok(TRITONSERVER_BufferAttributesSetMemoryType(a, MEMORY_CPU_PINNED));
            ok(TRITONSERVER_BufferAttributesSetMemoryTypeId(a, 3));
            ok(TRITONSERVER_BufferAttributesSetByteSize(a, 4096));
            ok(TRITONSERVER_BufferAttributesSetCudaIpcHandle(a, 0x1000 as *mut c_void));
            ok(TRITONSERVER_BufferAttributesMemoryType(a, &mut kind));
            ok(TRITONSERVER_BufferAttributesMemoryTypeId(a, &mut id));
            ok(TRITONSERVER_BufferAttributesByteSize(a, &mut size));
            ok(TRITONSERVER_BufferAttributesCudaIpcHandle(a, &mut handle));
            assert_eq!((kind, id, size, handle as usize), (MEMORY_CPU_PINNED, 3, 4096, 0x1000));
            assert_eq!(code(TRITONSERVER_BufferAttributesSetMemoryType(a, 7)), ERROR_INVALID_ARG);
            ok(TRITONSERVER_BufferAttributesDelete(a));
        }
    }

    #[test]
    fn tritiums_attributes_are_read_only_and_null_is_refused() {
        let mut mine = BufferAttributes::cpu(12);
        let a: *mut BufferAttributes = &mut mine;
        // SAFETY: live pointers the test owns, or null where the refusal is tested.
        unsafe {
            let mut size = 0usize;
            ok(TRITONSERVER_BufferAttributesByteSize(a, &mut size));
            assert_eq!(size, 12);
            assert_eq!(code(TRITONSERVER_BufferAttributesSetByteSize(a, 1)), ERROR_INVALID_ARG);
            assert_eq!(code(TRITONSERVER_BufferAttributesDelete(a)), ERROR_INVALID_ARG);
            assert_eq!(code(TRITONSERVER_BufferAttributesByteSize(std::ptr::null_mut(), &mut size)), ERROR_INVALID_ARG);
            assert_eq!(code(TRITONSERVER_BufferAttributesNew(std::ptr::null_mut())), ERROR_INVALID_ARG);
        }
        assert_eq!(mine.byte_size(), 12);
    }
}
