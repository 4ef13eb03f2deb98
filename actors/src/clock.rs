//! The engine's time, injected: the scheduler's batching delays and queue timeouts, the
//! sequence actor's idle and START-grace logic and the supervisor's restart backoff ask a
//! `Clock` for the time and for wake-ups. Production uses `SystemClock` — `Instant::now` and the
//! precise timer thread (`timer.rs`); tests use `ManualClock`, whose time moves only when the
//! test advances it, so delays, timeouts, idle sequences and backoff run on virtual time.
//! (`tokio::time::pause` would not govern the timer's OS thread.)

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Something run at a given time.
pub type Callback = Box<dyn FnOnce() + Send>;

pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now(&self) -> Instant;

    /// Runs `callback` at `at` (at once if it has passed). Keep it short: send a message.
    fn at(&self, at: Instant, callback: Callback);

    /// Whether a thread may wait for this clock's instants itself (a timed wait, in real time);
    /// a virtual clock's instants come only through `at`.
    fn is_real(&self) -> bool;
}

/// The shared clock of one model version's actors.
pub type SharedClock = Arc<dyn Clock>;

/// Real time, with the precise timer thread for wake-ups.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn at(&self, at: Instant, callback: Callback) {
        crate::timer::at(at, callback);
    }

    fn is_real(&self) -> bool {
        true
    }
}

struct Pending {
    at: Instant,
    seq: u64,
    callback: Callback,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct Manual {
    now: Instant,
    seq: u64,
    due: BinaryHeap<Reverse<Pending>>,
}

/// Virtual time for tests: it stands still until `advance`, which runs every wake-up that falls
/// due, in order, at its own instant.
pub struct ManualClock {
    state: Mutex<Manual>,
}

impl std::fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ManualClock({} wake-ups pending)", self.pending())
    }
}

impl ManualClock {
    pub fn new() -> Arc<Self> {
        Arc::new(ManualClock { state: Mutex::new(Manual { now: Instant::now(), seq: 0, due: BinaryHeap::new() }) })
    }

    /// Moves time on by `by`, running the wake-ups on the way.
    pub fn advance(&self, by: Duration) {
        let target = self.state.lock().now + by;
        loop {
            let mut s = self.state.lock();
            match s.due.peek() {
                Some(Reverse(p)) if p.at <= target => {
                    let Reverse(p) = s.due.pop().expect("peeked");
                    s.now = s.now.max(p.at);
                    drop(s);
                    (p.callback)();
                }
                _ => {
                    s.now = target;
                    return;
                }
            }
        }
    }

    /// Wake-ups not yet due.
    pub fn pending(&self) -> usize {
        self.state.lock().due.len()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.state.lock().now
    }

    fn at(&self, at: Instant, callback: Callback) {
        let mut s = self.state.lock();
        if at <= s.now {
            drop(s);
            return callback();
        }
        s.seq += 1;
        let seq = s.seq;
        s.due.push(Reverse(Pending { at, seq, callback }));
    }

    fn is_real(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::channel;

    use super::*;

    #[test]
    fn manual_time_runs_wake_ups_in_order_only_when_advanced() {
        let clock = ManualClock::new();
        let t0 = clock.now();
        let (tx, rx) = channel();
        for (i, ms) in [(0, 30u64), (1, 10), (2, 20)] {
            let tx = tx.clone();
            clock.at(t0 + Duration::from_millis(ms), Box::new(move || tx.send(i).unwrap()));
        }
        assert!(rx.try_recv().is_err(), "nothing runs until time moves");
        clock.advance(Duration::from_millis(20));
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(clock.now(), t0 + Duration::from_millis(20));
        assert_eq!(clock.pending(), 1);
        clock.advance(Duration::from_millis(10));
        assert_eq!(rx.try_recv().unwrap(), 0);
    }
}
