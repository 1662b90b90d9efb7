//! The PostgreSQL backend, for several replicas on one database: the sync `postgres` client (no
//! TLS), its own numbered migrations (`schema_version`), one transaction per [`Store::commit`].
//!
//! Ordering: timeline `seq`s are taken from a one-row counter updated at the end of the
//! transaction, after every check; the row lock is held until the commit, so seqs are handed out
//! in commit order and a reader of [`Store::timeline_after`] never misses a row that commits
//! later with a smaller seq (a sequence would not promise that).

use std::cell::RefCell;
use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{Client, NoTls, Row};
use serde_json::Value;

use opsgraph_core::model::OperationState;
use opsgraph_store::redact;
use opsgraph_store::{
    ArtifactRecord, AuditFilter, AuditRecord, Error, EvidenceRecord, GateRecord, JobRecord, JobState, Lease,
    OperationFilter, OperationRecord, RequestRecord, ResourceEventRecord, ResourceRecord, Stats, Store, TimelineEntry,
    TokenRecord, Write,
};

pub use crate::conn::PgStore;
use crate::conn::{pg_message, Tx};
use crate::schema::{MIGRATIONS, MIGRATION_LOCK};
use crate::{edge, Fail};

impl PgStore {
    /// Connects (without TLS) and brings the schema up to date; a newer schema is refused.
    pub fn connect(url: &str) -> Result<PgStore, Error> {
        edge(|| {
            let client =
                Client::connect(url, NoTls).map_err(|e| Error::PgOpen { url: redact(url), reason: pg_message(&e) })?;
            let store = PgStore {
                client: RefCell::new(client),
                statements: RefCell::new(HashMap::new()),
                writer: crate::pg_group::writer_of(url),
                listening: std::cell::Cell::new(false),
                listening_agents: std::cell::Cell::new(false),
                backend: Default::default(),
                named: Default::default(),
                query: Default::default(),
                url: url.to_string(),
                syncer: Default::default(),
            };
            store.migrate()?;
            Ok(store)
        })
    }

    /// The schema version after migrations.
    pub fn schema_version(&self) -> Result<i64, Error> {
        edge(|| {
            let row = self.client.borrow_mut().query_one("SELECT version FROM schema_version", &[])?;
            Ok(row.get::<_, i32>(0) as i64)
        })
    }

    fn migrate(&self) -> Result<(), Fail> {
        let mut client = self.client.borrow_mut();
        // The common case, a connection per request to a database already up to date: one read,
        // no lock, no DDL. A missing table or another version takes the full path. The same read
        // learns the connection's server process (`conn.rs`, `Backend`).
        if let Ok(Some(row)) = client.query_opt("SELECT version, pg_backend_pid() FROM schema_version", &[]) {
            self.backend.set(row.get(1));
            if row.get::<_, i32>(0) as usize == MIGRATIONS.len() {
                return Ok(());
            }
        }
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")?;
        let current = match tx.query_opt("SELECT version FROM schema_version", &[])? {
            Some(row) => row.get::<_, i32>(0) as i64,
            None => {
                tx.execute("INSERT INTO schema_version (version) VALUES (0)", &[])?;
                0
            }
        };
        let supported = MIGRATIONS.len() as i64;
        if current > supported {
            return Err(Error::TooNew { found: current, supported }.into());
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
            tx.batch_execute(sql)?;
            tx.execute("UPDATE schema_version SET version = $1", &[&(i as i32 + 1)])?;
        }
        tx.commit()?;
        self.backend.set(client.query_one("SELECT pg_backend_pid()", &[])?.get(0));
        Ok(())
    }

    pub(crate) fn query(&self, sql: &str, args: Args<'_>) -> Result<Vec<Row>, Fail> {
        let mut client = self.client.borrow_mut();
        let stmt = PgStore::prepared(&self.statements, &mut *client, sql)?;
        Ok(client.query(&stmt, args)?)
    }

