//! Rollback plans (seed §8 `rollback.supported`): the completed jobs of an operation, undone in
//! reverse dependency order by the job each names (`controls.rollback.job`), on the resource it
//! ran on. A job that cannot be undone is named, a partial undo is marked; the plan is previewed,
//! gated (an approval before anything runs) and run like any other. The undo of a day-2 action
//! ([I]) runs with the recorded values of the parameters it changed.

use std::collections::{BTreeMap, HashSet};

use crate::model::{Attributes, GateType, RiskLevel, RollbackSupport};
use crate::pack::Pack;

use crate::plan::day2::{Change, Inherited};
use crate::plan::edit::{apply, Edit};
use crate::plan::types::{GateSource, JobInstance, Plan, PlanGate, Risk};
use crate::plan::Error;

/// A rollback plan and what it cannot do.
#[derive(Debug, Clone)]
pub struct RollbackPlan {
    pub plan: Plan,
    /// Completed jobs nothing undoes, with why.
    pub unsupported: Vec<String>,
    /// Completed jobs only partly undone.
    pub partial: Vec<String>,
}

/// Builds the rollback of `plan`, whose instances in `done` completed.
pub fn rollback(plan: &Plan, pack: &Pack, done: &HashSet<String>) -> Result<RollbackPlan, Vec<Error>> {
    let template = pack.templates.iter().find(|t| t.id == plan.template);
    let mut unsupported = Vec::new();
    let mut partial = Vec::new();
    // Forward instance -> the rollback instance that undoes it.
    let mut undo: BTreeMap<&str, String> = BTreeMap::new();
    let mut instances: BTreeMap<String, JobInstance> = BTreeMap::new();
    // Checks between a rollout's waves changed nothing: nothing to undo.
    for j in plan.jobs.iter().filter(|j| done.contains(&j.id) && j.verifies.is_none()) {
        let job = template.and_then(|t| pack.job(t, &j.job));
        let Some(rb) = job.and_then(|job| job.controls.rollback.as_ref()) else {
            unsupported.push(format!("{} (no rollback declared)", j.id));
            continue;
        };
        let Some(rb_job) = rb.job.as_ref().filter(|_| rb.supported != RollbackSupport::None) else {
            unsupported.push(match rb.supported {
                RollbackSupport::None => format!("{} (rollback: none)", j.id),
                _ => format!("{} (rollback declared, but no job undoes it)", j.id),
            });
            continue;
        };
        let Some(def) = template.and_then(|t| pack.job(t, rb_job)) else {
            unsupported.push(format!("{} (its rollback job {rb_job} is not in the pack)", j.id));
            continue;
        };
        if rb.supported == RollbackSupport::Partial {
            partial.push(j.id.clone());
        }
        let id = match &j.resource {
            Some(r) => format!("{rb_job}@{}", r.rsplit('/').next().unwrap_or(r)),
            None => rb_job.clone(),
        };
        undo.insert(&j.id, id.clone());
        instances.entry(id.clone()).or_insert_with(|| JobInstance {
            id,
            job: rb_job.clone(),
            title: def.title.clone(),
            stage: "rollback".into(),
            scope: j.scope.clone(),
            resource: j.resource.clone(),
            depends_on: Vec::new(),
            because: Vec::new(),
            destructive: def.controls.destructive,
            skipped: None,
            parameters: Default::default(),
            wave: None,
            verifies: None,
        });
    }
    // Where each undo stands: the latest (in forward topological order) of the jobs it undoes.
    // One undo may stand for several jobs of a resource (a node reset), so reversing every
    // forward edge could loop; an edge is kept only from a later undo to an earlier one.
    let order = topological(plan);
    let mut pos: BTreeMap<&str, usize> = BTreeMap::new();
    for (fwd, rb) in &undo {
        let p = order.get(*fwd).copied().unwrap_or(0);
        let e = pos.entry(rb.as_str()).or_insert(p);
        *e = (*e).max(p);
    }
    let pos: BTreeMap<String, usize> = pos.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    // Reverse edges: when B waited for A, A's undo waits for B's.
    for j in plan.jobs.iter().filter(|j| undo.contains_key(j.id.as_str())) {
        let rb = &undo[j.id.as_str()];
        for d in &j.depends_on {
            let Some(rd) = undo.get(d.as_str()) else { continue };
            if rd == rb || pos[rb] <= pos[rd] {
                continue;
            }
            let target = instances.get_mut(rd).expect("every undo has its instance");
            if !target.depends_on.contains(rb) {
                target.depends_on.push(rb.clone());
                target.because.push(format!("undoes {d} after {} is undone", j.id));
            }
        }
    }
    let roots: Vec<String> = instances.values().filter(|i| i.depends_on.is_empty()).map(|i| i.id.clone()).collect();
    let mut reasons = vec![format!("rolls back {} completed job(s) of {}", undo.len(), plan.template)];
    if !unsupported.is_empty() {
        reasons.push(format!("cannot undo: {}", unsupported.join(", ")));
    }
    if !partial.is_empty() {
        reasons.push(format!("only partly undone: {}", partial.join(", ")));
    }
    // A day-2 action changed parameters of a recorded resource (`inherited.changes`: recorded →
    // new): its undo runs with the recorded values, and its preview shows the change back.
    let (parameters, restored) = restore_recorded(plan);
    if !restored.is_empty() {
        let said: Vec<String> = restored
            .iter()
            .map(|c| format!("{} {} → {}", c.name, crate::plan::day2::show(&c.from), crate::plan::day2::show(&c.to)))
            .collect();
        reasons.push(format!("returns to the recorded {}", said.join(", ")));
    }
    let mut edits =
        vec![Edit::SetParameters(parameters), Edit::AddStage { id: "rollback".into(), name: "Rollback".into() }];
    // One destructive-action gate per rollback job, before all its instances (as plans do).
    let mut destructive: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in instances.values().filter(|i| i.destructive) {
        destructive.entry(i.job.clone()).or_default().push(i.id.clone());
    }
    edits.extend(instances.into_values().map(Edit::AddJob));
    if !roots.is_empty() {
        edits.push(Edit::AddGate(PlanGate {
            id: "approve-rollback".into(),
            type_: GateType::Approval,
            reason: format!(
                "roll back {} {}: {}",
                plan.action,
                plan.intent.name.as_deref().unwrap_or(""),
                reasons.join("; ")
            ),
            options: vec!["approve".into(), "cancel operation".into()],
            required_roles: vec!["sre".into(), "platform_admin".into()],
            before: roots,
            opens_after: Vec::new(),
            source: GateSource::Risk,
        }));
    }
    for (job, before) in destructive {
        edits.push(Edit::AddGate(PlanGate {
            id: format!("confirm-{job}"),
            type_: GateType::DestructiveAction,
            reason: format!("rollback job {job} is destructive ({})", before.join(", ")),
            options: vec!["proceed".into(), "cancel operation".into()],
            required_roles: vec!["sre".into(), "platform_admin".into()],
            before,
            opens_after: Vec::new(),
            source: GateSource::Destructive,
        }));
    }
    edits.push(Edit::SetResolution(plan.resolution.clone()));
    edits.push(Edit::SetRisk(Risk { level: RiskLevel::High, reasons }));
    let mut base = plan.clone();
    base.action = "rollback".into();
    base.jobs.clear();
    base.stages.clear();
    base.gates.clear();
    base.sub_operations.clear();
    // The undo runs as it is planned, without the forward rollout's waves.
    base.rollouts.clear();
    base.cost = None;
    // The rollback is a plan of its own: the patches of the plan it undoes are not its own.
    base.customizations.clear();
    base.revision.number = 0;
    base.removes_resource = false;
    base.removes_targets = false;
    base.inherited = plan.inherited.clone().map(|i| Inherited { changes: restored, observed: Default::default(), ..i });
    let plan = apply(base, edits)?;
    Ok(RollbackPlan { plan, unsupported, partial })
}

