//! Capability resolution (protocol §6, documents.md "Resolution outcomes"): every requirement is
//! bound, created through a sub-operation, put to a person at a gate, or found unsatisfiable —
//! and every candidate that lost says which rule rejected it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use opsgraph_model::{
    Attributes, CapabilityPolicy, EnvironmentPolicy, GateType, Health, Intent, Provider,
    Requirement, Resource,
};
use serde::Serialize;
use serde_json::Value;

/// How many rejected candidates are listed one by one; the rest are counted by rule.
pub const REJECTION_LIMIT: usize = 50;

/// Resources indexed by the capabilities they provide. Built once per inventory.
#[derive(Debug)]
pub struct Inventory<'a> {
    resources: &'a [Resource],
    by_id: HashMap<&'a str, u32>,
    by_capability: HashMap<&'a str, Vec<(u32, u32)>>,
}

impl<'a> Inventory<'a> {
    pub fn new(resources: &'a [Resource]) -> Inventory<'a> {
        let mut by_id = HashMap::with_capacity(resources.len());
        let mut by_capability: HashMap<&str, Vec<(u32, u32)>> = HashMap::new();
        for (i, r) in resources.iter().enumerate() {
            by_id.insert(r.id.as_str(), i as u32);
            for (j, c) in r.provides.iter().enumerate() {
                by_capability
                    .entry(c.capability.as_str())
                    .or_default()
                    .push((i as u32, j as u32));
            }
        }
        Inventory {
            resources,
            by_id,
            by_capability,
        }
    }

    pub fn get(&self, id: &str) -> Option<&'a Resource> {
        self.by_id.get(id).map(|&i| &self.resources[i as usize])
    }

    pub fn resources(&self) -> &'a [Resource] {
        self.resources
    }

    /// The resources providing `capability`, each with the index of its provided entry.
    fn providing(
        &self,
        capability: &str,
    ) -> impl Iterator<Item = (&'a Resource, &'a Attributes)> + '_ {
        self.by_capability
            .get(capability)
            .into_iter()
            .flatten()
            .map(|&(i, j)| {
                let r = &self.resources[i as usize];
                (r, &r.provides[j as usize].attributes)
            })
    }
}

