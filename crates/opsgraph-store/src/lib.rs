//! Durable storage of operations, their timelines, jobs, evidence, gates, artifacts and resources.
//!
//! Every change is a [`Write`]; [`Store::commit`] applies a batch of writes in one transaction.
//! That is how a transition and its timeline event land together, and how the runtime's single
//! writer group-commits many transitions with one fsync. Reads are plain queries.
//!
//! This crate is backend-neutral: it holds the trait, the records, [`Write`] and [`Error`], and
//! depends on no database client. The backends are crates of their own: `opsgraph-store-sqlite`
//! (WAL, `synchronous=FULL` by default; the embedded default) and `opsgraph-store-pg` (issue [F],
//! several replicas on one PostgreSQL). Both run the same conformance suite
//! (`tests/conformance/`, through [`testing::TestDb`] and [`conformance!`]). The binary's
//! `storage::open` picks one by URL.
//!
//! Leases ([`Lease`]): whoever drives an operation holds its lease; every commit it makes carries
//! a [`Write::Fence`] with the lease's token, checked in the same transaction, so a holder whose
//! lease was taken over is refused ([`Error::Fenced`]) instead of writing over the new holder.

pub mod agent;
pub mod blob;
pub mod group;
pub mod idle;
mod lease;
pub mod schema;
pub mod testing;
mod written;

use std::collections::BTreeMap;

use opsgraph_core::model::OperationState;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use agent::{now_ms, AgentClaim, AgentLogLine, AgentTask, AgentTaskState, AgentWrite};
pub use blob::{BlobStore, FsBlobStore, LogKey};
pub use lease::{is_postgres, redact, Lease, DEFAULT_LEASE_TTL_MS};
pub use written::{timeline_written, Written};

/// A backend's own error, kept as the source of [`Error::Open`] and [`Error::Query`].
pub type BackendError = Box<dyn std::error::Error + Send + Sync>;

