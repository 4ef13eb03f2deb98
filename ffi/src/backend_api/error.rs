//! `TRITONSERVER_Error`: a boxed `{code, message}`. `ErrorNew` boxes one, `ErrorMessage` and
//! `ErrorCode` borrow it, `ErrorDelete` frees it; a backend owns the errors it creates and the
//! ones Tritium returns to it.

use std::ffi::{c_char, CString};

use super::abi::*;
use super::boundary::{c_string, export_value};

/// One error object, as the backend sees it behind `TRITONSERVER_Error*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: ErrorCode,
    message: CString,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl AsRef<str>) -> Self {
        Error { code, message: c_string(message.as_ref()) }
    }

    pub fn message(&self) -> &str {
        self.message.to_str().unwrap_or("(error message is not UTF-8)")
    }

    /// Hands the error to C; it comes back through `TRITONSERVER_ErrorDelete`.
    #[must_use]
    pub fn into_raw(self) -> *mut Error {
        Box::into_raw(Box::new(self))
    }

    /// Takes back an error object a backend returned (and so gave up).
    ///
    /// # Safety
    /// `ptr` must come from `into_raw` and not be used by anyone afterwards.
    pub unsafe fn from_raw(ptr: *mut Error) -> Option<Error> {
        // SAFETY: the caller promises `ptr` is null or an owned box from `into_raw`.
        (!ptr.is_null()).then(|| *unsafe { Box::from_raw(ptr) })
    }
}

/// Triton's name of an error code (`TRITONSERVER_ErrorCodeString`).
pub fn code_name(code: ErrorCode) -> &'static str {
    match code {
        ERROR_INTERNAL => "Internal",
        ERROR_NOT_FOUND => "Not found",
        ERROR_INVALID_ARG => "Invalid argument",
        ERROR_UNAVAILABLE => "Unavailable",
        ERROR_UNSUPPORTED => "Unsupported",
        ERROR_ALREADY_EXISTS => "Already exists",
        ERROR_CANCELLED => "Cancelled",
        _ => "Unknown",
    }
}

export_value! {
    /// Creates an error object the caller owns.
    fn TRITONSERVER_ErrorNew(code: ErrorCode, msg: *const c_char) -> *mut Error = std::ptr::null_mut(); {
        let message = if msg.is_null() {
            String::new()
        } else {
            // SAFETY: a non-null `msg` is a NUL-terminated string (the header's contract).
            unsafe { std::ffi::CStr::from_ptr(msg) }.to_string_lossy().into_owned()
        };
        Error::new(code, message).into_raw()
    }
}

export_value! {
    /// Frees an error object.
    fn TRITONSERVER_ErrorDelete(error: *mut Error) -> () = (); {
        // SAFETY: the caller gives up an error object it owns (or null).
        drop(unsafe { Error::from_raw(error) });
    }
}

export_value! {
    /// The error's code (UNKNOWN for null).
    fn TRITONSERVER_ErrorCode(error: *mut Error) -> ErrorCode = ERROR_UNKNOWN; {
        // SAFETY: a non-null `error` is a live error object (the header's contract).
        unsafe { error.as_ref() }.map_or(ERROR_UNKNOWN, |e| e.code)
    }
}

export_value! {
    /// The error code's name, a static string.
    fn TRITONSERVER_ErrorCodeString(error: *mut Error) -> *const c_char = std::ptr::null(); {
        // SAFETY: a non-null `error` is a live error object (the header's contract).
        let code = unsafe { error.as_ref() }.map_or(ERROR_UNKNOWN, |e| e.code);
        static NAMES: std::sync::OnceLock<Vec<CString>> = std::sync::OnceLock::new();
        let names = NAMES.get_or_init(|| (0..=ERROR_CANCELLED).map(|c| c_string(code_name(c))).collect());
        names.get(code as usize).unwrap_or(&names[0]).as_ptr()
    }
}

export_value! {
    /// The error's message, owned by the error object.
    fn TRITONSERVER_ErrorMessage(error: *mut Error) -> *const c_char = std::ptr::null(); {
        // SAFETY: a non-null `error` is a live error object (the header's contract).
        unsafe { error.as_ref() }.map_or(c"".as_ptr(), |e| e.message.as_ptr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_object_keeps_code_and_message_until_deleted() {
        // SAFETY: the test owns every object it creates and deletes each once.
        unsafe {
            let e = TRITONSERVER_ErrorNew(ERROR_INVALID_ARG, c"bad input".as_ptr());
            assert_eq!(TRITONSERVER_ErrorCode(e), ERROR_INVALID_ARG);
            assert_eq!(std::ffi::CStr::from_ptr(TRITONSERVER_ErrorMessage(e)).to_str().unwrap(), "bad input");
            assert_eq!(std::ffi::CStr::from_ptr(TRITONSERVER_ErrorCodeString(e)).to_str().unwrap(), "Invalid argument");
            TRITONSERVER_ErrorDelete(e);
            assert_eq!(TRITONSERVER_ErrorCode(std::ptr::null_mut()), ERROR_UNKNOWN);
        }
    }
}