/// The world a requirement is resolved in.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub inventory: &'a Inventory<'a>,
    pub providers: &'a [Provider],
    pub policy: &'a CapabilityPolicy,
    pub intent: &'a Intent,
    /// `Tempo`: how the requiring pack is named in gate reasons.
    pub requester: &'a str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolution {
    pub requirement: Requirement,
    /// The jobs (or `pack`) that need it.
    pub required_by: Vec<String>,
    pub outcome: Outcome,
    /// Rejected candidates, at most [`REJECTION_LIMIT`] of them.
    pub rejected: Vec<Rejection>,
    /// All rejected candidates, counted by rule.
    pub rejected_by_rule: BTreeMap<String, usize>,
    /// How many candidates were considered.
    pub considered: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// An existing resource is bound.
    Bind {
        resource: String,
        provider: Option<String>,
        because: String,
    },
    /// Each resource of a scope provides it (scoped requirements).
    BindScope {
        scope: String,
        resources: Vec<String>,
    },
    /// A provider is created through its pack action, as a sub-operation.
    Create {
        provider: String,
        pack: String,
        action: String,
        parameters: Attributes,
    },
    /// A person decides at a gate.
    Gate {
        gate: ResolutionGate,
    },
    Unsatisfiable {
        reason: String,
    },
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Bind { .. } | Outcome::BindScope { .. } => "bind",
            Outcome::Create { .. } => "create",
            Outcome::Gate { .. } => "gate",
            Outcome::Unsatisfiable { .. } => "unsatisfiable",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResolutionGate {
    pub id: String,
    #[serde(rename = "type")]
    pub type_: GateType,
    pub reason: String,
    pub options: Vec<GateOption>,
    pub required_roles: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GateOption {
    Bind {
        label: String,
        resource: String,
    },
    Create {
        label: String,
        provider: String,
        pack: String,
        action: String,
        parameters: Attributes,
    },
    BindExternal {
        label: String,
        provider: String,
    },
    Cancel {
        label: String,
    },
}

impl GateOption {
    pub fn label(&self) -> &str {
        match self {
            GateOption::Bind { label, .. }
            | GateOption::Create { label, .. }
            | GateOption::BindExternal { label, .. }
            | GateOption::Cancel { label } => label,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejection {
    pub candidate: String,
    pub reason: String,
}

/// Why a candidate was rejected; `rule` names it for counting.
#[derive(Debug, Clone, PartialEq)]
enum Reason {
    Environment {
        theirs: String,
        ours: String,
    },
    NoPolicyRule {
        capability: String,
        environment: String,
    },
    NotAllowed {
        provider: String,
        environment: String,
    },
    NoProviderId {
        environment: String,
        allowed: Vec<String>,
    },
    EncryptionRequired {
        environment: String,
        observed: Option<Value>,
    },
    Unhealthy {
        health: Health,
    },
    Constraint {
        key: String,
        want: String,
        observed: Option<Value>,
    },
}

impl Reason {
    fn rule(&self) -> String {
        match self {
            Reason::Environment { .. } => "environment".into(),
            Reason::NoPolicyRule { .. } => "no policy rule".into(),
            Reason::NotAllowed { .. } | Reason::NoProviderId { .. } => {
                "provider not allowed".into()
            }
            Reason::EncryptionRequired { .. } => "encryption required".into(),
            Reason::Unhealthy { .. } => "unhealthy".into(),
            Reason::Constraint { key, .. } => format!("constraint {key}"),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Environment { theirs, ours } => {
                write!(f, "it is in environment {theirs}, the intent is for {ours}")
            }
            Reason::NoPolicyRule {
                capability,
                environment,
            } => {
                write!(f, "the capability policy for {capability} has no rule for environment {environment}")
            }
            Reason::NotAllowed {
                provider,
                environment,
            } => write!(f, "provider {provider} is not allowed in {environment}"),
            Reason::NoProviderId {
                environment,
                allowed,
            } => write!(
                f,
                "it names no provider, and {environment} allows only {}",
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            ),
            Reason::EncryptionRequired {
                environment,
                observed,
            } => match observed {
                Some(v) => write!(
                    f,
                    "{environment} requires encryption, and it has encryption: {v}"
                ),
                None => write!(
                    f,
                    "{environment} requires encryption, and it declares no encryption attribute"
                ),
            },
            Reason::Unhealthy { health } => write!(f, "its health is {}", health_word(*health)),
            Reason::Constraint {
                key,
                want,
                observed,
            } => match observed {
                Some(v) => write!(
                    f,
                    "constraint {key}: {want} is not met ({} is {})",
                    attr_name(key),
                    plain(v)
                ),
                None => write!(
                    f,
                    "constraint {key}: {want} is not met (it has no {} attribute)",
                    attr_name(key)
                ),
            },
        }
    }
}

fn health_word(h: Health) -> &'static str {
    match h {
        Health::Healthy => "healthy",
        Health::Degraded => "degraded",
        Health::Error => "error",
        Health::Unknown => "unknown",
    }
}

fn attr_name(key: &str) -> &str {
    key.strip_prefix("min_")
        .or_else(|| key.strip_prefix("max_"))
        .unwrap_or(key)
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What a candidate offers to constraint checks: capability attributes, then resource
/// attributes, then the resource's own fields.
struct Subject<'a> {
    capability: &'a Attributes,
    attributes: &'a Attributes,
    environment: Option<&'a str>,
    name: Option<&'a str>,
    provider: Option<&'a str>,
}

impl Subject<'_> {
    fn get(&self, key: &str) -> Option<Value> {
        if let Some(v) = self
            .capability
            .get(key)
            .or_else(|| self.attributes.get(key))
        {
            return Some(v.clone());
        }
        let field = match key {
            "environment" => self.environment,
            "name" => self.name,
            "provider" => self.provider,
            _ => None,
        };
        field.map(|s| Value::String(s.to_string()))
    }
}

fn loosely_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::String(x), y) | (y, Value::String(x)) if !y.is_string() => *x == plain(y),
        _ => a == b,
    }
}

fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// The value of `key` for the workload: the intent's constraints, its parameters, its fields.
fn workload_value(intent: &Intent, key: &str) -> Option<Value> {
    if let Some(v) = intent
        .constraints
        .get(key)
        .or_else(|| intent.parameters.get(key))
    {
        return Some(v.clone());
    }
    match key {
        "environment" => intent.environment.clone().map(Value::String),
        "name" => intent.name.clone().map(Value::String),
        _ => None,
    }
}

