//! The outcome of capability resolution, as data: the inventory index, the context a requirement
//! is resolved in, and each requirement's resolution with its rejected candidates.

use std::collections::{BTreeMap, HashMap};

use crate::model::{
    Attributes, CapabilityPolicy, EnvironmentPolicy, GateType, Intent, Provider, Requirement, Resource,
};
use serde::{Deserialize, Serialize};

use crate::plan::columns::{Group, Strings};

/// How many rejected candidates are listed one by one; the rest are counted by rule.
pub const REJECTION_LIMIT: usize = 50;

/// Resources indexed by the capabilities they provide. Built once per inventory.
#[derive(Debug)]
pub struct Inventory<'a> {
    pub(crate) resources: &'a [Resource],
    pub(crate) by_id: HashMap<&'a str, u32>,
    pub(crate) by_capability: HashMap<&'a str, CapabilityIndex<'a>>,
    pub(crate) strings: Strings<'a>,
}

/// The providers of one capability, grouped by environment so that a requirement in `prod`
/// evaluates only prod (and environment-less) candidates and counts the rest in bulk.
#[derive(Debug, Default)]
pub(crate) struct CapabilityIndex<'a> {
    pub(crate) by_env: BTreeMap<Option<&'a str>, Group>,
}

impl<'a> Inventory<'a> {
    pub fn new(resources: &'a [Resource]) -> Inventory<'a> {
        let mut by_id = HashMap::with_capacity(resources.len());
        let mut by_capability: HashMap<&str, CapabilityIndex<'a>> = HashMap::new();
        let mut strings = Strings::default();
        for (i, r) in resources.iter().enumerate() {
            by_id.insert(r.id.as_str(), i as u32);
            for (j, c) in r.provides.iter().enumerate() {
                by_capability
                    .entry(c.capability.as_str())
                    .or_default()
                    .by_env
                    .entry(r.environment.as_deref())
                    .or_default()
                    .push(&mut strings, r, i as u32, j as u32);
            }
        }
        Inventory { resources, by_id, by_capability, strings }
    }

    pub fn get(&self, id: &str) -> Option<&'a Resource> {
        self.by_id.get(id).map(|&i| &self.resources[i as usize])
    }

    pub fn resources(&self) -> &'a [Resource] {
        self.resources
    }
}

/// The world a requirement is resolved in.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub inventory: &'a Inventory<'a>,
    pub providers: &'a [Provider],
    pub policy: &'a CapabilityPolicy,
    pub intent: &'a Intent,
    /// `Tempo`: how the requiring pack is named in gate reasons.
    pub requester: &'a str,
    /// The requesting identity's roles, for policy rules ([O]).
    pub roles: &'a [String],
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Resolution {
    pub requirement: Requirement,
    /// The jobs (or `pack`) that need it.
    pub required_by: Vec<String>,
    pub outcome: Outcome,
    /// Rejected candidates, at most [`REJECTION_LIMIT`] of them.
    pub rejected: Vec<Rejection>,
    /// All rejected candidates, counted by rule.
    pub rejected_by_rule: BTreeMap<String, usize>,
    /// How many candidates were considered.
    pub considered: usize,
    /// The soft policy rule the outcome breaks: a person must grant an exception.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<PolicyException>,
    /// The environment's policy as it was planned, when a gate offers an external binding:
    /// what the person supplies there is checked against it ([O]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<EnvironmentPolicy>,
}

/// A soft rule broken by the chosen candidate(s), granted at a `policy_exception` gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PolicyException {
    pub gate: String,
    pub reason: String,
    pub required_roles: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// An existing resource is bound.
    Bind {
        resource: String,
        provider: Option<String>,
        because: String,
    },
    /// Each resource of a scope provides it (scoped requirements).
    BindScope {
        scope: String,
        resources: Vec<String>,
    },
    /// A provider is created through its pack action, as a sub-operation.
    Create {
        provider: String,
        pack: String,
        action: String,
        parameters: Attributes,
    },
    /// A person decides at a gate.
    Gate {
        gate: ResolutionGate,
    },
    Unsatisfiable {
        reason: String,
    },
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Bind { .. } | Outcome::BindScope { .. } => "bind",
            Outcome::Create { .. } => "create",
            Outcome::Gate { .. } => "gate",
            Outcome::Unsatisfiable { .. } => "unsatisfiable",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResolutionGate {
    pub id: String,
    #[serde(rename = "type")]
    pub type_: GateType,
    pub reason: String,
    pub options: Vec<GateOption>,
    pub required_roles: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GateOption {
    Bind {
        label: String,
        resource: String,
    },
    Create {
        label: String,
        provider: String,
        pack: String,
        action: String,
        parameters: Attributes,
    },
    BindExternal {
        label: String,
        provider: String,
        /// What the resource a person supplies must meet, checked when they answer
        /// (`encryption: true`, `constraint region: eu-west-1`, `policy rule …`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        checks: Vec<String>,
    },
    Cancel {
        label: String,
    },
}

impl GateOption {
    pub fn label(&self) -> &str {
        match self {
            GateOption::Bind { label, .. }
            | GateOption::Create { label, .. }
            | GateOption::BindExternal { label, .. }
            | GateOption::Cancel { label } => label,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Rejection {
    pub candidate: String,
    pub reason: String,
}
