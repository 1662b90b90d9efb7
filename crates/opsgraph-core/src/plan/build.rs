//! Plan building: intent + pack + world -> resolved capability graph -> DAG of job instances and
//! gates, grouped in stages. A plan revision is immutable and carries a content hash.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::model::{Attributes, Gate, GateType, Intent, Job, PlanTemplate, Provider, Requirement, Resource, RiskLevel};
use crate::pack::Pack;

use crate::plan::edit::{apply, Edit};
use crate::plan::params::check_parameter;
use crate::plan::resolve::{self, Context, GateOption, Outcome};
use crate::plan::types::{Cost, CostItem, GateSource, Input, JobInstance, Plan, PlanGate, Risk, SubOperation};
use crate::plan::Error;

const MAX_DEPTH: usize = 3;

/// Builds the plan for an intent.
pub fn build(input: &Input<'_>) -> Result<Plan, Vec<Error>> {
    build_at(input, 0)
}

fn build_at(input: &Input<'_>, depth: usize) -> Result<Plan, Vec<Error>> {
    let pack = find_pack(input.packs, input.intent).map_err(|e| vec![e])?;
    let intent = input.intent;
    let template = pack.template_for(&intent.action).ok_or_else(|| {
        vec![Error::UnknownAction {
            pack: pack.manifest.id.clone(),
            action: intent.action.clone(),
            available: pack.templates.iter().map(|t| t.action.clone()).collect(),
        }]
    })?;
    // A day-2 action on a recorded resource: what the intent does not give comes from the record.
    let day2 = crate::plan::day2::inherit(input.intent, template, input.recorded);
    let intent = day2.as_ref().map_or(intent, |(effective, _)| effective);
    let mut errors = Vec::new();
    let mut edits = Vec::new();

    // Limits first: nothing below is worth computing for an input past them.
    use crate::plan::limits::*;
    let limit = |what, limit, found| Error::Limit { what, limit, found };
    if intent.parameters.len() > MAX_PARAMETERS {
        return Err(vec![limit("parameters of the intent", MAX_PARAMETERS, intent.parameters.len())]);
    }
    for v in intent.parameters.values() {
        let n = serde_json::to_string(v).map_or(0, |t| t.len());
        if n > MAX_PARAMETER_BYTES {
            return Err(vec![limit("bytes of one parameter value", MAX_PARAMETER_BYTES, n)]);
        }
    }
    let targets: usize = intent.targets.values().map(Vec::len).max().unwrap_or(0);
    if targets > MAX_FAN_OUT {
        return Err(vec![limit("resources of one target list (fan-out)", MAX_FAN_OUT, targets)]);
    }

    // Parameters.
    let (parameters, missing) = parameters(pack, template, intent, &mut errors);
    edits.push(Edit::SetParameters(parameters.clone()));

    // Scopes.
    let mut scopes: BTreeMap<&str, Vec<&Resource>> = BTreeMap::new();
    for (name, spec) in &template.scopes {
        let mut resources: Vec<&Resource> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        for from in &spec.from {
            let key = from.strip_prefix("targets.").unwrap_or(from);
            for id in intent.targets.get(key).into_iter().flatten() {
                match input.inventory.get(id) {
                    None => errors.push(Error::UnknownResource { id: id.clone(), scope: name.clone() }),
                    Some(r) if r.type_ != spec.resource_type => errors.push(Error::WrongResourceType {
                        id: id.clone(),
                        scope: name.clone(),
                        expected: spec.resource_type.clone(),
                        found: r.type_.clone(),
                    }),
                    Some(r) if seen.insert(r.id.as_str()) => resources.push(r),
                    Some(_) => {}
                }
            }
        }
        let n = resources.len() as u32;
        if spec.min.is_some_and(|m| n < m) || spec.max.is_some_and(|m| n > m) {
            errors.push(Error::ScopeSize { scope: name.clone(), count: n, min: spec.min, max: spec.max });
        }
        scopes.insert(name, resources);
    }
    // The template's refusals ([I]): what was inherited and defaulted counts, as does the
    // record of the resource the intent names (whichever action it is).
    let recorded = input.recorded.filter(|r| intent.resource_id().as_deref() == Some(r.resource.id.as_str()));
    let facts = crate::plan::refuse::Facts { parameters: &parameters, targets: &intent.targets, recorded };
    errors.extend(crate::plan::refuse::check(template, &facts));
    for key in intent.targets.keys() {
        let used = template.scopes.values().any(|s| s.from.iter().any(|f| f.strip_prefix("targets.") == Some(key)));
        if !used {
            errors.push(Error::UnknownTarget { name: key.clone(), template: template.id.clone() });
        }
    }

    // Jobs, their scopes and instances.
    let stage_of: HashMap<&str, &str> =
        template.stages.iter().flat_map(|s| s.jobs.iter().map(move |j| (j.as_str(), s.id.as_str()))).collect();
    let mut jobs: Vec<(&Job, Option<&str>)> = Vec::new();
    let index = pack.job_index(template);
    for entry in &template.jobs {
        let Some(job) = index.get(entry.id()) else {
            errors.push(Error::UnknownJob { id: entry.id().to_string(), referenced_by: template.id.clone() });
            continue;
        };
        match job_scope(job, template) {
            Ok(scope) => jobs.push((job, scope)),
            Err(e) => errors.push(e),
        }
    }
    for name in intent.rollouts.keys().filter(|n| !jobs.iter().any(|(j, _)| j.id == **n)) {
        errors.push(Error::UnknownJob { id: name.clone(), referenced_by: "the intent's rollouts".into() });
    }
    let instance_id = |job: &str, r: Option<&Resource>| match r {
        Some(r) => format!("{job}@{}", r.name),
        None => job.to_string(),
    };
    // Counted before a single instance is made: a template of many jobs over a wide scope must
    // be refused at its limit, not after it has filled memory with instance ids.
    let total: usize = jobs
        .iter()
        .map(|(_, scope)| match scope {
            Some(s) => scopes.get(s).map_or(0, |rs| rs.len()),
            None => 1,
        })
        .fold(0usize, usize::saturating_add);
    if total > MAX_INSTANCES {
        return Err(vec![limit("job instances of the plan", MAX_INSTANCES, total)]);
    }
    // (job id) -> [(resource id, instance id)]
    let mut instances: HashMap<&str, Vec<(Option<&str>, String)>> = HashMap::new();
    for (job, scope) in &jobs {
        let list = match scope {
            Some(s) => scopes
                .get(s)
                .map(|rs| rs.iter().map(|r| (Some(r.id.as_str()), instance_id(&job.id, Some(r)))).collect())
                .unwrap_or_default(),
            None => vec![(None, job.id.clone())],
        };
        instances.insert(job.id.as_str(), list);
    }

    // (job id, resource id) -> instance id, for edges between instances on the same resource.
    let on_resource: HashMap<(&str, &str), &String> = instances
        .iter()
        .flat_map(|(job, list)| list.iter().filter_map(move |(r, id)| r.map(|r| ((*job, r), id))))
        .collect();

    // Who provides what.
    let mut cap_provider: HashMap<&str, &str> = HashMap::new();
    let mut artifact_provider: HashMap<&str, &str> = HashMap::new();
    for (job, _) in &jobs {
        for p in &job.outputs.provides.capabilities {
            if let Some(other) = cap_provider.insert(&p.capability, &job.id) {
                if other != job.id {
                    errors.push(Error::TwoProviders {
                        output: format!("capability {}", p.capability),
                        jobs: [other.into(), job.id.clone()],
                    });
                }
            }
        }
        for a in &job.outputs.artifacts {
            if let Some(other) = artifact_provider.insert(a, &job.id) {
                if other != job.id {
                    errors.push(Error::TwoProviders {
                        output: format!("artifact {a}"),
                        jobs: [other.into(), job.id.clone()],
                    });
                }
            }
        }
    }

    // Edges, and the requirements nobody in the plan provides.
    let mut external: Vec<(Requirement, Vec<String>)> = Vec::new();
    let mut add_external = |req: &Requirement, by: &str| match external
        .iter_mut()
        .find(|(r, _)| r.capability == req.capability && r.scope == req.scope)
    {
        Some((r, users)) => {
            for (k, v) in &req.constraints {
                r.constraints.entry(k.clone()).or_insert_with(|| v.clone());
            }
            if !users.iter().any(|u| u == by) {
                users.push(by.to_string());
            }
        }
        None => external.push((req.clone(), vec![by.to_string()])),
    };
    for req in template.requires.as_ref().unwrap_or(&pack.manifest.requires).iter().chain(&intent.requires) {
        add_external(req, "pack");
    }
    let mut job_edits = Vec::new();
    let mut rollouts = Vec::new();
    for (job, scope) in &jobs {
        // What this job waits for, decided once per job: (provider job, same resource, why).
        let mut links: Vec<(&str, bool, String)> = Vec::new();
        for req in &job.inputs.requires.capabilities {
            match cap_provider.get(req.capability.as_str()) {
                Some(p) if *p != job.id => {
                    let same = req.scope.is_none() || req.scope.as_deref() == *scope;
                    links.push((p, same, format!("requires capability {}", req.capability)));
                }
                Some(_) => {}
                None => add_external(req, &job.id),
            }
        }
        for a in &job.inputs.requires.artifacts {
            match artifact_provider.get(a.as_str()) {
                Some(p) if *p != job.id => links.push((p, true, format!("requires artifact {a}"))),
                Some(_) => {}
                None => errors.push(Error::Unprovided {
                    job: job.id.clone(),
                    what: format!("artifact {a}"),
                    scope: scope.map(str::to_string),
                }),
            }
        }
        for after in &job.after {
            if instances.contains_key(after.as_str()) {
                links.push((after, true, "after (explicit ordering)".to_string()));
            } else {
                errors.push(Error::UnknownJob { id: after.clone(), referenced_by: job.id.clone() });
            }
        }
        let stage = stage_of.get(job.id.as_str()).copied().unwrap_or("");
        let mine = instances.get(job.id.as_str()).map_or(&[][..], Vec::as_slice);
        let (policy, from) = rollout_policy(input, intent, job);
        // The checks between its waves: its evidence, and its resource type's verification.
        let resource_checks = pack.manifest.resource_spec(&intent.target_resource_type).map_or(&[][..], |r| &r.verify);
        let rollout = scope.and_then(|_| {
            let evidence = &job.outputs.evidence;
            crate::plan::rollout::plan_rollout(&job.id, policy, mine.len(), from, evidence, resource_checks)
        });
        for (index, (resource, id)) in mine.iter().enumerate() {
            let mut depends_on: Vec<String> = Vec::new();
            let mut because: Vec<String> = Vec::new();
            let mut seen: HashSet<&str> = HashSet::new();
            for (provider, same_resource, why) in &links {
                let same = match (same_resource, resource) {
                    (true, Some(r)) => on_resource.get(&(*provider, *r)).copied(),
                    _ => None,
                };
                let all = instances.get(provider).into_iter().flatten().map(|(_, i)| i);
                for t in same.into_iter().chain(all.filter(|_| same.is_none())) {
                    if t != id && seen.insert(t.as_str()) {
                        depends_on.push(t.clone());
                        because.push(why.clone());
                    }
                }
            }
            // A rolling job: each instance waits for the one before it (the scope's order).
            if job.controls.rollout.order == crate::model::RolloutOrder::OneAtATime {
                if let Some(previous) = job_edits.last().filter(|p: &&JobInstance| p.job == job.id) {
                    depends_on.push(previous.id.clone());
                    because.push("one at a time (controls.rollout)".to_string());
                }
            }
            job_edits.push(JobInstance {
                id: id.clone(),
                job: job.id.clone(),
                title: job.title.clone(),
                stage: stage.to_string(),
                scope: scope.map(str::to_string),
                resource: resource.map(str::to_string),
                depends_on,
                because,
                destructive: job.controls.destructive,
                skipped: None,
                parameters: Attributes::new(),
                wave: rollout.as_ref().map(|r| r.wave_of(index)),
                verifies: None,
            });
        }
        // The checks between waves: an instance after each wave but the last, run by the runtime
        // (no script of the pack), after the hosts it checks (edges the runtime counts as met
        // once they finished, done or failed); the next wave starts once it passed (not an edge,
        // as waves are not: the job-level graph stays a DAG).
        for (k, id) in rollout.iter().flat_map(|r| r.check_instances()) {
            let checks = rollout.as_ref().and_then(|r| r.checks.as_ref()).map(|c| c.list()).unwrap_or_default();
            let hosts: Vec<String> = job_edits
                .iter()
                .filter(|j| j.job == job.id && j.wave.is_some_and(|w| w <= k))
                .map(|j| j.id.clone())
                .collect();
            let because = vec![format!("checks the hosts of waves 1 to {k}"); hosts.len()];
            job_edits.push(JobInstance {
                id: id.clone(),
                job: id,
                title: Some(format!("checks after wave {k} of {}: {checks}", job.id)),
                stage: stage.to_string(),
                scope: None,
                resource: None,
                depends_on: hosts,
                because,
                destructive: false,
                skipped: None,
                parameters: Attributes::new(),
                wave: None,
                verifies: Some(crate::plan::rollout::WaveRef { job: job.id.clone(), wave: k }),
            });
        }
        rollouts.extend(rollout);
    }

    let edges: usize = job_edits.iter().map(|j| j.depends_on.len()).sum();
    if edges > MAX_EDGES {
        return Err(vec![limit("dependency edges of the plan", MAX_EDGES, edges)]);
    }

    // Resolution.
    let mut providers: Vec<Provider> = input.providers.to_vec();
    for p in input.packs.iter().flat_map(|p| &p.providers) {
        if !providers.iter().any(|q| q.id == p.id) {
            providers.push(p.clone());
        }
    }
    let requester = pack.manifest.display_title();
    let cx = Context {
        inventory: input.inventory,
        providers: &providers,
        policy: input.policy,
        intent,
        requester: &requester,
        roles: input.roles,
    };
    let mut resolution = Vec::new();
    for (req, by) in external {
        let scoped = req.scope.as_deref().and_then(|s| scopes.get(s).map(|rs| (s, rs)));
        let r = match (req.scope.as_deref(), scoped) {
            (Some(s), Some((_, rs))) => resolve::resolve_scoped(&cx, &req, s, rs, by),
            (Some(s), None) => {
                errors.push(Error::UnknownScope { scope: s.to_string(), capability: req.capability.clone(), jobs: by });
                continue;
            }
            (None, _) => resolve::resolve(&cx, &req, by),
        };
        resolution.push(r);
    }

    // Sub-operations: the plan of each provider that would be created.
    let mut subs = Vec::new();
    if depth < MAX_DEPTH {
        for r in &mut resolution {
            let creates: Vec<(String, String, String, Attributes, bool)> = match &r.outcome {
                Outcome::Create { provider, pack, action, parameters } => {
                    vec![(provider.clone(), pack.clone(), action.clone(), parameters.clone(), true)]
                }
                Outcome::Gate { gate } => gate
                    .options
                    .iter()
                    .filter_map(|o| match o {
                        GateOption::Create { provider, pack, action, parameters, .. } => {
                            Some((provider.clone(), pack.clone(), action.clone(), parameters.clone(), false))
                        }
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            for (provider, pack_id, action, params, chosen) in creates {
                let sub = sub_operation(input, &r.requirement, &provider, &pack_id, &action, &params, chosen, depth);
                if chosen {
                    if let Some(e) = &sub.error {
                        r.outcome =
                            Outcome::Unsatisfiable { reason: format!("provider {provider} cannot be created: {e}") };
                    }
                }
                subs.push(sub);
            }
        }
    }

    // Gates.
    let roots: Vec<String> = job_edits.iter().filter(|j| j.depends_on.is_empty()).map(|j| j.id.clone()).collect();
    let instances_of = |job_ids: &[String]| -> Vec<String> {
        let wanted: BTreeSet<&str> = job_ids.iter().map(String::as_str).collect();
        job_edits.iter().filter(|j| wanted.contains(j.job.as_str())).map(|j| j.id.clone()).collect()
    };
    let mut gates: Vec<PlanGate> = Vec::new();
    for r in &resolution {
        if let Outcome::Gate { gate } = &r.outcome {
            let users: Vec<String> = r.required_by.iter().filter(|u| *u != "pack").cloned().collect();
            let before = if users.is_empty() { roots.clone() } else { instances_of(&users) };
            gates.push(PlanGate {
                id: gate.id.clone(),
                type_: gate.type_,
                reason: gate.reason.clone(),
                options: gate.options.iter().map(|o| o.label().to_string()).collect(),
                required_roles: gate.required_roles.clone(),
                before,
                source: GateSource::Resolution,
                opens_after: Vec::new(),
            });
        }
    }
    for r in &resolution {
        if let Some(ex) = &r.exception {
            let users: Vec<String> = r.required_by.iter().filter(|u| *u != "pack").cloned().collect();
            gates.push(PlanGate {
                id: ex.gate.clone(),
                type_: GateType::PolicyException,
                reason: ex.reason.clone(),
                options: vec!["grant exception".into(), "cancel operation".into()],
                required_roles: ex.required_roles.clone(),
                before: if users.is_empty() { roots.clone() } else { instances_of(&users) },
                source: GateSource::Policy,
                opens_after: Vec::new(),
            });
        }
    }
    for g in &template.gates {
        gates.push(plan_gate(
            g,
            if g.before.is_empty() { roots.clone() } else { instances_of(&g.before) },
            GateSource::Template,
        ));
    }
    for (param, users) in &missing {
        let before = if users.is_empty() { roots.clone() } else { instances_of(users) };
        gates.push(PlanGate {
            id: format!("input-{}", param.replace('_', "-")),
            type_: GateType::MissingInput,
            reason: format!("parameter {param} is required and the intent gives no value"),
            options: vec!["provide a value".into(), "cancel operation".into()],
            required_roles: vec!["operator".into(), "sre".into(), "platform_admin".into()],
            before,
            source: GateSource::MissingInput,
            opens_after: Vec::new(),
        });
    }
    for (job, _) in jobs.iter().filter(|(j, _)| j.controls.destructive) {
        // A destructive job on an empty scope (no HA control-plane members) destroys nothing.
        let before = instances_of(std::slice::from_ref(&job.id));
        if before.is_empty() {
            continue;
        }
        gates.push(PlanGate {
            id: format!("confirm-{}", job.id),
            type_: GateType::DestructiveAction,
            reason: format!("job {} is destructive", job.id),
            options: vec!["proceed".into(), "cancel operation".into()],
            required_roles: vec!["sre".into(), "platform_admin".into()],
            // Confirmed once what comes before it ran (its checks): not up front.
            opens_after: crate::plan::canary::before_all(&before, &job_edits),
            before,
            source: GateSource::Destructive,
        });
    }
    gates.extend(rollouts.iter().filter_map(|r| crate::plan::canary::canary_gate(r, &job_edits)));
    let level = template.risk.unwrap_or(pack.manifest.risk.default_level);
    let approval_from = pack.manifest.risk.approval_from.unwrap_or(RiskLevel::High);
    if level >= approval_from {
        gates.push(PlanGate {
            id: "approve-plan".into(),
            type_: GateType::Approval,
            reason: format!(
                "{} {} is {level} risk: the plan needs approval before it runs",
                requester, template.action
            ),
            options: vec!["approve".into(), "cancel operation".into()],
            required_roles: vec!["sre".into(), "platform_admin".into()],
            before: roots.clone(),
            source: GateSource::Risk,
            opens_after: Vec::new(),
        });
    }

    // Cost: each job instance's annotation, plus each provider the plan creates (its own
    // estimate, else the estimate of its sub-operation's plan).
    let ops_rule = input.operations.for_environment(intent.environment.as_deref());
    let mut items: Vec<CostItem> = Vec::new();
    for (job, _) in &jobs {
        if let Some(c) = job.cost {
            let n = job_edits.iter().filter(|j| j.job == job.id).count();
            let what = if n == 1 { format!("job {}", job.id) } else { format!("job {} × {n}", job.id) };
            items.push(CostItem { what, amount: c * n as f64 });
        }
    }
    for r in &resolution {
        if let Outcome::Create { provider, .. } = &r.outcome {
            let own = providers.iter().find(|p| p.id == *provider).and_then(|p| p.cost);
            let sub = subs.iter().find(|s| s.provider == *provider).and_then(|s| s.plan.as_ref()?.cost.as_ref());
            if let Some(amount) = own.or(sub.map(|c| c.total)) {
                items.push(CostItem { what: format!("provider {provider}"), amount });
            }
        }
    }
    let cost = (!items.is_empty()).then(|| Cost {
        total: items.iter().map(|i| i.amount).sum(),
        unit: ops_rule.and_then(|r| r.cost_unit.clone()),
        items,
    });
    // The cost confirmation and the operations policy's rules ([O]): gates, or a refusal.
    match crate::plan::operations::operations(ops_rule, intent, input.roles, cost.as_ref(), &roots) {
        Ok(more) => gates.extend(more),
        Err(denied) => errors.push(denied),
    }

    let mut reasons = vec![format!("{} risk level of {}", level, pack.manifest.id)];
    for j in jobs.iter().filter(|(j, _)| j.controls.destructive) {
        reasons.push(format!("destructive job {}", j.0.id));
    }
    let creates = resolution.iter().filter(|r| matches!(r.outcome, Outcome::Create { .. })).count();
    if creates > 0 {
        reasons.push(format!("{creates} provider(s) created as sub-operations"));
    }
    if !gates.is_empty() {
        reasons.push(format!("{} gate(s) wait for a person", gates.len()));
    }

    if !errors.is_empty() {
        return Err(errors);
    }

    for s in &template.stages {
        edits.push(Edit::AddStage { id: s.id.clone(), name: s.name.clone() });
    }
    edits.extend(job_edits.into_iter().map(Edit::AddJob));
    edits.extend(gates.into_iter().map(Edit::AddGate));
    edits.push(Edit::SetResolution(resolution));
    edits.push(Edit::SetRisk(Risk { level, reasons }));
    edits.push(Edit::SetSubOperations(subs));
    edits.push(Edit::SetCost(cost));
    edits.push(Edit::SetRollouts(rollouts));
    let mut empty = Plan::empty(pack, template, input.intent);
    empty.inherited = day2.map(|(_, mut inherited)| {
        if let Some(recorded) = input.recorded {
            inherited.changes = crate::plan::day2::changes(template, &parameters, input.intent, recorded);
        }
        inherited
    });
    // The top plan's hash covers every input (a sub-operation's plan is part of it).
    empty.inputs = (depth == 0).then(|| crate::plan::inputs::digest(input));
    let mut plan = apply(empty, edits)?;
    plan.review = crate::plan::patch::review(&plan, pack);
    Ok(plan)
}

#[expect(clippy::too_many_arguments)]
fn sub_operation(
    input: &Input<'_>,
    req: &Requirement,
    provider: &str,
    pack_id: &str,
    action: &str,
    params: &Attributes,
    chosen: bool,
    depth: usize,
) -> SubOperation {
    let result = (|| {
        let pack = highest(input.packs.iter().filter(|p| p.manifest.id == pack_id))
            .ok_or_else(|| format!("pack {pack_id} is not loaded"))?;
        let target = pack
            .manifest
            .resource_types
            .first()
            .cloned()
            .ok_or_else(|| format!("pack {pack_id} manages no resource type"))?;
        let parent = input.intent.name.clone().unwrap_or_else(|| "operation".into());
        let sub_intent = Intent {
            id: None,
            target_resource_type: target,
            action: action.to_string(),
            pack: Some(pack_id.to_string()),
            name: Some(format!("{}-{}", provider.replace('_', "-"), parent)),
            environment: input.intent.environment.clone(),
            desired_result: Some(format!("{} for {parent}", req.capability)),
            organization: input.intent.organization.clone(),
            criticality: input.intent.criticality.clone(),
            compliance: input.intent.compliance.clone(),
            parameters: params.clone(),
            constraints: input.intent.constraints.clone(),
            targets: BTreeMap::new(),
            requires: Vec::new(),
            rollouts: Default::default(),
        };
        let sub_input = Input { intent: &sub_intent, recorded: None, ..*input };
        build_at(&sub_input, depth + 1)
            .map_err(|errs| errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
    })();
    let (plan, error) = match result {
        Ok(p) if p.is_blocked() => {
            (Some(Box::new(p)), Some("its own plan has an unsatisfiable requirement".to_string()))
        }
        Ok(p) => (Some(Box::new(p)), None),
        Err(e) => (None, Some(e)),
    };
    SubOperation { requirement: req.capability.clone(), provider: provider.to_string(), chosen, plan, error }
}

/// A job's rollout: the environment's operations policy wins over the intent, the intent over
/// the pack ([P]); with where it came from.
fn rollout_policy<'a>(input: &'a Input<'_>, intent: &'a Intent, job: &'a Job) -> (&'a crate::model::Rollout, String) {
    let env = intent.environment.as_deref();
    if let Some(r) = input.operations.for_environment(env).and_then(|o| o.rollouts.get(&job.id)) {
        return (r, format!("the operations policy of {}", env.unwrap_or("default")));
    }
    match intent.rollouts.get(&job.id) {
        Some(r) => (r, "the intent".into()),
        None => (&job.controls.rollout, "the pack".into()),
    }
}

fn plan_gate(g: &Gate, before: Vec<String>, source: GateSource) -> PlanGate {
    PlanGate {
        id: g.id.clone(),
        type_: g.type_,
        reason: g.reason.clone(),
        options: g.options.clone(),
        required_roles: g.required_roles.clone(),
        before,
        source,
        opens_after: Vec::new(),
    }
}

/// The pack an intent names (`id`, or `id@version`), else the one managing its target type.
/// Several versions of one pack may be loaded side by side: without a version, the highest wins
/// ([`crate::pack::compare_versions`]).
fn find_pack<'a>(packs: &'a [Pack], intent: &Intent) -> Result<&'a Pack, Error> {
    if let Some(r) = &intent.pack {
        let (id, version) = crate::pack::split_pack_ref(r);
        let same_id = packs.iter().filter(|p| p.manifest.id == id);
        let found = match version {
            Some(v) => same_id.into_iter().find(|p| p.manifest.version == v),
            None => highest(same_id),
        };
        return found.ok_or_else(|| Error::UnknownPack {
            id: r.clone(),
            available: packs.iter().map(Pack::reference).collect(),
        });
    }
    let mut found: Vec<&Pack> = Vec::new();
    for p in packs.iter().filter(|p| p.manifest.resource_types.contains(&intent.target_resource_type)) {
        match found.iter_mut().find(|f| f.manifest.id == p.manifest.id) {
            Some(f) => {
                if crate::pack::compare_versions(&p.manifest.version, &f.manifest.version).is_gt() {
                    *f = p;
                }
            }
            None => found.push(p),
        }
    }
    match found.as_slice() {
        [one] => Ok(one),
        [] => Err(Error::NoPackForType {
            resource_type: intent.target_resource_type.clone(),
            available: packs.iter().flat_map(|p| p.manifest.resource_types.iter().cloned()).collect(),
        }),
        several => Err(Error::AmbiguousPack {
            resource_type: intent.target_resource_type.clone(),
            packs: several.iter().map(|p| p.manifest.id.clone()).collect(),
        }),
    }
}

/// The problems `build` finds in an intent's parameters, found without an inventory (for
/// `opsgraph validate`): the pack and template the intent picks, as `build` picks them, then every
/// parameter checked by the same code (`parameters`): unknown names, types, enums, artifact
/// references. `Err` when no pack or template is found (what `build` reports as P001/P002).
pub fn check_intent_parameters(packs: &[Pack], intent: &Intent) -> Result<Vec<Error>, Error> {
    let pack = find_pack(packs, intent)?;
    let template = pack.template_for(&intent.action).ok_or_else(|| Error::UnknownAction {
        pack: pack.manifest.id.clone(),
        action: intent.action.clone(),
        available: pack.templates.iter().map(|t| t.action.clone()).collect(),
    })?;
    let mut errors = Vec::new();
    parameters(pack, template, intent, &mut errors);
    Ok(errors)
}

/// The highest version among packs (the first one loaded among equal versions).
fn highest<'a>(packs: impl Iterator<Item = &'a Pack>) -> Option<&'a Pack> {
    packs.fold(None, |best: Option<&Pack>, p| match best {
        Some(b) if crate::pack::compare_versions(&p.manifest.version, &b.manifest.version).is_le() => Some(b),
        _ => Some(p),
    })
}

