//! The one mapping from `tritium_actors::ErrorKind` to a gRPC status code, as Triton's gRPC
//! frontend maps `TRITONSERVER_Error_Code`. The message is the engine's, unchanged, so gRPC
//! and HTTP clients read the same text.

use tonic::{Code, Status};
use tritium_actors::{Error, ErrorKind};

/// Triton's mapping: invalid argument, not found, unavailable, unsupported (UNIMPLEMENTED),
/// already exists, cancelled and internal each to their namesake.
pub fn code_of(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::InvalidArgument => Code::InvalidArgument,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::Unsupported => Code::Unimplemented,
        ErrorKind::AlreadyExists => Code::AlreadyExists,
        ErrorKind::Cancelled => Code::Cancelled,
        ErrorKind::Internal => Code::Internal,
    }
}

/// The status a handler returns for an engine error.
pub fn status(error: Error) -> Status {
    Status::new(code_of(error.kind), error.message)
}

/// `?` in a handler: engine results become statuses.
pub trait IntoStatus<T> {
    fn or_status(self) -> Result<T, Status>;
}

impl<T> IntoStatus<T> for tritium_actors::Result<T> {
    fn or_status(self) -> Result<T, Status> {
        self.map_err(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_every_kind_to_tritons_code() {
        let cases = [
            (ErrorKind::InvalidArgument, Code::InvalidArgument),
            (ErrorKind::NotFound, Code::NotFound),
            (ErrorKind::Unavailable, Code::Unavailable),
            (ErrorKind::Unsupported, Code::Unimplemented),
            (ErrorKind::AlreadyExists, Code::AlreadyExists),
            (ErrorKind::Cancelled, Code::Cancelled),
            (ErrorKind::Internal, Code::Internal),
        ];
        for (kind, code) in cases {
            assert_eq!(code_of(kind), code, "{kind:?}");
        }
    }

    #[test]
    fn status_keeps_the_engine_message() {
        let s = status(Error::not_found("Request for unknown model: 'x' is not found"));
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(s.message(), "Request for unknown model: 'x' is not found");
    }
}
