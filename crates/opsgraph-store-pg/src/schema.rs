//! The PostgreSQL schema: numbered migrations, applied by `PgStore::connect`.

/// Versioned migrations; they run in order, each once, in one transaction under an advisory
/// lock (replicas starting together migrate once).
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the schema of SQLite's migrations 1 to 3, in PostgreSQL's types.
    "
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
        version BIGINT NOT NULL
    );
    CREATE INDEX operations_state ON operations(state_kind);
    CREATE INDEX operations_resource ON operations(resource);
    CREATE TABLE plans (
        revision TEXT PRIMARY KEY,
        operation TEXT NOT NULL,
        plan TEXT NOT NULL
    );
    CREATE TABLE counters (
        name TEXT PRIMARY KEY,
        value BIGINT NOT NULL
    );
    INSERT INTO counters (name, value) VALUES ('timeline', 0);
    CREATE TABLE timeline (
        seq BIGINT PRIMARY KEY,
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
        ord BIGSERIAL,
        operation TEXT NOT NULL,
        id TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts BIGINT NOT NULL,
        outcome TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (operation, id)
    );
    CREATE INDEX jobs_state ON jobs(state);
    CREATE TABLE evidence (
        seq BIGSERIAL PRIMARY KEY,
        operation TEXT NOT NULL,
        job TEXT NOT NULL,
        check_id TEXT NOT NULL,
        source TEXT NOT NULL,
        command TEXT NOT NULL,
        expected TEXT NOT NULL,
        observed TEXT NOT NULL,
        passed BOOLEAN NOT NULL,
        at TEXT NOT NULL,
        resource TEXT,
        capability TEXT
    );
    CREATE INDEX evidence_operation ON evidence(operation, seq);
    CREATE TABLE gates (
        ord BIGSERIAL,
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
        ord BIGSERIAL,
        operation TEXT NOT NULL,
        job TEXT NOT NULL,
        id TEXT NOT NULL,
        sensitivity TEXT NOT NULL,
        location TEXT NOT NULL,
        size BIGINT NOT NULL,
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
        seq BIGSERIAL PRIMARY KEY,
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
    CREATE TABLE leases (
        operation TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        token BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
    );
    ",
    // 2: agent tasks and their logs (`pg_agent.rs`).
    AGENT_MIGRATION,
    // 3: artifact contents and job logs (`pg_blob.rs`).
    BLOB_MIGRATION,
    // 4: a gate's kind (issue [J]): the plan patch a gate reviews, NULL for a plan's gate. Gates
    // made before it review a patch exactly when they are `patch-<id>` of a patch proposed for
    // their operation (the one place a kind is read from an id, once, here).
    "
    ALTER TABLE gates ADD COLUMN patch TEXT;
    UPDATE gates SET patch = substr(id, 7)
     WHERE substr(id, 1, 6) = 'patch-'
       AND EXISTS (SELECT 1 FROM timeline t
                    WHERE t.operation = gates.operation AND t.event = 'patch_proposed'
                      AND (t.data::jsonb ->> 'patch') = substr(gates.id, 7));
    ",
    // 5: resource histories (issue [I]): operations that changed a resource, its verifications.
    "
    CREATE TABLE resource_events (
        seq BIGSERIAL PRIMARY KEY,
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
    ",
];

/// The key of the advisory lock migrations run under (`'opsgraph'` in ASCII).
pub(crate) const MIGRATION_LOCK: i64 = 0x6f70_7367_7261_7068;

/// Migration 2 of the PostgreSQL schema: agent tasks and their logs.
const AGENT_MIGRATION: &str = "
    CREATE TABLE agent_tasks (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        operation TEXT NOT NULL,
        job TEXT NOT NULL,
        attempt BIGINT NOT NULL,
        kind TEXT NOT NULL,
        agent TEXT NOT NULL,
        resource TEXT NOT NULL,
        state TEXT NOT NULL,
        payload TEXT NOT NULL,
        lease TEXT,
        claimed_by TEXT,
        claims BIGINT NOT NULL,
        expires_ms BIGINT NOT NULL,
        report TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX agent_tasks_queue ON agent_tasks(agent, state, seq);
    CREATE INDEX agent_tasks_job ON agent_tasks(operation, job);
    CREATE TABLE agent_log (
        seq BIGSERIAL PRIMARY KEY,
        task TEXT NOT NULL,
        at TEXT NOT NULL,
        text TEXT NOT NULL
    );
    CREATE INDEX agent_log_task ON agent_log(task, seq);
";

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
