//! The one remedy matcher: a failed job's output, exit code and failed evidence against a pack's
//! remedies and then the remedy library's ([`super::library`]). The runtime's `diagnose`,
//! `opsgraph diagnose FILE` and `opsgraph pack test` all call [`best_match`], so they cannot
//! disagree. Patterns are case-insensitive; a match quotes the line it found and fills the
//! remedy's `{name}` placeholders from the pattern's named groups. Pure: no IO.

use crate::model::{AppliesTo, JobSelector, JobType, PatchChange, PlanPatch, Remedy, RemedyExample};
use crate::pack::Pack;

/// What is known about one failed job.
#[derive(Debug, Clone, Copy)]
pub struct Symptoms<'a> {
    /// The job id; an instance id (`job@resource`) is reduced to its job.
    pub job: &'a str,
    /// The pack the job ran from (its id).
    pub pack: &'a str,
    /// The job's type, when the pack knows the job.
    pub job_type: Option<JobType>,
    /// The capabilities the job provides, when the pack knows the job.
    pub provides: &'a [String],
    pub output: &'a str,
    pub exit_code: Option<i32>,
    /// The evidence checks that failed.
    pub failed_evidence: &'a [&'a str],
}

impl<'a> Symptoms<'a> {
    /// A failure of `job` with `output`, nothing else known.
    pub fn new(job: &'a str, output: &'a str) -> Symptoms<'a> {
        Symptoms { job, pack: "", job_type: None, provides: &[], output, exit_code: None, failed_evidence: &[] }
    }
}

/// The type and provided capabilities of `job` in `pack` (none when the pack does not know it).
pub fn job_facts(pack: &Pack, job: &str) -> (Option<JobType>, Vec<String>) {
    let job = job.split('@').next().unwrap_or(job);
    match pack.jobs.get(job) {
        Some(j) => (Some(j.type_), j.outputs.provides.capabilities.iter().map(|c| c.capability.clone()).collect()),
        None => (None, Vec::new()),
    }
}

/// One thing a match rests on.
#[derive(Debug, Clone, PartialEq)]
pub enum Basis {
    /// The line of the output in which an `output_matches` pattern matched.
    Output(String),
    Exit(i32),
    /// A failed evidence check the signature names.
    Evidence(String),
}

/// A remedy whose signature matched, what it rests on and how sure the match is.
#[derive(Debug, Clone)]
pub struct Match<'a> {
    pub remedy: &'a Remedy,
    pub basis: Vec<Basis>,
    /// 0 to 1: an output signature (0.9) is surer than failed evidence (0.7), which is surer than
    /// an exit code (0.6); the highest kind given counts.
    pub confidence: f64,
    /// The named groups of the pattern that matched, with the text they found.
    pub groups: Vec<(String, String)>,
}

impl Match<'_> {
    /// The cause in one sentence: the remedy's `cause` (or the first sentence of its diagnosis),
    /// with the named groups filled in.
    pub fn cause(&self) -> String {
        let text = match &self.remedy.cause {
            Some(c) => c.clone(),
            None => first_sentence(&self.remedy.diagnosis),
        };
        fill(&text, &self.groups)
    }

    /// The remedy's diagnosis with the named groups filled in.
    pub fn diagnosis(&self) -> String {
        fill(&self.remedy.diagnosis, &self.groups)
    }

    /// The remedy's patch for the failed job `job` (`$job` replaced by its job id); none when the
    /// remedy only diagnoses.
    pub fn patch(&self, job: &str) -> Option<PlanPatch> {
        self.remedy.plan_patch.as_ref().map(|p| instantiate(p, job))
    }

    /// Whether the remedy comes from the remedy library rather than the pack.
    pub fn from_library(&self) -> bool {
        super::library::remedies().iter().any(|r| std::ptr::eq(r, self.remedy))
    }
}

/// `$job` in a patch's changes replaced by the job of `failed` (an instance id is reduced).
pub fn instantiate(patch: &PlanPatch, failed: &str) -> PlanPatch {
    let job = failed.split('@').next().unwrap_or(failed);
    let sub = |s: &mut String| {
        if s == "$job" {
            *s = job.to_string();
        }
    };
    let mut p = patch.clone();
    for c in &mut p.changes {
        match c {
            PatchChange::InsertAfter { anchor, .. } | PatchChange::InsertBefore { anchor, .. } => sub(anchor),
            PatchChange::Retry { job, .. } | PatchChange::Skip { job, .. } => sub(job),
            PatchChange::SetParameters { job, .. } => job.iter_mut().for_each(sub),
            PatchChange::AddGate(g) => g.before.iter_mut().for_each(sub),
        }
    }
    p
}

