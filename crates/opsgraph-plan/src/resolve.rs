//! Capability resolution (protocol §6, documents.md "Resolution outcomes"): every requirement is
//! bound, created through a sub-operation, put to a person at a gate, or found unsatisfiable —
//! and every candidate that lost says which rule rejected it.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use opsgraph_model::{
    Attributes, CapabilityPolicy, EnvironmentPolicy, GateType, Health, Intent, Provider, Requirement, Resource,
    SoftPolicy,
};
use serde::{Deserialize, Serialize};

use crate::columns::{FastFail, Group, Prepared, Strings};
use serde_json::Value;

/// How many rejected candidates are listed one by one; the rest are counted by rule.
pub const REJECTION_LIMIT: usize = 50;

/// Resources indexed by the capabilities they provide. Built once per inventory.
#[derive(Debug)]
pub struct Inventory<'a> {
    resources: &'a [Resource],
    by_id: HashMap<&'a str, u32>,
    by_capability: HashMap<&'a str, CapabilityIndex<'a>>,
    strings: Strings<'a>,
}

/// The providers of one capability, grouped by environment so that a requirement in `prod`
/// evaluates only prod (and environment-less) candidates and counts the rest in bulk.
#[derive(Debug, Default)]
struct CapabilityIndex<'a> {
    by_env: BTreeMap<Option<&'a str>, Group>,
}

impl<'a> Inventory<'a> {
    pub fn new(resources: &'a [Resource]) -> Inventory<'a> {
        let mut by_id = HashMap::with_capacity(resources.len());
        let mut by_capability: HashMap<&str, CapabilityIndex<'a>> = HashMap::new();
        let mut strings = Strings::default();
        for (i, r) in resources.iter().enumerate() {
            by_id.insert(r.id.as_str(), i as u32);
            for (j, c) in r.provides.iter().enumerate() {
                by_capability
                    .entry(c.capability.as_str())
                    .or_default()
                    .by_env
                    .entry(r.environment.as_deref())
                    .or_default()
                    .push(&mut strings, r, i as u32, j as u32);
            }
        }
        Inventory { resources, by_id, by_capability, strings }
    }

    pub fn get(&self, id: &str) -> Option<&'a Resource> {
        self.by_id.get(id).map(|&i| &self.resources[i as usize])
    }

    pub fn resources(&self) -> &'a [Resource] {
        self.resources
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// The soft policy rule the outcome breaks: a person must grant an exception.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<PolicyException>,
}

