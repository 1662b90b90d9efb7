//! The SQLite statements of agent tasks (`agent.rs`). Plain SQL that PostgreSQL also takes
//! (`RETURNING`, integer milliseconds, no JSON functions); the claim's sub-select is where a
//! PostgreSQL port adds `FOR UPDATE SKIP LOCKED`.

use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row};

use opsgraph_store::agent::{AgentClaim, AgentLogLine, AgentTask, AgentTaskState, AgentWrite};
use opsgraph_store::Error;

use crate::writer::Writer;
use crate::Fail;

const COLUMNS: &str = "id, operation, job, attempt, kind, agent, resource, state, payload, lease, claimed_by, claims, \
                       expires_ms, report, created_at, updated_at";

fn json<T: serde::Serialize>(v: &T) -> Result<String, Fail> {
    Ok(serde_json::to_string(v)?)
}

type RawTask = (AgentTask, String, String, Option<String>);

fn task_row(r: &Row<'_>) -> rusqlite::Result<RawTask> {
    Ok((
        AgentTask {
            id: r.get(0)?,
            operation: r.get(1)?,
            job: r.get(2)?,
            attempt: r.get(3)?,
            kind: r.get(4)?,
            agent: r.get(5)?,
            resource: r.get(6)?,
            state: AgentTaskState::Queued,
            payload: serde_json::Value::Null,
            lease: r.get(9)?,
            claimed_by: r.get(10)?,
            claims: r.get(11)?,
            expires_ms: r.get(12)?,
            report: None,
            created_at: r.get(14)?,
            updated_at: r.get(15)?,
        },
        r.get(7)?,
        r.get(8)?,
        r.get(13)?,
    ))
}

fn finish((mut t, state, payload, report): RawTask) -> Result<AgentTask, Fail> {
    t.state = AgentTaskState::parse(&state).unwrap_or(AgentTaskState::Lost);
    t.payload = serde_json::from_str(&payload)?;
    t.report = report.map(|r| serde_json::from_str(&r)).transpose()?;
    Ok(t)
}

fn exec<P: rusqlite::Params>(tx: &Connection, sql: &str, params: P) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(params)
}

/// A write of an agent task inside `commit`'s transaction.
pub(crate) fn apply(tx: &Connection, w: &AgentWrite) -> Result<(), Fail> {
    match w {
        AgentWrite::Enqueue(t) => insert(tx, t)?,
        AgentWrite::Handed { task, claim } => {
            insert(tx, task)?;
            record_claim(tx, claim, task)?;
        }
        AgentWrite::Claim(c) => {
            claim_in(tx, c)?;
        }
        AgentWrite::Heartbeat { task, lease, expires_ms, at } => {
            let n = exec(
                tx,
                "UPDATE agent_tasks SET expires_ms = ?3, updated_at = ?4 WHERE id = ?1 AND lease = ?2 AND state = 'claimed'",
                params![task, lease, expires_ms, at],
            )?;
            held(tx, task, n)?;
        }
        AgentWrite::Log { task, lease, text, at } => {
            let n = exec(
                tx,
                "INSERT INTO agent_log (task, at, text) SELECT ?1, ?3, ?4
                 WHERE EXISTS (SELECT 1 FROM agent_tasks WHERE id = ?1 AND lease = ?2 AND state = 'claimed')",
                params![task, lease, at, text],
            )?;
            held(tx, task, n)?;
        }
        AgentWrite::Report { task, lease, report, at } => {
            let n = exec(
                tx,
                "UPDATE agent_tasks SET state = 'reported', report = ?3, updated_at = ?4
                 WHERE id = ?1 AND lease = ?2 AND state = 'claimed'",
                params![task, lease, json(report)?, at],
            )?;
            // Reported under this lease already (the agent sent it again, to another replica): the
            // first report stands and this write is done.
            let again = n == 0
                && tx
                    .query_row(
                        "SELECT 1 FROM agent_tasks WHERE id = ?1 AND lease = ?2 AND state = 'reported'",
                        params![task, lease],
                        |_| Ok(()),
                    )
                    .optional()?
                    .is_some();
            if !again {
                held(tx, task, n)?;
            }
        }
        AgentWrite::Settle { task, from, to, now_ms, at } => {
            // Giving up on time (unclaimed, lost) needs the deadline passed; cancelling does not.
            let timed = !matches!(to, AgentTaskState::Cancelled);
            let n = exec(
                tx,
                "UPDATE agent_tasks SET state = ?3, updated_at = ?5
                 WHERE id = ?1 AND state = ?2 AND (?4 = 0 OR expires_ms < ?6)",
                params![task, from.as_str(), to.as_str(), timed as i64, at, now_ms],
            )?;
            if n != 1 {
                return Err(Error::AgentTaskMoved { task: task.clone() }.into());
            }
        }
    }
    Ok(())
}