fn first_sentence(text: &str) -> String {
    match text.find(". ") {
        Some(i) => text[..=i].to_string(),
        None => text.to_string(),
    }
}

/// `{name}` replaced by what the named group found; a group the pattern that matched does not
/// have (or that found nothing) points at the quoted line instead.
fn fill(text: &str, groups: &[(String, String)]) -> String {
    let filled = groups.iter().fold(text.to_string(), |t, (name, value)| t.replace(&format!("{{{name}}}"), value));
    let placeholder = regex::Regex::new(r"\{[a-z_]+\}").expect("a valid pattern");
    placeholder.replace_all(&filled, "see the quoted line").into_owned()
}

/// A signature's pattern as the matcher compiles it: case-insensitive. Compiled patterns are
/// kept (a remedy's patterns are tried against every failure).
pub fn compile(pattern: &str) -> Result<regex::Regex, regex::Error> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, regex::Regex>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(re) = cache.lock().ok().and_then(|c| c.get(pattern).cloned()) {
        return Ok(re);
    }
    let re = regex::RegexBuilder::new(pattern).case_insensitive(true).build()?;
    if let Ok(mut c) = cache.lock() {
        if c.len() < 4096 {
            c.insert(pattern.to_string(), re.clone());
        }
    }
    Ok(re)
}

/// Whether `remedy` applies to the job the symptoms describe.
pub fn applies(remedy: &Remedy, s: &Symptoms<'_>) -> bool {
    let job = s.job.split('@').next().unwrap_or(s.job);
    match &remedy.applies_to {
        AppliesTo::Everywhere(_) => true,
        AppliesTo::Only(list) => list.iter().any(|sel| match sel {
            JobSelector::Job(j) => j == job,
            JobSelector::JobType(t) => s.job_type == Some(*t),
            JobSelector::Provides(c) => s.provides.iter().any(|p| p == c),
            JobSelector::Pack(p) => p == s.pack,
        }),
    }
}

/// The longest quoted line (characters).
const LINE_MAX: usize = 400;

/// Whether `remedy` matches: it applies to the job and every kind of signature it gives matches
/// (a remedy without any signature matches nothing).
pub fn match_remedy<'a>(remedy: &'a Remedy, s: &Symptoms<'_>) -> Option<Match<'a>> {
    if !applies(remedy, s) {
        return None;
    }
    let sig = &remedy.signature;
    let mut basis = Vec::new();
    let mut groups = Vec::new();
    let mut confidence: f64 = 0.0;
    if !sig.output_matches.is_empty() {
        let (line, found) = sig.output_matches.iter().find_map(|p| {
            let re = compile(p).ok()?;
            let caps = re.captures(s.output)?;
            let m = caps.get(0)?;
            let start = s.output[..m.start()].rfind('\n').map_or(0, |i| i + 1);
            let end = s.output[m.end()..].find('\n').map_or(s.output.len(), |i| m.end() + i);
            let line: String = s.output[start..end].trim().chars().take(LINE_MAX).collect();
            let found: Vec<(String, String)> = re
                .capture_names()
                .flatten()
                .filter_map(|n| caps.name(n).map(|v| (n.to_string(), v.as_str().chars().take(200).collect())))
                .collect();
            Some((line, found))
        })?;
        basis.push(Basis::Output(line));
        groups = found;
        confidence = confidence.max(0.9);
    }
    if !sig.exit_codes.is_empty() {
        let code = s.exit_code.filter(|c| sig.exit_codes.contains(c))?;
        basis.push(Basis::Exit(code));
        confidence = confidence.max(0.6);
    }
    if !sig.failed_evidence.is_empty() {
        let hits: Vec<&str> =
            s.failed_evidence.iter().copied().filter(|c| sig.failed_evidence.iter().any(|f| f == c)).collect();
        if hits.is_empty() {
            return None;
        }
        basis.extend(hits.iter().map(|c| Basis::Evidence(c.to_string())));
        confidence = confidence.max(0.7);
    }
    if basis.is_empty() {
        return None;
    }
    Some(Match { remedy, basis, confidence, groups })
}

/// The best matching remedy of `remedies`, then of the remedy library: the highest confidence,
/// the first among equals (the pack's before the library's). A log that addresses its reader
/// with instructions is never patched: the library's guard wins over every other remedy.
pub fn best_match<'a>(remedies: &'a [Remedy], s: &Symptoms<'_>) -> Option<Match<'a>> {
    let library = super::library::remedies();
    if let Some(m) = library.iter().filter(|r| r.id == super::library::GUARD).find_map(|r| match_remedy(r, s)) {
        return Some(m);
    }
    let mut best: Option<Match<'a>> = None;
    for m in remedies.iter().chain(library.iter()).filter_map(|r| match_remedy(r, s)) {
        if best.as_ref().is_none_or(|b| b.confidence < m.confidence) {
            best = Some(m);
        }
    }
    best
}

