//! Waiting for timeline entries committed by someone else (`Store::wait_for_timeline`): this
//! process's commits ring the file's `opsgraph_store::timeline_written` and wake the waiter at once;
//! another process's show in `PRAGMA data_version`, looked at every `Written::SLICE` while
//! waiting. `data_version` moves on any other connection's commit (a lease renewal too): the
//! caller then reads and may find nothing new.

use std::time::{Duration, Instant};

use opsgraph_store::Written;

use crate::{Fail, SqliteStore};

fn data_version(store: &SqliteStore) -> Result<i64, Fail> {
    Ok(store.conn.prepare_cached("PRAGMA data_version")?.query_row([], |r| r.get(0))?)
}

/// True when something may have been committed since the last call (the first call: always),
/// false after `timeout` with nothing seen.
pub(crate) fn wait(store: &SqliteStore, timeout: Duration) -> Result<bool, Fail> {
    let bell = &store.written;
    let deadline = Instant::now() + timeout;
    let Some((mut generation, mut data)) = store.seen.get() else {
        store.seen.set(Some((bell.generation(), data_version(store)?)));
        return Ok(true);
    };
    let moved = loop {
        let now = bell.generation();
        if now != generation {
            (generation, data) = (now, data_version(store)?);
            break true;
        }
        let v = data_version(store)?;
        if v != data {
            data = v;
            break true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break false;
        }
        bell.wait(generation, left.min(Written::SLICE));
    };
    store.seen.set(Some((generation, data)));
    Ok(moved)
}
