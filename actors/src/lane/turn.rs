//! The scheduler's side of the lane: what it reads and changes under the lane's lock during one
//! of its turns (free instances, instance mailboxes coming and going, what it holds queued).

use std::sync::Arc;
use std::time::Instant;

use super::State;
use crate::mailbox::Sender;
use crate::protocol::{InstanceMsg, RunHere};

/// The scheduler's hold on the lane while it decides.
pub(crate) struct Turn<'a> {
    pub(super) s: parking_lot::MutexGuard<'a, State>,
}

impl Turn<'_> {
    /// The free instance slots.
    pub fn free(&self) -> Vec<usize> {
        self.s.free.clone()
    }

    /// Whether no instance executes.
    pub fn all_free(&self) -> bool {
        self.s.free.len() == self.s.live()
    }

    /// Whether a lone queued request may go at once: no instance executes, and the model's
    /// requests have not come in company lately (`company`).
    pub fn lone_goes(&self, now: Instant) -> bool {
        self.all_free() && !self.s.company.waits(now)
    }

    /// Takes a free instance for a batch.
    pub fn take(&mut self, index: usize) {
        self.s.free.retain(|&i| i != index);
    }

    /// Marks an instance free (the scheduler heard it finished).
    pub fn release(&mut self, index: usize, generation: u64) {
        let current = matches!(&self.s.slots[index], Some((g, _)) if *g == generation);
        if current && !self.s.free.contains(&index) {
            self.s.free.push(index);
        }
    }

    /// An instance (re)started: free, with its mailbox.
    pub fn up(
        &mut self,
        index: usize,
        generation: u64,
        mailbox: Sender<InstanceMsg>,
        inline: Option<Arc<dyn RunHere>>,
    ) {
        self.s.slots[index] = Some((generation, mailbox));
        self.s.inline[index] = inline;
        if self.s.waiter == Some(index) {
            self.s.waiter = None;
        }
        if !self.s.free.contains(&index) {
            self.s.free.push(index);
        }
    }

    /// An instance ended (or was lost on a send).
    pub fn down(&mut self, index: usize) {
        self.s.slots[index] = None;
        self.s.inline[index] = None;
        self.s.free.retain(|&i| i != index);
        if self.s.waiter == Some(index) {
            self.s.waiter = None;
        }
    }

    /// What the scheduler holds after its turn (read under this lock: an instance pulls under
    /// it too), and how many requests on their way it read.
    pub fn publish(&mut self, queued: usize, read: usize) {
        self.s.queued = queued;
        self.s.in_flight = self.s.in_flight.saturating_sub(read);
    }

    /// The timer the scheduler set for its next turn, if any.
    pub fn arm(&mut self, at: Option<Instant>) {
        self.s.armed = at;
    }

    /// The model drains: no request goes direct any more.
    pub fn close(&mut self) {
        self.s.open = false;
    }

    /// Forgets every mailbox (the scheduler stops): the instances end once theirs are gone.
    pub fn clear(&mut self) {
        self.s.free.clear();
        self.s.waiter = None;
        for slot in &mut self.s.slots {
            *slot = None;
        }
        for core in &mut self.s.inline {
            *core = None;
        }
    }
}
