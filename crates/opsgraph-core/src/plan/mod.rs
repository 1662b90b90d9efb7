//! Capability resolution, plan building and plan validation: the first half of the formula
//! (Intent + Capability Requirements + Policies -> Resolved Capability Graph -> Editable DAG Plan).
//!
//! Architecture invariant: no IO. Everything here is a function of its inputs, so a preview is
//! reproducible and the runtime ([B]) can rebuild any revision from what it stored.

mod build;
mod canary;
mod columns;
pub mod day2;
mod edit;
mod graph;
mod inputs;
pub mod job_lifecycle;
pub mod lifecycle;
mod operations;
mod params;
pub mod patch;
pub mod policy;
pub mod preview;
mod refuse;
pub mod render;
mod resolution;
pub mod resolve;
pub mod rollback;
pub mod rollout;
mod rules;
mod types;

use std::fmt;

pub use build::{build, check_intent_parameters};
pub use day2::{Change, Inherited, Recorded};
pub use edit::{apply, Edit};
pub use graph::{job_edges, transitive_reduction};
pub use inputs::check_preview;
pub use params::check_parameter;
pub use resolve::{Inventory, Outcome, Resolution};
pub use rollout::{RolloutPlan, WavePlan};
pub use types::{
    Cost, CostItem, Customization, GateSource, Input, JobInstance, Plan, PlanGate, Revision, Risk, Stage, SubOperation,
};

/// Why a plan could not be built. Each names what to fix.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    UnknownPack {
        id: String,
        available: Vec<String>,
    },
    NoPackForType {
        resource_type: String,
        available: Vec<String>,
    },
    AmbiguousPack {
        resource_type: String,
        packs: Vec<String>,
    },
    UnknownAction {
        pack: String,
        action: String,
        available: Vec<String>,
    },
    UnknownParameter {
        name: String,
        template: String,
        known: Vec<String>,
    },
    ParameterType {
        name: String,
        expected: String,
        found: serde_json::Value,
    },
    ParameterValue {
        name: String,
        allowed: Vec<serde_json::Value>,
        found: serde_json::Value,
    },
    /// A parameter that names an artifact of an earlier operation is not `<operation>/<artifact>`.
    ArtifactReference {
        name: String,
        artifact: String,
        found: serde_json::Value,
    },
    UnknownResource {
        id: String,
        scope: String,
    },
    WrongResourceType {
        id: String,
        scope: String,
        expected: String,
        found: String,
    },
    ScopeSize {
        scope: String,
        count: u32,
        min: Option<u32>,
        max: Option<u32>,
    },
    UnknownTarget {
        name: String,
        template: String,
    },
    UnknownScope {
        scope: String,
        capability: String,
        jobs: Vec<String>,
    },
    AmbiguousScope {
        job: String,
        scopes: Vec<String>,
    },
    UnknownJob {
        id: String,
        referenced_by: String,
    },
    UnknownStage {
        stage: String,
        job: String,
    },
    TwoProviders {
        output: String,
        jobs: [String; 2],
    },
    Unprovided {
        job: String,
        what: String,
        scope: Option<String>,
    },
    DuplicateNode {
        id: String,
    },
    UnknownDependency {
        job: String,
        dependency: String,
    },
    Cycle {
        path: Vec<String>,
    },
    /// A documented limit is exceeded.
    Limit {
        what: &'static str,
        limit: usize,
        found: usize,
    },
    /// The plan built now is not the one previewed: an input changed in between.
    StalePreview {
        previewed: String,
        now: String,
    },
    /// A `refuse:` rule of the template holds ([I]): the message, and each condition said with
    /// the values found.
    Refused {
        template: String,
        message: String,
        because: Vec<String>,
    },
    /// An operations policy rule refuses the plan ([O]).
    Denied {
        rule: String,
        when: Option<String>,
        reason: String,
    },
}

