//! The embedded SQLite backend: one file in the data directory, WAL, `synchronous=FULL` unless
//! the operator opts into `NORMAL` (faster, may lose the last commits on power loss).

use std::path::Path;
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension, Params, Row};

use opsgraph_store::{AgentClaim, AgentTask, Error};
use opsgraph_store::{
    ArtifactRecord, AuditFilter, AuditRecord, EvidenceRecord, GateRecord, JobRecord, JobState, OperationFilter,
    OperationRecord, RequestRecord, ResourceEventRecord, ResourceRecord, Store, TimelineEntry, TokenRecord, Write,
};

use crate::apply::apply;
use crate::read::{first, parsed, rows};
use crate::wal::Wal;
use crate::writer::{writer_of, Writer};
use crate::{edge, Fail};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// fsync at every commit: nothing acknowledged is lost.
    #[default]
    Full,
    /// fsync at checkpoints only: the last commits may be lost on power failure.
    Normal,
}

pub struct SqliteStore {
    pub(crate) conn: Connection,
    /// The writers of this file in this process, whose writes are grouped (`writer.rs`).
    pub(crate) writer: Arc<Writer>,
    /// The file's in-process signal, rung by commits that write timeline entries.
    pub(crate) written: std::sync::Arc<opsgraph_store::Written>,
    /// What [`Store::wait_for_timeline`] saw last: the signal's generation and `data_version`
    /// (`None` before its first call).
    pub(crate) seen: std::cell::Cell<Option<(u64, i64)>>,
    /// The WAL file, synced for [`Store::commit_deferred`]'s commits; `None` where commits are
    /// not synced at all (`Durability::Normal`) or there is no file (in memory).
    pub(crate) wal: Option<Arc<Wal>>,
    /// The connection is at `synchronous=NORMAL` (left there by the last deferred commit or
    /// lease) rather than its durability's setting: switched only when the next commit needs
    /// the other one ([`SqliteStore::synchronous`]).
    pub(crate) normal: std::cell::Cell<bool>,
    /// Turns of the group commit that ran other connections' writes on this one (`writer.rs`):
    /// part of [`Store::data_version`], which `PRAGMA data_version` alone would not move.
    pub(crate) foreign: std::cell::Cell<i64>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store file and brings its schema up to date.
    pub fn open(path: &Path, durability: Durability) -> Result<SqliteStore, Error> {
        edge(|| {
            let open_err =
                |source: rusqlite::Error| Error::Open { path: path.display().to_string(), source: Box::new(source) };
            // A new file is made whole beside its name, then linked (`create.rs`).
            crate::create::create(path)?;
            let conn = Connection::open(path).map_err(open_err)?;
            let sync = match durability {
                Durability::Full => "FULL",
                Durability::Normal => "NORMAL",
            };
            conn.execute_batch(&format!(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON; PRAGMA busy_timeout=5000;"
            ))
            .map_err(open_err)?;
            prepared_once(&conn).map_err(open_err)?;
            // One signal for every store of the file, however its path was spelled.
            let name = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            let written = opsgraph_store::timeline_written(&name.display().to_string());
            let wal = (durability == Durability::Full).then(|| Arc::new(Wal::of(&name)));
            let mut store = SqliteStore {
                conn,
                writer: writer_of(path),
                written,
                seen: Default::default(),
                wal,
                normal: Default::default(),
                foreign: Default::default(),
            };
            store.migrate()?;
            Ok(store)
        })
    }

    /// An in-memory store, for tests.
    pub fn memory() -> Result<SqliteStore, Error> {
        edge(|| {
            let open_err = |source| Error::Open { path: ":memory:".into(), source: Box::new(source) };
            let conn = Connection::open_in_memory().map_err(open_err)?;
            prepared_once(&conn).map_err(open_err)?;
            let written = std::sync::Arc::new(opsgraph_store::Written::new());
            let mut store = SqliteStore {
                conn,
                writer: Arc::default(),
                written,
                seen: Default::default(),
                wal: None,
                normal: Default::default(),
                foreign: Default::default(),
            };
            store.migrate()?;
            Ok(store)
        })
    }

    /// The schema version after migrations.
    pub fn schema_version(&self) -> Result<i64, Error> {
        edge(|| Ok(self.conn.query_row("PRAGMA user_version", [], |r| r.get(0))?))
    }

