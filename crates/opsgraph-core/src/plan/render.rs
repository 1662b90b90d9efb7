//! Plan previews: text a person reads in one screen, JSON for machines, DOT for Graphviz.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::Value;

pub use crate::plan::preview::*;

use crate::plan::resolve::{GateOption, Outcome};
use crate::plan::types::{amount, JobInstance, Plan};

/// The plan's status in one word.
pub fn status(plan: &Plan) -> PlanStatus {
    if plan.is_blocked() {
        PlanStatus::Blocked
    } else if !plan.gates.is_empty() {
        PlanStatus::WaitingForGates
    } else {
        PlanStatus::Ready
    }
}

/// What a secret parameter's value is shown as in a preview.
pub use crate::plan::types::SECRET;

/// The names of `plan`'s secret parameters, from its template among `packs`. When the pack or
/// its template is not there, every parameter counts as secret (deny by default).
pub fn secret_parameters(plan: &Plan, packs: &[crate::pack::Pack]) -> BTreeSet<String> {
    let template = packs
        .iter()
        .find(|p| p.reference() == plan.pack)
        .and_then(|p| p.templates.iter().find(|t| t.id == plan.template));
    match template {
        Some(t) => t.parameters.iter().filter(|(_, spec)| spec.secret).map(|(name, _)| name.clone()).collect(),
        None => plan.parameters.keys().chain(plan.intent.parameters.keys()).cloned().collect(),
    }
}

/// The JSON preview (`opsgraph plan -o json`, `POST /api/v1/plans`): [`preview`] as JSON.
pub fn json(plan: &Plan, packs: &[crate::pack::Pack]) -> Value {
    serde_json::to_value(preview(plan, packs)).unwrap_or(Value::Null)
}

/// The preview of `plan` as a value: the values of secret parameters (see
/// [`secret_parameters`]; `packs` are those the plan was made from) are shown as [`SECRET`], in
/// the parameters and in the intent, here and in sub-operation plans.
pub fn preview(plan: &Plan, packs: &[crate::pack::Pack]) -> Preview {
    let secret = secret_parameters(plan, packs);
    let mask = |params: &crate::model::Attributes| {
        params
            .iter()
            .map(|(name, value)| {
                let value = if secret.contains(name) { Value::String(SECRET.into()) } else { value.clone() };
                (name.clone(), value)
            })
            .collect()
    };
    let mut intent = plan.intent.clone();
    intent.parameters = mask(&plan.intent.parameters);
    Preview {
        pack: plan.pack.clone(),
        pack_digest: plan.pack_digest.clone(),
        template: plan.template.clone(),
        action: plan.action.clone(),
        intent,
        revision: plan.revision.clone(),
        status: status(plan),
        parameters: mask(&plan.parameters),
        resolution: plan.resolution.iter().map(PreviewResolution::of).collect(),
        stages: plan.stages.clone(),
        jobs: plan
            .jobs
            .iter()
            .map(|j| PreviewJob {
                id: j.id.clone(),
                job: j.job.clone(),
                title: j.title.clone(),
                stage: j.stage.clone(),
                scope: j.scope.clone(),
                resource: j.resource.clone(),
                depends_on: j.depends_on.clone(),
                because: j.because.clone(),
                destructive: j.destructive,
                verifies: j.verifies.clone(),
                wave: j.wave,
            })
            .collect(),
        gates: plan.gates.clone(),
        risk: plan.risk.clone(),
        cost: plan.cost.clone(),
        review: plan.review.clone(),
        sub_operations: plan
            .sub_operations
            .iter()
            .map(|s| PreviewSubOperation {
                requirement: s.requirement.clone(),
                provider: s.provider.clone(),
                chosen: s.chosen,
                error: s.error.clone(),
                plan: s.plan.as_deref().map(|p| Box::new(preview(p, packs))),
            })
            .collect(),
        rollouts: plan.rollouts.clone(),
        // A day-2 action's change to its recorded resource (never a secret: none is inherited
        // or compared).
        inherited: plan.inherited.clone(),
        text: None,
    }
}

fn short_hash(hash: &str) -> &str {
    &hash[..hash.len().min(19)]
}