/// What every backend fails with. Backend-neutral: a backend's own error travels as the source
/// of [`Error::Open`] or [`Error::Query`], so callers match on meaning, never on a client type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to open the store at {path}")]
    Open {
        path: String,
        #[source]
        source: BackendError,
    },
    #[error("the store's schema version {found} is newer than this binary's {supported}; upgrade opsgraph")]
    TooNew { found: i64, supported: i64 },
    /// A statement failed (SQLite: the error is the source).
    #[error("store query failed")]
    Query(#[source] BackendError),
    #[error("stored JSON does not match its type")]
    Json(#[from] serde_json::Error),
    #[error("no operation `{0}`")]
    NoOperation(String),
    #[error("operation `{id}` changed concurrently (expected version {expected})")]
    Conflict { id: String, expected: i64 },
    /// A gate answers once: a second answer is refused inside the transaction, so two people
    /// answering at the same moment cannot both win.
    #[error("gate `{gate}` of operation `{operation}` is already answered")]
    GateAnswered { operation: String, gate: String },
    /// The operation no longer runs the plan revision a change was made for.
    #[error("operation `{operation}` runs plan revision {current}, not {expected}")]
    StalePlan { operation: String, expected: String, current: String },
    /// An idempotency key is recorded once per actor.
    #[error("idempotency key `{key}` of {actor} is already recorded")]
    RequestRecorded { actor: String, key: String },
    /// A write of an agent task under a lease that is no longer the task's (it expired and was
    /// given up, or the task was cancelled or already reported).
    #[error("the lease on agent task `{task}` is no longer held (the task is {state})")]
    StaleLease { task: String, state: String },
    /// The runtime's change of an agent task lost a race: the task moved on meanwhile.
    #[error("agent task `{task}` moved on")]
    AgentTaskMoved { task: String },
    #[error("failed to connect to PostgreSQL at {url}: {reason}")]
    PgOpen { url: String, reason: String },
    /// A PostgreSQL statement failed: the server's message, or why the connection broke.
    #[error("PostgreSQL: {0}")]
    Postgres(String),
    /// Another holder's lease on the operation has not expired.
    #[error("operation `{operation}` is driven by {holder} (lease token {token}, expires in {expires_in_ms} ms)")]
    LeaseHeld { operation: String, holder: String, token: i64, expires_in_ms: i64 },
    /// The lease a write was fenced with is no longer the current one: another holder took the
    /// operation over (or it was never leased to this holder). Nothing of the batch is written.
    #[error("operation `{operation}`: lease token {token} of {holder} is stale ({current}); the write is refused")]
    Fenced { operation: String, holder: String, token: i64, current: String },
    #[error("this store does not implement leases")]
    LeasesUnsupported,
    /// Commits made without waiting for their sync ([`Store::commit_deferred`]) could not be
    /// made durable: their sync failed. They may be lost on power failure; whoever relied on
    /// them stops (the runtime's drive ends with this error, before anything they guard starts).
    #[error("the store's commits could not be made durable: {reason}")]
    NotDurable { reason: String },
    /// Reading or writing an artifact's or a log's bytes failed.
    #[error("failed to read or write {what}")]
    Blob {
        what: String,
        #[source]
        source: BackendError,
    },
    /// A blob location or a log's ids that would name something else.
    #[error("{what} is refused: {reason}")]
    BadBlob { what: String, reason: String },
    /// Another operation that is not completed or cancelled changes the resource.
    #[error("resource `{resource}` is being changed by operation `{operation}` ({state})")]
    ResourceBusy { resource: String, operation: String, state: String },
}

/// Defines a backend's `Fail` and `edge`, which let its functions use `?` over the client's and
/// the store's errors alike: the client's error becomes an [`Error`] by `$convert`, the store's
/// own errors and JSON errors ([`Error::Json`]) pass through, and `edge` turns a `Fail` back into
/// an [`Error`] at every function the rest of the workspace calls. A macro, not a type here: a
/// backend's `From<ClientError>` can only be implemented for a type of its own crate.
#[macro_export]
macro_rules! backend_fail {
    ($client:ty => $convert:expr) => {
        /// A failure inside this crate (`opsgraph_store::backend_fail!`).
        pub(crate) struct Fail($crate::Error);

        impl From<$client> for Fail {
            fn from(e: $client) -> Fail {
                Fail(($convert)(e))
            }
        }

        impl From<$crate::Error> for Fail {
            fn from(e: $crate::Error) -> Fail {
                Fail(e)
            }
        }

        impl From<::serde_json::Error> for Fail {
            fn from(e: ::serde_json::Error) -> Fail {
                Fail($crate::Error::Json(e))
            }
        }

        /// Runs a body written with `?` over the client's and the store's errors alike.
        pub(crate) fn edge<T>(body: impl FnOnce() -> Result<T, Fail>) -> Result<T, $crate::Error> {
            body().map_err(|f| f.0)
        }
    };
}

/// An operation as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationRecord {
    pub id: String,
    pub parent: Option<String>,
    pub intent: Value,
    /// The resource it creates or changes.
    pub resource: Option<String>,
    pub state: OperationState,
    /// The hash of the plan revision being executed.
    pub plan_revision: String,
    /// Protocol §2: the id of the intent it carries out (the intent's `id`; none when the intent
    /// gave none).
    #[serde(default)]
    pub intent_id: Option<String>,
    /// Protocol §2: the plan it was created from (that plan's revision hash). `plan_revision`
    /// moves on with each patch; this stays. Operations stored before it have their revision at
    /// the migration.
    #[serde(default)]
    pub plan_id: String,
    pub actor: String,
    pub created_at: String,
    pub updated_at: String,
    /// Bumped by every state change; a write that names an older version is refused.
    pub version: i64,
}

/// One line of an operation's timeline: what happened, when, who did it and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineEntry {
    pub seq: i64,
    pub operation: String,
    pub at: String,
    pub actor: String,
    pub event: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: String,
    pub data: Value,
}

