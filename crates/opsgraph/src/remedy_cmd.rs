//! Remedies without an operation: `opsgraph diagnose FILE` (a `failure` document against its
//! pack's remedies) and `opsgraph pack test DIR` (every remedy's examples). Both match with
//! `opsgraph_core::pack::remedy`, the matcher the runtime's `diagnose` uses.

use std::io::Write;
use std::path::Path;

use anyhow::bail;
use opsgraph_core::model::{Document, Failure, PatchChange, PlanPatch};
use opsgraph_core::pack::remedy::{best_match, test_examples, Basis, Symptoms};
use opsgraph_core::pack::{Diagnostic, Pack};
use serde_json::{json, Value};

use crate::load::{self, Source};
use crate::render::Output;

/// Reads the one `failure` document of `file`.
fn failure_file(file: &str, err: &mut dyn Write) -> anyhow::Result<Option<Failure>> {
    let (docs, diags) = load::documents(&[Source::parse(file)]);
    crate::render::report(err, &diags)?;
    if diags.iter().any(Diagnostic::is_error) {
        return Ok(None);
    }
    let mut failures = docs.into_iter().filter_map(|d| match d.doc {
        Document::Failure(f) => Some(f),
        _ => None,
    });
    let Some(f) = failures.next() else { bail!("{file} holds no `failure` document") };
    if failures.next().is_some() {
        bail!("{file} holds several `failure` documents: diagnose one at a time");
    }
    Ok(Some(f))
}

/// `diagnose FILE`: 0 when a remedy applies, 1 when none does (or the file has problems).
pub fn diagnose_file(
    file: &str,
    packs: &[String],
    data_dir: &Path,
    output: Output,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let Some(failure) = failure_file(file, err)? else { return Ok(1) };
    let (loaded, diags) = crate::ops_cmd::load_packs(packs, data_dir, false)?;
    for d in diags.iter().filter(|d| d.is_error()) {
        writeln!(err, "{d}")?;
    }
    let pack = crate::pack_cmd::find(&loaded, &failure.pack)?;
    let job = failure.job.split('@').next().unwrap_or(&failure.job);
    let in_pack = pack.jobs.contains_key(job) || pack.templates.iter().any(|t| t.jobs.iter().any(|e| e.id() == job));
    if !in_pack {
        bail!("pack {} has no job `{job}`", pack.reference());
    }
    let failed: Vec<&str> = failure.evidence.iter().filter(|e| !e.passed).map(|e| e.check.as_str()).collect();
    let symptoms =
        Symptoms { job: &failure.job, output: &failure.output, exit_code: failure.exit_code, failed_evidence: &failed };
    let found = best_match(&pack.remedies, &symptoms);
    let value = match &found {
        Some(m) => {
            let findings = review(pack, job, &m.remedy.plan_patch);
            json!({
                "pack": pack.reference(),
                "job": failure.job,
                "remedy": m.remedy.id,
                "summary": m.remedy.diagnosis,
                "cause": format!("{} matches remedy {} of pack {}", failure.job, m.remedy.id, pack.manifest.id),
                "confidence": m.confidence,
                "evidence": m.basis.iter().map(|b| match b {
                    Basis::Output(hit) => format!("output: {hit}"),
                    Basis::Exit(c) => format!("exit:{c}"),
                    Basis::Evidence(c) => format!("evidence:{c}"),
                }).collect::<Vec<_>>(),
                "analyzer": "rules",
                "plan_patch": m.remedy.plan_patch,
                "patch_in_words": m.remedy.plan_patch.changes.iter().map(in_words).collect::<Vec<_>>(),
                "review": {
                    "scope": REVIEW_SCOPE,
                    "findings": findings,
                },
            })
        }
        None => json!({
            "pack": pack.reference(),
            "job": failure.job,
            "remedy": null,
            "summary": format!("no remedy applies: no remedy of pack {} matches this failure of {}", pack.manifest.id, failure.job),
            "confidence": 0.0,
            "analyzer": "rules",
            "plan_patch": null,
        }),
    };
    match output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?,
        Output::Yaml => write!(out, "{}", crate::render::to_yaml(&value, 0))?,
        _ => text(&value, out)?,
    }
    Ok(if found.is_some() { 0 } else { 1 })
}

const REVIEW_SCOPE: &str = "against the pack's job library and templates only: there is no plan here, so contracts, \
     order, cycles and parameters are checked when the patch is proposed for a real operation (`opsgraph patch`)";

