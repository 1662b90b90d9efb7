//! Leases: at most one driver per operation across processes and replicas.
//!
//! Whoever drives an operation holds its lease (`opsgraph_store::Lease`): a [`Keeper`] acquires
//! it, a thread of the keeper renews every lease it holds at a third of the TTL (the first time a
//! third of the TTL after it started) on a connection of its own, opened at its first renewal, and while a lease is held every commit of the runtime carries
//! `Write::Fence { operation, holder, token }`, checked in the same transaction. A holder whose
//! lease expired and was taken over is refused by the store (`Error::Fenced`) and stops: the
//! driver also stops at its next step when the keeper could not renew in time (lost), cancelling
//! its attempts in flight. The new holder resumes with crash recovery: attempts left `running`
//! are checked by their evidence before anything runs again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use opsgraph_core::model::OperationState;
use opsgraph_store::{Lease, Store};
use serde_json::json;

use crate::timeline::{entry, Progress};
use crate::{Error, Runtime};

/// Opens a store connection (the keeper's own, for renewals).
pub type OpenStore = dyn Fn() -> Result<Box<dyn Store>, opsgraph_store::Error> + Send + Sync;

/// Who this process is and how long its leases last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// `OPSGRAPH_REPLICA_ID`, else `<hostname>-<pid>`.
    pub holder: String,
    /// `OPSGRAPH_LEASE_TTL_MS`, else 10 s.
    pub ttl: Duration,
}

impl LeaseConfig {
    pub fn from_env() -> LeaseConfig {
        let holder = std::env::var("OPSGRAPH_REPLICA_ID")
            .ok()
            .filter(|h| !h.trim().is_empty())
            .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
        let ttl_ms = std::env::var("OPSGRAPH_LEASE_TTL_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|ms| *ms >= 30)
            .unwrap_or(opsgraph_store::DEFAULT_LEASE_TTL_MS as u64);
        LeaseConfig { holder, ttl: Duration::from_millis(ttl_ms) }
    }

    pub fn ttl_ms(&self) -> i64 {
        self.ttl.as_millis().min(i64::MAX as u128) as i64
    }
}

/// A lease this process holds, as its driver sees it.
#[derive(Debug)]
pub struct Held {
    pub lease: Lease,
    /// Set by the keeper when a renewal was refused (another holder took over) or none succeeded
    /// before the lease would have expired: the driver stops.
    lost: AtomicBool,
    /// Until when this process may assume the lease is its own (a monotonic clock: the last
    /// successful renewal's start plus the TTL).
    valid_until: Mutex<Instant>,
    /// The attempts in flight under this lease: cancelled when a commit is refused by the fence.
    attempts: Mutex<HashMap<String, opsgraph_exec::Cancel>>,
}

impl Held {
    /// An attempt started under this lease; `done` once its result arrived.
    pub(crate) fn watch(&self, instance: &str, cancel: Option<&opsgraph_exec::Cancel>) {
        let mut attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        match cancel {
            Some(c) => attempts.insert(instance.to_string(), c.clone()),
            None => attempts.remove(instance),
        };
    }