    pub(crate) fn query_opt(&self, sql: &str, args: Args<'_>) -> Result<Option<Row>, Fail> {
        Ok(self.query(sql, args)?.into_iter().next())
    }

    /// The rows of `sql`, each read by `read`.
    fn rows<T>(&self, sql: &str, args: Args<'_>, read: Reader<T>) -> Result<Vec<T>, Fail> {
        self.query(sql, args)?.iter().map(read).collect()
    }

    /// The first row of `sql`, if any, read by `read`.
    fn first<T>(&self, sql: &str, args: Args<'_>, read: Reader<T>) -> Result<Option<T>, Fail> {
        self.query_opt(sql, args)?.as_ref().map(read).transpose()
    }
}

/// A statement's parameters.
type Args<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A record's reader: its fields from a row, JSON columns parsed.
type Reader<T> = fn(&Row) -> Result<T, Fail>;

fn state_kind(state: &OperationState) -> Result<String, Fail> {
    Ok(serde_json::to_value(state.kind())?.as_str().unwrap_or_default().to_string())
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, Fail> {
    Ok(serde_json::to_string(v)?)
}

fn parse(text: &str) -> Result<Value, Fail> {
    Ok(serde_json::from_str(text)?)
}

const OPERATION_COLUMNS: &str =
    "id, parent, intent, resource, state, plan_revision, actor, created_at, updated_at, version, intent_id, plan_id";

fn operation(r: &Row) -> Result<OperationRecord, Fail> {
    Ok(OperationRecord {
        id: r.get(0),
        parent: r.get(1),
        intent: parse(r.get(2))?,
        resource: r.get(3),
        state: serde_json::from_str(r.get(4))?,
        plan_revision: r.get(5),
        actor: r.get(6),
        created_at: r.get(7),
        updated_at: r.get(8),
        version: r.get(9),
        intent_id: r.get(10),
        plan_id: r.get(11),
    })
}

/// Timeline entries of the runs `{runs}` names (a table or a subquery, as `r`), expanded (schema
/// migration 11: a run holds one commit's entries of one operation, entry `n` has seq
/// `first_seq + n - 1`); `ORDER BY TIMELINE_ORDER` puts them in seq order.
const TIMELINE_SELECT: &str = "SELECT r.first_seq + u.n - 1, r.operation, u.at, u.actor, u.event, u.from_state,
    u.to_state, u.reason, u.data
    FROM {runs} r, UNNEST(r.at, r.actor, r.event, r.from_state, r.to_state, r.reason, r.data) WITH ORDINALITY
    AS u(at, actor, event, from_state, to_state, reason, data, n)";

/// Seq order of [`TIMELINE_SELECT`]'s entries: runs do not overlap.
const TIMELINE_ORDER: &str = "r.last_seq, u.n";

/// [`TIMELINE_SELECT`] from the runs `runs` picks.
fn timeline_select(runs: &str) -> String {
    TIMELINE_SELECT.replace("{runs}", runs)
}

fn timeline_entry(r: &Row) -> Result<TimelineEntry, Fail> {
    Ok(TimelineEntry {
        seq: r.get(0),
        operation: r.get(1),
        at: r.get(2),
        actor: r.get(3),
        event: r.get(4),
        from: r.get(5),
        to: r.get(6),
        reason: r.get(7),
        data: parse(r.get(8))?,
    })
}

const TOKEN_COLUMNS: &str = "id, name, hash, roles, created_by, created_at, revoked_at";

fn token(r: &Row) -> Result<TokenRecord, Fail> {
    Ok(TokenRecord {
        id: r.get(0),
        name: r.get(1),
        hash: r.get(2),
        roles: serde_json::from_str(r.get(3))?,
        created_by: r.get(4),
        created_at: r.get(5),
        revoked_at: r.get(6),
    })
}

fn resource(r: &Row) -> Result<ResourceRecord, Fail> {
    Ok(ResourceRecord { id: r.get(0), doc: parse(r.get(1))?, last_operation: r.get(2), updated_at: r.get(3) })
}

/// The writes of one commit in `tx`, which the caller commits (or rolls back on an error).
pub(crate) fn apply(tx: &mut Tx<'_, '_>, writes: &[Write]) -> Result<(), Fail> {
    // Timeline entries and job records are written last, in one statement, with the seqs (see
    // the module's comment); a driven operation's fence and transition are checked in it.
    let fold = crate::pg_tail::folds(writes);
    for w in writes {
        match w {
            Write::Fence { .. } | Write::Transition { .. } | Write::ExpectVersion { .. } if fold => {}
            Write::Timeline(_) | Write::Job(_) => {}
            Write::CreateOperation { op, plan } => {
                tx.exec(
                "INSERT INTO operations (id, parent, intent, resource, state, state_kind, plan_revision, actor, created_at, updated_at, version, intent_id, plan_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                &[
                    &op.id,
                    &op.parent,
                    &json(&op.intent)?,
                    &op.resource,
                    &json(&op.state)?,
                    &state_kind(&op.state)?,
                    &op.plan_revision,
                    &op.actor,
                    &op.created_at,
                    &op.updated_at,
                    &op.version,
                    &op.intent_id,
                    &op.plan_id,
                ],
            )?;
                tx.exec(
                    "INSERT INTO plans (revision, operation, plan) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    &[&op.plan_revision, &op.id, plan],
                )?;
            }
            Write::SetPlan { operation, revision, plan } => {
                tx.exec(
                    "INSERT INTO plans (revision, operation, plan) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    &[revision, operation, plan],
                )?;
                tx.exec("UPDATE operations SET plan_revision = $2 WHERE id = $1", &[operation, revision])?;
            }
            Write::ReplacePlan { revision, plan } => {
                tx.exec("UPDATE plans SET plan = $2 WHERE revision = $1", &[revision, plan])?;
            }
            Write::ReplaceGateValue { operation, gate, value } => {
                tx.exec(
                    "UPDATE gates SET value = $3 WHERE operation = $1 AND id = $2",
                    &[operation, gate, &json(value)?],
                )?;
            }
            Write::ReplaceIntent { operation, intent } => {
                tx.exec("UPDATE operations SET intent = $2 WHERE id = $1", &[operation, &json(intent)?])?;
            }
            Write::Transition { operation, expect_version, state, entry } => {
                let changed = tx.exec(
                    "UPDATE operations SET state = $2, state_kind = $3, updated_at = $4, version = version + 1
                 WHERE id = $1 AND version = $5",
                    &[operation, &json(state)?, &state_kind(state)?, &entry.at, expect_version],
                )?;
                if changed != 1 {
                    return Err(Error::Conflict { id: operation.clone(), expected: *expect_version }.into());
                }
            }
            Write::Evidence(e) => {
                tx.exec(
                "INSERT INTO evidence (operation, job, check_id, source, command, expected, observed, passed, at, resource, capability)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                &[
                    &e.operation,
                    &e.job,
                    &e.check,
                    &e.source,
                    &e.command,
                    &e.expected,
                    &e.observed,
                    &e.passed,
                    &e.at,
                    &e.resource,
                    &e.capability,
                ],
            )?;
            }
            Write::Gate(g) => {
                // An answered gate is never answered again: the update matches no row and the
                // whole transaction is refused.
                let changed = tx.exec(
                "INSERT INTO gates (operation, id, gate_type, reason, options, required_roles, answer, answered_by, answered_at, value, patch)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                 ON CONFLICT (operation, id) DO UPDATE SET answer = excluded.answer, answered_by = excluded.answered_by,
                 answered_at = excluded.answered_at, value = excluded.value WHERE gates.answer IS NULL",
                &[
                    &g.operation,
                    &g.id,
                    &g.type_columns().0,
                    &g.reason,
                    &json(&g.options)?,
                    &json(&g.required_roles)?,
                    &g.answer,
                    &g.answered_by,
                    &g.answered_at,
                    &g.value.as_ref().map(json).transpose()?,
                    &g.type_columns().1,
                ],
            )?;
                if changed != 1 {
                    return Err(Error::GateAnswered { operation: g.operation.clone(), gate: g.id.clone() }.into());
                }
            }
            Write::Artifact(a) => {
                tx.exec(
                "INSERT INTO artifacts (operation, job, id, sensitivity, location, size, at) VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (operation, job, id) DO UPDATE SET sensitivity = excluded.sensitivity,
                 location = excluded.location, size = excluded.size, at = excluded.at",
                &[&a.operation, &a.job, &a.id, &a.sensitivity, &a.location, &a.size, &a.at],
            )?;
            }
            Write::Resource(r) => {
                tx.exec(
                    "INSERT INTO resources (id, doc, last_operation, updated_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (id) DO UPDATE SET doc = excluded.doc, last_operation = excluded.last_operation,
                 updated_at = excluded.updated_at",
                    &[&r.id, &json(&r.doc)?, &r.last_operation, &r.updated_at],
                )?;
            }
            Write::DeleteResource(id) => {
                tx.exec("DELETE FROM resources WHERE id = $1", &[id])?;
            }
            Write::ResourceEvent(e) => {
                tx.exec(
                    "INSERT INTO resource_events (resource, at, actor, kind, status, operation, summary, detail)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    &[&e.resource, &e.at, &e.actor, &e.kind, &e.status, &e.operation, &e.summary, &json(&e.detail)?],
                )?;
            }
            Write::Idempotency { key, resource, operation, job, at } => {
                tx.exec(
                    "INSERT INTO idempotency (key, resource, operation, job, at) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (key) DO UPDATE SET resource = excluded.resource, operation = excluded.operation,
                 job = excluded.job, at = excluded.at",
                    &[key, resource, operation, job, at],
                )?;
            }
            Write::ExpectPlan { operation, revision } => {
                let rows = tx.query("SELECT plan_revision FROM operations WHERE id = $1", &[operation])?;
                opsgraph_store::expect_plan(operation, revision, rows.first().map(|r| r.get(0)))?;
            }
            Write::ExpectVersion { operation, version } => {
                // `FOR SHARE`: a transition committing meanwhile is waited for (`pg_tail.rs`).
                let rows = tx.query("SELECT version FROM operations WHERE id = $1 FOR SHARE", &[operation])?;
                opsgraph_store::expect_version(operation, *version, rows.first().map(|r| r.get(0)))?;
            }
            Write::Token(t) => {
                tx.exec(
                    "INSERT INTO tokens (id, name, hash, roles, created_by, created_at, revoked_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (id) DO UPDATE SET revoked_at = excluded.revoked_at",
                    &[&t.id, &t.name, &t.hash, &json(&t.roles)?, &t.created_by, &t.created_at, &t.revoked_at],
                )?;
            }
            Write::Audit(a) => {
                tx.exec(
                    "INSERT INTO audit (at, actor, action, target, operation, resource, detail)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    &[&a.at, &a.actor, &a.action, &a.target, &a.operation, &a.resource, &json(&a.detail)?],
                )?;
            }
            Write::Request(r) => {
                let changed = tx.exec(
                    "INSERT INTO requests (actor, key, fingerprint, status, response, at)
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                    &[&r.actor, &r.key, &r.fingerprint, &(r.status as i32), &json(&r.response)?, &r.at],
                )?;
                if changed != 1 {
                    return Err(Error::RequestRecorded { actor: r.actor.clone(), key: r.key.clone() }.into());
                }
            }
            Write::Fence { operation, holder, token } => {
                // FOR SHARE: an acquisition (an UPDATE of this row) waits for this commit.
                let rows = tx.query("SELECT holder, token FROM leases WHERE operation = $1 FOR SHARE", &[operation])?;
                let current: Option<(String, i64)> = rows.first().map(|r| (r.get(0), r.get(1)));
                if current.as_ref().is_none_or(|(h, t)| h != holder || t != token) {
                    return Err(Error::fenced(operation, holder, *token, current).into());
                }
            }
            Write::Agent(a) => crate::pg_agent::apply(tx, a)?,
            Write::ExpectIdle { resource, operation } => {
                // Creators of operations on one resource take turns until their commit: the
                // second sees the first's row.
                tx.exec("SELECT pg_advisory_xact_lock(hashtextextended('opsgraph.resource:' || $1, 0))", &[resource])?;
                let rows = tx.query(
                    "SELECT id, state_kind FROM operations WHERE resource = $1 AND id <> $2
                 AND state_kind NOT IN ('completed', 'cancelled') ORDER BY created_at LIMIT 1",
                    &[resource, operation],
                )?;
                if let Some(r) = rows.first() {
                    return Err(Error::ResourceBusy {
                        resource: resource.clone(),
                        operation: r.get(0),
                        state: r.get(1),
                    }
                    .into());
                }
            }
        }
    }
    match crate::pg_tail::tail(writes, fold)? {
        Some(tail) => tail.run(tx),
        None => Ok(()),
    }
}

