//! The PostgreSQL schema: numbered migrations, applied by `PgStore::connect`. The tables both
//! backends have are `opsgraph_store::schema`'s, in PostgreSQL's words.

use std::sync::LazyLock;

use opsgraph_store::schema::{
    render, AGENT_TASKS, GATE_KINDS, IDENTITIES, LEASES, OPERATIONS, OPERATION_IDS, POSTGRES, RESOURCE_EVENTS,
};

/// Versioned migrations; they run in order, each once, in one transaction under an advisory
/// lock (replicas starting together migrate once).
pub(crate) static MIGRATIONS: LazyLock<Vec<String>> = LazyLock::new(|| {
    [
        // 1: the schema of SQLite's migrations 1 to 4, and the timeline's counter.
        format!("{OPERATIONS}{TIMELINE_COUNTER}{IDENTITIES}{LEASES}").as_str(),
        // 2: agent tasks and their logs (`pg_agent.rs`).
        AGENT_TASKS,
        // 3: artifact contents and job logs (`pg_blob.rs`).
        BLOB_MIGRATION,
        // 4: a gate's kind (issue [J]), read from the ids of gates made before it.
        GATE_KINDS,
        // 5: resource histories (issue [I]).
        RESOURCE_EVENTS,
        // 6: an operation's `intent_id` and `plan_id` (issue [O]).
        OPERATION_IDS,
        // 7: a notification on each commit that wrote timeline entries (issue [N]).
        TIMELINE_NOTIFY,
        // 8: running attempts' live output, shared between replicas (`pg_blob.rs`).
        LIVE_LOGS,
        // 9: a notification for each agent task written (`conn.rs`).
        AGENT_NOTIFY,
        // 10: no index on a job's state (issue [N] 5).
        NO_JOBS_STATE,
        // 11: a commit's timeline entries of one operation in one row (issue [N] 5).
        TIMELINE_RUNS,
    ]
    .iter()
    .map(|sql| render(sql, &POSTGRES))
    .collect()
});

/// Migration 1's own part: timeline seqs come from a counter updated last in a commit's
/// transaction, so that they follow commit order; and an index of jobs by state (dropped by
/// migration 10).
const TIMELINE_COUNTER: &str = "
    CREATE INDEX jobs_state ON jobs(state);
    CREATE TABLE counters (
        name TEXT PRIMARY KEY,
        value BIGINT NOT NULL
    );
    INSERT INTO counters (name, value) VALUES ('timeline', 0);
";

/// Migration 10: `jobs_state` (migration 1) goes. Nothing finds jobs by state (`stats` counts them
/// all, as SQLite does without such an index), and a job's state changes at each of its two
/// writes: with an index on it, every one of those updates inserted into both of the table's
/// indexes and could never be a heap-only update (issue [N] 5: index insertion was the largest
/// part of a driven commit's execution on the server, docs/benchmarks.md, `pg7`).
const NO_JOBS_STATE: &str = "DROP INDEX IF EXISTS jobs_state;";

/// Migration 11: the timeline is stored in runs — the entries one commit writes for one operation,
/// in a row of arrays (entry `k`, from 1, has seq `first_seq + k - 1`; `last_seq` is the run's last
/// seq and its key). A driven commit writes ~16 entries: one heap row and two index entries
/// instead of 16 rows and 32 index entries, about half the WAL (issue [N] 5: per-row work is most
/// of the server's time on a driven commit, docs/benchmarks.md, `pg8`, `pg10`). Readers expand
/// runs back to entries (`pg.rs`). `toast_tuple_target` at its maximum: a run is kept in its page
/// uncompressed up to 8 KB, as separate rows were. Rows made before it become runs of one entry;
/// the notify trigger (migration 7) moves with them.
const TIMELINE_RUNS: &str = "
    CREATE TABLE timeline_runs (
        last_seq BIGINT PRIMARY KEY,
        first_seq BIGINT NOT NULL,
        operation TEXT NOT NULL,
        at TEXT[] NOT NULL,
        actor TEXT[] NOT NULL,
        event TEXT[] NOT NULL,
        from_state TEXT[] NOT NULL,
        to_state TEXT[] NOT NULL,
        reason TEXT[] NOT NULL,
        data TEXT[] NOT NULL
    ) WITH (toast_tuple_target = 8160);
    CREATE INDEX timeline_runs_operation ON timeline_runs(operation, last_seq);
    INSERT INTO timeline_runs
        SELECT seq, seq, operation, ARRAY[at], ARRAY[actor], ARRAY[event], ARRAY[from_state], ARRAY[to_state],
               ARRAY[reason], ARRAY[data]
          FROM timeline;
    DROP TABLE timeline;
    CREATE TRIGGER timeline_written AFTER INSERT ON timeline_runs
        FOR EACH STATEMENT EXECUTE FUNCTION opsgraph_timeline_written();
";

/// The key of the advisory lock migrations run under (`'opsgraph'` in ASCII).
pub(crate) const MIGRATION_LOCK: i64 = 0x6f70_7367_7261_7068;

/// Migration 3.
const BLOB_MIGRATION: &str = "
    CREATE TABLE blobs (
        location TEXT PRIMARY KEY,
        content BYTEA NOT NULL
    );
    CREATE TABLE job_logs (
        seq BIGSERIAL PRIMARY KEY,
        operation TEXT NOT NULL,
        job TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        content BYTEA NOT NULL
    );
    CREATE INDEX job_logs_attempt ON job_logs(operation, job, attempt, seq);
";

/// Migration 8: a running attempt's live output as its driver shares it, in pieces keyed by the
/// offset of their first byte; its final log (`job_logs`) replaces them.
const LIVE_LOGS: &str = "
    CREATE TABLE live_logs (
        operation TEXT NOT NULL,
        job TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        start BIGINT NOT NULL,
        content BYTEA NOT NULL,
        PRIMARY KEY (operation, job, attempt, start)
    );
";

/// Migration 7: every statement that inserts timeline rows notifies [`TIMELINE_CHANNEL`];
/// PostgreSQL delivers it at the commit, once per transaction, to every listening connection of
/// any process (`Store::wait_for_timeline`). A trigger, so no writer (a commit's batch, an
/// agent's claim) can forget it, and no commit pays another round trip.
const TIMELINE_NOTIFY: &str = "
    CREATE FUNCTION opsgraph_timeline_written() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('opsgraph_timeline', '');
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER timeline_written AFTER INSERT ON timeline
        FOR EACH STATEMENT EXECUTE FUNCTION opsgraph_timeline_written();
";

/// Migration 9: every agent task inserted or updated notifies [`AGENT_CHANNEL`] with its state
/// and its id (a notification names the backend that sent it): the replicas that did not write
/// it wake their agent waiters (a claim parked for work, the worker waiting for the task's
/// report) without polling. PostgreSQL sends a transaction's notifications at its commit, the
/// same payload once.
const AGENT_NOTIFY: &str = "
    CREATE FUNCTION opsgraph_agent_task_written() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('opsgraph_agents',
            NEW.state || ' ' || NEW.id);
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER agent_task_written AFTER INSERT OR UPDATE ON agent_tasks
        FOR EACH ROW EXECUTE FUNCTION opsgraph_agent_task_written();
";

/// The channel of [`AGENT_NOTIFY`].
pub(crate) const AGENT_CHANNEL: &str = "opsgraph_agents";

/// The channel of [`TIMELINE_NOTIFY`].
pub(crate) const TIMELINE_CHANNEL: &str = "opsgraph_timeline";
