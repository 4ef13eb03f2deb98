//! Whether a frontend thread serves one client alone just now: only then may a lone request
//! run its batch on that thread (`Server::infer_on`, the engine's inline path) instead of
//! waking the instance's thread.
//!
//! While a frontend thread runs a batch, it reads nothing else: the requests of the other
//! connections it serves wait unread in their sockets. When it reads them, the batch is done and
//! the model idle again, so the first of them runs on the thread too, and so on. Nothing ever
//! comes while the model runs, so the lane never sees the load as concurrent, and a thread that
//! serves many clients is caught in a loop of batches of one: mlp at HTTP c16 with one HTTP
//! worker (`--http-thread-count 1`; a server on one core has one worker too) served 3,742
//! infer/s at 1.01 requests per execution in one of four runs, against 7,160-8,504 at 7.2 in the
//! others (loadtests/PROFILES.md, "a frontend thread caught running batches of one", 2026-12-06).
//!
//! So a thread counts as serving one client alone only when no other call of its own is open and
//! it has not seen the requests of two connections come within `WINDOW` of each other during the
//! last `WINDOW`. A lone client (one connection, one call at a time) keeps the inline path; a mix
//! of connections, or calls of one HTTP/2 connection open at once, hands the request to the
//! instance's thread, and the frontend thread goes on reading. (A gRPC call counts from the first
//! poll of its stream's task: streams of one connection accepted together but not yet started
//! are not seen. That case was not seen to loop: perf_analyzer's gRPC contexts share
//! connections, 3 at c16 and 2 at c6, and formed batches at both before and after this.)

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests of two connections this close together make a thread mixed, for this long. A
/// concurrent load's requests come far closer together (at c16, tens to hundreds of
/// microseconds apart); a scrape or a metadata call of another client beside a lone one costs
/// it the inline path for this long.
pub const WINDOW: Duration = Duration::from_millis(10);

/// One thread's record: the connection its last request came from and when, and until when the
/// thread counts as mixed.
#[derive(Clone, Copy, Default)]
struct Seen {
    last: Option<(SocketAddr, Instant)>,
    mixed_until: Option<Instant>,
}

thread_local! {
    /// The calls open on this thread (a guard held by each may be dropped elsewhere: shared).
    static OPEN: Arc<AtomicUsize> = Arc::new(AtomicUsize::new(0));
    static SEEN: Cell<Seen> = Cell::new(Seen::default());
}

/// A call open on the thread that began it, counted there until this is dropped.
pub struct OpenCall(Arc<AtomicUsize>);

impl Drop for OpenCall {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// A call begins on this thread, from the connection whose peer is `peer` (`None`: not known,
/// which counts as another connection).
pub fn call_from(peer: Option<SocketAddr>) -> OpenCall {
    call_at(peer, Instant::now())
}

fn call_at(peer: Option<SocketAddr>, now: Instant) -> OpenCall {
    SEEN.with(|seen| {
        let mut s = seen.get();
        let other_lately = s.last.is_some_and(|(last, at)| Some(last) != peer && now < at + WINDOW);
        if peer.is_none() || other_lately {
            s.mixed_until = Some(now + WINDOW);
        }
        s.last = peer.map(|p| (p, now));
        seen.set(s);
    });
    OPEN.with(|open| {
        open.fetch_add(1, Relaxed);
        OpenCall(open.clone())
    })
}

/// Whether this thread serves one client alone: the call asking (begun with `call_from` on
/// this thread) is its only open call, and the thread is not mixed (`WINDOW`).
pub fn alone() -> bool {
    alone_at(Instant::now())
}

fn alone_at(now: Instant) -> bool {
    let one_call = OPEN.with(|open| open.load(Relaxed) <= 1);
    one_call && SEEN.with(|seen| seen.get().mixed_until.is_none_or(|t| now >= t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(port: u16) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// Runs `body` on a new thread, whose record starts empty.
    fn fresh(body: impl FnOnce() + Send + 'static) {
        std::thread::spawn(body).join().unwrap();
    }

    #[test]
    fn one_connection_one_call_at_a_time_is_alone() {
        fresh(|| {
            let t0 = Instant::now();
            for i in 0..3 {
                let call = call_at(peer(4000), t0 + Duration::from_millis(i));
                assert!(alone_at(t0 + Duration::from_millis(i)), "call {i}");
                drop(call);
            }
        });
    }

    #[test]
    fn another_connection_makes_the_thread_mixed_for_the_window() {
        fresh(|| {
            let t0 = Instant::now();
            drop(call_at(peer(4000), t0));
            let other = call_at(peer(4001), t0 + Duration::from_millis(1));
            assert!(!alone_at(t0 + Duration::from_millis(1)), "two clients take turns on this thread");
            drop(other);
            let back = call_at(peer(4000), t0 + Duration::from_millis(2));
            assert!(!alone_at(t0 + Duration::from_millis(2)), "the turn back to the first is a change too");
            assert!(!alone_at(t0 + Duration::from_millis(1) + WINDOW), "the window runs from the last change");
            assert!(alone_at(t0 + Duration::from_millis(2) + WINDOW), "the window has passed");
            drop(back);
        });
    }

    #[test]
    fn another_connection_after_a_quiet_window_is_alone() {
        fresh(|| {
            let t0 = Instant::now();
            drop(call_at(peer(4000), t0));
            let later = t0 + WINDOW;
            let call = call_at(peer(4001), later);
            assert!(alone_at(later), "one client after another, not together");
            drop(call);
        });
    }

    #[test]
    fn concurrent_calls_of_one_connection_are_not_alone() {
        fresh(|| {
            let t0 = Instant::now();
            let first = call_at(peer(4000), t0);
            let second = call_at(peer(4000), t0);
            assert!(!alone_at(t0), "two calls open on this thread");
            drop(second);
            assert!(alone_at(t0), "the other call ended");
            drop(first);
        });
    }

    #[test]
    fn an_unknown_peer_counts_as_another_connection() {
        fresh(|| {
            let t0 = Instant::now();
            let call = call_at(None, t0);
            assert!(!alone_at(t0));
            drop(call);
            assert!(alone_at(t0 + WINDOW));
        });
    }

    #[test]
    fn a_call_dropped_on_another_thread_is_uncounted_on_its_own() {
        fresh(|| {
            let t0 = Instant::now();
            let call = call_at(peer(4000), t0);
            let other = call_at(peer(4000), t0);
            std::thread::spawn(move || drop(other)).join().unwrap();
            assert!(alone_at(t0), "the other thread's drop counted here");
            drop(call);
        });
    }
}
