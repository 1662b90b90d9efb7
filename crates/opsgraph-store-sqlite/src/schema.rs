//! The SQLite schema: numbered migrations (`PRAGMA user_version`), applied by
//! `SqliteStore::open` through [`migrate`]. The tables are `opsgraph_store::schema`'s, in
//! SQLite's words.

use std::sync::LazyLock;

use opsgraph_store::Error;
use rusqlite::Connection;

use opsgraph_store::schema::{
    render, AGENT_TASKS, GATE_KINDS, IDENTITIES, LEASES, OPERATIONS, OPERATION_IDS, RESOURCE_EVENTS, SQLITE,
};

use crate::writer::Writer;
use crate::Fail;

/// Versioned migrations; each runs once, in order ([`migrate`]).
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

/// Brings the file's schema up to date: every migration it lacks, in order, in ONE immediate
/// transaction (one commit, one `fsync`: a fresh data directory pays one, not one per
/// migration), with `user_version` set to the last. Under the write lock, and only what nobody
/// (a server and a CLI starting together) applied meanwhile. A failure leaves the file as it
/// was: no half-migrated version is ever committed.
pub(crate) fn migrate(conn: &mut Connection, writer: &Writer) -> Result<(), Fail> {
    let supported = MIGRATIONS.len() as i64;
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > supported {
        return Err(Error::TooNew { found: current, supported }.into());
    }
    if current == supported {
        return Ok(());
    }
    let _turn = writer.turn();
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    // Read again under the lock: another process may have migrated since.
    let current: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > supported {
        return Err(Error::TooNew { found: current, supported }.into());
    }
    if current == supported {
        return Ok(());
    }
    for sql in &MIGRATIONS[current as usize..] {
        tx.execute_batch(sql)?;
    }
    tx.execute_batch(&format!("PRAGMA user_version = {supported}"))?;
    tx.commit()?;
    Ok(())
}
