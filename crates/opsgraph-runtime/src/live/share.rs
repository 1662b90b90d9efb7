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
//! attempt's output ended its log is closed: nothing more is shared after that. Closing does
//! not wait for a share in progress (a slow store must not hold a job's end): the store refuses a
//! piece of an attempt whose final log it holds, and the final log's statement removes the
//! attempt's pieces (and those of the job's earlier attempts, a dead driver's among them).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
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
    logs: Vec<Arc<Log>>,
    /// Whether the sharing thread runs.
    running: bool,
}

/// One attempt's live log as shared so far.
struct Log {
    key: LogKey,
    path: PathBuf,
    /// The offset the next share starts from (only the sharing thread, and tests, share).
    next: Mutex<u64>,
    /// Its output ended: nothing more is shared.
    closed: AtomicBool,
}

/// What an attempt's live log is shared as: its key (operation, job, attempt) and the sharing.
#[derive(Clone)]
pub(crate) struct ShareAs {
    pub(crate) sharing: Arc<Sharing>,
    pub(crate) key: LogKey,
}

/// An attempt's live log while it is shared: closed when its output ends or when dropped.
pub(crate) struct Shared(Arc<Log>);

impl Shared {
    /// Nothing more of this log is shared from now on; a share in progress is not waited for.
    pub(crate) fn close(&self) {
        self.0.closed.store(true, Ordering::Release);
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
        let log = Arc::new(Log { key, path, next: Mutex::new(0), closed: AtomicBool::new(false) });
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
                state.logs.retain(|l| !l.closed.load(Ordering::Acquire));
                if state.logs.is_empty() {
                    state.running = false;
                    return;
                }
                state.logs.clone()
            };
            for log in logs {
                self.put(&log);
            }
        }
    }

    /// Shares what `log` gained since its last share. A failure is tried again at the next turn
    /// (the same bytes: the store keeps a piece once).
    fn put(&self, log: &Log) {
        let mut next = lock(&log.next);
        if log.closed.load(Ordering::Acquire) {
            return;
        }
        let Ok(Some((from, bytes))) = read_raw(&log.path, *next) else { return };
        if bytes.is_empty() {
            return;
        }
        if self.blobs.put_live(&log.key, from, &bytes, LIVE_KEEP as u64).is_ok() {
            *next = from + bytes.len() as u64;
        }
    }

    /// Shares what every open log gained, now (tests).
    #[cfg(test)]
    pub(crate) fn put_all(&self) {
        for log in lock(&self.state).logs.clone() {
            self.put(&log);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::{mpsc, Arc, Mutex};

    use opsgraph_store::{BlobStore, Error, LogKey};

    use super::*;
    use crate::live::{live_log, live_path, LiveLog};

    /// A blob store sharing live logs in memory, as PostgreSQL's does: pieces by start offset.
    #[derive(Default)]
    struct Shares(Mutex<BTreeMap<(String, u32), Pieces>>, Gate);

    /// When set, each `put_live` says it began (`began`), then waits until it is let through.
    #[derive(Default)]
    struct Gate(Option<Turnstile>);

    struct Turnstile {
        began: Mutex<mpsc::Sender<()>>,
        through: Mutex<mpsc::Receiver<()>>,
    }

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
            if let Some(gate) = &self.1 .0 {
                gate.began.lock().unwrap().send(()).unwrap();
                gate.through.lock().unwrap().recv().unwrap();
            }
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

    /// A job's end does not wait for a share in progress (a slow or hung store would hold it):
    /// its log is closed at once, and nothing of it is shared after.
    #[test]
    fn closing_does_not_wait_for_a_share_in_progress() {
        let dir = run_dir("slow");
        let (began_tx, began) = mpsc::channel();
        let (through, through_rx) = mpsc::channel();
        let shares = Arc::new(Shares(
            Mutex::default(),
            Gate(Some(Turnstile { began: Mutex::new(began_tx), through: Mutex::new(through_rx) })),
        ));
        let sharing = Sharing::new(shares.clone()).expect("the store shares live logs");
        let share = ShareAs { sharing: sharing.clone(), key: LogKey::new("op-1", "a", 1) };
        let mut a = live(&dir, &share, "a");
        a.push(0, b"one\n");
        let sharer = std::thread::spawn({
            let sharing = sharing.clone();
            move || sharing.put_all()
        });
        began.recv().unwrap();
        let (done_tx, done) = mpsc::channel();
        let ender = std::thread::spawn(move || {
            a.push(0, b"two\n");
            a.finish();
            done_tx.send(()).unwrap();
        });
        let ended = done.recv_timeout(std::time::Duration::from_secs(30));
        through.send(()).unwrap();
        sharer.join().unwrap();
        ender.join().unwrap();
        assert!(ended.is_ok(), "the job's end waited for the share in progress");
        sharing.put_all();
        assert_eq!(pieces(&shares, "a"), ["0:one\n"], "shared after its output ended");
    }
}
