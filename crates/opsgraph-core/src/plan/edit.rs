//! The one path by which a plan changes. Building a plan is applying edits to an empty plan;
//! patches (issue [D]) become edits too. Every result is validated and hashed afresh, so a plan
//! revision is always whole, acyclic and identified by its content.

use std::collections::HashMap;

use crate::model::Attributes;

use crate::plan::resolve::Resolution;
use crate::plan::rollout::RolloutPlan;
use crate::plan::types::{Cost, JobInstance, Plan, PlanGate, Risk, Stage, SubOperation};
use crate::plan::Error;

/// One change to a plan. Building emits the first kinds; a reviewed patch (`patch.rs`) emits
/// `AddJob`, `AddDependency`, `AddGate`, `SkipJob`, `SetParameter` and `SetJobParameter`.
#[derive(Debug, Clone)]
pub enum Edit {
    SetParameters(Attributes),
    AddStage {
        id: String,
        name: String,
    },
    /// A job instance, listed in its stage.
    AddJob(JobInstance),
    /// A gate; the job instances it stands before wait for it.
    AddGate(PlanGate),
    SetResolution(Vec<Resolution>),
    SetRisk(Risk),
    SetSubOperations(Vec<SubOperation>),
    SetCost(Option<Cost>),
    /// The plan's fleet rollouts.
    SetRollouts(Vec<RolloutPlan>),
    /// `job` also waits for `on`, for the reason given.
    AddDependency {
        job: String,
        on: String,
        because: String,
    },
    /// The instance counts as done without running.
    SkipJob {
        job: String,
        reason: String,
    },
    /// One template parameter's value.
    SetParameter {
        name: String,
        value: serde_json::Value,
    },
    /// One parameter of one job instance.
    SetJobParameter {
        job: String,
        name: String,
        value: serde_json::Value,
    },
}

