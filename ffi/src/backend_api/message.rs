//! `TRITONSERVER_Message` (a JSON document: model configs, backend configs, host policies),
//! `TRITONSERVER_Parameter` (a named typed value), the names of datatypes, memory types and
//! instance kinds, and `TRITONSERVER_LogMessage` into Tritium's log.

use std::ffi::{c_char, c_int, c_void, CString};

use super::abi::*;
use super::boundary::{c_string, export, export_value, text, write};
use super::error::Error;

/// A serialized JSON message; the pointer `MessageSerializeToJson` returns borrows it.
#[derive(Debug)]
pub struct Message {
    json: Vec<u8>,
}

impl Message {
    pub fn new(json: impl Into<Vec<u8>>) -> Self {
        Message { json: json.into() }
    }

    pub fn json(&self) -> &[u8] {
        &self.json
    }

    pub fn into_raw(self) -> *mut Message {
        Box::into_raw(Box::new(self))
    }
}

export! {
    /// Copies a serialized JSON document into a new message the caller owns.
    fn TRITONSERVER_MessageNewFromSerializedJson(message: *mut *mut Message, base: *const c_char, byte_size: usize) {
        let json = if byte_size == 0 {
            Vec::new()
        } else if base.is_null() {
            return Err(Error::new(ERROR_INVALID_ARG, "message base is null"));
        } else {
            // SAFETY: the header's contract: `base` holds `byte_size` readable bytes.
            unsafe { std::slice::from_raw_parts(base.cast::<u8>(), byte_size) }.to_vec()
        };
        // SAFETY: `message` is the caller's out-parameter.
        unsafe { write(message, Message::new(json).into_raw(), "message") }
    }
}

export! {
    /// Frees a message.
    fn TRITONSERVER_MessageDelete(message: *mut Message) {
        if !message.is_null() {
            // SAFETY: the caller gives up a message it owns, made by `Message::into_raw`.
            drop(unsafe { Box::from_raw(message) });
        }
        Ok(())
    }
}

export! {
    /// The message's JSON, borrowed from the message (not NUL-terminated).
    fn TRITONSERVER_MessageSerializeToJson(message: *mut Message, base: *mut *const c_char, byte_size: *mut usize) {
        // SAFETY: a live message handle (the header's contract).
        let m = unsafe { super::boundary::borrow(message, "message") }?;
        // SAFETY: both are the caller's out-parameters.
        unsafe {
            write(base, m.json.as_ptr().cast::<c_char>(), "base")?;
            write(byte_size, m.json.len(), "byte_size")
        }
    }
}

/// A named value of one of the parameter types.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Str(CString),
    Int(i64),
    Bool(bool),
    Double(f64),
    Bytes(Vec<u8>),
}

/// `TRITONSERVER_Parameter`: BLS load parameters and metric labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Parameter {
    pub name: String,
    pub value: ParamValue,
}

export_value! {
    /// A new parameter the caller owns; null when the type or a pointer is bad.
    fn TRITONSERVER_ParameterNew(name: *const c_char, kind: ParameterType, value: *const c_void) -> *mut Parameter = std::ptr::null_mut(); {
        // SAFETY: `name` is a C string (the header's contract); null is refused.
        let Ok(name) = (unsafe { text(name, "name") }) else { return std::ptr::null_mut() };
        if value.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: the header's contract: `value` points to a C string, an int64, a bool or a
        // double, as `kind` says.
        let value = unsafe {
            match kind {
                PARAMETER_STRING => ParamValue::Str(std::ffi::CStr::from_ptr(value.cast()).to_owned()),
                PARAMETER_INT => ParamValue::Int(*value.cast::<i64>()),
                PARAMETER_BOOL => ParamValue::Bool(*value.cast::<bool>()),
                PARAMETER_DOUBLE => ParamValue::Double(*value.cast::<f64>()),
                _ => return std::ptr::null_mut(),
            }
        };
        Box::into_raw(Box::new(Parameter { name: name.to_string(), value }))
    }
}

