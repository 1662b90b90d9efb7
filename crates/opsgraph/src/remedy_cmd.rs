//! Remedies without an operation: `opsgraph diagnose FILE` (a `failure` document against its
//! pack's remedies) and `opsgraph pack test DIR` (every remedy's examples). Both match with
//! `opsgraph_core::pack::remedy`, the matcher the runtime's `diagnose` uses.

use std::io::Write;
use std::path::Path;

use anyhow::bail;
use opsgraph_core::model::{Document, Failure, PatchChange, PlanPatch};
use opsgraph_core::pack::remedy::{best_match, job_facts, test_examples, Basis, Symptoms};
use opsgraph_core::pack::{Diagnostic, Pack};
use serde_json::{json, Value};

use crate::load::{self, Source};
use crate::render::Output;

/// Why a `diagnose FILE` could not diagnose: bad input (exit 2), said as JSON too.
struct BadInput {
    /// A stable code: `missing_file`, `invalid_document`, `no_failure`, `several_failures`,
    /// `unknown_pack`.
    code: &'static str,
    message: String,
    diagnostics: Vec<String>,
}

impl BadInput {
    fn new(code: &'static str, message: impl Into<String>) -> BadInput {
        BadInput { code, message: message.into(), diagnostics: Vec::new() }
    }
}

/// Reads the one `failure` document of `file`.
fn failure_file(file: &str) -> Result<Failure, BadInput> {
    if !Path::new(file).is_file() {
        return Err(BadInput::new("missing_file", format!("{file}: no such file")));
    }
    let (docs, diags) = load::documents(&[Source::parse(file)]);
    if diags.iter().any(Diagnostic::is_error) {
        return Err(BadInput {
            code: "invalid_document",
            message: format!("{file} has problems"),
            diagnostics: diags.iter().map(ToString::to_string).collect(),
        });
    }
    let mut failures = docs.into_iter().filter_map(|d| match d.doc {
        Document::Failure(f) => Some(f),
        _ => None,
    });
    let Some(f) = failures.next() else {
        return Err(BadInput::new("no_failure", format!("{file} holds no `failure` document")));
    };
    if failures.next().is_some() {
        return Err(BadInput::new(
            "several_failures",
            format!("{file} holds several `failure` documents: diagnose one at a time"),
        ));
    }
    Ok(f)
}

/// `diagnose FILE`: 0 when a remedy applies (with or without a patch), 1 when none does, 2 on
/// bad input (a missing file, a document with problems, an unknown pack). With `-o json` every
/// outcome is one JSON object on standard output (`opsgraph schema diagnosis`).
pub fn diagnose_file(
    file: &str,
    packs: &[String],
    data_dir: &Path,
    output: Output,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let (value, code) = match diagnosis_of(file, packs, data_dir) {
        Ok(v) => {
            let code = if v["outcome"] == "diagnosed" { 0 } else { 1 };
            (v, code)
        }
        Err(bad) => {
            let v = json!({
                "outcome": "bad_input",
                "file": file,
                "error": {"code": bad.code, "message": bad.message, "diagnostics": bad.diagnostics},
            });
            if !matches!(output, Output::Json | Output::Yaml) {
                for d in &bad.diagnostics {
                    writeln!(err, "{d}")?;
                }
                writeln!(err, "error: {}", bad.message)?;
                return Ok(2);
            }
            (v, 2)
        }
    };
    match output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?,
        Output::Yaml => write!(out, "{}", crate::render::to_yaml(&value, 0))?,
        _ => text(&value, out)?,
    }
    Ok(code)
}

