//! Rules within one document that span several fields (which a shape alone cannot say).

use crate::pack::diag::{Code, Diagnostic};
use crate::pack::expr::{self, Scope};
use crate::pack::yaml::{Node, NodeKind};

pub(crate) fn check(kind: &str, body: &Node, diags: &mut Vec<Diagnostic>) {
    match kind {
        "evidence" => match &body.kind {
            NodeKind::Seq(items) => items.iter().for_each(|it| evidence(it, diags)),
            _ => evidence(body, diags),
        },
        "plan_patch" => patch(body, diags),
        "remedy" => {
            if let Some(p) = body.get("plan_patch") {
                patch(p, diags)
            }
        }
        "capability_policy" => policy(body, diags),
        "operations_policy" => operations(body, diags),
        "plan_template" => template(body, diags),
        "job" => job(body, diags),
        "intent" => {}
        _ => {}
    }
}

fn evidence(check: &Node, diags: &mut Vec<Diagnostic>) {
    let Some(source) = check.get("source").and_then(Node::as_str) else {
        return;
    };
    let needs: &[&str] = match source {
        "command" | "systemd" => &["command"],
        "http" => &["url"],
        "tcp" => &["host", "port"],
        "file" => &["path"],
        _ => &[],
    };
    for key in needs {
        if check.get(key).is_none() {
            diags.push(
                Diagnostic::error(check.pos, Code::MissingKey, format!("a `{source}` evidence check needs `{key}`"))
                    .expected(format!("`{key}` beside `source: {source}`")),
            );
        }
    }
    // A capture finds its value in text: tcp checks have none. Its first group is the value.
    if let Some(NodeKind::Map(entries)) = check.get("capture").map(|n| &n.kind) {
        for (name, pattern) in entries {
            let Some(text) = pattern.as_str() else { continue };
            let problem = match regex::Regex::new(text) {
                Err(e) => Some(format!("capture `{}`: invalid regular expression: {e}", name.as_str().unwrap_or("?"))),
                Ok(re) if re.captures_len() < 2 => Some(format!(
                    "capture `{}` has no group: its value is the first `(…)`",
                    name.as_str().unwrap_or("?")
                )),
                Ok(_) if source == "tcp" => Some("a `tcp` check has no output to capture from".to_string()),
                Ok(_) => None,
            };
            if let Some(problem) = problem {
                diags.push(Diagnostic::error(pattern.pos, Code::BadValue, problem));
            }
        }
    }
    for (key, only) in [("url", "http"), ("expected_status", "http"), ("port", "tcp"), ("host", "tcp")] {
        if let Some(n) = check.get(key) {
            if source != only {
                diags.push(Diagnostic::error(
                    n.pos,
                    Code::BadValue,
                    format!("`{key}` belongs to `source: {only}` checks, not `{source}`"),
                ));
            }
        }
    }
}

fn patch(body: &Node, diags: &mut Vec<Diagnostic>) {
    let Some(NodeKind::Seq(changes)) = body.get("changes").map(|n| &n.kind) else {
        return;
    };
    for change in changes {
        let insert = change.get("insert_after").is_some() || change.get("insert_before").is_some();
        match (insert, change.get("jobs")) {
            (true, None) => diags.push(
                Diagnostic::error(change.pos, Code::MissingKey, "an insert needs `jobs`")
                    .expected("`jobs: [job-id, ...]` beside `insert_after` or `insert_before`"),
            ),
            (true, Some(Node { kind: NodeKind::Seq(items), pos })) if items.is_empty() => {
                diags.push(Diagnostic::error(*pos, Code::BadValue, "an insert with no jobs changes nothing"))
            }
            (false, Some(jobs)) => diags.push(Diagnostic::error(
                jobs.pos,
                Code::UnknownKey,
                "`jobs` goes only with `insert_after` or `insert_before`",
            )),
            _ => {}
        }
    }
}

fn policy(body: &Node, diags: &mut Vec<Diagnostic>) {
    let NodeKind::Map(caps) = &body.kind else {
        return;
    };
    for (_, envs) in caps {
        let NodeKind::Map(envs) = &envs.kind else {
            continue;
        };
        for (env, rule) in envs {
            for r in rules(rule) {
                expr::check(r, "when", Scope::When, diags);
                expr::check(r, "require", Scope::Candidate, diags);
            }
            let allowed: Option<Vec<&str>> = match rule.get("allowed_providers").map(|n| &n.kind) {
                Some(NodeKind::Seq(items)) => Some(items.iter().filter_map(Node::as_str).collect()),
                _ => None,
            };
            if let (Some(allowed), Some(default)) = (allowed, rule.get("default_provider")) {
                let d = default.as_str().unwrap_or_default();
                if !allowed.contains(&d) {
                    diags.push(
                        Diagnostic::error(
                            default.pos,
                            Code::BadValue,
                            format!(
                                "default provider `{d}` is not among the allowed providers of {}",
                                env.as_str().unwrap_or_default()
                            ),
                        )
                        .expected(format!("one of {}", allowed.join(", "))),
                    );
                }
            }
        }
    }
}

/// The entries of a policy's `rules:`.
fn rules(policy: &Node) -> &[Node] {
    match policy.get("rules").map(|n| &n.kind) {
        Some(NodeKind::Seq(items)) => items,
        _ => &[],
    }
}

fn operations(body: &Node, diags: &mut Vec<Diagnostic>) {
    let NodeKind::Map(envs) = &body.kind else {
        return;
    };
    for (_, policy) in envs {
        for r in rules(policy) {
            expr::check(r, "when", Scope::Operations, diags);
        }
    }
}

fn template(body: &Node, diags: &mut Vec<Diagnostic>) {
    crate::pack::refusals::check(body, diags);
    for from in crate::pack::refusals::scope_sources(body) {
        let text = from.as_str().unwrap_or_default();
        let ok = text.strip_prefix("targets.").is_some_and(crate::model::is_id);
        if !ok {
            diags.push(
                Diagnostic::error(from.pos, Code::BadValue, format!("unknown scope source `{text}`"))
                    .expected("`targets.<name>`: the intent's targets of that name"),
            );
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    if let Some(NodeKind::Seq(stages)) = body.get("stages").map(|n| &n.kind) {
        for stage in stages {
            if let Some(id) = stage.get("id") {
                let id_text = id.as_str().unwrap_or_default();
                if seen.contains(&id_text) {
                    diags.push(Diagnostic::error(
                        id.pos,
                        Code::Duplicate,
                        format!("stage `{id_text}` is declared twice"),
                    ));
                }
                seen.push(id_text);
            }
        }
    }
    if let Some(NodeKind::Seq(jobs)) = body.get("jobs").map(|n| &n.kind) {
        for j in jobs.iter().filter(|j| matches!(j.kind, NodeKind::Map(_))) {
            job(j, diags);
        }
    }
}

fn job(body: &Node, diags: &mut Vec<Diagnostic>) {
    let Some(run) = body.get("run") else { return };
    let has = |k: &str| run.get(k).is_some();
    let executor = run.get("executor").and_then(Node::as_str);
    let count = usize::from(has("command")) + usize::from(has("script")) + usize::from(has("url"));
    if count != 1 {
        diags.push(
            Diagnostic::error(run.pos, Code::MissingKey, "a run needs exactly one of `command`, `script`, `url`")
                .expected("`command: [argv...]`, `script: scripts/x.sh`, or `url:` with `executor: http`"),
        );
    }
    if has("url") && executor != Some("http") {
        diags.push(Diagnostic::error(run.pos, Code::BadValue, "`url` runs need `executor: http`"));
    }
}
