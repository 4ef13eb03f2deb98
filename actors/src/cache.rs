//! The response cache: Triton's `local` cache (`--cache-config local,size=<bytes>`), one for the
//! whole engine, shared by every model whose config says `response_cache { enable: true }`.
//!
//! A request's key hashes its model name and version (and which load of it this is), then every input (sorted
//! by name) with its datatype, shape and bytes, then the outputs it asked for. Triton hashes the name and the
//! bytes only; the datatype and shape are added so that two tensors with the same bytes and a
//! different shape never share an answer, and the requested outputs so that a request for one
//! output is never answered with another's. The key is 128 bits (two SipHash passes with
//! different prefixes; Triton keeps 64). An entry costs its outputs' bytes plus their names
//! and 8 bytes per dimension; entries past the size evict the least recently used ones, and an
//! entry larger than the whole cache is not kept. Only successful answers are inserted.
//!
//! Lookups happen in front of the scheduler (`ModelHandle::submit`): a hit is answered at once,
//! never queued, executed or counted as an inference; a miss goes on with a `CacheMiss` ticket
//! and the instance inserts its answer.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hasher;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::policy::ModelPolicy;
use crate::request::InferRequest;
use crate::tensor::Tensor;

/// A request's place in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey(u64, u64);

impl CacheKey {
    /// The key of `request` to `policy`'s model version, loaded as the engine's `load`-th load
    /// (a reloaded model's new answers never meet its old ones, nor do two models of one name
    /// from two namespaces).
    pub fn of(load: u64, policy: &ModelPolicy, request: &InferRequest) -> CacheKey {
        let mut halves = [std::hash::DefaultHasher::new(), std::hash::DefaultHasher::new()];
        halves[1].write_u8(0x5a);
        let mut inputs: Vec<&Tensor> = request.inputs.iter().collect();
        inputs.sort_by(|a, b| a.name.cmp(&b.name));
        let mut outputs: Vec<(&str, u32)> = request.outputs.iter().map(|o| (o.name.as_str(), o.class_count)).collect();
        outputs.sort_unstable();
        for h in &mut halves {
            h.write(policy.name.as_bytes());
            h.write_u8(0xff);
            h.write_i64(policy.version);
            h.write_u64(load);
            for t in &inputs {
                h.write(t.name.as_bytes());
                h.write_u8(0xff);
                h.write(t.datatype.as_str().as_bytes());
                h.write_usize(t.shape.len());
                for d in &t.shape {
                    h.write_i64(*d);
                }
                h.write_usize(t.data.len());
                h.write(&t.data);
            }
            h.write_usize(outputs.len());
            for (name, classes) in &outputs {
                h.write(name.as_bytes());
                h.write_u8(0xff);
                h.write_u32(*classes);
            }
        }
        CacheKey(halves[0].finish(), halves[1].finish())
    }
}

/// What an entry costs against the cache size.
fn entry_size(outputs: &[Tensor]) -> u64 {
    outputs.iter().map(|t| (t.data.len() + t.name.len() + 8 * t.shape.len()) as u64).sum()
}

struct Entry {
    outputs: Arc<[Tensor]>,
    size: u64,
    /// Its place in the recency order.
    tick: u64,
}

#[derive(Default)]
struct Lru {
    entries: HashMap<CacheKey, Entry>,
    /// tick → key, oldest first.
    order: BTreeMap<u64, CacheKey>,
    used: u64,
    tick: u64,
}

impl Lru {
    fn touch(&mut self, key: CacheKey) -> Option<Arc<[Tensor]>> {
        self.tick += 1;
        let tick = self.tick;
        let e = self.entries.get_mut(&key)?;
        self.order.remove(&e.tick);
        e.tick = tick;
        self.order.insert(tick, key);
        Some(e.outputs.clone())
    }
}

/// How an insertion went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    Yes,
    /// Another request with the same key got there first (Triton's ALREADY_EXISTS).
    AlreadyThere,
    /// Larger than the whole cache.
    TooLarge,
}

/// The cache's own figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheSnapshot {
    pub entries: u64,
    pub used_bytes: u64,
    pub size_bytes: u64,
    pub lookups: u64,
    pub hits: u64,
    pub evictions: u64,
    /// Time spent in lookups (hits and misses) and in insertions, in ns.
    pub lookup_ns: u64,
    pub insertion_ns: u64,
}

