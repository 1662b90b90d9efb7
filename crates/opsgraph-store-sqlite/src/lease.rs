//! The SQLite half of leases; the store file is shared by the processes of one machine, and its
//! clock is this machine's.
//!
//! A lease's own commits (taken, renewed, let go) are deferred and never synced for their own
//! sake (`SqliteStore::deferred`, `synchronous=NORMAL` for their transaction): a lease only keeps
//! two live drivers apart, and every holder of a SQLite lease dies with the machine in a power
//! loss, the one failure an `fsync` guards against (a killed process loses nothing SQLite handed
//! the kernel). Whatever a holder does under its lease is a fenced commit, made durable (synced
//! at its commit or by the runtime's committer), and the WAL keeps commits in order: a sync
//! makes every commit before it durable, the lease's among them. A lease lost to a power loss is
//! one whose holder is gone anyway: the operation is adoptable, as after any crash. Two `fsync`s
//! fewer for a cold `apply`, one of them before its first job (issue [N] 5, docs/benchmarks.md).

use opsgraph_store::{now_ms, Error, Lease};

use crate::Fail;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

pub(crate) fn sqlite_lease(conn: &Connection, operation: &str) -> Result<Option<Lease>, Fail> {
    let now = now_ms();
    Ok(conn
        .prepare_cached("SELECT operation, holder, token, expires_at FROM leases WHERE operation = ?1")?
        .query_row([operation], |r| {
            Ok(Lease {
                operation: r.get(0)?,
                holder: r.get(1)?,
                token: r.get(2)?,
                expires_in_ms: r.get::<_, i64>(3)? - now,
                released: r.get::<_, i64>(3)? == 0,
            })
        })
        .optional()?)
}

pub(crate) fn sqlite_acquire(conn: &mut Connection, operation: &str, holder: &str, ttl_ms: i64) -> Result<Lease, Fail> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let now = now_ms();
    let current = sqlite_lease(&tx, operation)?;
    let token = match &current {
        None => 1,
        Some(l) if l.holder == holder && l.expires_in_ms > 0 => l.token,
        Some(l) if l.expires_in_ms <= 0 => l.token + 1,
        Some(l) => {
            return Err(Error::LeaseHeld {
                operation: operation.to_string(),
                holder: l.holder.clone(),
                token: l.token,
                expires_in_ms: l.expires_in_ms,
            }
            .into())
        }
    };
    tx.execute(
        "INSERT INTO leases (operation, holder, token, expires_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (operation) DO UPDATE SET holder = excluded.holder, token = excluded.token, expires_at = excluded.expires_at",
        params![operation, holder, token, now + ttl_ms],
    )?;
    tx.commit()?;
    Ok(Lease {
        operation: operation.to_string(),
        holder: holder.to_string(),
        token,
        expires_in_ms: ttl_ms,
        released: false,
    })
}

pub(crate) fn sqlite_renew(conn: &mut Connection, lease: &Lease, ttl_ms: i64) -> Result<Lease, Fail> {
    let changed = conn.execute(
        "UPDATE leases SET expires_at = ?4 WHERE operation = ?1 AND holder = ?2 AND token = ?3",
        params![lease.operation, lease.holder, lease.token, now_ms() + ttl_ms],
    )?;
    if changed == 1 {
        return Ok(Lease { expires_in_ms: ttl_ms, released: false, ..lease.clone() });
    }
    let current = sqlite_lease(conn, &lease.operation)?.map(|l| (l.holder, l.token));
    Err(Error::fenced(&lease.operation, &lease.holder, lease.token, current).into())
}

pub(crate) fn sqlite_release(conn: &Connection, lease: &Lease) -> Result<(), Fail> {
    conn.execute(
        "UPDATE leases SET expires_at = 0 WHERE operation = ?1 AND holder = ?2 AND token = ?3",
        params![lease.operation, lease.holder, lease.token],
    )?;
    Ok(())
}

pub(crate) fn sqlite_adoptable(conn: &Connection) -> Result<Vec<String>, Fail> {
    let mut stmt = conn.prepare_cached(
        "SELECT o.id FROM operations o LEFT JOIN leases l ON l.operation = o.id
         WHERE o.state_kind = 'running' AND o.parent IS NULL AND (l.operation IS NULL OR l.expires_at <= ?1)
         ORDER BY o.created_at, o.id",
    )?;
    let rows = stmt.query_map([now_ms()], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(crate) fn sqlite_fence(tx: &rusqlite::Connection, operation: &str, holder: &str, token: i64) -> Result<(), Fail> {
    let current: Option<(String, i64)> = tx
        .prepare_cached("SELECT holder, token FROM leases WHERE operation = ?1")?
        .query_row([operation], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if current.as_ref().is_none_or(|(h, t)| h != holder || *t != token) {
        return Err(Error::fenced(operation, holder, token, current).into());
    }
    Ok(())
}

pub(crate) fn sqlite_idle(tx: &rusqlite::Connection, resource: &str, operation: &str) -> Result<(), Fail> {
    let busy: Option<(String, String)> = tx
        .prepare_cached(
            "SELECT id, state_kind FROM operations WHERE resource = ?1 AND id <> ?2
             AND state_kind NOT IN ('completed', 'cancelled') ORDER BY created_at LIMIT 1",
        )?
        .query_row([resource, operation], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    match busy {
        Some((operation, state)) => {
            Err(Error::ResourceBusy { resource: resource.to_string(), operation, state }.into())
        }
        None => Ok(()),
    }
}
