//! libtorch's intra-op threads are GNU OpenMP's, and by default an idle OpenMP thread spins for a
//! while after each parallel region before it sleeps. In a server those spinning threads take
//! the cores the network threads and the client need between two executions: on the 2-core
//! machine this project measures on, `OMP_WAIT_POLICY=PASSIVE` gave torch_mlp 4–9 % more items/s
//! with client batches, a 4 % lower p50 at concurrency 1, and 10 % less server CPU per item
//! (`loadtests/torch_threads.py`, loadtests/PROFILES.md).
//!
//! libgomp reads the variable once, when the dynamic loader loads it with libtorch, before
//! `main` runs; so the server, started without the variable, sets it and executes itself again
//! (same process id, arguments and file descriptors). A value the user set, `ACTIVE` included, is
//! kept as it is.

use std::ffi::OsString;

/// The variable and the value the server gives it when the environment has none.
pub const VARIABLE: &str = "OMP_WAIT_POLICY";
pub const DEFAULT: &str = "PASSIVE";

/// Whether the process must execute itself again to give libgomp the default policy: only when
/// the environment lacks the variable (so the second start never loops).
pub fn needs_reexec(current: Option<OsString>) -> bool {
    current.is_none()
}

/// Sets the default wait policy and re-executes the running binary, when the environment has
/// none. Returns only when nothing was done, or when the exec failed (then the server runs on
/// with libgomp's default and says why).
pub fn passive_wait_by_default() {
    if !needs_reexec(std::env::var_os(VARIABLE)) {
        return;
    }
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("tritium"));
    // /proc/self/exe is this very binary, even if its file was replaced since the start.
    let error = std::process::Command::new("/proc/self/exe").arg0(arg0).args(args).env(VARIABLE, DEFAULT).exec();
    // Not yet logging: tracing starts later.
    eprintln!(
        "warning: could not restart with {VARIABLE}={DEFAULT} ({error}); libtorch's threads keep spinning when idle"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_environment_without_the_variable_restarts() {
        assert!(needs_reexec(None));
        assert!(!needs_reexec(Some(OsString::from("ACTIVE"))));
        assert!(!needs_reexec(Some(OsString::from(DEFAULT))));
        assert!(!needs_reexec(Some(OsString::new())));
    }
}