    fn migrate(&mut self) -> Result<(), Fail> {
        crate::schema::migrate(&mut self.conn, &self.writer)
    }
}

/// Every statement a drive runs stays prepared, and is not prepared again when it is bound new
/// values.
///
/// - The cache: rusqlite keeps 16 statements by default; a commit's BEGIN and COMMIT are among
///   them (`writer.rs`).
/// - The query planner stability guarantee (QPSG): without it SQLite (3.54) marks a statement
///   whose plan *could* depend on a bound value — `LIMIT ?`, and any `column = ?` the index does
///   not use (`lease = ?2` after `id = ?1`, the truth-probability estimate of `where.c`) — to be
///   parsed and planned again whenever that value changes, and `sqlite3_clear_bindings` (which
///   rusqlite calls on every statement it puts back in its cache) expires every such statement:
///   the claim, the report, the heartbeat, the driver's job updates were parsed again at every
///   use (`sqlite3Reprepare`, ~10 % of the server's CPU with agents; docs/benchmarks.md, branch
///   `agents4`). With the guarantee a statement keeps the plan it was prepared with; the plans
///   of these statements (indexed look-ups) do not depend on the values.
fn prepared_once(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_prepared_statement_cache_capacity(64);
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

/// The largest WAL a connection closing leaves for the next process to read back instead of
/// checkpointing it (`Drop for SqliteStore`): 256 pages of 4 KiB.
const WAL_LEFT_AT_CLOSE: u64 = 1 << 20;

impl Drop for SqliteStore {
    /// SQLite checkpoints the WAL into the database file when a file's last connection closes:
    /// an `fsync` of the WAL, then one of the file, after the command's work is done. With `Full`
    /// durability they guard nothing: every commit is synced in the WAL already (a deferred one
    /// by its syncer: the runtime's committer syncs what it made before its drive returns and
    /// when it is dropped; a lease's needs none, `lease.rs`), and whoever opens the file next
    /// reads it back from there. So a small WAL is left as it is (the next process's first
    /// connection reads at most `WAL_LEFT_AT_CLOSE` back); a larger one is checkpointed as
    /// before, and SQLite's own checkpoint in the commit that crosses 1,000 pages keeps the WAL
    /// bounded either way. With `Normal` durability the checkpoint is where commits are synced:
    /// kept. (Issue [N] 5, docs/benchmarks.md.)
    fn drop(&mut self) {
        let Some(wal) = &self.wal else { return };
        let small = std::fs::metadata(wal.path()).is_ok_and(|m| m.len() <= WAL_LEFT_AT_CLOSE);
        if small {
            let _ = self.conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true);
        }
    }
}

fn operation(r: &Row<'_>) -> Result<OperationRecord, Fail> {
    Ok(OperationRecord {
        id: r.get(0)?,
        parent: r.get(1)?,
        intent: parsed(r, 2)?,
        resource: r.get(3)?,
        state: parsed(r, 4)?,
        plan_revision: r.get(5)?,
        actor: r.get(6)?,
        created_at: r.get(7)?,
        updated_at: r.get(8)?,
        version: r.get(9)?,
        intent_id: r.get(10)?,
        plan_id: r.get(11)?,
    })
}

const OPERATION_COLUMNS: &str =
    "id, parent, intent, resource, state, plan_revision, actor, created_at, updated_at, version, intent_id, plan_id";

impl SqliteStore {
    /// [`Store::commit`], synced at its commit, or (`deferred`) left to [`SqliteStore::wal`].
    fn commit_with(&mut self, writes: &[Write], deferred: Option<&Wal>) -> Result<(), Error> {
        self.synchronous(deferred.is_some())?;
        // Grouped with other connections' writes to this file (`writer.rs`): under the write
        // lock from the start, so a guard that reads (a fence) and its writes see one state.
        let writer = self.writer.clone();
        writer
            .write(
                &mut self.conn,
                &self.foreign,
                |tx| apply(tx, writes),
                || {
                    let writes = writes.to_vec();
                    crate::writer::job(move |tx| apply(tx, &writes))
                },
                deferred,
            )
            .inspect(|_| {
                if writes.iter().any(|w| matches!(w, Write::Timeline(_) | Write::Transition { .. })) {
                    self.written.ring();
                }
            })
    }

