//! [`PgBlobStore`]: artifact contents and job logs in the database, so server replicas on one
//! PostgreSQL share no filesystem. Locations are those of the filesystem backend
//! (`blobs/ab/cdef…`), so an artifact record names its bytes the same way on either.

use std::sync::Arc;

use opsgraph_store::blob::{blob_location, check_location};
use opsgraph_store::idle::{Idle, Lent};
use opsgraph_store::{BlobStore, Error, LogKey};
use postgres::Client;

use crate::{edge, PgStore};

/// Idle connections kept: the jobs of a drive append their logs at once (up to its
/// concurrency), and one shared connection made each wait for the others' round trips.
const KEEP: usize = 8;

/// Connections of its own (the blob store is shared between threads, a `PgStore` is not), one
/// lent to each call, opened again when one broke: a server keeps its blob store for its whole
/// life, across database restarts.
pub struct PgBlobStore {
    url: String,
    idle: Arc<Idle<Client>>,
}

impl PgBlobStore {
    /// Connects (without TLS) and brings the schema up to date, as [`PgStore::connect`].
    pub fn connect(url: &str) -> Result<PgBlobStore, Error> {
        let idle = Idle::new(KEEP, |c: &Client| !c.is_closed());
        idle.give(Self::open(url)?);
        Ok(PgBlobStore { url: url.to_string(), idle })
    }

    fn open(url: &str) -> Result<Client, Error> {
        Ok(PgStore::connect(url)?.client.into_inner())
    }

    /// A connection for one call: an idle one, else a new one. One whose connection broke is not
    /// kept: the call that found it broken failed (nothing is retried, so an append is never
    /// written twice), and the next one connects again.
    fn client(&self) -> Result<Lent<Client>, Error> {
        self.idle.lend(|| Self::open(&self.url))
    }
}

impl BlobStore for PgBlobStore {
    fn put(&self, bytes: &[u8]) -> Result<(String, i64), Error> {
        edge(|| {
            let location = blob_location(bytes);
            self.client()?.execute(
                "INSERT INTO blobs (location, content) VALUES ($1, $2) ON CONFLICT (location) DO NOTHING",
                &[&location, &bytes],
            )?;
            Ok((location, bytes.len() as i64))
        })
    }

    fn get(&self, location: &str) -> Result<Option<Vec<u8>>, Error> {
        check_location(location)?;
        edge(|| {
            let row = self.client()?.query_opt("SELECT content FROM blobs WHERE location = $1", &[&location])?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn remove(&self, location: &str) -> Result<(), Error> {
        check_location(location)?;
        edge(|| {
            self.client()?.execute("DELETE FROM blobs WHERE location = $1", &[&location])?;
            Ok(())
        })
    }

    fn append_log(&self, log: &LogKey, bytes: &[u8]) -> Result<(), Error> {
        log.relative_path()?;
        edge(|| {
            self.client()?.execute(
                "INSERT INTO job_logs (operation, job, attempt, content) VALUES ($1, $2, $3, $4)",
                &[&log.operation, &log.job, &(log.attempt as i32), &bytes],
            )?;
            Ok(())
        })
    }

    fn log(&self, log: &LogKey) -> Result<Option<Vec<u8>>, Error> {
        log.relative_path()?;
        edge(|| {
            let rows = self.client()?.query(
                "SELECT content FROM job_logs WHERE operation = $1 AND job = $2 AND attempt = $3 ORDER BY seq",
                &[&log.operation, &log.job, &(log.attempt as i32)],
            )?;
            if rows.is_empty() {
                return Ok(None);
            }
            Ok(Some(rows.iter().flat_map(|r| r.get::<_, Vec<u8>>(0)).collect()))
        })
    }
}