/// A soft rule broken by the chosen candidate(s), granted at a `policy_exception` gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyException {
    pub gate: String,
    pub reason: String,
    pub required_roles: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolutionGate {
    pub id: String,
    #[serde(rename = "type")]
    pub type_: GateType,
    pub reason: String,
    pub options: Vec<GateOption>,
    pub required_roles: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GateOption {
    Bind { label: String, resource: String },
    Create { label: String, provider: String, pack: String, action: String, parameters: Attributes },
    BindExternal { label: String, provider: String },
    Cancel { label: String },
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejection {
    pub candidate: String,
    pub reason: String,
}

/// Why a candidate was rejected. Borrowed, so that rejecting 100,000 candidates allocates
/// nothing; only the listed ones are rendered into sentences.
#[derive(Debug, Clone)]
enum Fail<'a> {
    Environment { theirs: &'a str },
    NoPolicyRule,
    NotAllowed { provider: &'a str },
    NoProviderId,
    EncryptionRequired { observed: Option<Cow<'a, Value>> },
    Unhealthy { health: Health },
    Constraint { key: &'a str, want: &'a Value, observed: Option<Cow<'a, Value>> },
    NotProvided,
}

/// The rule a failure counts under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule<'a> {
    Environment,
    NoPolicy,
    NotAllowed,
    Encryption,
    Unhealthy,
    Constraint(&'a str),
    NotProvided,
}

impl Rule<'_> {
    fn name(self) -> String {
        match self {
            Rule::Environment => "environment".into(),
            Rule::NoPolicy => "no policy rule".into(),
            Rule::NotAllowed => "provider not allowed".into(),
            Rule::Encryption => "encryption required".into(),
            Rule::Unhealthy => "unhealthy".into(),
            Rule::Constraint(key) => format!("constraint {key}"),
            Rule::NotProvided => "not provided".into(),
        }
    }
}

impl<'a> Fail<'a> {
    fn rule(&self) -> Rule<'a> {
        match self {
            Fail::Environment { .. } => Rule::Environment,
            Fail::NoPolicyRule => Rule::NoPolicy,
            Fail::NotAllowed { .. } | Fail::NoProviderId => Rule::NotAllowed,
            Fail::EncryptionRequired { .. } => Rule::Encryption,
            Fail::Unhealthy { .. } => Rule::Unhealthy,
            Fail::Constraint { key, .. } => Rule::Constraint(key),
            Fail::NotProvided => Rule::NotProvided,
        }
    }

    /// The sentence a person reads.
    fn describe(&self, cx: &Context<'_>, req: &Requirement, rule: Option<&EnvironmentPolicy>) -> String {
        let env = cx.intent.environment.as_deref().unwrap_or("any environment");
        match self {
            Fail::Environment { theirs } => {
                format!("it is in environment {theirs}, the intent is for {env}")
            }
            Fail::NoPolicyRule => {
                format!("the capability policy for {} has no rule for environment {env}", req.capability)
            }
            Fail::NotAllowed { provider } => format!("provider {provider} is not allowed in {env}"),
            Fail::NoProviderId => {
                let allowed = rule.and_then(|r| r.allowed_providers.clone()).unwrap_or_default();
                let allowed = if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") };
                format!("it names no provider, and {env} allows only {allowed}")
            }
            Fail::EncryptionRequired { observed: Some(v) } => {
                format!("{env} requires encryption, and it has encryption: {v}")
            }
            Fail::EncryptionRequired { observed: None } => {
                format!("{env} requires encryption, and it declares no encryption attribute")
            }
            Fail::Unhealthy { health } => format!("its health is {}", health_word(*health)),
            Fail::Constraint { key, want, observed } => {
                let want = match want {
                    Value::String(s) if s == "same-as-workload" => match workload_value(cx.intent, key) {
                        Some(w) => format!("same-as-workload ({})", plain(&w)),
                        None => "same-as-workload (the intent gives no value for it)".to_string(),
                    },
                    Value::Array(options) => {
                        format!("one of [{}]", options.iter().map(plain).collect::<Vec<_>>().join(", "))
                    }
                    other => plain(other),
                };
                match observed {
                    Some(v) => format!("constraint {key}: {want} is not met ({} is {})", attr_name(key), plain(v)),
                    None => format!("constraint {key}: {want} is not met (it has no {} attribute)", attr_name(key)),
                }
            }
            Fail::NotProvided => format!("it does not provide {}", req.capability),
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
    key.strip_prefix("min_").or_else(|| key.strip_prefix("max_")).unwrap_or(key)
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

impl<'a> Subject<'a> {
    fn get(&self, key: &str) -> Option<Cow<'a, Value>> {
        if let Some(v) = self.capability.get(key).or_else(|| self.attributes.get(key)) {
            return Some(Cow::Borrowed(v));
        }
        let field = match key {
            "environment" => self.environment,
            "name" => self.name,
            "provider" => self.provider,
            _ => None,
        };
        field.map(|s| Cow::Owned(Value::String(s.to_string())))
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
    if let Some(v) = intent.constraints.get(key).or_else(|| intent.parameters.get(key)) {
        return Some(v.clone());
    }
    match key {
        "environment" => intent.environment.clone().map(Value::String),
        "name" => intent.name.clone().map(Value::String),
        _ => None,
    }
}

/// A requirement's constraints, prepared once: the workload's values looked up in advance.
struct Constraints<'a> {
    items: Vec<(&'a str, &'a Value, Check)>,
}

enum Check {
    Min(f64),
    Max(f64),
    Required,
    Equal(Value),
    /// `same-as-workload`, and the intent gives no value: nothing can match.
    NoWorkloadValue,
    OneOf,
}

impl<'a> Constraints<'a> {
    fn new(constraints: &'a Attributes, intent: &Intent, only_declared: Option<&Subject<'_>>) -> Constraints<'a> {
        let mut items = Vec::new();
        for (key, want) in constraints {
            if only_declared.is_some_and(|s| s.get(attr_name(key)).is_none()) {
                continue;
            }
            let bound = key.strip_prefix("min_").or_else(|| key.strip_prefix("max_")).and(as_number(want));
            let check = match (bound, want) {
                (Some(n), _) if key.starts_with("min_") => Check::Min(n),
                (Some(n), _) => Check::Max(n),
                (None, Value::String(s)) if s == "required" => Check::Required,
                (None, Value::String(s)) if s == "same-as-workload" => match workload_value(intent, key) {
                    Some(w) => Check::Equal(w),
                    None => Check::NoWorkloadValue,
                },
                (None, Value::Array(_)) => Check::OneOf,
                (None, other) => Check::Equal(other.clone()),
            };
            items.push((key.as_str(), want, check));
        }
        Constraints { items }
    }

    /// The first constraint the subject fails.
    fn check<'s>(&self, subject: &Subject<'s>) -> Result<(), Fail<'s>>
    where
        'a: 's,
    {
        for (key, want, check) in &self.items {
            let observed = subject.get(attr_name(key));
            let ok = match check {
                Check::Min(n) => observed.as_deref().and_then(as_number).is_some_and(|v| v >= *n),
                Check::Max(n) => observed.as_deref().and_then(as_number).is_some_and(|v| v <= *n),
                Check::Required => matches!(observed.as_deref(), Some(Value::Bool(true))),
                Check::Equal(w) => observed.as_deref().is_some_and(|o| loosely_equal(o, w)),
                Check::NoWorkloadValue => false,
                Check::OneOf => {
                    let Value::Array(options) = want else { unreachable!("OneOf is built from arrays") };
                    observed.as_deref().is_some_and(|o| options.iter().any(|w| loosely_equal(o, w)))
                }
            };
            if !ok {
                return Err(Fail::Constraint { key, want, observed });
            }
        }
        Ok(())
    }
}

/// The policy rule that applies; `Err` when the capability has a policy but not for this
/// environment (then nothing is allowed there).
fn policy_rule<'a>(cx: &Context<'a>, capability: &str) -> Result<Option<&'a EnvironmentPolicy>, ()> {
    let Some(envs) = cx.policy.rules.get(capability) else {
        return Ok(None);
    };
    let Some(env) = cx.intent.environment.as_deref() else {
        return Ok(None);
    };
    envs.get(env).map(Some).ok_or(())
}

fn allowed<'s>(rule: Option<&EnvironmentPolicy>, provider: Option<&'s str>) -> Result<(), Fail<'s>> {
    let Some(list) = rule.and_then(|r| r.allowed_providers.as_ref()) else {
        return Ok(());
    };
    match provider {
        Some(p) if list.iter().any(|a| a == p) => Ok(()),
        Some(p) => Err(Fail::NotAllowed { provider: p }),
        None => Err(Fail::NoProviderId),
    }
}

