//! System (POSIX) shared memory, as Triton's shared-memory extension has it: a client creates a
//! region with `shm_open`, registers it by name with key, offset and byte size, then names the
//! region in an input or output instead of sending the bytes. One registry serves both the HTTP
//! and the gRPC frontends, since a region registered over one may be used over the other.
//!
//! Inputs are read without a copy: a tensor's `Bytes` is a view into the mapping, which stays
//! mapped until the last such view is dropped, even if the region is unregistered meanwhile.
//! As in Triton, the client must not write a region while a request that reads it is running.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::RwLock;
use tritium_actors::{Error, Result};

/// One `mmap` of a shared-memory object, unmapped on drop.
struct Mapping {
    base: *mut u8,
    len: usize,
    /// Where the registered region starts inside `base` (the mmap offset is page-aligned).
    lead: usize,
}

// SAFETY: the pointer is a process-wide shared mapping, valid until `Drop`; nothing in this
// module hands out `&mut` to it, and writes go through `copy_nonoverlapping` under the caller's
// contract that regions are not read and written by two requests at once (Triton's contract).
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

/// A view of part of a mapping that a `Bytes` can own.
struct View {
    map: Arc<Mapping>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `start + len` was checked against the region, which lies inside the mapping.
        unsafe { std::slice::from_raw_parts(self.map.base.add(self.map.lead + self.start), self.len) }
    }
}

/// A registered system shared-memory region.
pub struct SystemRegion {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    map: Arc<Mapping>,
}

/// What the status endpoints report of a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

fn map_region(name: &str, key: &str, offset: u64, byte_size: u64) -> Result<Mapping> {
    let invalid = || Error::invalid(format!("failed to register shared memory region '{name}': invalid args"));
    let c_key =
        CString::new(key).map_err(|_| Error::invalid(format!("shared memory key '{key}' contains a NUL byte")))?;
    // SAFETY: c_key is a valid C string; the fd is closed below on every path.
    let fd = unsafe { libc::shm_open(c_key.as_ptr(), libc::O_RDWR, 0o600) };
    if fd < 0 {
        return Err(Error::internal(format!("Unable to open shared memory region: '{key}'")));
    }
    let result = (|| {
        // SAFETY: fd is open; stat is plain data.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_size < 0 {
            return Err(Error::internal(format!("Invalid shared memory region: '{key}'")));
        }
        let end = offset.checked_add(byte_size).ok_or_else(invalid)?;
        if byte_size == 0 || end > st.st_size as u64 {
            return Err(invalid());
        }
        let aligned = offset - offset % page_size();
        let lead = (offset - aligned) as usize;
        let len = lead + byte_size as usize;
        // SAFETY: a fresh shared mapping of an open fd, in bounds of the object (checked above).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                aligned as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            let err = std::io::Error::last_os_error();
            return Err(Error::invalid(format!("failed to register shared memory region '{name}': {err}")));
        }
        Ok(Mapping { base: base.cast(), len, lead })
    })();
    // SAFETY: fd came from shm_open above.
    unsafe {
        libc::close(fd);
    }
    result
}

impl SystemRegion {
    /// Checks that `[offset, offset + byte_size)` lies inside the region.
    fn check_range(&self, offset: u64, byte_size: u64) -> Result<(usize, usize)> {
        if offset >= self.byte_size && !(offset == 0 && byte_size == 0) {
            return Err(Error::invalid(format!("Invalid offset for shared memory region: '{}'", self.name)));
        }
        match offset.checked_add(byte_size) {
            Some(end) if end <= self.byte_size => Ok((offset as usize, byte_size as usize)),
            _ => Err(Error::invalid(format!("Invalid offset + byte size for shared memory region: '{}'", self.name))),
        }
    }

    fn status(&self) -> RegionStatus {
        RegionStatus { name: self.name.clone(), key: self.key.clone(), offset: self.offset, byte_size: self.byte_size }
    }
}

/// Where a tensor lives when a request names a region instead of sending bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub region: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// The registered system shared-memory regions, by name.
#[derive(Default)]
pub struct Registry {
    regions: RwLock<BTreeMap<String, Arc<SystemRegion>>>,
}

/// The process's registry, shared by every frontend.
pub fn system() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

impl Registry {
    /// Maps `byte_size` bytes of the POSIX shared-memory object `key` from `offset`.
    pub fn register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> Result<()> {
        if self.regions.read().contains_key(name) {
            return Err(Error::new(
                tritium_actors::ErrorKind::AlreadyExists,
                format!("shared memory region '{name}' already in manager"),
            ));
        }
        let map = Arc::new(map_region(name, key, offset, byte_size)?);
        let region = Arc::new(SystemRegion { name: name.into(), key: key.into(), offset, byte_size, map });
        let mut regions = self.regions.write();
        if regions.contains_key(name) {
            return Err(Error::new(
                tritium_actors::ErrorKind::AlreadyExists,
                format!("shared memory region '{name}' already in manager"),
            ));
        }
        regions.insert(name.into(), region);
        Ok(())
    }

    /// Unregisters one region, or every region when `name` is empty. An unknown name is not an
    /// error (as in Triton). Requests that still read the region keep their mapping.
    pub fn unregister(&self, name: &str) {
        let mut regions = self.regions.write();
        if name.is_empty() {
            regions.clear();
        } else {
            regions.remove(name);
        }
    }

