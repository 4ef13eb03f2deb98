//! An HTTP infer request body (JSON plus binary tensors), as `tritium::fuzzing::infer_body`
//! decodes it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tritium::fuzzing::infer_body(data);
});