/// The job states live in the model (`opsgraph_core::model::JobState`, with the job lifecycle beside
/// the operation one in `opsgraph_plan`); re-exported here, where records carry them.
pub use opsgraph_core::model::JobState;
/// A gate's type and kind, as records carry them (`GateRecord`).
pub use opsgraph_core::model::{GateKind, GateType};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobRecord {
    pub operation: String,
    pub id: String,
    pub state: JobState,
    pub attempts: u32,
    /// The last attempt's outcome and reason, as JSON.
    pub outcome: Value,
    pub updated_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EvidenceRecord {
    pub operation: String,
    pub job: String,
    pub check: String,
    pub source: String,
    pub command: String,
    pub expected: String,
    pub observed: String,
    pub passed: bool,
    pub at: String,
    /// The resource whose capability it proves.
    pub resource: Option<String>,
    pub capability: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GateRecord {
    pub operation: String,
    pub id: String,
    /// What answering it means (`approval`, `missing_input`, …).
    pub gate_type: GateType,
    /// A gate of the plan, or the review of a plan patch (with the patch's id).
    #[serde(flatten)]
    pub kind: GateKind,
    pub reason: String,
    pub options: Vec<String>,
    pub required_roles: Vec<String>,
    pub answer: Option<String>,
    pub answered_by: Option<String>,
    pub answered_at: Option<String>,
    /// A typed value given with the answer (missing input).
    pub value: Option<Value>,
}

impl GateRecord {
    /// The columns a backend stores the gate's type and kind in: the type's text (`gate_type`,
    /// as before kinds existed) and the patch it reviews (`patch`, `NULL` for a plan's gate).
    pub fn type_columns(&self) -> (String, Option<&str>) {
        (self.gate_type.to_string(), self.kind.patch())
    }

    /// The gate's type and kind read back from those columns; an unknown type is an error.
    pub fn from_columns(gate_type: &str, patch: Option<String>) -> Result<(GateType, GateKind), Error> {
        let t: GateType = serde_json::from_value(Value::String(gate_type.to_string()))?;
        Ok((t, patch.map_or(GateKind::Plan, |patch| GateKind::PatchReview { patch })))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    pub operation: String,
    pub job: String,
    pub id: String,
    pub sensitivity: String,
    /// Where the content is kept (a path in the data directory).
    pub location: String,
    pub size: i64,
    pub at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceRecord {
    pub id: String,
    /// The resource document (`opsgraph_core::model::Resource`) as JSON.
    pub doc: Value,
    pub last_operation: Option<String>,
    pub updated_at: String,
}

/// One entry of a resource's history ([I]): an operation that changed it, a verification and
/// what it found. Kept apart from operation timelines: a verification is not an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResourceEventRecord {
    /// Assigned by the store; ignored when writing.
    pub seq: i64,
    pub resource: String,
    pub at: String,
    /// Who or what: `user:alice`, `serve:<replica>` for a scheduled verification.
    pub actor: String,
    /// `operation.started`, `operation.completed`, `operation.failed`, `verified`.
    pub kind: String,
    /// The resource's status afterwards (`provisioning`, `running`, `degraded`, `error`).
    pub status: String,
    pub operation: Option<String>,
    /// One line: `3/3 checks passed`, `etcd_unit_active failed on compute_node/fleet-2: ...`.
    pub summary: String,
    /// The checks and what they observed, as JSON.
    pub detail: Value,
}

/// An API token. Only the SHA-256 of the token is stored; the token itself is shown once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub id: String,
    pub name: String,
    /// `sha256:<hex>` of the token.
    pub hash: String,
    pub roles: Vec<String>,
    /// The actor who created it (`token:<id>`, `user:<name>`, `bootstrap`).
    pub created_by: String,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// Who changed what, recorded in the transaction of the change itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AuditRecord {
    /// Assigned by the store; ignored when writing.
    pub seq: i64,
    pub at: String,
    pub actor: String,
    /// What was done: `operation.create`, `gate.answer`, `token.revoke`, ...
    pub action: String,
    /// What it was done to: an operation id, `op/gate`, a token id.
    pub target: String,
    pub operation: Option<String>,
    pub resource: Option<String>,
    pub detail: Value,
}

/// Filters for reading the audit log; every field narrows it.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub operation: Option<String>,
    pub resource: Option<String>,
    /// Rows at or after this RFC 3339 time.
    pub since: Option<String>,
}

/// The stored result of a request made with an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub actor: String,
    pub key: String,
    /// `sha256:<hex>` of the method, path and body: the same key with another request is refused.
    pub fingerprint: String,
    pub status: u16,
    pub response: Value,
    pub at: String,
}