fn encryption<'s>(rule: Option<&EnvironmentPolicy>, subject: &Subject<'s>) -> Result<(), Fail<'s>> {
    if !rule.is_some_and(|r| r.require_encryption) {
        return Ok(());
    }
    match subject.get("encryption") {
        Some(v) if *v == Value::Bool(true) => Ok(()),
        observed => Err(Fail::EncryptionRequired { observed }),
    }
}

fn fast_rule(f: FastFail<'_>) -> Rule<'_> {
    match f {
        FastFail::NoPolicy => Rule::NoPolicy,
        FastFail::NotAllowed => Rule::NotAllowed,
        FastFail::Encryption => Rule::Encryption,
        FastFail::Unhealthy => Rule::Unhealthy,
        FastFail::Constraint(key) => Rule::Constraint(key),
    }
}

/// Rejections: the first [`REJECTION_LIMIT`] rendered, all counted by rule.
struct Rejections<'a> {
    listed: Vec<(usize, Rejection)>,
    counts: Vec<(Rule<'a>, usize)>,
}

impl<'a> Rejections<'a> {
    fn new() -> Rejections<'a> {
        Rejections { listed: Vec::new(), counts: Vec::new() }
    }

    fn count(&mut self, rule: Rule<'a>, n: usize) {
        match self.counts.iter_mut().find(|(r, _)| *r == rule) {
            Some((_, c)) => *c += n,
            None => self.counts.push((rule, n)),
        }
    }

    fn wants_more(&self) -> bool {
        self.listed.len() < REJECTION_LIMIT
    }

    fn add(
        &mut self,
        order: usize,
        fail: &Fail<'a>,
        candidate: impl FnOnce() -> String,
        reason: impl FnOnce() -> String,
    ) {
        self.count(fail.rule(), 1);
        if self.wants_more() {
            self.listed.push((order, Rejection { candidate: candidate(), reason: reason() }));
        }
    }

    fn finish(mut self) -> (Vec<Rejection>, BTreeMap<String, usize>) {
        self.listed.sort_by_key(|(order, _)| *order);
        let by_rule = self.counts.into_iter().map(|(r, n)| (r.name(), n)).collect();
        (self.listed.into_iter().map(|(_, r)| r).collect(), by_rule)
    }
}