/// The diagnosis of the failure in `file`, as the JSON `diagnose -o json` prints.
fn diagnosis_of(file: &str, packs: &[String], data_dir: &Path) -> Result<Value, BadInput> {
    let failure = failure_file(file)?;
    let (loaded, _) = crate::ops_cmd::load_packs(packs, data_dir, false)
        .map_err(|e| BadInput::new("unknown_pack", format!("the packs could not be loaded: {e:#}")))?;
    let pack =
        crate::pack_cmd::find(&loaded, &failure.pack).map_err(|e| BadInput::new("unknown_pack", format!("{e:#}")))?;
    let job = failure.job.split('@').next().unwrap_or(&failure.job);
    let in_pack = pack.jobs.contains_key(job) || pack.templates.iter().any(|t| t.jobs.iter().any(|e| e.id() == job));
    let mut notes = Vec::new();
    if !in_pack {
        notes.push(format!(
            "pack {} has no job `{job}`: analysed against the remedy library and the pack's remedies that do not name jobs",
            pack.reference()
        ));
    }
    let failed: Vec<&str> = failure.evidence.iter().filter(|e| !e.passed).map(|e| e.check.as_str()).collect();
    let (job_type, provides) = job_facts(pack, job);
    let symptoms = Symptoms {
        job: &failure.job,
        pack: &pack.manifest.id,
        job_type,
        provides: &provides,
        output: &failure.output,
        exit_code: failure.exit_code,
        failed_evidence: &failed,
    };
    let Some(m) = best_match(&pack.remedies, &symptoms) else {
        return Ok(json!({
            "outcome": "no_remedy",
            "pack": pack.reference(),
            "job": failure.job,
            "remedy": null,
            "summary": format!("no remedy applies: no remedy of pack {} or of the remedy library matches this failure of {}", pack.manifest.id, failure.job),
            "cause": "unknown: no remedy recognises this failure",
            "confidence": 0.0,
            "evidence": [],
            "analyzer": "rules",
            "plan_patch": null,
            "notes": notes,
        }));
    };
    let mut patch = m.patch(&failure.job);
    if patch.is_none() {
        notes.push("this remedy diagnoses only: no machine should guess the fix, so nothing is proposed".into());
    } else if !in_pack {
        patch = None;
        notes.push(format!("no patch: pack {} has no job `{job}` for a patch to change", pack.reference()));
    }
    Ok(json!({
        "outcome": "diagnosed",
        "pack": pack.reference(),
        "job": failure.job,
        "remedy": m.remedy.id,
        "source": opsgraph_api::RemedySource::of(m.from_library()).as_str(),
        "summary": m.diagnosis(),
        "cause": m.cause(),
        "confidence": m.confidence,
        "evidence": m.basis.iter().map(|b| match b {
            Basis::Output(line) => format!("output: {line}"),
            Basis::Exit(c) => format!("exit:{c}"),
            Basis::Evidence(c) => format!("evidence:{c}"),
        }).collect::<Vec<_>>(),
        "analyzer": "rules",
        "plan_patch": patch,
        "patch_in_words": patch.iter().flat_map(|p| p.changes.iter().map(in_words)).collect::<Vec<_>>(),
        "review": {
            "scope": REVIEW_SCOPE,
            "findings": patch.as_ref().map(|p| review(pack, job, p)).unwrap_or_default(),
        },
        "notes": notes,
    }))
}

