//! The JSON preview of a plan as a type (`opsgraph plan -o json`, `POST /api/v1/plans`,
//! `GET /api/v1/operations/{id}/plan`): what `render::json` writes, so that the API's OpenAPI
//! document describes it from the same Rust type that produces it.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::model::{Attributes, Intent};
use crate::plan::day2::Inherited;
use crate::plan::resolve::{GateOption, Outcome, Rejection, Resolution};
use crate::plan::rollout::{RolloutPlan, WaveRef};
use crate::plan::types::{Cost, Finding, PlanGate, Revision, Risk, Stage};

/// A plan's status in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    /// A requirement is unsatisfiable: the plan cannot run.
    Blocked,
    /// It runs once people answer its gates.
    WaitingForGates,
    Ready,
}

/// A plan preview. Secret parameter values read `(secret)`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Preview {
    /// `id@version` of the pack.
    pub pack: String,
    pub pack_digest: Option<String>,
    pub template: String,
    pub action: String,
    pub intent: Intent,
    pub revision: Revision,
    pub status: PlanStatus,
    pub parameters: Attributes,
    /// Every requirement: bound, created, gated or unsatisfiable, with the rejected candidates.
    pub resolution: Vec<PreviewResolution>,
    pub stages: Vec<Stage>,
    pub jobs: Vec<PreviewJob>,
    pub gates: Vec<PlanGate>,
    pub risk: Risk,
    pub cost: Option<Cost>,
    pub review: Vec<Finding>,
    /// Providers a resolution would create, each with its own plan.
    pub sub_operations: Vec<PreviewSubOperation>,
    /// Fleet rollouts of fanned-out jobs: waves, limits, budgets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollouts: Vec<RolloutPlan>,
    /// A day-2 action's change to its recorded resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherited: Option<Inherited>,
    /// The preview a person reads, as `opsgraph plan` prints it (`?format=text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// The outcome of one requirement, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeName {
    Bind,
    Create,
    Gate,
    Unsatisfiable,
}

/// How one requirement was resolved. The fields after `considered` depend on `outcome`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PreviewResolution {
    /// The capability required.
    pub requirement: String,
    pub constraints: Attributes,
    pub scope: Option<String>,
    pub required_by: Vec<String>,
    pub outcome: OutcomeName,
    /// The provider bound or created; `scope NAME` for a scope's resources.
    pub provider: Option<String>,
    pub rejected: Vec<Rejection>,
    /// Every rejected candidate, beyond those listed.
    pub rejected_total: usize,
    pub rejected_by_rule: BTreeMap<String, usize>,
    pub considered: usize,
    /// `bind`: the resource bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// `bind`: why that one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub because: Option<String>,
    /// `bind` of a scope's requirement: each resource of the scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
    /// `create`: the pack action that creates the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<PreviewCreate>,
    /// `gate`: the gate a person answers, and its options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<GateOption>>,
    /// `unsatisfiable`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The pack action a created provider comes from.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PreviewCreate {
    pub pack: String,
    pub action: String,
    pub parameters: Attributes,
}

/// A job instance of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PreviewJob {
    /// `job` or `job@resource` when fanned out.
    pub id: String,
    pub job: String,
    pub title: Option<String>,
    pub stage: String,
    pub scope: Option<String>,
    pub resource: Option<String>,
    pub depends_on: Vec<String>,
    /// Why each dependency exists (the contract that made it).
    pub because: Vec<String>,
    pub destructive: bool,
    /// A check between waves: the wave it verifies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifies: Option<WaveRef>,
    /// The wave of a fleet rollout it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<u32>,
}

/// A provider a resolution would create (or a gate offers to), with its plan or why it has none.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PreviewSubOperation {
    pub requirement: String,
    pub provider: String,
    /// `true` when the resolution creates it; `false` when it is one option of a gate.
    pub chosen: bool,
    pub error: Option<String>,
    pub plan: Option<Box<Preview>>,
}

impl PreviewResolution {
    pub(crate) fn of(r: &Resolution) -> PreviewResolution {
        let mut v = PreviewResolution {
            requirement: r.requirement.capability.clone(),
            constraints: r.requirement.constraints.clone(),
            scope: r.requirement.scope.clone(),
            required_by: r.required_by.clone(),
            outcome: match &r.outcome {
                Outcome::Bind { .. } | Outcome::BindScope { .. } => OutcomeName::Bind,
                Outcome::Create { .. } => OutcomeName::Create,
                Outcome::Gate { .. } => OutcomeName::Gate,
                Outcome::Unsatisfiable { .. } => OutcomeName::Unsatisfiable,
            },
            provider: None,
            rejected: r.rejected.clone(),
            rejected_total: r.rejected_by_rule.values().sum(),
            rejected_by_rule: r.rejected_by_rule.clone(),
            considered: r.considered,
            resource: None,
            because: None,
            resources: None,
            create: None,
            gate: None,
            options: None,
            reason: None,
        };
        match &r.outcome {
            Outcome::Bind { resource, provider, because } => {
                v.provider = provider.clone();
                v.resource = Some(resource.clone());
                v.because = Some(because.clone());
            }
            Outcome::BindScope { scope, resources } => {
                v.provider = Some(format!("scope {scope}"));
                v.resources = Some(resources.clone());
            }
            Outcome::Create { provider, pack, action, parameters } => {
                v.provider = Some(provider.clone());
                v.create =
                    Some(PreviewCreate { pack: pack.clone(), action: action.clone(), parameters: parameters.clone() });
            }
            Outcome::Gate { gate } => {
                v.gate = Some(gate.id.clone());
                v.options = Some(gate.options.clone());
            }
            Outcome::Unsatisfiable { reason } => v.reason = Some(reason.clone()),
        }
        v
    }
}

impl Preview {
    /// Every parameter value of the preview (its own, its intent's, its sub-operations'),
    /// passed through `f`: how a stored plan's sealed values are hidden.
    pub fn map_parameters(&mut self, f: &dyn Fn(Value) -> Value) {
        for params in [&mut self.parameters, &mut self.intent.parameters, &mut self.intent.constraints] {
            for value in params.values_mut() {
                *value = f(value.take());
            }
        }
        for s in &mut self.sub_operations {
            if let Some(plan) = &mut s.plan {
                plan.map_parameters(f);
            }
        }
    }
}
