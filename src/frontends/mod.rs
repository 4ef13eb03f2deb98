//! The protocol frontends. Each one only decodes requests into the engine's types, calls the
//! `Server` facade and encodes the answers; none holds model state.

pub mod classification;
pub mod grpc;
pub mod http;
pub mod params;
pub mod request_log;
pub mod version;
