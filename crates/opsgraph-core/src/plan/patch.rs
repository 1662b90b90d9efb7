//! Plan patches (seed §14): an allow-list of structured changes to a plan revision, reviewed and
//! applied through the one edit path: each change becomes [`Edit`]s, carried out in order by
//! `edit::change`, and the result is validated, numbered and hashed by `edit::revise`. A patch either yields a new, validated revision with its
//! diff and the reviewer's findings, or is refused with findings that say why — nothing in
//! between.
//!
//! The change kinds and their rules:
//! - `insert_after` / `insert_before`: jobs from the pack's job library, chained in the order
//!   given, on each resource the anchor runs on (or once, when the anchor is unscoped). After:
//!   the anchor's dependents then also wait for the last inserted job. Before: the first
//!   inserted job takes the anchor's dependencies, and the anchor waits for the last one. Each
//!   inserted job's required artifacts and capabilities must be provided by the plan or bound by
//!   its resolution; a destructive one gets a `destructive_action` gate.
//! - `retry`: a job's instances (and with `with_descendants`, everything downstream) run again;
//!   the plan is unchanged, the diff lists them for the runtime.
//! - `skip`: refused when a job that is not skipped requires a capability or artifact of it.
//! - `set_parameters`: template parameters, each checked against its declared type and `enum`;
//!   with `job`, for that job's instances alone (its own parameters, or template ones it reads).
//! - `add_gate`: a gate before the named jobs (all of their instances).

use std::collections::{BTreeSet, HashSet};

use crate::model::{Gate, GateType, Job, PatchChange, PlanPatch};
use crate::pack::Pack;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plan::edit::Edit;
use crate::plan::types::{Customization, GateSource, JobInstance, Plan, PlanGate};
pub use crate::plan::types::{Finding, Severity};

/// What a patch changes, for people (text) and machines (JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Diff {
    /// Job instances added, with what each waits for.
    pub added_jobs: Vec<(String, Vec<String>)>,
    /// Existing instances that now also wait for another node: (instance, new dependency).
    pub added_edges: Vec<(String, String)>,
    pub added_gates: Vec<String>,
    /// Instances to run again.
    pub retried: Vec<String>,
    /// Instances skipped, with the reason.
    pub skipped: Vec<(String, String)>,
    /// Parameters changed: (name, before, after).
    pub parameters: Vec<(String, Option<Value>, Value)>,
}

impl Diff {
    pub fn text(&self) -> String {
        let mut s = String::new();
        for (j, deps) in &self.added_jobs {
            s.push_str(&format!(
                "+ job {j} (after {})\n",
                if deps.is_empty() { "nothing".into() } else { deps.join(", ") }
            ));
        }
        for (j, d) in &self.added_edges {
            s.push_str(&format!("~ {j} now also waits for {d}\n"));
        }
        for g in &self.added_gates {
            s.push_str(&format!("+ gate {g}\n"));
        }
        for (j, why) in &self.skipped {
            s.push_str(&format!("- skip {j}: {why}\n"));
        }
        for j in &self.retried {
            s.push_str(&format!("↻ retry {j}\n"));
        }
        for (name, before, after) in &self.parameters {
            let before = before.as_ref().map_or("(unset)".to_string(), ToString::to_string);
            s.push_str(&format!("~ parameter {name}: {before} -> {after}\n"));
        }
        s
    }
}

/// A patched plan: the new revision, what changed, and what the reviewer found.
#[derive(Debug, Clone)]
pub struct Patched {
    pub plan: Plan,
    pub diff: Diff,
    pub findings: Vec<Finding>,
}

