//! Operation (seed §2, §3): the process of changing a resource.
//!
//! The lifecycle transition function lives in `plan::lifecycle` (issue [B]); this module only names
//! the states so that every crate shares one vocabulary.

use serde::{Deserialize, Serialize};

/// The operation lifecycle of protocol §3, plus `Cancelled`. Variants carry their own data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum OperationState {
    DraftIntent,
    PlanPreview,
    CapabilityResolution,
    WaitingForInput { gates: Vec<String> },
    WaitingForApproval { gates: Vec<String> },
    Running,
    Paused { reason: String },
    Failed { reason: String },
    Diagnosing,
    PlanPatchReview { patch: String },
    Verification { intervention: String },
    Completed,
    Cancelled { reason: String },
}

/// The field-less twin of [`OperationState`], for filters, queries and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperationStateKind {
    DraftIntent,
    PlanPreview,
    CapabilityResolution,
    WaitingForInput,
    WaitingForApproval,
    Running,
    Paused,
    Failed,
    Diagnosing,
    PlanPatchReview,
    Verification,
    Completed,
    Cancelled,
}

impl OperationState {
    pub fn kind(&self) -> OperationStateKind {
        match self {
            OperationState::DraftIntent => OperationStateKind::DraftIntent,
            OperationState::PlanPreview => OperationStateKind::PlanPreview,
            OperationState::CapabilityResolution => OperationStateKind::CapabilityResolution,
            OperationState::WaitingForInput { .. } => OperationStateKind::WaitingForInput,
            OperationState::WaitingForApproval { .. } => OperationStateKind::WaitingForApproval,
            OperationState::Running => OperationStateKind::Running,
            OperationState::Paused { .. } => OperationStateKind::Paused,
            OperationState::Failed { .. } => OperationStateKind::Failed,
            OperationState::Diagnosing => OperationStateKind::Diagnosing,
            OperationState::PlanPatchReview { .. } => OperationStateKind::PlanPatchReview,
            OperationState::Verification { .. } => OperationStateKind::Verification,
            OperationState::Completed => OperationStateKind::Completed,
            OperationState::Cancelled { .. } => OperationStateKind::Cancelled,
        }
    }
}

/// An operation: an intent, the plan revision it runs, its state and who started it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Operation {
    pub id: String,
    pub intent_id: String,
    pub plan_id: String,
    /// The content hash of the plan revision being executed.
    pub plan_revision: String,
    pub state: OperationState,
    pub actor: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
/// Where one job instance of an operation is. It changes only through
/// `opsgraph_plan::job_lifecycle::apply`.
pub enum JobState {
    Pending,
    /// An attempt was started; if the process dies now, its outcome is unknown.
    Running,
    Succeeded,
    Failed,
    /// Its idempotency key already succeeded on the same resource and its evidence still passes.
    AlreadySatisfied,
    /// After a crash, its evidence passed: it succeeded without being run again.
    Recovered,
    /// A person fixed it; verification passed.
    ManuallyFixed,
    Skipped,
    Cancelled,
}

impl JobState {
    /// Every state, in the order above.
    pub const ALL: [JobState; 9] = [
        JobState::Pending,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::AlreadySatisfied,
        JobState::Recovered,
        JobState::ManuallyFixed,
        JobState::Skipped,
        JobState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::AlreadySatisfied => "already_satisfied",
            JobState::Recovered => "recovered",
            JobState::ManuallyFixed => "manually_fixed",
            JobState::Skipped => "skipped",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        Some(match s {
            "pending" => JobState::Pending,
            "running" => JobState::Running,
            "succeeded" => JobState::Succeeded,
            "failed" => JobState::Failed,
            "already_satisfied" => JobState::AlreadySatisfied,
            "recovered" => JobState::Recovered,
            "manually_fixed" => JobState::ManuallyFixed,
            "skipped" => JobState::Skipped,
            "cancelled" => JobState::Cancelled,
            _ => return None,
        })
    }

    /// Its dependents may start.
    pub fn is_done(self) -> bool {
        matches!(
            self,
            JobState::Succeeded
                | JobState::AlreadySatisfied
                | JobState::Recovered
                | JobState::ManuallyFixed
                | JobState::Skipped
        )
    }
}