/// Checks every constraint; the first failing one is the reason.
fn check_constraints(
    req: &Requirement,
    intent: &Intent,
    subject: &Subject<'_>,
) -> Result<(), Reason> {
    for (key, want) in &req.constraints {
        let fail = |want: String, observed| Reason::Constraint {
            key: key.clone(),
            want,
            observed,
        };
        if let Some(attr) = key
            .strip_prefix("min_")
            .or_else(|| key.strip_prefix("max_"))
        {
            if let Some(bound) = as_number(want) {
                let observed = subject.get(attr);
                let ok = observed.as_ref().and_then(as_number).is_some_and(|v| {
                    if key.starts_with("min_") {
                        v >= bound
                    } else {
                        v <= bound
                    }
                });
                if !ok {
                    return Err(fail(plain(want), observed));
                }
                continue;
            }
        }
        let observed = subject.get(key);
        match want {
            Value::String(s) if s == "required" => {
                if !matches!(observed, Some(Value::Bool(true))) {
                    return Err(fail("required".into(), observed));
                }
            }
            Value::String(s) if s == "same-as-workload" => match workload_value(intent, key) {
                Some(w) => {
                    if !observed.as_ref().is_some_and(|o| loosely_equal(o, &w)) {
                        return Err(fail(format!("same-as-workload ({})", plain(&w)), observed));
                    }
                }
                None => {
                    return Err(fail(
                        "same-as-workload (the intent gives no value for it)".into(),
                        observed,
                    ))
                }
            },
            Value::Array(options) => {
                if !observed
                    .as_ref()
                    .is_some_and(|o| options.iter().any(|w| loosely_equal(o, w)))
                {
                    let words: Vec<String> = options.iter().map(plain).collect();
                    return Err(fail(format!("one of [{}]", words.join(", ")), observed));
                }
            }
            want => {
                if !observed.as_ref().is_some_and(|o| loosely_equal(o, want)) {
                    return Err(fail(plain(want), observed));
                }
            }
        }
    }
    Ok(())
}

/// The policy rule that applies, or the reason every candidate is rejected.
fn policy_rule<'a>(
    cx: &Context<'a>,
    capability: &str,
) -> Result<Option<&'a EnvironmentPolicy>, Reason> {
    let Some(envs) = cx.policy.rules.get(capability) else {
        return Ok(None);
    };
    let Some(env) = cx.intent.environment.as_deref() else {
        return Ok(None);
    };
    match envs.get(env) {
        Some(rule) => Ok(Some(rule)),
        None => Err(Reason::NoPolicyRule {
            capability: capability.into(),
            environment: env.into(),
        }),
    }
}

fn allowed(
    rule: Option<&EnvironmentPolicy>,
    provider: Option<&str>,
    env: &str,
) -> Result<(), Reason> {
    let Some(list) = rule.and_then(|r| r.allowed_providers.as_ref()) else {
        return Ok(());
    };
    match provider {
        Some(p) if list.iter().any(|a| a == p) => Ok(()),
        Some(p) => Err(Reason::NotAllowed {
            provider: p.into(),
            environment: env.into(),
        }),
        None => Err(Reason::NoProviderId {
            environment: env.into(),
            allowed: list.clone(),
        }),
    }
}

fn encryption(
    rule: Option<&EnvironmentPolicy>,
    subject: &Subject<'_>,
    env: &str,
) -> Result<(), Reason> {
    if !rule.is_some_and(|r| r.require_encryption) {
        return Ok(());
    }
    match subject.get("encryption") {
        Some(Value::Bool(true)) => Ok(()),
        observed => Err(Reason::EncryptionRequired {
            environment: env.into(),
            observed,
        }),
    }
}

struct Rejections {
    listed: Vec<Rejection>,
    by_rule: BTreeMap<String, usize>,
    total: usize,
}

impl Rejections {
    fn add(&mut self, candidate: impl FnOnce() -> String, reason: Reason) {
        self.total += 1;
        *self.by_rule.entry(reason.rule()).or_default() += 1;
        if self.listed.len() < REJECTION_LIMIT {
            self.listed.push(Rejection {
                candidate: candidate(),
                reason: reason.to_string(),
            });
        }
    }
}

