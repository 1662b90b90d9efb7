//! Capability resolution (protocol §6, documents.md "Resolution outcomes"): every requirement is
//! bound, created through a sub-operation, put to a person at a gate, or found unsatisfiable —
//! and every candidate that lost says which rule rejected it.

use crate::model::{
    Attributes, CapabilityPolicy, EnvironmentPolicy, GateType, Health, Intent, Provider, Requirement, Resource,
};

use crate::plan::columns::Prepared;
use crate::plan::policy::{named, provider_view, resource_view, Active, Verdict};

pub use crate::plan::resolution::*;
use crate::plan::rules::*;

pub fn resolve(cx: &Context<'_>, req: &Requirement, required_by: Vec<String>) -> Resolution {
    resolve_with(cx, req, required_by, true)
}

/// `fast: false` evaluates every candidate the slow, exact way (for tests of the fast path).
fn resolve_with(cx: &Context<'_>, req: &Requirement, required_by: Vec<String>, fast: bool) -> Resolution {
    let env = cx.intent.environment.as_deref().unwrap_or("any environment");
    let mut rejections = Rejections::new();
    let mut considered = 0;
    let rule = policy_rule(cx, &req.capability);
    let explicit_env = req.constraints.contains_key("environment");
    let constraints = Constraints::new(&req.constraints, cx.intent, None);
    let empty = Attributes::new();
    let no_rules = [];
    let active = Active::new(rule.ok().flatten().map_or(&no_rules[..], |r| &r.rules), cx.intent, cx.roles);

    let mut matches: Vec<&Resource> = Vec::new();
    if let Some(index) = cx.inventory.by_capability.get(req.capability.as_str()) {
        // Policy rules are CEL, evaluated candidate by candidate: no fast path then.
        let prepared = Prepared::new(&cx.inventory.strings, req, cx.intent, rule, workload_value)
            .filter(|_| fast && active.requires.is_empty());
        for (group_env, group) in &index.by_env {
            let members = &group.members;
            considered += members.len();
            // Candidates of another environment are rejected in bulk, without evaluating them.
            let other_env = match (group_env, cx.intent.environment.as_deref()) {
                (Some(theirs), Some(ours)) if !explicit_env && *theirs != ours => Some(*theirs),
                _ => None,
            };
            if let Some(theirs) = other_env {
                let fail = Fail::Environment { theirs };
                rejections.count(fail.rule(), members.len());
                for &(i, _) in members {
                    if !rejections.wants_more() {
                        break;
                    }
                    let r = &cx.inventory.resources[i as usize];
                    let rejection = Rejection { candidate: r.id.clone(), reason: fail.describe(cx, req, None) };
                    rejections.listed.push((i as usize, rejection));
                }
                continue;
            }
            let slow = |i: u32, j: u32| -> Result<(), Fail<'_>> {
                let r = &cx.inventory.resources[i as usize];
                let subject = Subject {
                    capability: &r.provides[j as usize].attributes,
                    attributes: &r.attributes,
                    environment: r.environment.as_deref(),
                    name: Some(&r.name),
                    provider: r.provider.as_deref(),
                };
                let rule = rule.map_err(|()| Fail::NoPolicyRule)?;
                allowed(rule, r.provider.as_deref())?;
                encryption(rule, &subject)?;
                if r.health == Health::Error {
                    return Err(Fail::Unhealthy { health: r.health });
                }
                constraints.check(&subject)?;
                active
                    .check(&resource_view(r, &r.provides[j as usize].attributes))
                    .map_err(|(rule, verdict)| Fail::Policy { rule, verdict })
            };
            for (m, &(i, j)) in members.iter().enumerate() {
                let r = &cx.inventory.resources[i as usize];
                let fast = prepared.as_ref().and_then(|p| p.verdict(&cx.inventory.strings, group, *group_env, m));
                match fast {
                    Some(Ok(())) => matches.push(r),
                    Some(Err(f)) if !rejections.wants_more() => rejections.count(fast_rule(f), 1),
                    _ => match slow(i, j) {
                        Ok(()) => matches.push(r),
                        Err(fail) => {
                            debug_assert!(fast.is_none_or(|f| f.is_err_and(|f| fast_rule(f) == fail.rule())));
                            rejections.add(
                                i as usize,
                                &fail,
                                || r.id.clone(),
                                || fail.describe(cx, req, rule.ok().flatten()),
                            )
                        }
                    },
                }
            }
        }
    }
    matches.sort_by_key(|r| cx.inventory.by_id.get(r.id.as_str()).copied());

    // Providers that could create one, or that a person may bind as external.
    let mut creatable: Vec<&Provider> = Vec::new();
    let mut external: Vec<&Provider> = Vec::new();
    let base = cx.inventory.resources.len();
    for (n, p) in cx.providers.iter().enumerate().filter(|(_, p)| p.capability == req.capability) {
        if p.create.is_none() && p.bind.is_none() {
            continue; // Bind-only providers are judged through their resources above.
        }
        considered += 1;
        let subject = Subject {
            capability: &p.attributes,
            attributes: &empty,
            environment: cx.intent.environment.as_deref(),
            name: None,
            provider: Some(&p.id),
        };
        // A constraint on an attribute the provider does not declare is decided when the
        // resource exists; only declared attributes can rule a provider out.
        let declared = Constraints::new(&req.constraints, cx.intent, Some(&subject));
        // An external binding is a resource a person brings: encryption it does not declare is
        // checked against what they supply at the gate, like the constraints.
        let bring = p.create.is_none() && !p.attributes.contains_key("encryption");
        let verdict = match rule {
            Err(()) => Err(Fail::NoPolicyRule),
            Ok(rule) => allowed(rule, Some(&p.id))
                .and_then(|()| if bring { Ok(()) } else { encryption(rule, &subject) })
                .and_then(|()| declared.check(&subject))
                .and_then(|()| match active.check(&provider_view(p, cx.intent)) {
                    Err((_, Verdict::Missing(_))) | Ok(()) => Ok(()),
                    Err((rule, verdict)) => Err(Fail::Policy { rule, verdict }),
                }),
        };
        match verdict {
            Ok(()) if p.create.is_some() => creatable.push(p),
            Ok(()) => external.push(p),
            Err(fail) => rejections.add(
                base + n,
                &fail,
                || format!("provider {}", p.id),
                || fail.describe(cx, req, rule.ok().flatten()),
            ),
        }
    }
    let rule = rule.ok().flatten();

    // Soft rules: keep to the candidates that respect them when there are any; otherwise every
    // candidate breaks them, and what is chosen needs an exception.
    let mut breaches: Vec<(String, String)> = Vec::new();
    if let Some(soft) = rule.and_then(|r| r.soft.as_ref()) {
        let of_resource = |r: &Resource| {
            let enc = r
                .provides
                .iter()
                .find(|c| c.capability == req.capability)
                .and_then(|c| c.attributes.get("encryption"))
                .or_else(|| r.attributes.get("encryption"));
            soft_breach(soft, env, r.provider.as_deref(), enc)
        };
        let of_provider = |p: &Provider| soft_breach(soft, env, Some(&p.id), p.attributes.get("encryption"));
        let keeps = matches.iter().any(|r| of_resource(r).is_none())
            || creatable.iter().chain(&external).any(|p| of_provider(p).is_none());
        if keeps {
            matches.retain(|r| of_resource(r).is_none());
            creatable.retain(|p| of_provider(p).is_none());
            external.retain(|p| of_provider(p).is_none());
        } else {
            breaches.extend(matches.iter().filter_map(|r| Some((r.id.clone(), of_resource(r)?))));
            breaches.extend(
                creatable.iter().chain(&external).filter_map(|p| Some((format!("provider {}", p.id), of_provider(p)?))),
            );
        }
    }

    let require_approval = rule.is_some_and(|r| r.require_approval) || !active.approvals.is_empty();
    let mut roles = match rule {
        Some(r) if !r.approval_roles.is_empty() => r.approval_roles.clone(),
        Some(r) if !r.require_approval && active.approvals.iter().any(|a| !a.approval_roles.is_empty()) => vec![],
        _ => vec!["sre".to_string(), "platform_admin".to_string()],
    };
    for role in active.approvals.iter().flat_map(|a| &a.approval_roles) {
        if !roles.contains(role) {
            roles.push(role.clone());
        }
    }
    // Said in an approval gate's reason: the rules that ask for it.
    let by_rules = match active.approvals.as_slice() {
        [] => String::new(),
        rules => {
            format!(" ({})", rules.iter().map(|r| named(&r.name, r.when.as_deref())).collect::<Vec<_>>().join("; "))
        }
    };
    let slug = |s: &str| s.replace(['_', '.'], "-");

    let outcome = if !matches.is_empty() {
        let default = rule.and_then(|r| r.default_provider.as_deref());
        let chosen: Option<(&Resource, String)> = match matches.as_slice() {
            [one] => Some((one, "the only candidate that satisfies every rule".to_string())),
            several => {
                let defaults: Vec<&&Resource> =
                    several.iter().filter(|r| default.is_some() && r.provider.as_deref() == default).collect();
                match defaults.as_slice() {
                    [one] => {
                        Some((one, format!("the policy's default provider in {env} ({})", default.unwrap_or_default())))
                    }
                    _ => None,
                }
            }
        };
        match (chosen, require_approval) {
            (Some((r, because)), false) => {
                Outcome::Bind { resource: r.id.clone(), provider: r.provider.clone(), because }
            }
            (chosen, _) => {
                let candidates: Vec<&Resource> = match chosen {
                    Some((r, _)) => vec![r],
                    None => matches.clone(),
                };
                let mut options: Vec<GateOption> = candidates
                    .iter()
                    .map(|r| GateOption::Bind { label: format!("bind {}", r.id), resource: r.id.clone() })
                    .collect();
                options.push(GateOption::Cancel { label: "cancel operation".into() });
                let (type_, id, reason) = if require_approval {
                    (
                        GateType::Approval,
                        format!("approve-{}", slug(&req.capability)),
                        format!(
                            "{} requires {}, and the policy in {env} requires approval to bind it{by_rules}.",
                            cx.requester, req.capability
                        ),
                    )
                } else {
                    (
                        GateType::ProviderSelection,
                        format!("select-{}", slug(&req.capability)),
                        format!(
                            "{} requires {}, and {} candidates match equally in {env}.",
                            cx.requester,
                            req.capability,
                            candidates.len()
                        ),
                    )
                };
                Outcome::Gate { gate: ResolutionGate { id, type_, reason, options, required_roles: roles.clone() } }
            }
        }
    } else if creatable.is_empty() && external.is_empty() {
        let reason = if considered == 0 {
            format!(
                "nothing provides {}: no resource in the inventory and no provider that can create it",
                req.capability
            )
        } else {
            format!("none of {considered} candidates for {} is acceptable in {env}", req.capability)
        };
        Outcome::Unsatisfiable { reason }
    } else if let ([p], [], false) = (creatable.as_slice(), external.as_slice(), require_approval) {
        let create = p.create.as_ref().expect("creatable providers have a create action");
        Outcome::Create {
            provider: p.id.clone(),
            pack: create.pack.clone(),
            action: create.action.clone(),
            parameters: create.parameters.clone(),
        }
    } else {
        let mut options: Vec<GateOption> = creatable
            .iter()
            .map(|p| {
                let create = p.create.as_ref().expect("creatable providers have a create action");
                GateOption::Create {
                    label: p.title.clone().unwrap_or_else(|| format!("create {}", p.id)),
                    provider: p.id.clone(),
                    pack: create.pack.clone(),
                    action: create.action.clone(),
                    parameters: create.parameters.clone(),
                }
            })
            .collect();
        options.extend(external.iter().map(|p| GateOption::BindExternal {
            label: p.title.clone().unwrap_or_else(|| format!("bind external {}", p.id)),
            provider: p.id.clone(),
            checks: external_checks(rule, &active, req, cx.intent, p),
        }));
        options.push(GateOption::Cancel { label: "cancel operation".into() });
        let id = match (require_approval, creatable.first()) {
            (true, Some(p)) => format!("approve-{}", slug(&p.id)),
            (true, None) => format!("approve-{}", slug(&req.capability)),
            (false, _) => format!("select-{}", slug(&req.capability)),
        };
        Outcome::Gate {
            gate: ResolutionGate {
                id,
                type_: if require_approval { GateType::Approval } else { GateType::ProviderSelection },
                reason: format!(
                    "{} requires {} and no existing {env} provider matches{by_rules}.",
                    cx.requester, req.capability
                ),
                options,
                required_roles: roles,
            },
        }
    };

    let exception = match rule {
        Some(rule) if !breaches.is_empty() && !matches!(outcome, Outcome::Unsatisfiable { .. }) => {
            let chosen = match &outcome {
                Outcome::Bind { resource, .. } => Some(resource.clone()),
                Outcome::Create { provider, .. } => Some(format!("provider {provider}")),
                _ => None,
            };
            let listed: Vec<String> = breaches
                .iter()
                .filter(|(who, _)| chosen.as_ref().is_none_or(|c| c == who))
                .map(|(who, why)| format!("{who}: {why}"))
                .collect();
            let why = rule.soft.as_ref().and_then(|s| s.reason.clone());
            Some(PolicyException {
                gate: format!("exception-{}", slug(&req.capability)),
                reason: format!(
                    "no candidate for {} keeps the soft policy in {env}{}: {}",
                    req.capability,
                    why.map(|w| format!(" ({w})")).unwrap_or_default(),
                    listed.join("; ")
                ),
                required_roles: if rule.exception_roles.is_empty() {
                    vec!["platform_admin".to_string()]
                } else {
                    rule.exception_roles.clone()
                },
            })
        }
        _ => None,
    };
    let offers_external = matches!(&outcome, Outcome::Gate { gate } if gate.options.iter().any(|o| matches!(o, GateOption::BindExternal { .. })));
    let policy = rule.filter(|_| offers_external).cloned();
    Resolution { exception, policy, ..resolution(req, required_by, outcome, rejections, considered) }
}

