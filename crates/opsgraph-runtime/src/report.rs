//! What a verification reports ([I]): the checks it ran, the resource's status and observed
//! values, and what became of a resource it found degraded. Below `verify` and `drift`, which
//! both use it.

use std::collections::BTreeMap;

use opsgraph_core::model::ResourceStatus;
use serde::{Deserialize, Serialize};

/// One check on one job instance's host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckRun {
    pub check: String,
    /// The job instance whose host and environment it ran with.
    pub on: String,
    pub passed: bool,
    pub expected: String,
    pub observed: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub captured: BTreeMap<String, String>,
}

/// What a verification found and did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VerifyReport {
    pub resource: String,
    pub before: Option<ResourceStatus>,
    pub status: ResourceStatus,
    pub operation: String,
    pub checks: Vec<CheckRun>,
    /// The resource's observed values after this verification.
    pub observed: BTreeMap<String, String>,
    /// What became of it when this verification found it newly degraded ([I] 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<Repair>,
}

impl VerifyReport {
    /// `3/3 checks passed`, or the first failures.
    pub fn summary(&self) -> String {
        let failed: Vec<&CheckRun> = self.checks.iter().filter(|c| !c.passed).collect();
        if failed.is_empty() {
            return format!("{}/{} checks passed", self.checks.len(), self.checks.len());
        }
        let first = failed
            .iter()
            .take(3)
            .map(|c| format!("{} on {}: expected {}, observed {}", c.check, c.on, c.expected, c.observed))
            .collect::<Vec<_>>()
            .join("; ");
        format!("{} of {} checks failed: {first}", failed.len(), self.checks.len())
    }
}

/// What became of a degraded resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Repair {
    /// The policy says `off` (the default), or no world to plan in was given.
    Off { reason: String },
    /// The policy asks for one but the pack has no `repair` action, or its plan cannot be built.
    NotPlanned { reason: String },
    /// Created: waiting for a person (`propose`, or `apply_safe` with gates of its own), or running.
    Created { operation: String, state: String },
}
