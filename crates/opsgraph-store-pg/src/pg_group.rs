//! The commits of one database in this process, grouped (issue [N] 5), as SQLite's `writer.rs`
//! groups a file's: connections take turns on a mutex, and whoever takes the turn runs the
//! commits that queued up while the previous turn ran, each in a savepoint of its own, in one
//! transaction on its own connection: one WAL flush for all of them. Each caller gets its own
//! result, as if it had committed alone (a write refused, a stale fence, rolls back its savepoint
//! only), and gets it after `COMMIT` answered: nothing is acknowledged before it is durable.
//!
//! Why: every commit that writes timeline rows holds the timeline counter's row lock, and the
//! lock `NOTIFY` takes, until its WAL flush is done, so commits of several connections never
//! share a flush on the server; operations driven side by side in one process each paid a flush
//! per commit where SQLite paid one for all. Commits of other processes (other replicas) still
//! queue on the server.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, TryLockError, Weak};

use opsgraph_store::{Error, Write};

use crate::conn::{PgStore, Tx};
use crate::edge;

/// The write turn of each database this process connected to, by URL.
static WRITERS: LazyLock<Mutex<HashMap<String, Weak<Writer>>>> = LazyLock::new(Default::default);

/// A commit that waits for the next turn, its result once it ran.
pub(crate) struct Pending {
    writes: Mutex<Option<Vec<Write>>>,
    out: Mutex<Option<Result<(), Error>>>,
}

/// One database's committers in this process.
#[derive(Default)]
pub(crate) struct Writer {
    turn: Mutex<()>,
    queue: Mutex<Vec<Arc<Pending>>>,
}

pub(crate) fn writer_of(url: &str) -> Arc<Writer> {
    let mut writers = lock(&WRITERS);
    writers.retain(|_, w| w.strong_count() > 0);
    if let Some(w) = writers.get(url).and_then(Weak::upgrade) {
        return w;
    }
    let w = Arc::new(Writer::default());
    writers.insert(url.to_string(), Arc::downgrade(&w));
    w
}

impl Pending {
    /// `writes`, waiting for a turn.
    pub(crate) fn new(writes: Vec<Write>) -> Arc<Pending> {
        Arc::new(Pending { writes: Mutex::new(Some(writes)), out: Mutex::new(None) })
    }

    /// The result, once a turn ran it.
    pub(crate) fn take(&self) -> Option<Result<(), Error>> {
        lock(&self.out).take()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn group_error(what: &str) -> Error {
    Error::Postgres(format!("failed to commit {what}"))
}

impl PgStore {
    /// `writes` committed with whatever other connections of this process to this database
    /// queued meanwhile. When another connection holds the turn, an owned copy waits in the
    /// queue, and the next holder of the turn runs it (that may be this caller).
    pub(crate) fn grouped_commit(&self, writes: &[Write]) -> Result<(), Error> {
        let writer = Arc::clone(&self.writer);
        let turn = match writer.turn.try_lock() {
            Ok(t) => Some(t),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        if let Some(_turn) = turn {
            let others = std::mem::take(&mut *lock(&writer.queue));
            return self.commit_group(Some(writes), others).unwrap_or_else(|| Err(group_error("a write")));
        }
        let pending = Pending::new(writes.to_vec());
        lock(&writer.queue).push(Arc::clone(&pending));
        let _turn = lock(&writer.turn);
        if lock(&pending.out).is_none() {
            // Nobody ran it: this caller leads, with it and whatever else waits.
            let queued = std::mem::take(&mut *lock(&writer.queue));
            let _ = self.commit_group(None, queued);
        }
        pending.take().unwrap_or_else(|| Err(group_error("a grouped write that was never run")))
    }

    /// One transaction: `mine` (if any) and the queued writes, each in a savepoint when there is
    /// more than one; one commit. Returns `mine`'s result; the queued ones get theirs in `out`.
    pub(crate) fn commit_group(&self, mine: Option<&[Write]>, queued: Vec<Arc<Pending>>) -> Option<Result<(), Error>> {
        let mut client = self.client.borrow_mut();
        let tx = match client.transaction() {
            Ok(tx) => tx,
            Err(e) => {
                let why = crate::conn::pg_message(&e);
                for p in &queued {
                    *lock(&p.out) = Some(Err(group_error(&format!("a write (the transaction did not begin: {why})"))));
                }
                return mine.map(|_| Err(Error::Postgres(why)));
            }
        };
        let mut tx = Tx { tx, statements: &self.statements };
        let grouped = mine.is_some() as usize + queued.len() > 1;
        // A savepoint that could not be rolled back to: nothing of this turn holds.
        let mut lost: Option<String> = None;
        let mut mine_out = mine.map(|w| run(&mut tx, w, grouped, &mut lost));
        let mut outs: Vec<Result<(), Error>> = Vec::with_capacity(queued.len());
        for p in &queued {
            let writes = lock(&p.writes).take();
            outs.push(match (writes, &lost) {
                (_, Some(why)) => Err(group_error(&format!("a write ({why})"))),
                (Some(w), None) => run(&mut tx, &w, grouped, &mut lost),
                (None, None) => Err(group_error("a write taken twice")),
            });
        }
        // Alone, a refused write leaves nothing to commit: the transaction is rolled back.
        let refused = !grouped && mine_out.iter().chain(outs.iter()).any(|r| r.is_err());
        if lost.is_none() && !refused {
            if let Err(e) = tx.tx.commit() {
                lost = Some(crate::conn::pg_message(&e));
            }
        }
        if let Some(why) = lost {
            // Every write that had passed fails with the transaction.
            for r in mine_out.iter_mut().chain(outs.iter_mut()).filter(|r| r.is_ok()) {
                *r = Err(group_error(&format!("a write ({why})")));
            }
        }
        for (p, out) in queued.iter().zip(outs) {
            *lock(&p.out) = Some(out);
        }
        mine_out
    }
}

/// `writes` in `tx`, in a savepoint of their own when `grouped`: kept when they succeed, rolled
/// back to when they fail. A savepoint that cannot be rolled back to sets `lost`.
fn run(tx: &mut Tx<'_, '_>, writes: &[Write], grouped: bool, lost: &mut Option<String>) -> Result<(), Error> {
    if !grouped {
        return edge(|| crate::pg::apply(tx, writes));
    }
    if let Err(e) = tx.tx.batch_execute("SAVEPOINT grouped") {
        *lost = Some(crate::conn::pg_message(&e));
        return Err(group_error(&format!("a write ({})", crate::conn::pg_message(&e))));
    }
    let out = edge(|| crate::pg::apply(tx, writes));
    // Kept savepoints are not released (a round trip each): the next write's, of the same name,
    // is the one a rollback goes back to, and the commit keeps them all.
    if out.is_err() {
        if let Err(e) = tx.tx.batch_execute("ROLLBACK TO grouped") {
            *lost = Some(crate::conn::pg_message(&e));
        }
    }
    out
}
