//! Continuous verification ([I]): `opsgraph serve` verifies each resource whose type declares a
//! verification when it is due (`opsgraph_runtime::schedule`), a few at a time, each under the
//! resource's verification lease so that replicas sharing a store never verify one resource at
//! once; and `POST /api/v1/verifications` verifies one when a person asks.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::error::ApiError;
use crate::handlers::{Ctx, Reply};
use crate::AppState;

/// How long a verification's lease lasts. It is let go when the verification ends; it only
/// expires when its replica died mid-way, so it outlasts the slowest verification (each check
/// tries at most twice, within its timeout).
const VERIFY_LEASE_MS: i64 = 15 * 60 * 1000;

/// How the scheduler runs.
#[derive(Debug, Clone, Copy)]
pub struct VerifierConfig {
    /// Between two looks for due resources.
    pub tick: Duration,
    /// Verifications running at once on this replica.
    pub workers: usize,
}

impl VerifierConfig {
    /// `OPSGRAPH_VERIFY_TICK_MS` (default 1000) and `OPSGRAPH_VERIFY_WORKERS` (default 4).
    pub fn from_env() -> VerifierConfig {
        let var = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
        VerifierConfig {
            tick: Duration::from_millis(var("OPSGRAPH_VERIFY_TICK_MS", 1000).max(10)),
            workers: var("OPSGRAPH_VERIFY_WORKERS", 4).clamp(1, 64) as usize,
        }
    }
}

impl AppState {
    /// Starts the verification scheduler; it runs until the server closes.
    pub fn start_verifier(&self, config: VerifierConfig) {
        let state = self.clone();
        let running: Arc<Mutex<HashSet<String>>> = Arc::default();
        let spawned = std::thread::Builder::new().name("verifier".into()).spawn(move || loop {
            std::thread::sleep(config.tick);
            if state.0.closing.load(Ordering::SeqCst) {
                return;
            }
            let due = match state.runtime() {
                Ok(rt) => rt.due_verifications(opsgraph_store::parse_rfc3339(&opsgraph_store::now()).unwrap_or(0)),
                Err(e) => {
                    tracing::warn!(error = %e, "verifier: no store");
                    continue;
                }
            };
            let due = match due {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "verifier: could not list resources");
                    continue;
                }
            };
            for id in due {
                let mut busy = running.lock().unwrap_or_else(|e| e.into_inner());
                if busy.len() >= config.workers {
                    break;
                }
                if !busy.insert(id.clone()) {
                    continue;
                }
                drop(busy);
                let (state, running) = (state.clone(), running.clone());
                let worker = std::thread::Builder::new().name("verify".into()).spawn(move || {
                    state.verify_one(&id);
                    running.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                });
                if let Err(e) = worker {
                    tracing::error!(error = %e, "verifier: could not start a worker");
                }
            }
        });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "failed to start the verifier");
        }
    }

    fn verify_one(&self, id: &str) {
        let holder = self.lease_config().holder.clone();
        let result = self
            .runtime()
            .map_err(opsgraph_runtime::Error::from)
            .and_then(|mut rt| rt.verify_leased(id, &holder, VERIFY_LEASE_MS));
        if let Ok(Some(report)) = &result {
            self.wake_repair(report);
        }
        match result {
            Ok(Some(report)) if report.before != Some(report.status) => {
                tracing::info!(resource = %id, status = report.status.as_str(), summary = %report.summary(), "resource verified: status changed")
            }
            Ok(Some(report)) => tracing::debug!(resource = %id, summary = %report.summary(), "resource verified"),
            Ok(None) => {}
            // Busy (an operation changes it), rolled back, nothing to verify against: the
            // scheduler asks again next time it is due.
            Err(e) => tracing::debug!(resource = %id, error = %e, "resource not verified"),
        }
    }
}

impl AppState {
    /// A repair operation a verification created and started is driven like any other.
    fn wake_repair(&self, report: &opsgraph_runtime::VerifyReport) {
        if let Some(opsgraph_runtime::Repair::Created { operation, state }) = &report.repair {
            if state == "running" {
                self.wake(operation);
            }
        }
    }
}

/// `POST /api/v1/verifications`: verifies one resource now, as the caller.
pub(crate) fn verify(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let body: opsgraph_api::VerifyRequest = ctx.json(false)?;
    if ctx.store.resource(&body.resource)?.is_none() {
        return Err(ApiError::not_found("no_resource", format!("no resource `{}`", body.resource)));
    }
    let mut rt = ctx.runtime()?;
    let report = rt.verify(&body.resource, &actor)?;
    ctx.state.wake_repair(&report);
    Reply::ok(json!(report))
}