/// Applies edits and returns the next revision, or every problem it would have.
pub fn apply(mut plan: Plan, edits: Vec<Edit>) -> Result<Plan, Vec<Error>> {
    let mut errors = Vec::new();
    change(&mut plan, edits, &mut errors);
    validate(&plan, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    plan.revision.number += 1;
    plan.revision.hash = plan.content_hash();
    Ok(plan)
}

/// Carries out edits without validating or numbering: a patch's changes, one after the other,
/// each seeing the plan the earlier ones left, before [`revise`] makes the revision.
pub(crate) fn change(plan: &mut Plan, edits: Vec<Edit>, errors: &mut Vec<Error>) {
    // Room for every new instance at once: a plan of 10,000 grown by doubling holds 16,384.
    plan.jobs.reserve(edits.iter().filter(|e| matches!(e, Edit::AddJob(_))).count());
    for edit in edits {
        match edit {
            Edit::SetParameters(p) => plan.parameters = p,
            Edit::AddStage { id, name } => {
                if plan.stages.iter().any(|s| s.id == id) {
                    errors.push(Error::DuplicateNode { id });
                } else {
                    plan.stages.push(Stage { id, name, jobs: Vec::new() });
                }
            }
            Edit::AddJob(job) => {
                match plan.stages.iter_mut().find(|s| s.id == job.stage) {
                    Some(stage) => stage.jobs.push(job.id.clone()),
                    None => errors.push(Error::UnknownStage { stage: job.stage.clone(), job: job.id.clone() }),
                }
                plan.jobs.push(job);
            }
            Edit::AddGate(gate) => {
                for j in plan.jobs.iter_mut().filter(|j| gate.before.contains(&j.id)) {
                    if !j.depends_on.contains(&gate.id) {
                        j.depends_on.push(gate.id.clone());
                        j.because.push(format!("waits for gate {}", gate.id));
                    }
                }
                plan.gates.push(gate);
            }
            Edit::SetResolution(r) => plan.resolution = r,
            Edit::SetRisk(r) => plan.risk = r,
            Edit::SetSubOperations(s) => plan.sub_operations = s,
            Edit::SetCost(c) => plan.cost = c,
            Edit::SetRollouts(r) => plan.rollouts = r,
            Edit::AddDependency { job, on, because } => match plan.jobs.iter_mut().find(|j| j.id == job) {
                Some(j) => {
                    j.depends_on.push(on);
                    j.because.push(because);
                }
                None => errors.push(Error::UnknownJob { id: job, referenced_by: format!("a dependency on {on}") }),
            },
            Edit::SkipJob { job, reason } => match plan.jobs.iter_mut().find(|j| j.id == job) {
                Some(j) => j.skipped = Some(reason),
                None => errors.push(Error::UnknownJob { id: job, referenced_by: "a skip".into() }),
            },
            Edit::SetParameter { name, value } => {
                plan.parameters.insert(name, value);
            }
            Edit::SetJobParameter { job, name, value } => match plan.jobs.iter_mut().find(|j| j.id == job) {
                Some(j) => {
                    j.parameters.insert(name, value);
                }
                None => errors.push(Error::UnknownJob { id: job, referenced_by: format!("parameter {name}") }),
            },
        }
    }
}

/// The next revision of an edited plan: validated, numbered and hashed afresh.
pub(crate) fn revise(plan: Plan) -> Result<Plan, Vec<Error>> {
    apply(plan, Vec::new())
}

/// Node ids are unique, every dependency exists, and the graph has no cycle.
fn validate(plan: &Plan, errors: &mut Vec<Error>) {
    let mut ids: HashMap<&str, usize> = HashMap::with_capacity(plan.jobs.len() + plan.gates.len());
    for (i, id) in plan.jobs.iter().map(|j| j.id.as_str()).chain(plan.gates.iter().map(|g| g.id.as_str())).enumerate() {
        if ids.insert(id, i).is_some() {
            errors.push(Error::DuplicateNode { id: id.to_string() });
        }
    }
    let n = plan.jobs.len();
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n + plan.gates.len()];
    for (i, j) in plan.jobs.iter().enumerate() {
        for d in &j.depends_on {
            match ids.get(d.as_str()) {
                Some(&k) => adj[k].push(i),
                None => errors.push(Error::UnknownDependency { job: j.id.clone(), dependency: d.clone() }),
            }
        }
    }
    // A gate that opens after some instances comes after them in the graph.
    for (g, gate) in plan.gates.iter().enumerate() {
        for a in &gate.opens_after {
            match ids.get(a.as_str()) {
                Some(&k) => adj[k].push(n + g),
                None => errors.push(Error::UnknownDependency { job: gate.id.clone(), dependency: a.clone() }),
            }
        }
    }
    if let Some(cycle) = find_cycle(&adj) {
        let names: Vec<String> = cycle
            .into_iter()
            .map(|k| if k < n { plan.jobs[k].id.clone() } else { plan.gates[k - n].id.clone() })
            .collect();
        errors.push(Error::Cycle { path: names });
    }
}

/// A cycle as a path of nodes (first = last), iteratively, so deep plans do not overflow.
fn find_cycle(adj: &[Vec<usize>]) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark = vec![Mark::New; adj.len()];
    let mut parent = vec![usize::MAX; adj.len()];
    for start in 0..adj.len() {
        if mark[start] != Mark::New {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = Mark::Open;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(&succ) = adj[node].get(*next) {
                *next += 1;
                match mark[succ] {
                    Mark::New => {
                        mark[succ] = Mark::Open;
                        parent[succ] = node;
                        stack.push((succ, 0));
                    }
                    Mark::Open => {
                        let mut path = vec![succ];
                        let mut cur = node;
                        while cur != succ {
                            path.push(cur);
                            cur = parent[cur];
                        }
                        path.push(succ);
                        path.reverse();
                        return Some(path);
                    }
                    Mark::Done => {}
                }
            } else {
                mark[node] = Mark::Done;
                stack.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::find_cycle;

    #[test]
    fn cycles_are_found_with_their_path() {
        // 0 -> 1 -> 2 -> 0, and 3 alone.
        let adj = vec![vec![1], vec![2], vec![0], vec![]];
        assert_eq!(find_cycle(&adj), Some(vec![0, 1, 2, 0]));
        let dag = vec![vec![1, 2], vec![2], vec![], vec![0]];
        assert_eq!(find_cycle(&dag), None);
    }
}