export_value! {
    /// A new BYTES parameter (a copy of the bytes) the caller owns.
    fn TRITONSERVER_ParameterBytesNew(name: *const c_char, byte_ptr: *const c_void, size: u64) -> *mut Parameter = std::ptr::null_mut(); {
        // SAFETY: `name` is a C string (the header's contract); null is refused.
        let Ok(name) = (unsafe { text(name, "name") }) else { return std::ptr::null_mut() };
        let bytes = if size == 0 {
            Vec::new()
        } else if byte_ptr.is_null() {
            return std::ptr::null_mut();
        } else {
            // SAFETY: the header's contract: `byte_ptr` holds `size` readable bytes.
            unsafe { std::slice::from_raw_parts(byte_ptr.cast::<u8>(), size as usize) }.to_vec()
        };
        Box::into_raw(Box::new(Parameter { name: name.to_string(), value: ParamValue::Bytes(bytes) }))
    }
}

export_value! {
    /// Frees a parameter.
    fn TRITONSERVER_ParameterDelete(parameter: *mut Parameter) -> () = (); {
        if !parameter.is_null() {
            // SAFETY: the caller gives up a parameter made by `ParameterNew`/`ParameterBytesNew`.
            drop(unsafe { Box::from_raw(parameter) });
        }
    }
}

/// Static C strings for a table of names, made once.
fn static_names(table: &'static std::sync::OnceLock<Vec<CString>>, names: &[&str], index: u32) -> *const c_char {
    let all = table.get_or_init(|| names.iter().map(|n| c_string(n)).collect());
    all.get(index as usize).map_or(c"<invalid>".as_ptr(), |s| s.as_ptr())
}

export_value! {
    /// `FP32`, `BYTES`, …; `<invalid>` for an unknown value.
    fn TRITONSERVER_DataTypeString(datatype: DataType) -> *const c_char = std::ptr::null(); {
        static NAMES: std::sync::OnceLock<Vec<CString>> = std::sync::OnceLock::new();
        let names: Vec<&str> = (0..15).map(data_type_name).collect();
        if datatype == TYPE_INVALID || datatype >= 15 {
            return c"<invalid>".as_ptr();
        }
        static_names(&NAMES, &names, datatype)
    }
}

export_value! {
    /// Bytes per element; 0 for BYTES and invalid types.
    fn TRITONSERVER_DataTypeByteSize(datatype: DataType) -> u32 = 0; {
        data_type_size(datatype)
    }
}

export_value! {
    /// `CPU`, `CPU_PINNED`, `GPU`.
    fn TRITONSERVER_MemoryTypeString(memtype: MemoryType) -> *const c_char = std::ptr::null(); {
        static NAMES: std::sync::OnceLock<Vec<CString>> = std::sync::OnceLock::new();
        static_names(&NAMES, &["CPU", "CPU_PINNED", "GPU"], memtype)
    }
}

export_value! {
    /// `AUTO`, `CPU`, `GPU`, `MODEL`.
    fn TRITONSERVER_InstanceGroupKindString(kind: InstanceGroupKind) -> *const c_char = std::ptr::null(); {
        static NAMES: std::sync::OnceLock<Vec<CString>> = std::sync::OnceLock::new();
        static_names(&NAMES, &["AUTO", "CPU", "GPU", "MODEL"], kind)
    }
}

export_value! {
    /// The datatype of a protocol name (`FP32`); `TRITONSERVER_TYPE_INVALID` for any other.
    fn TRITONSERVER_StringToDataType(dtype: *const c_char) -> DataType = TYPE_INVALID; {
        // SAFETY: a C string or null (the header's contract).
        unsafe { text(dtype, "dtype") }.map_or(TYPE_INVALID, data_type_of)
    }
}

export_value! {
    /// `STRING`, `INT`, `BOOL`, `DOUBLE`, `BYTES`.
    fn TRITONSERVER_ParameterTypeString(paramtype: ParameterType) -> *const c_char = std::ptr::null(); {
        static NAMES: std::sync::OnceLock<Vec<CString>> = std::sync::OnceLock::new();
        static_names(&NAMES, &["STRING", "INT", "BOOL", "DOUBLE", "BYTES"], paramtype)
    }
}

export_value! {
    /// `DISABLED`, `MIN`, `MAX`, `TIMESTAMPS`, `TENSORS`; `<unknown>` for any other value.
    fn TRITONSERVER_InferenceTraceLevelString(level: u32) -> *const c_char = std::ptr::null(); {
        match level {
            0 => c"DISABLED".as_ptr(),
            1 => c"MIN".as_ptr(),
            2 => c"MAX".as_ptr(),
            4 => c"TIMESTAMPS".as_ptr(),
            8 => c"TENSORS".as_ptr(),
            _ => c"<unknown>".as_ptr(),
        }
    }
}

