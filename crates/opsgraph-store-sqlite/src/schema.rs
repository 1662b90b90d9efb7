//! The SQLite schema: numbered migrations (`PRAGMA user_version`), applied by
//! `SqliteStore::open`. The tables are `opsgraph_store::schema`'s, in SQLite's words.

use std::sync::LazyLock;

use opsgraph_store::schema::{
    render, AGENT_TASKS, GATE_KINDS, IDENTITIES, LEASES, OPERATIONS, OPERATION_IDS, RESOURCE_EVENTS, SQLITE,
};

/// Versioned migrations; each runs once, in order, in its own transaction.
pub(crate) static MIGRATIONS: LazyLock<Vec<String>> = LazyLock::new(|| {
    [
        // 1: the initial schema.
        OPERATIONS,
        // 2: identities, the audit log and idempotency keys of API requests.
        IDENTITIES,
        // 3: agent tasks and their logs (`sqlite_agent.rs`).
        AGENT_TASKS,
        // 4: leases on operations (issue [F]).
        LEASES,
        // 5: a gate's kind (issue [J]), read from the ids of gates made before it.
        GATE_KINDS,
        // 6: resource histories (issue [I]).
        RESOURCE_EVENTS,
        // 7: an operation's `intent_id` and `plan_id` (issue [O]).
        OPERATION_IDS,
    ]
    .iter()
    .map(|sql| render(sql, &SQLITE))
    .collect()
});
