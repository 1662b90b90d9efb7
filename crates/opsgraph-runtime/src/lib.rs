//! The durable operation runtime: it takes a plan revision, records an operation, and walks it
//! through the lifecycle (`opsgraph_core::plan::lifecycle`) by running job instances on executors,
//! deciding success by evidence, and storing every step before acting on it.
//!
//! Guarantees:
//! - Every transition and its timeline entry are one transaction, committed before the side
//!   effect they guard: a job is recorded `running` (attempt N) before its process starts —
//!   durably: the commit recording attempts is synced by the committer's thread while the driver
//!   goes on deciding, and a worker starts the attempt once that sync covers it (`committer.rs`).
//! - Results that arrive together are committed together, and with the attempts they let start
//!   (group commit: one commit per job on a chain). A result is committed before anything it
//!   unblocks runs; a crash before that commit is what recovery (below) is for.
//! - A job succeeds only when every evidence check of its output contract passes.
//! - After a crash, a job recorded `running` without an outcome is checked by its evidence first:
//!   pass -> `recovered`; fail -> retried when its retry policy and idempotency key allow; else the
//!   operation fails with "outcome unknown" and waits for a person.
//!   Before the check, the attempt's leftover processes on this host are stopped; a person's
//!   `retry` of such a job goes through the same check (`recover.rs`).
//! - Control from other processes (pause, cancel, gate answers) goes through the store; the
//!   driving loop re-reads the operation between steps when the store's data version shows that
//!   another writer committed, and a stale writer is refused by the operation's version.

pub mod agent;
pub mod ai;
mod analyze;
mod attempt;
pub mod audit;
mod between;
mod committer;
#[cfg(test)]
mod committer_tests;
mod control;
mod create;
mod decide;
mod drift;
mod drive;
mod execute;
pub mod failpoint;
#[cfg(test)]
mod fixtures;
mod intervene;
mod jobs;
pub mod lease;
mod live;
pub mod manage;
mod masking;
mod outcome;
mod patch;
mod recover;
mod report;
mod rollback;
mod rollout;
mod schedule;
mod secrets;
mod subop;
mod task;
mod timeline;
mod transition;
mod verify;
mod waiting;
mod workers;

use std::path::PathBuf;

use opsgraph_core::model::{Intent, Resource};
use opsgraph_core::pack::Pack;
use opsgraph_store::{Store, Write};

