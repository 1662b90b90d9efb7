//! The PostgreSQL statements of agent tasks (`agent.rs`): the port of `sqlite_agent.rs`. The
//! claim's sub-select takes `FOR UPDATE SKIP LOCKED`, so claimers racing on one database each get
//! a different queued task instead of waiting on the same row; the claim's timeline row takes its
//! seq from the counter like every other (`pg.rs`).

use postgres::types::ToSql;
use postgres::Row;

use crate::conn::{PgStore, Tx};
use opsgraph_store::agent::{AgentClaim, AgentLogLine, AgentTask, AgentTaskState, AgentWrite};
use opsgraph_store::Error;

use crate::Fail;

const COLUMNS: &str = "id, operation, job, attempt, kind, agent, resource, state, payload, lease, claimed_by, claims, \
                       expires_ms, report, created_at, updated_at";

fn json<T: serde::Serialize>(v: &T) -> Result<String, Fail> {
    Ok(serde_json::to_string(v)?)
}

fn task_row(r: &Row) -> Result<AgentTask, Fail> {
    let state: String = r.get(7);
    let payload: String = r.get(8);
    let report: Option<String> = r.get(13);
    Ok(AgentTask {
        id: r.get(0),
        operation: r.get(1),
        job: r.get(2),
        attempt: r.get::<_, i64>(3) as u32,
        kind: r.get(4),
        agent: r.get(5),
        resource: r.get(6),
        state: AgentTaskState::parse(&state).unwrap_or(AgentTaskState::Lost),
        payload: serde_json::from_str(&payload)?,
        lease: r.get(9),
        claimed_by: r.get(10),
        claims: r.get::<_, i64>(11) as u32,
        expires_ms: r.get(12),
        report: report.map(|r| serde_json::from_str(&r)).transpose()?,
        created_at: r.get(14),
        updated_at: r.get(15),
    })
}

/// A write of an agent task inside `commit`'s transaction.
pub(crate) fn apply(tx: &mut Tx<'_, '_>, w: &AgentWrite) -> Result<(), Fail> {
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
            let n = tx.exec(
                "UPDATE agent_tasks SET expires_ms = $3, updated_at = $4 WHERE id = $1 AND lease = $2 AND state = 'claimed'",
                &[task, lease, expires_ms, at],
            )?;
            held(tx, task, n)?;
        }
        AgentWrite::Log { task, lease, text, at } => {
            let n = tx.exec(
                "INSERT INTO agent_log (task, at, text) SELECT $1, $3, $4
                 WHERE EXISTS (SELECT 1 FROM agent_tasks WHERE id = $1 AND lease = $2 AND state = 'claimed')",
                &[task, lease, at, text],
            )?;
            held(tx, task, n)?;
        }
        AgentWrite::Report { task, lease, report, at } => {
            let n = tx.exec(
                "UPDATE agent_tasks SET state = 'reported', report = $3, updated_at = $4
                 WHERE id = $1 AND lease = $2 AND state = 'claimed'",
                &[task, lease, &json(report)?, at],
            )?;
            // Reported under this lease already (the agent sent it again, to another replica): the
            // first report stands and this write is done.
            let again = n == 0
                && !tx
                    .query(
                        "SELECT 1 FROM agent_tasks WHERE id = $1 AND lease = $2 AND state = 'reported'",
                        &[task, lease],
                    )?
                    .is_empty();
            if !again {
                held(tx, task, n)?;
            }
        }
        AgentWrite::Settle { task, from, to, now_ms, at } => {
            // Giving up on time (unclaimed, lost) needs the deadline passed; cancelling does not.
            let timed = !matches!(to, AgentTaskState::Cancelled);
            let n = tx.exec(
                "UPDATE agent_tasks SET state = $3, updated_at = $5
                 WHERE id = $1 AND state = $2 AND (NOT $4 OR expires_ms < $6)",
                &[task, &from.as_str(), &to.as_str(), &timed, at, now_ms],
            )?;
            if n != 1 {
                return Err(Error::AgentTaskMoved { task: task.clone() }.into());
            }
        }
    }
    Ok(())
}

/// A new task's row, in the state the caller gives it.
fn insert(tx: &mut Tx<'_, '_>, t: &AgentTask) -> Result<(), Fail> {
    tx.exec(
        &format!(
            "INSERT INTO agent_tasks ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
        ),
        &[
            &t.id,
            &t.operation,
            &t.job,
            &(t.attempt as i64),
            &t.kind,
            &t.agent,
            &t.resource,
            &t.state.as_str(),
            &json(&t.payload)?,
            &t.lease,
            &t.claimed_by,
            &(t.claims as i64),
            &t.expires_ms,
            &t.report.as_ref().map(json).transpose()?,
            &t.created_at,
            &t.updated_at,
        ],
    )?;
    Ok(())
}

/// A write under a task's lease changed `n` rows: one, or the lease is no longer the task's.
fn held(tx: &mut Tx<'_, '_>, task: &str, n: u64) -> Result<(), Fail> {
    if n != 1 {
        return Err(stale(tx, task).into());
    }
    Ok(())
}

