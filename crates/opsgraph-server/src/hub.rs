//! The readers behind event streams: one per followed operation (and one for the stream of all
//! operations), shared by all its subscribers. A hub reads each new timeline entry once, writes
//! it once as server-sent event text, and broadcasts the frames (`Bytes`: every subscriber sends
//! the same buffer). It waits on the store's change signal (`Store::wait_for_timeline`: this
//! process's commits at once, SQLite `data_version` or PostgreSQL `LISTEN` for other processes)
//! with a slow fallback read ([`FALLBACK`]).
//!
//! Nothing is lost between a subscriber's history and the hub: a subscriber reads its history
//! from the store itself, subscribes, then reads the store once more (what the hub had read
//! before it subscribed); from then on every entry the hub broadcasts is one it read after the
//! subscription, and timeline seqs follow commit order. A subscriber that falls behind the
//! channel ([`CAPACITY`] messages) reads what it missed from the store, as a late joiner does.
//!
//! A hub ends when nobody listens, when its operation is terminal and settled (it says `End`
//! after its last entries), when the store fails (its subscribers' streams end, as a failed read
//! ends a stream) or when the server shuts down.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use opsgraph_core::plan::lifecycle::{is_terminal, state_name};
use opsgraph_store::{JobState, OperationRecord, Store, TimelineEntry};
use tokio::sync::broadcast;

use crate::error::ApiError;
use crate::AppState;

/// Messages a subscriber may fall behind by before it reads from the store instead.
const CAPACITY: usize = 1024;
/// The most entries read (and broadcast together) per query.
pub(crate) const BATCH: usize = 500;
/// The longest a hub waits for the change signal before it reads anyway (a writer the signal
/// does not reach), and before it looks whether anybody still listens.
const FALLBACK: Duration = Duration::from_millis(500);
/// The least time between two reads of a hub: entries committed meanwhile go out together, one
/// write per stream instead of one per commit (1,000 streams of a run committing hundreds of
/// times a second spent their time in socket writes; docs/benchmarks.md). An idle hub reads at
/// once when woken.
const GATHER: Duration = Duration::from_millis(20);

/// What a hub broadcasts.
#[derive(Clone)]
pub(crate) enum Msg {
    /// Entries read together, in seq order: the frames as one buffer, and each entry's seq with
    /// the offset its frame starts at.
    Entries(Frames),
    /// (One operation) it is terminal and settled, and every entry was broadcast before this.
    End { state: &'static str },
}

/// Server-sent event frames of consecutive entries (of one operation, or of all).
#[derive(Clone)]
pub(crate) struct Frames {
    starts: Arc<[(i64, usize)]>,
    bytes: Bytes,
    /// When they were written (for `stages.rs`).
    pub(crate) read: Instant,
}

impl Frames {
    /// The entries' frames, each `id: SEQ` and `data: JSON` (the entry as the timeline route
    /// shows it, and its operation).
    pub(crate) fn write(entries: &[TimelineEntry]) -> Frames {
        let mut text = String::with_capacity(entries.len() * 320);
        let mut starts = Vec::with_capacity(entries.len());
        for entry in entries {
            starts.push((entry.seq, text.len()));
            let data = Streamed { entry: opsgraph_api::views::timeline_entry(entry), operation: &entry.operation };
            text.push_str("id: ");
            text.push_str(&entry.seq.to_string());
            text.push_str("\ndata: ");
            text.push_str(&serde_json::to_string(&data).unwrap_or_default());
            text.push_str("\n\n");
        }
        Frames { starts: starts.into(), bytes: Bytes::from(text), read: Instant::now() }
    }

