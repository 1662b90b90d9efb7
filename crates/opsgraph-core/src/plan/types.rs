//! The plan's types: what a plan is made from ([`Input`]), a plan revision and its parts, the
//! reviewer's findings, and the revision's content hash. Below every other module of the crate:
//! building (`plan`), editing (`edit`), patching (`patch`), rendering and digesting all use them,
//! and they use none of those.

use std::collections::BTreeSet;

use crate::model::{
    Attributes, CapabilityPolicy, GateType, Intent, OperationsPolicy, PlanTemplate, Provider, RiskLevel,
};
use crate::pack::Pack;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::plan::day2::{Inherited, Recorded};
use crate::plan::resolve::{Inventory, Outcome, Resolution};

/// What a secret parameter's value is shown as in a preview, and counted as in a plan's hash.
pub const SECRET: &str = "(secret)";

/// Everything a plan is made from.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub intent: &'a Intent,
    pub packs: &'a [Pack],
    pub inventory: &'a Inventory<'a>,
    /// Providers of the world; the packs' own providers are added to them.
    pub providers: &'a [Provider],
    pub policy: &'a CapabilityPolicy,
    /// Rules about whole operations: the cost confirmation threshold.
    pub operations: &'a OperationsPolicy,
    /// What the store recorded about the resource the intent names, if anything ([I]): a day-2
    /// action plans against it (`day2.rs`).
    pub recorded: Option<&'a Recorded>,
    /// The requesting identity's roles ([O]): policy rules may match on them (`roles` in their
    /// expressions). The server's identity, or the local user's roles from `config.yaml`.
    pub roles: &'a [String],
}

/// A plan revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Plan {
    /// `id@version` of the pack the plan comes from.
    pub pack: String,
    /// The pack's content digest (`sha256:<hex>`), when it was read from files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack_digest: Option<String>,
    pub template: String,
    pub action: String,
    pub intent: Intent,
    pub parameters: Attributes,
    /// How each requirement was bound (protocol §2's `capability_bindings`; stored plans written
    /// before [O] call it `resolution`, still read).
    #[serde(rename = "capability_bindings", alias = "resolution")]
    pub resolution: Vec<Resolution>,
    pub stages: Vec<Stage>,
    pub jobs: Vec<JobInstance>,
    pub gates: Vec<PlanGate>,
    pub risk: Risk,
    pub sub_operations: Vec<SubOperation>,
    /// The cost estimate, from the cost annotations of jobs and created providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// `sha256:` over every input the plan was built from besides its intent (packs, resources,
    /// providers, policies): part of its hash, so a changed world changes the hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<String>,
    /// What the reviewer points out before the plan runs (derived; not part of its hash).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub review: Vec<Finding>,
    /// The template's secret parameters: their values are not part of the hash (shown as
    /// `(secret)` there, as in the preview), so a published hash cannot be used to guess them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub secret_parameters: BTreeSet<String>,
    /// A day-2 action on a recorded resource ([I]): what it took from the record and what it
    /// changes (derived for the preview; its effect on parameters and jobs is hashed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherited: Option<Inherited>,
    /// The template removes its resource: when the operation completes, the resource's record
    /// is deleted and its history stays.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removes_resource: bool,
    /// The template removes what the intent targets from the resource (`remove_node`): the
    /// record's target lists no longer name them once it completes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removes_targets: bool,
    /// A rollback plan: the operation it undoes (set by the runtime, which knows it). Once the
    /// rollback completes, that operation no longer counts in the resource's record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolls_back: Option<String>,
    /// The patches that changed it since it was built ([O], protocol §2's `customizations`),
    /// oldest first: not part of its hash (the changes themselves are).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub customizations: Vec<Customization>,
    /// The fleet rollouts of fanned-out jobs (`controls.rollout` with waves or budgets): their
    /// waves, limits and budgets as counts, which the runtime enforces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollouts: Vec<crate::plan::rollout::RolloutPlan>,
    pub revision: Revision,
}

/// One patch applied to a plan: which, by whom, what it changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Customization {
    /// The patch's id, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The revision it made.
    pub revision: u32,
    /// The diff, one line a change (`+ job backup-db before migrate`).
    pub diff: Vec<String>,
}