/// Resolves one unscoped requirement by policy.
pub fn resolve(cx: &Context<'_>, req: &Requirement, required_by: Vec<String>) -> Resolution {
    let env = cx
        .intent
        .environment
        .as_deref()
        .unwrap_or("any environment");
    let mut rejections = Rejections {
        listed: Vec::new(),
        by_rule: BTreeMap::new(),
        total: 0,
    };
    let mut considered = 0;
    let rule = policy_rule(cx, &req.capability);
    let explicit_env = req.constraints.contains_key("environment");

    let mut matches: Vec<&Resource> = Vec::new();
    for (r, cap_attrs) in cx.inventory.providing(&req.capability) {
        considered += 1;
        let subject = Subject {
            capability: cap_attrs,
            attributes: &r.attributes,
            environment: r.environment.as_deref(),
            name: Some(&r.name),
            provider: r.provider.as_deref(),
        };
        let verdict = (|| {
            let rule = rule.clone()?;
            if !explicit_env {
                if let (Some(theirs), Some(ours)) =
                    (r.environment.as_deref(), cx.intent.environment.as_deref())
                {
                    if theirs != ours {
                        return Err(Reason::Environment {
                            theirs: theirs.into(),
                            ours: ours.into(),
                        });
                    }
                }
            }
            allowed(rule, r.provider.as_deref(), env)?;
            encryption(rule, &subject, env)?;
            if r.health == Health::Error {
                return Err(Reason::Unhealthy { health: r.health });
            }
            check_constraints(req, cx.intent, &subject)
        })();
        match verdict {
            Ok(()) => matches.push(r),
            Err(reason) => rejections.add(|| r.id.clone(), reason),
        }
    }

    // Providers that could create one, or that a person may bind as external.
    let mut creatable: Vec<&Provider> = Vec::new();
    let mut external: Vec<&Provider> = Vec::new();
    for p in cx
        .providers
        .iter()
        .filter(|p| p.capability == req.capability)
    {
        if p.create.is_none() && p.bind.is_none() {
            continue; // Bind-only providers are judged through their resources above.
        }
        considered += 1;
        let empty = Attributes::new();
        let subject = Subject {
            capability: &p.attributes,
            attributes: &empty,
            environment: cx.intent.environment.as_deref(),
            name: None,
            provider: Some(&p.id),
        };
        let verdict = (|| {
            let rule = rule.clone()?;
            allowed(rule, Some(&p.id), env)?;
            encryption(rule, &subject, env)?;
            // A constraint on an attribute the provider does not declare is decided when the
            // resource exists; only declared attributes can rule a provider out.
            let declared = Requirement {
                constraints: req
                    .constraints
                    .iter()
                    .filter(|(k, _)| subject.get(attr_name(k)).is_some())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                ..req.clone()
            };
            check_constraints(&declared, cx.intent, &subject)
        })();
        match verdict {
            Ok(()) if p.create.is_some() => creatable.push(p),
            Ok(()) => external.push(p),
            Err(reason) => rejections.add(|| format!("provider {}", p.id), reason),
        }
    }

    let rule = rule.ok().flatten();
    let require_approval = rule.is_some_and(|r| r.require_approval);
    let roles = match rule {
        Some(r) if !r.approval_roles.is_empty() => r.approval_roles.clone(),
        _ => vec!["sre".to_string(), "platform_admin".to_string()],
    };
    let slug = |s: &str| s.replace(['_', '.'], "-");

    let outcome = if !matches.is_empty() {
        let default = rule.and_then(|r| r.default_provider.as_deref());
        let chosen: Option<(&Resource, String)> = match matches.as_slice() {
            [one] => Some((
                one,
                "the only candidate that satisfies every rule".to_string(),
            )),
            several => {
                let defaults: Vec<&&Resource> = several
                    .iter()
                    .filter(|r| default.is_some() && r.provider.as_deref() == default)
                    .collect();
                match defaults.as_slice() {
                    [one] => Some((
                        one,
                        format!(
                            "the policy's default provider in {env} ({})",
                            default.unwrap_or_default()
                        ),
                    )),
                    _ => None,
                }
            }
        };
        match (chosen, require_approval) {
            (Some((r, because)), false) => Outcome::Bind {
                resource: r.id.clone(),
                provider: r.provider.clone(),
                because,
            },
            (chosen, _) => {
                let candidates: Vec<&Resource> = match chosen {
                    Some((r, _)) => vec![r],
                    None => matches.clone(),
                };
                let mut options: Vec<GateOption> = candidates
                    .iter()
                    .map(|r| GateOption::Bind {
                        label: format!("bind {}", r.id),
                        resource: r.id.clone(),
                    })
                    .collect();
                options.push(GateOption::Cancel {
                    label: "cancel operation".into(),
                });
                let (type_, id, reason) = if require_approval {
                    (
                        GateType::Approval,
                        format!("approve-{}", slug(&req.capability)),
                        format!(
                            "{} requires {}, and the policy in {env} requires approval to bind it.",
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
                Outcome::Gate {
                    gate: ResolutionGate {
                        id,
                        type_,
                        reason,
                        options,
                        required_roles: roles.clone(),
                    },
                }
            }
        }
    } else if creatable.is_empty() && external.is_empty() {
        let reason = if considered == 0 {
            format!("nothing provides {}: no resource in the inventory and no provider that can create it", req.capability)
        } else {
            format!(
                "none of {considered} candidates for {} is acceptable in {env}",
                req.capability
            )
        };
        Outcome::Unsatisfiable { reason }
    } else if let ([p], [], false) = (creatable.as_slice(), external.as_slice(), require_approval) {
        let create = p
            .create
            .as_ref()
            .expect("creatable providers have a create action");
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
                let create = p
                    .create
                    .as_ref()
                    .expect("creatable providers have a create action");
                GateOption::Create {
                    label: p
                        .title
                        .clone()
                        .unwrap_or_else(|| format!("create {}", p.id)),
                    provider: p.id.clone(),
                    pack: create.pack.clone(),
                    action: create.action.clone(),
                    parameters: create.parameters.clone(),
                }
            })
            .collect();
        options.extend(external.iter().map(|p| {
            GateOption::BindExternal {
                label: p
                    .title
                    .clone()
                    .unwrap_or_else(|| format!("bind external {}", p.id)),
                provider: p.id.clone(),
            }
        }));
        options.push(GateOption::Cancel {
            label: "cancel operation".into(),
        });
        let id = match (require_approval, creatable.first()) {
            (true, Some(p)) => format!("approve-{}", slug(&p.id)),
            (true, None) => format!("approve-{}", slug(&req.capability)),
            (false, _) => format!("select-{}", slug(&req.capability)),
        };
        Outcome::Gate {
            gate: ResolutionGate {
                id,
                type_: if require_approval {
                    GateType::Approval
                } else {
                    GateType::ProviderSelection
                },
                reason: format!(
                    "{} requires {} and no existing {env} provider matches.",
                    cx.requester, req.capability
                ),
                options,
                required_roles: roles,
            },
        }
    };

    Resolution {
        requirement: req.clone(),
        required_by,
        outcome,
        rejected: rejections.listed,
        rejected_by_rule: rejections.by_rule,
        considered,
    }
}

/// Checks a scoped requirement: every resource of the scope must provide it.
pub fn resolve_scoped(
    cx: &Context<'_>,
    req: &Requirement,
    scope: &str,
    resources: &[&Resource],
    required_by: Vec<String>,
) -> Resolution {
    let mut rejections = Rejections {
        listed: Vec::new(),
        by_rule: BTreeMap::new(),
        total: 0,
    };
    let empty = Attributes::new();
    for r in resources {
        let provided = r.provides.iter().find(|c| c.capability == req.capability);
        let verdict = match provided {
            None => Err(Reason::Constraint {
                key: "capability".into(),
                want: req.capability.clone(),
                observed: None,
            }),
            Some(c) => {
                let subject = Subject {
                    capability: &c.attributes,
                    attributes: &r.attributes,
                    environment: r.environment.as_deref(),
                    name: Some(&r.name),
                    provider: r.provider.as_deref(),
                };
                let _ = &empty;
                check_constraints(req, cx.intent, &subject)
            }
        };
        if let Err(reason) = verdict {
            let reason = match (provided, reason) {
                (None, _) => Rejection {
                    candidate: r.id.clone(),
                    reason: format!("it does not provide {}", req.capability),
                },
                (Some(_), reason) => Rejection {
                    candidate: r.id.clone(),
                    reason: reason.to_string(),
                },
            };
            rejections.total += 1;
            *rejections
                .by_rule
                .entry("scope resource".into())
                .or_default() += 1;
            if rejections.listed.len() < REJECTION_LIMIT {
                rejections.listed.push(reason);
            }
        }
    }
    let outcome = if rejections.total == 0 {
        Outcome::BindScope {
            scope: scope.to_string(),
            resources: resources.iter().map(|r| r.id.clone()).collect(),
        }
    } else {
        Outcome::Unsatisfiable {
            reason: format!(
                "{} of {} resources of scope {scope} do not provide {} as required",
                rejections.total,
                resources.len(),
                req.capability
            ),
        }
    };
    Resolution {
        requirement: req.clone(),
        required_by,
        outcome,
        rejected: rejections.listed,
        rejected_by_rule: rejections.by_rule,
        considered: resources.len(),
    }
}
