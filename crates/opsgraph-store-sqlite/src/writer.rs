//! The writes of one database file in this process, grouped: connections take turns on a mutex,
//! in order, instead of in SQLite's busy handler (which sleeps 1, 2, 5, 10 … ms between tries;
//! another process's writer is still waited for there), and whoever takes the turn commits the
//! writes that queued up while the previous turn ran, each in a savepoint of its own, in one
//! transaction: one fsync for all of them (group commit). Each caller gets its own result, as
//! if it had committed alone: a write refused (a stale lease, a fence) rolls back its savepoint
//! only.

use std::any::Any;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};

use opsgraph_store::group::{lock, shared, GroupTurn, Turn};
use opsgraph_store::{Error, Syncer};
use rusqlite::Connection;

use crate::wal::Wal;
use crate::{edge, Fail};

/// The write turn of each database file this process opened, by its canonical path.
static WRITERS: LazyLock<Mutex<HashMap<PathBuf, Weak<Writer>>>> = LazyLock::new(Default::default);

/// A write that waits for the next turn, its result once it ran.
type Job = Box<dyn FnOnce(&Connection) -> Result<Box<dyn Any + Send>, Fail> + Send>;

struct Pending {
    job: Mutex<Option<Job>>,
    out: Mutex<Option<Result<Box<dyn Any + Send>, Error>>>,
}

/// One database file's writers in this process.
#[derive(Default)]
pub(crate) struct Writer {
    group: GroupTurn<Pending>,
}

pub(crate) fn writer_of(path: &Path) -> Arc<Writer> {
    shared(&WRITERS, std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
}

impl Writer {
    /// The turn, for a write that runs on its own (migrations, leases).
    pub(crate) fn turn(&self) -> MutexGuard<'_, ()> {
        self.group.turn()
    }

    /// Runs `mine` in a write transaction on `conn`, committed with whatever other connections
    /// queued meanwhile. When another connection holds the turn, an owned copy (`owned()`) waits
    /// in the queue, and the next holder of the turn runs it (that may be this caller).
    ///
    /// `deferred`: `conn` commits with `synchronous=NORMAL` for this caller, who syncs later
    /// (`wal.rs`); the other connections' writes a turn of it commits are synced before they
    /// are answered, as they would have been at their own commit.
    ///
    /// `foreign` is bumped when this turn ran other connections' writes on `conn`: they do not
    /// move `conn`'s `PRAGMA data_version` (its own commit), yet another connection committed.
    pub(crate) fn write<T: Send + 'static>(
        &self,
        conn: &mut Connection,
        foreign: &std::cell::Cell<i64>,
        mine: impl FnOnce(&Connection) -> Result<T, Fail>,
        owned: impl FnOnce() -> Job,
        deferred: Option<&Wal>,
    ) -> Result<T, Error> {
        let turn = self.group.take(
            || Arc::new(Pending { job: Mutex::new(Some(owned())), out: Mutex::new(None) }),
            |p| lock(&p.out).is_some(),
        );
        let (pending, _turn) = match turn {
            Turn::First { queued, turn: _turn } => {
                if !queued.is_empty() {
                    foreign.set(foreign.get() + 1);
                }
                let others = deferred.filter(|_| !queued.is_empty());
                return commit(conn, Some(mine), queued, others).expect("ours was run");
            }
            Turn::Queued { pending, lead, turn } => {
                if let Some(queued) = lead {
                    // `pending` (this caller's own) is among them.
                    if queued.len() > 1 {
                        foreign.set(foreign.get() + 1);
                    }
                    let others = deferred.filter(|_| queued.len() > 1);
                    let _ = commit(conn, None::<fn(&Connection) -> Result<(), Fail>>, queued, others);
                }
                (pending, turn)
            }
        };
        let out = lock(&pending.out).take();
        match out {
            Some(Ok(v)) => Ok(*v.downcast::<T>().map_err(|_| group_error("a grouped write's result"))?),
            Some(Err(e)) => Err(e),
            None => Err(group_error("a grouped write was never run")),
        }
    }
}

fn group_error(what: &str) -> Error {
    Error::Query(format!("failed to commit {what}").into())
}