    /// Sets the connection to `synchronous=NORMAL` for a deferred commit (`normal`: made in the
    /// WAL, durable with the WAL's next sync, a synced commit after it on the file or
    /// [`Store::syncer`]'s) or back to `FULL` for one synced at its commit, where commits are
    /// otherwise synced (`wal` is set: `Durability::Full` on a file); under `Normal` or in memory
    /// nothing is switched. Every commit on this connection sets it first. The pragma is run
    /// only when the setting changes: the driver's deferred commits follow one another at
    /// `NORMAL` without a pair of pragmas each (SQLite prepares a pragma again at every run,
    /// ~15,000 instructions a pair; issue [N] 5, docs/benchmarks.md). Outside a transaction:
    /// SQLite refuses it inside one. When the switch fails, the commit is not made.
    pub(crate) fn synchronous(&self, normal: bool) -> Result<(), Error> {
        if self.wal.is_none() || self.normal.get() == normal {
            return Ok(());
        }
        let sql = if normal { "PRAGMA synchronous=NORMAL" } else { "PRAGMA synchronous=FULL" };
        edge(|| Ok(self.conn.prepare_cached(sql)?.execute([]).map(|_| ())?))?;
        self.normal.set(normal);
        Ok(())
    }

    /// Runs `commit` (commits on this connection) with `synchronous=NORMAL`
    /// ([`SqliteStore::synchronous`]): made in the WAL, durable with the WAL's next sync.
    fn deferred<T>(&mut self, commit: impl FnOnce(&mut Self) -> Result<T, Error>) -> Result<T, Error> {
        self.synchronous(true)?;
        commit(self)
    }
}

impl Store for SqliteStore {
    fn commit(&mut self, writes: &[Write]) -> Result<(), Error> {
        self.commit_with(writes, None)
    }

    /// Under `synchronous=FULL`, this commit runs with `NORMAL`: made in the WAL, synced by
    /// [`Store::syncer`] (`wal.rs`).
    fn commit_deferred(&mut self, writes: &[Write]) -> Result<(), Error> {
        let Some(wal) = self.wal.clone() else { return self.commit(writes) };
        self.commit_with(writes, Some(&wal))
    }

    fn syncer(&self) -> Option<Arc<dyn opsgraph_store::Syncer>> {
        self.wal.clone().map(|w| w as Arc<dyn opsgraph_store::Syncer>)
    }

    // A lease's own commits are deferred and never synced for their own sake (`lease.rs`); each
    // runs alone in the write turn, so no other connection's write is committed unsynced with it.
    fn acquire_lease(&mut self, operation: &str, holder: &str, ttl_ms: i64) -> Result<opsgraph_store::Lease, Error> {
        let writer = self.writer.clone();
        let _turn = writer.turn();
        self.deferred(|s| edge(|| crate::lease::sqlite_acquire(&mut s.conn, operation, holder, ttl_ms)))
    }

    fn renew_lease(&mut self, lease: &opsgraph_store::Lease, ttl_ms: i64) -> Result<opsgraph_store::Lease, Error> {
        let writer = self.writer.clone();
        let _turn = writer.turn();
        self.deferred(|s| edge(|| crate::lease::sqlite_renew(&mut s.conn, lease, ttl_ms)))
    }

    fn release_lease(&mut self, lease: &opsgraph_store::Lease) -> Result<(), Error> {
        let writer = self.writer.clone();
        let _turn = writer.turn();
        self.deferred(|s| edge(|| crate::lease::sqlite_release(&s.conn, lease)))
    }

    fn lease(&self, operation: &str) -> Result<Option<opsgraph_store::Lease>, Error> {
        edge(|| crate::lease::sqlite_lease(&self.conn, operation))
    }

    fn adoptable(&self) -> Result<Vec<String>, Error> {
        edge(|| crate::lease::sqlite_adoptable(&self.conn))
    }

    fn operation(&self, id: &str) -> Result<Option<OperationRecord>, Error> {
        edge(|| {
            first(&self.conn, &format!("SELECT {OPERATION_COLUMNS} FROM operations WHERE id = ?1"), [id], operation)
        })
    }

