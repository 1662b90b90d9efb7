//! The last statement of a commit's transaction (issue [N] 5): job records, the timeline's
//! counter and timeline rows, and, for the commit a driven operation makes over and over (its
//! lease's fence, at most one transition, job records and timeline entries), the fence and the
//! transition too, in one statement of data-modifying `WITH` clauses. Each statement is a round
//! trip to the server, and the timeline counter's row lock is held from its update to the end of
//! the commit (every writer of timeline rows queues on it): a driven operation's commit is
//! `BEGIN`, this statement and `COMMIT`, instead of six round trips.
//!
//! Checks come before writes: the fence's row is locked `FOR SHARE` and compared first, the
//! transition's version check runs only when the fence held, and every write (the counter
//! included) only when both did; a failed check is reported as before and the transaction rolled
//! back by the caller. `COMMIT` stays a statement of its own, answered after the commit is
//! durable (`synchronous_commit` on); a lone statement in an implicit transaction would be
//! answered before its commit finished.

use opsgraph_store::{Error, JobRecord, TimelineEntry, Write};
use postgres::types::ToSql;

use crate::conn::Tx;
use crate::Fail;

/// The fence and the transition checked in the same statement as the writes.
#[derive(Default)]
pub(crate) struct Checks<'w> {
    /// operation, holder, token.
    pub(crate) fence: Option<(&'w String, &'w String, &'w i64)>,
    /// operation, expected version, state as JSON, its kind, updated_at.
    pub(crate) transition: Option<(&'w String, &'w i64, String, String, &'w str)>,
}

/// Whether `writes` are the commit a driven operation makes: its fence first (if any), at most
/// one transition, then only job records and timeline entries. Such a commit is one statement.
pub(crate) fn folds(writes: &[Write]) -> bool {
    let mut transitions = 0;
    for (i, w) in writes.iter().enumerate() {
        match w {
            Write::Fence { .. } if i == 0 => {}
            Write::Transition { .. } => transitions += 1,
            Write::Job(_) | Write::Timeline(_) => {}
            _ => return false,
        }
    }
    transitions <= 1
}

/// A statement's parameters, numbered as they are added.
struct Params<'a> {
    values: Vec<&'a (dyn ToSql + Sync)>,
}

impl<'a> Params<'a> {
    /// `$n` of `value`.
    fn add(&mut self, value: &'a (dyn ToSql + Sync)) -> String {
        self.values.push(value);
        format!("${}", self.values.len())
    }
}