/// One change. A batch of them is one transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// A new operation and its plan revision. Plans travel as their JSON text (`serde_json::
    /// to_string` of the plan): a 10,000-job plan is a few megabytes as text and tens as a `Value`.
    CreateOperation {
        op: OperationRecord,
        plan: String,
    },
    /// A new plan revision of an operation (JSON text), and the operation now runs it.
    SetPlan {
        operation: String,
        revision: String,
        plan: String,
    },
    /// The stored text of a plan revision changes without changing what it means (secrets
    /// sealed again under a new key).
    ReplacePlan {
        revision: String,
        plan: String,
    },
    /// The same, for an operation's intent.
    ReplaceIntent {
        operation: String,
        intent: Value,
    },
    /// The same, for the value given at an answered gate (the answer itself never changes).
    ReplaceGateValue {
        operation: String,
        gate: String,
        value: Value,
    },
    /// A state change and its timeline entry; refused when `expect_version` is stale.
    Transition {
        operation: String,
        expect_version: i64,
        state: OperationState,
        entry: TimelineEntry,
    },
    /// A timeline entry without a state change (a job started, a gate was answered).
    Timeline(TimelineEntry),
    Job(JobRecord),
    Evidence(EvidenceRecord),
    Gate(GateRecord),
    Artifact(ArtifactRecord),
    Resource(ResourceRecord),
    /// An entry of a resource's history.
    ResourceEvent(ResourceEventRecord),
    /// A resource removed from the resources table (a person's `resource delete`); nothing when
    /// there is no such row.
    DeleteResource(String),
    /// An idempotency key succeeded on a resource.
    Idempotency {
        key: String,
        resource: Option<String>,
        operation: String,
        job: String,
        at: String,
    },
    /// A guard, not a change: the transaction is refused unless the operation still runs this
    /// plan revision (an approval is bound to the plan it approved).
    ExpectPlan {
        operation: String,
        revision: String,
    },
    /// A guard, not a change: the transaction is refused with [`Error::Conflict`] unless the
    /// operation's version is still `version` (nobody moved it since the writer read it). What a
    /// driver that keeps its copy of the operation row between commits, instead of reading it
    /// again before each one, starts attempts under: a pause or cancel committed meanwhile
    /// refuses them. PostgreSQL checks it in the commit's statement (no round trip of its own).
    ExpectVersion {
        operation: String,
        version: i64,
    },
    /// A token created, or revoked (`revoked_at` set).
    Token(TokenRecord),
    Audit(AuditRecord),
    /// The result of a request with an idempotency key; refused when the key is recorded.
    Request(RequestRecord),
    /// A change to an agent task (`agent.rs`); lease-fenced changes are refused when stale.
    Agent(AgentWrite),
    /// A guard, not a change: the transaction is refused with [`Error::Fenced`] unless `holder`
    /// holds the operation's lease with this `token` (no later acquisition). PostgreSQL locks the
    /// lease row until the commit, so a takeover waits for this transaction and sees its writes.
    Fence {
        operation: String,
        holder: String,
        token: i64,
    },
    /// A guard: refused with [`Error::ResourceBusy`] when an operation other than `operation`
    /// that is neither completed nor cancelled changes `resource`. Serialised per resource
    /// (an advisory lock on PostgreSQL, the single writer on SQLite), so two replicas creating
    /// operations on one resource at once cannot both pass.
    ExpectIdle {
        resource: String,
        operation: String,
    },
}

impl Write {
    /// The job record this write stores, if it is one.
    pub fn job(&self) -> Option<&JobRecord> {
        match self {
            Write::Job(j) => Some(j),
            _ => None,
        }
    }

    /// The artifact record this write stores, if it is one.
    pub fn artifact(&self) -> Option<&ArtifactRecord> {
        match self {
            Write::Artifact(a) => Some(a),
            _ => None,
        }
    }
}

/// Filters for listing operations.
#[derive(Debug, Clone, Default)]
pub struct OperationFilter {
    pub state: Option<String>,
    pub resource: Option<String>,
}

/// The storage an operation runtime needs.
/// What `/metrics` reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Operation state kind (`running`, `failed`, ...) -> how many.
    pub operations: BTreeMap<String, u64>,
    /// Job state -> how many, across operations.
    pub jobs: BTreeMap<String, u64>,
    /// Jobs waiting to start in running operations.
    pub queue_depth: u64,
    /// Durations of finished attempts, in milliseconds, as cumulative buckets:
    /// (upper bound, count of attempts at or under it); then the total count and sum.
    pub duration_buckets: Vec<(f64, u64)>,
    pub duration_count: u64,
    pub duration_sum_ms: f64,
}

/// The upper bounds of the job duration histogram, in milliseconds.
pub const DURATION_BUCKETS_MS: &[f64] =
    &[10.0, 50.0, 100.0, 500.0, 1_000.0, 5_000.0, 10_000.0, 60_000.0, 300_000.0, 1_800_000.0];

