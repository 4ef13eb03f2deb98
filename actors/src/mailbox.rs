//! An instance's mailbox: a channel that holds one message, with `std::sync::mpsc::sync_channel`'s
//! semantics (`try_send` fails when full or when the receiver is gone, `send` waits for room,
//! `recv` fails once every sender is gone), built on `parking_lot`'s mutex and condition variables
//! so that no thread is woken while a lock is held.
//!
//! Why not `sync_channel(1)`: its sender wakes the parked receiver (a futex wake) while holding the
//! receivers' waker lock. On a busy machine the woken instance thread can run its whole request
//! before the sender is scheduled again to release that lock, and then blocks on it when it comes
//! back for its next message: a second sleep and wake-up per request at c1 (seen as 1.4-1.8
//! voluntary context switches per add_sub request on the instance thread; `loadtests/PROFILES.md`).
//! Here a sender puts the message under the lock and wakes the receiver after releasing it, and
//! `parking_lot` wakes a parked thread outside its own queue lock too.

use std::sync::mpsc::{RecvError, SendError, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

struct State<T> {
    slot: Option<T>,
    senders: usize,
    receiver: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// The receiver waits here for a message.
    message: Condvar,
    /// Blocking senders wait here for room.
    room: Condvar,
}

/// The sending side; clones share the mailbox.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// The receiving side (the instance's thread).
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

/// A mailbox that holds one message.
pub fn mailbox<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State { slot: None, senders: 1, receiver: true }),
        message: Condvar::new(),
        room: Condvar::new(),
    });
    (Sender { shared: Arc::clone(&shared) }, Receiver { shared })
}

impl<T> Sender<T> {
    /// Puts `message` in the mailbox unless it is full or its receiver is gone.
    pub fn try_send(&self, message: T) -> Result<(), TrySendError<T>> {
        let mut state = self.shared.state.lock();
        if !state.receiver {
            return Err(TrySendError::Disconnected(message));
        }
        if state.slot.is_some() {
            return Err(TrySendError::Full(message));
        }
        state.slot = Some(message);
        drop(state);
        self.shared.message.notify_one();
        Ok(())
    }

    /// Puts `message` in the mailbox, waiting for room; fails when the receiver is gone.
    pub fn send(&self, message: T) -> Result<(), SendError<T>> {
        let mut state = self.shared.state.lock();
        loop {
            if !state.receiver {
                return Err(SendError(message));
            }
            if state.slot.is_none() {
                state.slot = Some(message);
                drop(state);
                self.shared.message.notify_one();
                return Ok(());
            }
            self.shared.room.wait(&mut state);
        }
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.state.lock().senders += 1;
        Sender { shared: Arc::clone(&self.shared) }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.senders -= 1;
        let last = state.senders == 0;
        drop(state);
        if last {
            self.shared.message.notify_all();
        }
    }
}

impl<T> Receiver<T> {
    /// The next message, waiting for one; fails once the mailbox is empty and every sender gone.
    pub fn recv(&self) -> Result<T, RecvError> {
        let mut state = self.shared.state.lock();
        loop {
            if let Some(message) = state.slot.take() {
                drop(state);
                self.shared.room.notify_one();
                return Ok(message);
            }
            if state.senders == 0 {
                return Err(RecvError);
            }
            self.shared.message.wait(&mut state);
        }
    }

    /// The next message, waiting for one until `deadline`: `Ok(None)` once it passed with none;
    /// fails once the mailbox is empty and every sender gone.
    pub fn recv_deadline(&self, deadline: Instant) -> Result<Option<T>, RecvError> {
        let mut state = self.shared.state.lock();
        loop {
            if let Some(message) = state.slot.take() {
                drop(state);
                self.shared.room.notify_one();
                return Ok(Some(message));
            }
            if state.senders == 0 {
                return Err(RecvError);
            }
            if self.shared.message.wait_until(&mut state, deadline).timed_out() && state.slot.is_none() {
                return if state.senders == 0 { Err(RecvError) } else { Ok(None) };
            }
        }
    }

