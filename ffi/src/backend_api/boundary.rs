//! The one way into Rust from a backend: every exported function goes through `export!`, which
//! catches a panic before it can cross `extern "C"` (undefined behaviour) and turns it into an
//! INTERNAL error object; the helpers check the pointers a backend hands over, so a null
//! becomes an INVALID_ARG error rather than a crash.

use std::ffi::{c_char, CStr};

use super::abi::ERROR_INVALID_ARG;
use super::error::Error;

/// Defines an exported `TRITONSERVER_Error* NAME(args)` whose body returns `Result<(), Error>`.
macro_rules! export {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> *mut $crate::backend_api::error::Error {
            let run = || -> ::std::result::Result<(), $crate::backend_api::error::Error> { $body };
            match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(run)) {
                Ok(Ok(())) => ::std::ptr::null_mut(),
                Ok(Err(e)) => e.into_raw(),
                Err(_) => $crate::backend_api::error::Error::new(
                    $crate::backend_api::abi::ERROR_INTERNAL,
                    concat!(stringify!($name), " panicked in Tritium"),
                )
                .into_raw(),
            }
        }
    };
}
pub(crate) use export;

/// Defines an exported function that returns a plain value (`fallback` if the body panics).
macro_rules! export_value {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty = $fallback:expr; $body:block) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let run = || -> $ret { $body };
            ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(run)).unwrap_or($fallback)
        }
    };
}
pub(crate) use export_value;

/// Borrows the object behind a handle, refusing null.
///
/// # Safety
/// A non-null `ptr` must point to a live `T` that outlives the returned borrow, with no
/// `&mut` to it alive at the same time.
pub unsafe fn borrow<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Error> {
    // SAFETY: the caller promises a non-null `ptr` is a live `T`; null is refused here.
    unsafe { ptr.as_ref() }.ok_or_else(|| Error::new(ERROR_INVALID_ARG, format!("{what} is null")))
}

/// Borrows the object behind a handle mutably, refusing null.
///
/// # Safety
/// A non-null `ptr` must point to a live `T` that no one else borrows while this borrow lives.
pub unsafe fn borrow_mut<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, Error> {
    // SAFETY: the caller promises exclusive access to a live `T`; null is refused here.
    unsafe { ptr.as_mut() }.ok_or_else(|| Error::new(ERROR_INVALID_ARG, format!("{what} is null")))
}

/// Writes an out-parameter, refusing null.
///
/// # Safety
/// A non-null `ptr` must be valid for a write of `T` (alignment included).
pub unsafe fn write<T>(ptr: *mut T, value: T, what: &str) -> Result<(), Error> {
    if ptr.is_null() {
        return Err(Error::new(ERROR_INVALID_ARG, format!("{what} is null")));
    }
    // SAFETY: non-null, and the caller promises it is valid for a write of `T`.
    unsafe { ptr.write(value) };
    Ok(())
}

/// Reads a C string argument as UTF-8, refusing null.
///
/// # Safety
/// A non-null `ptr` must point to a NUL-terminated string that outlives the returned borrow.
pub unsafe fn text<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Error> {
    if ptr.is_null() {
        return Err(Error::new(ERROR_INVALID_ARG, format!("{what} is null")));
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string that outlives 'a.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str().map_err(|_| Error::new(ERROR_INVALID_ARG, format!("{what} is not UTF-8")))
}

/// A `CString` from Rust text, dropping any interior NUL (C strings cannot carry one).
pub fn c_string(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s.replace('\0', "")).expect("NULs were removed")
}
