//! Deferred durability on PostgreSQL (issue [N] 5, the runtime's committer): a commit made with
//! `synchronous_commit = off` (`Store::commit_deferred`, `pg_one.rs`) is made and visible when the
//! server answers, its commit record written to the WAL but not yet flushed. The syncer makes it
//! durable: on a connection of its own, a transaction that writes a WAL record and commits with
//! `synchronous_commit = on`. Such a commit flushes the WAL up to its commit record before it
//! answers, and the WAL is flushed in order: every record written before, every deferred commit
//! that had been answered before the sync began among them, is on disk too. The record is a
//! transactional logical message (`pg_logical_emit_message`, any role may emit one; no table, no
//! row lock). A transaction that only takes an xid (`txid_current()`) writes nothing before its
//! commit record, and PostgreSQL does not flush such a commit (measured: the test
//! `postgres_a_deferred_commit_is_visible_at_once_and_flushed_by_the_syncer` fails with it).
//!
//! The syncer's connection is made before the first deferred commit it answers for (at
//! `Store::syncer`) and never made again: a server that restarted (and lost commits not flushed)
//! has closed it, so the next sync fails (`Error::NotDurable`) instead of flushing a new server's
//! WAL and vouching for commits it never had. A failed syncer stays failed; the next
//! `Store::syncer` makes a new one. Syncs of several committers of this process share the
//! connection, and a sync that waited for another, begun after it was asked for, needs none of
//! its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use opsgraph_store::group::lock;
use opsgraph_store::{redact, Error, Syncer};
use postgres::{Client, NoTls};

use crate::conn::pg_message;

/// The statement of a sync: a WAL record written in a transaction committed durably (the
/// connection's `synchronous_commit` is `on`, whatever the server's default).
const FLUSH: &str = "SELECT pg_logical_emit_message(true, 'opsgraph.sync', '')";

/// The syncer's connection's `application_name` (`pg_stat_activity` shows which it is).
pub const APPLICATION: &str = "opsgraph syncer";

/// One database's syncer in this process.
pub(crate) struct PgSyncer {
    /// `None` once a sync failed: never connected again.
    client: Mutex<Option<Client>>,
    /// A sync failed (read without waiting for a sync under way).
    failed: AtomicBool,
    /// Syncs begun on the connection (numbered from 1).
    begun: AtomicU64,
    /// The last sync that returned `Ok`, by its number.
    done: AtomicU64,
    url: String,
}

impl PgSyncer {
    /// A syncer with its own connection to `url`.
    pub(crate) fn connect(url: &str) -> Result<PgSyncer, Error> {
        let failed = |e: postgres::Error| Error::PgOpen { url: redact(url), reason: pg_message(&e) };
        let mut client = Client::connect(url, NoTls).map_err(failed)?;
        client
            .batch_execute(&format!("SET synchronous_commit = on; SET application_name = '{APPLICATION}'"))
            .map_err(failed)?;
        Ok(PgSyncer {
            client: Mutex::new(Some(client)),
            failed: AtomicBool::new(false),
            begun: AtomicU64::new(0),
            done: AtomicU64::new(0),
            url: redact(url),
        })
    }

    /// Whether no sync failed yet.
    pub(crate) fn healthy(&self) -> bool {
        !self.failed.load(Ordering::Acquire)
    }
}

impl Syncer for PgSyncer {
    fn sync(&self) -> Result<(), Error> {
        // A sync begun after this call (its number above `asked`) that returned covers it.
        let asked = self.begun.load(Ordering::Acquire);
        let mut client = lock(&self.client);
        if self.done.load(Ordering::Acquire) > asked {
            return Ok(());
        }
        let Some(c) = client.as_mut() else {
            return Err(Error::NotDurable { reason: format!("{}: an earlier sync failed", self.url) });
        };
        let n = self.begun.fetch_add(1, Ordering::AcqRel) + 1;
        match c.batch_execute(FLUSH) {
            Ok(()) => {
                self.done.store(n, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                *client = None;
                self.failed.store(true, Ordering::Release);
                Err(Error::NotDurable { reason: format!("{}: {}", self.url, pg_message(&e)) })
            }
        }
    }
}

/// The syncer of each database this process connected to, by URL: alive while a store or a
/// committer holds it (its connection closes with the last).
static SYNCERS: LazyLock<Mutex<HashMap<String, Weak<PgSyncer>>>> = LazyLock::new(Default::default);

/// The syncer of `url`'s database in this process: the one alive, or a new one when none is or
/// it failed. `None` when its connection cannot be made (commits stay durable when made).
pub(crate) fn syncer_of(url: &str) -> Option<Arc<PgSyncer>> {
    let mut all = lock(&SYNCERS);
    all.retain(|_, s| s.strong_count() > 0);
    if let Some(s) = all.get(url).and_then(Weak::upgrade).filter(|s| s.healthy()) {
        return Some(s);
    }
    let s = Arc::new(PgSyncer::connect(url).ok()?);
    all.insert(url.to_string(), Arc::downgrade(&s));
    Some(s)
}
