//! The tables both backends create, written once. The SQLite and PostgreSQL dialects agree on
//! everything here but a few words, which each text names in braces and [`render`] fills in from
//! the backend's [`Dialect`]. Each backend's `schema.rs` numbers its migrations from these texts
//! (PostgreSQL's first migration holds what SQLite's first four did) and adds what is its own.
//!
//! These are migrations: a text changes only in ways that create the same tables (a store keeps
//! the version it reached, not the text it ran).

/// The words in which the two dialects differ.
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    /// `{serial}`: a primary key the database numbers itself, in insertion order.
    pub serial: &'static str,
    /// `{int}`: a 64-bit integer.
    pub int: &'static str,
    /// `{bool}`: a boolean.
    pub bool: &'static str,
    /// `{ord}`: the column a table is read back in insertion order by (SQLite: its rowid).
    pub ord: &'static str,
    /// `{timeline_seq}`: the timeline's key (PostgreSQL: from a counter updated last in the
    /// transaction, so that seqs follow commit order).
    pub timeline_seq: &'static str,
    /// `{data.patch}`: the `patch` key of the JSON text in the column `t.data`.
    pub data_patch: &'static str,
    /// `{intent.id}`: the `id` key of the JSON text in the column `intent`.
    pub intent_id: &'static str,
}

pub const SQLITE: Dialect = Dialect {
    serial: "INTEGER PRIMARY KEY AUTOINCREMENT",
    int: "INTEGER",
    bool: "INTEGER",
    ord: "",
    timeline_seq: "INTEGER PRIMARY KEY AUTOINCREMENT",
    data_patch: "json_extract(t.data, '$.patch')",
    intent_id: "json_extract(intent, '$.id')",
};

pub const POSTGRES: Dialect = Dialect {
    serial: "BIGSERIAL PRIMARY KEY",
    int: "BIGINT",
    bool: "BOOLEAN",
    ord: "ord BIGSERIAL,",
    timeline_seq: "BIGINT PRIMARY KEY",
    data_patch: "(t.data::jsonb ->> 'patch')",
    intent_id: "(intent::jsonb ->> 'id')",
};

/// `sql` in `dialect`'s words.
pub fn render(sql: &str, dialect: &Dialect) -> String {
    sql.replace("{serial}", dialect.serial)
        .replace("{int}", dialect.int)
        .replace("{bool}", dialect.bool)
        .replace("{ord}", dialect.ord)
        .replace("{timeline_seq}", dialect.timeline_seq)
        .replace("{data.patch}", dialect.data_patch)
        .replace("{intent.id}", dialect.intent_id)
}