/// The resolution of `req`: its outcome and the candidates rejected on the way, with no policy
/// exception and no policy for an external binding.
fn resolution(
    req: &Requirement,
    required_by: Vec<String>,
    outcome: Outcome,
    rejections: Rejections<'_>,
    considered: usize,
) -> Resolution {
    let (rejected, rejected_by_rule) = rejections.finish();
    Resolution {
        requirement: req.clone(),
        required_by,
        outcome,
        rejected,
        rejected_by_rule,
        considered,
        exception: None,
        policy: None,
    }
}

/// What a resource a person brings for an external binding must meet, said at the gate: the
/// encryption the policy requires and the constraints the provider does not declare, and the
/// policy rules that apply.
fn external_checks(
    rule: Option<&EnvironmentPolicy>,
    active: &Active<'_>,
    req: &Requirement,
    intent: &Intent,
    p: &Provider,
) -> Vec<String> {
    let mut checks = Vec::new();
    let env = intent.environment.as_deref().unwrap_or("any environment");
    if rule.is_some_and(|r| r.require_encryption) && !p.attributes.contains_key("encryption") {
        checks.push(format!("encryption: true (the policy in {env})"));
    }
    for (key, want) in &req.constraints {
        if !p.attributes.contains_key(attr_name(key)) {
            let want = match want.as_str() {
                Some("same-as-workload") => workload_value(intent, key).map_or_else(|| plain(want), |w| plain(&w)),
                _ => plain(want),
            };
            checks.push(format!("constraint {key}: {want}"));
        }
    }
    for (r, _) in &active.requires {
        checks.push(format!("policy rule {}: `{}`", r.name, r.require.as_deref().unwrap_or_default()));
    }
    checks
}

