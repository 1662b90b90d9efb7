//! The writes of one commit (`Store::commit`), applied inside the transaction or savepoint the
//! write turn gives them (`writer.rs`): one statement or a few per `Write`, each through the
//! connection's statement cache.

use rusqlite::{params, OptionalExtension};

use opsgraph_core::model::OperationState;
use opsgraph_store::{Error, TimelineEntry, Write};

use crate::Fail;

pub(crate) fn state_kind(state: &OperationState) -> Result<String, Fail> {
    Ok(serde_json::to_value(state.kind())?.as_str().unwrap_or_default().to_string())
}

pub(crate) fn json<T: serde::Serialize>(v: &T) -> Result<String, Fail> {
    Ok(serde_json::to_string(v)?)
}

pub(crate) fn insert_timeline(tx: &rusqlite::Connection, e: &TimelineEntry) -> Result<(), Fail> {
    exec(tx,
        "INSERT INTO timeline (operation, at, actor, event, from_state, to_state, reason, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![e.operation, e.at, e.actor, e.event, e.from, e.to, e.reason, json(&e.data)?],
    )?;
    Ok(())
}

/// Runs a statement through the connection's statement cache: a transition is parsed once.
pub(crate) fn exec<P: rusqlite::Params>(tx: &rusqlite::Connection, sql: &str, params: P) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(params)
}

/// The writes of one commit, in the transaction (or savepoint) `tx`. A run of job records and
/// timeline entries (nothing else between them but guards that read neither table) is written a
/// table at a time, several rows a statement ([`rows`]), after its guards.
pub(crate) fn apply(tx: &rusqlite::Connection, writes: &[Write]) -> Result<(), Fail> {
    let mut rest = writes;
    while !rest.is_empty() {
        let run = rest.iter().take_while(|w| is_row(w) || reads_no_row(w)).count();
        if rest[..run].iter().filter(|w| is_row(w)).count() > 1 {
            for guard in rest[..run].iter().filter(|w| reads_no_row(w)) {
                one(tx, guard)?;
            }
            rows(tx, &rest[..run])?;
            rest = &rest[run..];
        } else {
            one(tx, &rest[0])?;
            rest = &rest[1..];
        }
    }
    Ok(())
}

/// A job record or a timeline entry: what [`rows`] writes.
fn is_row(w: &Write) -> bool {
    matches!(w, Write::Job(_) | Write::Timeline(_))
}

/// A guard that reads neither jobs nor the timeline (the operation's version, the lease's
/// holder) and writes nothing: it sees the same whether the rows of its run are written before
/// or after it, so a run's guards are checked first and its rows keep one statement a table. The
/// driver's commit of a chained job is the result, the version guard, the next start: three
/// statements this way, five with the guard between two runs (issue [N] 5, docs/benchmarks.md).
/// A refused guard refuses the whole commit either way.
fn reads_no_row(w: &Write) -> bool {
    matches!(w, Write::ExpectVersion { .. } | Write::Fence { .. })
}

/// The most rows one statement of [`rows`] writes. Its texts are one per size, each a power of
/// two up to this (five of each kind in the connection's statement cache).
const BATCH: usize = 16;

/// `INSERT INTO {head} VALUES (?, …), … {tail}` for 1, 2, 4 … [`BATCH`] rows of `columns`.
fn batch_texts(head: &str, columns: usize, tail: &str) -> Vec<String> {
    let row = format!("({})", vec!["?"; columns].join(", "));
    (0..=BATCH.ilog2())
        .map(|k| format!("INSERT INTO {head} VALUES {} {tail}", vec![row.as_str(); 1 << k].join(", ")))
        .collect()
}

pub(crate) static JOB_TEXTS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    batch_texts(
        "jobs (operation, id, state, attempts, outcome, updated_at)",
        6,
        "ON CONFLICT (operation, id) DO UPDATE SET state = excluded.state, attempts = excluded.attempts,
         outcome = excluded.outcome, updated_at = excluded.updated_at",
    )
});

pub(crate) static TIMELINE_TEXTS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    batch_texts("timeline (operation, at, actor, event, from_state, to_state, reason, data)", 8, "")
});

