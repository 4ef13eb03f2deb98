//! Giving freed memory back to the system. The C allocator keeps the memory of freed blocks
//! for reuse, so a burst that went away — 10,000 sequence STARTs waiting in a backlog whose
//! clients all cancelled, a crowd of large bodies — would leave the server's RSS at its peak
//! for good although nothing holds it. Every few seconds the trimmer looks at how much the
//! allocator holds free; once that has grown by [`TRIM_AFTER`] since its low point, it returns
//! the free pages to the system (`malloc_trim`, through `tritium_ffi::heap`), and at the next
//! looks what the same burst frees as it goes on. Memory that is reused between looks is never
//! trimmed, so steady traffic pays nothing for it.

use std::time::Duration;

use tritium_ffi::heap;

/// How often the trimmer looks.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);
/// Free memory that appeared since the low point, beyond which it is returned.
pub const TRIM_AFTER: usize = 64 << 20;
/// After a trim, more free memory than this at the next look is the same burst still going away,
/// and is returned too, until a look finds no more.
pub const TRIM_TAIL: usize = 4 << 20;

/// What the trimmer remembers between looks: the least free memory seen since it last trimmed,
/// and whether it is following a burst that is still going away.
#[derive(Debug, Default)]
pub struct Trimmer {
    low: Option<usize>,
    following: bool,
}

impl Trimmer {
    /// Given how much is free now, whether to trim.
    pub fn should_trim(&mut self, free: usize) -> bool {
        let low = self.low.map_or(free, |l| l.min(free));
        self.low = Some(low);
        let grown = free.saturating_sub(low);
        let trim = grown >= TRIM_AFTER || (self.following && grown >= TRIM_TAIL);
        self.following &= trim;
        trim
    }

    /// After a trim: the free figure then read is the new low point (released pages still count
    /// as free blocks to the allocator), and the next look follows the burst.
    pub fn trimmed(&mut self, free_after: usize) {
        self.low = Some(free_after);
        self.following = true;
    }
}

/// Starts the trimmer on the current runtime (where the allocator does not say what it holds
/// free, it does nothing).
pub fn spawn_trimmer() {
    if heap::free_heap_bytes().is_none() {
        return;
    }
    actix_rt::spawn(async {
        let mut trimmer = Trimmer::default();
        let mut tick = tokio::time::interval(CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(free) = heap::free_heap_bytes() else { return };
            if trimmer.should_trim(free) {
                let released = heap::trim_heap();
                let after = heap::free_heap_bytes().unwrap_or(free);
                trimmer.trimmed(after);
                tracing::debug!("{} MiB of freed memory given back to the system ({released})", free >> 20);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_free_memory_grew_past_the_threshold_then_follows_the_burst_to_its_end() {
        let mut t = Trimmer::default();
        assert!(!t.should_trim(10 << 20), "the first look sets the low point");
        assert!(!t.should_trim(60 << 20), "grown by 50 MiB: not yet");
        assert!(!t.should_trim(5 << 20), "reused: a lower low point");
        assert!(t.should_trim(70 << 20), "grown by 65 MiB from the low point");
        t.trimmed(70 << 20);
        assert!(t.should_trim(90 << 20), "the burst's tail, 20 MiB more, is returned too");
        t.trimmed(90 << 20);
        assert!(!t.should_trim(92 << 20), "2 MiB more: the burst is over");
        assert!(!t.should_trim(100 << 20), "no longer following: 10 MiB is steady traffic's");
        assert!(!t.should_trim(90 << 20));
        assert!(t.should_trim(155 << 20), "a new burst");
    }
}
