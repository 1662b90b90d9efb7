//! A turn's commits on the wire (issue [N] 5): in one transaction, and when every one of them is
//! a driven operation's commit (`pg_tail::folds`: a fence, at most one transition, job records
//! and timeline entries), in one message: one simple query of an `EXECUTE` per commit. Its
//! statements run as one implicit transaction, committed before the server answers
//! `ReadyForQuery`, which the client waits for: one round trip for the turn instead of `BEGIN`, a
//! statement per commit and `COMMIT`, and still nothing acknowledged before it is durable.
//!
//! The statements are the ones `pg_tail` binds, prepared once per connection by `PREPARE` (so
//! the server plans them as often as before); their parameters are written as literals, text
//! escaped by `postgres_protocol::escape::escape_literal` (a value with a NUL, which a query's
//! text cannot carry, takes the bound path). Each statement checks its commit's fence and version
//! and writes nothing when one fails, so a refused commit leaves the others of the turn as if
//! each had run alone, in order; an error (the server's) rolls the whole message back and each
//! runs again alone; a lost connection fails them all (the commit may have happened).

use opsgraph_store::{Error, Write};
use postgres::SimpleQueryMessage;

use crate::conn::{pg_message, PgStore, Tx};
use crate::pg_group::{group_error, Outs};
use crate::pg_tail::{Answer, Tail};
use crate::{edge, Fail};

impl PgStore {
    /// `writes` in one transaction: one message when each is a driven operation's commit,
    /// otherwise `BEGIN`, their statements and `COMMIT`. `deferred`: the transaction commits
    /// with `synchronous_commit = off` (made and visible, durable once the syncer ran after it,
    /// `pg_sync.rs`).
    pub(crate) fn in_one(&self, writes: &[&[Write]], deferred: bool) -> Outs {
        match edge(|| tails(writes)) {
            Ok(Some(tails)) => self.in_one_message(&tails, deferred),
            // A commit that cannot be written so, or whose statement cannot be built (the
            // transaction reports why).
            Ok(None) | Err(_) => self.in_one_transaction(writes, deferred),
        }
    }

    fn in_one_transaction(&self, writes: &[&[Write]], deferred: bool) -> Outs {
        let mut client = self.client.borrow_mut();
        let tx = match client.transaction() {
            Ok(tx) => tx,
            Err(e) => return Some(writes.iter().map(|_| Err(Error::Postgres(pg_message(&e)))).collect()),
        };
        let mut tx = Tx { tx, statements: &self.statements };
        if deferred {
            if let Err(e) = tx.tx.batch_execute(DEFER) {
                return Some(writes.iter().map(|_| Err(Error::Postgres(pg_message(&e)))).collect());
            }
        }
        for w in writes {
            if let Err(e) = edge(|| crate::pg::apply(&mut tx, w)) {
                // Dropped, the transaction rolls back.
                return (writes.len() == 1).then(|| vec![Err(e)]);
            }
        }
        match edge(|| Ok(tx.tx.commit()?)) {
            Ok(()) => Some(writes.iter().map(|_| Ok(())).collect()),
            Err(e) if writes.len() == 1 => Some(vec![Err(e)]),
            // The commit failed: every write fails with it (none is run again: it may hold).
            Err(e) => Some(writes.iter().map(|_| Err(group_error(&format!("a write ({e})")))).collect()),
        }
    }

    fn in_one_message(&self, tails: &[Option<Tail<'_>>], deferred: bool) -> Outs {
        let mut client = self.client.borrow_mut();
        let mut query = self.query.borrow_mut();
        query.clear();
        let writes = tails.iter().any(Option::is_some);
        if deferred && writes {
            // The message's statements are one implicit transaction: `SET LOCAL` holds in it.
            query.push_str(DEFER);
        }
        for tail in tails.iter().flatten() {
            let name = match self.named.prepared(&mut client, &tail.sql) {
                Ok(name) => name,
                Err(e) => return Some(tails.iter().map(|_| Err(Error::Postgres(pg_message(&e)))).collect()),
            };
            if !query.is_empty() {
                query.push_str(";\n");
            }
            tail.execute(&name, &mut query);
        }
        if !writes {
            return Some(tails.iter().map(|_| Ok(())).collect());
        }
        let answers = match client.simple_query(&query) {
            Ok(messages) => messages,
            // The server refused a statement: the implicit transaction rolled back.
            Err(e) if e.as_db_error().is_some() && tails.len() > 1 => return None,
            Err(e) if tails.len() == 1 => return Some(vec![Err(Error::Postgres(pg_message(&e)))]),
            Err(e) => {
                let why = format!("a write ({})", pg_message(&e));
                return Some(tails.iter().map(|_| Err(group_error(&why))).collect());
            }
        };
        let mut rows = answers.iter().filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        });
        let outs = tails
            .iter()
            .map(|tail| {
                let Some(tail) = tail else { return Ok(()) };
                edge(|| {
                    let row =
                        rows.next().ok_or_else(|| Error::Postgres("a commit's statement returned no row".into()))?;
                    tail.judge(answer(row)?)
                })
            })
            .collect();
        Some(outs)
    }
}

/// What makes a transaction's commit not wait for its WAL flush (`Store::commit_deferred`); the
/// setting ends with the transaction.
const DEFER: &str = "SET LOCAL synchronous_commit = off";

/// The statements of `writes` when each is a driven operation's commit whose parameters can be
/// written as literals (`None` otherwise).
fn tails<'a>(writes: &[&'a [Write]]) -> Result<Option<Vec<Option<Tail<'a>>>>, Fail> {
    let mut tails = Vec::with_capacity(writes.len());
    for w in writes {
        if !crate::pg_tail::folds(w) {
            return Ok(None);
        }
        let tail = crate::pg_tail::tail(w, true)?;
        if tail.as_ref().is_some_and(|t| !t.writable()) {
            return Ok(None);
        }
        tails.push(tail);
    }
    Ok(Some(tails))
}

/// The statement's row, in text: holder, token, whether the fence held, whether it transitioned,
/// whether the version guard held.
fn answer(row: &postgres::SimpleQueryRow) -> Result<Answer, Fail> {
    let bad = || Fail::from(Error::Postgres("a commit's statement answered what it cannot".into()));
    let flag = |i: usize| match row.try_get(i) {
        Ok(Some("t")) => Ok(true),
        Ok(Some("f")) => Ok(false),
        _ => Err(bad()),
    };
    let token = match row.try_get(1).map_err(|_| bad())? {
        Some(t) => Some(t.parse::<i64>().map_err(|_| bad())?),
        None => None,
    };
    Ok(Answer {
        holder: row.try_get(0).map_err(|_| bad())?.map(str::to_string),
        token,
        fenced_ok: flag(2)?,
        transitioned: flag(3)?,
        version_ok: flag(4)?,
    })
}
