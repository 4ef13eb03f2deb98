//! Sequence-aware drain. On SIGTERM/SIGINT a server that still holds live sequences does not
//! stop at once: it turns not-ready (so a load balancer or Kubernetes takes it out of rotation),
//! refuses what would start new work here (a sequence's START, and requests outside any sequence)
//! with UNAVAILABLE so that the client or the balancer retries on another replica, and keeps
//! serving the turns of the sequences it holds until they end or idle out. `main` then stops as
//! before; it waits at most `--exit-timeout-secs` for the drain and the stop together.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};

use tritium_actors::{Error, InferRequest, Result};

use crate::repository::RepositoryManager;

/// The drain's state, shared by the server (which refuses) and the metrics endpoint.
#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
    refused_starts: AtomicU64,
    refused_stateless: AtomicU64,
}

/// What the drain has refused so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// Requests that would have started a sequence.
    pub starts: u64,
    /// Requests outside any sequence.
    pub stateless: u64,
}

impl Drain {
    pub fn begin(&self) {
        self.draining.store(true, Relaxed);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Relaxed)
    }

    pub fn refused(&self) -> Refused {
        Refused { starts: self.refused_starts.load(Relaxed), stateless: self.refused_stateless.load(Relaxed) }
    }

    /// While draining: a turn of a sequence (not its START) passes; anything else is refused
    /// with UNAVAILABLE and counted.
    pub fn admit(&self, request: &InferRequest) -> Result<()> {
        if !self.is_draining() {
            return Ok(());
        }
        match &request.sequence {
            Some(s) if !s.start => Ok(()),
            Some(s) => {
                self.refused_starts.fetch_add(1, Relaxed);
                Err(Error::unavailable(format!(
                    "Server is draining: new sequences are refused (sequence {} not started here); retry on another replica",
                    s.id
                )))
            }
            None => {
                self.refused_stateless.fetch_add(1, Relaxed);
                Err(Error::unavailable(
                    "Server is draining: only turns of live sequences are served; retry on another replica",
                ))
            }
        }
    }
}

/// Sequences the server holds: those with a slot and those waiting for one, over every model.
pub fn live_sequences(repository: &RepositoryManager) -> u64 {
    repository
        .router()
        .all()
        .iter()
        .filter(|m| m.handle.policy.sequence().is_some())
        .map(|m| {
            let s = m.handle.figures.snapshot().sequence;
            s.active + s.backlog
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use tritium_actors::{CorrelationId, ErrorKind, SequenceFlags};

    use super::*;

    fn request(seq: Option<(u64, bool)>) -> InferRequest {
        let mut r = InferRequest::new("m", vec![]);
        r.sequence = seq.map(|(id, start)| SequenceFlags { id: CorrelationId::U64(id), start, end: false });
        r
    }

    #[test]
    fn before_the_drain_everything_passes() {
        let d = Drain::default();
        for r in [request(None), request(Some((1, true))), request(Some((1, false)))] {
            d.admit(&r).unwrap();
        }
        assert_eq!(d.refused(), Refused { starts: 0, stateless: 0 });
    }

    #[test]
    fn draining_serves_turns_and_refuses_starts_and_stateless_requests() {
        let d = Drain::default();
        d.begin();
        d.admit(&request(Some((5, false)))).unwrap();
        let e = d.admit(&request(Some((6, true)))).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable);
        assert!(e.message.contains("sequence 6 not started here"), "{e}");
        assert_eq!(d.admit(&request(None)).unwrap_err().kind, ErrorKind::Unavailable);
        d.admit(&request(None)).unwrap_err();
        assert_eq!(d.refused(), Refused { starts: 1, stateless: 2 });
    }
}