impl PgStore {
    /// `Store::commit`: grouped with other connections' commits to this database in this
    /// process (`pg_group.rs`).
    fn grouped_commit(&self, writes: &[Write]) -> Result<(), Error> {
        let writer = std::sync::Arc::clone(&self.writer);
        writer.commit(writes, &|all| self.in_one(all, false))
    }

    /// `pg_group::commit_group` on this connection.
    #[cfg(test)]
    pub(crate) fn commit_group(
        &self,
        mine: Option<&[Write]>,
        queued: Vec<std::sync::Arc<crate::pg_group::Pending>>,
    ) -> Option<Result<(), Error>> {
        crate::pg_group::commit_group(mine, queued, &|all| self.in_one(all, false))
    }
}

impl Store for PgStore {
    /// Grouped with other connections' commits to this database in this process (`pg_group.rs`).
    fn commit(&mut self, writes: &[Write]) -> Result<(), Error> {
        self.grouped_commit(writes)
    }

    /// Committed with `synchronous_commit = off` (`pg_sync.rs`): made and visible, durable once
    /// [`Store::syncer`]'s sync, begun after it returned, returns. Alone, on this connection, not
    /// in the group's turn: there is no flush to share, and the turn would make the process's
    /// drivers wait for each other's round trips (measured: docs/benchmarks.md, [N] 5, `pg5`).
    /// Until this store handed out a syncer, nothing would sync it: it commits durably.
    fn commit_deferred(&mut self, writes: &[Write]) -> Result<(), Error> {
        if self.syncer.get().is_none() {
            return self.grouped_commit(writes);
        }
        let out = self.in_one(&[writes], true).and_then(|mut out| out.pop());
        out.unwrap_or_else(|| Err(crate::pg_group::group_error("a write")))
    }