impl Stats {
    /// Fills the duration histogram, count and sum from finished attempts' durations (ms).
    pub fn set_durations(&mut self, durations: impl IntoIterator<Item = f64>) {
        let mut counts = vec![0u64; DURATION_BUCKETS_MS.len()];
        for ms in durations {
            self.duration_count += 1;
            self.duration_sum_ms += ms;
            for (count, bound) in counts.iter_mut().zip(DURATION_BUCKETS_MS) {
                if ms <= *bound {
                    *count += 1;
                }
            }
        }
        self.duration_buckets = DURATION_BUCKETS_MS.iter().copied().zip(counts).collect();
    }
}

/// The guard of [`Write::ExpectVersion`]: the operation's current version (`None` when there is
/// no such operation) must be `expected`; anything else is a [`Error::Conflict`].
pub fn expect_version(operation: &str, expected: i64, current: Option<i64>) -> Result<(), Error> {
    if current != Some(expected) {
        return Err(Error::Conflict { id: operation.to_string(), expected });
    }
    Ok(())
}

/// The guard of [`Write::ExpectPlan`]: the operation's current plan revision (`None` when there
/// is no such operation) must be `expected`.
pub fn expect_plan(operation: &str, expected: &str, current: Option<String>) -> Result<(), Error> {
    let current = current.ok_or_else(|| Error::NoOperation(operation.to_string()))?;
    if current != expected {
        return Err(Error::StalePlan { operation: operation.to_string(), expected: expected.to_string(), current });
    }
    Ok(())
}

/// Makes durable what a store's [`Store::commit_deferred`] made: every such commit that returned
/// before `sync` was called is durable when `sync` returns `Ok` (one sync covers them all).
pub trait Syncer: Send + Sync {
    fn sync(&self) -> Result<(), Error>;
}

