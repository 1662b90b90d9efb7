//! The one renderer of the CLI: tables, YAML, the live view of a run and how a run ended. Local
//! and remote commands print through it, from the API's documents, so their output is the same.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};

use opsgraph_api::OperationView;
use opsgraph_core::pack::Diagnostic;
use opsgraph_core::plan::rollout::WaveProgress;
use opsgraph_store::TimelineEntry;
use serde_json::Value;

/// How a command prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A preview a person reads.
    Text,
    /// JSON for machines.
    Json,
    /// YAML for machines and people.
    Yaml,
    /// Graphviz (plan only).
    Dot,
}

pub fn stage_of(plan: &opsgraph_core::plan::Plan) -> BTreeMap<String, String> {
    let names: BTreeMap<&str, &str> = plan.stages.iter().map(|s| (s.id.as_str(), s.name.as_str())).collect();
    plan.jobs.iter().map(|j| (j.id.clone(), names.get(j.stage.as_str()).unwrap_or(&"").to_string())).collect()
}

/// The live view: one line per committed step, jobs prefixed by their stage; after each
/// instance of a fleet rollout, where its wave stands (`wave 2/4: 12/50 done, 1 failed, budget 1
/// left`).
pub fn live<'a>(
    out: &'a mut (dyn Write + Send),
    stages: BTreeMap<String, String>,
) -> impl FnMut(&TimelineEntry) + Send + 'a {
    move |e: &TimelineEntry| {
        let time = e.at.get(11..19).unwrap_or(&e.at);
        let job = e.data.get("job").and_then(Value::as_str).unwrap_or("");
        let stage = stages.get(job).map_or("", String::as_str);
        let line = match (&e.from, &e.to, e.event.as_str()) {
            (Some(from), Some(to), _) => format!("{time}  operation {from} -> {to}: {}", e.reason),
            (_, _, "job_started") => format!("{time}  {stage:<18} started   {}", e.reason),
            (_, _, "job_succeeded" | "job_already_satisfied" | "job_recovered") => {
                format!("{time}  {stage:<18} done      {}", e.reason)
            }
            (_, _, "job_failed" | "job_outcome_unknown") => format!("{time}  {stage:<18} FAILED    {}", e.reason),
            (_, _, "job_retry") => format!("{time}  {stage:<18} retry     {}", e.reason),
            (_, _, "job_cancelled") => format!("{time}  {stage:<18} cancelled {}", e.reason),
            (_, _, other) => format!("{time}  {other}: {}", e.reason),
        };
        // A fleet rollout's instance, or wave: where its wave stands, and the budget left.
        let progress = e.data.get("progress").cloned().map(serde_json::from_value::<WaveProgress>);
        match progress {
            Some(Ok(p)) if e.event.starts_with("job_") => {
                let _ = writeln!(out, "{line}\n{time}  {stage:<18} {} {p}", p.job);
            }
            _ => {
                let _ = writeln!(out, "{line}");
            }
        }
    }
}