    /// A connection of its own that flushes the WAL (`pg_sync.rs`), one per database in this
    /// process; `None` (every commit durable when made) when it cannot be made.
    fn syncer(&self) -> Option<std::sync::Arc<dyn opsgraph_store::Syncer>> {
        let s: std::sync::Arc<dyn opsgraph_store::Syncer> = crate::pg_sync::syncer_of(&self.url)?;
        let _ = self.syncer.set(std::sync::Arc::clone(&s));
        Some(s)
    }

    fn operation(&self, id: &str) -> Result<Option<OperationRecord>, Error> {
        edge(|| self.first(&format!("SELECT {OPERATION_COLUMNS} FROM operations WHERE id = $1"), &[&id], operation))
    }

    fn operations(&self, filter: &OperationFilter) -> Result<Vec<OperationRecord>, Error> {
        edge(|| {
            let sql = format!(
            "SELECT {OPERATION_COLUMNS} FROM operations
             WHERE ($1::text IS NULL OR state_kind = $1) AND ($2::text IS NULL OR resource = $2) ORDER BY created_at, id"
        );
            self.rows(&sql, &[&filter.state, &filter.resource], operation)
        })
    }

    fn plan_text(&self, revision: &str) -> Result<Option<String>, Error> {
        edge(|| Ok(self.query_opt("SELECT plan FROM plans WHERE revision = $1", &[&revision])?.map(|r| r.get(0))))
    }