/// One example of a remedy that did not behave as it says.
#[derive(Debug, Clone, PartialEq)]
pub struct ExampleFailure {
    pub remedy: String,
    /// `matches[0]`, `does_not_match[1]`, or `matches` when there is none.
    pub example: String,
    pub job: String,
    /// The example's output (empty when there is none).
    pub output: String,
    pub problem: String,
}

/// One job each selector of a remedy stands for, to try its examples on: a job id as it is; a
/// job type, capability or pack as a job `example` that has it; `everywhere` as `example`.
struct Trial {
    job: String,
    pack: String,
    job_type: Option<JobType>,
    provides: Vec<String>,
}

fn trials(r: &Remedy, pack: &str) -> Vec<Trial> {
    let base = |job: &str| Trial { job: job.into(), pack: pack.into(), job_type: None, provides: vec![] };
    match &r.applies_to {
        AppliesTo::Everywhere(_) => vec![base("example")],
        AppliesTo::Only(list) => list
            .iter()
            .map(|sel| match sel {
                JobSelector::Job(j) => base(j),
                JobSelector::JobType(t) => Trial { job_type: Some(*t), ..base("example") },
                JobSelector::Provides(c) => Trial { provides: vec![c.clone()], ..base("example") },
                JobSelector::Pack(p) => Trial { pack: p.clone(), ..base("example") },
            })
            .collect(),
    }
}

/// Runs every remedy's examples through [`best_match`]: a `matches` example must make the remedy
/// the best match of the pack's remedies and the library's for each job it applies to (another
/// remedy winning is a failure: diagnose would answer with that one); a `does_not_match` example
/// must not match the remedy. A remedy without a `matches` example is a failure too. `pack` is
/// the pack's id. Returns the failures and how many examples ran.
pub fn test_examples(pack: &str, remedies: &[Remedy]) -> (Vec<ExampleFailure>, usize) {
    let mut failures = Vec::new();
    let mut ran = 0;
    for r in remedies {
        if r.examples.matches.is_empty() {
            failures.push(ExampleFailure {
                remedy: r.id.clone(),
                example: "matches".into(),
                job: r.applies_to.to_string(),
                output: String::new(),
                problem: "has no `matches` example: an untested remedy".into(),
            });
        }
        let groups = [("matches", &r.examples.matches, true), ("does_not_match", &r.examples.does_not_match, false)];
        for (group, examples, want) in groups {
            for (i, ex) in examples.iter().enumerate() {
                for trial in trials(r, pack) {
                    ran += 1;
                    if let Some(problem) = check_example(remedies, r, ex, &trial, want) {
                        failures.push(ExampleFailure {
                            remedy: r.id.clone(),
                            example: format!("{group}[{i}]"),
                            job: trial.job.clone(),
                            output: ex.output.clone(),
                            problem,
                        });
                    }
                }
            }
        }
    }
    (failures, ran)
}

fn check_example(remedies: &[Remedy], r: &Remedy, ex: &RemedyExample, t: &Trial, want: bool) -> Option<String> {
    let failed: Vec<&str> = ex.failed_evidence.iter().map(String::as_str).collect();
    let s = Symptoms {
        job: &t.job,
        pack: &t.pack,
        job_type: t.job_type,
        provides: &t.provides,
        output: &ex.output,
        exit_code: ex.exit_code,
        failed_evidence: &failed,
    };
    if want {
        match best_match(remedies, &s) {
            Some(m) if m.remedy.id == r.id => None,
            Some(m) => Some(format!(
                "should match, but remedy `{}` wins (confidence {:.1}, the pack's before the library's, the earlier among equals)",
                m.remedy.id, m.confidence
            )),
            None => Some("should match, but the signature matches nothing".into()),
        }
    } else {
        match_remedy(r, &s).map(|m| {
            let on: Vec<String> = m
                .basis
                .iter()
                .map(|b| match b {
                    Basis::Output(t) => format!("output `{t}`"),
                    Basis::Exit(c) => format!("exit code {c}"),
                    Basis::Evidence(e) => format!("failed check {e}"),
                })
                .collect();
            format!("should not match, but matches on {}", on.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::library;

    #[test]
    fn the_library_is_valid_and_passes_its_examples() {
        assert_eq!(library::check(), Vec::<String>::new());
        let (failures, ran) = test_examples("any-pack", library::remedies());
        let lines: Vec<String> = failures
            .iter()
            .map(|f| format!("{} {} ({}): {}\n  {}", f.remedy, f.example, f.job, f.problem, f.output))
            .collect();
        assert!(lines.is_empty(), "{}", lines.join("\n"));
        assert!(ran > 60, "{ran}");
    }
}