    /// How many of the entries come after `seq` (for `stages.rs`).
    pub(crate) fn count_after(&self, seq: i64) -> usize {
        self.starts.iter().filter(|(s, _)| *s > seq).count()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The frames of the entries after `seq`, and the last seq among them (`None`: none).
    pub(crate) fn after(&self, seq: i64) -> Option<(Bytes, i64)> {
        let first = self.starts.iter().position(|(s, _)| *s > seq)?;
        let last = self.starts.last().map(|(s, _)| *s)?;
        Some((self.bytes.slice(self.starts[first].1..), last))
    }
}

/// An event's data: the entry as the timeline route shows it, and its operation, written
/// straight to text.
#[derive(serde::Serialize)]
struct Streamed<'a> {
    #[serde(flatten)]
    entry: opsgraph_api::TimelineView,
    operation: &'a str,
}

/// The hubs of a server: by operation (`None`: all operations), each with the number that tells
/// it from a later hub of the same key.
#[derive(Default)]
pub(crate) struct Hubs {
    live: std::collections::HashMap<Option<String>, (u64, broadcast::Sender<Msg>)>,
    next: u64,
}

/// Subscribes to the hub of `operation`, starting one that reads after `from` when there is
/// none (the caller has read the store up to `from`, and reads it once more after this).
pub(crate) fn subscribe(
    state: &AppState,
    operation: Option<&str>,
    from: i64,
) -> Result<broadcast::Receiver<Msg>, ApiError> {
    let key = operation.map(str::to_string);
    let mut hubs = state.0.hubs.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, tx)) = hubs.live.get(&key) {
        return Ok(tx.subscribe());
    }
    let (tx, rx) = broadcast::channel(CAPACITY);
    hubs.next += 1;
    let number = hubs.next;
    hubs.live.insert(key.clone(), (number, tx.clone()));
    let hub = Hub { state: state.clone(), key: key.clone(), number, tx };
    let spawned = std::thread::Builder::new().name("event hub".into()).spawn(move || hub.run(from));
    if let Err(e) = spawned {
        hubs.live.remove(&key);
        return Err(ApiError::internal("failed to start an event hub thread", &e));
    }
    Ok(rx)
}

struct Hub {
    state: AppState,
    key: Option<String>,
    number: u64,
    tx: broadcast::Sender<Msg>,
}

impl Hub {
    /// Takes this hub out of the server's (so the next subscriber starts another) unless
    /// somebody subscribed meanwhile and `only_if_unheard`; true when it did.
    fn leave(&self, only_if_unheard: bool) -> bool {
        let mut hubs = self.state.0.hubs.lock().unwrap_or_else(|e| e.into_inner());
        if only_if_unheard && self.tx.receiver_count() > 0 {
            return false;
        }
        if hubs.live.get(&self.key).is_some_and(|(n, _)| *n == self.number) {
            hubs.live.remove(&self.key);
        }
        true
    }

    fn run(self, from: i64) {
        let store = match self.state.store() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "event hub: the store does not open");
                self.leave(false);
                return;
            }
        };
        if let Err(e) = self.follow(store, from) {
            tracing::warn!(operation = ?self.key, error = %e, "event hub: reading the store failed; its streams end");
        }
        self.leave(false);
    }

    fn follow(&self, mut store: Box<dyn Store>, mut after: i64) -> Result<(), opsgraph_store::Error> {
        let operation = self.key.as_deref();
        // The first wait arms the signal (it says true at once).
        store.wait_for_timeline(Duration::ZERO)?;
        let mut read_at = Instant::now().checked_sub(GATHER).unwrap_or_else(Instant::now);
        loop {
            if self.state.0.closing.load(Ordering::SeqCst) {
                return Ok(());
            }
            if self.tx.receiver_count() == 0 && self.leave(true) {
                return Ok(());
            }
            // The state and the jobs are read before the entries: when the operation is terminal
            // and settled here, its last entry is in what the next queries return.
            let terminal = match operation {
                Some(id) => match store.operation(id)? {
                    Some(op) => (is_terminal(&op.state) && settled(&self.state, &*store, &op))
                        .then(|| state_name(op.state.kind())),
                    None => return Ok(()),
                },
                None => None,
            };
            let since = read_at.elapsed();
            if since < GATHER {
                std::thread::sleep(GATHER - since);
            }
            read_at = Instant::now();
            let batch = store.timeline_after(operation, after, BATCH)?;
            let full = batch.len() == BATCH;
            if let Some(last) = batch.last() {
                if crate::stages::on() {
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                    let now = now.as_secs_f64() * 1e3;
                    for e in &batch {
                        if let Some(at) = opsgraph_store::parse_rfc3339(&e.at) {
                            crate::stages::record(0, now - at as f64, 1);
                        }
                    }
                    crate::stages::record(3, batch.len() as f64, 1);
                }
                after = last.seq;
                // No receiver: the send fails, and the next round looks why.
                let _ = self.tx.send(Msg::Entries(Frames::write(&batch)));
            }
            if full {
                continue;
            }
            if let Some(state) = terminal {
                // Out of the server's first: whoever subscribed before hears `End`, whoever comes
                // after starts a hub of its own (which finds the operation terminal too).
                self.leave(false);
                let _ = self.tx.send(Msg::End { state });
                return Ok(());
            }
            store.wait_for_timeline(FALLBACK)?;
        }
    }
}

