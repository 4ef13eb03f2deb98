//! The trace file side of `trace`: the clock trace points are written in, and the thread that
//! writes finished traces (appending to a JSON array kept closed after every write, or one
//! indexed file per group of traces).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::sync::mpsc::{channel, sync_channel, Sender};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `Instant` ↔ CLOCK_MONOTONIC nanoseconds (Triton's steady clock), fixed once.
pub(super) fn clock_anchor() -> (Instant, u64) {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    *ANCHOR.get_or_init(anchor_pair)
}

/// An `Instant` and the CLOCK_MONOTONIC nanoseconds of the same moment: the clock read between
/// two `Instant`s, the closest of a few tries, against their midpoint. A single pair read while
/// the thread was preempted between the two reads would shift every trace time by that pause
/// (a client's own CLOCK_MONOTONIC times then seem to come after the server's).
fn anchor_pair() -> (Instant, u64) {
    let mut best: Option<(Duration, Instant, u64)> = None;
    for _ in 0..16 {
        let before = Instant::now();
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let after = Instant::now();
        let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        let width = after - before;
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, before + width / 2, ns));
        }
        if width < Duration::from_micros(1) {
            break;
        }
    }
    let (_, at, ns) = best.expect("at least one try");
    (at, ns)
}

pub(super) fn ns_of(at: Instant) -> u64 {
    let (anchor, ns) = clock_anchor();
    if at >= anchor {
        ns + (at - anchor).as_nanos() as u64
    } else {
        ns.saturating_sub((anchor - at).as_nanos() as u64)
    }
}

pub(super) enum WriteMsg {
    /// Add one trace to the JSON array in `path`.
    Append {
        path: String,
        json: String,
    },
    /// Write a group of traces to `<path>.<next index>`.
    Indexed {
        path: String,
        json: String,
    },
    Sync(std::sync::mpsc::SyncSender<()>),
}

/// The thread that writes trace files, started with the first trace.
#[derive(Default)]
pub(super) struct Writer {
    tx: OnceLock<Sender<WriteMsg>>,
}

impl Writer {
    pub(super) fn send(&self, msg: WriteMsg) {
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = channel::<WriteMsg>();
            let spawned = std::thread::Builder::new().name("trace-writer".into()).spawn(move || {
                let mut files = TraceFiles::default();
                for msg in rx {
                    files.handle(msg);
                }
            });
            if let Err(e) = spawned {
                tracing::error!("cannot start the trace writer thread: {e}");
            }
            tx
        });
        let _ = tx.send(msg);
    }

    pub(super) fn sync(&self, timeout: Duration) {
        if self.tx.get().is_none() {
            return;
        }
        let (tx, rx) = sync_channel(1);
        self.send(WriteMsg::Sync(tx));
        let _ = rx.recv_timeout(timeout);
    }
}

#[derive(Default)]
struct TraceFiles {
    open: HashMap<String, File>,
    next_index: HashMap<String, u64>,
}

impl TraceFiles {
    fn handle(&mut self, msg: WriteMsg) {
        let (path, result) = match msg {
            WriteMsg::Append { path, json } => {
                let r = self.append(&path, &json);
                (path, r)
            }
            WriteMsg::Indexed { path, json } => {
                let index = self.next_index.entry(path.clone()).or_insert(0);
                let name = format!("{path}.{index}");
                *index += 1;
                let r = std::fs::write(&name, format!("[{json}]"));
                (name, r)
            }
            WriteMsg::Sync(done) => {
                let _ = done.send(());
                return;
            }
        };
        if let Err(e) = result {
            tracing::error!("failed writing trace file {path}: {e}");
        }
    }

    /// Keeps the file a closed array: `[a]`, then `[a,b]` by overwriting the last `]`.
    fn append(&mut self, path: &str, json: &str) -> std::io::Result<()> {
        match self.open.get_mut(path) {
            Some(f) => {
                f.seek(SeekFrom::End(-1))?;
                f.write_all(format!(",{json}]").as_bytes())
            }
            None => {
                let mut f = File::create(path)?;
                f.write_all(format!("[{json}]").as_bytes())?;
                self.open.insert(path.to_string(), f);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_file_is_a_closed_array_after_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let mut files = TraceFiles::default();
        let p = path.to_str().unwrap();
        files.handle(WriteMsg::Append { path: p.into(), json: "{\"id\":1}".into() });
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[{\"id\":1}]");
        files.handle(WriteMsg::Append { path: p.into(), json: "{\"id\":2}".into() });
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[{\"id\":1},{\"id\":2}]");
        files.handle(WriteMsg::Indexed { path: p.into(), json: "{\"id\":3}".into() });
        assert_eq!(std::fs::read_to_string(format!("{p}.0")).unwrap(), "[{\"id\":3}]");
    }

    #[test]
    fn an_instant_maps_onto_the_monotonic_clock_read_beside_it() {
        let read = || {
            let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        // The clock read just before and just after bracket the instant's mapping.
        for _ in 0..100 {
            let before = read();
            let mapped = ns_of(Instant::now());
            let after = read();
            let slack = 50_000; // 50 µs either way: the anchor's own bracket, and a pause here
            assert!(before <= mapped + slack && mapped <= after + slack, "{before} {mapped} {after}");
        }
    }
}
