//! What the engine's integration tests share.

use std::time::Duration;

use tritium_actors::{InstanceKind, InstanceSpec};

#[allow(dead_code)] // not every test crate that shares this module waits
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

/// `n` CPU instances of `model`, named as a config's first group names them (`<model>_0_<i>`).
#[allow(dead_code)] // not every test crate that shares this module makes instances
pub fn cpu_instances(model: &str, n: usize) -> Vec<InstanceSpec> {
    (0..n)
        .map(|i| InstanceSpec {
            name: format!("{model}_0_{i}"),
            index: i,
            kind: InstanceKind::Cpu,
            device: None,
            cpu_cores: Vec::new(),
            rate_limiter: Default::default(),
        })
        .collect()
}
