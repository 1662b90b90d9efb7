//! A compact, columnar copy of the candidates of one capability, so that a requirement can be
//! checked against 100,000 candidates by scanning contiguous memory instead of chasing each
//! resource's maps. The fast path decides what it can decide exactly; anything unusual (a
//! constraint on a resource's name, a string compared with a number) falls back to the full
//! evaluation in `resolve.rs`, which also renders every listed rejection. Both paths must agree;
//! the tests in `resolve.rs` run the same cases through each.

use std::collections::HashMap;

use crate::model::{EnvironmentPolicy, Health, Intent, Requirement, Resource};
use serde_json::Value;

/// Interned strings: attribute keys, string values, provider ids.
#[derive(Debug, Default)]
pub(crate) struct Strings<'a> {
    ids: HashMap<&'a str, u32>,
}

impl<'a> Strings<'a> {
    fn intern(&mut self, s: &'a str) -> u32 {
        let next = self.ids.len() as u32;
        *self.ids.entry(s).or_insert(next)
    }

    fn get(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Val {
    Bool(bool),
    Num(f64),
    Str(u32),
    Other,
}

const NONE: u32 = u32::MAX;

/// The candidates of one capability in one environment.
#[derive(Debug, Default)]
pub(crate) struct Group {
    /// (resource index, provided-capability index).
    pub(crate) members: Vec<(u32, u32)>,
    provider: Vec<u32>,
    unhealthy: Vec<bool>,
    attr_start: Vec<u32>,
    attr_key: Vec<u32>,
    attr_val: Vec<Val>,
}

impl Group {
    pub(crate) fn push<'a>(&mut self, strings: &mut Strings<'a>, resource: &'a Resource, i: u32, j: u32) {
        if self.attr_start.is_empty() {
            self.attr_start.push(0);
        }
        self.members.push((i, j));
        // Environments are compared with `environment` constraints by id.
        if let Some(env) = resource.environment.as_deref() {
            strings.intern(env);
        }
        self.provider.push(resource.provider.as_deref().map_or(NONE, |p| strings.intern(p)));
        self.unhealthy.push(resource.health == Health::Error);
        let capability = &resource.provides[j as usize].attributes;
        // Capability attributes shadow resource attributes, as in the full evaluation.
        let shadowed = |k: &String| capability.contains_key(k);
        for (k, v) in capability.iter().chain(resource.attributes.iter().filter(|(k, _)| !shadowed(k))) {
            self.attr_key.push(strings.intern(k));
            self.attr_val.push(match v {
                Value::Bool(b) => Val::Bool(*b),
                Value::Number(n) => n.as_f64().map_or(Val::Other, Val::Num),
                Value::String(s) => Val::Str(strings.intern(s)),
                _ => Val::Other,
            });
        }
        self.attr_start.push(self.attr_key.len() as u32);
    }

    fn attr(&self, member: usize, key: u32) -> Option<Val> {
        let (from, to) = (self.attr_start[member] as usize, self.attr_start[member + 1] as usize);
        self.attr_key[from..to].iter().position(|k| *k == key).map(|p| self.attr_val[from + p])
    }
}

#[derive(Debug, Clone, Copy)]
enum Want {
    Bool(bool),
    Num(f64),
    /// A string no candidate has: never equal to a string.
    Str(Option<u32>),
    Other,
}

#[derive(Debug)]
enum Check<'r> {
    Min(&'r str, Option<u32>, f64),
    Max(&'r str, Option<u32>, f64),
    Required(&'r str, Option<u32>),
    Eq(&'r str, Option<u32>, Want),
    OneOf(&'r str, Option<u32>, Vec<Want>),
    /// `environment`: an attribute when a candidate has one, else the group's environment.
    Env(&'r str, Option<u32>, Want),
    Never(&'r str),
}

/// What a candidate failed, in the fast path's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FastFail<'r> {
    NoPolicy,
    NotAllowed,
    Encryption,
    Unhealthy,
    Constraint(&'r str),
}

/// A requirement prepared against the interned strings; `None` when it needs the full path.
#[derive(Debug)]
pub(crate) struct Prepared<'r> {
    no_policy: bool,
    allowed: Option<Vec<u32>>,
    encryption: Option<Option<u32>>,
    checks: Vec<Check<'r>>,
}

fn want(strings: &Strings<'_>, v: &Value) -> Want {
    match v {
        Value::Bool(b) => Want::Bool(*b),
        Value::Number(n) => n.as_f64().map_or(Want::Other, Want::Num),
        Value::String(s) => Want::Str(strings.get(s)),
        _ => Want::Other,
    }
}

impl<'r> Prepared<'r> {
    pub(crate) fn new(
        strings: &Strings<'_>,
        req: &'r Requirement,
        intent: &Intent,
        rule: Result<Option<&EnvironmentPolicy>, ()>,
        workload: impl Fn(&Intent, &str) -> Option<Value>,
    ) -> Option<Prepared<'r>> {
        let mut checks = Vec::new();
        for (key, v) in &req.constraints {
            let k = key.as_str();
            let bounded = k.strip_prefix("min_").or_else(|| k.strip_prefix("max_"));
            if matches!(bounded.unwrap_or(k), "name" | "provider") {
                return None;
            }
            let check = match (bounded, v) {
                (Some(attr), Value::Number(n)) if k.starts_with("min_") => {
                    Check::Min(k, strings.get(attr), n.as_f64()?)
                }
                (Some(attr), Value::Number(n)) => Check::Max(k, strings.get(attr), n.as_f64()?),
                (Some(_), Value::String(_)) => return None,
                _ => {
                    let w = match v {
                        Value::String(s) if s == "required" => {
                            checks.push(Check::Required(k, strings.get(k)));
                            continue;
                        }
                        Value::String(s) if s == "same-as-workload" => match workload(intent, k) {
                            Some(w) => want(strings, &w),
                            None => {
                                checks.push(Check::Never(k));
                                continue;
                            }
                        },
                        Value::Array(options) => {
                            checks.push(Check::OneOf(
                                k,
                                strings.get(k),
                                options.iter().map(|o| want(strings, o)).collect(),
                            ));
                            continue;
                        }
                        other => want(strings, other),
                    };
                    if k == "environment" {
                        Check::Env(k, strings.get(k), w)
                    } else {
                        Check::Eq(k, strings.get(k), w)
                    }
                }
            };
            checks.push(check);
        }
        let (no_policy, rule) = match rule {
            Err(()) => (true, None),
            Ok(r) => (false, r),
        };
        Some(Prepared {
            no_policy,
            allowed: rule
                .and_then(|r| r.allowed_providers.as_ref())
                .map(|l| l.iter().filter_map(|p| strings.get(p)).collect()),
            encryption: rule.filter(|r| r.require_encryption).map(|_| strings.get("encryption")),
            checks,
        })
    }

    /// The verdict for member `m` of `group` (whose environment is `env`), or `None` when only
    /// the full evaluation can tell.
    pub(crate) fn verdict(
        &self,
        strings: &Strings<'_>,
        group: &Group,
        env: Option<&str>,
        m: usize,
    ) -> Option<Result<(), FastFail<'r>>> {
        if self.no_policy {
            return Some(Err(FastFail::NoPolicy));
        }
        if let Some(allowed) = &self.allowed {
            let p = group.provider[m];
            if p == NONE || !allowed.contains(&p) {
                return Some(Err(FastFail::NotAllowed));
            }
        }
        if let Some(key) = self.encryption {
            if key.and_then(|k| group.attr(m, k)) != Some(Val::Bool(true)) {
                return Some(Err(FastFail::Encryption));
            }
        }
        if group.unhealthy[m] {
            return Some(Err(FastFail::Unhealthy));
        }
        for check in &self.checks {
            let ok = match check {
                Check::Min(_, key, n) | Check::Max(_, key, n) => match key.and_then(|k| group.attr(m, k)) {
                    Some(Val::Num(v)) => {
                        if matches!(check, Check::Min(..)) {
                            v >= *n
                        } else {
                            v <= *n
                        }
                    }
                    Some(Val::Str(_)) | Some(Val::Other) => return None,
                    _ => false,
                },
                Check::Required(_, key) => key.and_then(|k| group.attr(m, k)) == Some(Val::Bool(true)),
                Check::Eq(_, key, w) => equal(key.and_then(|k| group.attr(m, k)), *w)?,
                Check::OneOf(_, key, ws) => {
                    let observed = key.and_then(|k| group.attr(m, k));
                    let mut any = false;
                    for w in ws {
                        if equal(observed, *w)? {
                            any = true;
                            break;
                        }
                    }
                    any
                }
                Check::Env(_, key, w) => match key.and_then(|k| group.attr(m, k)) {
                    Some(v) => equal(Some(v), *w)?,
                    None => match (env, w) {
                        (None, _) => false,
                        (Some(e), Want::Str(Some(id))) => strings.get(e) == Some(*id),
                        (Some(_), Want::Str(None)) => false,
                        (Some(_), _) => return None,
                    },
                },
                Check::Never(_) => false,
            };
            if !ok {
                let key = match check {
                    Check::Min(k, ..)
                    | Check::Max(k, ..)
                    | Check::Required(k, _)
                    | Check::Eq(k, ..)
                    | Check::OneOf(k, ..)
                    | Check::Env(k, ..)
                    | Check::Never(k) => k,
                };
                return Some(Err(FastFail::Constraint(key)));
            }
        }
        Some(Ok(()))
    }
}

/// Loose equality as the full evaluation has it; `None` for the mixed cases it alone decides.
fn equal(observed: Option<Val>, want: Want) -> Option<bool> {
    Some(match (observed, want) {
        (None, _) => false,
        (Some(Val::Bool(a)), Want::Bool(b)) => a == b,
        (Some(Val::Num(a)), Want::Num(b)) => a == b,
        (Some(Val::Str(a)), Want::Str(b)) => Some(a) == b,
        (Some(Val::Bool(_)), Want::Num(_)) | (Some(Val::Num(_)), Want::Bool(_)) => false,
        _ => return None,
    })
}
