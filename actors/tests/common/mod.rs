//! What the engine's integration tests share.

use std::time::Duration;

/// Waits (real time, up to 20 s: a loaded CI machine can be slow) until `done` holds.
pub async fn settle(done: impl Fn() -> bool) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the engine did not reach the awaited state in 20 s");
}