/// Whether a resource a person described (an external binding) meets what its requirement was
/// planned with: the requirement's constraints, and the environment's policy (allowed
/// providers, encryption, the rules' `require`, with the roles of the person answering).
/// `Err` names the rule that fails and why.
pub fn meets_constraints(res: &Resolution, intent: &Intent, roles: &[String], r: &Resource) -> Result<(), String> {
    let req = &res.requirement;
    let empty = Attributes::new();
    let capability = r.provides.iter().find(|c| c.capability == req.capability).map_or(&empty, |c| &c.attributes);
    let subject = Subject {
        capability,
        attributes: &r.attributes,
        environment: r.environment.as_deref(),
        name: Some(&r.name),
        provider: r.provider.as_deref(),
    };
    let rule = res.policy.as_ref();
    let no_rules = [];
    let active = Active::new(rule.map_or(&no_rules[..], |r| &r.rules), intent, roles);
    let constraints = Constraints::new(&req.constraints, intent, None);
    let verdict = allowed(rule, r.provider.as_deref())
        .and_then(|()| encryption(rule, &subject))
        .and_then(|()| constraints.check(&subject))
        .and_then(|()| {
            active.check(&resource_view(r, capability)).map_err(|(rule, verdict)| Fail::Policy { rule, verdict })
        });
    verdict.map_err(|fail| {
        let inventory = Inventory::new(&[]);
        let policy = CapabilityPolicy::default();
        let cx = Context { inventory: &inventory, providers: &[], policy: &policy, intent, requester: "", roles };
        fail.describe(&cx, req, rule)
    })
}

