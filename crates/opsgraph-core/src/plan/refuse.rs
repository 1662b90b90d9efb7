//! A template's `refuse:` rules ([I]), evaluated when a plan is built: against the plan's
//! parameters (given, inherited from the record, or defaulted), its targets, and what the store
//! recorded about the resource (its recorded parameters and targets, its observed values). The
//! first rule whose conditions all hold refuses the plan (`P012`) before anything is stored or
//! run. The rules were checked when the pack was loaded (`pack/refusals.rs`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::{Attributes, Condition, Parity, PlanTemplate, Subject, Test, ValueRef};
use crate::plan::day2::Recorded;
use crate::plan::rules::{as_number, loosely_equal, plain};
use crate::plan::Error;

/// What the rules read.
pub(crate) struct Facts<'a> {
    pub(crate) parameters: &'a Attributes,
    pub(crate) targets: &'a BTreeMap<String, Vec<String>>,
    /// The record of the resource the intent names, if the store has one.
    pub(crate) recorded: Option<&'a Recorded>,
}

/// The refusal of the first rule of `template` whose conditions all hold.
pub(crate) fn check(template: &PlanTemplate, facts: &Facts<'_>) -> Option<Error> {
    template.refuse.iter().find_map(|rule| {
        let mut because = Vec::new();
        for c in &rule.when {
            because.push(holds(c, facts)?);
        }
        Some(Error::Refused { template: template.id.clone(), message: rule.message.clone(), because })
    })
}

/// The condition, said with the values found, when it holds.
fn holds(c: &Condition, facts: &Facts<'_>) -> Option<String> {
    let (name, counted) = match &c.subject {
        Subject::Of(r) => (r.as_str(), false),
        Subject::CountOf(r) => (r.as_str(), true),
    };
    let found = lookup(name, facts);
    let value = match counted {
        true => Some(Value::from(items(found.as_ref()).len())),
        false => found,
    };
    let subject = if counted { format!("the count of {name}") } else { name.to_string() };
    let shown = value.as_ref().map_or_else(|| "not set".to_string(), show);
    let ok = match &c.test {
        Test::Equals(want) => value.as_ref().is_some_and(|v| loosely_equal(v, want)),
        Test::NotEquals(want) => !value.as_ref().is_some_and(|v| loosely_equal(v, want)),
        Test::Below(n) => value.as_ref().and_then(as_number).is_some_and(|v| v < *n),
        Test::Above(n) => value.as_ref().and_then(as_number).is_some_and(|v| v > *n),
        Test::Parity(p) => value
            .as_ref()
            .and_then(as_number)
            .is_some_and(|v| v.fract() == 0.0 && (v.abs() % 2.0 == 0.0) == (*p == Parity::Even)),
        Test::IncludesAll(other) => {
            let have = items(value.as_ref());
            let need = items(lookup(other, facts).as_ref());
            // Nothing to include (no record yet) refuses nothing.
            !need.is_empty() && need.iter().all(|n| have.contains(n))
        }
    };
    if !ok {
        return None;
    }
    Some(match &c.test {
        Test::Equals(w) => format!("{subject} is {shown}, equal to {}", plain(w)),
        Test::NotEquals(w) => format!("{subject} is {shown}, not {}", plain(w)),
        Test::Below(n) => format!("{subject} is {shown}, below {n}"),
        Test::Above(n) => format!("{subject} is {shown}, above {n}"),
        Test::Parity(Parity::Even) => format!("{subject} is {shown}, even"),
        Test::Parity(Parity::Odd) => format!("{subject} is {shown}, odd"),
        Test::IncludesAll(other) => {
            let need = lookup(other, facts).map_or_else(|| "none".to_string(), |v| show(&v));
            format!("{subject} ({shown}) includes all of {other} ({need})")
        }
    })
}

/// The value a reference names; `None` when there is none (no record, a parameter not given).
fn lookup(text: &str, facts: &Facts<'_>) -> Option<Value> {
    let list = |ids: &Vec<String>| Value::from(ids.clone());
    match ValueRef::parse(text)? {
        ValueRef::Param(n) => facts.parameters.get(n).cloned(),
        ValueRef::Targets(n) => facts.targets.get(n).map(list),
        ValueRef::Recorded(n) => facts.recorded?.parameters.get(n).cloned(),
        ValueRef::RecordedTargets(n) => facts.recorded?.targets.get(n).map(list),
        ValueRef::Observed(n) => facts.recorded?.resource.observed.get(n).cloned().map(Value::String),
    }
}

/// A value's items: a list's, or a comma-separated string's non-empty ones; none for no value.
fn items(v: Option<&Value>) -> Vec<String> {
    match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().map(plain).collect(),
        Some(Value::String(s)) => s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect(),
        Some(other) => vec![plain(other)],
    }
}

fn show(v: &Value) -> String {
    crate::plan::day2::show(v)
}
