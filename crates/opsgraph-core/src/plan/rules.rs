//! The rules a candidate can fail, borrowed so that rejecting 100,000 candidates allocates nothing:
//! environment, policy, allow-list, encryption, health, constraints; and the soft policies.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::model::{Attributes, EnvironmentPolicy, Health, Intent, PolicyRule, Requirement, SoftPolicy};
use crate::plan::policy::Verdict;

use crate::plan::columns::FastFail;
use serde_json::Value;

use crate::plan::resolution::*;

/// Why a candidate was rejected. Borrowed, so that rejecting 100,000 candidates allocates
/// nothing; only the listed ones are rendered into sentences.
#[derive(Debug, Clone)]
pub(crate) enum Fail<'a> {
    Environment {
        theirs: &'a str,
    },
    NoPolicyRule,
    NotAllowed {
        provider: &'a str,
    },
    NoProviderId,
    EncryptionRequired {
        observed: Option<Cow<'a, Value>>,
    },
    Unhealthy {
        health: Health,
    },
    Constraint {
        key: &'a str,
        want: &'a Value,
        observed: Option<Cow<'a, Value>>,
    },
    NotProvided,
    /// A policy rule's `require` is not true for it ([O]).
    Policy {
        rule: &'a PolicyRule,
        verdict: Verdict,
    },
}

/// The rule a failure counts under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule<'a> {
    Environment,
    NoPolicy,
    NotAllowed,
    Encryption,
    Unhealthy,
    Constraint(&'a str),
    NotProvided,
    Policy(&'a str),
}

impl Rule<'_> {
    pub(crate) fn name(self) -> String {
        match self {
            Rule::Environment => "environment".into(),
            Rule::NoPolicy => "no policy rule".into(),
            Rule::NotAllowed => "provider not allowed".into(),
            Rule::Encryption => "encryption required".into(),
            Rule::Unhealthy => "unhealthy".into(),
            Rule::Constraint(key) => format!("constraint {key}"),
            Rule::NotProvided => "not provided".into(),
            Rule::Policy(name) => format!("policy rule {name}"),
        }
    }
}

impl<'a> Fail<'a> {
    pub(crate) fn rule(&self) -> Rule<'a> {
        match self {
            Fail::Environment { .. } => Rule::Environment,
            Fail::NoPolicyRule => Rule::NoPolicy,
            Fail::NotAllowed { .. } | Fail::NoProviderId => Rule::NotAllowed,
            Fail::EncryptionRequired { .. } => Rule::Encryption,
            Fail::Unhealthy { .. } => Rule::Unhealthy,
            Fail::Constraint { key, .. } => Rule::Constraint(key),
            Fail::NotProvided => Rule::NotProvided,
            Fail::Policy { rule, .. } => Rule::Policy(&rule.name),
        }
    }

    /// The sentence a person reads.
    pub(crate) fn describe(&self, cx: &Context<'_>, req: &Requirement, rule: Option<&EnvironmentPolicy>) -> String {
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
            Fail::Policy { rule, verdict } => policy_reason(rule, verdict),
        }
    }
}

/// `policy rule pci-encrypted: `candidate.attributes.encryption == true` is false (PCI data is
/// stored encrypted)`.
pub(crate) fn policy_reason(rule: &PolicyRule, verdict: &Verdict) -> String {
    let expr = rule.require.as_deref().unwrap_or_default();
    let what = match verdict {
        Verdict::Holds => "holds".to_string(),
        Verdict::False => "is false".to_string(),
        Verdict::Missing(key) => format!("cannot be decided: it has no {key}"),
        Verdict::Error(e) => format!("cannot be evaluated: {e}"),
    };
    let when = rule.when.as_deref().map(|w| format!(" (when `{w}`)")).unwrap_or_default();
    let why = rule.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
    format!("policy rule {}{when}: `{expr}` {what}{why}", rule.name)
}

pub(crate) fn health_word(h: Health) -> &'static str {
    match h {
        Health::Healthy => "healthy",
        Health::Degraded => "degraded",
        Health::Error => "error",
        Health::Unknown => "unknown",
    }
}

pub(crate) fn attr_name(key: &str) -> &str {
    key.strip_prefix("min_").or_else(|| key.strip_prefix("max_")).unwrap_or(key)
}

pub(crate) fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What a candidate offers to constraint checks: capability attributes, then resource
/// attributes, then the resource's own fields.
pub(crate) struct Subject<'a> {
    pub(crate) capability: &'a Attributes,
    pub(crate) attributes: &'a Attributes,
    pub(crate) environment: Option<&'a str>,
    pub(crate) name: Option<&'a str>,
    pub(crate) provider: Option<&'a str>,
}