pub trait Store: Send {
    /// Applies every write in one transaction: all or nothing. Durable when it returns.
    fn commit(&mut self, writes: &[Write]) -> Result<(), Error>;
    /// Applies `writes` as [`Store::commit`] does (all or nothing, made and visible to every
    /// reader when it returns), but may return before they are durable: they are once a call
    /// of [`Store::syncer`]'s `sync`, begun after this returned, returns `Ok`. The default, and
    /// any store without a syncer, commits durably (PostgreSQL; a wrapping test store).
    fn commit_deferred(&mut self, writes: &[Write]) -> Result<(), Error> {
        self.commit(writes)
    }
    /// What makes this store's deferred commits durable; `None` when they are durable at once.
    fn syncer(&self) -> Option<std::sync::Arc<dyn Syncer>> {
        None
    }
    fn operation(&self, id: &str) -> Result<Option<OperationRecord>, Error>;
    fn operations(&self, filter: &OperationFilter) -> Result<Vec<OperationRecord>, Error>;
    /// The plan revision with this hash, as the JSON text stored: a reader deserializes only
    /// what it needs (a 10,000-job plan is tens of megabytes as a `Value`).
    fn plan_text(&self, revision: &str) -> Result<Option<String>, Error>;
    /// The plan revision (JSON) with this hash.
    fn plan(&self, revision: &str) -> Result<Option<Value>, Error> {
        Ok(self.plan_text(revision)?.map(|t| serde_json::from_str(&t)).transpose()?)
    }
    fn timeline(&self, operation: &str) -> Result<Vec<TimelineEntry>, Error>;
    fn jobs(&self, operation: &str) -> Result<Vec<JobRecord>, Error>;
    fn evidence(&self, operation: &str) -> Result<Vec<EvidenceRecord>, Error>;
    fn gates(&self, operation: &str) -> Result<Vec<GateRecord>, Error>;
    fn artifacts(&self, operation: &str) -> Result<Vec<ArtifactRecord>, Error>;
    fn resources(&self) -> Result<Vec<ResourceRecord>, Error>;
    fn resource(&self, id: &str) -> Result<Option<ResourceRecord>, Error>;
    /// A resource's history: its last `limit` entries, oldest first.
    fn resource_events(&self, resource: &str, limit: usize) -> Result<Vec<ResourceEventRecord>, Error>;
    /// The operation that last succeeded with this idempotency key, if any.
    fn idempotency(&self, key: &str) -> Result<Option<(String, String)>, Error>;
    /// Timeline entries after `after` (a `seq`), of one operation or of all, oldest first, at most
    /// `limit`: what a live stream sends next.
    fn timeline_after(&self, operation: Option<&str>, after: i64, limit: usize) -> Result<Vec<TimelineEntry>, Error>;
    /// Counts for monitoring: operations by state, jobs by state, finished attempts' durations.
    fn stats(&self) -> Result<Stats, Error>;
    /// A number that changes when another connection (another process, or another store value
    /// on the same file) commits; this store's own commits leave it alone. A reader that keeps a
    /// copy of what it read and what it wrote itself may skip re-reading while it is unchanged.
    /// `None`: the backend cannot tell, re-read every time.
    fn data_version(&self) -> Result<Option<i64>, Error> {
        Ok(None)
    }
    /// Waits until another connection may have committed timeline entries, at most `timeout`:
    /// true when one may have (a reader then reads what is new), false when the wait timed out
    /// with nothing seen. What follows timelines live (the server's event hubs) waits here
    /// instead of polling. SQLite: this process's commits ring the file's [`timeline_written`], and
    /// `data_version` shows other processes' within [`Written::SLICE`]; PostgreSQL: `LISTEN` on
    /// the channel a trigger on the timeline notifies. The default (a store that wraps
    /// another) sleeps a little and says true: the caller polls.
    fn wait_for_timeline(&mut self, timeout: std::time::Duration) -> Result<bool, Error> {
        std::thread::sleep(timeout.min(std::time::Duration::from_millis(200)));
        Ok(true)
    }
    /// Waits up to `timeout` for agent tasks that other processes wrote (enqueued, claimed,
    /// reported, ...): each one's id and whether it is queued now, in order, this process's own
    /// writes left out (its agent bell rang for those already). `None` when the store cannot tell
    /// (SQLite, a store that wraps another): agent waiters then look at the store at their slow
    /// pace. PostgreSQL: `LISTEN` on the channel a trigger on `agent_tasks` notifies; the first
    /// call starts listening and returns at once.
    fn wait_for_agent_tasks(&mut self, timeout: std::time::Duration) -> Result<Option<Vec<(String, bool)>>, Error> {
        let _ = timeout;
        Ok(None)
    }
    fn tokens(&self) -> Result<Vec<TokenRecord>, Error>;
    /// The token with this hash (`sha256:<hex>`), revoked or not.
    fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>, Error>;
    /// Audit rows in the order they were written.
    fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>, Error>;
    fn request(&self, actor: &str, key: &str) -> Result<Option<RequestRecord>, Error>;
    /// Claims the oldest queued agent tasks the claim matches (at most `claim.max`), each with its
    /// audit row and timeline entry, in one transaction; empty when there is none.
    fn agent_claim(&mut self, claim: &AgentClaim) -> Result<Vec<AgentTask>, Error>;
    /// Commits `writes` (an agent's report), then claims as [`Store::agent_claim`] does (the
    /// agent's next tasks), in one transaction: refused writes claim nothing. The default takes
    /// two transactions, for a backend that cannot do better.
    fn agent_commit_claim(&mut self, writes: &[Write], claim: &AgentClaim) -> Result<Vec<AgentTask>, Error> {
        self.commit(writes)?;
        self.agent_claim(claim)
    }
    fn agent_task(&self, id: &str) -> Result<Option<AgentTask>, Error>;
    /// An operation's agent tasks, oldest first.
    fn agent_tasks(&self, operation: &str) -> Result<Vec<AgentTask>, Error>;
    /// A task's log lines after `after` (a `seq`), oldest first.
    fn agent_log(&self, task: &str, after: i64) -> Result<Vec<AgentLogLine>, Error>;

