//! Retiring a model version that was replaced (a new version, or the same one reloaded) or
//! unloaded, without failing a request that looked it up just before.
//!
//! A frontend looks a model up in the router, then reads and decodes the request, then submits
//! it: a swap can fall between the look-up and the submit. Each submit to a version therefore
//! holds a `Pass` of that version's `Gate`, and the repository retires a version it took out of
//! the router (`Gate::retire`) before it unloads it: retiring waits for the passes held, and a
//! submitter that comes later finds the gate shut and looks the model up again (`enter`),
//! reaching the version that replaced it, or the "not found" of a model unloaded for good. So
//! every request the old version accepted was queued before its drain began and finishes on it
//! (as Triton completes the requests it accepted for a version it unloads), and every later one
//! goes to the new version, which the router names only once it is ready.

use std::ops::Deref;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use tokio::sync::Notify;
use tritium_actors::{Error, Result};

use super::LoadedModel;

/// How many times a submitter looks a model up again before it gives up: each retry found a
/// version retired after the router had moved on, so more than a couple means reloads follow
/// each other faster than one submit.
const LOOKUPS: usize = 16;

/// Whether a version still takes submits, and how many are under way.
#[derive(Default)]
pub struct Gate {
    entering: AtomicUsize,
    retired: AtomicBool,
    idle: Notify,
}

impl Gate {
    /// Counts a submit in, unless the version is retired.
    fn try_enter(&self) -> bool {
        // SeqCst on both sides: either this sees `retired`, or `retire` sees this count.
        self.entering.fetch_add(1, SeqCst);
        if self.retired.load(SeqCst) {
            self.leave();
            return false;
        }
        true
    }

    fn leave(&self) {
        if self.entering.fetch_sub(1, SeqCst) == 1 && self.retired.load(SeqCst) {
            self.idle.notify_waiters();
        }
    }

    /// Shuts the gate and waits until no submit is under way. Call it once the router no longer
    /// names the version.
    pub async fn retire(&self) {
        self.retired.store(true, SeqCst);
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Registered before the count is read, so the last `leave` cannot be missed.
            idle.as_mut().enable();
            if self.entering.load(SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// Leave to submit one request to a version; its `Drop` counts the submit out.
pub struct Pass(Arc<LoadedModel>);

impl Pass {
    /// The version this pass is for.
    pub fn model(&self) -> &Arc<LoadedModel> {
        &self.0
    }
}

impl Deref for Pass {
    type Target = LoadedModel;
    fn deref(&self) -> &LoadedModel {
        &self.0
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.0.gate.leave();
    }
}

/// A pass for `model`, or, once it is retired, for what `lookup` finds now (the version that
/// replaced it); `lookup`'s error when nothing replaced it (the model was unloaded).
pub fn enter(mut model: Arc<LoadedModel>, lookup: impl Fn() -> Result<Arc<LoadedModel>>) -> Result<Pass> {
    for _ in 0..LOOKUPS {
        if model.gate.try_enter() {
            return Ok(Pass(model));
        }
        model = lookup()?;
    }
    Err(Error::unavailable(format!(
        "model '{}' was reloaded {LOOKUPS} times while this request was submitted to it",
        model.name()
    )))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn retiring_waits_for_the_submits_under_way_and_shuts_out_later_ones() {
        let gate = Arc::new(Gate::default());
        assert!(gate.try_enter());
        let retiring = tokio::spawn({
            let gate = gate.clone();
            async move { gate.retire().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!retiring.is_finished(), "retired while a submit was under way");
        assert!(!gate.try_enter(), "a submit entered a retiring version");
        gate.leave();
        tokio::time::timeout(Duration::from_secs(5), retiring).await.unwrap().unwrap();
        assert!(!gate.try_enter());
        // Nothing under way: retiring again is immediate.
        tokio::time::timeout(Duration::from_secs(5), gate.retire()).await.unwrap();
    }
}