    /// The status of one region, or of every region when `name` is empty.
    pub fn status(&self, name: &str) -> Result<Vec<RegionStatus>> {
        let regions = self.regions.read();
        if name.is_empty() {
            return Ok(regions.values().map(|r| r.status()).collect());
        }
        regions
            .get(name)
            .map(|r| vec![r.status()])
            .ok_or_else(|| Error::not_found(format!("Unable to find system shared memory region: '{name}'")))
    }

    fn get(&self, name: &str) -> Result<Arc<SystemRegion>> {
        self.regions
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("Unable to find shared memory region: '{name}'")))
    }

    /// `byte_size` bytes at `offset` of region `name`, as a view that keeps the mapping alive.
    pub fn read(&self, name: &str, offset: u64, byte_size: u64) -> Result<Bytes> {
        let region = self.get(name)?;
        let (start, len) = region.check_range(offset, byte_size)?;
        Ok(Bytes::from_owner(View { map: region.map.clone(), start, len }))
    }

    /// Checks that an output of up to `byte_size` bytes fits at `offset` of region `name`.
    pub fn check_output(&self, name: &str, offset: u64, byte_size: u64) -> Result<()> {
        self.get(name)?.check_range(offset, byte_size).map(|_| ())
    }

    /// Writes `data` at `offset` of region `name`, refusing data larger than `byte_size`.
    pub fn write(&self, name: &str, offset: u64, byte_size: u64, data: &[u8], output: &str) -> Result<()> {
        let region = self.get(name)?;
        let (start, room) = region.check_range(offset, byte_size)?;
        if data.len() > room {
            return Err(Error::invalid(format!(
                "shared memory size specified with the request for output '{output}' ({room} bytes) \
                 should be at least {} bytes to hold the results",
                data.len()
            )));
        }
        // SAFETY: the destination range lies inside the mapping (checked) and is not
        // referenced by any Rust slice that this write could alias mutably.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), region.map.base.add(region.map.lead + start), data.len());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tritium_actors::ErrorKind;

    use super::*;

    /// A POSIX shm object of `size` bytes that is unlinked on drop.
    struct Shm(CString);

    impl Shm {
        fn new(key: &str, size: usize) -> Shm {
            let c = CString::new(key).unwrap();
            unsafe {
                let fd = libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o600);
                assert!(fd >= 0, "shm_open");
                assert_eq!(libc::ftruncate(fd, size as libc::off_t), 0);
                libc::close(fd);
            }
            Shm(c)
        }
    }

    impl Drop for Shm {
        fn drop(&mut self) {
            unsafe {
                libc::shm_unlink(self.0.as_ptr());
            }
        }
    }

    fn key(tag: &str) -> String {
        format!("/tritium_test_{tag}_{}", std::process::id())
    }

    #[test]
    fn writes_and_reads_back_at_unaligned_offsets() {
        let k = key("rw");
        let _shm = Shm::new(&k, 10_000);
        let reg = Registry::default();
        reg.register("r", &k, 4100, 64).unwrap();
        reg.write("r", 8, 16, b"hello shared mem", "OUT").unwrap();
        let got = reg.read("r", 8, 16).unwrap();
        assert_eq!(&got[..], b"hello shared mem");
        assert_eq!(reg.status("r").unwrap()[0], RegionStatus { name: "r".into(), key: k, offset: 4100, byte_size: 64 });
    }

    #[test]
    fn views_outlive_unregister() {
        let k = key("outlive");
        let _shm = Shm::new(&k, 4096);
        let reg = Registry::default();
        reg.register("r", &k, 0, 16).unwrap();
        reg.write("r", 0, 4, b"abcd", "OUT").unwrap();
        let view = reg.read("r", 0, 4).unwrap();
        reg.unregister("r");
        assert_eq!(&view[..], b"abcd");
        assert_eq!(reg.read("r", 0, 4).unwrap_err().kind, ErrorKind::NotFound);
    }

    #[test]
    fn refuses_bad_keys_duplicate_names_and_out_of_range_access() {
        let k = key("bad");
        let _shm = Shm::new(&k, 128);
        let reg = Registry::default();
        let e = reg.register("x", "/tritium_no_such_key", 0, 8).unwrap_err();
        assert!(e.message.contains("Unable to open shared memory region"), "{e}");
        let e = reg.register("x", &k, 100, 64).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        reg.register("x", &k, 0, 64).unwrap();
        assert_eq!(reg.register("x", &k, 0, 8).unwrap_err().kind, ErrorKind::AlreadyExists);
        assert!(reg.read("x", 64, 1).unwrap_err().message.contains("Invalid offset"));
        assert!(reg.read("x", 60, 8).unwrap_err().message.contains("Invalid offset + byte size"));
        let e = reg.write("x", 0, 4, &[0u8; 8], "OUT").unwrap_err();
        assert!(e.message.contains("'OUT'") && e.message.contains("at least 8 bytes"), "{e}");
        assert_eq!(reg.status("nope").unwrap_err().kind, ErrorKind::NotFound);
        reg.unregister("");
        assert!(reg.status("").unwrap().is_empty());
    }
}