impl<'a> Subject<'a> {
    pub(crate) fn get(&self, key: &str) -> Option<Cow<'a, Value>> {
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

pub(crate) fn loosely_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::String(x), y) | (y, Value::String(x)) if !y.is_string() => *x == plain(y),
        _ => a == b,
    }
}

pub(crate) fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// The value of `key` for the workload: the intent's constraints, its parameters, its fields.
pub(crate) fn workload_value(intent: &Intent, key: &str) -> Option<Value> {
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
pub(crate) struct Constraints<'a> {
    pub(crate) items: Vec<(&'a str, &'a Value, Check)>,
}

pub(crate) enum Check {
    Min(f64),
    Max(f64),
    Required,
    Equal(Value),
    /// `same-as-workload`, and the intent gives no value: nothing can match.
    NoWorkloadValue,
    OneOf,
}

impl<'a> Constraints<'a> {
    pub(crate) fn new(
        constraints: &'a Attributes,
        intent: &Intent,
        only_declared: Option<&Subject<'_>>,
    ) -> Constraints<'a> {
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
    pub(crate) fn check<'s>(&self, subject: &Subject<'s>) -> Result<(), Fail<'s>>
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
pub(crate) fn policy_rule<'a>(cx: &Context<'a>, capability: &str) -> Result<Option<&'a EnvironmentPolicy>, ()> {
    let Some(envs) = cx.policy.rules.get(capability) else {
        return Ok(None);
    };
    let Some(env) = cx.intent.environment.as_deref() else {
        return Ok(None);
    };
    envs.get(env).map(Some).ok_or(())
}

pub(crate) fn allowed<'s>(rule: Option<&EnvironmentPolicy>, provider: Option<&'s str>) -> Result<(), Fail<'s>> {
    let Some(list) = rule.and_then(|r| r.allowed_providers.as_ref()) else {
        return Ok(());
    };
    match provider {
        Some(p) if list.iter().any(|a| a == p) => Ok(()),
        Some(p) => Err(Fail::NotAllowed { provider: p }),
        None => Err(Fail::NoProviderId),
    }
}

pub(crate) fn encryption<'s>(rule: Option<&EnvironmentPolicy>, subject: &Subject<'s>) -> Result<(), Fail<'s>> {
    if !rule.is_some_and(|r| r.require_encryption) {
        return Ok(());
    }
    match subject.get("encryption") {
        Some(v) if *v == Value::Bool(true) => Ok(()),
        observed => Err(Fail::EncryptionRequired { observed }),
    }
}

pub(crate) fn fast_rule(f: FastFail<'_>) -> Rule<'_> {
    match f {
        FastFail::NoPolicy => Rule::NoPolicy,
        FastFail::NotAllowed => Rule::NotAllowed,
        FastFail::Encryption => Rule::Encryption,
        FastFail::Unhealthy => Rule::Unhealthy,
        FastFail::Constraint(key) => Rule::Constraint(key),
    }
}

/// Rejections: the first [`REJECTION_LIMIT`] rendered, all counted by rule.
pub(crate) struct Rejections<'a> {
    pub(crate) listed: Vec<(usize, Rejection)>,
    pub(crate) counts: Vec<(Rule<'a>, usize)>,
}

impl<'a> Rejections<'a> {
    pub(crate) fn new() -> Rejections<'a> {
        Rejections { listed: Vec::new(), counts: Vec::new() }
    }

    pub(crate) fn count(&mut self, rule: Rule<'a>, n: usize) {
        match self.counts.iter_mut().find(|(r, _)| *r == rule) {
            Some((_, c)) => *c += n,
            None => self.counts.push((rule, n)),
        }
    }

    pub(crate) fn wants_more(&self) -> bool {
        self.listed.len() < REJECTION_LIMIT
    }

    pub(crate) fn add(
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

    pub(crate) fn finish(mut self) -> (Vec<Rejection>, BTreeMap<String, usize>) {
        self.listed.sort_by_key(|(order, _)| *order);
        let by_rule = self.counts.into_iter().map(|(r, n)| (r.name(), n)).collect();
        (self.listed.into_iter().map(|(_, r)| r).collect(), by_rule)
    }
}

/// Resolves one unscoped requirement by policy.
/// Why a candidate breaks the soft rule, or `None` when it keeps it.
pub(crate) fn soft_breach(
    soft: &SoftPolicy,
    env: &str,
    provider: Option<&str>,
    encryption: Option<&Value>,
) -> Option<String> {
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
