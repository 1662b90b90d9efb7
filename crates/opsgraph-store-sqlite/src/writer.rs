//! The writes of one database file in this process, grouped: connections take turns on a mutex,
//! in order, instead of in SQLite's busy handler (which sleeps 1, 2, 5, 10 … ms between tries;
//! another process's writer is still waited for there), and whoever takes the turn commits the
//! writes that queued up while the previous turn ran, each in a savepoint of its own, in one
//! transaction: one fsync for all of them (group commit). Each caller gets its own result, as
//! if it had committed alone: a write refused (a stale lease, a fence) rolls back its savepoint
//! only.
//!
//! Checkpoints run off the write path: the connections of a file store are opened with
//! `wal_autocheckpoint` off (`sqlite.rs`), since SQLite's own checkpoint (at 1,000 pages of WAL,
//! inside the commit that crossed them) stalls every writer queued behind that commit. Instead,
//! every [`CHECK_EVERY`] commits, once the WAL's file has reached [`WAL_PAGES`] pages, a thread of
//! its own runs a `PASSIVE` checkpoint on a connection of its own (never two at once for a file).
//! The WAL starts over at the first write after a checkpoint that copied all of it; one that ran
//! while commits went on may not have. So the WAL stays bounded: every [`RESET_WITHIN`] commits,
//! once its file has reached 4 × [`WAL_PAGES`], the writer checkpoints in its own turn (no write
//! of this process goes on meanwhile, so it copies all of it), as SQLite did at every crossing.

use std::any::Any;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, TryLockError, Weak};

use opsgraph_store::Error;
use rusqlite::{Connection, Transaction, TransactionBehavior};

use crate::{edge, Fail};

/// The write turn of each database file this process opened, by its canonical path.
static WRITERS: LazyLock<Mutex<HashMap<PathBuf, Weak<Writer>>>> = LazyLock::new(Default::default);

