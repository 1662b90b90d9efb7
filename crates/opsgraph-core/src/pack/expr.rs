//! Policy expressions ([O]): CEL, through the `cel-interpreter` crate — a sandboxed language
//! (no IO, no loops beyond the bounded macros, total over its inputs) used for the same job by
//! Kubernetes admission policies. Expressions are compiled when their document loads, so a
//! syntax error or an unknown variable is a diagnostic at its line and column (E013), and again
//! where they are evaluated (`plan::policy`): compiling a one-line expression costs microseconds.

use cel::Program;

use crate::pack::diag::{Code, Diagnostic};
use crate::pack::yaml::Node;

/// The variables an expression may name, by where it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A capability rule's `when`: the intent and the requester's roles.
    When,
    /// A capability rule's `require`: also the candidate.
    Candidate,
    /// An operations rule's `when`: the intent, the roles and the plan's cost.
    Operations,
}

impl Scope {
    pub fn variables(self) -> &'static [&'static str] {
        match self {
            Scope::When => &["intent", "roles"],
            Scope::Candidate => &["intent", "roles", "candidate"],
            Scope::Operations => &["intent", "roles", "cost"],
        }
    }
}

/// An expression that does not compile: where in its text (1-based) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

/// Compiles `text` and checks that it names only the variables of `scope`.
pub fn compile(text: &str, scope: Scope) -> Result<Program, ExprError> {
    let program = Program::compile(text).map_err(|errors| {
        let first = errors.errors.first();
        let (line, col) = first.map_or((1, 0), |e| e.pos);
        ExprError {
            line: usize::try_from(line).unwrap_or(1).max(1),
            col: usize::try_from(col).unwrap_or(0) + 1,
            message: first.map_or_else(|| "invalid expression".to_string(), |e| e.msg.clone()),
        }
    })?;
    let allowed = scope.variables();
    let references = program.references();
    let mut unknown: Vec<&str> = references.variables().into_iter().filter(|v| !allowed.contains(v)).collect();
    unknown.sort_unstable();
    if let Some(v) = unknown.first().map(|v| v.to_string()) {
        // Where the name first appears (1-based line and column).
        let at = text.find(&v).unwrap_or(0);
        let before = &text[..at];
        return Err(ExprError {
            line: before.matches('\n').count() + 1,
            col: before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1,
            message: format!("unknown variable `{v}`; here an expression may use {}", allowed.join(", ")),
        });
    }
    Ok(program)
}

/// Checks the expression at `key` of `rule` (a mapping), if any: a diagnostic at the value's line
/// and column in the file, naming the line and column inside the expression (the tree keeps a
/// scalar's text unquoted, so the two are not added up).
pub(crate) fn check(rule: &Node, key: &str, scope: Scope, diags: &mut Vec<Diagnostic>) {
    let Some(node) = rule.get(key) else { return };
    let Some(text) = node.as_str() else { return };
    if let Err(e) = compile(text, scope) {
        let at = if text.contains('\n') {
            format!("line {}, column {}", e.line, e.col)
        } else {
            format!("column {}", e.col)
        };
        diags.push(
            Diagnostic::error(node.pos, Code::Expression, format!("`{key}` at {at} of the expression: {}", e.message))
                .expected(format!("a CEL expression over {}", scope.variables().join(", ")))
                .hint("see docs/documents.md, \"Policy rules\""),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{expect, Expect};

    fn check(text: &str, scope: Scope, expect: Expect) {
        let got = match compile(text, scope) {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("{}:{}: {}", e.line, e.col, e.message),
        };
        expect.assert_eq(&got);
    }

    /// A policy document with a bad expression: E013 at the value's line and column, naming
    /// the column inside the expression; the document is not loaded.
    #[test]
    fn a_bad_expression_is_a_diagnostic_where_it_is_written() {
        let text = "capability_policy:\n  object_storage.s3:\n    prod:\n      rules:\n        - name: ok\n          when: \"'pci' in intent.compliance\"\n        - name: bad\n          require: candidate.cost >\n---\noperations_policy:\n  prod:\n    rules:\n      - {name: who, when: \"candidate.kind == 'x'\"}\n";
        let parsed = crate::pack::parse_file("policy.yaml", text);
        let got: Vec<String> = parsed.diagnostics.iter().map(ToString::to_string).collect();
        expect![[r#"
            policy.yaml:8:20: error[E013]: `require` at column 18 of the expression: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}
              = expected: a CEL expression over intent, roles, candidate
              = hint: see docs/documents.md, "Policy rules"
            policy.yaml:13:27: error[E013]: `when` at column 1 of the expression: unknown variable `candidate`; here an expression may use intent, roles, cost
              = expected: a CEL expression over intent, roles, cost
              = hint: see docs/documents.md, "Policy rules""#]].assert_eq(&got.join("\n"));
        assert!(parsed.docs.is_empty());
    }

    #[test]
    fn expressions_compile_or_say_where() {
        check("'pci' in intent.compliance && 'sre' in roles", Scope::When, expect!["ok"]);
        check("candidate.attributes.encryption == true", Scope::Candidate, expect!["ok"]);
        check("cost > 100.0 && intent.criticality == 'high'", Scope::Operations, expect!["ok"]);
        check("intent.organization == ", Scope::When, expect!["1:25: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}"]);
        check(
            "candidate.provider == 'x'",
            Scope::When,
            expect!["1:1: unknown variable `candidate`; here an expression may use intent, roles"],
        );
        // Inputs that made earlier versions of the parser panic: errors, not panics.
        for bad in [".", "/", "1 +", "(", ")", "intent.", "[1,", "{'a':"] {
            assert!(compile(bad, Scope::When).is_err(), "{bad}");
        }
        check(
            "intent.name == 'a' &&\n  roles.size() > 0 && cost > 1.0",
            Scope::When,
            expect!["2:23: unknown variable `cost`; here an expression may use intent, roles"],
        );
        check(
            "cost > 1",
            Scope::Candidate,
            expect!["1:1: unknown variable `cost`; here an expression may use intent, roles, candidate"],
        );
    }
}
