//! A running attempt's live log shared through the blob store, for the server replicas that do
//! not drive it: each has a data directory of its own, so the driver's file is not theirs to read
//! (docs/operations.md, "PostgreSQL and several replicas").
//!
//! The choice: one thread of the driver's process, started while an attempt it shares runs and
//! gone when none does, reads what each live log file gained every [`EVERY`] and adds it to the
//! store ([`BlobStore::put_live`]: one statement, that also forgets what is more than
//! [`LIVE_KEEP`] behind). Nothing of it is on a job's path: the executor's reading thread writes
//! the file as before, and a store that is slow or down delays or stops only the view of the
//! other replicas (the file, and the final log, are unchanged). Stores whose readers share the
//! data directory (SQLite's files) share nothing ([`BlobStore::shares_live_logs`]). Once the
//! attempt's output ended its piece is closed: nothing more is shared after that, so the final
//! log, which removes the shared pieces in the statement that stores it, is not followed by one.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use opsgraph_store::{BlobStore, LogKey};

use super::{read_raw, LIVE_KEEP};

/// How often the output the live logs gained is shared: how far the other replicas' view is
/// behind the driver's.
pub(crate) const EVERY: Duration = Duration::from_millis(250);

/// The sharing of a runtime's live logs, when its blob store shares them.
pub(crate) struct Sharing {
    blobs: Arc<dyn BlobStore>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    logs: Vec<Arc<Mutex<Log>>>,
    /// Whether the sharing thread runs.
    running: bool,
}

/// One attempt's live log as shared so far.
struct Log {
    key: LogKey,
    path: PathBuf,
    /// The offset the next share starts from.
    next: u64,
    /// Its output ended: nothing more is shared.
    closed: bool,
}

/// What an attempt's live log is shared as: its key (operation, job, attempt) and the sharing.
#[derive(Clone)]
pub(crate) struct ShareAs {
    pub(crate) sharing: Arc<Sharing>,
    pub(crate) key: LogKey,
}

/// An attempt's live log while it is shared: closed when its output ends or when dropped.
pub(crate) struct Shared(Arc<Mutex<Log>>);