    /// The message waiting, if any, without waiting.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut state = self.shared.state.lock();
        match state.slot.take() {
            Some(message) => {
                drop(state);
                self.shared.room.notify_one();
                Ok(message)
            }
            None if state.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.receiver = false;
        let left = state.slot.take();
        drop(state);
        self.shared.room.notify_all();
        drop(left);
    }
}

#[cfg(test)]
mod tests {
    use std::thread;
    use std::time::Duration;

    use super::*;

    #[test]
    fn holds_one_message() {
        let (tx, rx) = mailbox();
        tx.try_send(1).unwrap();
        assert!(matches!(tx.try_send(2), Err(TrySendError::Full(2))));
        assert_eq!(rx.recv(), Ok(1));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        tx.try_send(3).unwrap();
        assert_eq!(rx.try_recv(), Ok(3));
        drop(tx);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    }

    #[test]
    fn recv_waits_for_a_message_and_fails_once_every_sender_is_gone() {
        let (tx, rx) = mailbox();
        let tx2 = tx.clone();
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            tx2.try_send(7).unwrap();
            drop(tx2);
            thread::sleep(Duration::from_millis(20));
            drop(tx);
        });
        assert_eq!(rx.recv(), Ok(7));
        assert_eq!(rx.recv(), Err(RecvError));
        t.join().unwrap();
    }

    #[test]
    fn recv_deadline_gives_a_message_sent_in_time_and_none_once_the_deadline_passed() {
        let (tx, rx) = mailbox();
        let start = Instant::now();
        assert_eq!(rx.recv_deadline(start + Duration::from_millis(20)), Ok(None));
        assert!(start.elapsed() >= Duration::from_millis(20), "it waited for the deadline");
        let sender = tx.clone();
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            sender.try_send(9).unwrap();
        });
        // Generous: a shared CI machine may be slow to run the sender.
        assert_eq!(rx.recv_deadline(Instant::now() + Duration::from_secs(30)), Ok(Some(9)));
        t.join().unwrap();
        tx.try_send(10).unwrap();
        assert_eq!(rx.recv_deadline(start), Ok(Some(10)), "a message waiting goes first, deadline or not");
        drop(tx);
        assert_eq!(rx.recv_deadline(Instant::now() + Duration::from_secs(30)), Err(RecvError));
    }

    #[test]
    fn a_message_sent_before_the_last_sender_left_is_still_received() {
        let (tx, rx) = mailbox();
        tx.try_send("last").unwrap();
        drop(tx);
        assert_eq!(rx.recv(), Ok("last"));
        assert_eq!(rx.recv(), Err(RecvError));
    }

    #[test]
    fn send_waits_for_room_and_fails_when_the_receiver_is_gone() {
        let (tx, rx) = mailbox();
        tx.try_send(1).unwrap();
        let sender = tx.clone();
        let t = thread::spawn(move || sender.send(2));
        thread::sleep(Duration::from_millis(20));
        assert_eq!(rx.recv(), Ok(1));
        assert_eq!(rx.recv(), Ok(2));
        assert_eq!(t.join().unwrap(), Ok(()));

        tx.try_send(3).unwrap();
        let sender = tx.clone();
        let t = thread::spawn(move || sender.send(4));
        thread::sleep(Duration::from_millis(20));
        drop(rx);
        assert_eq!(t.join().unwrap(), Err(SendError(4)));
        assert!(matches!(tx.try_send(5), Err(TrySendError::Disconnected(5))));
    }

    #[test]
    fn many_messages_cross_in_order() {
        let (tx, rx) = mailbox();
        let t = thread::spawn(move || {
            for i in 0..10_000 {
                tx.send(i).unwrap();
            }
        });
        for i in 0..10_000 {
            assert_eq!(rx.recv(), Ok(i));
        }
        assert_eq!(rx.recv(), Err(RecvError));
        t.join().unwrap();
    }
}
