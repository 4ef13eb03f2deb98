//! The C heap's free memory, and giving it back to the system: glibc's allocator keeps the
//! memory of freed blocks for reuse rather than returning it, so a burst of requests that all
//! went away (10,000 cancelled sequence STARTs, say) would leave the process's RSS at its peak
//! for good. [`free_heap_bytes`] (`mallinfo2`) says how much is held free; [`trim_heap`]
//! (`malloc_trim(0)`) returns the free pages. Elsewhere than glibc both do nothing.

/// Bytes the allocator holds in free blocks (glibc's `mallinfo2().fordblks`), or `None` where
/// the allocator does not say.
pub fn free_heap_bytes() -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no arguments and returns a plain struct by value; glibc locks
        // each arena while it counts, so it is safe to call from any thread at any time.
        let info = unsafe { libc::mallinfo2() };
        Some(info.fordblks)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// Returns the allocator's free pages to the system; true if any were.
pub fn trim_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes a byte count and no pointers; glibc locks each arena while
        // it releases that arena's free pages, so it is safe to call from any thread.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    #[test]
    fn freed_blocks_are_counted_free_and_trimming_releases_them() {
        // 96 MiB in blocks under glibc's mmap threshold, so they live in the heap; every other
        // one is freed and its neighbours stay, so the freed ones cannot merge into the heap's
        // top (which free() itself may give back) and stay free blocks until trimmed.
        let mut blocks: Vec<Option<Vec<u8>>> = (0..12_288).map(|i| Some(vec![i as u8; 8192])).collect();
        let held = free_heap_bytes().unwrap();
        for block in blocks.iter_mut().step_by(2) {
            *block = None;
        }
        let freed = free_heap_bytes().unwrap();
        assert!(freed >= held + (32 << 20), "free while held {held}, after freeing half {freed}");
        assert!(trim_heap(), "the free pages were released");
        drop(blocks);
    }
}