/// The text preview.
pub fn text(plan: &Plan) -> String {
    let mut s = String::new();
    let i = &plan.intent;
    let _ = writeln!(
        s,
        "Plan {} ({}) for: {} {} {}{}",
        plan.template,
        plan.pack,
        i.action,
        i.target_resource_type,
        i.name.as_deref().unwrap_or("(unnamed)"),
        i.environment.as_deref().map(|e| format!(" in {e}")).unwrap_or_default()
    );
    let _ = writeln!(
        s,
        "Revision {} {}   Risk: {}",
        plan.revision.number,
        short_hash(&plan.revision.hash),
        plan.risk.level
    );
    if let Some(c) = &plan.cost {
        let unit = c.unit.as_deref().map(|u| format!(" {u}")).unwrap_or_default();
        let items: Vec<String> = c.items.iter().map(|i| format!("{} {}", i.what, amount(i.amount))).collect();
        let _ = writeln!(s, "Cost estimate: {}{unit} ({})", amount(c.total), items.join(", "));
    }
    if let Some(d) = &plan.inherited {
        changes(&mut s, d);
    }
    let _ = writeln!(s, "\nCapabilities");
    let width = plan
        .resolution
        .iter()
        .map(|r| r.requirement.capability.len() + r.requirement.scope.as_ref().map_or(0, |x| x.len() + 3))
        .max()
        .unwrap_or(0);
    for r in &plan.resolution {
        let name = match &r.requirement.scope {
            Some(scope) => format!("{} @ {scope}", r.requirement.capability),
            None => r.requirement.capability.clone(),
        };
        let what = match &r.outcome {
            Outcome::Bind { resource, because, .. } => format!("{resource} ({because})"),
            Outcome::BindScope { resources, .. } => abbreviate(resources),
            Outcome::Create { provider, pack, action, .. } => {
                format!("provider {provider} through {pack} {action} (sub-operation)")
            }
            Outcome::Gate { gate } => format!("gate {}", gate.id),
            Outcome::Unsatisfiable { reason } => reason.clone(),
        };
        let _ = writeln!(s, "  {name:<width$}  {:<13}  {what}", r.outcome.name());
        for rej in &r.rejected {
            let _ = writeln!(s, "  {:<width$}    rejected {}: {}", "", rej.candidate, rej.reason);
        }
        let total: usize = r.rejected_by_rule.values().sum();
        if total > r.rejected.len() {
            let rules: Vec<String> = r.rejected_by_rule.iter().map(|(k, n)| format!("{n} {k}")).collect();
            let _ = writeln!(
                s,
                "  {:<width$}    ... {} more rejected ({})",
                "",
                total - r.rejected.len(),
                rules.join(", ")
            );
        }
    }
    if !plan.gates.is_empty() {
        let _ = writeln!(s, "\nGates");
        for g in &plan.gates {
            let _ = writeln!(s, "  {} ({}), answered by {}", g.id, g.type_, g.required_roles.join(" or "));
            let _ = writeln!(s, "    {}", g.reason);
            if !g.options.is_empty() {
                let _ = writeln!(s, "    options: {}", g.options.join(" | "));
            }
            // What a resource brought for an external binding must meet, checked at the answer.
            for (label, checks) in external_checks(plan, &g.id) {
                let _ = writeln!(s, "    {label}: checked when answered: {}", checks.join("; "));
            }
            let _ = writeln!(s, "    blocks: {}", abbreviate(&g.before));
            if !g.opens_after.is_empty() {
                let _ = writeln!(s, "    opens once finished: {}", abbreviate(&g.opens_after));
            }
        }
    }
    if !plan.review.is_empty() {
        let _ = writeln!(s, "\nReview");
        for f in &plan.review {
            let sev = match f.severity {
                crate::plan::types::Severity::Error => "error",
                crate::plan::types::Severity::Warning => "warning",
                crate::plan::types::Severity::Info => "note",
            };
            let _ = writeln!(s, "  {sev}[{}]: {}", f.code, f.message);
        }
    }
    let _ = writeln!(s, "\nStages");
    let by_id: std::collections::HashMap<&str, &JobInstance> = plan.jobs.iter().map(|j| (j.id.as_str(), j)).collect();
    for (n, stage) in plan.stages.iter().enumerate() {
        let mut by_job: Vec<(&str, Vec<&str>)> = Vec::new();
        for id in &stage.jobs {
            let Some(j) = by_id.get(id.as_str()) else {
                continue;
            };
            let on = j.resource.as_deref().map(|r| r.rsplit('/').next().unwrap_or(r)).unwrap_or("");
            match by_job.iter_mut().find(|(job, _)| *job == j.job) {
                Some((_, rs)) => rs.push(on),
                None => by_job.push((&j.job, vec![on])),
            }
        }
        let jobs: Vec<String> = by_job
            .iter()
            .map(|(job, rs)| {
                let rs: Vec<String> = rs.iter().filter(|r| !r.is_empty()).map(|r| r.to_string()).collect();
                if rs.is_empty() {
                    job.to_string()
                } else {
                    format!("{job} @ {}", abbreviate(&rs))
                }
            })
            .collect();
        let _ = writeln!(s, "  {}. {:<18} {}", n + 1, stage.name, jobs.join("; "));
    }
    if !plan.rollouts.is_empty() {
        let _ = writeln!(s, "\nRollouts");
        for r in &plan.rollouts {
            let _ = writeln!(s, "  {}: {}", r.job, r.summary());
            for k in 1..=r.waves.len() as u32 {
                let on: Vec<String> = plan
                    .jobs
                    .iter()
                    .filter(|j| j.job == r.job && j.wave == Some(k))
                    .map(|j| j.resource.as_deref().map_or(j.id.as_str(), |r| r.rsplit('/').next().unwrap_or(r)))
                    .map(str::to_string)
                    .collect();
                let _ = writeln!(s, "    wave {k}: {}", abbreviate(&on));
                if let (Some(c), Some((_, id))) = (&r.checks, r.check_instances().iter().find(|(w, _)| *w == k)) {
                    let pause = r.pause_between.as_ref().map(|p| format!(" after {p}")).unwrap_or_default();
                    let _ = writeln!(s, "    then {id}{pause}: {} on {}", c.list(), c.on_words());
                }
            }
        }
    }
    if !plan.sub_operations.is_empty() {
        let _ = writeln!(s, "\nSub-operations");
        for sub in &plan.sub_operations {
            let role = if sub.chosen { "runs first".to_string() } else { "if chosen at its gate".to_string() };
            match (&sub.plan, &sub.error) {
                (Some(p), None) => {
                    let _ = writeln!(
                        s,
                        "  {} for {} ({role}): {} {}, {} jobs in {} stages, {} gates",
                        sub.provider,
                        sub.requirement,
                        p.pack,
                        p.action,
                        p.jobs.len(),
                        p.stages.len(),
                        p.gates.len()
                    );
                    for r in &p.resolution {
                        let _ = writeln!(s, "    {} {}", r.requirement.capability, r.outcome.name());
                    }
                }
                (_, Some(e)) => {
                    let _ = writeln!(s, "  {} for {} ({role}): cannot be planned: {e}", sub.provider, sub.requirement);
                }
                (None, None) => {}
            }
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{} job{}, {} gate{}. Nothing has run. Status: {}.",
        plan.jobs.len(),
        if plan.jobs.len() == 1 { "" } else { "s" },
        plan.gates.len(),
        if plan.gates.len() == 1 { "" } else { "s" },
        match status(plan) {
            PlanStatus::Blocked => "blocked: a requirement cannot be met",
            PlanStatus::WaitingForGates => "ready to apply; gates will wait for a person",
            PlanStatus::Ready => "ready to apply",
        }
    );
    s
}

/// A day-2 plan's section: what it changes on the recorded resource (`~ name from → to`), what it
/// keeps as recorded, and what evidence last observed there.
fn changes(s: &mut String, d: &crate::plan::day2::Inherited) {
    use crate::plan::day2::show;
    let status = d.status.as_deref().map(|st| format!("{st}, ")).unwrap_or_default();
    let _ = writeln!(s, "\nChanges to {} ({status}recorded by {})", d.resource, d.operation);
    let width = d.changes.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in &d.changes {
        let _ = writeln!(s, "  ~ {:<width$}  {} → {}", c.name, show(&c.from), show(&c.to));
    }
    if d.changes.is_empty() {
        let _ = writeln!(s, "  no parameter or target differs from the record");
    }
    let mut kept: Vec<String> = d.parameters.iter().map(|(k, v)| format!("{k}={}", show(v))).collect();
    kept.extend(d.targets.iter().map(|(k, ids)| format!("targets.{k}={}", ids.join(","))));
    if !kept.is_empty() {
        let _ = writeln!(s, "  as recorded: {}", kept.join(", "));
    }
    if !d.observed.is_empty() {
        let seen: Vec<String> = d.observed.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "  observed: {}", seen.join(", "));
    }
}

