//! Loading a backend library: `dlopen` with the entry points Triton calls, after making sure the
//! name under which the backend NEEDs Triton's core resolves to Tritium. The functions a backend
//! calls are exported by the Tritium binary itself (global scope, searched first); what is left
//! is to satisfy the backend's `DT_NEEDED` entry for Triton's core (`libtritonserver.so`, or a
//! renamed copy such as the PyPI wheel's `libtritonserver-717102f0.so`). The dynamic loader
//! takes an already loaded library whose SONAME matches, so Tritium loads a tiny alias with that
//! SONAME first (built by `build.rs`, its placeholder SONAME patched to the name), and the real
//! Triton core is never loaded.

use std::collections::HashSet;
use std::ffi::{c_void, CStr, CString};
use std::path::Path;
use std::sync::Mutex;

use super::abi::*;
use super::error::Error;
use super::model::{Backend, BackendAttribute, Instance, Model};
use super::request::Request;

pub(crate) const ALIAS_TEMPLATE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/alias.so"));
/// The template's SONAME, which `build.rs` gave it and which a load patches into the name a
/// backend needs.
const ALIAS_PLACEHOLDER: &[u8] = env!("TRITIUM_ALIAS_PLACEHOLDER").as_bytes();

type BackendFn = unsafe extern "C" fn(*mut Backend) -> *mut Error;
type ModelFn = unsafe extern "C" fn(*mut Model) -> *mut Error;
type InstanceFn = unsafe extern "C" fn(*mut Instance) -> *mut Error;
type ExecuteFn = unsafe extern "C" fn(*mut Instance, *mut *mut Request, u32) -> *mut Error;
type AttributeFn = unsafe extern "C" fn(*mut Backend, *mut BackendAttribute) -> *mut Error;

/// A loaded backend library and its entry points. It is never unloaded (Triton keeps a backend
/// loaded while a model uses it; Tritium keeps it for the life of the process).
pub struct Library {
    pub(crate) initialize: Option<BackendFn>,
    pub(crate) finalize: Option<BackendFn>,
    pub(crate) model_initialize: Option<ModelFn>,
    pub(crate) model_finalize: Option<ModelFn>,
    pub(crate) instance_initialize: Option<InstanceFn>,
    pub(crate) instance_finalize: Option<InstanceFn>,
    pub(crate) instance_execute: ExecuteFn,
    pub(crate) instance_ready: Option<InstanceFn>,
    pub(crate) backend_attribute: Option<AttributeFn>,
}

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a C string valid until the next dl call on this thread.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dynamic loader error".into()
    } else {
        // SAFETY: non-null: a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// The SONAMEs that aliases already answer to.
static ALIASES: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Makes `name` (a `DT_NEEDED` entry for Triton's core) resolve to an alias of Tritium's own.
fn ensure_alias(name: &str) -> Result<(), Error> {
    let mut aliases = ALIASES.lock().map_err(|_| Error::new(ERROR_INTERNAL, "alias registry poisoned"))?;
    let aliases = aliases.get_or_insert_with(HashSet::new);
    if aliases.contains(name) {
        return Ok(());
    }
    if name.len() > ALIAS_PLACEHOLDER.len() || name.contains('/') {
        return Err(Error::new(ERROR_UNSUPPORTED, format!("cannot alias Triton's core as '{name}'")));
    }
    let at: Vec<usize> = ALIAS_TEMPLATE
        .windows(ALIAS_PLACEHOLDER.len())
        .enumerate()
        .filter(|(_, w)| *w == ALIAS_PLACEHOLDER)
        .map(|(i, _)| i)
        .collect();
    let [at] = at[..] else {
        return Err(Error::new(ERROR_INTERNAL, "the alias template's SONAME placeholder is not found once"));
    };
    let mut image = ALIAS_TEMPLATE.to_vec();
    let slot = &mut image[at..at + ALIAS_PLACEHOLDER.len()];
    slot.fill(0);
    slot[..name.len()].copy_from_slice(name.as_bytes());
    let dir = tempfile::Builder::new()
        .prefix("tritium-backend-alias-")
        .tempdir()
        .map_err(|e| Error::new(ERROR_INTERNAL, format!("creating a folder for the alias '{name}': {e}")))?;
    let path = dir.path().join(name);
    std::fs::write(&path, &image)
        .map_err(|e| Error::new(ERROR_INTERNAL, format!("writing {}: {e}", path.display())))?;
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::new(ERROR_INTERNAL, "alias path has a NUL"))?;
    // SAFETY: dlopen of a library with no code and no constructors; the handle is kept for the
    // life of the process (never closed), so the loaded object stays.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(Error::new(ERROR_INTERNAL, format!("loading the alias '{name}': {}", dlerror())));
    }
    // The loaded object outlives its file; the folder goes now.
    drop(dir);
    aliases.insert(name.to_string());
    Ok(())
}