    fn timeline(&self, operation: &str) -> Result<Vec<TimelineEntry>, Error> {
        edge(|| {
            let sql = format!("{} WHERE r.operation = $1 ORDER BY {TIMELINE_ORDER}", timeline_select("timeline_runs"));
            self.rows(&sql, &[&operation], timeline_entry)
        })
    }

    fn timeline_after(&self, operation: Option<&str>, after: i64, limit: usize) -> Result<Vec<TimelineEntry>, Error> {
        edge(|| {
            let limit = limit.min(i64::MAX as usize) as i64;
            // At most `limit` runs hold the first `limit` entries after `after` (each holds one
            // at least); the first of them may begin at or before it.
            let page = |runs: &str| {
                format!("{} WHERE r.first_seq + u.n - 1 > $1 ORDER BY {TIMELINE_ORDER} LIMIT $2", timeline_select(runs))
            };
            let rows = match operation {
                Some(op) => self.query(
                    &page(
                        "(SELECT * FROM timeline_runs WHERE operation = $3 AND last_seq > $1 ORDER BY last_seq LIMIT $2)",
                    ),
                    &[&after, &limit, &op],
                )?,
                None => self.query(
                    &page("(SELECT * FROM timeline_runs WHERE last_seq > $1 ORDER BY last_seq LIMIT $2)"),
                    &[&after, &limit],
                )?,
            };
            rows.iter().map(timeline_entry).collect()
        })
    }