    fn operations(&self, filter: &OperationFilter) -> Result<Vec<OperationRecord>, Error> {
        edge(|| {
            let sql = format!(
                "SELECT {OPERATION_COLUMNS} FROM operations
             WHERE (?1 IS NULL OR state_kind = ?1) AND (?2 IS NULL OR resource = ?2) ORDER BY created_at, id"
            );
            rows(&self.conn, &sql, params![filter.state, filter.resource], operation)
        })
    }

    fn plan_text(&self, revision: &str) -> Result<Option<String>, Error> {
        edge(|| {
            Ok(self
                .conn
                .query_row("SELECT plan FROM plans WHERE revision = ?1", [revision], |r| r.get(0))
                .optional()?)
        })
    }

    fn timeline(&self, operation: &str) -> Result<Vec<TimelineEntry>, Error> {
        edge(|| {
            self.timeline_query(&format!("{TIMELINE_SELECT} WHERE operation = ?1 ORDER BY seq"), params![operation])
        })
    }

    fn timeline_after(&self, operation: Option<&str>, after: i64, limit: usize) -> Result<Vec<TimelineEntry>, Error> {
        edge(|| {
            // Two statements, so each uses its index: (operation, seq) for one operation, seq for all.
            let limit = limit.min(i64::MAX as usize) as i64;
            match operation {
                Some(op) => self.timeline_query(
                    &format!("{TIMELINE_SELECT} WHERE operation = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"),
                    params![op, after, limit],
                ),
                None => self.timeline_query(
                    &format!("{TIMELINE_SELECT} WHERE seq > ?1 ORDER BY seq LIMIT ?2"),
                    params![after, limit],
                ),
            }
        })
    }

