//! Durability of the commits made with `synchronous=NORMAL` (every commit of a store with
//! `Durability::Full` on a file: the runtime's deferred ones, and the durable ones, synced before
//! they return): a commit at `NORMAL` is in the WAL (made, visible) but not synced; one
//! `fdatasync` of the WAL file, begun after it, makes it durable together with every commit before
//! it (the WAL is appended in commit order, and one sync of a file covers everything written to
//! it before). Checkpoints stay safe under `NORMAL` (SQLite syncs the WAL before one and the
//! database file after it, and a WAL is only reused after a complete checkpoint), so the WAL's
//! frames are never overwritten before they are in the synced database file.
//!
//! The syncs of one file are grouped across the connections of this process ([`Syncs`], shared
//! through the file's `Writer`): a caller waits for a sync begun after it asked, running it when
//! none is under way, so the commits made during one `fdatasync` share the next one — the
//! runtime's committer's, an agent's report and claim, a person's change alike (issue [N] 2).

use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use std::time::{Duration, Instant};

use opsgraph_store::group::lock;

/// How long a sync about to begin waits for the durable commits under way in the write turn to
/// ask for it too (each of them would otherwise wait for this sync and then run one of its own).
const LINGER: Duration = Duration::from_millis(1);
use opsgraph_store::{Error, Syncer};

/// The syncs of one database file's WAL in this process, grouped.
#[derive(Default)]
pub(crate) struct Syncs {
    state: Mutex<SyncState>,
    /// A sync ended (or failed).
    ended: Condvar,
    /// A durable commit's write ended (it asks for a sync next).
    asked: Condvar,
}

#[derive(Default)]
struct SyncState {
    /// Syncs begun (numbered from 1) and the last one ended.
    begun: u64,
    ended: u64,
    running: bool,
    /// Durable commits of this file under way in this process (between their write's start and
    /// their sync): a sync about to begin waits for them a little ([`LINGER`]).
    writing: u64,
    /// A sync failed: every later one fails too. After a failed `fdatasync` the kernel may have
    /// dropped the pages it could not write and a later one succeed without them, so nothing
    /// made before it can be vouched for again (the process stops making things durable).
    failed: Option<String>,
    /// The WAL's length when each sync began (what it covers), for the tests' witness.
    #[cfg(test)]
    covered: Vec<u64>,
}

impl Syncs {
    /// Returns once a sync begun after this call has ended: runs `sync` itself when none is under
    /// way, else waits for the one under way (begun before: it may not cover the caller's commit)
    /// and then for the next, which the first caller to find none under way runs.
    pub(crate) fn after(&self, sync: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
        let mut sync = Some(sync);
        let mut state = lock(&self.state);
        let wanted = state.begun + 1;
        let mut linger = None;
        loop {
            if let Some(reason) = &state.failed {
                return Err(reason.clone());
            }
            if state.ended >= wanted {
                return Ok(());
            }
            if state.running {
                state = self.ended.wait(state).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            if state.writing > 0 {
                let until = *linger.get_or_insert_with(|| Instant::now() + LINGER);
                let left = until.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    state = self.asked.wait_timeout(state, left).unwrap_or_else(|e| e.into_inner()).0;
                    continue;
                }
            }
            let Some(run) = sync.take() else {
                // Unreachable: a sync this caller ran is numbered at least `wanted`.
                return Err("a grouped sync did not cover its caller".into());
            };
            state.running = true;
            state.begun += 1;
            let mine = state.begun;
            drop(state);
            let synced = run();
            state = lock(&self.state);
            state.running = false;
            match synced {
                Ok(()) => state.ended = mine,
                Err(reason) => state.failed = Some(reason),
            }
            self.ended.notify_all();
        }
    }

    /// A durable commit begins its write: a sync about to begin waits a little for it.
    pub(crate) fn writing(&self) -> Writing<'_> {
        lock(&self.state).writing += 1;
        Writing(self)
    }

    /// Syncs begun so far.
    #[cfg(test)]
    pub(crate) fn begun(&self) -> u64 {
        lock(&self.state).begun
    }

    /// The WAL's length when each sync began.
    #[cfg(test)]
    pub(crate) fn covered(&self) -> Vec<u64> {
        lock(&self.state).covered.clone()
    }
}

/// A durable commit's write under way ([`Syncs::writing`]), until dropped: before its sync.
pub(crate) struct Writing<'a>(&'a Syncs);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).writing -= 1;
        self.0.asked.notify_all();
    }
}

/// The WAL file of one database, synced on demand ([`Syncer`]), its syncs grouped with those of
/// the other stores of the file in this process.
pub(crate) struct Wal {
    path: PathBuf,
    /// Opened at the first sync (the file exists once this process's connection wrote to it;
    /// SQLite removes it only when the last connection closes, after a complete checkpoint).
    file: OnceLock<File>,
    syncs: Arc<Syncs>,
}

impl Wal {
    /// `syncs`: the file's, shared by its stores in this process (its `Writer`'s).
    pub(crate) fn of(db: &std::path::Path, syncs: Arc<Syncs>) -> Wal {
        let mut path = db.as_os_str().to_owned();
        path.push("-wal");
        Wal { path: PathBuf::from(path), file: OnceLock::new(), syncs }
    }

    /// The WAL file's path (`DB-wal`).
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    pub(crate) fn syncs(&self) -> &Syncs {
        &self.syncs
    }

    /// One `fdatasync` of the WAL file.
    fn sync_now(&self) -> Result<(), String> {
        let failed = |e: std::io::Error| format!("{}: {e}", self.path.display());
        let file = match self.file.get() {
            Some(f) => f,
            None => {
                let f = File::open(&self.path).map_err(failed)?;
                self.file.get_or_init(|| f)
            }
        };
        #[cfg(test)]
        {
            let len = file.metadata().map_or(0, |m| m.len());
            lock(&self.syncs.state).covered.push(len);
        }
        file.sync_data().map_err(failed)
    }
}

impl Syncer for Wal {
    /// Every commit made before this call is durable when it returns `Ok`: a sync begun after
    /// the call ended (this caller's, or another connection's of the same file).
    fn sync(&self) -> Result<(), Error> {
        self.syncs.after(|| self.sync_now()).map_err(|reason| Error::NotDurable { reason })
    }
}