    fn stats(&self) -> Result<Stats, Error> {
        edge(|| {
            let mut stats = Stats::default();
            for r in self.query("SELECT state_kind, COUNT(*) FROM operations GROUP BY state_kind", &[])? {
                stats.operations.insert(r.get(0), r.get::<_, i64>(1) as u64);
            }
            for r in self.query("SELECT state, COUNT(*) FROM jobs GROUP BY state", &[])? {
                stats.jobs.insert(r.get(0), r.get::<_, i64>(1) as u64);
            }
            let depth = self.query(
                "SELECT COUNT(*) FROM jobs j JOIN operations o ON o.id = j.operation
             WHERE o.state_kind = 'running' AND j.state = 'pending'",
                &[],
            )?;
            stats.queue_depth = depth.first().map_or(0, |r| r.get::<_, i64>(0) as u64);
            let rows = self.query(
            "SELECT ms FROM (SELECT (outcome::jsonb ->> 'duration_ms')::float8 AS ms FROM jobs) d WHERE ms IS NOT NULL",
            &[],
        )?;
            stats.set_durations(rows.iter().map(|r| r.get::<_, f64>(0)));
            Ok(stats)
        })
    }

    fn jobs(&self, operation: &str) -> Result<Vec<JobRecord>, Error> {
        edge(|| {
            let rows = self.query(
            "SELECT operation, id, state, attempts, outcome, updated_at FROM jobs WHERE operation = $1 ORDER BY ord",
            &[&operation],
        )?;
            rows.iter()
                .map(|r| {
                    Ok(JobRecord {
                        operation: r.get(0),
                        id: r.get(1),
                        state: JobState::parse(r.get(2)).unwrap_or(JobState::Pending),
                        attempts: r.get::<_, i64>(3) as u32,
                        outcome: parse(r.get(4))?,
                        updated_at: r.get(5),
                    })
                })
                .collect()
        })
    }

