//! Leases on operations, and opening a store by URL.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Durability, Error, PgStore, SqliteStore, Store};

/// How long a lease lasts unless renewed, when `OPSGRAPH_LEASE_TTL_MS` does not say.
pub const DEFAULT_LEASE_TTL_MS: i64 = 10_000;

/// The right to drive one operation, until it expires. `token` grows with every acquisition of
/// the operation's lease, so a write fenced with an older token is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub operation: String,
    pub holder: String,
    pub token: i64,
    /// Milliseconds left when it was read, by the store's clock (negative: expired). Relative,
    /// so replicas whose clocks disagree with each other still agree with the store.
    pub expires_in_ms: i64,
    /// Let go by its holder (`release_lease`) rather than expired: a later holder took nothing
    /// over from it.
    #[serde(default)]
    pub released: bool,
}

impl Lease {
    /// The guard every write made under this lease carries.
    pub fn fence(&self) -> crate::Write {
        crate::Write::Fence { operation: self.operation.clone(), holder: self.holder.clone(), token: self.token }
    }
}

/// Opens the store a URL names: `postgres://…` or `postgresql://…` is PostgreSQL; `sqlite://PATH`
/// or a plain path is a SQLite file (created if needed).
pub fn open(url: &str, durability: Durability) -> Result<Box<dyn Store>, Error> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Box::new(PgStore::connect(url)?));
    }
    let path = url.strip_prefix("sqlite://").unwrap_or(url);
    Ok(Box::new(SqliteStore::open(Path::new(path), durability)?))
}

/// Whether a URL names PostgreSQL.
pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// A URL with its password replaced, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (auth, host) = match rest.split_once('@') {
        Some((auth, host)) => (auth, host),
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// Milliseconds since the epoch by this machine's clock (SQLite leases: one machine, one clock).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// What a fence check says of the stored lease, for [`Error::Fenced`].
pub(crate) fn describe_current(current: Option<(String, i64)>) -> String {
    match current {
        Some((holder, token)) => format!("the lease is now {holder}'s with token {token}"),
        None => "the operation was never leased".to_string(),
    }
}

// The SQLite half of leases; the store file is shared by the processes of one machine, and its
// clock is this machine's.

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

pub(crate) fn sqlite_lease(conn: &Connection, operation: &str) -> Result<Option<Lease>, Error> {
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

pub(crate) fn sqlite_acquire(
    conn: &mut Connection,
    operation: &str,
    holder: &str,
    ttl_ms: i64,
) -> Result<Lease, Error> {
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
            })
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

pub(crate) fn sqlite_renew(conn: &mut Connection, lease: &Lease, ttl_ms: i64) -> Result<Lease, Error> {
    let changed = conn.execute(
        "UPDATE leases SET expires_at = ?4 WHERE operation = ?1 AND holder = ?2 AND token = ?3",
        params![lease.operation, lease.holder, lease.token, now_ms() + ttl_ms],
    )?;
    if changed == 1 {
        return Ok(Lease { expires_in_ms: ttl_ms, released: false, ..lease.clone() });
    }
    let current = sqlite_lease(conn, &lease.operation)?.map(|l| (l.holder, l.token));
    Err(Error::Fenced {
        operation: lease.operation.clone(),
        holder: lease.holder.clone(),
        token: lease.token,
        current: describe_current(current),
    })
}

pub(crate) fn sqlite_release(conn: &Connection, lease: &Lease) -> Result<(), Error> {
    conn.execute(
        "UPDATE leases SET expires_at = 0 WHERE operation = ?1 AND holder = ?2 AND token = ?3",
        params![lease.operation, lease.holder, lease.token],
    )?;
    Ok(())
}

