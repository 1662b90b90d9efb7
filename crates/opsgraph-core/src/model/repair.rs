//! Gates, interventions, plan patches, remedies and failures: how people and analyzers answer,
//! repair and explain a run.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::Attributes;

// ---------------------------------------------------------------------------------------------
// Gates, interventions, patches, remedies

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GateType {
    #[default]
    Approval,
    ProviderSelection,
    DestructiveAction,
    PolicyException,
    MissingInput,
    CostConfirmation,
}

impl fmt::Display for GateType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GateType::Approval => "approval",
            GateType::ProviderSelection => "provider_selection",
            GateType::DestructiveAction => "destructive_action",
            GateType::PolicyException => "policy_exception",
            GateType::MissingInput => "missing_input",
            GateType::CostConfirmation => "cost_confirmation",
        })
    }
}

/// What a gate belongs to, besides its type (which says what answering it means): a gate of
/// the plan (placed by the planner, a template or a patch's `add_gate`), or the review of a
/// proposed plan patch, whose answer applies or rejects that patch. A patch's review gate has
/// type `approval` too, so the type alone cannot tell them apart; neither may its id. In JSON:
/// `"kind": "plan"` or `"kind": "patch_review", "patch": "<id>"`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GateKind {
    #[default]
    Plan,
    PatchReview {
        patch: String,
    },
}

impl GateKind {
    /// The patch whose review this gate is, if it is one.
    pub fn patch(&self) -> Option<&str> {
        match self {
            GateKind::Plan => None,
            GateKind::PatchReview { patch } => Some(patch),
        }
    }

    /// The id of the gate that reviews patch `patch` (`patch-<id>`): the one place that names it.
    /// Ids are names only; what a gate is for is its `GateKind`.
    pub fn review_gate_id(patch: &str) -> String {
        format!("patch-{patch}")
    }
}

/// A gate (seed §12): a DAG node that blocks its descendants until a person answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub id: String,
    #[serde(default, rename = "type")]
    pub type_: GateType,
    pub reason: String,
    #[serde(default)]
    pub options: Vec<String>,
    #[serde(default)]
    pub required_roles: Vec<String>,
    /// The jobs that wait for the answer (template gates); none: before the first jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InterventionType {
    ManuallyFixed,
}

/// A recorded manual fix (seed §13), verified before the run goes on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Intervention {
    #[serde(rename = "type")]
    pub type_: InterventionType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_stage: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    pub note: String,
    #[serde(default)]
    pub requires_verification: Vec<String>,
}

/// A structured change to a plan (seed §14). Changes are an allow-list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub changes: Vec<PatchChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PatchChange {
    InsertAfter {
        anchor: String,
        jobs: Vec<String>,
    },
    InsertBefore {
        anchor: String,
        jobs: Vec<String>,
    },
    Retry {
        job: String,
        #[serde(default)]
        with_descendants: bool,
    },
    Skip {
        job: String,
        reason: String,
    },
    SetParameters {
        job: Option<String>,
        parameters: Attributes,
    },
    AddGate(Gate),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub roles: Vec<String>,
}

/// A known failure signature a pack (or the remedy library) ships, with its diagnosis and, when
/// a machine may fix it, its patch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Remedy {
    pub id: String,
    /// The jobs it applies to: a failure class, not only job ids.
    pub applies_to: AppliesTo,
    pub signature: Signature,
    /// The cause in one sentence (`{name}` is filled from the signature's named groups); the
    /// first sentence of `diagnosis` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    pub diagnosis: String,
    /// The fix; none where no machine should guess (auth, host keys, disk full): a diagnosis only.
    /// `$job` in a change names the failed job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_patch: Option<PlanPatch>,
    /// Outputs the signature must and must not match (`opsgraph pack test`).
    #[serde(default, skip_serializing_if = "RemedyExamples::is_empty")]
    pub examples: RemedyExamples,
}

/// The jobs a remedy applies to: `everywhere`, or any of a list of selectors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum AppliesTo {
    Everywhere(Everywhere),
    Only(Vec<JobSelector>),
}

/// The word `everywhere`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Everywhere {
    Everywhere,
}

/// One way of naming jobs: by id, by type, by a capability they provide, by pack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobSelector {
    Job(String),
    JobType(crate::model::JobType),
    Provides(String),
    Pack(String),
}

impl AppliesTo {
    /// The job ids it names (none for `everywhere`).
    pub fn job_ids(&self) -> impl Iterator<Item = &str> {
        let list: &[JobSelector] = match self {
            AppliesTo::Everywhere(_) => &[],
            AppliesTo::Only(l) => l,
        };
        list.iter().filter_map(|s| match s {
            JobSelector::Job(j) => Some(j.as_str()),
            _ => None,
        })
    }

    pub fn selectors(&self) -> &[JobSelector] {
        match self {
            AppliesTo::Everywhere(_) => &[],
            AppliesTo::Only(l) => l,
        }
    }
}

impl fmt::Display for AppliesTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = match self {
            AppliesTo::Everywhere(_) => return f.write_str("every job"),
            AppliesTo::Only(l) => l,
        };
        let words: Vec<String> = list
            .iter()
            .map(|s| match s {
                JobSelector::Job(j) => j.clone(),
                JobSelector::JobType(t) => {
                    format!("{} jobs", serde_json::to_value(t).unwrap_or_default().as_str().unwrap_or_default())
                }
                JobSelector::Provides(c) => format!("jobs providing {c}"),
                JobSelector::Pack(p) => format!("jobs of pack {p}"),
            })
            .collect();
        f.write_str(&words.join(", "))
    }
}

/// A remedy's examples: failures its signature must recognise, and near misses it must not.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemedyExamples {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<RemedyExample>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub does_not_match: Vec<RemedyExample>,
}

impl RemedyExamples {
    pub fn is_empty(&self) -> bool {
        self.matches.is_empty() && self.does_not_match.is_empty()
    }
}

/// One example failure: the job's output, and optionally its exit code and failed checks.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemedyExample {
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_evidence: Vec<String>,
}

/// A failed job described outside any operation (`opsgraph diagnose FILE`): for pack authors and
/// for triage of a failure seen elsewhere.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// `id` (the highest version) or `id@version`.
    pub pack: String,
    /// The job id (or an instance id `job@resource`).
    pub job: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub output: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<FailureEvidence>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_state: Option<serde_json::Value>,
}

/// One evidence result of a [`Failure`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailureEvidence {
    pub check: String,
    pub passed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_matches: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exit_codes: Vec<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_evidence: Vec<String>,
}