    fn evidence(&self, operation: &str) -> Result<Vec<EvidenceRecord>, Error> {
        edge(|| {
            let rows = self.query(
                "SELECT operation, job, check_id, source, command, expected, observed, passed, at, resource, capability
             FROM evidence WHERE operation = $1 ORDER BY seq",
                &[&operation],
            )?;
            Ok(rows
                .iter()
                .map(|r| EvidenceRecord {
                    operation: r.get(0),
                    job: r.get(1),
                    check: r.get(2),
                    source: r.get(3),
                    command: r.get(4),
                    expected: r.get(5),
                    observed: r.get(6),
                    passed: r.get(7),
                    at: r.get(8),
                    resource: r.get(9),
                    capability: r.get(10),
                })
                .collect())
        })
    }

    fn gates(&self, operation: &str) -> Result<Vec<GateRecord>, Error> {
        edge(|| {
            let rows = self.query(
            "SELECT operation, id, gate_type, reason, options, required_roles, answer, answered_by, answered_at, value, patch
             FROM gates WHERE operation = $1 ORDER BY ord",
            &[&operation],
        )?;
            rows.iter()
                .map(|r| {
                    let (gate_type, kind) = GateRecord::from_columns(r.get(2), r.get(10))?;
                    Ok(GateRecord {
                        operation: r.get(0),
                        id: r.get(1),
                        gate_type,
                        kind,
                        reason: r.get(3),
                        options: serde_json::from_str(r.get(4))?,
                        required_roles: serde_json::from_str(r.get(5))?,
                        answer: r.get(6),
                        answered_by: r.get(7),
                        answered_at: r.get(8),
                        value: r.get::<_, Option<&str>>(9).map(parse).transpose()?,
                    })
                })
                .collect()
        })
    }

    fn artifacts(&self, operation: &str) -> Result<Vec<ArtifactRecord>, Error> {
        edge(|| {
            let rows = self.query(
            "SELECT operation, job, id, sensitivity, location, size, at FROM artifacts WHERE operation = $1 ORDER BY ord",
            &[&operation],
        )?;
            Ok(rows
                .iter()
                .map(|r| ArtifactRecord {
                    operation: r.get(0),
                    job: r.get(1),
                    id: r.get(2),
                    sensitivity: r.get(3),
                    location: r.get(4),
                    size: r.get(5),
                    at: r.get(6),
                })
                .collect())
        })
    }

    fn resources(&self) -> Result<Vec<ResourceRecord>, Error> {
        edge(|| self.rows("SELECT id, doc, last_operation, updated_at FROM resources ORDER BY id", &[], resource))
    }

    fn resource_events(&self, resource: &str, limit: usize) -> Result<Vec<ResourceEventRecord>, Error> {
        edge(|| {
            let limit = limit as i64;
            self.query(
                "SELECT seq, resource, at, actor, kind, status, operation, summary, detail FROM
                 (SELECT * FROM resource_events WHERE resource = $1 ORDER BY seq DESC LIMIT $2) AS last ORDER BY seq",
                &[&resource, &limit],
            )?
            .iter()
            .map(|r| {
                Ok(ResourceEventRecord {
                    seq: r.get(0),
                    resource: r.get(1),
                    at: r.get(2),
                    actor: r.get(3),
                    kind: r.get(4),
                    status: r.get(5),
                    operation: r.get(6),
                    summary: r.get(7),
                    detail: parse(r.get(8))?,
                })
            })
            .collect()
        })
    }

    fn resource(&self, id: &str) -> Result<Option<ResourceRecord>, Error> {
        edge(|| self.first("SELECT id, doc, last_operation, updated_at FROM resources WHERE id = $1", &[&id], resource))
    }

    fn idempotency(&self, key: &str) -> Result<Option<(String, String)>, Error> {
        edge(|| {
            Ok(self
                .query_opt("SELECT operation, job FROM idempotency WHERE key = $1", &[&key])?
                .map(|r| (r.get(0), r.get(1))))
        })
    }