/// Reviews `patch` against `plan` and applies it. Refused (every finding, errors among them)
/// unless every change is allowed and the result is a valid plan.
pub fn apply_patch(plan: &Plan, pack: &Pack, patch: &PlanPatch) -> Result<Patched, Vec<Finding>> {
    let mut next = plan.clone();
    let mut diff = Diff::default();
    let mut findings = Vec::new();
    let template = pack.templates.iter().find(|t| t.id == plan.template);
    for (n, change) in patch.changes.iter().enumerate() {
        let mut f = |severity, code: &'static str, message: String| {
            findings.push(Finding { severity, code: code.into(), change: Some(n), message })
        };
        // A pack that says `editable.advanced_mode: false` allows only retries ([O], §15).
        if pack.manifest.editable.advanced_mode == Some(false) && !matches!(change, PatchChange::Retry { .. }) {
            f(
                Severity::Error,
                "advanced-mode",
                format!(
                    "pack {} does not allow advanced edits (editable.advanced_mode: false): a patch may only retry jobs",
                    pack.manifest.id
                ),
            );
            continue;
        }
        match change {
            PatchChange::InsertAfter { anchor, jobs } => insert(&mut next, pack, anchor, jobs, true, &mut diff, &mut f),
            PatchChange::InsertBefore { anchor, jobs } => {
                insert(&mut next, pack, anchor, jobs, false, &mut diff, &mut f)
            }
            PatchChange::Retry { job, with_descendants } => {
                let ids = instances(&next, job);
                if ids.is_empty() {
                    f(Severity::Error, "unknown-job", format!("retry: the plan has no job `{job}`"));
                    continue;
                }
                let mut all: BTreeSet<String> = ids.into_iter().collect();
                if *with_descendants {
                    all.extend(descendants(&next, &all));
                }
                let order: Vec<String> =
                    next.jobs.iter().filter(|j| all.contains(&j.id)).map(|j| j.id.clone()).collect();
                diff.retried.extend(order);
            }
            PatchChange::Skip { job, reason } => {
                let ids: HashSet<String> = instances(&next, job).into_iter().collect();
                if ids.is_empty() {
                    f(Severity::Error, "unknown-job", format!("skip: the plan has no job `{job}`"));
                    continue;
                }
                // A job whose output another (not skipped) job requires cannot be skipped.
                let needed: Vec<String> = next
                    .jobs
                    .iter()
                    .filter(|j| j.skipped.is_none() && !ids.contains(&j.id))
                    .flat_map(|j| {
                        j.depends_on
                            .iter()
                            .zip(&j.because)
                            .filter(|(d, why)| ids.contains(*d) && why.starts_with("requires"))
                            .map(move |(d, why)| format!("{} {why} from {d}", j.id))
                    })
                    .collect();
                if !needed.is_empty() {
                    f(
                        Severity::Error,
                        "skip-required",
                        format!("skip {job}: what it provides is required: {}", needed.join("; ")),
                    );
                    continue;
                }
                let order: Vec<String> =
                    next.jobs.iter().filter(|j| ids.contains(&j.id)).map(|j| j.id.clone()).collect();
                let edits = order.iter().map(|j| Edit::SkipJob { job: j.clone(), reason: reason.clone() }).collect();
                diff.skipped.extend(order.into_iter().map(|j| (j, reason.clone())));
                commit(&mut next, edits, &mut f);
            }
            PatchChange::SetParameters { job: Some(job), parameters } => {
                let ids: HashSet<String> = instances(&next, job).into_iter().collect();
                let Some(def) = template.and_then(|t| pack.job(t, job)) else {
                    f(Severity::Error, "unknown-job", format!("set_parameters: the plan has no job `{job}`"));
                    continue;
                };
                if ids.is_empty() {
                    f(Severity::Error, "unknown-job", format!("set_parameters: the plan has no job `{job}`"));
                    continue;
                }
                for (name, value) in parameters {
                    // A job's own parameter, or a template parameter it reads: typed by the template.
                    let spec = template.and_then(|t| t.parameters.get(name));
                    if spec.is_none() && !def.inputs.parameters.contains_key(name) {
                        f(Severity::Error, "parameter", format!("job `{job}` has no parameter `{name}`"));
                        continue;
                    }
                    let mut value = value.clone();
                    if let Some(spec) = spec {
                        // Before the type check, whose finding quotes the value.
                        if spec.secret {
                            f(
                                Severity::Error,
                                "parameter",
                                format!("parameter `{name}` is secret: a patch cannot carry it"),
                            );
                            continue;
                        }
                        // The intent's own check (size, type, enum).
                        match crate::plan::params::check_parameter(name, spec, &value) {
                            Ok(v) => value = v,
                            Err(e) => {
                                f(Severity::Error, "parameter", format!("job `{job}`: {e}"));
                                continue;
                            }
                        }
                    }
                    let mut before = None;
                    let mut edits = Vec::new();
                    for j in next.jobs.iter().filter(|j| ids.contains(&j.id)) {
                        before = j.parameters.get(name).cloned().or(before);
                        edits.push(Edit::SetJobParameter {
                            job: j.id.clone(),
                            name: name.clone(),
                            value: value.clone(),
                        });
                    }
                    let before = before
                        .or_else(|| next.parameters.get(name).cloned())
                        .or_else(|| def.inputs.parameters.get(name).cloned());
                    diff.parameters.push((format!("{name} of {job}"), before, value.clone()));
                    commit(&mut next, edits, &mut f);
                }
            }
            PatchChange::SetParameters { job: None, parameters } => {
                for (name, value) in parameters {
                    let Some(spec) = template.and_then(|t| t.parameters.get(name)) else {
                        f(Severity::Error, "parameter", format!("the template has no parameter `{name}`"));
                        continue;
                    };
                    // Before the checks whose findings quote the value.
                    if spec.secret {
                        f(
                            Severity::Error,
                            "parameter",
                            format!("parameter `{name}` is secret: a patch cannot carry it"),
                        );
                        continue;
                    }
                    // The intent's own check (size, type, enum).
                    let value = match crate::plan::params::check_parameter(name, spec, value) {
                        Ok(v) => v,
                        Err(e) => {
                            f(Severity::Error, "parameter", e.to_string());
                            continue;
                        }
                    };
                    let before = next.parameters.get(name).cloned();
                    diff.parameters.push((name.clone(), before, value.clone()));
                    commit(&mut next, vec![Edit::SetParameter { name: name.clone(), value }], &mut f);
                }
            }
            PatchChange::AddGate(g) => {
                if let Some(gate) = add_gate(&next, g, GateSource::Patch, &mut diff, &mut f) {
                    commit(&mut next, vec![Edit::AddGate(gate)], &mut f);
                }
            }
        }
    }
    if findings.iter().any(|f| f.severity == Severity::Error) {
        return Err(findings);
    }
    next.review = review(&next, pack);
    match crate::plan::edit::revise(next) {
        Ok(mut plan) => {
            plan.customizations.push(Customization {
                patch: patch.id.clone(),
                author: patch.author.clone(),
                reason: patch.reason.clone(),
                revision: plan.revision.number,
                diff: diff.text().lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect(),
            });
            Ok(Patched { plan, diff, findings })
        }
        Err(errors) => {
            findings.extend(errors.into_iter().map(|e| Finding {
                severity: Severity::Error,
                code: if matches!(e, crate::plan::Error::Cycle { .. }) { "cycle" } else { "invalid" }.into(),
                change: None,
                message: e.to_string(),
            }));
            Err(findings)
        }
    }
}

