//! Whether each request's client has gone, as flags for backends that let a running request
//! notice (`request.is_cancelled()` of a Python model): each flag turns true from the thread
//! where the client goes (its reply's receiver dropped), woken by the reply's channel, so
//! nothing polls while the backend runs and the backend can run on the instance's own thread.
//! Triton sets the same flag when its frontend cancels the request.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Wake, Waker};

use crate::protocol::Pending;
use crate::request::CloseWatch;

/// Sets its flag when woken.
struct Flag(Arc<AtomicBool>);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Relaxed);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Relaxed);
    }
}

/// One flag per request of a batch, set while this lives.
pub(crate) struct Gone {
    pub flags: Vec<Arc<AtomicBool>>,
    _watches: Vec<CloseWatch>,
}

/// Watches the batch's replies: a flag per request, true at once for a client already gone.
pub(crate) fn watch(batch: &mut [Pending]) -> Gone {
    let mut flags = Vec::with_capacity(batch.len());
    let mut watches = Vec::with_capacity(batch.len());
    for p in batch {
        let flag = Arc::new(AtomicBool::new(false));
        let waker = Waker::from(Arc::new(Flag(flag.clone())));
        watches.push(p.reply.watch_closed(&waker));
        flags.push(flag);
    }
    Gone { flags, _watches: watches }
}

/// No flags: the backend does not read them.
pub(crate) fn none() -> Gone {
    Gone { flags: Vec::new(), _watches: Vec::new() }
}
