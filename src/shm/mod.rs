//! System (POSIX) shared memory, as Triton's shared-memory extension has it: a client creates a
//! region with `shm_open`, registers it by name with key, offset and byte size, then names the
//! region in an input or output instead of sending the bytes. One registry serves both the HTTP
//! and the gRPC frontends, since a region registered over one may be used over the other.
//!
//! The region's object stays open from registration, and every access goes through the file
//! (`pread` to take an input's bytes when a request arrives, `pwrite` to put an output), never
//! through a mapping: a client that shrinks or removes its object after registering makes the
//! next access a short read or a refused write, answered as a 400, where touching a mapping past
//! the object's end would kill the whole server with SIGBUS. An input is copied once, at decode,
//! and a request keeps its bytes even if the region is unregistered or rewritten meanwhile.

mod cuda;
mod table;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use table::Table;
use tritium_actors::{Error, Result};

/// A registered system shared-memory region.
pub struct SystemRegion {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    file: File,
}

/// What the status endpoints report of a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// Opens the object `key` and checks that it holds `[offset, offset + byte_size)`.
fn open_region(name: &str, key: &str, offset: u64, byte_size: u64) -> Result<File> {
    let invalid = || Error::invalid(format!("failed to register shared memory region '{name}': invalid args"));
    if key.contains('\0') {
        return Err(Error::invalid(format!("shared memory key '{key}' contains a NUL byte")));
    }
    let fd = rustix::shm::open(key, rustix::shm::OFlags::RDWR, rustix::fs::Mode::from_bits_truncate(0o600))
        .map_err(|_| Error::internal(format!("Unable to open shared memory region: '{key}'")))?;
    let file = File::from(fd);
    let size = file.metadata().map_err(|_| Error::internal(format!("Invalid shared memory region: '{key}'")))?.len();
    let end = offset.checked_add(byte_size).ok_or_else(invalid)?;
    if byte_size == 0 || end > size {
        return Err(invalid());
    }
    Ok(file)
}

/// Checks that `[offset, offset + byte_size)` lies inside a region of `size` bytes (Triton's
/// texts, for system and CUDA regions alike).
fn check_range(name: &str, size: u64, offset: u64, byte_size: u64) -> Result<(usize, usize)> {
    if offset >= size && !(offset == 0 && byte_size == 0) {
        return Err(Error::invalid(format!("Invalid offset for shared memory region: '{name}'")));
    }
    match offset.checked_add(byte_size) {
        Some(end) if end <= size => Ok((offset as usize, byte_size as usize)),
        _ => Err(Error::invalid(format!("Invalid offset + byte size for shared memory region: '{name}'"))),
    }
}

impl SystemRegion {
    /// Checks that `[offset, offset + byte_size)` lies inside the region.
    fn check_range(&self, offset: u64, byte_size: u64) -> Result<(usize, usize)> {
        check_range(&self.name, self.byte_size, offset, byte_size)
    }

    /// The error of an access that the object no longer allows (it was truncated or removed
    /// after registration).
    fn shrunk(&self, e: std::io::Error) -> Error {
        Error::invalid(format!(
            "shared memory region '{}' (key '{}') cannot be accessed at its registered offset and size: {}",
            self.name,
            self.key,
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "its object is smaller than when it was registered".to_string()
            } else {
                e.to_string()
            }
        ))
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
    regions: Table<SystemRegion>,
}

pub use cuda::cuda;

/// A copy of `byte_size` bytes at `offset` of region `name`, system or CUDA.
pub fn read(name: &str, offset: u64, byte_size: u64) -> Result<Bytes> {
    match cuda().get(name) {
        Some(region) => region.read(offset, byte_size),
        None => system().read(name, offset, byte_size),
    }
}

/// Checks that an output of up to `byte_size` bytes fits at `offset` of region `name`.
pub fn check_output(name: &str, offset: u64, byte_size: u64) -> Result<()> {
    match cuda().get(name) {
        Some(region) => region.check_range(offset, byte_size).map(|_| ()),
        None => system().check_output(name, offset, byte_size),
    }
}

/// Writes output `output`'s `data` at `offset` of region `name`, system or CUDA.
pub fn write(name: &str, offset: u64, byte_size: u64, data: &[u8], output: &str) -> Result<()> {
    match cuda().get(name) {
        Some(region) => region.write(offset, byte_size, data, output),
        None => system().write(name, offset, byte_size, data, output),
    }
}

fn already_registered(name: &str) -> Error {
    Error::new(tritium_actors::ErrorKind::AlreadyExists, format!("shared memory region '{name}' already in manager"))
}

fn too_small(output: &str, room: usize, needed: usize) -> Error {
    Error::invalid(format!(
        "shared memory size specified with the request for output '{output}' ({room} bytes) should be at least \
         {needed} bytes to hold the results"
    ))
}

/// The process's registry, shared by every frontend.
pub fn system() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

impl Registry {
    /// Maps `byte_size` bytes of the POSIX shared-memory object `key` from `offset`.
    pub fn register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> Result<()> {
        // One name space for system and CUDA regions, as in Triton.
        if self.regions.contains(name) || cuda().get(name).is_some() {
            return Err(already_registered(name));
        }
        let file = open_region(name, key, offset, byte_size)?;
        self.regions.insert(name, SystemRegion { name: name.into(), key: key.into(), offset, byte_size, file })
    }

