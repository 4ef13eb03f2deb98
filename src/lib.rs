//! The parsers that read untrusted bytes — the HTTP infer body (JSON, and Triton's binary tensor
//! extension), the gRPC infer request, BYTES tensors, shared-memory offsets and `config.pbtxt` —
//! as a library, for the fuzz targets in `fuzz/` and for
//! `tests/fuzz_corpus.rs`, which replays their corpus on every `cargo test`. The server is the
//! `tritium` binary (`main.rs`), which compiles these modules as its own; only the modules the
//! parsers need are here, and `fuzzing` is their one entry point.

// These modules' other items serve the binary; in this library only the parsers are used.
#![allow(dead_code)]

pub mod config;
pub mod fuzzing;
pub mod proto;
pub mod shm;

pub mod frontends {
    pub mod params;
    pub mod version;

    pub mod grpc {
        pub mod decode;
    }

    pub mod http {
        pub mod binary;
        mod infer_header;
        pub mod infer_json;
        pub mod tensor_json;
    }
}
