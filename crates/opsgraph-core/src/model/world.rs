//! The world a plan is made in: resources and their access, providers and policies, intents and
//! their requirements.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Attributes;

// ---------------------------------------------------------------------------------------------
// Inventory

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Healthy,
    Degraded,
    Error,
    #[default]
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResourceStatus {
    Provisioning,
    Running,
    Degraded,
    Error,
}

/// A managed object (seed §2, §4): a host, a cluster, a bucket, a database. `Default` is for
/// code that builds one field by field (`..Default::default()`): its id, type and name are empty.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// What policies match on ([O]): the organization that owns it, how critical it is, the
    /// compliance regimes it serves (`pci`, `hipaa`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
    /// `low`, `medium`, `high`, `critical`, or the organization's own words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub criticality: Option<String>,
    /// Compliance regimes (`pci`, `hipaa`, `sox`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compliance: Vec<String>,
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
    /// What evidence observed of it ([I]): the values its pack's `observe` checks captured
    /// (`version`, `members`, `endpoint`), merged across operations and verifications.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub observed: BTreeMap<String, String>,
    /// Its last verification ([I]), whose failing checks are the reason it is degraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<Verification>,
}

/// What the last verification of a resource found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Verification {
    pub at: String,
    /// Checks run (one per check and host).
    pub checks: usize,
    /// The checks that failed, each with where, what was expected and what was observed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<FailedCheck>,
    /// The operation whose jobs gave the checks their hosts and environment.
    pub operation: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailedCheck {
    pub check: String,
    /// The job instance it ran for (`verify-etcd-cluster@compute_node/fleet-2`).
    pub on: String,
    pub expected: String,
    pub observed: String,
}

impl ResourceStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceStatus::Provisioning => "provisioning",
            ResourceStatus::Running => "running",
            ResourceStatus::Degraded => "degraded",
            ResourceStatus::Error => "error",
        }
    }

    /// The health that goes with a status.
    pub fn health(self) -> Health {
        match self {
            ResourceStatus::Provisioning => Health::Unknown,
            ResourceStatus::Running => Health::Healthy,
            ResourceStatus::Degraded => Health::Degraded,
            ResourceStatus::Error => Health::Error,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProvidedCapability {
    pub capability: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: Attributes,
}

/// How executors reach a resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BindMode {
    /// A person describes an existing resource outside the inventory at a gate.
    External,
}

/// What `allowed_providers` and `default_provider` name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAction {
    pub pack: String,
    pub action: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: Attributes,
}

/// `capability_policy`: capability key -> environment -> rule (seed §6).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct CapabilityPolicy {
    pub rules: BTreeMap<String, BTreeMap<String, EnvironmentPolicy>>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Rules with CEL expressions over the intent's context, the requester's roles and each
    /// candidate ([O]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<PolicyRule>,
    /// The roles that grant an exception to `soft` (default `platform_admin`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exception_roles: Vec<String>,
}

/// One rule of a capability policy ([O]), its expressions in CEL (compiled when the document
/// loads, `pack::expr`). `when` (default: always) may use `intent` and `roles`; `require` also
/// `candidate`, and a candidate for which it is false is rejected naming the rule.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyRule {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require: Option<String>,
    /// While `when` holds, binding or creating needs an approval gate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_approval: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_roles: Vec<String>,
    /// Why the rule exists, said with its rejections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One rule of an operations policy ([O]): `when` (CEL over `intent`, `roles`, `cost`) holds,
/// then the plan is refused (`deny`), needs an approval, or confirms its cost above another
/// threshold.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OperationsRule {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// The plan is refused, with this reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_approval: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_roles: Vec<String>,
    /// Replaces the environment's `confirm_cost_above` while `when` holds (the first such rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_cost_above: Option<f64>,
}

/// The soft part of an environment policy: what is preferred, and breakable by exception.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// What happens when a verification finds a resource of this environment degraded ([I]).
    #[serde(default, skip_serializing_if = "RepairMode::is_off")]
    pub repair: RepairMode,
    /// Rules with CEL expressions over the intent's context, the requester's roles and the
    /// plan's cost ([O]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<OperationsRule>,
    /// Job id -> its rollout in this environment ([P]): wins over the pack's and the intent's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rollouts: BTreeMap<String, crate::model::Rollout>,
}

/// The operations policy's answer to drift: a resource a verification found degraded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RepairMode {
    /// Recorded on its history; nothing is planned.
    #[default]
    Off,
    /// The pack's `repair` action is planned and created as an operation that waits for a
    /// person's approval.
    Propose,
    /// The same, started at once unless its plan has gates of its own (risk, destructive jobs):
    /// those still wait for a person.
    ApplySafe,
}

impl RepairMode {
    pub fn is_off(&self) -> bool {
        *self == RepairMode::Off
    }
}

// ---------------------------------------------------------------------------------------------
// Intent and requirements

/// `Default` is for code that builds one field by field (`..Default::default()`): its target
/// type and action are empty.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Organization, criticality, compliance tags: what policies match on ([O]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
    /// `low`, `medium`, `high`, `critical`, or the organization's own words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub criticality: Option<String>,
    /// Compliance regimes (`pci`, `hipaa`, `sox`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compliance: Vec<String>,
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
    /// Job id -> its rollout for this operation ([P]): wins over the pack's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rollouts: BTreeMap<String, crate::model::Rollout>,
}

impl Intent {
    /// The id of the resource it creates or changes (`type/name`), when it names one.
    pub fn resource_id(&self) -> Option<String> {
        self.name.as_ref().map(|n| format!("{}/{n}", self.target_resource_type))
    }
}

/// A capability requirement (seed §2, §5): key, constraints, scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    pub capability: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub constraints: Attributes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// What a job or pack provides: a capability, in a scope, with the attributes it will have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
