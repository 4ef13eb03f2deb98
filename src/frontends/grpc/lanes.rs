//! The order of a sequence's answers on one gRPC stream. Each request that belongs to a sequence
//! takes a `Turn` in its sequence's lane when it is read off the stream; a turn waits until the
//! turn before it in the same lane has written its answers (or given up), so answers leave in the
//! order the requests came, even though each request is answered by a task of its own and tasks
//! may run in any order. Lanes are keyed by model and correlation ID (Triton's correlation IDs
//! are per model); a lane is forgotten as soon as its last turn is done, so a long stream over
//! many conversations keeps no record of finished ones.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tritium_actors::CorrelationId;

type LaneKey = (String, CorrelationId);

#[derive(Default)]
struct Inner {
    /// The newest turn of each lane: its number, and what resolves when it is done.
    newest: HashMap<LaneKey, (u64, oneshot::Receiver<()>)>,
    next: u64,
}

/// The lanes of one stream.
#[derive(Clone, Default)]
pub struct Lanes {
    inner: Arc<Mutex<Inner>>,
}

/// One request's place in its lane. Dropping it (after the answers are written, or when the
/// request gives up) lets the next turn of the lane go.
pub struct Turn {
    lanes: Lanes,
    key: LaneKey,
    number: u64,
    /// Resolves (Ok or closed) when the turn before this one is done.
    before: Option<oneshot::Receiver<()>>,
    /// Dropped with the turn: that closes the next turn's `before`.
    _done: oneshot::Sender<()>,
}

impl Lanes {
    /// The next turn in the lane of `model`'s sequence `id`; called in arrival order.
    pub fn take(&self, model: &str, id: &CorrelationId) -> Turn {
        let (done, after) = oneshot::channel();
        let key = (model.to_string(), id.clone());
        let mut inner = self.inner.lock();
        inner.next += 1;
        let number = inner.next;
        let before = inner.newest.insert(key.clone(), (number, after)).map(|(_, rx)| rx);
        Turn { lanes: self.clone(), key, number, before, _done: done }
    }

    /// Lanes with a turn not yet done.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.inner.lock().newest.len()
    }
}

impl Turn {
    /// Waits until every earlier turn of this lane is done.
    pub async fn wait(&mut self) {
        if let Some(before) = self.before.take() {
            // An error only means the earlier turn was dropped without a word: it is done too.
            let _ = before.await;
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut inner = self.lanes.inner.lock();
        // Forget the lane only when no later turn has joined it since.
        if inner.newest.get(&self.key).is_some_and(|(n, _)| *n == self.number) {
            inner.newest.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::timeout;

    use super::*;

    const SHORT: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn a_turn_waits_for_the_one_before_it_in_its_lane() {
        let lanes = Lanes::default();
        let id = CorrelationId::U64(7);
        let first = lanes.take("m", &id);
        let mut second = lanes.take("m", &id);
        assert!(timeout(SHORT, second.wait()).await.is_err(), "the second turn went before the first was done");
        drop(first);
        timeout(SHORT, second.wait()).await.expect("the second turn goes once the first is done");
    }

    #[tokio::test]
    async fn other_sequences_and_other_models_do_not_wait() {
        let lanes = Lanes::default();
        let _busy = lanes.take("m", &CorrelationId::U64(1));
        let mut other_id = lanes.take("m", &CorrelationId::U64(2));
        let mut other_model = lanes.take("n", &CorrelationId::U64(1));
        let mut string_id = lanes.take("m", &CorrelationId::Str("1".into()));
        for turn in [&mut other_id, &mut other_model, &mut string_id] {
            timeout(SHORT, turn.wait()).await.expect("a turn of another lane waited");
        }
    }

    #[tokio::test]
    async fn turns_go_in_the_order_they_were_taken() {
        let lanes = Lanes::default();
        let id = CorrelationId::U64(3);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Taken in order 0..20, but the tasks start in reverse order.
        let turns: Vec<Turn> = (0..20).map(|_| lanes.take("m", &id)).collect();
        for (i, mut turn) in turns.into_iter().enumerate().rev() {
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                turn.wait().await;
                tokio::task::yield_now().await;
                order.lock().push(i);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock(), (0..20).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_lane_is_forgotten_when_its_last_turn_is_done() {
        let lanes = Lanes::default();
        let id = CorrelationId::U64(9);
        let first = lanes.take("m", &id);
        let second = lanes.take("m", &id);
        assert_eq!(lanes.open(), 1);
        drop(first);
        assert_eq!(lanes.open(), 1, "the second turn still holds the lane");
        drop(second);
        assert_eq!(lanes.open(), 0);
        // A new sequence with the same ID starts a fresh lane and does not wait.
        let mut again = lanes.take("m", &id);
        timeout(SHORT, again.wait()).await.expect("a fresh lane waited");
    }
}