/// The end of a run, from the operation document the API serves (and its resource's document):
/// the outcome, what the evidence proves, the resource, what to do next. The same text whether
/// the CLI ran the operation itself or a server did.
pub fn print_finish(view: &OperationView, resource: Option<&Value>, out: &mut dyn Write) -> anyhow::Result<u8> {
    use opsgraph_core::model::OperationStateKind as K;
    let id = view.summary.id.as_str();
    writeln!(out, "\nOperation {id}: {}", view.summary.detail)?;
    let evidence = &view.evidence;
    if !evidence.is_empty() {
        let passed = evidence.iter().filter(|e| e.passed).count();
        writeln!(out, "Evidence: {passed} of {} checks passed", evidence.len())?;
        // What they prove: each capability, with its checks and the resources they ran on.
        let mut proves: BTreeMap<&str, (usize, BTreeSet<&str>)> = BTreeMap::new();
        for e in evidence.iter().filter(|e| e.passed) {
            if let Some(cap) = e.capability.as_deref() {
                let entry = proves.entry(cap).or_default();
                entry.0 += 1;
                entry.1.extend(e.resource.as_deref());
            }
        }
        for (cap, (checks, resources)) in &proves {
            let on = match resources.len() {
                0 => String::new(),
                1 => format!(" on {}", resources.iter().next().copied().unwrap_or_default()),
                n => format!(" on {n} resources"),
            };
            writeln!(out, "  proves {cap}: {checks} check{}{on}", if *checks == 1 { "" } else { "s" })?;
        }
        for e in evidence.iter().filter(|e| !e.passed) {
            writeln!(out, "  FAILED {} on {}: expected {}, observed {}", e.check, e.job, e.expected, e.observed)?;
        }
    }
    if let Some(doc) = resource {
        writeln!(
            out,
            "Resource {}: status {}, health {}; {}",
            doc["id"].as_str().unwrap_or_default(),
            doc["status"].as_str().unwrap_or("unknown"),
            doc["health"].as_str().unwrap_or("unknown"),
            doc["observed_state"].as_str().unwrap_or("")
        )?;
    }
    match view.summary.state {
        K::WaitingForApproval | K::WaitingForInput => {
            for g in view.gates.iter().filter(|g| g.answer.is_none() && view.waiting_at.contains(&g.id)) {
                writeln!(
                    out,
                    "Gate {} ({}): {}\n  options: {}\n  answered by: {}",
                    g.id,
                    g.gate_type,
                    g.reason,
                    g.options.join(" | "),
                    g.required_roles.join(" or ")
                )?;
                writeln!(
                    out,
                    "  opsgraph gate answer {} --operation {id} --option '{}' --as USER",
                    g.id,
                    g.options.first().cloned().unwrap_or_default()
                )?;
            }
        }
        K::Paused => writeln!(out, "Resume with: opsgraph resume {id}")?,
        K::Failed => writeln!(
            out,
            "Inspect with: opsgraph describe operation {id}; opsgraph logs {id}; retry with: opsgraph retry {id}"
        )?,
        _ => {}
    }
    Ok(opsgraph_api::views::exit_code(view.summary.state))
}

pub fn print(value: &Value, output: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    match output {
        "json" => writeln!(out, "{}", serde_json::to_string_pretty(value)?)?,
        "yaml" => write!(out, "{}", to_yaml(value, 0))?,
        _ => {
            let rows = value.as_array().cloned().unwrap_or_else(|| vec![value.clone()]);
            let Some(first) = rows.first().and_then(Value::as_object) else {
                writeln!(out, "(none)")?;
                return Ok(());
            };
            let cols: Vec<&String> = first.keys().collect();
            let cell = |v: &Value| match v {
                Value::String(s) => s.clone(),
                Value::Null => "-".into(),
                other => other.to_string(),
            };
            let widths: Vec<usize> = cols
                .iter()
                .map(|c| {
                    rows.iter().map(|r| cell(&r[c.as_str()]).chars().count()).max().unwrap_or(0).max(c.len()).min(60)
                })
                .collect();
            let header: Vec<String> =
                cols.iter().zip(&widths).map(|(c, w)| format!("{:<w$}", c.to_uppercase(), w = w)).collect();
            writeln!(out, "{}", header.join("  ").trim_end())?;
            for r in &rows {
                let line: Vec<String> = cols
                    .iter()
                    .zip(&widths)
                    .map(|(c, w)| {
                        let text: String = cell(&r[c.as_str()]).chars().take(*w).collect();
                        format!("{text:<w$}", w = w)
                    })
                    .collect();
                writeln!(out, "{}", line.join("  ").trim_end())?;
            }
        }
    }
    Ok(())
}