/// One transaction: `mine` (if any) and the queued writes, each in a savepoint; one commit.
/// Returns `mine`'s result; the queued ones get theirs in their `out`. `sync`: the commit was
/// made unsynced (`Writer::write`'s `deferred`) and holds others' writes: synced before anyone
/// is answered.
fn commit<T, F: FnOnce(&Connection) -> Result<T, Fail>>(
    conn: &mut Connection,
    mine: Option<F>,
    queued: Vec<Arc<Pending>>,
    sync: Option<&Wal>,
) -> Option<Result<T, Error>> {
    let tx = match Immediate::begin(conn) {
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
        } else if let Some(Err(e)) = sync.map(Syncer::sync) {
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

/// A write transaction, `BEGIN IMMEDIATE` … `COMMIT`, both through the connection's statement
/// cache: rusqlite's `Transaction` parses the two texts anew at every commit (~2,000
/// instructions a commit, issue [N] 5; docs/benchmarks.md). Rolled back when dropped
/// uncommitted, as a `Transaction` is (also after a `COMMIT` that failed and left it open).
struct Immediate<'c> {
    conn: &'c Connection,
}

impl std::ops::Deref for Immediate<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

fn cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

impl<'c> Immediate<'c> {
    fn begin(conn: &'c mut Connection) -> rusqlite::Result<Immediate<'c>> {
        cached(conn, "BEGIN IMMEDIATE")?;
        Ok(Immediate { conn })
    }

    fn commit(self) -> rusqlite::Result<()> {
        cached(self.conn, "COMMIT")
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        if !self.conn.is_autocommit() {
            let _ = cached(self.conn, "ROLLBACK");
        }
    }
}

/// Runs `f` in a savepoint of `tx`: kept when it succeeds, rolled back when it fails.
fn in_savepoint<T>(tx: &Connection, f: impl FnOnce(&Connection) -> Result<T, Fail>) -> Result<T, Error> {
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
pub(crate) fn job<T: Send + 'static>(f: impl FnOnce(&Connection) -> Result<T, Fail> + Send + 'static) -> Job {
    Box::new(move |tx| f(tx).map(|v| Box::new(v) as Box<dyn Any + Send>))
}

#[cfg(test)]
mod tests {
    use opsgraph_store::{Store, TimelineEntry, Write};

    use crate::{Durability, SqliteStore};

    /// A timeline entry of operation `op` (which no row holds) with this reason.
    fn entry(reason: &str) -> TimelineEntry {
        opsgraph_store::testing::entry("op", reason)
    }

    /// A commit refused inside its transaction (a stale version) leaves nothing behind and the
    /// connection out of any transaction (the cached `BEGIN IMMEDIATE` … `COMMIT` roll back
    /// when dropped, as rusqlite's `Transaction` did); the next commit on it goes through.
    #[test]
    fn a_refused_commit_is_rolled_back_and_the_next_one_commits() {
        use opsgraph_core::model::OperationState;
        let dir = std::env::temp_dir().join(format!("opsgraph-refused-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut store = SqliteStore::open(&dir.join("opsgraph.db"), Durability::Full).unwrap();
        store.commit(&[Write::Timeline(entry("first"))]).unwrap();
        // No operation `op`: the transition matches no row and the whole commit is refused,
        // its timeline entry (written before the transition) with it.
        let refused = store.commit(&[
            Write::Timeline(entry("refused")),
            Write::Transition {
                operation: "op".into(),
                expect_version: 7,
                state: OperationState::Running,
                entry: entry("t"),
            },
        ]);
        assert!(matches!(refused, Err(opsgraph_store::Error::Conflict { .. })), "{refused:?}");
        assert!(store.conn.is_autocommit(), "no transaction is left open");
        store.commit(&[Write::Timeline(entry("after"))]).unwrap();
        let reasons: Vec<String> = store.timeline("op").unwrap().into_iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["first", "after"]);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// SQLite's own checkpoint (past 1,000 pages of WAL, in the commit that crossed them) copies
    /// the pages into the database file under grouped commits, and the WAL starts over instead
    /// of growing. (A checkpoint on a thread of its own was tried, issue [N] 5: its fsyncs
    /// competed with the commits', 1.6× slower per commit on a quiet machine; docs/benchmarks.md.)
    #[test]
    fn the_wal_is_checkpointed_and_stays_bounded() {
        let dir = std::env::temp_dir().join(format!("opsgraph-checkpoint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("opsgraph.db");
        let mut store = SqliteStore::open(&path, Durability::Normal).unwrap();
        let auto: i64 = store.conn.query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0)).unwrap();
        assert_eq!(auto, 1000);
        let entry = |i: usize| entry(&format!("{i}{}", "x".repeat(8000)));
        let wal = dir.join("opsgraph.db-wal");
        let mut largest = 0;
        for i in 0..3000 {
            store.commit(&[Write::Timeline(entry(i))]).unwrap();
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
        // 3,000 entries of about six pages each (overflow pages, index): without checkpoints the
        // WAL would hold them all (~72 MB); it starts over after each complete checkpoint.
        assert!(std::fs::metadata(&path).unwrap().len() >= 4 << 20, "checkpoints copied pages into the file");
        assert!(largest < 12 << 20, "the WAL was reused, not grown without bound ({largest} bytes)");
        assert_eq!(store.timeline("op").unwrap().len(), 3000);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
