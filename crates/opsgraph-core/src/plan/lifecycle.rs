//! The operation lifecycle of protocol §3, plus `cancelled`, as one pure transition function:
//! `(state, event) -> (state, effects)`. Operation state changes only through [`apply`]; the
//! runtime stores the new state and the timeline event in one transaction, then carries out the
//! effects.
//!
//! ```text
//! draft_intent -> plan_preview -> capability_resolution -> running -> completed
//!                                   |  ^        |            |  ^
//!                      need input   v  | input  | approval   |  | resume
//!                           waiting_for_input   v            v  |
//!                                   waiting_for_approval    paused
//! running -> failed -> diagnosing -> plan_patch_review -> running
//! failed -> running (retry);  failed -> verification -> running | failed
//! any state but completed and cancelled -> cancelled
//! ```

use std::fmt;

use crate::model::{OperationState, OperationStateKind};
use serde::{Deserialize, Serialize};

/// Something that happened to an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The plan preview was built from the intent.
    PlanBuilt,
    /// Requirements are being resolved.
    Resolve,
    /// Resolution needs a person: missing input or a provider choice.
    NeedInput {
        gates: Vec<String>,
    },
    /// A person answered an input or provider-selection gate.
    InputProvided {
        gate: String,
    },
    /// Resolution is done and gates or risk need approval.
    NeedApproval {
        gates: Vec<String>,
    },
    /// A person approved one of the gates.
    Approved {
        gate: String,
    },
    /// Resolution is done and nothing needs approval.
    Start,
    /// A person paused the run, or the run reached a gate.
    Pause {
        reason: String,
    },
    Resume,
    JobFailed {
        job: String,
        reason: String,
    },
    /// A person or the AI analyzer starts investigating.
    Diagnose,
    /// A plan patch was proposed.
    ProposePatch {
        patch: String,
    },
    /// The patch was approved and applied as a new plan revision.
    PatchApplied {
        patch: String,
        revision: String,
    },
    /// The patch was rejected: back to failed.
    PatchRejected {
        patch: String,
        reason: String,
    },
    /// Run the failed jobs again.
    Retry {
        jobs: Vec<String>,
    },
    /// A person fixed it by hand; verification jobs follow.
    ManuallyFixed {
        intervention: String,
    },
    Verified,
    StillBroken {
        reason: String,
    },
    /// Every output is verified by evidence.
    Complete,
    Cancel {
        reason: String,
    },
}

impl Event {
    pub fn name(&self) -> &'static str {
        match self {
            Event::PlanBuilt => "plan_built",
            Event::Resolve => "resolve",
            Event::NeedInput { .. } => "need_input",
            Event::InputProvided { .. } => "input_provided",
            Event::NeedApproval { .. } => "need_approval",
            Event::Approved { .. } => "approved",
            Event::Start => "start",
            Event::Pause { .. } => "pause",
            Event::Resume => "resume",
            Event::JobFailed { .. } => "job_failed",
            Event::Diagnose => "diagnose",
            Event::ProposePatch { .. } => "propose_patch",
            Event::PatchApplied { .. } => "patch_applied",
            Event::PatchRejected { .. } => "patch_rejected",
            Event::Retry { .. } => "retry",
            Event::ManuallyFixed { .. } => "manually_fixed",
            Event::Verified => "verified",
            Event::StillBroken { .. } => "still_broken",
            Event::Complete => "complete",
            Event::Cancel { .. } => "cancel",
        }
    }
}

/// What the runtime must do after a transition is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    ResolveRequirements,
    /// Ask people: these gates are open.
    OpenGates {
        gates: Vec<String>,
    },
    /// Start every job whose dependencies are satisfied.
    DispatchReadyJobs,
    /// Start no new job; running ones finish.
    StopDispatch,
    /// Signal running jobs to stop.
    CancelRunningJobs,
    /// Reset these jobs so they run again.
    ResetJobs {
        jobs: Vec<String>,
    },
    RunDiagnosis,
    /// Run the intervention's verification checks.
    RunVerification {
        intervention: String,
    },
    /// Record outputs on the resource: state, capabilities, health.
    UpdateResource,
    /// Record the failure on the resource.
    MarkResourceFailed {
        reason: String,
    },
}

