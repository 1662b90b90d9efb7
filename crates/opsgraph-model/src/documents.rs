//! The documents users write (documents.md): one struct per kind, plus the parts they share.
//!
//! Field names follow the YAML exactly. Alternative short forms (`- kubernetes.cluster` for a
//! requirement, a job id for an inline job) are normalised by `opsgraph-pack` before these types
//! see them, so each type here has exactly one shape.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Attributes;

/// One YAML document, by kind. The root key of the document names the variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[expect(clippy::large_enum_variant, reason = "documents are loaded once, at most thousands of them")]
pub enum Document {
    Resource(Resource),
    Provider(Provider),
    CapabilityPolicy(CapabilityPolicy),
    OperationsPolicy(OperationsPolicy),
    Intent(Intent),
    ScenarioPack(ScenarioPack),
    PlanTemplate(PlanTemplate),
    Job(Job),
    Evidence(Vec<Evidence>),
    Artifact(Artifact),
    Gate(Gate),
    Intervention(Intervention),
    PlanPatch(PlanPatch),
    Remedy(Remedy),
    Failure(Failure),
    /// The seed's §5 fragment: a bare `requires:` list.
    Requires(Vec<Requirement>),
}

impl Document {
    pub fn kind(&self) -> &'static str {
        match self {
            Document::Resource(_) => "resource",
            Document::Provider(_) => "provider",
            Document::CapabilityPolicy(_) => "capability_policy",
            Document::OperationsPolicy(_) => "operations_policy",
            Document::Intent(_) => "intent",
            Document::ScenarioPack(_) => "scenario_pack",
            Document::PlanTemplate(_) => "plan_template",
            Document::Job(_) => "job",
            Document::Evidence(_) => "evidence",
            Document::Artifact(_) => "artifact",
            Document::Gate(_) => "gate",
            Document::Intervention(_) => "intervention",
            Document::PlanPatch(_) => "plan_patch",
            Document::Remedy(_) => "remedy",
            Document::Failure(_) => "failure",
            Document::Requires(_) => "requires",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Inventory

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Healthy,
    Degraded,
    Error,
    #[default]
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceStatus {
    Provisioning,
    Running,
    Degraded,
    Error,
}

/// A managed object (seed §2, §4): a host, a cluster, a bucket, a database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resource {
    /// `<type>/<name>`; filled in from `type` and `name` when the document leaves it out.
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// The provider id that policies name (`shared_minio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: Attributes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_state: Option<String>,
    #[serde(default)]
    pub health: Health,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ResourceStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provides: Vec<ProvidedCapability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
    /// Capability -> where the credentials to use it are: an absolute file path, or
    /// `artifact:<operation>/<artifact>` for one an operation produced.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub credentials: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvidedCapability {
    pub capability: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: Attributes,
}

/// How executors reach a resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Access {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<SshAccess>,
    /// The resource is this machine (lab nodes, localhost).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local: bool,
    /// Jobs for this resource go to a remote agent instead of SSH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshAccess {
    pub host: String,
    #[serde(default = "default_ssh_port")]
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Path of the private key file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Path of the known_hosts file to check the host key against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_hosts: Option<String>,
}

fn default_ssh_port() -> u16 {
    22
}

// ---------------------------------------------------------------------------------------------
// Providers and policy

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BindMode {
    /// A person describes an existing resource outside the inventory at a gate.
    External,
}