pub use agent::screen::{Refusal, Screen};
pub use agent::{AgentJob, AgentReport, Agents, Bell, LogStream};
pub use analyze::{Diagnosis, ANALYZER_AUTHOR};
pub use committer::Durable;
pub use control::{approves, GateAnswer};
pub use drift::PlanWorld;
pub use intervene::Verified;
/// Idempotency keys are rendered from `{placeholder}`s (public for the fuzz target `templating`).
pub use jobs::render_key;
pub use live::{live_log, LiveText, LIVE_KEEP};
pub use patch::{ApprovalReason, PatchRules, Proposal, SafeChanges};
pub use report::{CheckRun, Repair, VerifyReport};
pub use schedule::{is_due, lease_key};
pub use secrets::Rotation;
pub use timeline::Progress;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("store failed")]
    Store(#[from] opsgraph_store::Error),
    #[error(transparent)]
    Illegal(#[from] opsgraph_core::plan::lifecycle::IllegalTransition),
    /// A job record asked to make a move its lifecycle does not allow.
    #[error(transparent)]
    IllegalJob(#[from] opsgraph_core::plan::job_lifecycle::IllegalJobTransition),
    #[error("no operation `{0}`")]
    NoOperation(String),
    #[error("no resource `{0}`")]
    NoResource(String),
    #[error("the plan is blocked: {0}")]
    Blocked(String),
    #[error("resource `{resource}` is being changed by operation `{operation}` ({state}); wait for it or cancel it")]
    Busy { resource: String, operation: String, state: String },
    #[error("no gate `{gate}` in operation `{operation}`")]
    NoGate { operation: String, gate: String },
    #[error("gate `{gate}` was already answered `{answer}` by {by} at {at}")]
    AlreadyAnswered { gate: String, answer: String, by: String, at: String },
    /// A gate that opens after job instances (a rollout's canary) answered before they finished.
    #[error("gate `{gate}` opens once {waiting} finished; it cannot be answered before (only cancelled)")]
    GateNotOpen { gate: String, waiting: String },
    #[error("role `{role}` may not answer gate `{gate}`; it needs one of: {required}")]
    Forbidden { gate: String, role: String, required: String },
    #[error("`{option}` is not an option of gate `{gate}`; options: {options}")]
    NoOption { gate: String, option: String, options: String },
    #[error("{0}")]
    Unsupported(String),
    /// A value given at a missing-input gate fails its parameter's declaration (the intent's
    /// check, `opsgraph_core::plan::check_parameter`): `code` is the plan error's (P003, P010).
    #[error("gate `{gate}`: {code}: {message}")]
    BadValue { gate: String, code: &'static str, message: String },
    /// Four eyes: the creator of an operation (or the author of a patch) may not approve it.
    #[error("{actor} {why} and may not approve gate `{gate}`")]
    SelfApproval { actor: String, gate: String, why: String },
    #[error("plan revision {0} is not stored or not readable")]
    Plan(String),
    #[error("the pack `{0}` of this operation is not loaded")]
    NoPack(String),
    #[error("the pack {pack} changed since the plan was made: planned with {planned}, loaded {loaded}")]
    PackChanged { pack: String, planned: String, loaded: String },
    #[error("the patch is refused:\n{0}")]
    PatchRefused(String),
    #[error("secrets: {0}")]
    Secrets(String),
    /// The AI analyzer: not configured (`ai_not_configured`), its endpoint not reachable
    /// (`ai_unavailable`), or its answer refused (`ai_answer_refused`, also on the timeline).
    #[error("{message}")]
    Ai { code: &'static str, message: String },
    /// The keeper could not renew this process's lease in time, or another replica took the
    /// operation over: this process stops driving it.
    #[error("lost the lease on operation `{operation}` ({holder}, token {token}); another replica drives it now")]
    LeaseLost { operation: String, holder: String, token: i64 },
    #[error("failed to prepare the data directory {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// What the runtime needs to run operations.
pub struct Runtime {
    pub(crate) store: Box<dyn Store>,
    pub(crate) packs: Vec<Pack>,
    pub(crate) resources: Vec<Resource>,
    pub(crate) data_dir: PathBuf,
    /// How many jobs of one operation run at once (8 unless set). Each running job occupies one
    /// worker thread of the driver; more than the machine can spawn in parallel only queues.
    pub concurrency: usize,
    /// Who the runtime acts as in the timeline.
    pub actor: String,
    /// Bumped by every commit of this runtime that changes an operation row: with the store's
    /// `data_version` (other writers), it tells the driver when its copy of the row is current.
    pub(crate) operation_writes: u64,
    /// The master keyring, loaded when a secret is first sealed or opened.
    pub(crate) keyring: std::sync::OnceLock<Result<std::sync::Arc<opsgraph_secrets::Keyring>, String>>,
    /// Writes that join the transaction of the next change made on a person's behalf.
    pub(crate) attached: Vec<Write>,
    /// Who may change a running operation's plan without whom (four eyes, `config.yaml`).
    pub rules: patch::PatchRules,
    /// How jobs for agent-served resources reach their agents; without it they fail, saying so.
    pub agents: Option<std::sync::Arc<agent::Agents>>,
    /// Where artifact contents and job logs are kept: the data directory's files unless the
    /// caller opened another (`opsgraph`'s `storage::blobs`).
    pub blobs: std::sync::Arc<dyn opsgraph_store::BlobStore>,
    /// The lease the operation being driven is held under: every commit is fenced with it.
    pub(crate) lease: Option<std::sync::Arc<lease::Held>>,
    /// Makes the commits that record attempts durable beside the driver (`committer.rs`).
    pub(crate) committer: committer::Committer,
    /// Providers and policies plans are made in, for repairs of drifted resources ([I]); without
    /// it drift is only recorded.
    pub plan_world: Option<PlanWorld>,
    /// How running attempts' live logs reach the replicas that do not drive them, made from
    /// `blobs` when first needed (`live/share.rs`); `None` inside when they need not.
    pub(crate) live_sharing: std::sync::OnceLock<Option<std::sync::Arc<live::share::Sharing>>>,
    /// This runtime wrote a plaintext file into an attempt's private directory
    /// (`runs/<op>/secrets/<job>`, [`Runtime::private_file`]): until it has, the driver has no
    /// such directory to remove after a result (a `statx` and paths a job, issue [N] 5).
    pub(crate) private_made: std::sync::atomic::AtomicBool,
    /// `OPSGRAPH_LAB_DIR` of every job: `<data_dir>/lab`, made into text once.
    pub(crate) lab_dir: std::sync::OnceLock<String>,
    /// How often a driver asked the store for its data version (the tests' witness of
    /// `Drive::row_trusted`).
    #[cfg(test)]
    pub(crate) version_reads: u64,
    /// How often a driver's wait for results ended with none (each is a turn of its own).
    #[cfg(test)]
    pub(crate) quiet_waits: u64,
    /// How often a driver removed an attempt's private directory after its result.
    #[cfg(test)]
    pub(crate) private_removals: u64,
    /// How many attempts a driver prepared (environment, task) as it started them.
    #[cfg(test)]
    pub(crate) prepared: u64,
}

impl Runtime {
    /// `resources` is the inventory executors reach (access) and that completed operations
    /// update; `data_dir` holds logs, run directories and artifact blobs.
    pub fn new(store: Box<dyn Store>, packs: Vec<Pack>, resources: Vec<Resource>, data_dir: PathBuf) -> Runtime {
        Runtime {
            committer: committer::Committer::new(store.syncer()),
            store,
            packs,
            resources,
            blobs: std::sync::Arc::new(opsgraph_store::FsBlobStore::new(&data_dir)),
            data_dir,
            concurrency: 8,
            actor: "opsgraph".to_string(),
            operation_writes: 0,
            keyring: std::sync::OnceLock::new(),
            attached: Vec::new(),
            rules: patch::PatchRules::default(),
            agents: None,
            lease: None,
            plan_world: None,
            live_sharing: std::sync::OnceLock::new(),
            private_made: std::sync::atomic::AtomicBool::new(false),
            lab_dir: std::sync::OnceLock::new(),
            #[cfg(test)]
            version_reads: 0,
            #[cfg(test)]
            quiet_waits: 0,
            #[cfg(test)]
            private_removals: 0,
            #[cfg(test)]
            prepared: 0,
        }
    }

    /// What an attempt's live log is shared as, when this runtime's blob store shares them.
    pub(crate) fn share_live(&self, op: &str, job: &str, attempt: u32) -> Option<live::share::ShareAs> {
        let sharing = self.live_sharing.get_or_init(|| live::share::Sharing::new(self.blobs.clone())).clone()?;
        Some(live::share::ShareAs { sharing, key: opsgraph_store::LogKey::new(op, job, attempt) })
    }

    /// Sets how many jobs of one operation run at once (at least one).
    pub fn set_concurrency(&mut self, n: usize) {
        self.concurrency = n.max(1);
    }

    /// Every commit of the runtime goes through here, so the driver knows when it changed an
    /// operation row itself.
    pub(crate) fn commit(&mut self, writes: &[opsgraph_store::Write]) -> Result<(), opsgraph_store::Error> {
        self.commit_as(writes, Durable::Now).map(|_| ())
    }

    /// [`Runtime::commit`], made durable by the committer unless `durable` is `Now` (and the
    /// store can defer): the commit's number, which the committer's durable mark covers once it
    /// is. Refused once a deferred commit could not be made durable (`committer.rs`, rule 4).
    pub(crate) fn commit_as(
        &mut self,
        writes: &[opsgraph_store::Write],
        durable: Durable,
    ) -> Result<u64, opsgraph_store::Error> {
        use opsgraph_store::Write;
        self.committer.check()?;
        let deferred = durable != Durable::Now && self.committer.defers();
        if writes
            .iter()
            .any(|w| matches!(w, Write::Transition { .. } | Write::CreateOperation { .. } | Write::SetPlan { .. }))
        {
            self.operation_writes += 1;
        }
        match &self.lease {
            // Under a lease every write is fenced with its token, in the same transaction.
            Some(held) => {
                let mut fenced = Vec::with_capacity(writes.len() + 1);
                fenced.push(held.lease.fence());
                fenced.extend_from_slice(writes);
                let result = if deferred { self.store.commit_deferred(&fenced) } else { self.store.commit(&fenced) };
                if let Err(opsgraph_store::Error::Fenced { .. }) = &result {
                    held.fenced();
                }
                result
            }
            None if deferred => self.store.commit_deferred(writes),
            None => self.store.commit(writes),
        }?;
        self.committer.submit(durable)
    }

    /// Adds `writes` (an audit record, an idempotency record) to the transaction of the next
    /// change a person asks for: `create`, `create_as`, `answer_gate`, `pause`, `resume`,
    /// `cancel`, `retry`. They land with that change or not at all: a refused request drops them.
    pub fn attach(&mut self, writes: Vec<Write>) {
        self.attached.extend(writes);
    }

    pub(crate) fn take_attached(&mut self) -> Vec<Write> {
        std::mem::take(&mut self.attached)
    }

    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// The resource an intent creates or changes: `<type>/<name>`.
    pub fn target_resource(intent: &Intent) -> Option<String> {
        intent.resource_id()
    }
}

/// A short, sortable operation id.
pub fn new_operation_id() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let ms = now.as_millis() as u64;
    let salt = (now.subsec_nanos() ^ std::process::id().rotate_left(16)) % 46_656;
    format!("op-{}{}", base36(ms, 9), base36(salt as u64, 3))
}

fn base36(mut n: u64, width: usize) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = vec![b'0'; width];
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(n % 36) as usize];
        n /= 36;
    }
    String::from_utf8(out).unwrap_or_default()
}
