//! Several replicas on one store: each drives the operations whose lease it holds, and a scanner
//! adopts running operations whose lease expired (their replica died or lost the store).

use std::time::Duration;

use crate::AppState;

impl AppState {
    /// This replica's id (`OPSGRAPH_REPLICA_ID`, else `<hostname>-<pid>`) and lease TTL.
    pub fn lease_config(&self) -> &opsgraph_runtime::lease::LeaseConfig {
        self.0.keeper.config()
    }

    /// Every half TTL, wakes a driver for each top-level running operation nobody holds a live
    /// lease on. The driver takes the lease (one replica wins; the others' attempts are refused)
    /// and resumes with crash recovery. Runs until the process ends.
    pub fn start_scanner(&self) {
        let state = self.clone();
        let period = (self.lease_config().ttl / 2).max(Duration::from_millis(10));
        let spawned = std::thread::Builder::new().name("lease scanner".into()).spawn(move || {
            let mut store = None;
            loop {
                std::thread::sleep(period);
                if state.0.closing.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                if store.is_none() {
                    store = state.store().map_err(|e| tracing::warn!(error = %e, "scanner: no store")).ok();
                }
                let Some(s) = store.as_ref() else { continue };
                match s.adoptable() {
                    Ok(ids) => {
                        for id in ids {
                            tracing::info!(operation = %id, replica = %state.lease_config().holder, "adopting an operation whose lease expired");
                            state.wake(&id);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "scanner: could not list operations to adopt");
                        store = None;
                    }
                }
            }
        });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "failed to start the lease scanner");
        }
    }

    /// Rings this replica's agent bell for the agent tasks the other replicas write, when the
    /// store can tell (PostgreSQL's notifications, `Store::wait_for_agent_tasks`): a task another
    /// replica queued wakes the claims parked here at once, and a report another replica took
    /// wakes the worker here that waits for it, instead of each looking at the store every 250
    /// and 100 ms. Where the store cannot tell, the thread ends at once and the waiters poll.
    /// Runs until the process ends; a lost connection is opened again after a pause (meanwhile
    /// the waiters poll).
    pub fn start_agent_listener(&self) {
        let state = self.clone();
        let spawned = std::thread::Builder::new().name("agent listener".into()).spawn(move || {
            let mut store = None;
            loop {
                if state.0.closing.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                if store.is_none() {
                    store = state.store().map_err(|e| tracing::warn!(error = %e, "agent listener: no store")).ok();
                    if store.is_none() {
                        std::thread::sleep(Duration::from_secs(1));
                        continue;
                    }
                }
                let Some(s) = store.as_mut() else { continue };
                match s.wait_for_agent_tasks(Duration::from_secs(1)) {
                    Ok(None) => return,
                    Ok(Some(tasks)) => {
                        let bell = &state.0.agents.bell;
                        if tasks.iter().any(|(_, queued)| *queued) {
                            bell.ring_work();
                        }
                        for (id, _) in &tasks {
                            bell.ring_task(id);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "agent listener: the store's notifications stopped");
                        store = None;
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            }
        });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "failed to start the agent listener");
        }
    }
}