/// The forward plan's parameters with each one its day-2 change set (recorded → new) back to its
/// recorded value, and those changes turned round (new → recorded). Target changes are not
/// parameters: the undo runs where the forward jobs ran.
fn restore_recorded(plan: &Plan) -> (Attributes, Vec<Change>) {
    let mut parameters = plan.parameters.clone();
    let mut restored = Vec::new();
    for c in plan.inherited.iter().flat_map(|i| &i.changes) {
        if let Some(v) = parameters.get_mut(&c.name) {
            *v = c.from.clone();
            restored.push(Change { name: c.name.clone(), from: c.to.clone(), to: c.from.clone() });
        }
    }
    (parameters, restored)
}

/// Each job's index in a topological order of the plan (dependencies first).
fn topological(plan: &Plan) -> BTreeMap<String, usize> {
    let ids: HashSet<&str> = plan.jobs.iter().map(|j| j.id.as_str()).collect();
    let mut indegree: BTreeMap<&str, usize> = plan.jobs.iter().map(|j| (j.id.as_str(), 0)).collect();
    let mut users: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for j in &plan.jobs {
        for d in j.depends_on.iter().filter(|d| ids.contains(d.as_str())) {
            *indegree.get_mut(j.id.as_str()).expect("listed") += 1;
            users.entry(d.as_str()).or_default().push(&j.id);
        }
    }
    let mut ready: Vec<&str> = indegree.iter().filter(|(_, n)| **n == 0).map(|(k, _)| *k).collect();
    let mut out = BTreeMap::new();
    while let Some(j) = ready.pop() {
        out.insert(j.to_string(), out.len());
        for u in users.get(j).into_iter().flatten() {
            let n = indegree.get_mut(u).expect("listed");
            *n -= 1;
            if *n == 0 {
                ready.push(u);
            }
        }
    }
    out
}