/// Resolves one unscoped requirement by policy.
/// Why a candidate breaks the soft rule, or `None` when it keeps it.
fn soft_breach(soft: &SoftPolicy, env: &str, provider: Option<&str>, encryption: Option<&Value>) -> Option<String> {
    let mut why = Vec::new();
    if let Some(list) = &soft.allowed_providers {
        match provider {
            Some(p) if list.iter().any(|a| a == p) => {}
            Some(p) => {
                why.push(format!("provider {p} is not among the preferred providers in {env} ({})", list.join(", ")))
            }
            None => why.push(format!("it names no provider, and {env} prefers {}", list.join(", "))),
        }
    }
    if soft.require_encryption && encryption != Some(&Value::Bool(true)) {
        why.push(format!("{env} prefers encrypted candidates, and it is not declared encrypted"));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

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

    let mut matches: Vec<&Resource> = Vec::new();
    if let Some(index) = cx.inventory.by_capability.get(req.capability.as_str()) {
        let prepared = Prepared::new(&cx.inventory.strings, req, cx.intent, rule, workload_value).filter(|_| fast);
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
                constraints.check(&subject)
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
        let verdict = match rule {
            Err(()) => Err(Fail::NoPolicyRule),
            Ok(rule) => allowed(rule, Some(&p.id))
                .and_then(|()| encryption(rule, &subject))
                .and_then(|()| declared.check(&subject)),
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

    let require_approval = rule.is_some_and(|r| r.require_approval);
    let roles = match rule {
        Some(r) if !r.approval_roles.is_empty() => r.approval_roles.clone(),
        _ => vec!["sre".to_string(), "platform_admin".to_string()],
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
                reason: format!("{} requires {} and no existing {env} provider matches.", cx.requester, req.capability),
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
    let (rejected, rejected_by_rule) = rejections.finish();
    Resolution { requirement: req.clone(), required_by, outcome, rejected, rejected_by_rule, considered, exception }
}

/// Whether a resource a person described (an external binding) meets a requirement's
/// constraints; `Err` says which constraint fails and why.
pub fn meets_constraints(req: &Requirement, intent: &Intent, r: &Resource) -> Result<(), String> {
    let empty = Attributes::new();
    let subject = Subject {
        capability: r.provides.iter().find(|c| c.capability == req.capability).map_or(&empty, |c| &c.attributes),
        attributes: &r.attributes,
        environment: r.environment.as_deref(),
        name: Some(&r.name),
        provider: r.provider.as_deref(),
    };
    let constraints = Constraints::new(&req.constraints, intent, None);
    constraints.check(&subject).map_err(|fail| {
        let inventory = Inventory::new(&[]);
        let policy = CapabilityPolicy::default();
        let cx = Context { inventory: &inventory, providers: &[], policy: &policy, intent, requester: "" };
        fail.describe(&cx, req, None)
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
    let (rejected, rejected_by_rule) = rejections.finish();
    Resolution {
        requirement: req.clone(),
        required_by,
        outcome,
        rejected,
        rejected_by_rule,
        considered: resources.len(),
        exception: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            labels: Default::default(),
            attributes,
            desired_state: None,
            observed_state: None,
            health: if i % 17 == 0 { Health::Error } else { Health::Healthy },
            status: None,
            provides: vec![opsgraph_model::ProvidedCapability { capability: "s3".into(), attributes: cap }],
            access: None,
            credentials: Default::default(),
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
                        id: None,
                        target_resource_type: "t".into(),
                        action: "a".into(),
                        pack: None,
                        name: None,
                        environment: Some(env.into()),
                        desired_result: None,
                        parameters: Default::default(),
                        constraints: Default::default(),
                        targets: Default::default(),
                        requires: vec![],
                    };
                    intent.constraints.insert("region".into(), json!("eu"));
                    let cx = Context { inventory: &inventory, providers: &[], policy, intent: &intent, requester: "T" };
                    let req = Requirement { capability: "s3".into(), constraints: c.clone(), scope: None };
                    let fast = resolve_with(&cx, &req, vec![], true);
                    let slow = resolve_with(&cx, &req, vec![], false);
                    assert_eq!(fast, slow, "env {env}, constraints {c:?}");
                }
            }
        }
    }
}
