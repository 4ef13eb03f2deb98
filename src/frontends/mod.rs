//! The protocol frontends. Each one only decodes requests into the engine's types, calls the
//! `Server` facade and encodes the answers; none holds model state.

pub mod affinity;
pub mod alone;
pub mod binary_mime;
pub mod bls;
pub mod classification;
pub mod forward;
pub mod generate;
pub mod grpc;
pub mod http;
pub mod listen;
pub mod openai;
pub mod params;
pub mod request_log;
pub mod restricted;
pub mod sagemaker;
pub mod version;
pub mod vertex_ai;
