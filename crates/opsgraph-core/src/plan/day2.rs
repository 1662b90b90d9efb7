//! Day-2 actions ([I]): an intent that acts on a resource the store already records, with an
//! action other than the one that created it, is planned against what was recorded. What the
//! intent does not give — non-secret parameters and targets — comes from the resource's completed
//! operations, and the plan lists what it changes, like `terraform plan`'s `~`.
//!
//! Pure: the caller (the runtime's `manage::recorded`) reads the store and hands in a
//! [`Recorded`]; the planner decides what it means here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{Attributes, Intent, PlanTemplate, Resource};

/// What the store recorded about the resource an intent names: the input of a day-2 plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The resource as stored (status, observed values).
    pub resource: Resource,
    /// The action of the operation that created it: the first completed one since it last came
    /// into existence. An intent with this action is planned from what it gives alone.
    pub created_by: String,
    /// Its latest completed operation.
    pub operation: String,
    /// Non-secret parameters of its completed operations, each from the latest one that had it.
    pub parameters: Attributes,
    /// Targets (scope name -> resource ids) likewise.
    pub targets: BTreeMap<String, Vec<String>>,
}

/// What a day-2 plan took from the recorded resource, and what it changes there. Shown in the
/// preview; not part of the plan's hash (its effect — parameters, job instances — is, and the
/// observed values change with every verification).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Inherited {
    /// The resource id.
    pub resource: String,
    /// Its status when planned (`running`, `degraded`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Its latest completed operation.
    pub operation: String,
    /// Parameters taken from the record, by name, with their values.
    #[serde(default, skip_serializing_if = "Attributes::is_empty")]
    pub parameters: Attributes,
    /// Targets taken from the record.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub targets: BTreeMap<String, Vec<String>>,
    /// What the plan sets differently from the record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// What evidence last observed of the resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub observed: BTreeMap<String, String>,
}

/// One value a day-2 plan changes: a parameter, or a target as `targets.<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Change {
    pub name: String,
    pub from: Value,
    pub to: Value,
}

/// The intent a day-2 plan is built from — `intent` with what it does not give taken from
/// `recorded` — and what was taken; `None` when the intent is not a day-2 action on the recorded
/// resource (another resource, none recorded, or its creating action). Secret parameters are
/// never taken: the record holds none (they must be given again, or answered at their
/// missing-input gate), and one the template declares secret is skipped even if handed in;
/// nor are `once` parameters (a decision for one action: `force`, `purge`).
pub(crate) fn inherit(
    intent: &Intent,
    template: &PlanTemplate,
    recorded: Option<&Recorded>,
) -> Option<(Intent, Inherited)> {
    let recorded = recorded?;
    if intent.resource_id().as_deref() != Some(recorded.resource.id.as_str()) || intent.action == recorded.created_by {
        return None;
    }
    let mut effective = intent.clone();
    let mut parameters = Attributes::new();
    for (name, spec) in &template.parameters {
        if spec.secret || spec.once || intent.parameters.contains_key(name) {
            continue;
        }
        if let Some(v) = recorded.parameters.get(name) {
            effective.parameters.insert(name.clone(), v.clone());
            parameters.insert(name.clone(), v.clone());
        }
    }
    let mut targets = BTreeMap::new();
    for key in read_targets(template) {
        if intent.targets.contains_key(key) {
            continue;
        }
        if let Some(ids) = recorded.targets.get(key) {
            effective.targets.insert(key.to_string(), ids.clone());
            targets.insert(key.to_string(), ids.clone());
        }
    }
    let inherited = Inherited {
        resource: recorded.resource.id.clone(),
        status: recorded.resource.status.map(|s| s.as_str().to_string()),
        operation: recorded.operation.clone(),
        parameters,
        targets,
        changes: Vec::new(),
        observed: recorded.resource.observed.clone(),
    };
    Some((effective, inherited))
}

/// What the plan sets differently from the record: each non-secret parameter of the template
/// whose planned value (given, or its default) differs from the recorded one, then each target
/// the intent gives differently.
pub(crate) fn changes(
    template: &PlanTemplate,
    planned: &Attributes,
    intent: &Intent,
    recorded: &Recorded,
) -> Vec<Change> {
    let mut out = Vec::new();
    for (name, spec) in &template.parameters {
        let (Some(from), Some(to)) = (recorded.parameters.get(name), planned.get(name)) else { continue };
        if !spec.secret && !spec.once && from != to {
            out.push(Change { name: name.clone(), from: from.clone(), to: to.clone() });
        }
    }
    for key in read_targets(template) {
        let (Some(from), Some(to)) = (recorded.targets.get(key), intent.targets.get(key)) else { continue };
        if from != to {
            out.push(Change {
                name: format!("targets.{key}"),
                from: Value::from(from.clone()),
                to: Value::from(to.clone()),
            });
        }
    }
    out
}

/// The target names a template's scopes read (`targets.<name>`).
fn read_targets(template: &PlanTemplate) -> impl Iterator<Item = &str> {
    let mut keys: Vec<&str> =
        template.scopes.values().flat_map(|s| s.from.iter()).filter_map(|f| f.strip_prefix("targets.")).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
}

/// `"15"` → `15`, a list → `a, b`: a value as a person reads it in a preview.
pub(crate) fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(show).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}
