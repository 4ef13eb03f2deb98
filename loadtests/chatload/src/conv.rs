//! One conversation's history and the check of every reply against it.
//!
//! The model is the bundled accumulator: each reply is the running sum of the conversation's
//! inputs since its START. A conversation opens with its own index as its first input (unique
//! across conversations), then sends small values, so a reply computed from another
//! conversation's state (cross-talk) or from a lost or reset state cannot match the sum kept here.

/// What the load generator remembers of one conversation.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// The index of the conversation (0..N).
    pub index: u64,
    /// The correlation ID sent as `sequence_id`.
    pub sequence_id: u64,
    /// Turns answered since the last START.
    pub turns: u64,
    /// The running sum the server should hold.
    pub sum: i64,
    /// False until the first turn, and after a failed turn (its effect on the server's state is
    /// unknown, so the next turn starts the conversation again).
    pub open: bool,
}

/// A checked reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// The reply is not the conversation's own running sum.
    Mismatch {
        expected: i64,
        got: i64,
    },
}

impl Conversation {
    pub fn new(index: u64, sequence_id: u64) -> Self {
        Conversation { index, sequence_id, turns: 0, sum: 0, open: false }
    }

    /// The next turn's input and whether it carries START.
    pub fn next_turn(&self) -> (i32, bool) {
        if !self.open {
            // Unique per conversation; the first reply already proves the state is its own.
            return ((self.index % 1_000_000) as i32 + 1, true);
        }
        (((self.index * 7 + self.turns * 13) % 97) as i32 + 1, false)
    }

    /// Records the reply to the turn `(value, start)` and checks it.
    pub fn answer(&mut self, value: i32, start: bool, reply: i64) -> Verdict {
        let expected = if start { value as i64 } else { self.sum + value as i64 };
        if start {
            self.turns = 0;
        }
        self.turns += 1;
        self.sum = expected;
        if reply == expected {
            self.open = true;
            Verdict::Ok
        } else {
            // The server's state is not ours: start over rather than count every later turn.
            self.open = false;
            Verdict::Mismatch { expected, got: reply }
        }
    }

    /// A turn failed (error or timeout): the next turn starts the conversation again.
    pub fn failed(&mut self) {
        self.open = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_sum_is_checked() {
        let mut c = Conversation::new(5, 105);
        let (v, start) = c.next_turn();
        assert_eq!((v, start), (6, true));
        assert_eq!(c.answer(v, start, 6), Verdict::Ok);
        let (v2, start2) = c.next_turn();
        assert!(!start2);
        assert_eq!(c.answer(v2, start2, 6 + v2 as i64), Verdict::Ok);
        let (v3, s3) = c.next_turn();
        assert_eq!(c.answer(v3, s3, 1), Verdict::Mismatch { expected: 6 + (v2 + v3) as i64, got: 1 });
        // After a mismatch the conversation starts again.
        assert!(c.next_turn().1);
    }

    #[test]
    fn another_conversations_sum_does_not_match() {
        let mut a = Conversation::new(1, 1);
        let mut b = Conversation::new(2, 2);
        let (va, sa) = a.next_turn();
        let (vb, sb) = b.next_turn();
        assert_eq!(a.answer(va, sa, va as i64), Verdict::Ok);
        // b's reply is a's state: counted as cross-talk.
        assert!(matches!(b.answer(vb, sb, va as i64), Verdict::Mismatch { .. }));
    }

    #[test]
    fn failure_restarts() {
        let mut c = Conversation::new(3, 3);
        let (v, s) = c.next_turn();
        c.answer(v, s, v as i64);
        assert!(!c.next_turn().1);
        c.failed();
        assert!(c.next_turn().1);
    }
}
