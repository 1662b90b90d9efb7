//! Reading a resource's history (`resource_events`, issue [I]).

use opsgraph_store::ResourceEventRecord;
use rusqlite::{params, Connection};

use crate::read::{parsed, rows};
use crate::Fail;

/// The last `limit` entries of `resource`'s history, oldest first.
pub(crate) fn resource_events(
    conn: &Connection,
    resource: &str,
    limit: usize,
) -> Result<Vec<ResourceEventRecord>, Fail> {
    rows(
        conn,
        "SELECT seq, resource, at, actor, kind, status, operation, summary, detail FROM
         (SELECT * FROM resource_events WHERE resource = ?1 ORDER BY seq DESC LIMIT ?2) ORDER BY seq",
        params![resource, limit as i64],
        |r| {
            Ok(ResourceEventRecord {
                seq: r.get(0)?,
                resource: r.get(1)?,
                at: r.get(2)?,
                actor: r.get(3)?,
                kind: r.get(4)?,
                status: r.get(5)?,
                operation: r.get(6)?,
                summary: r.get(7)?,
                detail: parsed(r, 8)?,
            })
        },
    )
}