/// Job records and timeline entries with nothing else between them: the job records in order,
/// then the entries in order, up to [`BATCH`] rows a statement. A statement's run costs ~5,000
/// instructions before any row is written (the cache's look-up by text, binding, the VDBE's
/// start and reset, the timeline's `AUTOINCREMENT` counter read and written once a statement),
/// and a commit of the driver holds a job record and an entry for each job it starts or ends
/// (issue [N] 5, docs/benchmarks.md). Nothing in the run reads either table, neither refers to
/// the other, and each table's rows keep their order (a job written twice ends as its last
/// record; entries get their `seq` in order): what one statement a row would have left.
fn rows(tx: &rusqlite::Connection, run: &[Write]) -> Result<(), Fail> {
    use rusqlite::ToSql;
    let jobs: Vec<_> = run.iter().filter_map(Write::job).collect();
    let outcomes = jobs.iter().map(|j| json(&j.outcome)).collect::<Result<Vec<_>, _>>()?;
    batched(tx, &JOB_TEXTS, jobs.len(), |i, v| {
        let j = jobs[i];
        v.extend([j.operation.to_sql()?, j.id.to_sql()?, j.state.as_str().to_sql()?, j.attempts.to_sql()?]);
        v.extend([outcomes[i].to_sql()?, j.updated_at.to_sql()?]);
        Ok(())
    })?;
    let entries: Vec<&TimelineEntry> =
        run.iter().filter_map(|w| if let Write::Timeline(e) = w { Some(e) } else { None }).collect();
    let data = entries.iter().map(|e| json(&e.data)).collect::<Result<Vec<_>, _>>()?;
    batched(tx, &TIMELINE_TEXTS, entries.len(), |i, v| {
        let e = entries[i];
        v.extend([e.operation.to_sql()?, e.at.to_sql()?, e.actor.to_sql()?, e.event.to_sql()?]);
        v.extend([e.from.to_sql()?, e.to.to_sql()?, e.reason.to_sql()?, data[i].to_sql()?]);
        Ok(())
    })
}

/// Runs `texts` (from [`batch_texts`]) over rows `0..n`, the largest size that fits first;
/// `bind` gives row `i`'s values.
fn batched<'a>(
    tx: &rusqlite::Connection,
    texts: &[String],
    n: usize,
    bind: impl Fn(usize, &mut Vec<rusqlite::types::ToSqlOutput<'a>>) -> rusqlite::Result<()>,
) -> Result<(), Fail> {
    // Sized once for the largest statement (eight values a row at most): not grown row by row.
    let mut values = Vec::with_capacity(n.min(BATCH) * 8);
    let mut at = 0;
    while at < n {
        let size = (n - at).min(BATCH);
        let k = size.ilog2() as usize;
        values.clear();
        for i in at..at + (1 << k) {
            bind(i, &mut values)?;
        }
        exec(tx, &texts[k], rusqlite::params_from_iter(values.iter()))?;
        at += 1 << k;
    }
    Ok(())
}