/// The instances of a template job (`install`), or the instance named (`install@node-1`).
fn instances(plan: &Plan, job: &str) -> Vec<String> {
    plan.jobs.iter().filter(|j| j.job == job || j.id == job).map(|j| j.id.clone()).collect()
}

fn descendants(plan: &Plan, from: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found: BTreeSet<String> = BTreeSet::new();
    let mut changed = true;
    while changed {
        changed = false;
        for j in &plan.jobs {
            if !found.contains(&j.id) && j.depends_on.iter().any(|d| from.contains(d) || found.contains(d)) {
                found.insert(j.id.clone());
                changed = true;
            }
        }
    }
    found
}

/// Carries out one change's edits on the plan being patched; what the edit path refuses is an
/// error finding.
fn commit(plan: &mut Plan, edits: Vec<Edit>, f: &mut impl FnMut(Severity, &'static str, String)) {
    let mut errors = Vec::new();
    crate::plan::edit::change(plan, edits, &mut errors);
    for e in errors {
        f(Severity::Error, "invalid", e.to_string());
    }
}

/// The plan gate a patch's `add_gate` stands for, before every instance of the jobs it names;
/// `None` (with an error finding) when it cannot stand.
fn add_gate(
    plan: &Plan,
    g: &Gate,
    source: GateSource,
    diff: &mut Diff,
    f: &mut impl FnMut(Severity, &'static str, String),
) -> Option<PlanGate> {
    if plan.gates.iter().any(|x| x.id == g.id) || plan.jobs.iter().any(|j| j.id == g.id) {
        f(Severity::Error, "duplicate", format!("the plan already has a node `{}`", g.id));
        return None;
    }
    let mut before = Vec::new();
    for b in &g.before {
        let ids = instances(plan, b);
        if ids.is_empty() {
            f(Severity::Error, "unknown-job", format!("gate {}: the plan has no job `{b}`", g.id));
            return None;
        }
        before.extend(ids);
    }
    if before.is_empty() {
        f(Severity::Error, "gate", format!("gate {} names no job to stand before", g.id));
        return None;
    }
    diff.added_gates.push(g.id.clone());
    Some(PlanGate {
        id: g.id.clone(),
        type_: g.type_,
        reason: g.reason.clone(),
        options: if g.options.is_empty() {
            vec!["proceed".into(), "cancel operation".into()]
        } else {
            g.options.clone()
        },
        required_roles: if g.required_roles.is_empty() {
            vec!["sre".into(), "platform_admin".into()]
        } else {
            g.required_roles.clone()
        },
        before,
        opens_after: Vec::new(),
        source,
    })
}

/// Inserts `jobs` (chained, in order) after or before every instance of `anchor`.
fn insert(
    plan: &mut Plan,
    pack: &Pack,
    anchor: &str,
    jobs: &[String],
    after: bool,
    diff: &mut Diff,
    f: &mut impl FnMut(Severity, &'static str, String),
) {
    let anchors: Vec<JobInstance> = plan.jobs.iter().filter(|j| j.job == anchor || j.id == anchor).cloned().collect();
    if anchors.is_empty() {
        f(
            Severity::Error,
            "unknown-job",
            format!("the plan has no job `{anchor}` to insert {}", if after { "after" } else { "before" }),
        );
        return;
    }
    let mut library: Vec<&Job> = Vec::new();
    for id in jobs {
        match pack.jobs.get(id) {
            Some(j) => library.push(j),
            None => {
                f(
                    Severity::Error,
                    "unknown-job",
                    format!("job `{id}` is not in pack {}'s job library", pack.manifest.id),
                );
                return;
            }
        }
    }
    // What the plan provides, for the inserted jobs' contracts.
    let mut capabilities: HashSet<String> = plan.resolution.iter().map(|r| r.requirement.capability.clone()).collect();
    let mut artifacts: HashSet<String> = HashSet::new();
    for j in &plan.jobs {
        if let Some(job) = pack.jobs.get(&j.job) {
            capabilities.extend(job.outputs.provides.capabilities.iter().map(|c| c.capability.clone()));
            artifacts.extend(job.outputs.artifacts.iter().cloned());
        }
    }
    for job in &library {
        for c in &job.inputs.requires.capabilities {
            if !capabilities.contains(&c.capability) {
                f(
                    Severity::Error,
                    "contract",
                    format!("{} requires capability {}, which nothing in the plan provides", job.id, c.capability),
                );
            }
        }
        for a in &job.inputs.requires.artifacts {
            if !artifacts.contains(a) {
                f(
                    Severity::Error,
                    "contract",
                    format!("{} requires artifact {a}, which no job of the plan produces", job.id),
                );
            }
        }
        capabilities.extend(job.outputs.provides.capabilities.iter().map(|c| c.capability.clone()));
        artifacts.extend(job.outputs.artifacts.iter().cloned());
    }

    let existing: HashSet<String> = plan.jobs.iter().map(|j| j.id.clone()).collect();
    for a in &anchors {
        let on = a.resource.as_deref().map(|r| r.rsplit('/').next().unwrap_or(r).to_string());
        let id_of = |job: &str| match &on {
            Some(name) => format!("{job}@{name}"),
            None => job.to_string(),
        };
        // The chain: after the anchor (or after the anchor's dependencies, when before).
        let mut prev: Vec<String> = if after { vec![a.id.clone()] } else { a.depends_on.clone() };
        let mut added = Vec::new();
        for job in &library {
            let id = id_of(&job.id);
            if existing.contains(&id) || added.iter().any(|x: &JobInstance| x.id == id) {
                f(Severity::Error, "duplicate", format!("the plan already has a job `{id}`"));
                return;
            }
            let because = prev
                .iter()
                .map(|p| format!("inserted by a patch {} {p}", if after { "after" } else { "before" }))
                .collect();
            added.push(JobInstance {
                id: id.clone(),
                job: job.id.clone(),
                title: job.title.clone(),
                stage: a.stage.clone(),
                scope: a.scope.clone(),
                resource: a.resource.clone(),
                depends_on: prev.clone(),
                because,
                destructive: job.controls.destructive,
                skipped: None,
                parameters: Default::default(),
                wave: None,
                verifies: None,
            });
            prev = vec![id];
        }
        let last = prev.first().cloned().unwrap_or_default();
        // After: the anchor's dependents also wait for the last inserted job. Before: the anchor.
        let waiting: Vec<String> = if after {
            plan.jobs.iter().filter(|j| j.depends_on.contains(&a.id)).map(|j| j.id.clone()).collect()
        } else {
            vec![a.id.clone()]
        };
        let mut edits = Vec::new();
        for j in waiting {
            diff.added_edges.push((j.clone(), last.clone()));
            let because = format!("waits for {last}, inserted by a patch");
            edits.push(Edit::AddDependency { job: j, on: last.clone(), because });
        }
        for j in added {
            diff.added_jobs.push((j.id.clone(), j.depends_on.clone()));
            edits.push(Edit::AddJob(j));
        }
        commit(plan, edits, f);
    }
    // A destructive job the patch brings in waits for a person.
    for job in library.iter().filter(|j| j.controls.destructive) {
        let gate = Gate {
            id: format!("confirm-{}", job.id),
            type_: GateType::DestructiveAction,
            reason: format!("job {} is destructive (inserted by a patch)", job.id),
            options: vec!["proceed".into(), "cancel operation".into()],
            required_roles: vec!["sre".into(), "platform_admin".into()],
            before: vec![job.id.clone()],
        };
        if !plan.gates.iter().any(|g| g.id == gate.id) {
            if let Some(gate) = add_gate(plan, &gate, GateSource::Destructive, diff, f) {
                commit(plan, vec![Edit::AddGate(gate)], f);
            }
            f(Severity::Info, "gate-added", format!("{} is destructive: gate {} added before it", job.id, gate.id));
        }
    }
}

/// The reviewer's look at a plan before it runs: what a careful SRE would point out. Warnings
/// and notes, not refusals: the plan is valid; a person decides.
pub fn review(plan: &Plan, pack: &Pack) -> Vec<Finding> {
    let template = pack.templates.iter().find(|t| t.id == plan.template);
    let mut out = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let risky = plan.risk.level >= crate::model::RiskLevel::High;
    for j in &plan.jobs {
        if !seen.insert(j.job.as_str()) {
            continue;
        }
        let Some(job) = template.and_then(|t| pack.job(t, &j.job)) else { continue };
        let note =
            |severity, code: &str, message: String| Finding { severity, code: code.into(), change: None, message };
        if !job.outputs.provides.capabilities.is_empty() && job.outputs.evidence.is_empty() {
            out.push(note(
                Severity::Warning,
                "no-evidence",
                format!(
                    "{} provides {} but no evidence proves it: its exit code alone decides",
                    j.job,
                    job.outputs
                        .provides
                        .capabilities
                        .iter()
                        .map(|c| c.capability.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        if job.controls.destructive
            && !plan.jobs.iter().filter(|i| i.job == j.job).all(|i| {
                i.depends_on
                    .iter()
                    .any(|d| plan.gates.iter().any(|g| g.id == *d && g.type_ == GateType::DestructiveAction))
            })
        {
            out.push(note(
                Severity::Error,
                "destructive-ungated",
                format!("{} is destructive and no destructive_action gate stands before it", j.job),
            ));
        }
        let undo = job.controls.rollback.as_ref().map(|r| r.supported);
        if (risky || job.controls.destructive)
            && matches!(undo, None | Some(crate::model::RollbackSupport::None))
            && job.type_ != crate::model::JobType::Verification
            && job.type_ != crate::model::JobType::Rollback
        {
            out.push(note(
                Severity::Warning,
                "no-rollback",
                format!(
                    "{} cannot be undone (rollback {}) in a {}-risk plan",
                    j.job,
                    if undo.is_none() { "not declared" } else { "none" },
                    plan.risk.level
                ),
            ));
        }
    }
    out
}
