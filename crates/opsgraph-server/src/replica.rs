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
}
