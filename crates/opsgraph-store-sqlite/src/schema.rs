//! The SQLite schema: numbered migrations (`PRAGMA user_version`), applied by
//! `SqliteStore::open`.

/// Versioned migrations; each runs once, in order, in its own transaction.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
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
        version INTEGER NOT NULL
    );
    CREATE INDEX operations_state ON operations(state_kind);
    CREATE INDEX operations_resource ON operations(resource);
    CREATE TABLE plans (
        revision TEXT PRIMARY KEY,
        operation TEXT NOT NULL,
        plan TEXT NOT NULL
    );
    CREATE TABLE timeline (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
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
        operation TEXT NOT NULL,
        id TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (operation, id)
    );
    CREATE TABLE evidence (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        operation TEXT NOT NULL,
        job TEXT NOT NULL,
        check_id TEXT NOT NULL,
        source TEXT NOT NULL,
        command TEXT NOT NULL,
        expected TEXT NOT NULL,
        observed TEXT NOT NULL,
        passed INTEGER NOT NULL,
        at TEXT NOT NULL,
        resource TEXT,
        capability TEXT
    );
    CREATE INDEX evidence_operation ON evidence(operation, seq);
    CREATE TABLE gates (
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
        operation TEXT NOT NULL,
        job TEXT NOT NULL,
        id TEXT NOT NULL,
        sensitivity TEXT NOT NULL,
        location TEXT NOT NULL,
        size INTEGER NOT NULL,
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
    ",
    // 2: identities, the audit log and idempotency keys of API requests.
    "
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
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
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
    ",
    // 3: agent tasks and their logs (`sqlite_agent.rs`).
    crate::sqlite_agent::MIGRATION,
    // 4: leases on operations (issue [F]): who drives one, until when, with which fencing token.
    // Rows are never deleted, so tokens only grow.
    "
    CREATE TABLE leases (
        operation TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        token INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    );
    ",
    // 5: a gate's kind (issue [J]): the plan patch a gate reviews, NULL for a plan's gate. Gates
    // made before it review a patch exactly when they are `patch-<id>` of a patch proposed for
    // their operation (the one place a kind is read from an id, once, here).
    "
    ALTER TABLE gates ADD COLUMN patch TEXT;
    UPDATE gates SET patch = substr(id, 7)
     WHERE substr(id, 1, 6) = 'patch-'
       AND EXISTS (SELECT 1 FROM timeline t
                    WHERE t.operation = gates.operation AND t.event = 'patch_proposed'
                      AND json_extract(t.data, '$.patch') = substr(gates.id, 7));
    ",
    // 6: resource histories (issue [I]): operations that changed a resource, its verifications.
    "
    CREATE TABLE resource_events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
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
