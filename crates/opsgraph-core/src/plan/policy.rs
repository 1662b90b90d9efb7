//! Policy rules ([O]): the CEL expressions of capability and operations policies, evaluated over
//! the intent's context (organization, environment, criticality, compliance), the requester's
//! roles, each candidate, and the plan's cost. Compiled once per resolution (they were checked
//! when their document loaded, `pack::expr`); an expression that cannot be evaluated counts
//! against the request — a `when` holds, a `require` fails — so a policy fails closed.

use cel::{Context as Cel, ExecutionError, Program, Value as CelValue};
use serde_json::{json, Map, Value};

use crate::model::{Attributes, Intent, PolicyRule, Provider, Resource};
use crate::pack::expr::{compile, Scope};

/// `intent` as expressions see it: absent strings are `""`, absent lists `[]`, so that
/// `intent.criticality == 'high'` never fails for want of a value. Parameters are not in it
/// (they may be secret).
pub fn intent_view(intent: &Intent) -> Value {
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    json!({
        "organization": s(&intent.organization),
        "environment": s(&intent.environment),
        "criticality": s(&intent.criticality),
        "compliance": intent.compliance,
        "action": intent.action,
        "target_resource_type": intent.target_resource_type,
        "name": s(&intent.name),
    })
}

/// A candidate as `require` sees it.
pub(crate) fn resource_view(r: &Resource, capability: &Attributes) -> Value {
    let mut attributes: Map<String, Value> = r.attributes.clone().into_iter().collect();
    attributes.extend(capability.clone());
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    json!({
        "id": r.id,
        "kind": "resource",
        "provider": s(&r.provider),
        "environment": s(&r.environment),
        "organization": s(&r.organization),
        "criticality": s(&r.criticality),
        "compliance": r.compliance,
        "attributes": attributes,
        "cost": 0.0,
    })
}

pub(crate) fn provider_view(p: &Provider, intent: &Intent) -> Value {
    json!({
        "id": format!("provider {}", p.id),
        "kind": if p.create.is_some() { "create" } else { "external" },
        "provider": p.id,
        "environment": intent.environment.clone().unwrap_or_default(),
        "organization": intent.organization.clone().unwrap_or_default(),
        "criticality": intent.criticality.clone().unwrap_or_default(),
        "compliance": intent.compliance,
        "attributes": p.attributes,
        "cost": p.cost.unwrap_or(0.0),
    })
}

/// How one `require` judged one candidate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    Holds,
    False,
    /// It named something the candidate does not have (yet): for a provider, decided when the
    /// resource exists (an external binding, at its gate).
    Missing(String),
    Error(String),
}

/// The rules of one environment policy that apply to one request: `when` evaluated, `require`
/// compiled.
pub(crate) struct Active<'a> {
    pub(crate) requires: Vec<(&'a PolicyRule, Program)>,
    /// Rules whose `when` holds and that ask for an approval.
    pub(crate) approvals: Vec<&'a PolicyRule>,
    base: Cel<'static>,
}

impl<'a> Active<'a> {
    pub(crate) fn new(rules: &'a [PolicyRule], intent: &Intent, roles: &[String]) -> Active<'a> {
        let base = base_context(intent, roles, None);
        let mut requires = Vec::new();
        let mut approvals = Vec::new();
        for rule in rules {
            if !holds(rule.when.as_deref(), Scope::When, &base) {
                continue;
            }
            if rule.require_approval {
                approvals.push(rule);
            }
            if let Some(text) = &rule.require {
                match compile(text, Scope::Candidate) {
                    Ok(program) => requires.push((rule, program)),
                    // Checked at load; a rule built in code that does not compile rejects all.
                    Err(_) => requires.push((rule, Program::compile("false").expect("`false` compiles"))),
                }
            }
        }
        Active { requires, approvals, base }
    }

    /// The first rule the candidate fails, with the verdict.
    pub(crate) fn check(&self, candidate: &Value) -> Result<(), (&'a PolicyRule, Verdict)> {
        if self.requires.is_empty() {
            return Ok(());
        }
        let mut cx = self.base.new_inner_scope();
        cx.add_variable("candidate", candidate).expect("JSON values convert to CEL values");
        for (rule, program) in &self.requires {
            let verdict = match program.execute(&cx) {
                Ok(CelValue::Bool(true)) => Verdict::Holds,
                Ok(CelValue::Bool(false)) => Verdict::False,
                Ok(other) => Verdict::Error(format!("it is {other:?}, not a boolean")),
                Err(ExecutionError::NoSuchKey(k)) => Verdict::Missing(k.to_string()),
                Err(e) => Verdict::Error(e.to_string()),
            };
            if verdict != Verdict::Holds {
                return Err((rule, verdict));
            }
        }
        Ok(())
    }
}

pub(crate) fn base_context(intent: &Intent, roles: &[String], cost: Option<f64>) -> Cel<'static> {
    let mut cx = Cel::default();
    cx.add_variable("intent", intent_view(intent)).expect("JSON values convert to CEL values");
    cx.add_variable("roles", roles).expect("strings convert to CEL values");
    if let Some(cost) = cost {
        cx.add_variable("cost", cost).expect("numbers convert to CEL values");
    }
    cx
}

/// Whether a `when` holds: absent, it does; one that cannot be evaluated does too (fail closed).
pub(crate) fn holds(when: Option<&str>, scope: Scope, cx: &Cel<'_>) -> bool {
    let Some(text) = when else { return true };
    match compile(text, scope).map(|p| p.execute(cx)) {
        Ok(Ok(CelValue::Bool(b))) => b,
        _ => true,
    }
}

/// How a rule is named in reasons: `rule pci-encrypted (when 'pci' in intent.compliance)`.
pub(crate) fn named(name: &str, when: Option<&str>) -> String {
    match when {
        Some(w) => format!("rule {name} (when `{w}`)"),
        None => format!("rule {name}"),
    }
}