    /// Takes the operation's lease for `holder` until `ttl_ms` from now (the store's clock):
    /// when nobody holds it, its holder's lease expired, or `holder` holds it already (then it is
    /// renewed and keeps its token). A new acquisition gets a token greater than every earlier
    /// one of this operation. Refused with [`Error::LeaseHeld`] while another holder's is live.
    ///
    /// The lease methods have defaults that refuse (`LeasesUnsupported`), so a store that wraps
    /// another (a test's fault injector) compiles without them; both backends implement them.
    fn acquire_lease(&mut self, operation: &str, holder: &str, ttl_ms: i64) -> Result<Lease, Error> {
        let _ = (operation, holder, ttl_ms);
        Err(Error::LeasesUnsupported)
    }
    /// Extends a lease that is still current (same holder and token, even if it expired while
    /// nobody took it); [`Error::Fenced`] when another acquisition happened.
    fn renew_lease(&mut self, lease: &Lease, ttl_ms: i64) -> Result<Lease, Error> {
        let _ = (lease, ttl_ms);
        Err(Error::LeasesUnsupported)
    }
    /// Lets the lease go (it expires now; its token stays, so tokens keep increasing). Nothing
    /// when it is no longer current.
    fn release_lease(&mut self, lease: &Lease) -> Result<(), Error> {
        let _ = lease;
        Err(Error::LeasesUnsupported)
    }
    /// The operation's lease as stored (expired or not); `expires_in_ms` by the store's clock.
    fn lease(&self, operation: &str) -> Result<Option<Lease>, Error> {
        let _ = operation;
        Err(Error::LeasesUnsupported)
    }
    /// Top-level operations in `running` whose lease is absent or expired: what a replica adopts.
    fn adoptable(&self) -> Result<Vec<String>, Error> {
        Err(Error::LeasesUnsupported)
    }
}

/// Now, as RFC 3339 UTC with milliseconds.
pub fn now() -> String {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    rfc3339(since.as_secs() as i64, since.subsec_millis())
}

/// Milliseconds since the epoch of a time [`rfc3339`] wrote (`YYYY-MM-DDTHH:MM:SS[.mmm]Z`);
/// `None` for anything else.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let fraction = text.get(19..text.len().checked_sub(1)?)?;
    if b.len() < 20 || !text.ends_with('Z') || !(fraction.is_empty() || fraction.len() == 4) || b[10] != b'T' {
        return None;
    }
    parse_time(text)
}

/// Milliseconds since the epoch of any RFC 3339 date-time (`2026-01-31T12:00:00Z`,
/// `2026-01-31t12:00:00.5+02:00`; a fraction is cut to milliseconds), a real day and time of
/// day; `None` for anything else. What a person may give as a time (`audit --since`).
pub fn parse_time(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let d = b.get(r)?;
        d.iter().all(u8::is_ascii_digit).then(|| d.iter().fold(0, |n, c| n * 10 + i64::from(c - b'0')))
    };
    let at = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let days_in_month = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    let shaped = at(4, b"-") && at(7, b"-") && at(10, b"Tt") && at(13, b":") && at(16, b":");
    if !shaped || !(1..=days_in_month).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let (mut i, mut millis) = (19, 0);
    if at(i, b".") {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        millis = b[i + 1..i + 1 + digits.min(3)].iter().fold(0, |n, c| n * 10 + i64::from(c - b'0'));
        millis *= [100, 10, 1][digits.min(3) - 1];
        i += 1 + digits;
    }
    let offset_minutes = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && at(i + 3, b":") => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            if *sign == b'+' {
                oh * 60 + om
            } else {
                -(oh * 60 + om)
            }
        }
        _ => return None,
    };
    // days-from-civil, the inverse of `rfc3339`'s civil-from-days.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hh * 3600 + mm * 60 + ss - offset_minutes * 60) * 1000 + millis)
}

/// `text` (any RFC 3339 time, [`parse_time`]) in the form the store writes its times in (UTC,
/// milliseconds), so that it compares with them as text; `None` when it is not one.
pub fn normalize_time(text: &str) -> Option<String> {
    let ms = parse_time(text)?;
    Some(rfc3339(ms.div_euclid(1000), ms.rem_euclid(1000) as u32))
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (civil-from-days, proleptic Gregorian).
pub fn rfc3339(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    if !(0..=9999).contains(&y) || millis > 999 {
        return format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60);
    }
    // The same text written into its 24 bytes, a digit at a time by divisions by ten (a
    // multiplication once compiled): the runtime stamps four records a job, and `format!`, then
    // a loop dividing by powers of ten it computed, were a measurable part of a job's cost
    // (docs/benchmarks.md, [N] 5).
    let mut text = *b"0000-00-00T00:00:00.000Z";
    let fields =
        [(4, y), (7, m), (10, d), (13, rem / 3600), (16, rem % 3600 / 60), (19, rem % 60), (23, millis.into())];
    let mut start = 0;
    for (end, mut v) in fields {
        for digit in text[start..end].iter_mut().rev() {
            *digit = b'0' + (v % 10) as u8;
            v /= 10;
        }
        start = end + 1;
    }
    String::from_utf8(text.to_vec()).unwrap_or_default()
}