/// Limits on what one plan may hold, checked before anything is stored (docs/operations.md).
pub mod limits {
    /// Job instances of one plan (jobs × the resources they fan out over).
    pub const MAX_INSTANCES: usize = 100_000;
    /// Resources of one scope: how far one job fans out.
    pub const MAX_FAN_OUT: usize = 10_000;
    /// Dependency edges of one plan.
    pub const MAX_EDGES: usize = 1_000_000;
    /// Parameters of one intent, and the bytes of one parameter's value (as JSON).
    pub const MAX_PARAMETERS: usize = 256;
    pub const MAX_PARAMETER_BYTES: usize = 64 * 1024;
}

impl Error {
    /// The intent parameter a P003 error is about.
    pub fn parameter(&self) -> Option<&str> {
        match self {
            Error::UnknownParameter { name, .. }
            | Error::ParameterType { name, .. }
            | Error::ParameterValue { name, .. }
            | Error::ArtifactReference { name, .. } => Some(name),
            _ => None,
        }
    }

    /// A stable code for scripts and docs.
    pub fn code(&self) -> &'static str {
        match self {
            Error::UnknownPack { .. } | Error::NoPackForType { .. } | Error::AmbiguousPack { .. } => "P001",
            Error::UnknownAction { .. } => "P002",
            Error::UnknownParameter { .. }
            | Error::ParameterType { .. }
            | Error::ParameterValue { .. }
            | Error::ArtifactReference { .. } => "P003",
            Error::UnknownResource { .. }
            | Error::WrongResourceType { .. }
            | Error::ScopeSize { .. }
            | Error::UnknownTarget { .. } => "P004",
            Error::UnknownScope { .. } | Error::AmbiguousScope { .. } => "P005",
            Error::UnknownJob { .. }
            | Error::UnknownStage { .. }
            | Error::UnknownDependency { .. }
            | Error::DuplicateNode { .. } => "P006",
            Error::TwoProviders { .. } => "P007",
            Error::Unprovided { .. } => "P008",
            Error::Cycle { .. } => "P009",
            Error::Limit { .. } => "P010",
            Error::StalePreview { .. } => "P011",
            Error::Refused { .. } => "P012",
            Error::Denied { .. } => "P013",
        }
    }
}

