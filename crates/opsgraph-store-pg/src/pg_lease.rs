//! The PostgreSQL half of leases: one statement each, judged by the database server's clock
//! (`NOW_MS`), so replicas whose clocks disagree still agree on who holds an operation.

use opsgraph_store::{Error, Lease};
use postgres::Row;

use crate::conn::{PgStore, NOW_MS};
use crate::Fail;

/// operation, holder, token, expires_in_ms, released.
fn lease(r: &Row) -> Lease {
    Lease { operation: r.get(0), holder: r.get(1), token: r.get(2), expires_in_ms: r.get(3), released: r.get(4) }
}

impl PgStore {
    pub(crate) fn acquire(&mut self, operation: &str, holder: &str, ttl_ms: i64) -> Result<Lease, Fail> {
        // One statement: a new row, or the row taken over when it expired or is this holder's.
        // Concurrent acquirers queue on the row; the loser sees the winner's live lease.
        let sql = format!(
            "INSERT INTO leases AS l (operation, holder, token, expires_at) VALUES ($1, $2, 1, {NOW_MS} + $3)
             ON CONFLICT (operation) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
               token = CASE WHEN l.holder = excluded.holder AND l.expires_at > {NOW_MS} THEN l.token ELSE l.token + 1 END
             WHERE l.holder = excluded.holder OR l.expires_at <= {NOW_MS}
             RETURNING operation, holder, token, expires_at - {NOW_MS}, false"
        );
        if let Some(row) = self.query_opt(&sql, &[&operation, &holder, &ttl_ms])? {
            return Ok(lease(&row));
        }
        match self.current_lease(operation)? {
            Some(l) => Err(Error::LeaseHeld {
                operation: operation.to_string(),
                holder: l.holder,
                token: l.token,
                expires_in_ms: l.expires_in_ms,
            }
            .into()),
            // Released between the two statements: try once more.
            None => self.acquire(operation, holder, ttl_ms),
        }
    }

    pub(crate) fn renew(&mut self, l: &Lease, ttl_ms: i64) -> Result<Lease, Fail> {
        let sql = format!(
            "UPDATE leases SET expires_at = {NOW_MS} + $4 WHERE operation = $1 AND holder = $2 AND token = $3
             RETURNING operation, holder, token, expires_at - {NOW_MS}, false"
        );
        match self.query_opt(&sql, &[&l.operation, &l.holder, &l.token, &ttl_ms])? {
            Some(row) => Ok(lease(&row)),
            None => {
                let current = self.current_lease(&l.operation)?.map(|c| (c.holder, c.token));
                Err(Error::fenced(&l.operation, &l.holder, l.token, current).into())
            }
        }
    }

    pub(crate) fn release(&mut self, l: &Lease) -> Result<(), Fail> {
        // 0 marks a lease let go (`Lease::released`), not one that expired.
        let sql = "UPDATE leases SET expires_at = 0 WHERE operation = $1 AND holder = $2 AND token = $3";
        self.query(sql, &[&l.operation, &l.holder, &l.token])?;
        Ok(())
    }

    pub(crate) fn current_lease(&self, operation: &str) -> Result<Option<Lease>, Fail> {
        let sql = format!(
            "SELECT operation, holder, token, expires_at - {NOW_MS}, expires_at = 0 FROM leases WHERE operation = $1"
        );
        Ok(self.query_opt(&sql, &[&operation])?.as_ref().map(lease))
    }

    pub(crate) fn unleased_running(&self) -> Result<Vec<String>, Fail> {
        let sql = format!(
            "SELECT o.id FROM operations o LEFT JOIN leases l ON l.operation = o.id
             WHERE o.state_kind = 'running' AND o.parent IS NULL AND (l.operation IS NULL OR l.expires_at <= {NOW_MS})
             ORDER BY o.created_at, o.id"
        );
        Ok(self.query(&sql, &[])?.iter().map(|r| r.get(0)).collect())
    }
}
