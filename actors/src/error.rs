//! The one error type of Tritium. Every layer returns it; the HTTP status and the gRPC code are
//! mapped from its kind at the edge, once each.

use std::fmt;

/// What went wrong, in Triton's categories (TRITONSERVER_Error_Code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request or a configuration is malformed.
    InvalidArgument,
    /// The model, version, tensor or resource does not exist.
    NotFound,
    /// The server or model cannot take the request now (not ready, queue full, unloading).
    Unavailable,
    /// A feature that this build or this model does not support.
    Unsupported,
    /// The thing to create exists already.
    AlreadyExists,
    /// The client went away or cancelled.
    Cancelled,
    /// A bug or a backend failure.
    Internal,
}

impl ErrorKind {
    /// Triton's name for the code, as used in logs and in the `reason` label of failures.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "Invalid argument",
            ErrorKind::NotFound => "Not found",
            ErrorKind::Unavailable => "Unavailable",
            ErrorKind::Unsupported => "Unsupported",
            ErrorKind::AlreadyExists => "Already exists",
            ErrorKind::Cancelled => "Cancelled",
            ErrorKind::Internal => "Internal",
        }
    }
}

/// An error with a kind and a message that names the model, the tensor and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into() }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn cancelled(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Cancelled, message)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
