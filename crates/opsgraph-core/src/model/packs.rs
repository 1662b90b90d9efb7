//! Scenario packs: the pack manifest, plan templates and parameters, jobs with their contracts,
//! controls and run, evidence checks and artifacts.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::repair::Gate;
use crate::model::world::{Provision, Requirement};
use crate::model::Attributes;

// ---------------------------------------------------------------------------------------------
// Packs, templates, jobs

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RiskLevel {
    #[default]
    Low,
    Medium,
    High,
    Critical,
}

impl fmt::Display for RiskLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RiskLevel::Low => "low",
            RiskLevel::Medium => "medium",
            RiskLevel::High => "high",
            RiskLevel::Critical => "critical",
        })
    }
}

/// The manifest of a pack directory (`pack.yaml`, seed §15).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScenarioPack {
    pub id: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub resource_types: Vec<String>,
    #[serde(default)]
    pub actions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<Requirement>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provides: Vec<Provision>,
    #[serde(default)]
    pub plan_templates: Vec<PlanTemplateRef>,
    #[serde(default)]
    pub editable: Editable,
    #[serde(default)]
    pub risk: Risk,
    /// Library scripts (`scripts/lib/NAME.sh`) staged beside every script job's script, wherever
    /// it runs, in the directory `OPSGRAPH_LIB` names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub libraries: Vec<String>,
    /// How each resource type the pack manages is observed and verified after day 1 ([I]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceSpec>,
}

/// How a managed resource type is kept right after its first operation ([I]): the evidence that
/// verifies it, the evidence whose captures are its observed state, and how often.
///
/// Checks run where the instances of a job of `on` ran in the resource's latest completed
/// operation that has them (one per host of a fanned-out job), with that instance's environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    #[serde(rename = "type")]
    pub type_: String,
    /// The jobs whose instances give the checks their place and environment: the one the
    /// resource's latest operation ran (a type several templates create, such as a cluster with
    /// one control-plane node or three, names each template's verification job).
    pub on: Vec<String>,
    /// Between two verifications by `opsgraph serve` (`30s`, `5m`).
    pub interval: String,
    /// Evidence checks that must pass for the resource to be `running`.
    #[serde(default)]
    pub verify: Vec<String>,
    /// Evidence checks with `capture`: their captured values are the observed state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observe: Vec<String>,
}

impl ScenarioPack {
    /// The verification of a resource type, when the pack declares one.
    pub fn resource_spec(&self, type_: &str) -> Option<&ResourceSpec> {
        self.resources.iter().find(|r| r.type_ == type_)
    }