pub(crate) fn sqlite_adoptable(conn: &Connection) -> Result<Vec<String>, Error> {
    let mut stmt = conn.prepare_cached(
        "SELECT o.id FROM operations o LEFT JOIN leases l ON l.operation = o.id
         WHERE o.state_kind = 'running' AND o.parent IS NULL AND (l.operation IS NULL OR l.expires_at <= ?1)
         ORDER BY o.created_at, o.id",
    )?;
    let rows = stmt.query_map([now_ms()], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(crate) fn sqlite_fence(
    tx: &rusqlite::Transaction<'_>,
    operation: &str,
    holder: &str,
    token: i64,
) -> Result<(), Error> {
    let current: Option<(String, i64)> = tx
        .prepare_cached("SELECT holder, token FROM leases WHERE operation = ?1")?
        .query_row([operation], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if current.as_ref().is_none_or(|(h, t)| h != holder || *t != token) {
        return Err(Error::Fenced {
            operation: operation.to_string(),
            holder: holder.to_string(),
            token,
            current: describe_current(current),
        });
    }
    Ok(())
}

pub(crate) fn sqlite_idle(tx: &rusqlite::Transaction<'_>, resource: &str, operation: &str) -> Result<(), Error> {
    let busy: Option<(String, String)> = tx
        .prepare_cached(
            "SELECT id, state_kind FROM operations WHERE resource = ?1 AND id <> ?2
             AND state_kind NOT IN ('completed', 'cancelled') ORDER BY created_at LIMIT 1",
        )?
        .query_row([resource, operation], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    match busy {
        Some((operation, state)) => Err(Error::ResourceBusy { resource: resource.to_string(), operation, state }),
        None => Ok(()),
    }
}

/// A boxed store is a store: what [`open`] returns goes wherever a concrete store went.
impl<S: Store + ?Sized> Store for Box<S> {
    fn commit(&mut self, writes: &[crate::Write]) -> Result<(), Error> {
        (**self).commit(writes)
    }
    fn agent_claim(&mut self, claim: &crate::AgentClaim) -> Result<Option<crate::AgentTask>, Error> {
        (**self).agent_claim(claim)
    }
    fn agent_task(&self, id: &str) -> Result<Option<crate::AgentTask>, Error> {
        (**self).agent_task(id)
    }
    fn agent_tasks(&self, operation: &str) -> Result<Vec<crate::AgentTask>, Error> {
        (**self).agent_tasks(operation)
    }
    fn agent_log(&self, task: &str, after: i64) -> Result<Vec<crate::AgentLogLine>, Error> {
        (**self).agent_log(task, after)
    }
    fn operation(&self, id: &str) -> Result<Option<crate::OperationRecord>, Error> {
        (**self).operation(id)
    }
    fn operations(&self, filter: &crate::OperationFilter) -> Result<Vec<crate::OperationRecord>, Error> {
        (**self).operations(filter)
    }
    fn plan(&self, revision: &str) -> Result<Option<serde_json::Value>, Error> {
        (**self).plan(revision)
    }
    fn timeline(&self, operation: &str) -> Result<Vec<crate::TimelineEntry>, Error> {
        (**self).timeline(operation)
    }
    fn jobs(&self, operation: &str) -> Result<Vec<crate::JobRecord>, Error> {
        (**self).jobs(operation)
    }
    fn evidence(&self, operation: &str) -> Result<Vec<crate::EvidenceRecord>, Error> {
        (**self).evidence(operation)
    }
    fn gates(&self, operation: &str) -> Result<Vec<crate::GateRecord>, Error> {
        (**self).gates(operation)
    }
    fn artifacts(&self, operation: &str) -> Result<Vec<crate::ArtifactRecord>, Error> {
        (**self).artifacts(operation)
    }
    fn resources(&self) -> Result<Vec<crate::ResourceRecord>, Error> {
        (**self).resources()
    }
    fn resource(&self, id: &str) -> Result<Option<crate::ResourceRecord>, Error> {
        (**self).resource(id)
    }
    fn idempotency(&self, key: &str) -> Result<Option<(String, String)>, Error> {
        (**self).idempotency(key)
    }
    fn timeline_after(
        &self,
        operation: Option<&str>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<crate::TimelineEntry>, Error> {
        (**self).timeline_after(operation, after, limit)
    }
    fn stats(&self) -> Result<crate::Stats, Error> {
        (**self).stats()
    }
    fn data_version(&self) -> Result<Option<i64>, Error> {
        (**self).data_version()
    }
    fn tokens(&self) -> Result<Vec<crate::TokenRecord>, Error> {
        (**self).tokens()
    }
    fn token_by_hash(&self, hash: &str) -> Result<Option<crate::TokenRecord>, Error> {
        (**self).token_by_hash(hash)
    }
    fn audit(&self, filter: &crate::AuditFilter) -> Result<Vec<crate::AuditRecord>, Error> {
        (**self).audit(filter)
    }
    fn request(&self, actor: &str, key: &str) -> Result<Option<crate::RequestRecord>, Error> {
        (**self).request(actor, key)
    }
    fn acquire_lease(&mut self, operation: &str, holder: &str, ttl_ms: i64) -> Result<Lease, Error> {
        (**self).acquire_lease(operation, holder, ttl_ms)
    }
    fn renew_lease(&mut self, lease: &Lease, ttl_ms: i64) -> Result<Lease, Error> {
        (**self).renew_lease(lease, ttl_ms)
    }
    fn release_lease(&mut self, lease: &Lease) -> Result<(), Error> {
        (**self).release_lease(lease)
    }
    fn lease(&self, operation: &str) -> Result<Option<Lease>, Error> {
        (**self).lease(operation)
    }
    fn adoptable(&self) -> Result<Vec<String>, Error> {
        (**self).adoptable()
    }
}
