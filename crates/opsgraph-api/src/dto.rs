//! The documents the REST API serves, typed. Field order is the wire order (`serde_json` keeps
//! it), so a handler that serializes one of these answers exactly what it answered when it built
//! the JSON by hand, and a client deserializes what the server sent into the same type.

use opsgraph_core::model::OperationStateKind;
use opsgraph_core::plan::patch::{Diff, Finding};
use opsgraph_store::{EvidenceRecord, GateRecord, JobRecord};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An operation in a list (`GET /operations`, a resource's operations).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OperationSummary {
    pub id: String,
    pub parent: Option<String>,
    pub state: OperationStateKind,
    /// The state in words, with its reason or the gates it waits at (`views::detail`).
    pub detail: String,
    pub resource: Option<String>,
    pub actor: String,
    pub plan_revision: String,
    pub created_at: String,
    pub updated_at: String,
}

/// Everything about an operation (`GET /operations/{id}`, `describe operation`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OperationView {
    #[serde(flatten)]
    pub summary: OperationSummary,
    /// Protocol §2's Operation fields ([O]), stored with the operation: the intent's `id` (when it
    /// gave one) and the plan it was created from (that revision's hash; `plan_revision` is the
    /// one it runs now, after patches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_id: Option<String>,
    pub plan_id: String,
    /// Whether a patch changed the plan since it was built, and each patch: id, author, reason,
    /// the revision it made and its diff ([O]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub customized: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub customizations: Vec<Value>,
    /// The pack it ran (`id@version`), pinned by digest.
    pub pack: Option<String>,
    pub pack_digest: Option<String>,
    pub stages: Vec<StageView>,
    /// Sealed values shown as `{"secret": "sealed"}`.
    pub intent: Value,
    /// Sealed values shown as `{"secret": "sealed"}`.
    pub gates: Vec<GateRecord>,
    /// The gates a waiting operation waits at (its state's own list); absent when it does not wait.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_at: Vec<String>,
    pub jobs: Vec<JobRecord>,
    pub evidence: Vec<EvidenceRecord>,
    pub artifacts: Vec<ArtifactView>,
    pub timeline: Vec<TimelineView>,
}

/// A stage of the plan with the job instances in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StageView {
    pub id: String,
    pub name: String,
    /// From its jobs' states ([O]).
    #[serde(default)]
    pub status: StageStatus,
    pub jobs: Vec<String>,
}

/// A stage's status (protocol §2), derived from its jobs' states (`views::stage_status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    /// No job of it has started (or it has no job yet).
    #[default]
    Pending,
    /// Some of its jobs are done, none runs, the rest have not started.
    Waiting,
    /// A job of it runs.
    Running,
    /// Every job of it is done (succeeded, already satisfied, recovered, manually fixed, skipped).
    Completed,
    /// A job of it failed.
    Failed,
    /// A job of it was cancelled.
    Cancelled,
}

/// An artifact: secret ones by reference only, others with where they are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactView {
    pub id: String,
    pub job: String,
    pub sensitivity: String,
    pub size: i64,
    pub at: String,
    pub reference: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// One timeline entry (the store's `TimelineEntry` without its operation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TimelineView {
    pub seq: i64,
    pub at: String,
    pub actor: String,
    pub event: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: String,
    pub data: Value,
}

/// A resource in a list (`GET /resources`). Status, health and observed state are the
/// document's own fields, `null` when it has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceRow {
    pub id: String,
    pub status: Value,
    pub health: Value,
    pub last_operation: Option<String>,
    pub observed_state: Value,
    pub updated_at: String,
}

/// A resource with the operations that touched it (`GET /resources/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceView {
    pub id: String,
    pub resource: Value,
    pub last_operation: Option<String>,
    pub updated_at: String,
    pub operations: Vec<OperationSummary>,
    /// Its history's last entries, oldest first: operations that changed it, verifications.
    #[serde(default)]
    pub history: Vec<opsgraph_store::ResourceEventRecord>,
}

/// The captured (masked) output of one attempt; `None` when it left none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LogEntry {
    pub job: String,
    pub attempt: u32,
    pub output: Option<String>,
}

