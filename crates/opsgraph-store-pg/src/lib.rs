//! The PostgreSQL backend of [`opsgraph_store::Store`] (issue [F]), for several replicas on one
//! database: `conn.rs` (`PgStore`'s connection, statement cache and commit transaction), `pg.rs`
//! (the store: one transaction per commit), `pg_group.rs` (commits of one process grouped, one
//! WAL flush for several), `pg_one.rs` (a turn's commits in one transaction, in one message when
//! each is a driven operation's), `pg_sync.rs` (the syncer of deferred commits), `pg_tail.rs` (a commit's last statement: job records,
//! timeline rows and a driven operation's checks), `schema.rs` (every migration),
//! `pg_lease.rs` (leases on the server's clock), `pg_agent.rs` (agent tasks) and `pg_blob.rs`
//! (`PgBlobStore`: artifact contents and job logs in tables, so replicas share no filesystem).
//! The conformance suite of `opsgraph-store` runs against it through [`test_db`].

mod conn;
mod pg;
mod pg_agent;
mod pg_blob;
mod pg_group;
mod pg_lease;
mod pg_one;
mod pg_sync;
mod pg_tail;
mod schema;

use opsgraph_store::testing::{pg_required, test_pg_url, unique, Backend, TestDb};
use opsgraph_store::{redact, Error, Store};

pub use pg::PgStore;
pub use pg_blob::PgBlobStore;
pub use pg_sync::APPLICATION as SYNCER_APPLICATION;

// The client's errors become [`Error::Postgres`] (the server's message).
opsgraph_store::backend_fail!(postgres::Error => |e: postgres::Error| Error::Postgres(conn::pg_message(&e)));

/// Connects to the database a `postgres://` URL names (migrated).
pub fn open(url: &str) -> Result<Box<dyn Store>, Error> {
    Ok(Box::new(PgStore::connect(url)?))
}

/// The blob store in a test database's tables.
fn pg_blobs(db: &TestDb) -> Result<Box<dyn opsgraph_store::BlobStore>, Error> {
    Ok(Box::new(PgBlobStore::connect(db.url())?))
}

/// `url` with its database name replaced.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

/// A new PostgreSQL database for the test `name`, dropped with the [`TestDb`]; `None` (after
/// printing why) when the server is unreachable and `CI` is not `true`.
pub fn test_db(name: &str) -> Option<TestDb> {
    let server = test_pg_url();
    let mut admin = match postgres::Client::connect(&server, postgres::NoTls) {
        Ok(c) => c,
        Err(e) => {
            let why = format!("PostgreSQL unreachable at {} ({})", redact(&server), conn::pg_message(&e));
            if pg_required() {
                panic!("{name}: {why}; CI=true requires PostgreSQL (set OPSGRAPH_TEST_PG)");
            }
            eprintln!("SKIPPED {name}: {why}; set OPSGRAPH_TEST_PG or start PostgreSQL to run it");
            return None;
        }
    };
    let db = unique("og_test");
    admin
        .batch_execute(&format!("CREATE DATABASE {db} TEMPLATE template0"))
        .unwrap_or_else(|e| panic!("{name}: failed to create database {db}: {e}"));
    let url = with_database(&server, &db);
    let cleanup = move || {
        if let Ok(mut admin) = postgres::Client::connect(&server, postgres::NoTls) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
        }
    };
    Some(TestDb::new(Backend::Postgres, url, None, (open, pg_blobs), Some(Box::new(cleanup))))
}

#[cfg(test)]
mod tests;