/// Checks a scoped requirement: every resource of the scope must provide it.
pub fn resolve_scoped(
    cx: &Context<'_>,
    req: &Requirement,
    scope: &str,
    resources: &[&Resource],
    required_by: Vec<String>,
) -> Resolution {
    let mut rejections = Rejections::new();
    let constraints = Constraints::new(&req.constraints, cx.intent, None);
    let mut failed = 0;
    for (i, r) in resources.iter().enumerate() {
        let verdict = match r.provides.iter().find(|c| c.capability == req.capability) {
            None => Err(Fail::NotProvided),
            Some(c) => constraints.check(&Subject {
                capability: &c.attributes,
                attributes: &r.attributes,
                environment: r.environment.as_deref(),
                name: Some(&r.name),
                provider: r.provider.as_deref(),
            }),
        };
        if let Err(fail) = verdict {
            failed += 1;
            rejections.add(i, &fail, || r.id.clone(), || fail.describe(cx, req, None));
        }
    }
    let outcome = if failed == 0 {
        Outcome::BindScope { scope: scope.to_string(), resources: resources.iter().map(|r| r.id.clone()).collect() }
    } else {
        Outcome::Unsatisfiable {
            reason: format!(
                "{failed} of {} resources of scope {scope} do not provide {} as required",
                resources.len(),
                req.capability
            ),
        }
    };
    resolution(req, required_by, outcome, rejections, resources.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EnvironmentPolicy;
    use serde_json::json;

    fn resource(i: usize) -> Resource {
        let envs = [Some("dev"), Some("prod"), None];
        let mut attributes = Attributes::new();
        attributes.insert("region".into(), json!(["eu", "us", "ap"][i % 3]));
        if i % 7 != 0 {
            attributes.insert("capacity_gb".into(), json!((i * 53) % 1500));
        }
        if i % 11 == 0 {
            attributes.insert("capacity_gb".into(), json!("lots"));
        }
        let mut cap = Attributes::new();
        match i % 4 {
            0 => cap.insert("encryption".into(), json!(true)),
            1 => cap.insert("encryption".into(), json!(false)),
            2 => cap.insert("encryption".into(), json!("true")),
            _ => None,
        };
        if i % 5 == 0 {
            cap.insert("region".into(), json!("eu"));
        }
        if i % 13 == 0 {
            cap.insert("access_mode".into(), json!(1));
        } else {
            cap.insert("access_mode".into(), json!(["shared", "dedicated"][i % 2]));
        }
        Resource {
            id: format!("s/r{i}"),
            type_: "s".into(),
            name: format!("r{i}"),
            environment: envs[i % 3].map(Into::into),
            provider: [Some("a"), Some("b"), None][i % 3 / 2 + i % 2].map(Into::into),
            attributes,
            health: if i % 17 == 0 { Health::Error } else { Health::Healthy },
            provides: vec![crate::model::ProvidedCapability { capability: "s3".into(), attributes: cap }],
            ..Default::default()
        }
    }

    /// The columnar fast path and the full evaluation agree on every outcome and every count.
    #[test]
    fn fast_path_agrees_with_full_evaluation() {
        let resources: Vec<Resource> = (0..600).map(resource).collect();
        let inventory = Inventory::new(&resources);
        let policies = [
            CapabilityPolicy::default(),
            CapabilityPolicy {
                rules: [(
                    "s3".to_string(),
                    [(
                        "prod".to_string(),
                        EnvironmentPolicy {
                            allowed_providers: Some(vec!["a".into()]),
                            require_encryption: true,
                            ..Default::default()
                        },
                    )]
                    .into(),
                )]
                .into(),
            },
        ];
        let constraints: Vec<Attributes> = vec![
            Attributes::new(),
            [("region".to_string(), json!("same-as-workload"))].into(),
            [("min_capacity_gb".to_string(), json!(500)), ("access_mode".to_string(), json!("dedicated"))].into(),
            [("max_capacity_gb".to_string(), json!(900)), ("encryption".to_string(), json!("required"))].into(),
            [("access_mode".to_string(), json!(["shared", 1])), ("environment".to_string(), json!("prod"))].into(),
            [("region".to_string(), json!("nowhere"))].into(),
            [("zone".to_string(), json!("same-as-workload"))].into(),
        ];
        for env in ["prod", "dev", "qa"] {
            for policy in &policies {
                for c in &constraints {
                    let mut intent = Intent {
                        target_resource_type: "t".into(),
                        action: "a".into(),
                        environment: Some(env.into()),
                        ..Default::default()
                    };
                    intent.constraints.insert("region".into(), json!("eu"));
                    let cx = Context {
                        inventory: &inventory,
                        providers: &[],
                        policy,
                        intent: &intent,
                        requester: "T",
                        roles: &[],
                    };
                    let req = Requirement { capability: "s3".into(), constraints: c.clone(), scope: None };
                    let fast = resolve_with(&cx, &req, vec![], true);
                    let slow = resolve_with(&cx, &req, vec![], false);
                    assert_eq!(fast, slow, "env {env}, constraints {c:?}");
                }
            }
        }
    }
}
