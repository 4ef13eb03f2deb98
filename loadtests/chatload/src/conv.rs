//! One conversation's history and the check of every reply against it; and the stateless
//! client of `add_sub` (`--workload add-sub`), whose every reply is checked against its own inputs.
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

/// Elements of each of add_sub's inputs and outputs.
pub const ADD_SUB_ELEMENTS: usize = 16;

/// A stateless client of `add_sub` (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1): no
/// state on the server, so the check is against the turn's own inputs, which differ per client
/// and per turn (small integers, exact in FP32), so a reply meant for another request cannot pass.
#[derive(Debug, Clone)]
pub struct Stateless {
    pub index: u64,
    pub turns: u64,
}

impl Stateless {
    pub fn new(index: u64) -> Self {
        Stateless { index, turns: 0 }
    }

    /// The next request's INPUT0 and INPUT1.
    pub fn next_inputs(&self) -> (Vec<f32>, Vec<f32>) {
        let a = (0..ADD_SUB_ELEMENTS).map(|j| ((self.index % 100_000) as usize + j) as f32).collect();
        let b = (0..ADD_SUB_ELEMENTS).map(|j| ((self.turns % 1000) as usize * 3 + j) as f32).collect();
        (a, b)
    }

    /// Checks the reply (OUTPUT0, OUTPUT1) to `(a, b)`.
    pub fn answer(&mut self, (a, b): (&[f32], &[f32]), (sum, diff): (&[f32], &[f32])) -> Result<(), String> {
        self.turns += 1;
        let expected_sum: Vec<f32> = a.iter().zip(b).map(|(x, y)| x + y).collect();
        let expected_diff: Vec<f32> = a.iter().zip(b).map(|(x, y)| x - y).collect();
        if sum != expected_sum.as_slice() {
            return Err(format!("OUTPUT0: expected {expected_sum:?}, got {sum:?}"));
        }
        if diff != expected_diff.as_slice() {
            return Err(format!("OUTPUT1: expected {expected_diff:?}, got {diff:?}"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stateless_reply_is_checked_against_its_own_inputs() {
        let mut c = Stateless::new(7);
        let (a, b) = c.next_inputs();
        assert_eq!((a.len(), b.len()), (ADD_SUB_ELEMENTS, ADD_SUB_ELEMENTS));
        let sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        let diff: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
        assert!(c.answer((&a, &b), (&sum, &diff)).is_ok());
        // The next turn's inputs differ, so the previous reply does not pass for it.
        let (a2, b2) = c.next_inputs();
        assert_ne!(b2, b);
        assert!(c.answer((&a2, &b2), (&sum, &diff)).unwrap_err().contains("OUTPUT0"));
        // Another client's reply to the same turn number does not pass either.
        let other = Stateless { index: 8, turns: c.turns };
        let (oa, ob) = other.next_inputs();
        let (a3, b3) = c.next_inputs();
        let osum: Vec<f32> = oa.iter().zip(&ob).map(|(x, y)| x + y).collect();
        assert!(c.answer((&a3, &b3), (&osum, &diff)).is_err());
    }

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