fn abbreviate(items: &[String]) -> String {
    const SHOWN: usize = 4;
    if items.len() <= SHOWN {
        items.join(", ")
    } else {
        format!("{}, ... ({} in all)", items[..SHOWN].join(", "), items.len())
    }
}

/// Graphviz: stages as clusters, gates as diamonds.
pub fn dot(plan: &Plan) -> String {
    let mut s = String::new();
    let q = |x: &str| format!("\"{}\"", x.replace('\\', "\\\\").replace('"', "\\\""));
    let _ = writeln!(s, "digraph {} {{", q(&plan.template));
    let _ = writeln!(s, "  rankdir=LR;\n  node [shape=box, fontname=\"sans-serif\"];");
    for (n, stage) in plan.stages.iter().enumerate() {
        let _ = writeln!(s, "  subgraph cluster_{n} {{\n    label={};", q(&stage.name));
        for j in &stage.jobs {
            let _ = writeln!(s, "    {};", q(j));
        }
        let _ = writeln!(s, "  }}");
    }
    for g in &plan.gates {
        let _ = writeln!(s, "  {} [shape=diamond, label={}];", q(&g.id), q(&format!("{}\n({})", g.id, g.type_)));
    }
    for j in &plan.jobs {
        for d in &j.depends_on {
            let _ = writeln!(s, "  {} -> {};", q(d), q(&j.id));
        }
    }
    let _ = writeln!(s, "}}");
    s
}

/// The external-binding options of resolution gate `id` that carry checks, by label.
fn external_checks<'p>(plan: &'p Plan, id: &str) -> Vec<(&'p str, &'p [String])> {
    plan.resolution
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::Gate { gate } if gate.id == id => Some(&gate.options),
            _ => None,
        })
        .flatten()
        .filter_map(|o| match o {
            GateOption::BindExternal { label, checks, .. } if !checks.is_empty() => Some((label.as_str(), &checks[..])),
            _ => None,
        })
        .collect()
}

/// The options of a resolution gate, by label (for callers answering it).
pub fn option_labels(options: &[GateOption]) -> Vec<&str> {
    options.iter().map(GateOption::label).collect()
}
