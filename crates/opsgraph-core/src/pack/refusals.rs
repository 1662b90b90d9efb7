//! A plan template's `refuse:` rules ([I]): their shape, and the checks a shape cannot say —
//! a reference names a declared parameter or a target a scope reads, a test fits the value's
//! type — reported at the rule's line and column when the pack is loaded. The rules are
//! evaluated by `plan/refuse.rs`.

use crate::model::ValueRef;
use crate::pack::diag::{did_you_mean, Code, Diagnostic};
use crate::pack::shape::{field, obj, required, Obj, Shape};
use crate::pack::yaml::{Node, NodeKind, Scalar};

static STR: Shape = Shape::Str;
static SCALAR: Shape = Shape::Scalar;
static NUMBER: Shape = Shape::Number;
static PARITY: Shape = Shape::Enum(&["even", "odd"]);

/// The tests a condition can make; exactly one per condition.
const TESTS: &[&str] = &["equals", "not_equals", "below", "above", "parity", "includes_all"];

const REFS: &str = "`params.NAME`, `targets.NAME`, `recorded.NAME`, `recorded.targets.NAME` or `observed.NAME`";

static CONDITION: Obj = obj(
    "refusal condition",
    "A value (`of`) or the number of its items (`count_of`), and one test of it.",
    &[
        field(
            "of",
            &STR,
            "what is tested: `params.NAME` (the plan's value: given, inherited or defaulted), `targets.NAME`, \
             `recorded.NAME`, `recorded.targets.NAME` (the recorded resource's) or `observed.NAME`",
        ),
        field("count_of", &STR, "the same references: the number of items (a list's, a comma-separated string's)"),
        field("equals", &SCALAR, "holds when the value equals this (`\"3\"` equals 3)"),
        field("not_equals", &SCALAR, "holds when the value does not equal this (or there is none)"),
        field("below", &NUMBER, "holds when the value (a number) is below this"),
        field("above", &NUMBER, "holds when the value (a number) is above this"),
        field("parity", &PARITY, "holds when the value (a whole number) is even | odd"),
        field("includes_all", &STR, "a reference to a list: holds when each of its items is among the value's"),
    ],
)
.one_of(TESTS);

static REFUSAL: Obj = obj(
    "refusal",
    "A plan of the template is refused, with the message, when all its conditions hold.",
    &[
        required("when", &Shape::List(&Shape::Obj(&CONDITION)), "the conditions; all must hold"),
        required("message", &STR, "why the plan is refused, and how to do it anyway if there is a way"),
    ],
);

/// The `refuse:` field of a plan template.
pub(crate) static REFUSALS: Shape = Shape::List(&Shape::Obj(&REFUSAL));

/// What the template declares that references may name.
struct Names<'a> {
    /// Parameter name → (type, secret).
    params: Vec<(&'a str, &'a str, bool)>,
    /// The target names its scopes read.
    targets: Vec<&'a str>,
}

/// Checks every rule of a template's `refuse:` (the template's body).
pub(crate) fn check(body: &Node, diags: &mut Vec<Diagnostic>) {
    let Some(NodeKind::Seq(rules)) = body.get("refuse").map(|n| &n.kind) else { return };
    let names = names(body);
    for rule in rules {
        let Some(when) = rule.get("when") else { continue };
        let NodeKind::Seq(conditions) = &when.kind else { continue };
        if conditions.is_empty() {
            diags.push(
                Diagnostic::error(when.pos, Code::BadValue, "a refusal without conditions refuses every plan")
                    .expected("at least one condition"),
            );
        }
        for c in conditions {
            condition(c, &names, diags);
        }
    }
}

fn names(body: &Node) -> Names<'_> {
    let mut params = Vec::new();
    if let Some(NodeKind::Map(entries)) = body.get("parameters").map(|n| &n.kind) {
        for (name, spec) in entries {
            let type_ = spec.get("type").and_then(Node::as_str).unwrap_or_default();
            let secret = matches!(spec.get("secret").map(|n| &n.kind), Some(NodeKind::Scalar(Scalar::Bool(true), _)));
            params.push((name.as_str().unwrap_or_default(), type_, secret));
        }
    }
    let targets = scope_sources(body).into_iter().filter_map(|f| f.as_str()?.strip_prefix("targets.")).collect();
    Names { params, targets }
}

/// The `from` of every scope of a template (`targets.<name>`), one or a list each, as written.
pub(crate) fn scope_sources(template: &Node) -> Vec<&Node> {
    let mut froms = Vec::new();
    if let Some(NodeKind::Map(scopes)) = template.get("scopes").map(|n| &n.kind) {
        for (_, scope) in scopes {
            match scope.get("from") {
                Some(Node { kind: NodeKind::Seq(items), .. }) => froms.extend(items),
                Some(one) => froms.push(one),
                None => {}
            }
        }
    }
    froms
}

/// What a checked reference is: a list (targets, a list parameter), a number, a boolean, or
/// anything (recorded and observed values, strings).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    List,
    Number,
    Bool,
    Text,
    Any,
}

