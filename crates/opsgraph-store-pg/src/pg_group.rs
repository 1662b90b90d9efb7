//! The commits of one database in this process, grouped (issue [N] 5), as SQLite's `writer.rs`
//! groups a file's: connections take turns on a mutex, and whoever takes the turn runs the
//! commits that queued up while the previous turn ran in one transaction on its own connection:
//! one WAL flush for all of them. Each caller gets its own result, as if it had committed alone,
//! after the commit answered: nothing is acknowledged before it is durable. When one of them is
//! refused (a stale version, a fence that no longer holds), it wrote nothing and the others hold
//! when the turn went in one message (`pg_one.rs`); otherwise the turn's transaction is rolled
//! back and each runs again alone, in order (no savepoints: they cost a round trip each, and
//! refusals are rare).
//!
//! Why: every commit that writes timeline rows holds the timeline counter's row lock, and the
//! lock `NOTIFY` takes, until its WAL flush is done, so commits of several connections never
//! share a flush on the server; operations driven side by side in one process each paid a flush
//! per commit where SQLite paid one for all. Commits of other processes (other replicas) still
//! queue on the server.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use opsgraph_store::group::{lock, shared, GroupTurn, Turn};
use opsgraph_store::{Error, Write};

/// Runs commits in one transaction (the store's: `PgStore::in_one`): each commit's result, or
/// `None` when one of several was refused and nothing was kept.
pub(crate) type InOne<'a> = dyn Fn(&[&[Write]]) -> Outs + 'a;

/// One result for each commit of a turn, or `None` when one of several was refused and nothing
/// was kept (each runs again alone).
pub(crate) type Outs = Option<Vec<Result<(), Error>>>;

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
    group: GroupTurn<Pending>,
}

pub(crate) fn writer_of(url: &str) -> Arc<Writer> {
    shared(&WRITERS, url.to_string())
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

pub(crate) fn group_error(what: &str) -> Error {
    Error::Postgres(format!("failed to commit {what}"))
}

impl Writer {
    /// `writes` committed with whatever other connections of this process to this database
    /// queued meanwhile, by `in_one`. When another connection holds the turn, an owned copy waits
    /// in the queue, and the next holder of the turn runs it (that may be this caller).
    pub(crate) fn commit(&self, writes: &[Write], in_one: &InOne) -> Result<(), Error> {
        let turn = self.group.take(|| Pending::new(writes.to_vec()), |p| lock(&p.out).is_some());
        let (pending, _turn) = match turn {
            Turn::First { queued, turn: _turn } => {
                return commit_group(Some(writes), queued, in_one).unwrap_or_else(|| Err(group_error("a write")))
            }
            Turn::Queued { pending, lead, turn } => {
                if let Some(queued) = lead {
                    let _ = commit_group(None, queued, in_one);
                }
                (pending, turn)
            }
        };
        pending.take().unwrap_or_else(|| Err(group_error("a grouped write that was never run")))
    }
}

/// One transaction: `mine` (if any) and the queued writes, one commit. When one of them is
/// refused (a stale version, a fence that does not hold: rare), either it wrote nothing and the
/// others hold (commits sent in one message, `pg_one.rs`), or nothing of the turn is kept
/// and each runs again in a transaction of its own, in order, as if they had not been
/// grouped. Returns `mine`'s result; the queued ones get theirs in their `out`.
pub(crate) fn commit_group(
    mine: Option<&[Write]>,
    queued: Vec<Arc<Pending>>,
    in_one: &InOne,
) -> Option<Result<(), Error>> {
    let owned: Vec<Option<Vec<Write>>> = queued.iter().map(|p| lock(&p.writes).take()).collect();
    let mut all: Vec<&[Write]> = mine.into_iter().collect();
    all.extend(owned.iter().flatten().map(Vec::as_slice));
    let outs: Vec<Result<(), Error>> = match in_one(&all) {
        Some(outs) => outs,
        None => all
            .iter()
            .map(|w| in_one(&[w]).and_then(|mut out| out.pop()).unwrap_or_else(|| Err(group_error("a write"))))
            .collect(),
    };
    // Taken from the back, in order.
    let mut outs: Vec<Result<(), Error>> = outs.into_iter().rev().collect();
    let mine_out = mine.map(|_| outs.pop().unwrap_or_else(|| Err(group_error("a write"))));
    for (p, w) in queued.iter().zip(&owned) {
        let out = match w {
            Some(_) => outs.pop().unwrap_or_else(|| Err(group_error("a write"))),
            None => Err(group_error("a write taken twice")),
        };
        *lock(&p.out) = Some(out);
    }
    mine_out
}