    /// `Tempo` for `tempo`: how the pack is named in sentences.
    pub fn display_title(&self) -> String {
        self.title.clone().unwrap_or_else(|| {
            let mut chars = self.id.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect(),
                None => String::new(),
            }
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanTemplateRef {
    pub id: String,
    /// The job the plan starts from (informational; it must be one of the template's jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Editable {
    /// `false` said explicitly: a plan of this pack may only be patched with `retry` (no job
    /// inserted, skipped or re-parameterised, no gate added). Absent: anything the patch
    /// review allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advanced_mode: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Risk {
    #[serde(default)]
    pub default_level: RiskLevel,
    /// Risk level from which an approval gate is placed before the first jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_from: Option<RiskLevel>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ParamType {
    String,
    Integer,
    Number,
    Boolean,
    List,
    Map,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParamSpec {
    #[serde(rename = "type")]
    pub type_: ParamType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, rename = "enum", skip_serializing_if = "Vec::is_empty")]
    pub enum_: Vec<serde_json::Value>,
    /// A secret parameter: encrypted at rest, masked in output.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
    /// The value names an artifact of this id produced by an earlier operation
    /// (`<operation>/<artifact>`); each job gets its file as a required artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<String>,
    /// A decision for this one action (`force`, `purge`): a day-2 plan never takes it from the
    /// resource's record, so an earlier operation's `force: true` does not force a later one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub once: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScopeSpec {
    pub resource_type: String,
    /// Where the resources come from: `targets.<name>` of the intent; several are joined.
    pub from: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
}

impl ScopeSpec {
    /// The scope of every resource of `resource_type` the intent names in `targets.<target>`.
    pub fn targets(resource_type: &str, target: &str) -> ScopeSpec {
        ScopeSpec { resource_type: resource_type.into(), from: vec![format!("targets.{target}")], min: None, max: None }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    pub id: String,
    pub name: String,
    pub jobs: Vec<String>,
}

/// A template's job entry: a job of the pack's library by id, or an inline job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobEntry {
    Ref(String),
    Inline(Box<Job>),
}

impl JobEntry {
    pub fn id(&self) -> &str {
        match self {
            JobEntry::Ref(id) => id,
            JobEntry::Inline(job) => &job.id,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanTemplate {
    pub id: String,
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, ParamSpec>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scopes: BTreeMap<String, ScopeSpec>,
    #[serde(default)]
    pub stages: Vec<StageSpec>,
    #[serde(default)]
    pub jobs: Vec<JobEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<Gate>,
    /// The external requirements of this action; the pack's `requires` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires: Option<Vec<Requirement>>,
    /// Overrides the pack's risk level for this action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<RiskLevel>,
    /// The resource the completed operation creates or updates, and what it then provides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provides: Vec<Provision>,
    /// The completed operation removes its resource ([I], `uninstall`): its record is deleted,
    /// its history stays.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removes_resource: bool,
    /// The resources its intent targets leave the resource ([I], `remove_node`): once it
    /// completes, the record's target lists no longer name them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removes_targets: bool,
    /// When a plan of this template is refused before anything runs ([I]): each rule's
    /// conditions, all holding, refuse it with the rule's message (`plan/refuse.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refuse: Vec<Refusal>,
}

/// A rule of a template's `refuse:` list: the plan is refused, with `message`, when every
/// condition of `when` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Refusal {
    pub when: Vec<Condition>,
    pub message: String,
}

/// One condition of a refusal: a value (`of`) or the number of its items (`count_of`), and one
/// test of it. Both are written flat: `{count_of: params.members, parity: even}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Condition {
    #[serde(flatten)]
    pub subject: Subject,
    #[serde(flatten)]
    pub test: Test,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Subject {
    /// The value a reference names ([`ValueRef`]).
    Of(String),
    /// How many items it has: a list's, or a comma-separated string's non-empty items.
    CountOf(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    Equals(serde_json::Value),
    NotEquals(serde_json::Value),
    Below(f64),
    Above(f64),
    Parity(Parity),
    /// Every item of the list the reference names is among the subject's items.
    IncludesAll(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Parity {
    Even,
    Odd,
}

/// What a refusal's reference names: the plan's parameter (given, inherited or defaulted), the
/// recorded resource's parameter or target list, the plan's target list, or an observed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRef<'a> {
    Param(&'a str),
    Targets(&'a str),
    Recorded(&'a str),
    RecordedTargets(&'a str),
    Observed(&'a str),
}

impl<'a> ValueRef<'a> {
    /// `params.NAME`, `targets.NAME`, `recorded.NAME`, `recorded.targets.NAME`, `observed.NAME`.
    pub fn parse(text: &'a str) -> Option<ValueRef<'a>> {
        let (head, name) = text.split_once('.')?;
        let r = match head {
            "params" => ValueRef::Param(name),
            "targets" => ValueRef::Targets(name),
            "recorded" => match name.strip_prefix("targets.") {
                Some(t) => ValueRef::RecordedTargets(t),
                None => ValueRef::Recorded(name),
            },
            "observed" => ValueRef::Observed(name),
            _ => return None,
        };
        let name = match r {
            ValueRef::Param(n)
            | ValueRef::Targets(n)
            | ValueRef::Recorded(n)
            | ValueRef::RecordedTargets(n)
            | ValueRef::Observed(n) => n,
        };
        // Observed values of one host are `name@host`.
        let ok = match r {
            ValueRef::Observed(n) => n
                .split_once('@')
                .map_or(crate::model::is_id(n), |(a, b)| crate::model::is_id(a) && crate::model::is_id(b)),
            _ => crate::model::is_id(name),
        };
        ok.then_some(r)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobType {
    #[default]
    Automation,
    Verification,
    Diagnostic,
    Rollback,
    Noop,
}

/// A job's contract (seed §8) and how it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Job {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, rename = "type")]
    pub type_: JobType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<JobScope>,
    #[serde(default)]
    pub inputs: Inputs,
    #[serde(default)]
    pub outputs: Outputs,
    #[serde(default)]
    pub controls: Controls,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<Run>,
    /// Ordering that no contract expresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobScope {
    /// Resource types the job runs on (seed §8).
    #[serde(default)]
    pub resources: Vec<String>,
    /// The template scope the job fans out over; inferred from the scoped requirements when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: Attributes,
    #[serde(default)]
    pub requires: Requires,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Requires {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<Requirement>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    #[serde(default)]
    pub provides: Provides,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Provides {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<Provision>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Controls {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency: Option<Idempotency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<Rollback>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual_intervention: Option<ManualIntervention>,
    /// A destructive job gets a destructive_action gate before it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub destructive: bool,
    /// How the job's instances (one per resource of its scope) run relative to each other.
    /// Boxed: most jobs have none, and it would make every document as large as a job.
    #[serde(default, skip_serializing_if = "Rollout::is_default")]
    pub rollout: Box<Rollout>,
}

/// How a fanned-out job's instances run relative to each other: an order, and for a fleet
/// rollout waves, a limit in flight, failure budgets, a pause between waves and a canary gate.
/// `parallel` and `one_at_a_time` are short forms of `{order: ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollout {
    #[serde(default, skip_serializing_if = "RolloutOrder::is_parallel")]
    pub order: RolloutOrder,
    /// Wave sizes in the scope's order; the last one repeats until every instance has a wave.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waves: Vec<Amount>,
    /// At most this many instances of the job run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<Amount>,
    /// Failed instances tolerated over the whole rollout (a percentage of its instances, rounded
    /// down); one more pauses the operation. 0 when the rollout has waves and no budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<Amount>,
    /// Failed instances tolerated within one wave (a percentage of the wave, rounded down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures_per_wave: Option<Amount>,
    /// The time between the end of a wave and the start of the next (`10m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_between: Option<String>,
    /// A gate after the first wave: a person looks at the canary before the rest runs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub canary_gate: bool,
    /// Where the checks between waves run (the job's evidence and its resource type's
    /// verification): on the hosts done so far (the default), also on the whole resource, or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_between_waves: Option<VerifyBetween>,
}

/// Where a fleet rollout's checks between waves run ([P]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifyBetween {
    /// The job's evidence and the resource's checks on every host done so far.
    #[default]
    HostsDone,
    /// Those, and the resource's checks on every host of the rollout not failed (done or not
    /// yet touched): is the whole resource still healthy?
    Resource,
    /// No checks between waves.
    None,
}

impl Rollout {
    pub fn is_default(&self) -> bool {
        *self == Rollout::default()
    }

    /// A fleet rollout: waves, budgets, a limit in flight or a canary (more than an order).
    pub fn is_fleet(&self) -> bool {
        Rollout { order: self.order, ..Rollout::default() } != *self
    }
}

/// The order of a job's instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RolloutOrder {
    /// All at once, as their dependencies allow.
    #[default]
    Parallel,
    /// In the order of the scope's resources, each instance after the one before it has
    /// succeeded: a rolling change (an upgrade that keeps a quorum or capacity serving).
    OneAtATime,
}

impl RolloutOrder {
    pub fn is_parallel(&self) -> bool {
        *self == RolloutOrder::Parallel
    }
}

/// A number of instances: a count, or a percentage of a whole (`5%`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Amount {
    Count(u64),
    Percent(u32),
}

impl Amount {
    /// Of `whole`, a percentage rounded up (a wave, a limit in flight), at least `min`.
    pub fn of_up(self, whole: usize, min: usize) -> usize {
        match self {
            Amount::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Amount::Percent(p) => (whole * p as usize).div_ceil(100),
        }
        .max(min)
    }

    /// Of `whole`, a percentage rounded down (a failure budget).
    pub fn of_down(self, whole: usize) -> usize {
        match self {
            Amount::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Amount::Percent(p) => whole * p as usize / 100,
        }
    }
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Count(n) => write!(f, "{n}"),
            Amount::Percent(p) => write!(f, "{p}%"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    #[serde(default = "one")]
    pub max_attempts: u32,
    /// Delay before the second attempt (`10s`); doubled for each further attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_backoff: Option<String>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Idempotency {
    /// Template of the key: `install-containerd:{node_id}:{version}`.
    pub key: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RollbackSupport {
    Full,
    Partial,
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollback {
    pub supported: RollbackSupport,
    /// The job that undoes this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ManualIntervention {
    pub allowed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorKind {
    Local,
    Ssh,
    Http,
}

/// A command: an argv list (no shell), or a line (a shell only when it holds shell syntax).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    Argv(Vec<String>),
    Line(String),
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Argv(argv) => f.write_str(&argv.join(" ")),
            Command::Line(line) => f.write_str(line),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Run {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<ExecutorKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Command>,
    /// A script of the pack, relative to its directory, run with `sh -eu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// HTTP executor: method and URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl Run {
    /// A command run by the local executor, as given (no shell): benchmarks' and tests' jobs.
    pub fn local(argv: Vec<String>) -> Run {
        Run {
            executor: Some(ExecutorKind::Local),
            command: Some(Command::Argv(argv)),
            script: None,
            timeout: None,
            env: BTreeMap::new(),
            workdir: None,
            method: None,
            url: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Evidence and artifacts

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceSource {
    Command,
    Systemd,
    Http,
    Tcp,
    File,
}

/// One evidence check (seed §10): proof that an output really exists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    pub id: String,
    pub source: EvidenceSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Command>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Trimmed stdout (or file content, or body) equals this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Values the check observes ([I]): name -> a regular expression whose first group, found in
    /// the output (body, file content), is the value. A passing check whose capture does not
    /// match fails: an observation that saw nothing proves nothing.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capture: BTreeMap<String, String>,
}

impl Evidence {
    /// A check with only its id and source: the start for code that builds one (tests, fixtures).
    pub fn new(id: &str, source: EvidenceSource) -> Self {
        Evidence {
            id: id.to_owned(),
            source,
            description: None,
            command: None,
            url: None,
            host: None,
            port: None,
            path: None,
            expected: None,
            expected_exit_code: None,
            expected_status: None,
            contains: None,
            matches: None,
            retries: None,
            interval: None,
            timeout: None,
            capture: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Sensitivity {
    Public,
    Internal,
    Confidential,
    Secret,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactStorage {
    Blob,
    SecretRef,
}

/// A declared artifact (seed §9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// Defaults to `type`.
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub sensitivity: Sensitivity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<ArtifactStorage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub visible_to_roles: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where the job leaves it, when not `$OPSGRAPH_OUT/<id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_file: Option<String>,
}