/// One write of a commit.
fn one(tx: &rusqlite::Connection, w: &Write) -> Result<(), Fail> {
    {
        match w {
            Write::CreateOperation { op, plan } => {
                exec(tx,
                "INSERT INTO operations (id, parent, intent, resource, state, state_kind, plan_revision, actor, created_at, updated_at, version, intent_id, plan_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                params![
                    op.id,
                    op.parent,
                    json(&op.intent)?,
                    op.resource,
                    json(&op.state)?,
                    state_kind(&op.state)?,
                    op.plan_revision,
                    op.actor,
                    op.created_at,
                    op.updated_at,
                    op.version,
                    op.intent_id,
                    op.plan_id
                ],
            )?;
                exec(
                    tx,
                    "INSERT OR IGNORE INTO plans (revision, operation, plan) VALUES (?1, ?2, ?3)",
                    params![op.plan_revision, op.id, plan],
                )?;
            }
            Write::SetPlan { operation, revision, plan } => {
                exec(
                    tx,
                    "INSERT OR IGNORE INTO plans (revision, operation, plan) VALUES (?1, ?2, ?3)",
                    params![revision, operation, plan],
                )?;
                exec(tx, "UPDATE operations SET plan_revision = ?2 WHERE id = ?1", params![operation, revision])?;
            }
            Write::ReplacePlan { revision, plan } => {
                exec(tx, "UPDATE plans SET plan = ?2 WHERE revision = ?1", params![revision, plan])?;
            }
            Write::ReplaceGateValue { operation, gate, value } => {
                exec(
                    tx,
                    "UPDATE gates SET value = ?3 WHERE operation = ?1 AND id = ?2",
                    params![operation, gate, json(value)?],
                )?;
            }
            Write::ReplaceIntent { operation, intent } => {
                exec(tx, "UPDATE operations SET intent = ?2 WHERE id = ?1", params![operation, json(intent)?])?;
            }
            Write::Transition { operation, expect_version, state, entry } => {
                let changed = exec(
                    tx,
                    "UPDATE operations SET state = ?2, state_kind = ?3, updated_at = ?4, version = version + 1
                 WHERE id = ?1 AND version = ?5",
                    params![operation, json(state)?, state_kind(state)?, entry.at, expect_version],
                )?;
                if changed != 1 {
                    return Err(Error::Conflict { id: operation.clone(), expected: *expect_version }.into());
                }
                insert_timeline(tx, entry)?;
            }
            Write::Timeline(entry) => insert_timeline(tx, entry)?,
            Write::Job(j) => {
                exec(tx,
                "INSERT INTO jobs (operation, id, state, attempts, outcome, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (operation, id) DO UPDATE SET state = excluded.state, attempts = excluded.attempts,
                 outcome = excluded.outcome, updated_at = excluded.updated_at",
                params![j.operation, j.id, j.state.as_str(), j.attempts, json(&j.outcome)?, j.updated_at],
            )?;
            }
            Write::Evidence(e) => {
                exec(tx,
                "INSERT INTO evidence (operation, job, check_id, source, command, expected, observed, passed, at, resource, capability)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    e.operation,
                    e.job,
                    e.check,
                    e.source,
                    e.command,
                    e.expected,
                    e.observed,
                    e.passed,
                    e.at,
                    e.resource,
                    e.capability
                ],
            )?;
            }
            Write::Gate(g) => {
                // An answered gate is never answered again: the update matches no row and the
                // whole transaction is refused.
                let changed = exec(tx,
                "INSERT INTO gates (operation, id, gate_type, reason, options, required_roles, answer, answered_by, answered_at, value, patch)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT (operation, id) DO UPDATE SET answer = excluded.answer, answered_by = excluded.answered_by,
                 answered_at = excluded.answered_at, value = excluded.value WHERE gates.answer IS NULL",
                params![
                    g.operation,
                    g.id,
                    g.type_columns().0,
                    g.reason,
                    json(&g.options)?,
                    json(&g.required_roles)?,
                    g.answer,
                    g.answered_by,
                    g.answered_at,
                    g.value.as_ref().map(json).transpose()?,
                    g.type_columns().1
                ],
            )?;
                if changed != 1 {
                    return Err(Error::GateAnswered { operation: g.operation.clone(), gate: g.id.clone() }.into());
                }
            }
            Write::Artifact(a) => {
                exec(tx,
                "INSERT OR REPLACE INTO artifacts (operation, job, id, sensitivity, location, size, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![a.operation, a.job, a.id, a.sensitivity, a.location, a.size, a.at],
            )?;
            }
            Write::Resource(r) => {
                exec(
                    tx,
                    "INSERT INTO resources (id, doc, last_operation, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE SET doc = excluded.doc, last_operation = excluded.last_operation,
                 updated_at = excluded.updated_at",
                    params![r.id, json(&r.doc)?, r.last_operation, r.updated_at],
                )?;
            }
            Write::DeleteResource(id) => {
                exec(tx, "DELETE FROM resources WHERE id = ?1", params![id])?;
            }
            Write::ResourceEvent(e) => {
                exec(
                    tx,
                    "INSERT INTO resource_events (resource, at, actor, kind, status, operation, summary, detail)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![e.resource, e.at, e.actor, e.kind, e.status, e.operation, e.summary, json(&e.detail)?],
                )?;
            }
            Write::Idempotency { key, resource, operation, job, at } => {
                exec(tx,
                "INSERT OR REPLACE INTO idempotency (key, resource, operation, job, at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![key, resource, operation, job, at],
            )?;
            }
            Write::ExpectPlan { operation, revision } => {
                let current: Option<String> = tx
                    .prepare_cached("SELECT plan_revision FROM operations WHERE id = ?1")?
                    .query_row([operation], |r| r.get(0))
                    .optional()?;
                opsgraph_store::expect_plan(operation, revision, current)?;
            }
            Write::ExpectVersion { operation, version } => {
                let current: Option<i64> = tx
                    .prepare_cached("SELECT version FROM operations WHERE id = ?1")?
                    .query_row([operation], |r| r.get(0))
                    .optional()?;
                opsgraph_store::expect_version(operation, *version, current)?;
            }
            Write::Token(t) => {
                exec(
                    tx,
                    "INSERT INTO tokens (id, name, hash, roles, created_by, created_at, revoked_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (id) DO UPDATE SET revoked_at = excluded.revoked_at",
                    params![t.id, t.name, t.hash, json(&t.roles)?, t.created_by, t.created_at, t.revoked_at],
                )?;
            }
            Write::Audit(a) => {
                exec(
                    tx,
                    "INSERT INTO audit (at, actor, action, target, operation, resource, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![a.at, a.actor, a.action, a.target, a.operation, a.resource, json(&a.detail)?],
                )?;
            }
            Write::Request(r) => {
                let changed = exec(
                    tx,
                    "INSERT OR IGNORE INTO requests (actor, key, fingerprint, status, response, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![r.actor, r.key, r.fingerprint, r.status, json(&r.response)?, r.at],
                )?;
                if changed != 1 {
                    return Err(Error::RequestRecorded { actor: r.actor.clone(), key: r.key.clone() }.into());
                }
            }
            Write::Agent(a) => crate::sqlite_agent::apply(tx, a)?,
            Write::Fence { operation, holder, token } => crate::lease::sqlite_fence(tx, operation, holder, *token)?,
            Write::ExpectIdle { resource, operation } => crate::lease::sqlite_idle(tx, resource, operation)?,
        }
    }
    Ok(())
}