/// An operation's gates, with the plan revision an answer must name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateList {
    pub plan_revision: String,
    pub gates: Vec<GateRecord>,
}

/// What a control request (pause, resume, cancel, retry) left the operation in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ControlReply {
    pub id: String,
    pub state: OperationStateKind,
    pub detail: String,
}

/// A gate's answer, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AnswerReply {
    pub operation: String,
    pub gate: String,
    pub answer: String,
    pub answered_by: String,
    pub role: String,
    pub state: OperationStateKind,
}

/// An operation just created (`POST /operations`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Created {
    pub id: String,
    pub plan_revision: String,
    pub href: String,
}

/// A plan patch as proposed (`POST /operations/{id}/patches`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PatchReply {
    pub id: String,
    pub patch: String,
    pub diff: Diff,
    pub diff_text: String,
    pub findings: Vec<Finding>,
    /// The gate that waits for an approval, when the patch needs one.
    pub gate: Option<String>,
    /// Why it waits: the runtime's `ApprovalReason`s.
    pub approval: Value,
    pub state: OperationStateKind,
    pub detail: String,
}

/// A proposed patch as the operation's timeline recorded it (`GET /operations/{id}/patches`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PatchView {
    pub id: String,
    pub author: Value,
    pub at: String,
    pub reason: Value,
    /// Sealed values shown as `{"secret": "sealed"}`.
    pub changes: Value,
    pub diff: Value,
    pub diff_text: String,
    pub findings: Value,
    pub revision: Value,
    pub gate: Option<String>,
    pub answered_by: Option<String>,
    /// `applied`, `waiting_for_approval`, `approved` or `rejected`.
    pub state: String,
}

/// One evidence check an intervention ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckResult {
    pub job: String,
    pub check: String,
    pub passed: bool,
    pub expected: String,
    pub observed: String,
}

/// A manual fix, recorded and verified (`POST /operations/{id}/interventions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InterventionReply {
    pub id: String,
    pub intervention: String,
    pub jobs: Vec<String>,
    pub checks: Vec<CheckResult>,
    pub state: OperationStateKind,
    pub detail: String,
}

/// An API token, never with its secret (shown once, at creation, beside this).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TokenView {
    pub id: String,
    pub name: String,
    pub roles: Vec<String>,
    pub created_by: String,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

impl TimelineView {
    /// The store's entry this view shows, of operation `operation`.
    pub fn entry(&self, operation: &str) -> opsgraph_store::TimelineEntry {
        opsgraph_store::TimelineEntry {
            seq: self.seq,
            operation: operation.to_string(),
            at: self.at.clone(),
            actor: self.actor.clone(),
            event: self.event.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            reason: self.reason.clone(),
            data: self.data.clone(),
        }
    }
}

/// What an analyzer found (`GET /operations/{id}/diagnosis`, the runtime's `Diagnosis`, one per
/// failed job; `POST …/diagnosis?analyzer=ai`, the AI's one answer about the failed jobs); the
/// patch as the document it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DiagnosisView {
    pub operation: String,
    /// The failed job instance (an AI's answer: the failed jobs it was asked about, `, `-joined).
    pub job: String,
    pub summary: String,
    pub cause: String,
    pub confidence: f64,
    pub evidence: Vec<String>,
    pub remedy: Option<String>,
    /// Where `remedy` comes from; absent when no remedy is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<RemedySource>,
    /// The proposed patch, or null: none matched, the remedy only diagnoses, or (an AI's) the
    /// reviewer refused it.
    pub patch: Value,
    /// `rules` or `ai`.
    pub analyzer: String,
}

/// Where a remedy comes from: the remedy library that ships with Opsgraph and serves every pack,
/// or the operation's pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RemedySource {
    Library,
    Pack,
}

impl RemedySource {
    pub fn of(from_library: bool) -> RemedySource {
        if from_library {
            RemedySource::Library
        } else {
            RemedySource::Pack
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RemedySource::Library => "library",
            RemedySource::Pack => "pack",
        }
    }
}

/// The reviewer on an AI's patch, without proposing it (`POST …/diagnosis?analyzer=ai`): its
/// findings when it passes, every finding when it is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReviewView {
    /// `passed` or `refused`.
    pub state: String,
    pub findings: Vec<Finding>,
}