    fn contains(&self, name: &str) -> bool {
        self.regions.contains(name)
    }

    /// Unregisters one region, or every region when `name` is empty. An unknown name is not an
    /// error (as in Triton). A request that still holds the region keeps its object open until
    /// it is done.
    pub fn unregister(&self, name: &str) {
        self.regions.remove(name);
    }

    /// The status of one region, or of every region when `name` is empty.
    pub fn status(&self, name: &str) -> Result<Vec<RegionStatus>> {
        self.regions.status(name, "system", SystemRegion::status)
    }

    fn get(&self, name: &str) -> Result<Arc<SystemRegion>> {
        self.regions.get(name).ok_or_else(|| Error::not_found(format!("Unable to find shared memory region: '{name}'")))
    }

    /// A copy of `byte_size` bytes at `offset` of region `name`.
    pub fn read(&self, name: &str, offset: u64, byte_size: u64) -> Result<Bytes> {
        let region = self.get(name)?;
        let (start, len) = region.check_range(offset, byte_size)?;
        let mut data = vec![0u8; len];
        region.file.read_exact_at(&mut data, region.offset + start as u64).map_err(|e| region.shrunk(e))?;
        Ok(Bytes::from(data))
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
            return Err(too_small(output, room, data.len()));
        }
        // A write past the object's end would grow the client's object again: refuse it instead.
        let at = region.offset + start as u64;
        let size = region.file.metadata().map_err(|e| region.shrunk(e))?.len();
        if at + data.len() as u64 > size {
            return Err(region.shrunk(std::io::ErrorKind::UnexpectedEof.into()));
        }
        region.file.write_all_at(data, at).map_err(|e| region.shrunk(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tritium_actors::ErrorKind;

    use super::*;

    /// A POSIX shm object of `size` bytes, unlinked on drop. On Linux, `shm_open("/name")` opens
    /// `/dev/shm/name`, so the tests make, shrink and measure objects with plain file calls.
    struct Shm(std::path::PathBuf);

    impl Shm {
        fn new(key: &str, size: u64) -> Shm {
            let path = std::path::Path::new("/dev/shm").join(key.trim_start_matches('/'));
            File::create(&path).and_then(|f| f.set_len(size)).expect("create the shm object");
            Shm(path)
        }

        fn resize(&self, size: u64) {
            std::fs::OpenOptions::new().write(true).open(&self.0).and_then(|f| f.set_len(size)).expect("resize");
        }

        fn size(&self) -> u64 {
            std::fs::metadata(&self.0).expect("stat the shm object").len()
        }
    }

    impl Drop for Shm {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
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
    fn a_truncated_object_is_a_clear_error_not_a_crash() {
        let k = key("trunc");
        let shm = Shm::new(&k, 1 << 20);
        let reg = Registry::default();
        reg.register("r", &k, 0, 1 << 20).unwrap();
        reg.write("r", 0, 8, b"12345678", "OUT").unwrap();
        assert_eq!(&reg.read("r", 0, 8).unwrap()[..], b"12345678");
        // The client shrinks its object to nothing after registering it.
        shm.resize(0);
        let e = reg.read("r", 4096, 64).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.contains("smaller than when it was registered"), "{e}");
        let e = reg.write("r", 0, 8, b"abcdefgh", "OUT").unwrap_err();
        assert!(e.message.contains("smaller than when it was registered"), "{e}");
        // The object was not grown back by the refused write.
        assert_eq!(shm.size(), 0);
    }

    #[test]
    fn reads_keep_their_bytes_after_unregister() {
        let k = key("outlive");
        let _shm = Shm::new(&k, 4096);
        let reg = Registry::default();
        reg.register("r", &k, 0, 16).unwrap();
        reg.write("r", 0, 4, b"abcd", "OUT").unwrap();
        let view = reg.read("r", 0, 4).unwrap();
        reg.unregister("r");
        reg.register("r2", &k, 0, 16).unwrap();
        reg.write("r2", 0, 4, b"wxyz", "OUT").unwrap();
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
        // An offset + size past u64 is refused, never wrapped around.
        assert!(reg.read("x", 8, u64::MAX).unwrap_err().message.contains("Invalid offset + byte size"));
        assert!(reg.read("x", u64::MAX, 2).unwrap_err().message.contains("Invalid offset"));
        assert!(reg.write("x", 8, u64::MAX, b"abcd", "OUT").is_err());
        assert_eq!(reg.register("y", &k, 8, u64::MAX).unwrap_err().kind, ErrorKind::InvalidArgument);
        assert_eq!(reg.register("y", &k, u64::MAX, 2).unwrap_err().kind, ErrorKind::InvalidArgument);
        let e = reg.write("x", 0, 4, &[0u8; 8], "OUT").unwrap_err();
        assert!(e.message.contains("'OUT'") && e.message.contains("at least 8 bytes"), "{e}");
        assert_eq!(reg.status("nope").unwrap_err().kind, ErrorKind::NotFound);
        reg.unregister("");
        assert!(reg.status("").unwrap().is_empty());
    }
}