/// What a plan is estimated to cost, item by item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cost {
    pub total: f64,
    /// `cost_unit` of the operations policy, when it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    pub items: Vec<CostItem>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CostItem {
    /// `job install-runtime × 3`, `provider dedicated_minio`.
    pub what: String,
    pub amount: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Revision {
    pub number: u32,
    /// `sha256:<hex>` over the plan's content.
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Stage {
    pub id: String,
    pub name: String,
    pub jobs: Vec<String>,
}

/// One job of the template, on one resource of its scope (or once, unscoped).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobInstance {
    /// `install-runtime@worker-3`, or the job id when unscoped.
    pub id: String,
    pub job: String,
    pub title: Option<String>,
    pub stage: String,
    pub scope: Option<String>,
    pub resource: Option<String>,
    /// Job instances and gates this one waits for.
    pub depends_on: Vec<String>,
    /// Why each dependency exists, in the order of `depends_on`.
    pub because: Vec<String>,
    pub destructive: bool,
    /// Skipped by a patch, with its reason: counts as done, does not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Parameters a patch set for this job alone (they win over the plan's).
    #[serde(default, skip_serializing_if = "Attributes::is_empty")]
    pub parameters: Attributes,
    /// The wave (1, 2, …) of a fleet rollout this instance belongs to (`Plan::rollouts`): it
    /// starts once every instance of the job's earlier waves has finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<u32>,
    /// The checks between two waves of a fleet rollout ([P]): this instance runs no job of the
    /// pack; it checks the rollout's evidence once wave `wave` of `job` finished (and its pause
    /// passed), and the next wave waits for it to pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifies: Option<crate::plan::rollout::WaveRef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanGate {
    pub id: String,
    #[serde(rename = "type")]
    pub type_: GateType,
    pub reason: String,
    pub options: Vec<String>,
    pub required_roles: Vec<String>,
    /// The job instances that wait for the answer.
    pub before: Vec<String>,
    /// What placed it.
    pub source: GateSource,
    /// The job instances that must have finished (done or failed) before the gate can be
    /// answered: a canary gate opens once its first wave ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opens_after: Vec<String>,
}

/// What placed a gate in a plan (`resolution`, `template`, … in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GateSource {
    /// A requirement the resolution cannot decide alone (ambiguous, or approval by policy).
    Resolution,
    /// The template's own gate.
    Template,
    /// An exception to a soft policy.
    Policy,
    /// A required parameter the intent did not give.
    MissingInput,
    /// A destructive job.
    Destructive,
    /// The plan's risk needs an approval.
    Risk,
    /// The cost estimate needs a confirmation.
    Cost,
    /// A plan patch's `add_gate`.
    Patch,
    /// A fleet rollout's canary gate, after its first wave.
    Rollout,
}

