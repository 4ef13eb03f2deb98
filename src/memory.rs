//! Giving freed memory back to the system. The C allocator keeps the memory of freed blocks
//! for reuse, so a burst that went away — 10,000 sequence STARTs waiting in a backlog whose
//! clients all cancelled, a crowd of large bodies — would leave the server's RSS at its peak
//! for good although nothing holds it. Every few seconds the trimmer looks at how much the
//! allocator holds free and at the process's resident size. When at least [`TRIM_AFTER`] is
//! free and the resident size has grown by [`TRIM_AFTER`] since its low point (the free blocks
//! may be the pages that growth touched), it returns the free pages to the system
//! (`malloc_trim`, through `tritium_ffi::heap`), and at the next looks returns what the same
//! burst frees as it goes on. Pages already returned still count as free blocks to the
//! allocator, so free memory alone cannot say whether a burst made them resident again; the
//! resident size can, whatever moment of the burst the looks fall on. Memory reused between
//! looks leaves the resident size where it was and is never trimmed, so steady traffic pays
//! nothing for it.

use std::time::Duration;

use tritium_ffi::heap;

/// How often the trimmer looks.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);
/// Free memory, and growth of the resident size since its low point, beyond which the free
/// memory is returned.
pub const TRIM_AFTER: usize = 64 << 20;
/// After a trim, more free memory than this at the next look is the same burst still going away,
/// and is returned too, until a look finds no more.
pub const TRIM_TAIL: usize = 4 << 20;

/// What the trimmer remembers between looks: the least resident size seen since it last
/// trimmed, what was free just after that trim, and whether it is following a burst that is
/// still going away.
#[derive(Debug, Default)]
pub struct Trimmer {
    resident_low: Option<usize>,
    free_after_trim: usize,
    following: bool,
}

impl Trimmer {
    /// Given how much the allocator holds free and how much of the process is resident now,
    /// whether to trim.
    pub fn should_trim(&mut self, free: usize, resident: usize) -> bool {
        let low = self.resident_low.map_or(resident, |l| l.min(resident));
        self.resident_low = Some(low);
        let burst = free >= TRIM_AFTER && resident.saturating_sub(low) >= TRIM_AFTER;
        let tail = self.following && free.saturating_sub(self.free_after_trim) >= TRIM_TAIL;
        self.following &= tail || burst;
        burst || tail
    }

    /// After a trim: what is free and resident then are the new reference points, and the next
    /// look follows the burst.
    pub fn trimmed(&mut self, free_after: usize, resident_after: usize) {
        self.resident_low = Some(resident_after);
        self.free_after_trim = free_after;
        self.following = true;
    }
}

/// The process's resident size in bytes (`VmRSS` of /proc/self/status), where the system says.
fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// Starts the trimmer on the current runtime (where the allocator does not say what it holds
/// free, or the system the resident size, it does nothing).
pub fn spawn_trimmer() {
    if heap::free_heap_bytes().is_none() || resident_bytes().is_none() {
        return;
    }
    actix_rt::spawn(async {
        let mut trimmer = Trimmer::default();
        let mut tick = tokio::time::interval(CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (Some(free), Some(resident)) = (heap::free_heap_bytes(), resident_bytes()) else { return };
            if trimmer.should_trim(free, resident) {
                let released = heap::trim_heap();
                let free_after = heap::free_heap_bytes().unwrap_or(free);
                let resident_after = resident_bytes().unwrap_or(resident);
                trimmer.trimmed(free_after, resident_after);
                tracing::debug!(
                    "{} MiB of freed memory given back to the system ({released}); resident {} -> {} MiB",
                    free >> 20,
                    resident >> 20,
                    resident_after >> 20
                );
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn trims_once_resident_memory_grew_and_is_free_then_follows_the_burst_to_its_end() {
        let mut t = Trimmer::default();
        assert!(!t.should_trim(MIB, 180 * MIB), "the first look sets the low point");
        assert!(!t.should_trim(MIB, 300 * MIB), "grown by 120 MiB, but all of it in use");
        assert!(!t.should_trim(50 * MIB, 300 * MIB), "50 MiB free: not yet");
        assert!(t.should_trim(100 * MIB, 300 * MIB), "100 MiB free of 120 grown");
        t.trimmed(100 * MIB, 200 * MIB);
        assert!(t.should_trim(120 * MIB, 200 * MIB), "the burst's tail, 20 MiB more, is returned too");
        t.trimmed(120 * MIB, 180 * MIB);
        assert!(!t.should_trim(122 * MIB, 180 * MIB), "2 MiB more: the burst is over");
        assert!(!t.should_trim(130 * MIB, 182 * MIB), "no longer following: 10 MiB is steady traffic's");
        assert!(!t.should_trim(120 * MIB, 230 * MIB), "steady traffic reusing returned pages: 50 MiB");
    }

    #[test]
    fn a_burst_that_reuses_returned_pages_is_trimmed_whatever_moment_the_looks_fall_on() {
        // The failure the free-memory-only rule had: after one burst was trimmed, its 126 MiB of
        // returned pages still count as free; the next burst's look falls half-way through its
        // growth (73 MiB still free), and when it goes away free is back at only 129 MiB.
        let mut t = Trimmer::default();
        assert!(!t.should_trim(MIB, 177 * MIB));
        assert!(t.should_trim(126 * MIB, 306 * MIB));
        t.trimmed(126 * MIB, 180 * MIB);
        assert!(!t.should_trim(73 * MIB, 237 * MIB), "half-way through the next burst");
        assert!(t.should_trim(129 * MIB, 311 * MIB), "the next burst went away: returned as the first");
    }
}
