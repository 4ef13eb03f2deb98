//! Triton's serialized BYTES tensor, as `tritium::fuzzing::bytes_elements` walks it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tritium::fuzzing::bytes_elements(data);
});