/// A small YAML emitter for output (block style; strings quoted when YAML would misread them).
pub fn to_yaml(v: &Value, indent: usize) -> String {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) if m.is_empty() => "{}\n".into(),
        Value::Array(a) if a.is_empty() => "[]\n".into(),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::Object(x) if !x.is_empty() => {
                    format!("{pad}{}:\n{}", scalar(&Value::String(k.clone())), to_yaml(v, indent + 2))
                }
                Value::Array(x) if !x.is_empty() => {
                    format!("{pad}{}:\n{}", scalar(&Value::String(k.clone())), to_yaml(v, indent))
                }
                _ => format!("{pad}{}: {}", scalar(&Value::String(k.clone())), to_yaml(v, indent + 2).trim_start()),
            })
            .collect(),
        Value::Array(a) => a
            .iter()
            .map(|v| {
                let inner = to_yaml(v, indent + 2);
                format!("{pad}- {}", inner.trim_start())
            })
            .collect(),
        other => format!("{}\n", scalar(other)),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => {
            let plain = !s.is_empty()
                && !s.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@` ".contains(c))
                && !s.contains(": ")
                && !s.contains(" #")
                && !s.ends_with(' ')
                && !s.contains('\n')
                && !matches!(s.as_str(), "true" | "false" | "null" | "~" | "yes" | "no")
                && s.parse::<f64>().is_err();
            if plain {
                s.clone()
            } else {
                serde_json::to_string(s).unwrap_or_default()
            }
        }
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// Prints diagnostics and a summary line.
pub fn report(err: &mut dyn Write, diags: &[Diagnostic]) -> std::io::Result<()> {
    for d in diags {
        writeln!(err, "{d}")?;
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let warnings = diags.len() - errors;
    if errors + warnings > 0 {
        let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        writeln!(err, "{}, {}", plural(errors, "error"), plural(warnings, "warning"))?;
    }
    Ok(())
}

/// A document as `describe` prints it: pretty JSON for `json`, else YAML.
pub fn document(value: &Value, output: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    match output {
        "json" => writeln!(out, "{}", serde_json::to_string_pretty(value)?)?,
        _ => write!(out, "{}", to_yaml(value, 0))?,
    }
    Ok(())
}

/// A reviewer's findings, one a line, the severity as the API spells it (`error`, `warning`).
pub fn print_findings(findings: &[opsgraph_core::plan::patch::Finding], out: &mut dyn Write) -> anyhow::Result<()> {
    for f in findings {
        let severity = serde_json::to_value(f.severity)?;
        writeln!(out, "{} {}: {}", severity.as_str().unwrap_or_default(), f.code, f.message)?;
    }
    Ok(())
}

/// A manual fix as recorded and verified: its checks, and `still failed: …` (exit 1) when they
/// did not pass.
pub fn print_intervention(
    reply: &opsgraph_api::InterventionReply,
    note: &str,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    writeln!(out, "intervention {} on {}: {note}", reply.intervention, reply.jobs.join(", "))?;
    for c in &reply.checks {
        let word = if c.passed { "pass" } else { "FAIL" };
        writeln!(out, "  {word}  {}  {}  expected {}, observed {}", c.job, c.check, c.expected, c.observed)?;
    }
    if reply.state == opsgraph_core::model::OperationStateKind::Failed {
        writeln!(out, "still {}", reply.detail)?;
        return Ok(1);
    }
    Ok(0)
}

/// API tokens as `token list` prints them (never the token itself: only its hash is kept).
pub fn print_tokens(tokens: &[opsgraph_api::TokenView], out: &mut dyn Write) -> anyhow::Result<u8> {
    if tokens.is_empty() {
        writeln!(out, "(no tokens)")?;
        return Ok(0);
    }
    writeln!(out, "{:<18} {:<20} {:<28} {:<24} STATUS", "ID", "NAME", "ROLES", "CREATED")?;
    for t in tokens {
        let status = t.revoked_at.as_deref().map_or("active".to_string(), |at| format!("revoked {at}"));
        writeln!(out, "{:<18} {:<20} {:<28} {:<24} {status}", t.id, t.name, t.roles.join(","), t.created_at)?;
    }
    Ok(0)
}

/// Asks `question` on `out` and reads the answer from `input`: true for `yes`; anything else
/// says `declined` on `err` and is false.
pub fn confirmed(
    question: &str,
    declined: &str,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> std::io::Result<bool> {
    write!(out, "\n{question} Type `yes` to go on: ")?;
    out.flush()?;
    let mut answer = String::new();
    input.read_line(&mut answer)?;
    if answer.trim() == "yes" {
        return Ok(true);
    }
    writeln!(err, "{declined}")?;
    Ok(false)
}

/// The exit of every `lab fleet` command, `light` included: its code, or the error with its
/// chain of causes on stderr and 1 (2 when not root).
pub fn fleet_exit(result: Result<u8, opsgraph_fleet::Error>, err: &mut dyn Write) -> anyhow::Result<u8> {
    match result {
        Ok(code) => Ok(code),
        Err(e) => {
            writeln!(err, "error[{}]: {e}", e.code())?;
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                writeln!(err, "  caused by: {s}")?;
                source = s.source();
            }
            Ok(if matches!(e, opsgraph_fleet::Error::NotRoot) { 2 } else { 1 })
        }
    }
}