/// Whether nothing more will be written about a terminal operation. A cancelled run's attempts
/// are stopped after its `cancel` entry, each then recorded with a `job_cancelled` entry (in the
/// transaction of its job record): until then the stream goes on. An attempt left `running` by
/// a crash stays so, and nobody drives its operation: then it is settled too.
fn settled(state: &AppState, store: &dyn Store, op: &OperationRecord) -> bool {
    match store.jobs(&op.id) {
        Ok(jobs) if jobs.iter().all(|j| j.state != JobState::Running) => true,
        Ok(_) => !driven(state, store, op),
        Err(e) => {
            tracing::warn!(operation = %op.id, error = %e, "event stream: reading the jobs failed");
            true
        }
    }
}

/// Whether a driver of this server runs the operation: its own, or the one of an operation it
/// belongs to (sub-operations are driven by their root's driver).
fn driven(state: &AppState, store: &dyn Store, op: &OperationRecord) -> bool {
    let mut id = Some(op.id.clone());
    let mut parent = op.parent.clone();
    for _ in 0..64 {
        let Some(this) = id else { return false };
        if state.0.drivers.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&this) {
            return true;
        }
        id = parent.take();
        parent = match &id {
            Some(p) => store.operation(p).ok().flatten().and_then(|o| o.parent),
            None => None,
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: i64) -> TimelineEntry {
        TimelineEntry {
            seq,
            operation: "op-1".into(),
            at: "2026-01-01T00:00:00Z".into(),
            actor: "test".into(),
            event: "note".into(),
            from: None,
            to: None,
            reason: format!("r{seq}"),
            data: serde_json::Value::Null,
        }
    }

    /// A subscriber that already sent some of a batch sends the rest, from the right frame.
    #[test]
    fn frames_after_a_seq_are_the_later_entries_frames() {
        let frames = Frames::write(&[entry(3), entry(7), entry(9)]);
        let check = |seq: i64, expect: Option<(&str, i64)>| {
            let got = frames.after(seq);
            let got = got.as_ref().map(|(b, last)| (std::str::from_utf8(b).unwrap(), *last));
            let ids: Option<(Vec<&str>, i64)> =
                got.map(|(text, last)| (text.lines().filter(|l| l.starts_with("id: ")).collect(), last));
            let want = expect.map(|(ids, last)| (ids.split(',').collect::<Vec<_>>(), last));
            assert_eq!(ids, want, "after {seq}");
        };
        check(0, Some(("id: 3,id: 7,id: 9", 9)));
        check(3, Some(("id: 7,id: 9", 9)));
        check(8, Some(("id: 9", 9)));
        check(9, None);
        let text = std::str::from_utf8(&frames.bytes).unwrap();
        assert!(text.starts_with("id: 3\ndata: {\"seq\":3,"), "{text}");
        assert!(text.ends_with("\"operation\":\"op-1\"}\n\n"), "{text}");
        assert_eq!(text.matches("\n\n").count(), 3, "{text}");
    }
}