/// The engine's response cache, `size` bytes.
pub struct ResponseCache {
    size: u64,
    lru: Mutex<Lru>,
    lookups: AtomicU64,
    hits: AtomicU64,
    evictions: AtomicU64,
    lookup_ns: AtomicU64,
    insertion_ns: AtomicU64,
}

impl std::fmt::Debug for ResponseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ResponseCache({:?})", self.snapshot())
    }
}

impl ResponseCache {
    pub fn new(size: u64) -> Self {
        ResponseCache {
            size,
            lru: Mutex::new(Lru::default()),
            lookups: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            lookup_ns: AtomicU64::new(0),
            insertion_ns: AtomicU64::new(0),
        }
    }

    /// The outputs cached under `key` (cheap clones: tensor data is shared), now the most
    /// recently used.
    pub fn lookup(&self, key: CacheKey) -> Option<Vec<Tensor>> {
        let start = Instant::now();
        self.lookups.fetch_add(1, Relaxed);
        let found = self.lru.lock().touch(key);
        let found = found.map(|f| {
            self.hits.fetch_add(1, Relaxed);
            f.to_vec()
        });
        self.lookup_ns.fetch_add(start.elapsed().as_nanos() as u64, Relaxed);
        found
    }

    /// Keeps `outputs` under `key`, evicting the least recently used entries to make room.
    pub fn insert(&self, key: CacheKey, outputs: &[Tensor]) -> Inserted {
        let start = Instant::now();
        let inserted = self.insert_timed(key, outputs);
        self.insertion_ns.fetch_add(start.elapsed().as_nanos() as u64, Relaxed);
        inserted
    }