    /// The store refused a write made under this lease: it is lost, and the attempts in flight
    /// stop (the new holder checks their evidence).
    pub(crate) fn fenced(&self) {
        self.lost.store(true, Ordering::SeqCst);
        for (_, c) in self.attempts.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            c.cancel();
        }
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
            || Instant::now() >= *self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Inner {
    config: LeaseConfig,
    open: Box<OpenStore>,
    held: Mutex<HashMap<String, Arc<Held>>>,
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Whether `holder` is a default replica id (`<hostname>-<pid>`) of this host whose process no
/// longer runs (absent, or a zombie nobody reaped yet).
fn gone_from_this_host(holder: &str) -> bool {
    let Some(pid) = holder.strip_prefix(&format!("{}-", hostname())).and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    if pid == std::process::id() {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        // No such process, if /proc can tell at all.
        Err(_) => std::path::Path::new("/proc/self/stat").exists(),
    }
}

/// This process's leases and the thread that renews them (started with the first lease; it ends
/// when the keeper is dropped).
pub struct Keeper {
    inner: Arc<Inner>,
    renewer: Mutex<bool>,
}

impl Keeper {
    pub fn new(config: LeaseConfig, open: Box<OpenStore>) -> Keeper {
        Keeper { inner: Arc::new(Inner { config, open, held: Mutex::new(HashMap::new()) }), renewer: Mutex::new(false) }
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.inner.config
    }

    /// Takes the operation's lease through `store` (the caller's connection). Refused with
    /// `LeaseHeld` while another holder's lease is live. Returns the lease and, when it took the
    /// operation over from another holder, that holder.
    pub fn acquire(&self, store: &mut dyn Store, operation: &str) -> Result<(Arc<Held>, Option<Lease>), Error> {
        let before = store.lease(operation)?;
        let started = Instant::now();
        let (holder, ttl) = (&self.inner.config.holder, self.inner.config.ttl_ms());
        let lease = match store.acquire_lease(operation, holder, ttl) {
            // A holder of this host whose process is gone (a command or server killed while it
            // drove) cannot renew: its lease is let go now rather than at its expiry. Were the
            // judgement wrong, the fence would still refuse that holder's writes.
            Err(opsgraph_store::Error::LeaseHeld { holder: other, token, .. }) if gone_from_this_host(&other) => {
                let dead =
                    Lease { operation: operation.to_string(), holder: other, token, expires_in_ms: 0, released: false };
                store.release_lease(&dead)?;
                store.acquire_lease(operation, holder, ttl)?
            }
            result => result?,
        };
        let previous = before.filter(|b| b.holder != lease.holder || b.token != lease.token);
        let held = Arc::new(Held {
            lease,
            lost: AtomicBool::new(false),
            valid_until: Mutex::new(started + self.inner.config.ttl),
            attempts: Mutex::new(HashMap::new()),
        });
        self.inner.held.lock().unwrap_or_else(|e| e.into_inner()).insert(operation.to_string(), Arc::clone(&held));
        self.start_renewer();
        Ok((held, previous))
    }

    /// Lets the lease go (through the caller's connection) and stops renewing it.
    pub fn release(&self, store: &mut dyn Store, held: &Held) {
        let mut map = self.inner.held.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(&held.lease.operation).is_some_and(|h| h.lease.token == held.lease.token) {
            map.remove(&held.lease.operation);
        }
        drop(map);
        if let Err(e) = store.release_lease(&held.lease) {
            // It expires on its own within the TTL.
            eprintln!("opsgraph: could not release the lease on {}: {e}", held.lease.operation);
        }
    }

    /// The operations whose lease this process holds now.
    pub fn held(&self) -> Vec<String> {
        self.inner.held.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect()
    }

    fn start_renewer(&self) {
        let mut started = self.renewer.lock().unwrap_or_else(|e| e.into_inner());
        if *started {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let spawned = std::thread::Builder::new().name("lease renewer".into()).spawn(move || renew_loop(weak));
        *started = spawned.is_ok();
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.inner.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Renews every held lease at a third of the TTL, reconnecting after an error, until the keeper
/// is gone. It waits a third of the TTL before its first round too: a lease is taken with its
/// whole TTL, so a renewal at once would extend nothing that needs it and would cost a connection
/// of its own (SQLite reading the whole schema), a commit and its `fsync`s beside the first job of
/// a cold `apply`. A lease taken while it waits is renewed within a third of the TTL, as every
/// lease is after each renewal: two thirds of the TTL before it would expire. A command whose
/// drive ends within that third never opens the connection.
fn renew_loop(weak: Weak<Inner>) {
    let mut store: Option<Box<dyn Store>> = None;
    loop {
        let Some(period) = weak.upgrade().map(|inner| inner.config.ttl / 3) else { return };
        std::thread::sleep(period);
        let Some(inner) = weak.upgrade() else { return };
        let held: Vec<Arc<Held>> = inner.held.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        for h in held {
            if store.is_none() {
                store = (inner.open)().ok();
            }
            let Some(s) = store.as_mut() else { break };
            let started = Instant::now();
            match s.renew_lease(&h.lease, inner.config.ttl_ms()) {
                Ok(_) => *h.valid_until.lock().unwrap_or_else(|e| e.into_inner()) = started + inner.config.ttl,
                Err(opsgraph_store::Error::Fenced { .. }) => {
                    h.lost.store(true, Ordering::SeqCst);
                    let mut map = inner.held.lock().unwrap_or_else(|e| e.into_inner());
                    if map.get(&h.lease.operation).is_some_and(|m| m.lease.token == h.lease.token) {
                        map.remove(&h.lease.operation);
                    }
                }
                // The connection broke: a new one next time. The lease counts as lost once
                // `valid_until` passes without a renewal (`Held::is_lost`).
                Err(_) => store = None,
            }
        }
    }
}

impl Runtime {
    /// Drives an operation under its lease: acquired first (refused with `LeaseHeld` while
    /// another process drives it), every commit fenced with its token, released when the drive
    /// stops. Taking over an expired lease of another holder is noted in the timeline, and the
    /// drive starts with crash recovery as after any restart.
    pub fn drive_leased(&mut self, id: &str, keeper: &Keeper, progress: Progress<'_>) -> Result<OperationState, Error> {
        let (held, previous) = keeper.acquire(&mut *self.store, id)?;
        crate::failpoint::hit("lease.taken");
        self.lease = Some(Arc::clone(&held));
        let result = (|| {
            // A takeover: the last holder was another one and did not let the lease go.
            if let Some(p) = previous.filter(|p| p.holder != held.lease.holder && !p.released) {
                let how = if p.expires_in_ms <= 0 {
                    format!("its lease {} expired {} ms ago", p.token, -p.expires_in_ms)
                } else {
                    format!("its lease {} was live but its process on this host is gone", p.token)
                };
                let reason = format!("{} took the operation over from {} ({how})", held.lease.holder, p.holder);
                let note = entry(
                    id,
                    &self.actor,
                    "lease_adopted",
                    reason,
                    json!({"holder": held.lease.holder, "token": held.lease.token, "previous": p.holder, "previous_token": p.token}),
                );
                self.commit(&[opsgraph_store::Write::Timeline(note.clone())])?;
                progress(&note);
            }
            self.drive(id, progress)
        })();
        // Every commit of the drive is durable before its lease goes and before the caller
        // reports how it stopped: also an operation created `Durable::ByItsDrive` whose drive
        // stopped before it made a commit durable (`Committer::settle`).
        let result = match (result, self.committer.settle()) {
            (Ok(_), Err(e)) => Err(Error::Store(e)),
            (result, _) => result,
        };
        self.lease = None;
        keeper.release(&mut *self.store, &held);
        if let Ok(OperationState::Completed) = &result {
            self.verify_completed(id);
        }
        result
    }

    /// The lease this runtime drives under was lost: stop.
    pub(crate) fn lease_lost(&self) -> Option<Error> {
        let held = self.lease.as_ref()?;
        held.is_lost().then(|| Error::LeaseLost {
            operation: held.lease.operation.clone(),
            holder: held.lease.holder.clone(),
            token: held.lease.token,
        })
    }
}

impl Runtime {
    /// Where logs, run directories and artifact blobs are kept.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }
}

#[cfg(test)]
mod tests {
    use super::{gone_from_this_host, hostname};

    #[test]
    fn a_holder_is_gone_only_when_it_is_of_this_host_and_its_process_ended() {
        let host = hostname();
        let mut live = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let mut ended = std::process::Command::new("true").spawn().unwrap();
        ended.wait().unwrap();
        assert!(gone_from_this_host(&format!("{host}-{}", ended.id())), "a reaped process");
        assert!(!gone_from_this_host(&format!("{host}-{}", live.id())), "a running process");
        assert!(!gone_from_this_host(&format!("{host}-{}", std::process::id())), "this process");
        assert!(!gone_from_this_host(&format!("another-{host}-{}", ended.id())), "another host");
        assert!(!gone_from_this_host("replica-a"), "an id that is not host-pid");
        live.kill().unwrap();
        // Killed and not yet reaped: a zombie, gone all the same.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(gone_from_this_host(&format!("{host}-{}", live.id())), "a zombie");
        live.wait().unwrap();
    }
}