/// The template scope a job fans out over. A job without `scope` runs once. `scope.target` names
/// the template scope; else the template scope of the job's resource type, and where several
/// have that type, the one its scoped requirements and provisions name.
fn job_scope<'a>(job: &'a Job, template: &'a PlanTemplate) -> Result<Option<&'a str>, Error> {
    let Some(scope) = &job.scope else {
        return Ok(None);
    };
    if let Some(target) = scope.target.as_deref() {
        return if template.scopes.contains_key(target) {
            Ok(Some(target))
        } else {
            Err(Error::UnknownScope { scope: target.into(), capability: String::new(), jobs: vec![job.id.clone()] })
        };
    }
    let of_type: Vec<&str> = template
        .scopes
        .iter()
        .filter(|(_, s)| scope.resources.is_empty() || scope.resources.contains(&s.resource_type))
        .map(|(n, _)| n.as_str())
        .collect();
    if let [one] = of_type.as_slice() {
        return Ok(Some(one));
    }
    let named: BTreeSet<&str> = job
        .inputs
        .requires
        .capabilities
        .iter()
        .filter_map(|r| r.scope.as_deref())
        .chain(job.outputs.provides.capabilities.iter().filter_map(|p| p.scope.as_deref()))
        .filter(|s| of_type.contains(s))
        .collect();
    match named.len() {
        1 => Ok(named.into_iter().next()),
        _ if of_type.is_empty() => Err(Error::UnknownScope {
            scope: scope.resources.join(", "),
            capability: String::new(),
            jobs: vec![job.id.clone()],
        }),
        _ => {
            Err(Error::AmbiguousScope { job: job.id.clone(), scopes: of_type.iter().map(|s| s.to_string()).collect() })
        }
    }
}