impl GateSource {
    /// Answered before the run starts; the others block only their descendants, mid-run.
    pub fn is_pre_run(self) -> bool {
        matches!(
            self,
            GateSource::Resolution
                | GateSource::Risk
                | GateSource::MissingInput
                | GateSource::Policy
                | GateSource::Cost
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Risk {
    pub level: RiskLevel,
    pub reasons: Vec<String>,
}

/// The plan of a provider's create action, run first as a child operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SubOperation {
    pub requirement: String,
    pub provider: String,
    /// `true` when the resolution creates it; `false` when it is one option of a gate.
    pub chosen: bool,
    pub plan: Option<Box<Plan>>,
    pub error: Option<String>,
}

impl Plan {
    /// An empty plan: building is applying edits to it.
    pub(crate) fn empty(pack: &Pack, template: &PlanTemplate, intent: &Intent) -> Plan {
        Plan {
            pack: pack.reference(),
            pack_digest: Some(pack.digest.clone()).filter(|d| !d.is_empty()),
            template: template.id.clone(),
            action: template.action.clone(),
            intent: intent.clone(),
            parameters: Attributes::new(),
            resolution: Vec::new(),
            stages: Vec::new(),
            jobs: Vec::new(),
            gates: Vec::new(),
            risk: Risk { level: RiskLevel::Low, reasons: Vec::new() },
            sub_operations: Vec::new(),
            cost: None,
            inputs: None,
            review: Vec::new(),
            secret_parameters: template
                .parameters
                .iter()
                .filter(|(_, spec)| spec.secret)
                .map(|(name, _)| name.clone())
                .collect(),
            inherited: None,
            removes_resource: template.removes_resource,
            removes_targets: template.removes_targets,
            rolls_back: None,
            customizations: Vec::new(),
            rollouts: Vec::new(),
            revision: Revision { number: 0, hash: String::new() },
        }
    }

    /// True when a requirement cannot be met: the plan cannot run.
    pub fn is_blocked(&self) -> bool {
        self.resolution.iter().any(|r| matches!(r.outcome, Outcome::Unsatisfiable { .. }))
    }

    /// `sha256:<hex>` over the plan's content, serialised straight into the hasher. The values of
    /// secret parameters count as `(secret)`: the hash covers what the preview shows, and an
    /// unkeyed digest over a password would let whoever sees the hash test guesses offline.
    pub(crate) fn content_hash(&self) -> String {
        if self.secret_parameters.is_empty() {
            return self.hash_of(&self.intent, &self.parameters, &self.jobs);
        }
        let mask = |attrs: &Attributes| -> Attributes {
            attrs
                .iter()
                .map(|(k, v)| {
                    let v = if self.secret_parameters.contains(k) { Value::from(SECRET) } else { v.clone() };
                    (k.clone(), v)
                })
                .collect()
        };
        let mut intent = self.intent.clone();
        intent.parameters = mask(&intent.parameters);
        let jobs: Vec<JobInstance> =
            self.jobs.iter().map(|j| JobInstance { parameters: mask(&j.parameters), ..j.clone() }).collect();
        self.hash_of(&intent, &mask(&self.parameters), &jobs)
    }

    fn hash_of(&self, intent: &Intent, parameters: &Attributes, jobs: &[JobInstance]) -> String {
        #[derive(Serialize, schemars::JsonSchema)]
        struct Content<'a> {
            pack: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            pack_digest: &'a Option<String>,
            template: &'a str,
            intent: &'a Intent,
            parameters: &'a Attributes,
            resolution: Vec<&'a Outcome>,
            stages: &'a [Stage],
            jobs: &'a [JobInstance],
            gates: &'a [PlanGate],
            #[serde(skip_serializing_if = "Option::is_none")]
            cost: &'a Option<Cost>,
            #[serde(skip_serializing_if = "Option::is_none")]
            inputs: &'a Option<String>,
        }
        let content = Content {
            pack: &self.pack,
            pack_digest: &self.pack_digest,
            template: &self.template,
            intent,
            parameters,
            resolution: self.resolution.iter().map(|r| &r.outcome).collect(),
            stages: &self.stages,
            jobs,
            gates: &self.gates,
            cost: &self.cost,
            inputs: &self.inputs,
        };
        sha256_json(&content)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The patch is refused.
    Error,
    /// Applied, but a person should look.
    Warning,
    /// What the reviewer did or noticed (a gate it added).
    Info,
}

/// One thing the reviewer found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    pub severity: Severity,
    /// A stable code: `unknown-job`, `contract`, `skip-required`, `parameter`, `cycle`, ...
    pub code: String,
    /// The change it is about (0-based), if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<usize>,
    pub message: String,
}

/// `sha256:<hex>` over `value`'s JSON, serialised straight into the hasher.
pub(crate) fn sha256_json<T: Serialize + ?Sized>(value: &T) -> String {
    struct Hasher(Sha256);
    impl std::io::Write for Hasher {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hasher = Hasher(Sha256::new());
    serde_json::to_writer(&mut hasher, value).expect("plan inputs always serialise");
    let digest = hasher.0.finalize();
    let mut hex = String::with_capacity(71);
    hex.push_str("sha256:");
    for b in digest.iter() {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

/// `640`, `12.5`: a figure without noise.
pub(crate) fn amount(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x:.2}")
    }
}