impl Error {
    /// The intent's field the error is about, when it is one: `parameters.NAME`,
    /// `targets.NAME`, `scopes.NAME` (a template scope, filled from the targets its `from`
    /// names), `action`, `pack` or `target_resource_type`. A form shows the error beside it.
    pub fn field(&self) -> Option<String> {
        match self {
            Error::UnknownPack { .. } | Error::AmbiguousPack { .. } => Some("pack".into()),
            Error::NoPackForType { .. } => Some("target_resource_type".into()),
            Error::UnknownAction { .. } => Some("action".into()),
            Error::UnknownParameter { name, .. }
            | Error::ParameterType { name, .. }
            | Error::ParameterValue { name, .. }
            | Error::ArtifactReference { name, .. } => Some(format!("parameters.{name}")),
            Error::UnknownResource { scope, .. }
            | Error::WrongResourceType { scope, .. }
            | Error::ScopeSize { scope, .. } => Some(format!("scopes.{scope}")),
            Error::UnknownTarget { name, .. } => Some(format!("targets.{name}")),
            Error::UnknownScope { .. }
            | Error::AmbiguousScope { .. }
            | Error::UnknownJob { .. }
            | Error::UnknownStage { .. }
            | Error::UnknownDependency { .. }
            | Error::DuplicateNode { .. }
            | Error::TwoProviders { .. }
            | Error::Unprovided { .. }
            | Error::Cycle { .. }
            | Error::Limit { .. }
            | Error::StalePreview { .. }
            | Error::Refused { .. }
            | Error::Denied { .. } => None,
        }
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownPack { id, available } => {
                write!(f, "no pack `{id}` is loaded (loaded: {})", list(available))
            }
            Error::NoPackForType { resource_type, available } => {
                write!(f, "no loaded pack manages resource type `{resource_type}` (managed types: {})", list(available))
            }
            Error::AmbiguousPack { resource_type, packs } => {
                write!(
                    f,
                    "several packs manage `{resource_type}` ({}); name one with `pack:` in the intent",
                    list(packs)
                )
            }
            Error::UnknownAction { pack, action, available } => {
                write!(
                    f,
                    "pack `{pack}` has no plan template for action `{action}` (actions with templates: {})",
                    list(available)
                )
            }
            Error::UnknownParameter { name, template, known } => {
                write!(f, "template `{template}` has no parameter `{name}` (parameters: {})", list(known))
            }
            Error::ParameterType { name, expected, found } => {
                write!(f, "parameter `{name}` must be a {expected}, found {found}")
            }
            Error::ParameterValue { name, allowed, found } => {
                let allowed: Vec<String> = allowed.iter().map(ToString::to_string).collect();
                write!(f, "parameter `{name}` must be one of {}, found {found}", allowed.join(", "))
            }
            Error::ArtifactReference { name, artifact, found } => {
                write!(
                    f,
                    "parameter `{name}` names an artifact of an earlier operation, `<operation>/{artifact}`, found {found}"
                )
            }
            Error::UnknownResource { id, scope } => {
                write!(f, "target `{id}` of scope `{scope}` is not in the inventory")
            }
            Error::WrongResourceType { id, scope, expected, found } => {
                write!(f, "target `{id}` of scope `{scope}` is a {found}, the scope takes {expected}")
            }
            Error::ScopeSize { scope, count, min, max } => {
                write!(f, "scope `{scope}` has {count} resources")?;
                if let Some(m) = min {
                    write!(f, "; at least {m} needed")?;
                }
                if let Some(m) = max {
                    write!(f, "; at most {m} allowed")?;
                }
                Ok(())
            }
            Error::UnknownTarget { name, template } => {
                write!(f, "the intent targets `{name}`, which no scope of template `{template}` reads")
            }
            Error::UnknownScope { scope, capability, jobs } if capability.is_empty() => {
                write!(f, "job {} names scope `{scope}`, which the template does not declare", list(jobs))
            }
            Error::UnknownScope { scope, capability, jobs } => {
                write!(
                    f,
                    "{} requires {capability} in scope `{scope}`, which the template does not declare",
                    list(jobs)
                )
            }
            Error::AmbiguousScope { job, scopes } => {
                write!(f, "job `{job}` could fan out over {}; set `scope.target`", list(scopes))
            }
            Error::UnknownJob { id, referenced_by } => {
                write!(f, "unknown job `{id}` (named by {referenced_by})")
            }
            Error::UnknownStage { stage, job } => {
                write!(f, "job `{job}` names unknown stage `{stage}`")
            }
            Error::TwoProviders { output, jobs } => {
                write!(f, "{output} is provided by two jobs: {} and {}", jobs[0], jobs[1])
            }
            Error::Unprovided { job, what, scope } => match scope {
                Some(s) => write!(f, "job `{job}` requires {what} in scope {s}, and no job of the plan provides it"),
                None => write!(f, "job `{job}` requires {what}, and no job of the plan provides it"),
            },
            Error::DuplicateNode { id } => write!(f, "two nodes of the plan have the id `{id}`"),
            Error::UnknownDependency { job, dependency } => {
                write!(f, "job `{job}` depends on unknown node `{dependency}`")
            }
            Error::Cycle { path } => write!(f, "the plan has a cycle: {}", path.join(" -> ")),
            Error::Limit { what, limit, found } => write!(f, "{what}: {found}, above the limit of {limit}"),
            Error::StalePreview { previewed, now } => write!(
                f,
                "the preview is stale: it showed plan {previewed}, but the world changed since (resources, packs or policies) and the plan is now {now}; nothing was applied: preview again"
            ),
            Error::Refused { template, message, because } => {
                write!(f, "refused by template `{template}`: {message} ({})", because.join("; "))
            }
            Error::Denied { rule, when, reason } => {
                write!(f, "refused by operations policy {}: {reason}", policy::named(rule, when.as_deref()))
            }
        }
    }
}