/// Operations, their plans, timelines, jobs, evidence, gates and artifacts; resources and
/// idempotency keys (SQLite's migration 1).
pub const OPERATIONS: &str = "
    CREATE TABLE operations (
        id TEXT PRIMARY KEY,
        parent TEXT,
        intent TEXT NOT NULL,
        resource TEXT,
        state TEXT NOT NULL,
        state_kind TEXT NOT NULL,
        plan_revision TEXT NOT NULL,
        actor TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        version {int} NOT NULL
    );
    CREATE INDEX operations_state ON operations(state_kind);
    CREATE INDEX operations_resource ON operations(resource);
    CREATE TABLE plans (
        revision TEXT PRIMARY KEY,
        operation TEXT NOT NULL,
        plan TEXT NOT NULL
    );
    CREATE TABLE timeline (
        seq {timeline_seq},
        operation TEXT NOT NULL,
        at TEXT NOT NULL,
        actor TEXT NOT NULL,
        event TEXT NOT NULL,
        from_state TEXT,
        to_state TEXT,
        reason TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX timeline_operation ON timeline(operation, seq);
    CREATE TABLE jobs (
        {ord}
        operation TEXT NOT NULL,
        id TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts {int} NOT NULL,
        outcome TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (operation, id)
    );
    CREATE TABLE evidence (
        seq {serial},
        operation TEXT NOT NULL,
        job TEXT NOT NULL,
        check_id TEXT NOT NULL,
        source TEXT NOT NULL,
        command TEXT NOT NULL,
        expected TEXT NOT NULL,
        observed TEXT NOT NULL,
        passed {bool} NOT NULL,
        at TEXT NOT NULL,
        resource TEXT,
        capability TEXT
    );
    CREATE INDEX evidence_operation ON evidence(operation, seq);
    CREATE TABLE gates (
        {ord}
        operation TEXT NOT NULL,
        id TEXT NOT NULL,
        gate_type TEXT NOT NULL,
        reason TEXT NOT NULL,
        options TEXT NOT NULL,
        required_roles TEXT NOT NULL,
        answer TEXT,
        answered_by TEXT,
        answered_at TEXT,
        value TEXT,
        PRIMARY KEY (operation, id)
    );
    CREATE TABLE artifacts (
        {ord}
        operation TEXT NOT NULL,
        job TEXT NOT NULL,
        id TEXT NOT NULL,
        sensitivity TEXT NOT NULL,
        location TEXT NOT NULL,
        size {int} NOT NULL,
        at TEXT NOT NULL,
        PRIMARY KEY (operation, job, id)
    );
    CREATE TABLE resources (
        id TEXT PRIMARY KEY,
        doc TEXT NOT NULL,
        last_operation TEXT,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE idempotency (
        key TEXT PRIMARY KEY,
        resource TEXT,
        operation TEXT NOT NULL,
        job TEXT NOT NULL,
        at TEXT NOT NULL
    );
";

/// Identities, the audit log and idempotency keys of API requests (SQLite's migration 2).
pub const IDENTITIES: &str = "
    CREATE TABLE tokens (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        hash TEXT NOT NULL UNIQUE,
        roles TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_at TEXT NOT NULL,
        revoked_at TEXT
    );
    CREATE TABLE audit (
        seq {serial},
        at TEXT NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        target TEXT NOT NULL,
        operation TEXT,
        resource TEXT,
        detail TEXT NOT NULL
    );
    CREATE INDEX audit_actor ON audit(actor, seq);
    CREATE INDEX audit_operation ON audit(operation, seq);
    CREATE INDEX audit_resource ON audit(resource, seq);
    CREATE TABLE requests (
        actor TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        status INTEGER NOT NULL,
        response TEXT NOT NULL,
        at TEXT NOT NULL,
        PRIMARY KEY (actor, key)
    );
";

/// Agent tasks and their logs (`agent.rs`; SQLite's migration 3, PostgreSQL's 2).
pub const AGENT_TASKS: &str = "
    CREATE TABLE agent_tasks (
        seq {serial},
        id TEXT NOT NULL UNIQUE,
        operation TEXT NOT NULL,
        job TEXT NOT NULL,
        attempt {int} NOT NULL,
        kind TEXT NOT NULL,
        agent TEXT NOT NULL,
        resource TEXT NOT NULL,
        state TEXT NOT NULL,
        payload TEXT NOT NULL,
        lease TEXT,
        claimed_by TEXT,
        claims {int} NOT NULL,
        expires_ms {int} NOT NULL,
        report TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX agent_tasks_queue ON agent_tasks(agent, state, seq);
    CREATE INDEX agent_tasks_job ON agent_tasks(operation, job);
    CREATE TABLE agent_log (
        seq {serial},
        task TEXT NOT NULL,
        at TEXT NOT NULL,
        text TEXT NOT NULL
    );
    CREATE INDEX agent_log_task ON agent_log(task, seq);
";

/// Leases on operations (issue [F]): who drives one, until when, with which fencing token.
/// Rows are never deleted, so tokens only grow (SQLite's migration 4).
pub const LEASES: &str = "
    CREATE TABLE leases (
        operation TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        token {int} NOT NULL,
        expires_at {int} NOT NULL
    );
";

/// A gate's kind (issue [J]): the plan patch a gate reviews, NULL for a plan's gate. Gates made
/// before it review a patch exactly when they are `patch-<id>` of a patch proposed for their
/// operation (the one place a kind is read from an id, once, here). SQLite's migration 5,
/// PostgreSQL's 4.
pub const GATE_KINDS: &str = "
    ALTER TABLE gates ADD COLUMN patch TEXT;
    UPDATE gates SET patch = substr(id, 7)
     WHERE substr(id, 1, 6) = 'patch-'
       AND EXISTS (SELECT 1 FROM timeline t
                    WHERE t.operation = gates.operation AND t.event = 'patch_proposed'
                      AND {data.patch} = substr(gates.id, 7));
";

/// Resource histories (issue [I]): operations that changed a resource, its verifications.
/// SQLite's migration 6, PostgreSQL's 5.
pub const RESOURCE_EVENTS: &str = "
    CREATE TABLE resource_events (
        seq {serial},
        resource TEXT NOT NULL,
        at TEXT NOT NULL,
        actor TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        operation TEXT,
        summary TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    CREATE INDEX resource_events_resource ON resource_events(resource, seq);
";

/// Protocol §2's Operation fields ([O]): `intent_id` and `plan_id` (SQLite's migration 7,
/// PostgreSQL's 6). Operations stored before have their intent's `id` and, for `plan_id`, the
/// revision they ran at the migration (the first one is not known any more).
pub const OPERATION_IDS: &str = "
    ALTER TABLE operations ADD COLUMN intent_id TEXT;
    ALTER TABLE operations ADD COLUMN plan_id TEXT NOT NULL DEFAULT '';
    UPDATE operations SET intent_id = {intent.id}, plan_id = plan_revision;
";