/// A write that waits for the next turn, its result once it ran.
type Job = Box<dyn FnOnce(&Transaction<'_>) -> Result<Box<dyn Any + Send>, Fail> + Send>;

struct Pending {
    job: Mutex<Option<Job>>,
    out: Mutex<Option<Result<Box<dyn Any + Send>, Error>>>,
}

/// One database file's writers in this process.
#[derive(Default)]
pub(crate) struct Writer {
    turn: Mutex<()>,
    queue: Mutex<Vec<Arc<Pending>>>,
    /// The file (none for an in-memory database: nothing to checkpoint).
    path: Option<PathBuf>,
    /// Commits since the WAL's size was last looked at.
    commits: AtomicU32,
    /// Commits since the last checkpoint in the write turn that copied the whole WAL (it starts
    /// over after one).
    since_reset: AtomicU32,
    /// A checkpoint thread runs.
    checkpointing: Arc<AtomicBool>,
}

/// How many commits go by between two looks at the WAL's size.
const CHECK_EVERY: u32 = 64;
/// The WAL's size, in pages, past which a checkpoint runs (SQLite's own default).
const WAL_PAGES: u64 = 1000;
/// Commits after which the WAL is checkpointed in the write turn when no checkpoint of the
/// thread copied all of it (writes never paused long enough) and its file is past 4 × WAL_PAGES.
const RESET_WITHIN: u32 = 16 * CHECK_EVERY;

pub(crate) fn writer_of(path: &Path) -> Arc<Writer> {
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut writers = WRITERS.lock().unwrap_or_else(|e| e.into_inner());
    writers.retain(|_, w| w.strong_count() > 0);
    if let Some(w) = writers.get(&key).and_then(Weak::upgrade) {
        return w;
    }
    let w = Arc::new(Writer { path: Some(key.clone()), ..Writer::default() });
    writers.insert(key, Arc::downgrade(&w));
    w
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Writer {
    /// The turn, for a write that runs on its own (migrations, leases).
    pub(crate) fn turn(&self) -> MutexGuard<'_, ()> {
        lock(&self.turn)
    }

    /// Runs `mine` in a write transaction on `conn`, committed with whatever other connections
    /// queued meanwhile. When another connection holds the turn, an owned copy (`owned()`) waits
    /// in the queue, and the next holder of the turn runs it (that may be this caller).
    pub(crate) fn write<T: Send + 'static>(
        &self,
        conn: &mut Connection,
        mine: impl FnOnce(&Transaction<'_>) -> Result<T, Fail>,
        owned: impl FnOnce() -> Job,
    ) -> Result<T, Error> {
        let turn = match self.turn.try_lock() {
            Ok(t) => Some(t),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        if let Some(turn) = turn {
            let others = std::mem::take(&mut *lock(&self.queue));
            let out = commit(conn, Some(mine), others).expect("ours was run");
            drop(turn);
            self.committed(conn);
            return out;
        }
        let pending = Arc::new(Pending { job: Mutex::new(Some(owned())), out: Mutex::new(None) });
        lock(&self.queue).push(pending.clone());
        let turn = self.turn();
        if lock(&pending.out).is_none() {
            // Nobody ran it: this caller leads, with it and whatever else waits.
            let queued = std::mem::take(&mut *lock(&self.queue));
            let _ = commit(conn, None::<fn(&Transaction<'_>) -> Result<(), Fail>>, queued);
            drop(turn);
            self.committed(conn);
        }
        let out = lock(&pending.out).take();
        match out {
            Some(Ok(v)) => Ok(*v.downcast::<T>().map_err(|_| group_error("a grouped write's result"))?),
            Some(Err(e)) => Err(e),
            None => Err(group_error("a grouped write was never run")),
        }
    }
}

impl Writer {
    /// After a commit, outside the turn: every [`CHECK_EVERY`] commits, a WAL past [`WAL_PAGES`]
    /// pages is checkpointed by a thread of its own, on a connection of its own.
    fn committed(&self, conn: &Connection) {
        let Some(path) = &self.path else { return };
        let since_reset = self.since_reset.fetch_add(1, Ordering::Relaxed) + 1;
        if self.commits.fetch_add(1, Ordering::Relaxed) + 1 < CHECK_EVERY {
            return;
        }
        self.commits.store(0, Ordering::Relaxed);
        let page = conn.query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0)).map_or(4096, |p| p.max(512) as u64);
        let mut wal = path.clone().into_os_string();
        wal.push("-wal");
        let size = std::fs::metadata(&wal).map_or(0, |m| m.len());
        if size < WAL_PAGES * page {
            return;
        }
        if since_reset >= RESET_WITHIN && size >= 4 * WAL_PAGES * page {
            // In the turn: no writer of this process adds to the WAL meanwhile, so it is copied whole.
            // A checkpoint of the thread still running would make this one busy: it ends soon,
            // as nothing is added meanwhile.
            let _turn = self.turn();
            while self.checkpointing.swap(true, Ordering::AcqRel) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            if passive(conn) {
                self.since_reset.store(0, Ordering::Relaxed);
            }
            self.checkpointing.store(false, Ordering::Release);
            return;
        }
        if self.checkpointing.swap(true, Ordering::AcqRel) {
            return;
        }
        // Its success does not count as a start-over: commits may have gone on meanwhile.
        let (path, busy) = (path.clone(), Arc::clone(&self.checkpointing));
        let spawned = std::thread::Builder::new().name("sqlite-checkpoint".into()).spawn(move || {
            checkpoint(&path);
            busy.store(false, Ordering::Release);
        });
        if spawned.is_err() {
            self.checkpointing.store(false, Ordering::Release);
        }
    }
}

/// A `PASSIVE` checkpoint of `path` on a connection of its own: it copies what it can without
/// waiting for readers or writers. Never creates the file (it may be gone meanwhile); a failure
/// leaves the WAL as it was, for the next one.
fn checkpoint(path: &Path) {
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let Ok(conn) = Connection::open_with_flags(path, flags) else { return };
    let _ = conn.execute_batch("PRAGMA busy_timeout=5000; PRAGMA wal_autocheckpoint=0;");
    passive(&conn);
}

/// `PRAGMA wal_checkpoint(PASSIVE)` on `conn`: whether it copied the whole WAL.
fn passive(conn: &Connection) -> bool {
    let counts = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    });
    matches!(counts, Ok((0, log, done)) if log == done)
}

fn group_error(what: &str) -> Error {
    Error::Query(format!("failed to commit {what}").into())
}

