//! `dynamic_batching { preserve_ordering: true }`: answers leave in the order the model took
//! the requests, whatever order the instances finish them in. Each accepted request gets a
//! ticket; an answer is held until every earlier ticket is answered (or dropped unanswered).
//! The gate is generic over what it releases, so it knows nothing of replies.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// Something the gate holds until its turn, then releases.
pub trait Release: Send {
    fn release(self);
}

struct GateState<T> {
    issued: u64,
    next: u64,
    /// Finished tickets not yet released: the answer, or None if dropped.
    done: BTreeMap<u64, Option<T>>,
}

/// One model version's ordering gate.
pub struct OrderGate<T> {
    state: Mutex<GateState<T>>,
}

impl<T> Default for OrderGate<T> {
    fn default() -> Self {
        OrderGate { state: Mutex::new(GateState { issued: 0, next: 0, done: BTreeMap::new() }) }
    }
}

impl<T: Release> OrderGate<T> {
    /// The next ticket. Call in the order requests are accepted.
    pub fn ticket(self: &Arc<Self>) -> Ticket<T> {
        let mut s = self.state.lock();
        let n = s.issued;
        s.issued += 1;
        Ticket { n, gate: self.clone(), done: false }
    }

    fn complete(&self, ticket: u64, entry: Option<T>) {
        let mut s = self.state.lock();
        s.done.insert(ticket, entry);
        loop {
            let next = s.next;
            let Some(entry) = s.done.remove(&next) else { break };
            s.next += 1;
            if let Some(answer) = entry {
                answer.release();
            }
        }
    }

    /// Answers held for an earlier request, for tests and figures.
    pub fn held(&self) -> usize {
        self.state.lock().done.len()
    }
}

/// A place in the order. Completing it releases its answer in turn; dropping it unanswered
/// (the request never ran) lets the later answers go.
pub struct Ticket<T: Release> {
    n: u64,
    gate: Arc<OrderGate<T>>,
    done: bool,
}

impl<T: Release> Ticket<T> {
    pub fn complete(mut self, answer: T) {
        self.done = true;
        self.gate.complete(self.n, Some(answer));
    }
}

impl<T: Release> Drop for Ticket<T> {
    fn drop(&mut self) {
        if !self.done {
            self.gate.complete(self.n, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{channel, Sender};

    use super::*;

    struct Answer(&'static str, Sender<&'static str>);

    impl Release for Answer {
        fn release(self) {
            self.1.send(self.0).unwrap();
        }
    }

    #[test]
    fn answers_leave_in_ticket_order_and_dropped_tickets_do_not_block() {
        let gate = Arc::new(OrderGate::default());
        let (tx, rx) = channel();
        let (t0, t1, t2, t3) = (gate.ticket(), gate.ticket(), gate.ticket(), gate.ticket());
        t2.complete(Answer("2", tx.clone()));
        t1.complete(Answer("1", tx.clone()));
        assert!(rx.try_recv().is_err(), "held behind ticket 0");
        assert_eq!(gate.held(), 2);
        drop(t0);
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(gate.held(), 0);
        t3.complete(Answer("3", tx));
        assert_eq!(rx.try_recv().unwrap(), "3");
    }
}