fn text(v: &Value, out: &mut dyn Write) -> anyhow::Result<()> {
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    if v["remedy"].is_null() {
        writeln!(out, "Diagnosis of {} (pack {}, rules analyzer)", s("job"), s("pack"))?;
        writeln!(out, "  {}", s("summary"))?;
        writeln!(out, "  nothing is proposed")?;
        return Ok(());
    }
    let conf = v["confidence"].as_f64().unwrap_or_default();
    writeln!(out, "Diagnosis of {} (pack {}, rules analyzer, confidence {conf:.1})", s("job"), s("pack"))?;
    writeln!(out, "  {}", s("summary"))?;
    writeln!(out, "  cause: {}", s("cause"))?;
    let on: Vec<&str> = v["evidence"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    writeln!(out, "  based on: {}", on.join("; "))?;
    writeln!(out, "  remedy: {}", s("remedy"))?;
    let patch = &v["plan_patch"];
    let approval = match patch["approval"]["required"].as_bool() {
        Some(true) => {
            let roles: Vec<&str> =
                patch["approval"]["roles"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            format!(
                "approval required: {}",
                if roles.is_empty() { "sre, platform_admin".into() } else { roles.join(", ") }
            )
        }
        _ => "no approval required".into(),
    };
    writeln!(out, "Patch ({approval}):")?;
    if let Some(reason) = patch["reason"].as_str() {
        writeln!(out, "  {reason}")?;
    }
    for change in v["patch_in_words"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        writeln!(out, "  - {change}")?;
    }
    writeln!(out, "Review ({REVIEW_SCOPE}):")?;
    let findings: Vec<&str> =
        v["review"]["findings"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if findings.is_empty() {
        writeln!(out, "  ok: every job the patch names exists in pack {}", s("pack"))?;
    }
    for f in findings {
        writeln!(out, "  finding: {f}")?;
    }
    Ok(())
}

/// One change, in words.
fn in_words(change: &PatchChange) -> String {
    match change {
        PatchChange::InsertAfter { anchor, jobs } => format!("insert {} after {anchor}", jobs.join(", ")),
        PatchChange::InsertBefore { anchor, jobs } => format!("insert {} before {anchor}", jobs.join(", ")),
        PatchChange::Retry { job, with_descendants: false } => format!("retry {job}"),
        PatchChange::Retry { job, with_descendants: true } => format!("retry {job} and the jobs after it"),
        PatchChange::Skip { job, reason } => format!("skip {job}: {reason}"),
        PatchChange::SetParameters { job, parameters } => {
            let values: Vec<String> = parameters.iter().map(|(k, v)| format!("{k}={v}")).collect();
            match job {
                Some(j) => format!("set {} on {j}", values.join(", ")),
                None => format!("set {} on the plan", values.join(", ")),
            }
        }
        PatchChange::AddGate(g) => {
            let kind = serde_json::to_value(g.type_).ok().and_then(|v| v.as_str().map(str::to_string));
            let before = if g.before.is_empty() { "the next jobs".into() } else { g.before.join(", ") };
            let roles =
                if g.required_roles.is_empty() { String::new() } else { format!(" ({})", g.required_roles.join(", ")) };
            format!(
                "wait at gate {} ({}) before {before} for a person{roles}: {}",
                g.id,
                kind.unwrap_or_default(),
                g.reason
            )
        }
    }
}

/// The review possible without a plan: every job the patch names exists in the pack, in a
/// template together with the failed job (inserted jobs: in the job library).
fn review(pack: &Pack, failed: &str, patch: &PlanPatch) -> Vec<String> {
    let mut findings = Vec::new();
    let templates: Vec<&str> =
        pack.templates.iter().filter(|t| t.jobs.iter().any(|e| e.id() == failed)).map(|t| t.id.as_str()).collect();
    let planned = |id: &str| {
        pack.templates.iter().any(|t| templates.contains(&t.id.as_str()) && t.jobs.iter().any(|e| e.id() == id))
    };
    for (i, change) in patch.changes.iter().enumerate() {
        let (named, inserted): (Vec<&str>, Vec<&str>) = match change {
            PatchChange::InsertAfter { anchor, jobs } | PatchChange::InsertBefore { anchor, jobs } => {
                (vec![anchor.as_str()], jobs.iter().map(String::as_str).collect())
            }
            PatchChange::Retry { job, .. } | PatchChange::Skip { job, .. } => (vec![job.as_str()], vec![]),
            PatchChange::SetParameters { job, .. } => (job.iter().map(String::as_str).collect(), vec![]),
            PatchChange::AddGate(g) => (g.before.iter().map(String::as_str).collect(), vec![]),
        };
        for id in named {
            if !planned(id) {
                findings.push(format!(
                    "change {}: `{id}` is not a job of a template that runs {failed} ({})",
                    i + 1,
                    if templates.is_empty() { "no template runs it".to_string() } else { templates.join(", ") }
                ));
            }
        }
        for id in inserted {
            if !pack.jobs.contains_key(id) {
                findings.push(format!("change {}: inserts `{id}`, which is not in the pack's job library", i + 1));
            }
        }
    }
    findings
}

/// `pack test DIR...`: every remedy's examples through the matcher; 1 on any failure.
pub fn pack_test(dirs: &[String], out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    // `pack test packs/*` names the README beside the packs: files are not packs, said and skipped.
    let mut sources = Vec::new();
    for d in dirs {
        if Path::new(d).is_file() {
            writeln!(err, "skipped {d}: not a pack directory")?;
        } else {
            sources.push(Source::parse(d));
        }
    }
    let (packs, diags) = load::packs(&sources);
    crate::render::report(err, &diags)?;
    if diags.iter().any(Diagnostic::is_error) {
        return Ok(1);
    }
    if packs.is_empty() {
        bail!("no pack found in {}", dirs.join(", "));
    }
    let mut code = 0;
    for p in &packs {
        let (failures, ran) = test_examples(&p.remedies);
        let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        if failures.is_empty() {
            writeln!(
                out,
                "ok: pack {}: {}, {} (example x job)",
                p.reference(),
                plural(p.remedies.len(), "remedy").replace("remedys", "remedies"),
                plural(ran, "check")
            )?;
            continue;
        }
        code = 1;
        writeln!(
            out,
            "FAILED: pack {}: {} of {}",
            p.reference(),
            plural(failures.len(), "failure"),
            plural(ran, "check")
        )?;
        for f in &failures {
            writeln!(out, "  remedy {} {} (job {}): {}", f.remedy, f.example, f.job, f.problem)?;
            if !f.output.is_empty() {
                for line in f.output.lines() {
                    writeln!(out, "    | {line}")?;
                }
            }
        }
    }
    Ok(code)
}

/// Whether `diagnose ARG` names a failure file rather than an operation.
pub fn is_failure_file(arg: &str) -> bool {
    Path::new(arg).is_file()
}