fn condition(c: &Node, names: &Names<'_>, diags: &mut Vec<Diagnostic>) {
    let subject = match (c.get("of"), c.get("count_of")) {
        (Some(of), None) => Some((of, false)),
        (None, Some(count)) => Some((count, true)),
        (None, None) => {
            diags.push(
                Diagnostic::error(c.pos, Code::MissingKey, "a refusal condition needs `of` or `count_of`")
                    .expected(format!("`of:` or `count_of:` with {REFS}")),
            );
            None
        }
        (Some(_), Some(count)) => {
            diags.push(
                Diagnostic::error(count.pos, Code::BadValue, "a refusal condition takes only one of `of`, `count_of`")
                    .expected("`of` (the value) or `count_of` (the number of its items)"),
            );
            None
        }
    };
    let Some((node, counted)) = subject else { return };
    let Some(kind) = reference(node, names, diags) else { return };
    let test = TESTS.iter().find_map(|t| c.get(t).map(|n| (*t, n)));
    let Some((test, value)) = test else { return };
    let numeric = counted || matches!(kind, Kind::Number | Kind::Any);
    let problem = match test {
        _ if counted && matches!(kind, Kind::Number | Kind::Bool) => Some(format!(
            "`count_of` counts a list's or a comma-separated string's items, and `{}` is neither",
            node.as_str().unwrap_or_default()
        )),
        "includes_all" if counted => Some("`includes_all` tests a list: use `of`, not `count_of`".to_string()),
        "includes_all" if !matches!(kind, Kind::List | Kind::Any) => {
            Some(format!("`includes_all` tests a list, and `{}` is not one", node.as_str().unwrap_or_default()))
        }
        "includes_all" => reference(value, names, diags)
            .filter(|k| !matches!(k, Kind::List | Kind::Any))
            .map(|_| format!("`includes_all` names a list, and `{}` is not one", value.as_str().unwrap_or_default())),
        "below" | "above" | "parity" if !numeric => Some(format!(
            "`{test}` tests a number, and `{}` is not one (count a list's items with `count_of`)",
            node.as_str().unwrap_or_default()
        )),
        "equals" | "not_equals" if !counted && kind == Kind::List => Some(format!(
            "`{test}` compares one value, and `{}` is a list (use `count_of` or `includes_all`)",
            node.as_str().unwrap_or_default()
        )),
        "equals" | "not_equals" => {
            let want = if counted { Kind::Number } else { kind };
            let found = match &value.kind {
                NodeKind::Scalar(Scalar::Bool(_), _) => Kind::Bool,
                NodeKind::Scalar(Scalar::Int(_) | Scalar::Float(_), _) => Kind::Number,
                _ => Kind::Text,
            };
            let fits = match want {
                Kind::Bool | Kind::Number => found == want,
                _ => true,
            };
            (!fits).then(|| {
                let what = if want == Kind::Bool { "a boolean" } else { "a number" };
                format!(
                    "`{}` is {what}; `{test}: {}` can never match it",
                    node.as_str().unwrap_or_default(),
                    value.as_str().unwrap_or_default()
                )
            })
        }
        _ => None,
    };
    if let Some(problem) = problem {
        diags.push(Diagnostic::error(value.pos, Code::BadValue, problem));
    }
}

/// Checks one reference; its kind when it names something the template has.
fn reference(node: &Node, names: &Names<'_>, diags: &mut Vec<Diagnostic>) -> Option<Kind> {
    let text = node.as_str().unwrap_or_default();
    let Some(r) = ValueRef::parse(text) else {
        diags.push(Diagnostic::error(node.pos, Code::BadValue, format!("unknown reference `{text}`")).expected(REFS));
        return None;
    };
    let unknown = |what: &str, name: &str, known: &[&str]| {
        let mut d = Diagnostic::error(node.pos, Code::UnknownRef, format!("unknown {what} `{name}`"));
        if let Some(close) = did_you_mean(name, known.iter().copied()) {
            d = d.hint(format!("did you mean `{close}`?"));
        } else if !known.is_empty() {
            d = d.expected(format!("one of {}", known.join(", ")));
        }
        d
    };
    match r {
        ValueRef::Param(name) => {
            let Some((_, type_, secret)) = names.params.iter().find(|(n, _, _)| *n == name) else {
                let known: Vec<&str> = names.params.iter().map(|(n, _, _)| *n).collect();
                diags.push(unknown("parameter", name, &known));
                return None;
            };
            if *secret {
                diags.push(Diagnostic::error(
                    node.pos,
                    Code::BadValue,
                    format!("parameter `{name}` is secret: a refusal does not read secret values"),
                ));
                return None;
            }
            Some(match *type_ {
                "list" => Kind::List,
                "integer" | "number" => Kind::Number,
                "boolean" => Kind::Bool,
                "map" => Kind::Any,
                _ => Kind::Text,
            })
        }
        ValueRef::Targets(name) => {
            if !names.targets.contains(&name) {
                diags.push(unknown("target", name, &names.targets));
                return None;
            }
            Some(Kind::List)
        }
        ValueRef::RecordedTargets(_) => Some(Kind::List),
        ValueRef::Recorded(_) | ValueRef::Observed(_) => Some(Kind::Any),
    }
}
