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
            // The final log replaces the attempt's shared live output, in the same statement, and
            // what the job's earlier attempts left (a driver that died while one ran).
            self.client()?.execute(
                "WITH live AS (DELETE FROM live_logs WHERE operation = $1 AND job = $2 AND attempt <= $3)
                 INSERT INTO job_logs (operation, job, attempt, content) VALUES ($1, $2, $3, $4)",
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

    fn shares_live_logs(&self) -> bool {
        true
    }

    fn put_live(&self, log: &LogKey, from: u64, bytes: &[u8], keep: u64) -> Result<(), Error> {
        log.relative_path()?;
        let (from, horizon) = (offset(from)?, offset((from + bytes.len() as u64).saturating_sub(keep))?);
        edge(|| {
            // One statement: the new piece in (a piece shared again after an error it did not see
            // keeps the longer), the pieces wholly more than `keep` before its end out; nothing
            // once the attempt's final log is stored (a share that was on its way when the
            // attempt ended: its driver does not wait for it).
            self.client()?.execute(
                "WITH old AS (DELETE FROM live_logs WHERE operation = $1 AND job = $2 AND attempt = $3
                                 AND start + length(content) <= $5)
                 INSERT INTO live_logs (operation, job, attempt, start, content)
                   SELECT $1, $2, $3, $4, $6 WHERE NOT EXISTS
                     (SELECT 1 FROM job_logs WHERE operation = $1 AND job = $2 AND attempt = $3)
                 ON CONFLICT (operation, job, attempt, start) DO UPDATE SET content = EXCLUDED.content
                   WHERE length(EXCLUDED.content) > length(live_logs.content)",
                &[&log.operation, &log.job, &(log.attempt as i32), &from, &horizon, &bytes],
            )?;
            Ok(())
        })
    }

    fn live(&self, log: &LogKey, after: u64) -> Result<Option<(u64, Vec<u8>)>, Error> {
        log.relative_path()?;
        let after = offset(after)?;
        edge(|| {
            let rows = self.client()?.query(
                "SELECT start, content FROM live_logs WHERE operation = $1 AND job = $2 AND attempt = $3
                   AND start + length(content) > $4 ORDER BY start",
                &[&log.operation, &log.job, &(log.attempt as i32), &after],
            )?;
            Ok(contiguous(rows.iter().map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, Vec<u8>>(1)))))
        })
    }
}

/// A byte offset as PostgreSQL's BIGINT.
fn offset(n: u64) -> Result<i64, Error> {
    i64::try_from(n).map_err(|_| Error::BadBlob { what: format!("live log offset {n}"), reason: "too large".into() })
}

/// The pieces of a live log, in order, as one run of bytes: the last run without a gap (a
/// driver that fell behind its output shares from where its file still keeps it).
fn contiguous(pieces: impl Iterator<Item = (u64, Vec<u8>)>) -> Option<(u64, Vec<u8>)> {
    let mut run: Option<(u64, Vec<u8>)> = None;
    for (start, bytes) in pieces {
        match &mut run {
            // Adjacent, or overlapping what is there (a piece shared again): its new bytes only.
            Some((from, all)) if (*from..=*from + all.len() as u64).contains(&start) => {
                let known = (*from + all.len() as u64 - start) as usize;
                all.extend_from_slice(bytes.get(known..).unwrap_or_default());
            }
            _ => run = Some((start, bytes)),
        }
    }
    run
}

#[cfg(test)]
mod tests {
    /// Pieces `(start, text)` in order, joined as [`super::contiguous`] joins them.
    fn check(pieces: &[(u64, &str)], expect: expect_test::Expect) {
        let run = super::contiguous(pieces.iter().map(|(s, t)| (*s, t.as_bytes().to_vec())));
        let got = run.map(|(from, bytes)| format!("{from}:{}", String::from_utf8(bytes).unwrap()));
        expect.assert_eq(&got.unwrap_or_else(|| "(none)".into()));
    }

    #[test]
    fn pieces_join_into_their_last_run_without_a_gap() {
        use expect_test::expect;
        check(&[], expect!["(none)"]);
        check(&[(0, "ab"), (2, "cd")], expect!["0:abcd"]);
        check(&[(5, "ab"), (7, "c")], expect!["5:abc"]);
        // Overlapping (shared again): only the new bytes.
        check(&[(0, "abc"), (1, "bcde")], expect!["0:abcde"]);
        check(&[(0, "abc"), (1, "b")], expect!["0:abc"]);
        // A gap (the driver fell behind its file): from the run after it.
        check(&[(0, "ab"), (4, "ef"), (6, "g")], expect!["4:efg"]);
    }
}
