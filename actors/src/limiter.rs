//! The rate limiter (`--rate-limit execution_count`), as Triton's: one for the whole engine.
//! Each instance may list resources it needs while it executes (`instance_group { rate_limiter
//! { resources [ { name count global } ] priority } }`); an instance runs a batch only once it
//! holds them, and gives them back when the batch is answered.
//!
//! Resources are per device (a CPU instance's device is 0, as in Triton) unless `global`. A
//! resource's copies are, by default, the most any registered instance asks for; with
//! `--rate-limit-resource <name>:<count>[:<device>]` they are the count given (the device's, or
//! the one given for every device), and a resource an instance needs that no flag gives, or
//! gives too few of, fails that model's load with Triton's text.
//!
//! Instances waiting for their resources are served in order of their scaled priority, the
//! executions they have run times their `priority` (0 counts as 1), the lowest first; equal
//! ones in arrival order. As in Triton, only the first waiter can be served: another whose
//! resources are free waits behind it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::backend::InstanceSpec;
pub use crate::backend::{RateLimiterSpec, ResourceSpec};
use crate::error::{Error, Result};

/// `--rate-limit-resource <name>:<count>[:<device>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplicitResource {
    pub name: String,
    pub count: u64,
    /// None: every device.
    pub device: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Place {
    Global,
    Device(i32),
}

type Pool = (Place, String);

struct Member {
    needs: Vec<(Pool, u64)>,
    priority: u64,
    executions: u64,
}

#[derive(Default)]
struct State {
    members: HashMap<u64, Member>,
    /// Copies of each resource.
    max: HashMap<Pool, u64>,
    used: HashMap<Pool, u64>,
    /// (scaled priority, arrival, member) of every instance waiting for its resources.
    waiting: BTreeSet<(u64, u64, u64)>,
    next_id: u64,
    next_arrival: u64,
}

impl State {
    fn fits(&self, needs: &[(Pool, u64)]) -> bool {
        needs
            .iter()
            .all(|(pool, n)| self.used.get(pool).copied().unwrap_or(0) + n <= self.max.get(pool).copied().unwrap_or(0))
    }
}

/// A model version's instances as the rate limiter knows them: member ids by instance index.
pub(crate) type Limits = Option<(Arc<RateLimiter>, Vec<u64>)>;

/// The engine's rate limiter.
pub struct RateLimiter {
    explicit: Vec<ExplicitResource>,
    state: Mutex<State>,
    changed: Condvar,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RateLimiter({} members)", self.state.lock().members.len())
    }
}

/// The resources an instance holds while it executes; dropping it gives them back.
pub struct Grant {
    limiter: Arc<RateLimiter>,
    member: u64,
    needs: Vec<(Pool, u64)>,
}

impl Drop for Grant {
    fn drop(&mut self) {
        let mut s = self.limiter.state.lock();
        for (pool, n) in &self.needs {
            if let Some(used) = s.used.get_mut(pool) {
                *used = used.saturating_sub(*n);
            }
        }
        if let Some(m) = s.members.get_mut(&self.member) {
            m.executions += 1;
        }
        drop(s);
        self.limiter.changed.notify_all();
    }
}

impl RateLimiter {
    pub fn new(explicit: Vec<ExplicitResource>) -> Self {
        RateLimiter { explicit, state: Mutex::new(State::default()), changed: Condvar::new() }
    }

    /// Registers a model version's instances (in `instances` order) and answers their member
    /// ids; fails, registering none, when the resources they need cannot be given.
    pub fn register(&self, model: &str, instances: &[InstanceSpec]) -> Result<Vec<u64>> {
        let mut s = self.state.lock();
        let mut ids = Vec::with_capacity(instances.len());
        for spec in instances {
            let needs = spec
                .rate_limiter
                .resources
                .iter()
                .map(|r| {
                    let place = if r.global { Place::Global } else { Place::Device(spec.device.unwrap_or(0)) };
                    ((place, r.name.clone()), r.count)
                })
                .collect();
            let id = s.next_id;
            s.next_id += 1;
            s.members
                .insert(id, Member { needs, priority: u64::from(spec.rate_limiter.priority.max(1)), executions: 0 });
            ids.push(id);
        }
        match self.resize(&mut s) {
            Ok(()) => {
                let mut pools: Vec<String> = s
                    .max
                    .iter()
                    .map(|((place, name), n)| match place {
                        Place::Global => format!("{name}: {n} (global)"),
                        Place::Device(d) => format!("{name}: {n} (device {d})"),
                    })
                    .collect();
                pools.sort();
                tracing::debug!("rate limiter: model '{model}' registered; resources [{}]", pools.join(", "));
                Ok(ids)
            }
            Err(e) => {
                for id in &ids {
                    s.members.remove(id);
                }
                // Back to what it was before (it fitted then).
                let _ = self.resize(&mut s);
                Err(Error::invalid(format!("model '{model}': {}", e.message)))
            }
        }
    }

    /// Forgets an unloaded model version's instances.
    pub fn unregister(&self, ids: &[u64]) {
        let mut s = self.state.lock();
        for id in ids {
            s.members.remove(id);
        }
        let _ = self.resize(&mut s);
        drop(s);
        self.changed.notify_all();
    }

