//! A `config.pbtxt`, parsed, completed, checked and turned into a policy as a load does
//! (`tritium::fuzzing::model_config`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tritium::fuzzing::model_config(data);
});