/// The template's parameters filled from the intent; required ones without a value are returned
/// with the jobs that use them (they become missing_input gates).
fn parameters(
    pack: &Pack,
    template: &PlanTemplate,
    intent: &Intent,
    errors: &mut Vec<Error>,
) -> (Attributes, Vec<(String, Vec<String>)>) {
    let mut out = Attributes::new();
    let mut missing = Vec::new();
    for (name, value) in &intent.parameters {
        if !template.parameters.contains_key(name) {
            errors.push(Error::UnknownParameter {
                name: name.clone(),
                template: template.id.clone(),
                known: template.parameters.keys().cloned().collect(),
            });
        } else {
            let _ = value;
        }
    }
    for (name, spec) in &template.parameters {
        let value = intent.parameters.get(name).or(spec.default.as_ref());
        match value {
            Some(v) => match check_parameter(name, spec, v) {
                Ok(v) => {
                    out.insert(name.clone(), v);
                }
                Err(e) => {
                    errors.push(e);
                    out.insert(name.clone(), v.clone());
                }
            },
            None if spec.required => missing.push((name.clone(), Vec::new())),
            None => {}
        }
    }
    // A missing parameter waits before the jobs that take it as input.
    let index = pack.job_index(template);
    for (name, users) in &mut missing {
        for entry in &template.jobs {
            if index.get(entry.id()).is_some_and(|job| job.inputs.parameters.contains_key(name)) {
                users.push(entry.id().to_string());
            }
        }
    }
    (out, missing)
}
