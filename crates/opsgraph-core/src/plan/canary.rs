//! Gates that open late ([P]). A fleet rollout's canary gate: after the first wave of a job, before the rest, answerable
//! only once that wave has finished (`PlanGate::opens_after`), so a person approves what they saw
//! run rather than what they expect to.

use crate::model::GateType;
use crate::plan::rollout::RolloutPlan;
use crate::plan::types::{GateSource, JobInstance, PlanGate};

/// The canary gate of `rollout`, over the job instances built so far; `None` without one.
pub(crate) fn canary_gate(rollout: &RolloutPlan, instances: &[JobInstance]) -> Option<PlanGate> {
    let id = rollout.canary_gate.clone()?;
    let mine = instances.iter().filter(|j| j.job == rollout.job);
    let (first, rest): (Vec<&JobInstance>, Vec<&JobInstance>) = mine.partition(|j| j.wave == Some(1));
    if first.is_empty() || rest.is_empty() {
        return None;
    }
    Some(PlanGate {
        id,
        type_: GateType::Approval,
        reason: format!(
            "canary: wave 1 of {} ({}) runs first; look at it before the other {} instance(s) run",
            rollout.job,
            first.iter().filter_map(|j| j.resource.as_deref()).collect::<Vec<_>>().join(", "),
            rest.len()
        ),
        options: vec!["continue rollout".into(), "cancel operation".into()],
        required_roles: vec!["operator".into(), "sre".into(), "platform_admin".into()],
        before: rest.iter().map(|j| j.id.clone()).collect(),
        source: GateSource::Rollout,
        // And once the checks after wave 1 ran, when there are any.
        opens_after: first
            .iter()
            .map(|j| j.id.clone())
            .chain(rollout.check_instances().into_iter().filter(|(k, _)| *k == 1).map(|(_, id)| id))
            .collect(),
    })
}

/// The job instances the instances `before` wait for (besides each other), in plan order: what
/// must have finished before a gate in front of them can be answered (a destructive gate opens
/// once the checks before it ran).
pub(crate) fn before_all(before: &[String], instances: &[JobInstance]) -> Vec<String> {
    let mine: std::collections::HashSet<&str> = before.iter().map(String::as_str).collect();
    let wanted: std::collections::HashSet<&str> = instances
        .iter()
        .filter(|j| mine.contains(j.id.as_str()))
        .flat_map(|j| j.depends_on.iter().map(String::as_str))
        .filter(|d| !mine.contains(d))
        .collect();
    instances.iter().filter(|j| wanted.contains(j.id.as_str())).map(|j| j.id.clone()).collect()
}