/// An event that the current state does not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IllegalTransition {
    pub state: OperationStateKind,
    pub event: &'static str,
    pub hint: &'static str,
}

impl fmt::Display for IllegalTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot apply `{}` to an operation in state `{}`", self.event, state_name(self.state))?;
        if !self.hint.is_empty() {
            write!(f, ": {}", self.hint)?;
        }
        Ok(())
    }
}

impl std::error::Error for IllegalTransition {}

pub fn state_name(kind: OperationStateKind) -> &'static str {
    match kind {
        OperationStateKind::DraftIntent => "draft_intent",
        OperationStateKind::PlanPreview => "plan_preview",
        OperationStateKind::CapabilityResolution => "capability_resolution",
        OperationStateKind::WaitingForInput => "waiting_for_input",
        OperationStateKind::WaitingForApproval => "waiting_for_approval",
        OperationStateKind::Running => "running",
        OperationStateKind::Paused => "paused",
        OperationStateKind::Failed => "failed",
        OperationStateKind::Diagnosing => "diagnosing",
        OperationStateKind::PlanPatchReview => "plan_patch_review",
        OperationStateKind::Verification => "verification",
        OperationStateKind::Completed => "completed",
        OperationStateKind::Cancelled => "cancelled",
    }
}

/// True when no event but none can follow.
pub fn is_terminal(state: &OperationState) -> bool {
    matches!(state, OperationState::Completed | OperationState::Cancelled { .. })
}

const GATE_NOT_OPEN: &str = "that gate is not open; it may have been answered already";

fn waiting_for_input(gates: Vec<String>) -> OperationState {
    OperationState::WaitingForInput { gates }
}

fn waiting_for_approval(gates: Vec<String>) -> OperationState {
    OperationState::WaitingForApproval { gates }
}

/// Waiting (`waiting`) at `gates`, opened.
fn wait_at(gates: &[String], waiting: fn(Vec<String>) -> OperationState) -> (OperationState, Vec<Effect>) {
    (waiting(gates.to_vec()), vec![Effect::OpenGates { gates: gates.to_vec() }])
}

/// `gate`, one of the open `gates`, answered: `done` when it was the last, else still waiting
/// (`waiting`) at the others; `None` when it is not open.
fn answer(
    gates: &[String],
    gate: &str,
    waiting: fn(Vec<String>) -> OperationState,
    done: (OperationState, Vec<Effect>),
) -> Option<(OperationState, Vec<Effect>)> {
    if !gates.iter().any(|g| g == gate) {
        return None;
    }
    let rest: Vec<String> = gates.iter().filter(|g| *g != gate).cloned().collect();
    Some(if rest.is_empty() { done } else { (waiting(rest), vec![]) })
}