/// The JSON Schema of what `diagnose -o json` prints (`opsgraph schema diagnosis`): for a
/// failure file one object, a diagnosis or a bad input; for an operation a list of diagnoses.
pub fn diagnosis_schema() -> Value {
    let strings = json!({"type": "array", "items": {"type": "string"}});
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Diagnosis",
        "description": "What `opsgraph diagnose -o json` prints: for a failure file, one diagnosis (exit 0: a remedy applies; 1: none does) or a bad input (exit 2); for an operation, a list of diagnoses, one per failed job.",
        "anyOf": [
            {"$ref": "#/$defs/diagnosis"},
            {"$ref": "#/$defs/bad_input"},
            {"type": "array", "items": {"$ref": "#/$defs/diagnosis"}},
        ],
        "$defs": {
            "diagnosis": {
                "type": "object",
                "additionalProperties": false,
                "required": ["job", "summary", "cause", "confidence", "remedy", "analyzer"],
                "properties": {
                    "outcome": {"enum": ["diagnosed", "no_remedy"], "description": "a failure file's: whether a remedy applies"},
                    "operation": {"type": "string", "description": "an operation's diagnosis: the operation"},
                    "pack": {"type": "string", "description": "a failure file's pack, `id@version`"},
                    "job": {"type": "string", "description": "the failed job (or instance)"},
                    "remedy": {"type": ["string", "null"], "description": "the remedy that matched, or null"},
                    "source": {"enum": ["library", "pack"], "description": "where the remedy comes from: the remedy library that ships with Opsgraph, or the pack (absent without a remedy)"},
                    "summary": {"type": "string", "minLength": 1, "description": "what went wrong and what a person does"},
                    "cause": {"type": "string", "minLength": 1, "description": "the cause, in one sentence"},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    "evidence": strings.clone(),
                    "analyzer": {"type": "string", "description": "`rules`, or `ai` (an operation's diagnosis by the AI analyzer)"},
                    "plan_patch": {"type": ["object", "null"], "description": "the proposed patch (`opsgraph schema plan_patch`); null: nothing is proposed"},
                    "patch": {"type": ["object", "null"], "description": "an operation's diagnosis: the proposed patch"},
                    "patch_in_words": strings.clone(),
                    "review": {
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {"scope": {"type": "string"}, "findings": strings.clone()},
                    },
                    "notes": strings.clone(),
                },
            },
            "bad_input": {
                "type": "object",
                "additionalProperties": false,
                "required": ["outcome", "error"],
                "properties": {
                    "outcome": {"const": "bad_input"},
                    "file": {"type": "string"},
                    "error": {
                        "type": "object",
                        "additionalProperties": false,
                        "required": ["code", "message"],
                        "properties": {
                            "code": {"enum": ["missing_file", "invalid_document", "no_failure", "several_failures", "unknown_pack", "bad_arguments"]},
                            "message": {"type": "string"},
                            "diagnostics": strings,
                        },
                    },
                },
            },
        },
    })
}

const REVIEW_SCOPE: &str = "against the pack's job library and templates only: there is no plan here, so contracts, \
     order, cycles and parameters are checked when the patch is proposed for a real operation (`opsgraph patch`)";

fn text(v: &Value, out: &mut dyn Write) -> anyhow::Result<()> {
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    let notes: Vec<&str> = v["notes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if v["remedy"].is_null() {
        writeln!(out, "Diagnosis of {} (pack {}, rules analyzer)", s("job"), s("pack"))?;
        writeln!(out, "  {}", s("summary"))?;
        for n in &notes {
            writeln!(out, "  note: {n}")?;
        }
        writeln!(out, "  nothing is proposed")?;
        return Ok(());
    }
    let conf = v["confidence"].as_f64().unwrap_or_default();
    writeln!(out, "Diagnosis of {} (pack {}, rules analyzer, confidence {conf:.1})", s("job"), s("pack"))?;
    writeln!(out, "  cause: {}", s("cause"))?;
    writeln!(out, "  {}", s("summary"))?;
    let on: Vec<&str> = v["evidence"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    writeln!(out, "  based on: {}", on.join("; "))?;
    let from = match v["source"].as_str() {
        Some("library") => "library".to_string(),
        _ => format!("pack {}", s("pack").split('@').next().unwrap_or_default()),
    };
    writeln!(out, "  remedy: {} ({from})", s("remedy"))?;
    for n in &notes {
        writeln!(out, "  note: {n}")?;
    }
    let patch = &v["plan_patch"];
    if patch.is_null() {
        writeln!(out, "No patch: a person decides.")?;
        return Ok(());
    }
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
        let (failures, ran) = test_examples(&p.manifest.id, &p.remedies);
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
/// (an existing file, or a path that looks like one: a missing file is said to be missing, not
/// taken for an operation id).
pub fn is_failure_file(arg: &str) -> bool {
    let path = Path::new(arg);
    path.is_file()
        || arg.contains('/')
        || path.extension().is_some_and(|e| ["yaml", "yml", "json"].contains(&e.to_string_lossy().as_ref()))
}