impl Shared {
    /// Nothing more of this log is shared; returns once a share in progress has ended.
    pub(crate) fn close(&self) {
        lock(&self.0).closed = true;
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.close();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sharing {
    /// The sharing of live logs through `blobs`; `None` when it shares none.
    pub(crate) fn new(blobs: Arc<dyn BlobStore>) -> Option<Arc<Sharing>> {
        blobs.shares_live_logs().then(|| Arc::new(Sharing { blobs, state: Mutex::default() }))
    }

    /// Shares the live log at `path` as `key` until the returned handle is closed or dropped.
    pub(crate) fn share(self: &Arc<Self>, key: LogKey, path: PathBuf) -> Shared {
        let log = Arc::new(Mutex::new(Log { key, path, next: 0, closed: false }));
        let mut state = lock(&self.state);
        state.logs.push(log.clone());
        if !state.running {
            let me = self.clone();
            // Without a thread nothing is shared: the other replicas see the final log only.
            state.running = std::thread::Builder::new().name("live share".into()).spawn(move || me.run()).is_ok();
        }
        Shared(log)
    }

    fn run(self: Arc<Self>) {
        loop {
            std::thread::sleep(EVERY);
            let logs = {
                let mut state = lock(&self.state);
                state.logs.retain(|l| !lock(l).closed);
                if state.logs.is_empty() {
                    state.running = false;
                    return;
                }
                state.logs.clone()
            };
            for log in logs {
                self.put(&mut lock(&log));
            }
        }
    }

    /// Shares what `log` gained since its last share. A failure is tried again at the next turn
    /// (the same bytes: the store keeps a piece once).
    fn put(&self, log: &mut Log) {
        if log.closed {
            return;
        }
        let Ok(Some((from, bytes))) = read_raw(&log.path, log.next) else { return };
        if bytes.is_empty() {
            return;
        }
        if self.blobs.put_live(&log.key, from, &bytes, LIVE_KEEP as u64).is_ok() {
            log.next = from + bytes.len() as u64;
        }
    }

    /// Shares what every open log gained, now (tests).
    #[cfg(test)]
    pub(crate) fn put_all(&self) {
        for log in lock(&self.state).logs.clone() {
            self.put(&mut lock(&log));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    use opsgraph_store::{BlobStore, Error, LogKey};

    use super::*;
    use crate::live::{live_log, live_path, LiveLog};

    /// A blob store sharing live logs in memory, as PostgreSQL's does: pieces by start offset.
    #[derive(Default)]
    struct Shares(Mutex<BTreeMap<(String, u32), Pieces>>);

    /// One attempt's pieces by their start.
    type Pieces = BTreeMap<u64, Vec<u8>>;

    impl BlobStore for Shares {
        fn put(&self, _: &[u8]) -> Result<(String, i64), Error> {
            unreachable!()
        }
        fn get(&self, _: &str) -> Result<Option<Vec<u8>>, Error> {
            Ok(None)
        }
        fn append_log(&self, _: &LogKey, _: &[u8]) -> Result<(), Error> {
            Ok(())
        }
        fn log(&self, _: &LogKey) -> Result<Option<Vec<u8>>, Error> {
            Ok(None)
        }
        fn remove(&self, _: &str) -> Result<(), Error> {
            Ok(())
        }
        fn shares_live_logs(&self) -> bool {
            true
        }
        fn put_live(&self, log: &LogKey, from: u64, bytes: &[u8], _keep: u64) -> Result<(), Error> {
            let mut all = self.0.lock().unwrap();
            all.entry((log.job.clone(), log.attempt)).or_default().insert(from, bytes.to_vec());
            Ok(())
        }
        fn live(&self, log: &LogKey, _after: u64) -> Result<Option<(u64, Vec<u8>)>, Error> {
            let all = self.0.lock().unwrap();
            let Some(pieces) = all.get(&(log.job.clone(), log.attempt)) else { return Ok(None) };
            let start = *pieces.keys().next().unwrap();
            Ok(Some((start, pieces.values().flatten().copied().collect())))
        }
    }

    /// The pieces shared so far of `job`'s first attempt, as `start:text` each.
    fn pieces(shares: &Shares, job: &str) -> Vec<String> {
        let all = shares.0.lock().unwrap();
        all.get(&(job.to_string(), 1))
            .map(|p| p.iter().map(|(s, b)| format!("{s}:{}", String::from_utf8_lossy(b))).collect())
            .unwrap_or_default()
    }

    fn run_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("opsgraph-live-share-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("runs/op-1")).unwrap();
        dir
    }

    fn live(dir: &Path, share: &ShareAs, job: &str) -> LiveLog {
        LiveLog::new(live_path(&dir.join("runs/op-1"), &format!("{job}.1")), vec![], false, Some(share))
    }

    /// What a log gained is shared at each turn (the file's bytes: masked as it is, `live.rs`),
    /// and no more once its output ended; another process (another data directory) reads it
    /// through the store.
    #[test]
    fn a_live_log_is_shared_as_it_grows_until_it_ends() {
        let dir = run_dir("grows");
        let shares = Arc::new(Shares::default());
        let sharing = Sharing::new(shares.clone()).expect("the store shares live logs");
        let share = |job: &str| ShareAs { sharing: sharing.clone(), key: LogKey::new("op-1", job, 1) };
        let mut a = live(&dir, &share("a"), "a");
        let mut b = live(&dir, &share("b"), "b");
        a.push(0, b"one\n");
        sharing.put_all();
        a.push(1, b"two\n");
        b.push(0, b"bee\n");
        sharing.put_all();
        sharing.put_all();
        assert_eq!(pieces(&shares, "a"), ["0:one\n", "4:two\n"]);
        assert_eq!(pieces(&shares, "b"), ["0:bee\n"]);
        a.push(0, b"three\n");
        a.finish();
        sharing.put_all();
        assert_eq!(pieces(&shares, "a").len(), 2, "shared after its output ended");
        drop(b);
        // Another replica: its own data directory, no file; the text from the store.
        let other = run_dir("grows-other");
        let text = live_log(&other, &*shares, "op-1", "a", 1, 2).unwrap().unwrap();
        assert_eq!((text.from, text.next, text.text.as_str()), (2, 8, "e\ntwo\n"));
        // The driver's own process reads its file (all of it).
        let text = live_log(&dir, &*shares, "op-1", "a", 1, 0).unwrap().unwrap();
        assert_eq!(text.text, "one\ntwo\nthree\n");
        // The thread goes once nothing is shared.
        let started = std::time::Instant::now();
        while lock(&sharing.state).running {
            assert!(started.elapsed() < EVERY * 20, "the sharing thread outlives its logs");
            std::thread::sleep(EVERY / 5);
        }
    }

    /// A store that shares nothing: no sharing, and a reader without the file sees nothing.
    #[test]
    fn the_data_directorys_files_share_nothing() {
        let dir = run_dir("files");
        let files: Arc<dyn BlobStore> = Arc::new(opsgraph_store::FsBlobStore::new(&dir));
        assert!(Sharing::new(files.clone()).is_none());
        assert_eq!(live_log(&run_dir("files-other"), &*files, "op-1", "a", 1, 0).unwrap(), None);
    }
}