/// The one transition function.
pub fn apply(state: &OperationState, event: &Event) -> Result<(OperationState, Vec<Effect>), IllegalTransition> {
    use Effect as F;
    use Event as E;
    use OperationState as S;
    let illegal = |hint: &'static str| IllegalTransition { state: state.kind(), event: event.name(), hint };
    let next = match (state, event) {
        // Cancel is allowed from every state that is not terminal.
        (S::Completed, E::Cancel { .. }) => return Err(illegal("a completed operation cannot be cancelled")),
        (S::Cancelled { .. }, E::Cancel { .. }) => return Err(illegal("it is already cancelled")),
        (_, E::Cancel { reason }) => {
            (S::Cancelled { reason: reason.clone() }, vec![F::StopDispatch, F::CancelRunningJobs])
        }

        (S::DraftIntent, E::PlanBuilt) => (S::PlanPreview, vec![]),
        (S::PlanPreview, E::Resolve) => (S::CapabilityResolution, vec![F::ResolveRequirements]),

        (S::CapabilityResolution, E::NeedInput { gates }) => wait_at(gates, waiting_for_input),
        (S::WaitingForInput { gates }, E::InputProvided { gate }) => {
            let done = (S::CapabilityResolution, vec![F::ResolveRequirements]);
            answer(gates, gate, waiting_for_input, done).ok_or_else(|| illegal(GATE_NOT_OPEN))?
        }
        (S::CapabilityResolution, E::NeedApproval { gates }) => wait_at(gates, waiting_for_approval),
        (S::WaitingForApproval { gates }, E::Approved { gate }) => {
            let done = (S::Running, vec![F::DispatchReadyJobs]);
            answer(gates, gate, waiting_for_approval, done).ok_or_else(|| illegal(GATE_NOT_OPEN))?
        }
        (S::CapabilityResolution, E::Start) => (S::Running, vec![F::DispatchReadyJobs]),

        (S::Running, E::Pause { reason }) => (S::Paused { reason: reason.clone() }, vec![F::StopDispatch]),
        (S::Paused { .. }, E::Resume) => (S::Running, vec![F::DispatchReadyJobs]),
        (S::Running, E::JobFailed { reason, .. }) => (
            S::Failed { reason: reason.clone() },
            vec![F::StopDispatch, F::MarkResourceFailed { reason: reason.clone() }],
        ),
        (S::Running, E::Complete) => (S::Completed, vec![F::UpdateResource]),

        (S::Failed { .. }, E::Diagnose) => (S::Diagnosing, vec![F::RunDiagnosis]),
        (S::Diagnosing, E::ProposePatch { patch }) => (S::PlanPatchReview { patch: patch.clone() }, vec![]),
        (S::PlanPatchReview { patch: open }, E::PatchApplied { patch, .. }) if open == patch => {
            (S::Running, vec![F::DispatchReadyJobs])
        }
        (S::PlanPatchReview { patch: open }, E::PatchRejected { patch, reason }) if open == patch => {
            (S::Failed { reason: format!("patch {patch} rejected: {reason}") }, vec![])
        }
        (S::PlanPatchReview { .. }, E::PatchApplied { .. } | E::PatchRejected { .. }) => {
            return Err(illegal("a different patch is under review"))
        }
        // A paused one too: a rollout paused by its failure budget retries its failed hosts.
        (S::Failed { .. } | S::Paused { .. }, E::Retry { jobs }) => {
            (S::Running, vec![F::ResetJobs { jobs: jobs.clone() }, F::DispatchReadyJobs])
        }
        (S::Failed { .. }, E::ManuallyFixed { intervention }) => (
            S::Verification { intervention: intervention.clone() },
            vec![F::RunVerification { intervention: intervention.clone() }],
        ),
        (S::Verification { .. }, E::Verified) => (S::Running, vec![F::DispatchReadyJobs]),
        (S::Verification { .. }, E::StillBroken { reason }) => (S::Failed { reason: reason.clone() }, vec![]),

        // Everything else is refused, with a hint where a person would likely try it.
        (S::Completed, E::Resume | E::Retry { .. }) => return Err(illegal("the operation is completed")),
        (S::WaitingForApproval { .. } | S::WaitingForInput { .. }, E::Start | E::Resume) => {
            return Err(illegal("answer the open gates first"))
        }
        (S::Running, E::Resume) => return Err(illegal("it is already running")),
        (S::Paused { .. }, E::Pause { .. }) => return Err(illegal("it is already paused")),
        (
            S::DraftIntent
            | S::PlanPreview
            | S::CapabilityResolution
            | S::WaitingForInput { .. }
            | S::WaitingForApproval { .. }
            | S::Running
            | S::Paused { .. }
            | S::Failed { .. }
            | S::Diagnosing
            | S::PlanPatchReview { .. }
            | S::Verification { .. }
            | S::Completed
            | S::Cancelled { .. },
            E::PlanBuilt
            | E::Resolve
            | E::NeedInput { .. }
            | E::InputProvided { .. }
            | E::NeedApproval { .. }
            | E::Approved { .. }
            | E::Start
            | E::Pause { .. }
            | E::Resume
            | E::JobFailed { .. }
            | E::Diagnose
            | E::ProposePatch { .. }
            | E::PatchApplied { .. }
            | E::PatchRejected { .. }
            | E::Retry { .. }
            | E::ManuallyFixed { .. }
            | E::Verified
            | E::StillBroken { .. }
            | E::Complete,
        ) => return Err(illegal("")),
    };
    Ok(next)
}
