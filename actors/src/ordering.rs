//! `dynamic_batching { preserve_ordering: true }`: answers leave in the order the model took
//! the requests, whatever order the instances finish them in. Each accepted request gets a
//! ticket; an answer is held until every earlier ticket is answered (or dropped unanswered).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::Result;
use crate::request::{InferResponse, Reply};

#[derive(Default)]
struct GateState {
    issued: u64,
    next: u64,
    /// Finished tickets not yet released: the reply and its answer, or None if dropped.
    done: BTreeMap<u64, Option<(Reply, Result<InferResponse>)>>,
}

/// One model version's ordering gate.
#[derive(Default)]
pub struct OrderGate {
    state: Mutex<GateState>,
}

impl OrderGate {
    /// Wraps `reply` with the next ticket. Call in the order requests are accepted.
    pub fn wrap(self: &Arc<Self>, reply: Reply) -> Reply {
        let mut s = self.state.lock();
        let ticket = s.issued;
        s.issued += 1;
        Reply::Ordered(OrderedReply { ticket, gate: self.clone(), inner: Some(Box::new(reply)) })
    }

    fn complete(&self, ticket: u64, entry: Option<(Reply, Result<InferResponse>)>) {
        let mut s = self.state.lock();
        s.done.insert(ticket, entry);
        loop {
            let next = s.next;
            let Some(entry) = s.done.remove(&next) else { break };
            s.next += 1;
            if let Some((reply, result)) = entry {
                reply.send(result);
            }
        }
    }

    /// Answers held for an earlier request, for tests and figures.
    pub fn held(&self) -> usize {
        self.state.lock().done.len()
    }
}

/// A reply that waits for its turn.
pub struct OrderedReply {
    ticket: u64,
    gate: Arc<OrderGate>,
    inner: Option<Box<Reply>>,
}

impl OrderedReply {
    pub(crate) fn inner(&self) -> &Reply {
        self.inner.as_deref().expect("present until sent or dropped")
    }

    pub(crate) fn send(mut self, result: Result<InferResponse>) {
        let inner = self.inner.take().expect("present until sent or dropped");
        self.gate.complete(self.ticket, Some((*inner, result)));
    }
}

impl Drop for OrderedReply {
    fn drop(&mut self) {
        // Dropped unanswered (the request never ran): later answers must not wait for it.
        if self.inner.take().is_some() {
            self.gate.complete(self.ticket, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn answer(id: &str) -> Result<InferResponse> {
        Ok(InferResponse {
            id: id.into(),
            model: "m".into(),
            version: 1,
            outputs: vec![],
            parameters: Default::default(),
            is_final: true,
            times: None,
        })
    }

    #[test]
    fn answers_leave_in_ticket_order_and_dropped_tickets_do_not_block() {
        let gate = Arc::new(OrderGate::default());
        let (r0, mut rx0) = Reply::once();
        let (r1, mut rx1) = Reply::once();
        let (r2, mut rx2) = Reply::once();
        let (r3, mut rx3) = Reply::once();
        let (o0, o1, o2, o3) = (gate.wrap(r0), gate.wrap(r1), gate.wrap(r2), gate.wrap(r3));
        o2.send(answer("2"));
        o1.send(Err(Error::invalid("bad")));
        assert!(rx1.try_recv().is_err() && rx2.try_recv().is_err(), "held behind ticket 0");
        assert_eq!(gate.held(), 2);
        drop(o0);
        assert!(rx0.try_recv().is_err(), "a dropped reply closes its channel");
        assert!(rx1.try_recv().unwrap().is_err());
        assert_eq!(rx2.try_recv().unwrap().unwrap().id, "2");
        assert_eq!(gate.held(), 0);
        o3.send(answer("3"));
        assert_eq!(rx3.try_recv().unwrap().unwrap().id, "3");
    }
}
