//! A precise one-shot timer for the batchers' delays. Tokio's timer (under actix's
//! `run_later`) has millisecond resolution, so a `max_queue_delay_microseconds: 200` would
//! wait a millisecond or two; this thread sleeps on a condition variable until the earliest
//! deadline (tens of microseconds late on Linux) and then runs that deadline's callback, which
//! only sends a message to the actor that asked.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Instant;

type Callback = Box<dyn FnOnce() + Send>;

struct Entry {
    at: Instant,
    seq: u64,
    callback: Callback,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[derive(Default)]
struct Timers {
    heap: Mutex<(BinaryHeap<Reverse<Entry>>, u64)>,
    changed: Condvar,
}

fn timers() -> &'static Timers {
    static TIMERS: OnceLock<&'static Timers> = OnceLock::new();
    TIMERS.get_or_init(|| {
        let t: &'static Timers = Box::leak(Box::default());
        std::thread::Builder::new().name("tritium-timer".into()).spawn(move || run(t)).expect("start the timer thread");
        t
    })
}

fn run(t: &'static Timers) {
    let mut guard = t.heap.lock().expect("timer lock");
    loop {
        let now = Instant::now();
        match guard.0.peek().map(|Reverse(e)| e.at) {
            Some(at) if at <= now => {
                let Reverse(e) = guard.0.pop().expect("peeked");
                drop(guard);
                (e.callback)();
                guard = t.heap.lock().expect("timer lock");
            }
            Some(at) => guard = t.changed.wait_timeout(guard, at - now).expect("timer lock").0,
            None => guard = t.changed.wait(guard).expect("timer lock"),
        }
    }
}

/// Runs `callback` on the timer thread at `at` (at once if it has passed). Keep it short: it
/// delays every later timer.
pub fn at(at: Instant, callback: impl FnOnce() + Send + 'static) {
    let t = timers();
    let mut guard = t.heap.lock().expect("timer lock");
    guard.1 += 1;
    let seq = guard.1;
    let earliest = guard.0.peek().is_none_or(|Reverse(e)| at < e.at);
    guard.0.push(Reverse(Entry { at, seq, callback: Box::new(callback) }));
    drop(guard);
    if earliest {
        t.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn fires_in_deadline_order_and_close_to_time() {
        let (tx, rx) = mpsc::channel();
        let start = Instant::now();
        for (i, us) in [(0, 3000u64), (1, 300), (2, 1000)] {
            let tx = tx.clone();
            at(start + Duration::from_micros(us), move || tx.send((i, Instant::now())).unwrap());
        }
        let fired: Vec<(i32, Instant)> = (0..3).map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap()).collect();
        assert_eq!(fired.iter().map(|f| f.0).collect::<Vec<_>>(), vec![1, 2, 0]);
        let first = fired[0].1 - start;
        assert!(first >= Duration::from_micros(300), "{first:?}");
        // Generous: shared CI machines; tokio's timer would already be at a millisecond.
        assert!(first < Duration::from_millis(50), "{first:?}");
    }
}