    /// Recomputes every resource's copies from the members' needs and the explicit counts
    /// (Triton's `ParseAndValidateResources`).
    fn resize(&self, s: &mut State) -> Result<()> {
        let mut needed: HashMap<Pool, u64> = HashMap::new();
        for m in s.members.values() {
            for (pool, n) in &m.needs {
                let e = needed.entry(pool.clone()).or_default();
                *e = (*e).max(*n);
            }
        }
        for (place, name) in needed.keys() {
            if *place == Place::Global && needed.keys().any(|(p, n)| n == name && *p != Place::Global) {
                return Err(Error::invalid(format!(
                    "Resource \"{name}\" is present as both global and device-specific resource in the model configuration."
                )));
            }
        }
        if !self.explicit.is_empty() {
            for ((place, name), n) in needed.iter_mut() {
                let given = self
                    .explicit
                    .iter()
                    .filter(|e| &e.name == name)
                    .filter(|e| match place {
                        Place::Global => true,
                        Place::Device(d) => e.device.is_none() || e.device == Some(*d),
                    })
                    .map(|e| e.count)
                    .max()
                    .unwrap_or(0);
                if given < *n {
                    return Err(Error::invalid(format!(
                        "Resource count for \"{name}\" is limited to {given} which will prevent scheduling of one or more model instances, the minimum required count is {n}"
                    )));
                }
                *n = given;
            }
        }
        s.max = needed;
        Ok(())
    }

    /// Waits until the member's turn has come and its resources are free, and takes them.
    pub fn acquire(self: &Arc<Self>, member: u64) -> Grant {
        let mut s = self.state.lock();
        let Some(m) = s.members.get(&member) else {
            return Grant { limiter: self.clone(), member, needs: Vec::new() };
        };
        let needs = m.needs.clone();
        let place = (m.executions.saturating_mul(m.priority), s.next_arrival, member);
        s.next_arrival += 1;
        s.waiting.insert(place);
        loop {
            if s.waiting.first() == Some(&place) && s.fits(&needs) {
                s.waiting.remove(&place);
                for (pool, n) in &needs {
                    *s.used.entry(pool.clone()).or_default() += n;
                }
                drop(s);
                // The next waiter may be served too (it needs other resources, or none).
                self.changed.notify_all();
                return Grant { limiter: self.clone(), member, needs };
            }
            self.changed.wait(&mut s);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::backend::InstanceKind;

    fn spec(index: usize, resources: &[(&str, bool, u64)], priority: u32) -> InstanceSpec {
        InstanceSpec {
            name: format!("m_{index}"),
            index,
            kind: InstanceKind::Cpu,
            device: None,
            cpu_cores: Vec::new(),
            rate_limiter: RateLimiterSpec {
                resources: resources
                    .iter()
                    .map(|(n, g, c)| ResourceSpec { name: n.to_string(), global: *g, count: *c })
                    .collect(),
                priority,
            },
        }
    }

    #[test]
    fn explicit_counts_must_cover_every_instance_and_a_resource_is_global_or_per_device() {
        let l = RateLimiter::new(vec![ExplicitResource { name: "R".into(), count: 2, device: None }]);
        l.register("a", &[spec(0, &[("R", false, 2)], 0)]).unwrap();
        let e = l.register("b", &[spec(0, &[("R", false, 3)], 0)]).unwrap_err();
        assert!(e.message.contains("Resource count for \"R\" is limited to 2"), "{e}");
        assert!(e.message.contains("the minimum required count is 3"), "{e}");
        let e = l.register("c", &[spec(0, &[("S", false, 1)], 0)]).unwrap_err();
        assert!(e.message.contains("\"S\" is limited to 0"), "{e}");
        let open = RateLimiter::new(Vec::new());
        open.register("a", &[spec(0, &[("R", false, 1)], 0)]).unwrap();
        let e = open.register("b", &[spec(0, &[("R", true, 1)], 0)]).unwrap_err();
        assert!(e.message.contains("present as both global and device-specific"), "{e}");
        // The failed registration left the first one as it was.
        let ids = open.register("c", &[spec(0, &[("R", false, 1)], 0)]).unwrap();
        assert_eq!(ids.len(), 1);
    }

    #[test]
    fn a_resource_of_one_copy_is_held_by_one_instance_at_a_time() {
        let l = Arc::new(RateLimiter::new(Vec::new()));
        let ids = l.register("m", &[spec(0, &[("R", false, 1)], 0), spec(1, &[("R", false, 1)], 0)]).unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = ids
            .iter()
            .map(|&id| {
                let (l, spans) = (l.clone(), spans.clone());
                std::thread::spawn(move || {
                    for _ in 0..3 {
                        let _g = l.acquire(id);
                        let start = Instant::now();
                        std::thread::sleep(Duration::from_millis(10));
                        spans.lock().push((start, Instant::now()));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut spans = spans.lock().clone();
        spans.sort();
        assert_eq!(spans.len(), 6);
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "overlap: {spans:?}");
    }

    #[test]
    fn the_waiter_with_fewer_weighted_executions_goes_first() {
        let l = Arc::new(RateLimiter::new(Vec::new()));
        let ids = l
            .register(
                "m",
                &[spec(0, &[("R", true, 1)], 0), spec(1, &[("R", true, 1)], 0), spec(2, &[("R", true, 1)], 4)],
            )
            .unwrap();
        // Instance 1 has run twice, instance 2 once at priority 4 (weighs 4), instance 0 never.
        drop(l.acquire(ids[1]));
        drop(l.acquire(ids[1]));
        drop(l.acquire(ids[2]));
        let held = l.acquire(ids[0]);
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiters: Vec<_> = [ids[2], ids[1]]
            .into_iter()
            .map(|id| {
                let (l, order) = (l.clone(), order.clone());
                let t = std::thread::spawn(move || {
                    let _g = l.acquire(id);
                    order.lock().push(id);
                });
                // Both wait before the resource comes free.
                std::thread::sleep(Duration::from_millis(30));
                t
            })
            .collect();
        drop(held);
        for t in waiters {
            t.join().unwrap();
        }
        assert_eq!(*order.lock(), vec![ids[1], ids[2]], "2 executions x 1 before 1 execution x 4");
    }
}