    fn tokens(&self) -> Result<Vec<TokenRecord>, Error> {
        edge(|| self.rows(&format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_at, id"), &[], token))
    }

    fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>, Error> {
        edge(|| self.first(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE hash = $1"), &[&hash], token))
    }

    fn audit(&self, f: &AuditFilter) -> Result<Vec<AuditRecord>, Error> {
        edge(|| {
            let rows = self.query(
                "SELECT seq, at, actor, action, target, operation, resource, detail FROM audit
             WHERE ($1::text IS NULL OR actor = $1) AND ($2::text IS NULL OR operation = $2)
             AND ($3::text IS NULL OR resource = $3) AND ($4::text IS NULL OR at >= $4) ORDER BY seq",
                &[&f.actor, &f.operation, &f.resource, &f.since],
            )?;
            rows.iter()
                .map(|r| {
                    Ok(AuditRecord {
                        seq: r.get(0),
                        at: r.get(1),
                        actor: r.get(2),
                        action: r.get(3),
                        target: r.get(4),
                        operation: r.get(5),
                        resource: r.get(6),
                        detail: parse(r.get(7))?,
                    })
                })
                .collect()
        })
    }

    fn request(&self, actor: &str, key: &str) -> Result<Option<RequestRecord>, Error> {
        edge(|| {
            let row = self.query_opt(
                "SELECT actor, key, fingerprint, status, response, at FROM requests WHERE actor = $1 AND key = $2",
                &[&actor, &key],
            )?;
            row.map(|r| {
                Ok(RequestRecord {
                    actor: r.get(0),
                    key: r.get(1),
                    fingerprint: r.get(2),
                    status: r.get::<_, i32>(3) as u16,
                    response: parse(r.get(4))?,
                    at: r.get(5),
                })
            })
            .transpose()
        })
    }

    /// `LISTEN` on the channel the timeline's trigger notifies (schema migration 7).
    fn wait_for_timeline(&mut self, timeout: std::time::Duration) -> Result<bool, Error> {
        edge(|| self.wait_notified(timeout))
    }

    fn wait_for_agent_tasks(&mut self, timeout: std::time::Duration) -> Result<Option<Vec<(String, bool)>>, Error> {
        edge(|| self.wait_agent_news(timeout)).map(Some)
    }

    fn agent_claim(&mut self, claim: &opsgraph_store::AgentClaim) -> Result<Vec<opsgraph_store::AgentTask>, Error> {
        edge(|| self.claim_agent_task(claim))
    }

    fn agent_task(&self, id: &str) -> Result<Option<opsgraph_store::AgentTask>, Error> {
        edge(|| self.agent_task_by_id(id))
    }

    fn agent_tasks(&self, operation: &str) -> Result<Vec<opsgraph_store::AgentTask>, Error> {
        edge(|| self.agent_tasks_of(operation))
    }

    fn agent_log(&self, task: &str, after: i64) -> Result<Vec<opsgraph_store::AgentLogLine>, Error> {
        edge(|| self.agent_log_of(task, after))
    }

    fn acquire_lease(&mut self, operation: &str, holder: &str, ttl_ms: i64) -> Result<Lease, Error> {
        edge(|| self.acquire(operation, holder, ttl_ms))
    }

    fn renew_lease(&mut self, l: &Lease, ttl_ms: i64) -> Result<Lease, Error> {
        edge(|| self.renew(l, ttl_ms))
    }

    fn release_lease(&mut self, l: &Lease) -> Result<(), Error> {
        edge(|| self.release(l))
    }

    fn lease(&self, operation: &str) -> Result<Option<Lease>, Error> {
        edge(|| self.current_lease(operation))
    }

    fn adoptable(&self) -> Result<Vec<String>, Error> {
        edge(|| self.unleased_running())
    }
}