/// What `allowed_providers` and `default_provider` name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    pub id: String,
    pub capability: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The attributes every resource of this provider has (constraints are checked against them
    /// before a provider is offered for creation).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: Attributes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<CreateAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<BindMode>,
    /// Estimated monthly cost of creating one, for cost confirmation gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

impl Provider {
    pub fn title(&self) -> String {
        self.title.clone().unwrap_or_else(|| self.id.clone())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateAction {
    pub pack: String,
    pub action: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: Attributes,
}

/// `capability_policy`: capability key -> environment -> rule (seed §6).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CapabilityPolicy {
    pub rules: BTreeMap<String, BTreeMap<String, EnvironmentPolicy>>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentPolicy {
    /// `None`: any provider; `Some([])`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_providers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_provider: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_encryption: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_approval: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_roles: Vec<String>,
    /// Rules a plan may break only by exception: a `policy_exception` gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft: Option<SoftPolicy>,
    /// The roles that grant an exception to `soft` (default `platform_admin`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exception_roles: Vec<String>,
}

/// The soft part of an environment policy: what is preferred, and breakable by exception.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoftPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_providers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_encryption: bool,
    /// Why the rule exists, shown at the gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `operations_policy`: environment (or `default`) -> rules about operations as a whole.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OperationsPolicy {
    pub environments: BTreeMap<String, EnvironmentOperations>,
}

impl OperationsPolicy {
    /// The rule of an environment, else the `default` one.
    pub fn for_environment(&self, env: Option<&str>) -> Option<&EnvironmentOperations> {
        env.and_then(|e| self.environments.get(e)).or_else(|| self.environments.get("default"))
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentOperations {
    /// A plan whose cost estimate is above this needs a `cost_confirmation` gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_cost_above: Option<f64>,
    /// The roles that confirm the cost (default `sre`, `platform_admin`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cost_roles: Vec<String>,
    /// How cost figures are labelled (`USD/month`); display only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_unit: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Intent and requirements

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub target_resource_type: String,
    pub action: String,
    /// The pack to use; by default the one whose `resource_types` holds the target type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_result: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: Attributes,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub constraints: Attributes,
    /// Scope name -> the resource ids it is bound to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub targets: BTreeMap<String, Vec<String>>,
    /// Requirements beyond the pack's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<Requirement>,
}

/// A capability requirement (seed §2, §5): key, constraints, scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    pub capability: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub constraints: Attributes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// What a job or pack provides: a capability, in a scope, with the attributes it will have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provision {
    pub capability: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// A provider id the pack can create (`dedicated_minio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: Attributes,
    /// The artifact of the operation that holds the credentials to use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Packs, templates, jobs

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

impl ScenarioPack {
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanTemplateRef {
    pub id: String,
    /// The job the plan starts from (informational; it must be one of the template's jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Editable {
    #[serde(default)]
    pub advanced_mode: bool,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Risk {
    #[serde(default)]
    pub default_level: RiskLevel,
    /// Risk level from which an approval gate is placed before the first jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_from: Option<RiskLevel>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamType {
    String,
    Integer,
    Number,
    Boolean,
    List,
    Map,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    pub id: String,
    pub name: String,
    pub jobs: Vec<String>,
}

/// A template's job entry: a job of the pack's library by id, or an inline job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobScope {
    /// Resource types the job runs on (seed §8).
    #[serde(default)]
    pub resources: Vec<String>,
    /// The template scope the job fans out over; inferred from the scoped requirements when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: Attributes,
    #[serde(default)]
    pub requires: Requires,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requires {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<Requirement>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    #[serde(default)]
    pub provides: Provides,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provides {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<Provision>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Idempotency {
    /// Template of the key: `install-containerd:{node_id}:{version}`.
    pub key: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RollbackSupport {
    Full,
    Partial,
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rollback {
    pub supported: RollbackSupport,
    /// The job that undoes this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManualIntervention {
    pub allowed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorKind {
    Local,
    Ssh,
    Http,
}

/// A command: an argv list (no shell), or a line (a shell only when it holds shell syntax).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

// ---------------------------------------------------------------------------------------------
// Evidence and artifacts

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceSource {
    Command,
    Systemd,
    Http,
    Tcp,
    File,
}

/// One evidence check (seed §10): proof that an output really exists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sensitivity {
    Public,
    Internal,
    Confidential,
    Secret,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactStorage {
    Blob,
    SecretRef,
}

/// A declared artifact (seed §9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

// ---------------------------------------------------------------------------------------------
// Gates, interventions, patches, remedies

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
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

/// A gate (seed §12): a DAG node that blocks its descendants until a person answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterventionType {
    ManuallyFixed,
}

/// A recorded manual fix (seed §13), verified before the run goes on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub roles: Vec<String>,
}

/// A known failure signature a pack ships, with its diagnosis and patch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Remedy {
    pub id: String,
    pub applies_to: Vec<String>,
    pub signature: Signature,
    pub diagnosis: String,
    pub plan_patch: PlanPatch,
    /// Outputs the signature must and must not match (`opsgraph pack test`).
    #[serde(default, skip_serializing_if = "RemedyExamples::is_empty")]
    pub examples: RemedyExamples,
}

/// A remedy's examples: failures its signature must recognise, and near misses it must not.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureEvidence {
    pub check: String,
    pub passed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_matches: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exit_codes: Vec<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_evidence: Vec<String>,
}