export_value! {
    /// `REQUEST_START` … `CUSTOM_ACTIVITY`, by the header's order; `<unknown>` for any other.
    fn TRITONSERVER_InferenceTraceActivityString(activity: u32) -> *const c_char = std::ptr::null(); {
        const NAMES: [&std::ffi::CStr; 11] = [
            c"REQUEST_START",
            c"QUEUE_START",
            c"COMPUTE_START",
            c"COMPUTE_INPUT_END",
            c"COMPUTE_OUTPUT_START",
            c"COMPUTE_END",
            c"REQUEST_END",
            c"TENSOR_QUEUE_INPUT",
            c"TENSOR_BACKEND_INPUT",
            c"TENSOR_BACKEND_OUTPUT",
            c"CUSTOM_ACTIVITY",
        ];
        NAMES.get(activity as usize).map_or(c"<unknown>".as_ptr(), |n| n.as_ptr())
    }
}

/// Whether Tritium's log filter writes a backend's line at `level`; verbose lines (and any
/// other level) are its debug level, as `LogMessage` writes them.
fn log_on(level: LogLevel) -> bool {
    match level {
        LOG_ERROR => tracing::enabled!(target: "triton_backend", tracing::Level::ERROR),
        LOG_WARN => tracing::enabled!(target: "triton_backend", tracing::Level::WARN),
        LOG_INFO => tracing::enabled!(target: "triton_backend", tracing::Level::INFO),
        _ => tracing::enabled!(target: "triton_backend", tracing::Level::DEBUG),
    }
}

export_value! {
    /// Whether a backend's log line at `level` would be written; false for an unknown level,
    /// as in Triton.
    fn TRITONSERVER_LogIsEnabled(level: LogLevel) -> bool = false; {
        level <= LOG_VERBOSE && log_on(level)
    }
}

