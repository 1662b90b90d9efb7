//! Named fail points at the runtime's persist-then-act boundaries, for the crash sweep
//! (`tests/it/crash.rs`, docs/reliability.md). When the environment variable
//! `OPSGRAPH_FAIL_POINT` names one, the process kills itself with `SIGKILL` the first time it
//! gets there: no destructor, no flush, as a power cut or the OOM killer would. Unset, a fail
//! point costs one load of a `OnceLock`.

use std::sync::OnceLock;

/// Every fail point, in the order an operation meets them.
pub const FAIL_POINTS: &[&str] = &[
    // The operation and its plan are committed; no job has started.
    "operation.created",
    // The operation's lease is taken (a commit not synced on its own, as the creation of an
    // operation the CLI drives at once); nothing of the drive is committed yet.
    "lease.taken",
    // Attempts are recorded `running`; their processes do not exist yet.
    "attempts.recorded",
    // The committer's thread is about to sync commits the driver made (not durable yet); what
    // they guard has not started.
    "commit.unsynced",
    // A job's process exited; its result is not committed (recovery must check evidence).
    "job.exited",
    // A produced artifact is in the blob store; its record is not committed.
    "artifact.stored",
    // A state transition is committed; what follows it (the next step) has not happened.
    "transition.committed",
    // After a restart: orphaned attempts' evidence was checked; the outcome is not committed.
    "recovery.checked",
];

/// Kills the process here if `OPSGRAPH_FAIL_POINT` names `name`.
pub fn hit(name: &'static str) {
    static WANTED: OnceLock<Option<String>> = OnceLock::new();
    debug_assert!(FAIL_POINTS.contains(&name), "unknown fail point {name}");
    let wanted = WANTED.get_or_init(|| std::env::var("OPSGRAPH_FAIL_POINT").ok().filter(|v| !v.is_empty()));
    if wanted.as_deref() == Some(name) {
        eprintln!("fail point {name}: SIGKILL");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        std::process::abort();
    }
}