    fn insert_timed(&self, key: CacheKey, outputs: &[Tensor]) -> Inserted {
        let size = entry_size(outputs);
        if size > self.size {
            return Inserted::TooLarge;
        }
        let mut lru = self.lru.lock();
        if lru.entries.contains_key(&key) {
            return Inserted::AlreadyThere;
        }
        while lru.used + size > self.size {
            let Some((_, oldest)) = lru.order.pop_first() else { break };
            if let Some(e) = lru.entries.remove(&oldest) {
                lru.used -= e.size;
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        lru.tick += 1;
        let tick = lru.tick;
        lru.order.insert(tick, key);
        lru.used += size;
        lru.entries.insert(key, Entry { outputs: outputs.to_vec().into(), size, tick });
        Inserted::Yes
    }

    pub fn snapshot(&self) -> CacheSnapshot {
        let lru = self.lru.lock();
        CacheSnapshot {
            entries: lru.entries.len() as u64,
            used_bytes: lru.used,
            size_bytes: self.size,
            lookups: self.lookups.load(Relaxed),
            hits: self.hits.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            lookup_ns: self.lookup_ns.load(Relaxed),
            insertion_ns: self.insertion_ns.load(Relaxed),
        }
    }
}

/// A request that missed the cache: the instance that answers it inserts the answer under
/// `key` and counts the miss (the lookup's time plus the insertion's, as Triton counts it).
#[derive(Debug, Clone)]
pub struct CacheMiss {
    pub cache: Arc<ResponseCache>,
    pub key: CacheKey,
    pub lookup: Duration,
}

impl CacheMiss {
    /// Inserts a successful answer; returns the miss's duration (lookup + insertion).
    pub(crate) fn insert(&self, outputs: &[Tensor]) -> Duration {
        let start = Instant::now();
        let inserted = self.cache.insert(self.key, outputs);
        if inserted == Inserted::TooLarge {
            tracing::debug!(
                "an answer of {} bytes is larger than the response cache ({} bytes): not cached",
                entry_size(outputs),
                self.cache.size
            );
        }
        self.lookup + start.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::policy::{IoSpec, SchedulerPolicy, DEFAULT_QUEUE_CAPACITY};
    use crate::request::RequestedOutput;
    use crate::tensor::DataType;

    fn policy(name: &str, version: i64) -> ModelPolicy {
        ModelPolicy {
            name: name.into(),
            version,
            max_batch_size: 0,
            inputs: vec![IoSpec::new("I", DataType::U8, vec![-1])],
            outputs: vec![IoSpec::new("O", DataType::U8, vec![-1])],
            instances: Vec::new(),
            scheduler: SchedulerPolicy::Direct,
            decoupled: false,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            warmup: Vec::new(),
            response_cache: true,
        }
    }

    fn request(inputs: Vec<Tensor>) -> InferRequest {
        InferRequest::new("m", inputs)
    }

    fn t(name: &str, dt: DataType, shape: Vec<i64>, data: &'static [u8]) -> Tensor {
        Tensor::new(name, dt, shape, Bytes::from_static(data))
    }

    #[test]
    fn the_key_covers_model_version_and_each_inputs_name_type_shape_and_bytes() {
        let p = policy("m", 1);
        let base = request(vec![t("I", DataType::U8, vec![4], b"abcd"), t("J", DataType::U8, vec![1], b"x")]);
        let key = CacheKey::of(0, &p, &base);
        let reordered = request(vec![t("J", DataType::U8, vec![1], b"x"), t("I", DataType::U8, vec![4], b"abcd")]);
        assert_eq!(CacheKey::of(0, &p, &reordered), key, "the order of the inputs does not matter");
        let variants = [
            CacheKey::of(0, &policy("n", 1), &base),
            CacheKey::of(0, &policy("m", 2), &base),
            CacheKey::of(1, &p, &base),
            CacheKey::of(
                0,
                &p,
                &request(vec![t("I", DataType::U8, vec![4], b"abce"), t("J", DataType::U8, vec![1], b"x")]),
            ),
            CacheKey::of(
                0,
                &p,
                &request(vec![t("I", DataType::U8, vec![2, 2], b"abcd"), t("J", DataType::U8, vec![1], b"x")]),
            ),
            CacheKey::of(
                0,
                &p,
                &request(vec![t("I", DataType::I8, vec![4], b"abcd"), t("J", DataType::U8, vec![1], b"x")]),
            ),
            CacheKey::of(
                0,
                &p,
                &request(vec![t("K", DataType::U8, vec![4], b"abcd"), t("J", DataType::U8, vec![1], b"x")]),
            ),
            CacheKey::of(0, &p, &request(vec![t("I", DataType::U8, vec![4], b"abcd")])),
            {
                let mut r = request(base.inputs.clone());
                r.outputs.push(RequestedOutput { name: "O".into(), class_count: 0 });
                CacheKey::of(0, &p, &r)
            },
        ];
        for (i, v) in variants.iter().enumerate() {
            assert_ne!(*v, key, "variant {i}");
        }
    }

    #[test]
    fn least_recently_used_entries_make_room_and_too_large_ones_stay_out() {
        // Each entry: 10 data bytes + 1 name byte + 8 for one dim = 19.
        let cache = ResponseCache::new(40);
        let out = |b: &'static [u8]| vec![t("O", DataType::U8, vec![10], b)];
        let k = |i: u64| CacheKey(i, i);
        assert_eq!(cache.insert(k(1), &out(b"0123456789")), Inserted::Yes);
        assert_eq!(cache.insert(k(2), &out(b"abcdefghij")), Inserted::Yes);
        assert_eq!(cache.insert(k(2), &out(b"abcdefghij")), Inserted::AlreadyThere);
        assert!(cache.lookup(k(1)).is_some(), "1 is now the most recent");
        assert_eq!(cache.insert(k(3), &out(b"ABCDEFGHIJ")), Inserted::Yes);
        assert!(cache.lookup(k(2)).is_none(), "2 was the least recently used");
        assert_eq!(cache.lookup(k(1)).unwrap()[0].data, Bytes::from_static(b"0123456789"));
        assert!(cache.lookup(k(3)).is_some());
        let big = vec![t("O", DataType::U8, vec![41], b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")];
        assert_eq!(cache.insert(k(4), &big), Inserted::TooLarge);
        let s = cache.snapshot();
        assert_eq!((s.entries, s.used_bytes, s.size_bytes, s.evictions), (2, 38, 40, 1));
        assert_eq!((s.lookups, s.hits), (4, 3));
    }
}