export! {
    /// A backend's log line, into Tritium's log at the same level, with its source location.
    /// A line whose level is off is not read at all, as Triton's `LOG_VERBOSE_FL` streams
    /// nothing then (the Python backend logs verbose lines on every execution).
    fn TRITONSERVER_LogMessage(level: LogLevel, filename: *const c_char, line: c_int, msg: *const c_char) {
        if !log_on(level) {
            return Ok(());
        }
        // SAFETY: both are C strings or null (the header's contract).
        let (file, msg) = unsafe { (text(filename, "filename").unwrap_or("?"), text(msg, "msg")?) };
        match level {
            LOG_ERROR => tracing::error!(target: "triton_backend", "{file}:{line}] {msg}"),
            LOG_WARN => tracing::warn!(target: "triton_backend", "{file}:{line}] {msg}"),
            LOG_INFO => tracing::info!(target: "triton_backend", "{file}:{line}] {msg}"),
            _ => tracing::debug!(target: "triton_backend", "{file}:{line}] {msg}"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_datatypes_read_as_tritons() {
        // SAFETY: static C strings, read only.
        let read = |p: *const c_char| unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap().to_string();
        // SAFETY: C strings the test owns, and plain values.
        unsafe {
            assert_eq!(TRITONSERVER_StringToDataType(c"FP32".as_ptr()), 11);
            assert_eq!(TRITONSERVER_StringToDataType(c"BF16".as_ptr()), 14);
            assert_eq!(TRITONSERVER_StringToDataType(c"TYPE_FP32".as_ptr()), TYPE_INVALID);
            assert_eq!(TRITONSERVER_StringToDataType(std::ptr::null()), TYPE_INVALID);
            assert_eq!(read(TRITONSERVER_ParameterTypeString(PARAMETER_DOUBLE)), "DOUBLE");
            assert_eq!(read(TRITONSERVER_ParameterTypeString(9)), "<invalid>");
            assert_eq!(read(TRITONSERVER_InferenceTraceLevelString(4)), "TIMESTAMPS");
            assert_eq!(read(TRITONSERVER_InferenceTraceLevelString(3)), "<unknown>");
            assert_eq!(read(TRITONSERVER_InferenceTraceActivityString(10)), "CUSTOM_ACTIVITY");
            assert_eq!(read(TRITONSERVER_InferenceTraceActivityString(0)), "REQUEST_START");
            assert_eq!(read(TRITONSERVER_InferenceTraceActivityString(11)), "<unknown>");
            assert!(!TRITONSERVER_LogIsEnabled(77));
        }
    }

    #[test]
    fn a_message_hands_back_the_json_it_was_given() {
        let json = br#"{"name":"add_sub"}"#;
        // SAFETY: the test owns the message and deletes it once.
        unsafe {
            let mut m = std::ptr::null_mut();
            assert!(TRITONSERVER_MessageNewFromSerializedJson(&mut m, json.as_ptr().cast(), json.len()).is_null());
            let (mut base, mut size) = (std::ptr::null(), 0usize);
            assert!(TRITONSERVER_MessageSerializeToJson(m, &mut base, &mut size).is_null());
            assert_eq!(std::slice::from_raw_parts(base.cast::<u8>(), size), json);
            assert!(TRITONSERVER_MessageDelete(m).is_null());
        }
    }

    /// A subscriber that takes events up to a level and drops them.
    struct UpTo(tracing::Level);

    impl tracing::Subscriber for UpTo {
        fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
            *m.level() <= self.0
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, _: &tracing::Event<'_>) {}
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn a_log_line_whose_level_is_off_is_not_read() {
        tracing::subscriber::with_default(UpTo(tracing::Level::INFO), || {
            // SAFETY: null messages on purpose; an error returned is deleted once.
            unsafe {
                // Verbose is off: the (null) message is never looked at.
                assert!(TRITONSERVER_LogMessage(LOG_VERBOSE, c"f.cc".as_ptr(), 1, std::ptr::null()).is_null());
                // Info is on: it is read, and a null one refused.
                let e = TRITONSERVER_LogMessage(LOG_INFO, c"f.cc".as_ptr(), 1, std::ptr::null());
                assert!(!e.is_null());
                crate::backend_api::error::TRITONSERVER_ErrorDelete(e);
                assert!(TRITONSERVER_LogMessage(LOG_INFO, c"f.cc".as_ptr(), 1, c"hello".as_ptr()).is_null());
            }
        });
    }

    #[test]
    fn parameters_copy_their_typed_value() {
        let v: i64 = -7;
        // SAFETY: the test owns the parameters and deletes each once.
        unsafe {
            let p = TRITONSERVER_ParameterNew(c"n".as_ptr(), PARAMETER_INT, (&v as *const i64).cast());
            assert_eq!((*p).value, ParamValue::Int(-7));
            TRITONSERVER_ParameterDelete(p);
            let p = TRITONSERVER_ParameterNew(c"s".as_ptr(), PARAMETER_STRING, c"x".as_ptr().cast());
            assert_eq!((*p).value, ParamValue::Str(c"x".to_owned()));
            TRITONSERVER_ParameterDelete(p);
            assert!(TRITONSERVER_ParameterNew(c"bad".as_ptr(), 99, c"x".as_ptr().cast()).is_null());
            let p = TRITONSERVER_ParameterBytesNew(c"b".as_ptr(), b"ab".as_ptr().cast(), 2);
            assert_eq!((*p).value, ParamValue::Bytes(b"ab".to_vec()));
            TRITONSERVER_ParameterDelete(p);
        }
    }

    #[test]
    fn datatype_names_are_tritons() {
        // SAFETY: the returned strings are static.
        unsafe {
            assert_eq!(std::ffi::CStr::from_ptr(TRITONSERVER_DataTypeString(11)).to_str().unwrap(), "FP32");
            assert_eq!(std::ffi::CStr::from_ptr(TRITONSERVER_DataTypeString(0)).to_str().unwrap(), "<invalid>");
            assert_eq!(std::ffi::CStr::from_ptr(TRITONSERVER_MemoryTypeString(2)).to_str().unwrap(), "GPU");
        }
        assert_eq!(unsafe_free_size(13), 0);
    }

    fn unsafe_free_size(t: DataType) -> u32 {
        // SAFETY: a plain value function.
        unsafe { TRITONSERVER_DataTypeByteSize(t) }
    }
}
