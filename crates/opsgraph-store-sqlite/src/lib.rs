//! The embedded SQLite backend of [`opsgraph_store::Store`]: one file in the data directory, WAL,
//! `synchronous=FULL` unless the operator opts into `NORMAL` (`sqlite.rs`, its migrations in
//! `schema.rs`, a new file made whole before it gets its name in `create.rs`); agent tasks
//! (`sqlite_agent.rs`); the SQLite half of leases (`lease.rs`); the group commit of the writes
//! one process makes to one file (`writer.rs`). The conformance suite of `opsgraph-store` runs
//! against it through [`test_db`], whose blob store is the data directory's files
//! (`opsgraph_store::FsBlobStore`).

mod apply;
mod create;
mod history;
mod lease;
mod read;
mod schema;
mod sqlite;
mod sqlite_agent;
mod wal;
mod watch;
mod writer;

use opsgraph_store::testing::{unique, Backend, TestDb};
use opsgraph_store::{Error, Store};

pub use sqlite::{Durability, SqliteStore};

// rusqlite's errors become [`Error::Query`].
opsgraph_store::backend_fail!(rusqlite::Error => query_error);

/// A rusqlite error as the store's backend-neutral [`Error::Query`] (its source).
pub fn query_error(e: rusqlite::Error) -> Error {
    Error::Query(Box::new(e))
}

/// Opens a store on a SQLite file (created if needed).
pub fn open(path: &std::path::Path, durability: Durability) -> Result<Box<dyn Store>, Error> {
    Ok(Box::new(SqliteStore::open(path, durability)?))
}

/// A test database: a SQLite file in a new temporary directory, removed on drop.
pub fn test_db() -> TestDb {
    let dir = std::env::temp_dir().join(unique("opsgraph-testdb"));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    let url = format!("sqlite://{}", dir.join("opsgraph.db").display());
    TestDb::new(Backend::Sqlite, url, Some(dir), (open_url, fs_blobs), None)
}

/// The data directory's files, next to the test's database file.
fn fs_blobs(db: &TestDb) -> Result<Box<dyn opsgraph_store::BlobStore>, Error> {
    let dir = db.dir().expect("a SQLite test database has a directory");
    Ok(Box::new(opsgraph_store::FsBlobStore::new(dir)))
}

/// Opens `sqlite://PATH` (or a plain path) with full durability: how tests open.
fn open_url(url: &str) -> Result<Box<dyn Store>, Error> {
    open(std::path::Path::new(url.strip_prefix("sqlite://").unwrap_or(url)), Durability::Full)
}

#[cfg(test)]
mod tests;
