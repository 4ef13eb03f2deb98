//! Why an instance actor ended, as a type: the supervisor decides on it (a load that failed
//! ends the model's load with the backend's own error; a failure of a running instance is
//! restarted and counted by its cause), and the error a client sees keeps its kind.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::error::Error;

/// How an instance actor ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceExit {
    /// Its backend could not be created: the factory's error, with its kind and text.
    LoadFailed(Error),
    /// The backend reported that the instance cannot go on. No in-process backend does yet;
    /// a backend that runs the model in another process reports a lost worker this way.
    BackendFailed(Error),
    /// The backend (or the engine around it) panicked, while loading or executing.
    Panicked(String),
    /// It was told to stop (unload), or the model's scheduler went away.
    Stopped,
}

impl InstanceExit {
    pub fn cause(&self) -> ExitCause {
        match self {
            InstanceExit::LoadFailed(_) => ExitCause::LoadFailed,
            InstanceExit::BackendFailed(_) => ExitCause::BackendFailed,
            InstanceExit::Panicked(_) => ExitCause::Panicked,
            InstanceExit::Stopped => ExitCause::Stopped,
        }
    }

    /// The error a load that ended this way answers with: the backend's own error where there
    /// is one (a model file that does not parse stays INVALID_ARGUMENT), INTERNAL for a panic.
    pub fn into_error(self) -> Error {
        match self {
            InstanceExit::LoadFailed(e) | InstanceExit::BackendFailed(e) => e,
            InstanceExit::Panicked(message) => Error::internal(message),
            InstanceExit::Stopped => Error::unavailable("the instance was stopped while loading"),
        }
    }
}

impl fmt::Display for InstanceExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstanceExit::LoadFailed(e) | InstanceExit::BackendFailed(e) => f.write_str(&e.message),
            InstanceExit::Panicked(message) => f.write_str(message),
            InstanceExit::Stopped => f.write_str("stopped"),
        }
    }
}

/// An exit's cause without its details, for counting and for the `cause` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitCause {
    LoadFailed,
    BackendFailed,
    Panicked,
    Stopped,
}

impl ExitCause {
    /// The causes after which the supervisor restarts an instance.
    pub const RESTARTED: [ExitCause; 3] = [ExitCause::LoadFailed, ExitCause::BackendFailed, ExitCause::Panicked];

    /// The label value: `load_failed`, `backend_failed`, `panicked`, `stopped`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExitCause::LoadFailed => "load_failed",
            ExitCause::BackendFailed => "backend_failed",
            ExitCause::Panicked => "panicked",
            ExitCause::Stopped => "stopped",
        }
    }
}

/// Restarts of one instance, counted by the cause of the exit that led to each.
#[derive(Debug, Default)]
pub struct RestartCounts {
    by_cause: [AtomicU64; 4],
}

impl RestartCounts {
    pub fn add(&self, cause: ExitCause) {
        self.by_cause[cause as usize].fetch_add(1, Relaxed);
    }

    pub fn get(&self, cause: ExitCause) -> u64 {
        self.by_cause[cause as usize].load(Relaxed)
    }

    pub fn total(&self) -> u64 {
        self.by_cause.iter().map(|c| c.load(Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_failure_keeps_its_kind_and_a_panic_is_internal() {
        let e = InstanceExit::LoadFailed(Error::invalid("model.onnx: not a model")).into_error();
        assert_eq!((e.kind, e.message.as_str()), (crate::ErrorKind::InvalidArgument, "model.onnx: not a model"));
        assert_eq!(InstanceExit::Panicked("boom".into()).into_error(), Error::internal("boom"));
        let counts = RestartCounts::default();
        counts.add(ExitCause::Panicked);
        counts.add(ExitCause::Panicked);
        counts.add(ExitCause::LoadFailed);
        assert_eq!((counts.get(ExitCause::Panicked), counts.get(ExitCause::BackendFailed), counts.total()), (2, 0, 3));
    }
}