/// One transaction: `mine` (if any) and the queued writes, each in a savepoint; one commit.
/// Returns `mine`'s result; the queued ones get theirs in their `out`.
fn commit<T, F: FnOnce(&Transaction<'_>) -> Result<T, Fail>>(
    conn: &mut Connection,
    mine: Option<F>,
    queued: Vec<Arc<Pending>>,
) -> Option<Result<T, Error>> {
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            for p in &queued {
                *lock(&p.out) = Some(Err(group_error(&format!("a write (the transaction did not begin: {e})"))));
            }
            return mine.map(|_| Err(crate::query_error(e)));
        }
    };
    // Alone in its turn, a write needs no savepoint: if it fails, the whole transaction is
    // rolled back (dropped), which is all the savepoint would have undone.
    if queued.is_empty() {
        let f = mine?;
        return Some(edge(|| {
            let v = f(&tx)?;
            tx.commit()?;
            Ok(v)
        }));
    }
    let mut mine_out = mine.map(|f| in_savepoint(&tx, f));
    let mut outs: Vec<Result<Box<dyn Any + Send>, Error>> = Vec::with_capacity(queued.len());
    // SQLite rolls a whole transaction back on some errors (a full disk, I/O): then nothing of
    // this turn holds, and the writes left are not run.
    let mut lost = tx.is_autocommit().then(|| "the transaction was rolled back".to_string());
    for p in &queued {
        let job = lock(&p.job).take();
        outs.push(match (job, &lost) {
            (_, Some(why)) => Err(group_error(&format!("a write ({why})"))),
            (Some(job), None) => in_savepoint(&tx, job),
            (None, None) => Err(group_error("a write taken twice")),
        });
        if lost.is_none() && tx.is_autocommit() {
            lost = Some("the transaction was rolled back".into());
        }
    }
    if lost.is_none() {
        if let Err(e) = tx.commit() {
            lost = Some(e.to_string());
        }
    }
    if let Some(why) = lost {
        // Every write that had passed fails with the transaction.
        if let Some(r) = mine_out.as_mut().filter(|r| r.is_ok()) {
            *r = Err(group_error(&format!("a write ({why})")));
        }
        for r in outs.iter_mut().filter(|r| r.is_ok()) {
            *r = Err(group_error(&format!("a write ({why})")));
        }
    }
    for (p, out) in queued.iter().zip(outs) {
        *lock(&p.out) = Some(out);
    }
    mine_out
}

/// Runs `f` in a savepoint of `tx`: kept when it succeeds, rolled back when it fails.
fn in_savepoint<T>(tx: &Transaction<'_>, f: impl FnOnce(&Transaction<'_>) -> Result<T, Fail>) -> Result<T, Error> {
    // Cached statements: a savepoint's text is parsed once per connection, not per write.
    let run = |sql: &str| tx.prepare_cached(sql).and_then(|mut s| s.execute([]));
    edge(|| {
        run("SAVEPOINT grouped")?;
        match f(tx) {
            Ok(v) => {
                run("RELEASE grouped")?;
                Ok(v)
            }
            Err(e) => {
                run("ROLLBACK TO grouped")?;
                run("RELEASE grouped")?;
                Err(e)
            }
        }
    })
}

/// A queued write of `f` over owned data.
pub(crate) fn job<T: Send + 'static>(f: impl FnOnce(&Transaction<'_>) -> Result<T, Fail> + Send + 'static) -> Job {
    Box::new(move |tx| f(tx).map(|v| Box::new(v) as Box<dyn Any + Send>))
}

#[cfg(test)]
mod tests {
    use opsgraph_store::{Store, TimelineEntry, Write};

    use crate::{Durability, SqliteStore};

    /// No commit checkpoints (autocheckpoint is off); past 1,000 pages of WAL the writer's own
    /// thread copies them into the database file, and the WAL starts over instead of growing.
    #[test]
    fn the_wal_is_checkpointed_off_the_write_path() {
        let dir = std::env::temp_dir().join(format!("opsgraph-checkpoint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("opsgraph.db");
        let mut store = SqliteStore::open(&path, Durability::Normal).unwrap();
        let auto: i64 = store.conn.query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0)).unwrap();
        assert_eq!(auto, 0);
        let entry = |i: usize| TimelineEntry {
            seq: 0,
            operation: "op".into(),
            at: opsgraph_store::now(),
            actor: "test".into(),
            event: "e".into(),
            from: None,
            to: None,
            reason: format!("{i}{}", "x".repeat(8000)),
            data: serde_json::Value::Null,
        };
        let wal = dir.join("opsgraph.db-wal");
        let mut largest = 0;
        for i in 0..3000 {
            store.commit(&[Write::Timeline(entry(i))]).unwrap();
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
        // 3,000 entries of about six pages each (overflow pages, index): without checkpoints the
        // WAL would hold them all (~72 MB); it starts over after a complete checkpoint, at the
        // latest the writer's own every 1,024 commits (~25 MB here).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::fs::metadata(&path).unwrap().len() < 4 << 20 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(std::fs::metadata(&path).unwrap().len() >= 4 << 20, "checkpoints copied pages into the file");
        assert!(largest < 36 << 20, "the WAL was reused, not grown without bound ({largest} bytes)");
        assert_eq!(store.timeline("op").unwrap().len(), 3000);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
