//! The name → region table that the system and the CUDA registries each keep: lookups take a
//! read lock, registration checks the name again under the write lock (two registrations of one
//! name may race), and an empty name means every region, as in Triton's unregister and status.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;
use tritium_actors::{Error, Result};

pub(super) struct Table<R> {
    regions: RwLock<BTreeMap<String, Arc<R>>>,
}

impl<R> Default for Table<R> {
    fn default() -> Self {
        Table { regions: RwLock::new(BTreeMap::new()) }
    }
}

impl<R> Table<R> {
    pub(super) fn contains(&self, name: &str) -> bool {
        self.regions.read().contains_key(name)
    }

    pub(super) fn get(&self, name: &str) -> Option<Arc<R>> {
        self.regions.read().get(name).cloned()
    }

    /// Adds `region` under `name`, unless the name was taken meanwhile.
    pub(super) fn insert(&self, name: &str, region: R) -> Result<()> {
        let mut regions = self.regions.write();
        if regions.contains_key(name) {
            return Err(super::already_registered(name));
        }
        regions.insert(name.into(), Arc::new(region));
        Ok(())
    }

    /// Removes one region, or every region when `name` is empty; an unknown name is not an error.
    /// A request that holds a region keeps it until it is done.
    pub(super) fn remove(&self, name: &str) {
        let mut regions = self.regions.write();
        if name.is_empty() {
            regions.clear();
        } else {
            regions.remove(name);
        }
    }

    /// `status` of one region, or of every region when `name` is empty; `kind` names the kind of
    /// region in the error for an unknown name ("system", "cuda": Triton's texts).
    pub(super) fn status<S>(&self, name: &str, kind: &str, status: impl Fn(&R) -> S) -> Result<Vec<S>> {
        let regions = self.regions.read();
        if name.is_empty() {
            return Ok(regions.values().map(|r| status(r)).collect());
        }
        regions
            .get(name)
            .map(|r| vec![status(r)])
            .ok_or_else(|| Error::not_found(format!("Unable to find {kind} shared memory region: '{name}'")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_taken_once_and_an_empty_name_means_every_region() {
        let table = Table::default();
        table.insert("a", 1).unwrap();
        table.insert("b", 2).unwrap();
        let e = table.insert("a", 3).unwrap_err();
        assert_eq!(e.kind, tritium_actors::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(table.get("a").as_deref(), Some(&1));
        assert_eq!(table.status("", "system", |r| *r).unwrap(), vec![1, 2]);
        assert_eq!(table.status("b", "system", |r| *r).unwrap(), vec![2]);
        let e = table.status("c", "cuda", |r| *r).unwrap_err();
        assert_eq!(e.message, "Unable to find cuda shared memory region: 'c'");
        table.remove("c");
        table.remove("a");
        assert!(!table.contains("a") && table.contains("b"));
        table.remove("");
        assert!(table.status("", "system", |r| *r).unwrap().is_empty());
    }
}