/// Looks up an optional entry point.
///
/// # Safety
/// `handle` is a live dlopen handle, and the symbol, when present, has type `F` (a function
/// pointer type of the header's signature).
unsafe fn symbol<F: Copy>(handle: *mut c_void, name: &CStr) -> Option<F> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: a live handle and a C string.
    let ptr = unsafe { libc::dlsym(handle, name.as_ptr()) };
    // SAFETY: the caller promises the symbol has type `F`, a pointer-sized function pointer.
    (!ptr.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&ptr) })
}

impl Library {
    /// Loads `path` after aliasing the names under which it needs Triton's core.
    pub(crate) fn load(path: &Path) -> Result<Library, Error> {
        let bytes = std::fs::read(path).map_err(|e| {
            Error::new(ERROR_NOT_FOUND, format!("unable to find backend library '{}': {e}", path.display()))
        })?;
        let needed = super::elf::needed(&bytes)
            .map_err(|e| Error::new(ERROR_INVALID_ARG, format!("backend library '{}': {e}", path.display())))?;
        for name in needed.iter().filter(|n| n.starts_with("libtritonserver")) {
            ensure_alias(name)?;
        }
        super::exports::keep();
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::new(ERROR_INVALID_ARG, "backend library path has a NUL"))?;
        // SAFETY: loading a backend runs its constructors: that is the point of hosting it, and
        // Triton does the same. The handle is never closed.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(Error::new(
                ERROR_INVALID_ARG,
                format!("unable to load backend library '{}': {}", path.display(), dlerror()),
            ));
        }
        // SAFETY: a live handle; the types are the header's signatures of these entry points.
        unsafe {
            let instance_execute =
                symbol::<ExecuteFn>(handle, c"TRITONBACKEND_ModelInstanceExecute").ok_or_else(|| {
                    Error::new(
                        ERROR_NOT_FOUND,
                        format!(
                            "backend library '{}' does not export TRITONBACKEND_ModelInstanceExecute",
                            path.display()
                        ),
                    )
                })?;
            Ok(Library {
                initialize: symbol(handle, c"TRITONBACKEND_Initialize"),
                finalize: symbol(handle, c"TRITONBACKEND_Finalize"),
                model_initialize: symbol(handle, c"TRITONBACKEND_ModelInitialize"),
                model_finalize: symbol(handle, c"TRITONBACKEND_ModelFinalize"),
                instance_initialize: symbol(handle, c"TRITONBACKEND_ModelInstanceInitialize"),
                instance_finalize: symbol(handle, c"TRITONBACKEND_ModelInstanceFinalize"),
                instance_execute,
                instance_ready: symbol(handle, c"TRITONBACKEND_ModelInstanceReady"),
                backend_attribute: symbol(handle, c"TRITONBACKEND_GetBackendAttribute"),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_alias_template_carries_the_placeholder_once() {
        let n = super::ALIAS_TEMPLATE
            .windows(super::ALIAS_PLACEHOLDER.len())
            .filter(|w| *w == super::ALIAS_PLACEHOLDER)
            .count();
        assert_eq!(n, 1);
    }

    #[test]
    fn an_alias_answers_to_its_name_without_loading_a_file_of_that_name() {
        super::ensure_alias("libtritonserver-tritium-test.so").unwrap();
        // SAFETY: RTLD_NOLOAD only looks the name up among loaded objects.
        let h =
            unsafe { libc::dlopen(c"libtritonserver-tritium-test.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        assert!(!h.is_null(), "the loader finds the alias by its SONAME");
        assert!(super::ensure_alias("a/b.so").is_err());
    }
}