/// The refusal of a write whose lease is not the task's, naming the state the task is in.
fn stale(tx: &mut Tx<'_, '_>, task: &str) -> Error {
    let state: Option<String> = tx
        .query("SELECT state FROM agent_tasks WHERE id = $1", &[&task])
        .ok()
        .and_then(|rows| rows.first().map(|r| r.get(0)));
    Error::StaleLease { task: task.to_string(), state: state.unwrap_or_else(|| "unknown".into()) }
}

/// The audit row and timeline entry of `task`'s claim by `c`.
fn record_claim(tx: &mut Tx<'_, '_>, c: &AgentClaim, task: &AgentTask) -> Result<(), Fail> {
    let a = &c.audit;
    tx.exec(
        "INSERT INTO audit (at, actor, action, target, operation, resource, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[&a.at, &a.actor, &a.action, &task.id, &task.operation, &task.resource, &json(&a.detail)?],
    )?;
    // The timeline row last, with its seq from the counter (held until the commit).
    let e = &c.entry;
    let seq: i64 =
        tx.query("UPDATE counters SET value = value + 1 WHERE name = 'timeline' RETURNING value", &[])?[0].get(0);
    let data = json(&serde_json::json!({
        "task": task.id, "job": task.job, "attempt": task.attempt, "kind": task.kind, "resource": task.resource
    }))?;
    tx.exec(
        "INSERT INTO timeline_runs (first_seq, last_seq, operation, at, actor, event, from_state, to_state, reason, data)
         VALUES ($1, $1, $2, ARRAY[$3::text], ARRAY[$4::text], ARRAY[$5::text], ARRAY[$6::text], ARRAY[$7::text],
                 ARRAY[$8::text], ARRAY[$9::text])",
        &[
            &seq,
            &task.operation,
            &e.at,
            &e.actor,
            &e.event,
            &e.from,
            &e.to,
            &e.reason.replace("{task}", &task.id),
            &data,
        ],
    )?;
    Ok(())
}

/// The claim inside a transaction (`claim_agent_task`'s, or a commit's: `AgentWrite::Claim`).
fn claim_in(tx: &mut Tx<'_, '_>, c: &AgentClaim) -> Result<Vec<AgentTask>, Fail> {
    // A claim retried with its lease (its answer was lost) gets the tasks it already holds.
    let held = tx.query(
        &format!(
            "SELECT {COLUMNS} FROM agent_tasks WHERE lease = $1 AND agent = $2 AND state = 'claimed' ORDER BY seq"
        ),
        &[&c.lease, &c.agent],
    )?;
    if !held.is_empty() {
        return held.iter().map(task_row).collect();
    }
    let max = i64::from(c.max.max(1));
    let filter = if c.resources.is_empty() { "" } else { " AND resource = ANY($7)" };
    // The batch is picked once (a materialized CTE): a sub-select in `IN (…)` may run again
    // for each row and, skipping what this statement already locked, take more than `$6`.
    let sql = format!(
        "WITH picked AS MATERIALIZED (SELECT seq FROM agent_tasks WHERE state = 'queued' AND agent = $5{filter}
                                      ORDER BY seq LIMIT $6 FOR UPDATE SKIP LOCKED)
         UPDATE agent_tasks SET state = 'claimed', lease = $1, claimed_by = $2, claims = claims + 1, expires_ms = $3,
         updated_at = $4
         FROM picked WHERE agent_tasks.seq = picked.seq AND agent_tasks.state = 'queued'
         RETURNING {COLUMNS}"
    );
    let mut args: Vec<&(dyn ToSql + Sync)> = vec![&c.lease, &c.actor, &c.expires_ms, &c.at, &c.agent, &max];
    if !c.resources.is_empty() {
        args.push(&c.resources);
    }
    let rows = tx.query(&sql, &args)?;
    let mut tasks = rows.iter().map(task_row).collect::<Result<Vec<_>, _>>()?;
    tasks.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
    for task in &tasks {
        record_claim(tx, c, task)?;
    }
    Ok(tasks)
}

impl PgStore {
    pub(crate) fn claim_agent_task(&mut self, c: &AgentClaim) -> Result<Vec<AgentTask>, Fail> {
        let mut client = self.client.borrow_mut();
        let mut tx = Tx { tx: client.transaction()?, statements: &self.statements };
        let tasks = claim_in(&mut tx, c)?;
        tx.tx.commit()?;
        Ok(tasks)
    }

    pub(crate) fn agent_task_by_id(&self, id: &str) -> Result<Option<AgentTask>, Fail> {
        let rows = self.query(&format!("SELECT {COLUMNS} FROM agent_tasks WHERE id = $1"), &[&id])?;
        rows.first().map(task_row).transpose()
    }

    pub(crate) fn agent_tasks_of(&self, operation: &str) -> Result<Vec<AgentTask>, Fail> {
        let rows =
            self.query(&format!("SELECT {COLUMNS} FROM agent_tasks WHERE operation = $1 ORDER BY seq"), &[&operation])?;
        rows.iter().map(task_row).collect()
    }

    pub(crate) fn agent_log_of(&self, task: &str, after: i64) -> Result<Vec<AgentLogLine>, Fail> {
        let rows = self.query(
            "SELECT seq, task, at, text FROM agent_log WHERE task = $1 AND seq > $2 ORDER BY seq",
            &[&task, &after],
        )?;
        Ok(rows.iter().map(|r| AgentLogLine { seq: r.get(0), task: r.get(1), at: r.get(2), text: r.get(3) }).collect())
    }
}