    fn stats(&self) -> Result<opsgraph_store::Stats, Error> {
        edge(|| {
            let mut stats = opsgraph_store::Stats::default();
            let mut stmt =
                self.conn.prepare_cached("SELECT state_kind, COUNT(*) FROM operations GROUP BY state_kind")?;
            for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
                let (k, n) = row?;
                stats.operations.insert(k, n as u64);
            }
            let mut stmt = self.conn.prepare_cached("SELECT state, COUNT(*) FROM jobs GROUP BY state")?;
            for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
                let (k, n) = row?;
                stats.jobs.insert(k, n as u64);
            }
            stats.queue_depth = self.conn.query_row(
                "SELECT COUNT(*) FROM jobs j JOIN operations o ON o.id = j.operation
             WHERE o.state_kind = 'running' AND j.state = 'pending'",
                [],
                |r| r.get::<_, i64>(0),
            )? as u64;
            let mut stmt = self.conn.prepare_cached(
                "SELECT json_extract(outcome, '$.duration_ms') FROM jobs
             WHERE json_valid(outcome) AND json_extract(outcome, '$.duration_ms') IS NOT NULL",
            )?;
            let durations = stmt.query_map([], |r| r.get::<_, f64>(0))?.collect::<Result<Vec<_>, _>>()?;
            stats.set_durations(durations);
            Ok(stats)
        })
    }

    fn jobs(&self, operation: &str) -> Result<Vec<JobRecord>, Error> {
        edge(|| {
            rows(
                &self.conn,
                "SELECT operation, id, state, attempts, outcome, updated_at FROM jobs WHERE operation = ?1 ORDER BY rowid",
                [operation],
                |r| {
                    Ok(JobRecord {
                        operation: r.get(0)?,
                        id: r.get(1)?,
                        state: JobState::parse(&r.get::<_, String>(2)?).unwrap_or(JobState::Pending),
                        attempts: r.get(3)?,
                        outcome: parsed(r, 4)?,
                        updated_at: r.get(5)?,
                    })
                },
            )
        })
    }

    fn evidence(&self, operation: &str) -> Result<Vec<EvidenceRecord>, Error> {
        edge(|| {
            let mut stmt = self.conn.prepare_cached(
                "SELECT operation, job, check_id, source, command, expected, observed, passed, at, resource, capability
             FROM evidence WHERE operation = ?1 ORDER BY seq",
            )?;
            let rows = stmt.query_map([operation], |r| {
                Ok(EvidenceRecord {
                    operation: r.get(0)?,
                    job: r.get(1)?,
                    check: r.get(2)?,
                    source: r.get(3)?,
                    command: r.get(4)?,
                    expected: r.get(5)?,
                    observed: r.get(6)?,
                    passed: r.get(7)?,
                    at: r.get(8)?,
                    resource: r.get(9)?,
                    capability: r.get(10)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    fn gates(&self, operation: &str) -> Result<Vec<GateRecord>, Error> {
        edge(|| {
            rows(
                &self.conn,
                "SELECT operation, id, gate_type, reason, options, required_roles, answer, answered_by, answered_at, value, patch
             FROM gates WHERE operation = ?1 ORDER BY rowid",
                [operation],
                |r| {
                    let (gate_type, kind) = GateRecord::from_columns(&r.get::<_, String>(2)?, r.get(10)?)?;
                    Ok(GateRecord {
                        operation: r.get(0)?,
                        id: r.get(1)?,
                        gate_type,
                        kind,
                        reason: r.get(3)?,
                        options: parsed(r, 4)?,
                        required_roles: parsed(r, 5)?,
                        answer: r.get(6)?,
                        answered_by: r.get(7)?,
                        answered_at: r.get(8)?,
                        value: r.get::<_, Option<String>>(9)?.map(|v| serde_json::from_str(&v)).transpose()?,
                    })
                },
            )
        })
    }

    fn artifacts(&self, operation: &str) -> Result<Vec<ArtifactRecord>, Error> {
        edge(|| {
            let mut stmt = self.conn.prepare_cached(
            "SELECT operation, job, id, sensitivity, location, size, at FROM artifacts WHERE operation = ?1 ORDER BY rowid",
        )?;
            let rows = stmt.query_map([operation], |r| {
                Ok(ArtifactRecord {
                    operation: r.get(0)?,
                    job: r.get(1)?,
                    id: r.get(2)?,
                    sensitivity: r.get(3)?,
                    location: r.get(4)?,
                    size: r.get(5)?,
                    at: r.get(6)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    fn resources(&self) -> Result<Vec<ResourceRecord>, Error> {
        edge(|| rows(&self.conn, "SELECT id, doc, last_operation, updated_at FROM resources ORDER BY id", [], resource))
    }

    fn resource_events(&self, resource: &str, limit: usize) -> Result<Vec<ResourceEventRecord>, Error> {
        edge(|| crate::history::resource_events(&self.conn, resource, limit))
    }

    fn resource(&self, id: &str) -> Result<Option<ResourceRecord>, Error> {
        edge(|| {
            first(&self.conn, "SELECT id, doc, last_operation, updated_at FROM resources WHERE id = ?1", [id], resource)
        })
    }

    fn idempotency(&self, key: &str) -> Result<Option<(String, String)>, Error> {
        edge(|| {
            Ok(self
                .conn
                .query_row("SELECT operation, job FROM idempotency WHERE key = ?1", [key], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?)
        })
    }

    /// `PRAGMA data_version`: changes when another connection commits, not on this one's commits;
    /// plus the turns that committed other connections' writes on this one (`foreign`).
    fn data_version(&self) -> Result<Option<i64>, Error> {
        edge(|| {
            let v: i64 = self.conn.prepare_cached("PRAGMA data_version")?.query_row([], |r| r.get(0))?;
            Ok(Some(v.wrapping_add(self.foreign.get())))
        })
    }
    fn tokens(&self) -> Result<Vec<TokenRecord>, Error> {
        edge(|| rows(&self.conn, &format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_at, id"), [], token))
    }

    /// Wakes on this process's commits at once, on other processes' within
    /// `Written::SLICE` (`watch.rs`).
    fn wait_for_timeline(&mut self, timeout: std::time::Duration) -> Result<bool, Error> {
        edge(|| crate::watch::wait(self, timeout))
    }

    fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>, Error> {
        edge(|| first(&self.conn, &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE hash = ?1"), [hash], token))
    }

    fn audit(&self, f: &AuditFilter) -> Result<Vec<AuditRecord>, Error> {
        edge(|| {
            rows(
                &self.conn,
                "SELECT seq, at, actor, action, target, operation, resource, detail FROM audit
             WHERE (?1 IS NULL OR actor = ?1) AND (?2 IS NULL OR operation = ?2) AND (?3 IS NULL OR resource = ?3)
             AND (?4 IS NULL OR at >= ?4) ORDER BY seq",
                params![f.actor, f.operation, f.resource, f.since],
                |r| {
                    Ok(AuditRecord {
                        seq: r.get(0)?,
                        at: r.get(1)?,
                        actor: r.get(2)?,
                        action: r.get(3)?,
                        target: r.get(4)?,
                        operation: r.get(5)?,
                        resource: r.get(6)?,
                        detail: parsed(r, 7)?,
                    })
                },
            )
        })
    }

    fn request(&self, actor: &str, key: &str) -> Result<Option<RequestRecord>, Error> {
        edge(|| {
            first(
                &self.conn,
                "SELECT actor, key, fingerprint, status, response, at FROM requests WHERE actor = ?1 AND key = ?2",
                [actor, key],
                |r| {
                    Ok(RequestRecord {
                        actor: r.get(0)?,
                        key: r.get(1)?,
                        fingerprint: r.get(2)?,
                        status: r.get(3)?,
                        response: parsed(r, 4)?,
                        at: r.get(5)?,
                    })
                },
            )
        })
    }

    fn agent_claim(&mut self, claim: &opsgraph_store::AgentClaim) -> Result<Vec<opsgraph_store::AgentTask>, Error> {
        self.synchronous(false)?;
        let tasks = crate::sqlite_agent::claim(&mut self.conn, &self.writer, &self.foreign, claim)?;
        if !tasks.is_empty() {
            // Their timeline entries.
            self.written.ring();
        }
        Ok(tasks)
    }

    fn agent_commit_claim(&mut self, writes: &[Write], claim: &AgentClaim) -> Result<Vec<AgentTask>, Error> {
        // The report's writes, then the claim, in one grouped write (`writer.rs`): one fsync.
        fn both(tx: &rusqlite::Connection, writes: &[Write], c: &AgentClaim) -> Result<Vec<AgentTask>, Fail> {
            apply(tx, writes)?;
            crate::sqlite_agent::claim_in(tx, c)
        }
        self.synchronous(false)?;
        let writer = self.writer.clone();
        let tasks = writer.write(
            &mut self.conn,
            &self.foreign,
            |tx| both(tx, writes, claim),
            || {
                let (writes, claim) = (writes.to_vec(), claim.clone());
                crate::writer::job(move |tx| both(tx, &writes, &claim))
            },
            None,
        )?;
        if !tasks.is_empty() || writes.iter().any(|w| matches!(w, Write::Timeline(_) | Write::Transition { .. })) {
            self.written.ring();
        }
        Ok(tasks)
    }

    fn agent_task(&self, id: &str) -> Result<Option<opsgraph_store::AgentTask>, Error> {
        edge(|| crate::sqlite_agent::task(&self.conn, id))
    }

    fn agent_tasks(&self, operation: &str) -> Result<Vec<opsgraph_store::AgentTask>, Error> {
        edge(|| crate::sqlite_agent::tasks(&self.conn, operation))
    }

    fn agent_log(&self, task: &str, after: i64) -> Result<Vec<opsgraph_store::AgentLogLine>, Error> {
        edge(|| crate::sqlite_agent::log(&self.conn, task, after))
    }
}

const TIMELINE_SELECT: &str =
    "SELECT seq, operation, at, actor, event, from_state, to_state, reason, data FROM timeline";

impl SqliteStore {
    /// Timeline entries of a `TIMELINE_SELECT` query.
    fn timeline_query(&self, sql: &str, args: impl Params) -> Result<Vec<TimelineEntry>, Fail> {
        rows(&self.conn, sql, args, |r| {
            Ok(TimelineEntry {
                seq: r.get(0)?,
                operation: r.get(1)?,
                at: r.get(2)?,
                actor: r.get(3)?,
                event: r.get(4)?,
                from: r.get(5)?,
                to: r.get(6)?,
                reason: r.get(7)?,
                data: parsed(r, 8)?,
            })
        })
    }
}

const TOKEN_COLUMNS: &str = "id, name, hash, roles, created_by, created_at, revoked_at";

fn token(r: &Row<'_>) -> Result<TokenRecord, Fail> {
    Ok(TokenRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        hash: r.get(2)?,
        roles: parsed(r, 3)?,
        created_by: r.get(4)?,
        created_at: r.get(5)?,
        revoked_at: r.get(6)?,
    })
}

fn resource(r: &Row<'_>) -> Result<ResourceRecord, Fail> {
    Ok(ResourceRecord { id: r.get(0)?, doc: parsed(r, 1)?, last_operation: r.get(2)?, updated_at: r.get(3)? })
}