/// The job records and timeline entries of a commit, and its checks, in one statement.
pub(crate) fn write(
    tx: &mut Tx<'_, '_>,
    checks: Checks<'_>,
    jobs: &[&JobRecord],
    timeline: &[&TimelineEntry],
) -> Result<(), Fail> {
    if checks.fence.is_none() && checks.transition.is_none() && jobs.is_empty() && timeline.is_empty() {
        return Ok(());
    }
    let mut p = Params { values: Vec::new() };
    let mut with: Vec<String> = Vec::new();
    let fence_columns = match &checks.fence {
        Some((operation, holder, token)) => {
            let (o, h, t) = (p.add(*operation), p.add(*holder), p.add(*token));
            with.push(format!("fence AS (SELECT holder, token FROM leases WHERE operation = {o} FOR SHARE)"));
            with.push(format!("ok AS (SELECT 1 FROM fence WHERE holder = {h} AND token = {t})"));
            "(SELECT holder FROM fence), (SELECT token FROM fence)"
        }
        None => {
            with.push("ok AS (SELECT 1)".into());
            "NULL::text, NULL::bigint"
        }
    };
    let transitioned = match &checks.transition {
        Some((operation, version, state, kind, at)) => {
            let (s, k, a, o, v) = (p.add(state), p.add(kind), p.add(at), p.add(*operation), p.add(*version));
            with.push(format!(
                "tr AS (UPDATE operations SET state = {s}, state_kind = {k}, updated_at = {a}, version = version + 1
                 WHERE id = {o} AND version = {v} AND EXISTS (SELECT 1 FROM ok) RETURNING 1)"
            ));
            with.push("go AS (SELECT 1 FROM tr)".into());
            "EXISTS (SELECT 1 FROM tr)"
        }
        None => {
            with.push("go AS (SELECT 1 FROM ok)".into());
            "true"
        }
    };
    let job_columns: [Vec<&str>; 4] = [
        jobs.iter().map(|j| j.operation.as_str()).collect(),
        jobs.iter().map(|j| j.id.as_str()).collect(),
        jobs.iter().map(|j| j.state.as_str()).collect(),
        jobs.iter().map(|j| j.updated_at.as_str()).collect(),
    ];
    let attempts: Vec<i64> = jobs.iter().map(|j| j.attempts as i64).collect();
    let outcomes: Vec<String> = jobs.iter().map(|j| serde_json::to_string(&j.outcome)).collect::<Result<_, _>>()?;
    if !jobs.is_empty() {
        let (o, i, s) = (p.add(&job_columns[0]), p.add(&job_columns[1]), p.add(&job_columns[2]));
        let (n, out, at) = (p.add(&attempts), p.add(&outcomes), p.add(&job_columns[3]));
        with.push(format!(
            "j AS (INSERT INTO jobs (operation, id, state, attempts, outcome, updated_at)
             SELECT * FROM UNNEST({o}::text[], {i}::text[], {s}::text[], {n}::bigint[], {out}::text[], {at}::text[])
             WHERE EXISTS (SELECT 1 FROM go)
             ON CONFLICT (operation, id) DO UPDATE SET state = excluded.state, attempts = excluded.attempts,
             outcome = excluded.outcome, updated_at = excluded.updated_at)"
        ));
    }
    let count = timeline.len() as i64;
    let text: [Vec<&str>; 5] = [
        timeline.iter().map(|e| e.operation.as_str()).collect(),
        timeline.iter().map(|e| e.at.as_str()).collect(),
        timeline.iter().map(|e| e.actor.as_str()).collect(),
        timeline.iter().map(|e| e.event.as_str()).collect(),
        timeline.iter().map(|e| e.reason.as_str()).collect(),
    ];
    let from: Vec<Option<&str>> = timeline.iter().map(|e| e.from.as_deref()).collect();
    let to: Vec<Option<&str>> = timeline.iter().map(|e| e.to.as_deref()).collect();
    let data: Vec<String> = timeline.iter().map(|e| serde_json::to_string(&e.data)).collect::<Result<_, _>>()?;
    if !timeline.is_empty() {
        // Seqs from the counter, updated after every check: see `pg.rs`.
        let n = p.add(&count);
        with.push(format!(
            "c AS (UPDATE counters SET value = value + {n} WHERE name = 'timeline' AND EXISTS (SELECT 1 FROM go)
             RETURNING value)"
        ));
        let (o, at, actor, event) = (p.add(&text[0]), p.add(&text[1]), p.add(&text[2]), p.add(&text[3]));
        let (f, t, reason, d) = (p.add(&from), p.add(&to), p.add(&text[4]), p.add(&data));
        with.push(format!(
            "t AS (INSERT INTO timeline (seq, operation, at, actor, event, from_state, to_state, reason, data)
             SELECT c.value - {n} + u.n, u.operation, u.at, u.actor, u.event, u.from_state, u.to_state, u.reason, u.data
             FROM c, UNNEST({o}::text[], {at}::text[], {actor}::text[], {event}::text[], {f}::text[], {t}::text[],
             {reason}::text[], {d}::text[]) WITH ORDINALITY
             AS u(operation, at, actor, event, from_state, to_state, reason, data, n))"
        ));
    }
    let sql = format!("WITH {} SELECT {fence_columns}, EXISTS (SELECT 1 FROM ok), {transitioned}", with.join(",\n"));
    let rows = tx.query(&sql, &p.values)?;
    let row = rows.first().ok_or_else(|| Fail::from(Error::Postgres("a commit's statement returned no row".into())))?;
    if let Some((operation, holder, token)) = checks.fence {
        if !row.get::<_, bool>(2) {
            let current = row.get::<_, Option<String>>(0).zip(row.get::<_, Option<i64>>(1));
            return Err(Error::fenced(operation, holder, *token, current).into());
        }
    }
    if let Some((operation, version, ..)) = checks.transition {
        if !row.get::<_, bool>(3) {
            return Err(Error::Conflict { id: operation.clone(), expected: *version }.into());
        }
    }
    Ok(())
}
