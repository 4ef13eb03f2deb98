//! Shared-memory offsets and sizes against a real region, as `tritium::fuzzing::shm_params` uses them.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tritium::fuzzing::shm_params(data);
});