/// A new task's row, in the state the caller gives it.
fn insert(tx: &Connection, t: &AgentTask) -> Result<(), Fail> {
    exec(
        tx,
        &format!(
            "INSERT INTO agent_tasks ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
        ),
        params![
            t.id,
            t.operation,
            t.job,
            t.attempt,
            t.kind,
            t.agent,
            t.resource,
            t.state.as_str(),
            json(&t.payload)?,
            t.lease,
            t.claimed_by,
            t.claims,
            t.expires_ms,
            t.report.as_ref().map(json).transpose()?,
            t.created_at,
            t.updated_at
        ],
    )?;
    Ok(())
}

/// A write under a task's lease changed `n` rows: one, or the lease is no longer the task's.
fn held(tx: &Connection, task: &str, n: usize) -> Result<(), Fail> {
    if n != 1 {
        return Err(stale(tx, task).into());
    }
    Ok(())
}

/// The refusal of a write whose lease is not the task's, naming the state the task is in.
fn stale(tx: &Connection, task: &str) -> Error {
    let state: Option<String> =
        tx.query_row("SELECT state FROM agent_tasks WHERE id = ?1", [task], |r| r.get(0)).optional().ok().flatten();
    Error::StaleLease { task: task.to_string(), state: state.unwrap_or_else(|| "unknown".into()) }
}

pub(crate) fn claim(
    conn: &mut Connection,
    writer: &Writer,
    foreign: &std::cell::Cell<i64>,
    c: &AgentClaim,
) -> Result<Vec<AgentTask>, Error> {
    // A look first, without the write lock: most claims (agents long-polling) find nothing, and
    // must not queue behind the writers or hold them up; a claim whose lease holds tasks (made
    // again, or made in a commit of its report's: `AgentWrite::Claim`) gets them from this read,
    // which sees only committed rows (only the holder and the runtime change a claimed task).
    let held = crate::edge(|| held_by(conn, c))?;
    if !held.is_empty() {
        return Ok(held);
    }
    if !crate::edge(|| queued(conn, &c.agent))? {
        return Ok(vec![]);
    }
    // Under the write lock, grouped with other writes of this file (`writer.rs`).
    writer.write(
        conn,
        foreign,
        |tx| claim_in(tx, c),
        || {
            let c = c.clone();
            crate::writer::job(move |tx| claim_in(tx, &c))
        },
        None,
    )
}

/// The claim inside a write transaction (`claim`'s, or a report's: `SqliteStore::agent_commit_claim`).
pub(crate) fn claim_in(tx: &Connection, c: &AgentClaim) -> Result<Vec<AgentTask>, Fail> {
    // A claim retried with its lease (its answer was lost) gets the tasks it already holds.
    let held = held_by(tx, c)?;
    if !held.is_empty() {
        return Ok(held);
    }
    let filter = if c.resources.is_empty() {
        String::new()
    } else {
        let marks: Vec<String> = (0..c.resources.len()).map(|i| format!("?{}", i + 7)).collect();
        format!(" AND resource IN ({})", marks.join(", "))
    };
    let sql = format!(
        "UPDATE agent_tasks SET state = 'claimed', lease = ?1, claimed_by = ?2, claims = claims + 1, expires_ms = ?3,
         updated_at = ?4
         WHERE seq IN (SELECT seq FROM agent_tasks WHERE state = 'queued' AND agent = ?5{filter} ORDER BY seq LIMIT ?6)
         AND state = 'queued'
         RETURNING {COLUMNS}"
    );
    let mut args: Vec<rusqlite::types::Value> = vec![
        c.lease.clone().into(),
        c.actor.clone().into(),
        c.expires_ms.into(),
        c.at.clone().into(),
        c.agent.clone().into(),
        i64::from(c.max.max(1)).into(),
    ];
    args.extend(c.resources.iter().map(|r| r.clone().into()));
    let rows =
        tx.prepare_cached(&sql)?.query_map(params_from_iter(args), task_row)?.collect::<rusqlite::Result<Vec<_>>>()?;
    if rows.is_empty() {
        return Ok(vec![]);
    }
    let mut tasks = rows.into_iter().map(finish).collect::<Result<Vec<_>, _>>()?;
    tasks.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
    for task in &tasks {
        record_claim(tx, c, task)?;
    }
    Ok(tasks)
}

/// The tasks `c`'s lease holds (claimed under it by its agent), oldest first.
fn held_by(conn: &Connection, c: &AgentClaim) -> Result<Vec<AgentTask>, Fail> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM agent_tasks WHERE lease = ?1 AND agent = ?2 AND state = 'claimed' ORDER BY seq"
    ))?
    .query_map(params![c.lease, c.agent], task_row)?
    .collect::<rusqlite::Result<Vec<_>>>()?
    .into_iter()
    .map(finish)
    .collect()
}

/// The audit row and timeline entry of `task`'s claim by `c`.
fn record_claim(tx: &Connection, c: &AgentClaim, task: &AgentTask) -> Result<(), Fail> {
    let a = &c.audit;
    exec(
        tx,
        "INSERT INTO audit (at, actor, action, target, operation, resource, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![a.at, a.actor, a.action, task.id, task.operation, task.resource, json(&a.detail)?],
    )?;
    let e = &c.entry;
    exec(
        tx,
        "INSERT INTO timeline (operation, at, actor, event, from_state, to_state, reason, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            task.operation,
            e.at,
            e.actor,
            e.event,
            e.from,
            e.to,
            e.reason.replace("{task}", &task.id),
            json(&serde_json::json!({"task": task.id, "job": task.job, "attempt": task.attempt, "kind": task.kind, "resource": task.resource}))?
        ],
    )?;
    Ok(())
}

pub(crate) fn task(conn: &Connection, id: &str) -> Result<Option<AgentTask>, Fail> {
    let row = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM agent_tasks WHERE id = ?1"))?
        .query_row([id], task_row)
        .optional()?;
    row.map(finish).transpose()
}

/// Whether a task is queued for `agent`.
pub(crate) fn queued(conn: &Connection, agent: &str) -> Result<bool, Fail> {
    Ok(conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM agent_tasks WHERE agent = ?1 AND state = 'queued')")?
        .query_row([agent], |r| r.get::<_, bool>(0))?)
}

pub(crate) fn tasks(conn: &Connection, operation: &str) -> Result<Vec<AgentTask>, Fail> {
    let mut stmt =
        conn.prepare_cached(&format!("SELECT {COLUMNS} FROM agent_tasks WHERE operation = ?1 ORDER BY seq"))?;
    let rows = stmt.query_map([operation], task_row)?;
    rows.map(|r| finish(r?)).collect()
}

pub(crate) fn log(conn: &Connection, task: &str, after: i64) -> Result<Vec<AgentLogLine>, Fail> {
    let mut stmt =
        conn.prepare_cached("SELECT seq, task, at, text FROM agent_log WHERE task = ?1 AND seq > ?2 ORDER BY seq")?;
    let rows = stmt.query_map(params![task, after], |r| {
        Ok(AgentLogLine { seq: r.get(0)?, task: r.get(1)?, at: r.get(2)?, text: r.get(3)? })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
