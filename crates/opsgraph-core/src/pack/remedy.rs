//! The one remedy matcher: a failed job's output, exit code and failed evidence against a pack's
//! remedies. The runtime's `diagnose`, `opsgraph diagnose FILE` and `opsgraph pack test` all call
//! [`best_match`], so they cannot disagree. Pure: no IO.

use crate::model::{Remedy, RemedyExample};

/// What is known about one failed job.
#[derive(Debug, Clone, Copy)]
pub struct Symptoms<'a> {
    /// The job id; an instance id (`job@resource`) is reduced to its job.
    pub job: &'a str,
    pub output: &'a str,
    pub exit_code: Option<i32>,
    /// The evidence checks that failed.
    pub failed_evidence: &'a [&'a str],
}

/// One thing a match rests on.
#[derive(Debug, Clone, PartialEq)]
pub enum Basis {
    /// The text an `output_matches` regex found in the output.
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
}

/// Whether `remedy` matches: it applies to the job and every kind of signature it gives matches
/// (a remedy without any signature matches nothing).
pub fn match_remedy<'a>(remedy: &'a Remedy, s: &Symptoms<'_>) -> Option<Match<'a>> {
    let job = s.job.split('@').next().unwrap_or(s.job);
    if !remedy.applies_to.iter().any(|j| j == job) {
        return None;
    }
    let sig = &remedy.signature;
    let mut basis = Vec::new();
    let mut confidence: f64 = 0.0;
    if !sig.output_matches.is_empty() {
        let hit = sig.output_matches.iter().find_map(|p| {
            let re = regex::Regex::new(p).ok()?;
            re.find(s.output).map(|m| m.as_str().to_string())
        })?;
        basis.push(Basis::Output(hit));
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
    Some(Match { remedy, basis, confidence })
}

/// The best matching remedy: the highest confidence, the first in pack order among equals.
pub fn best_match<'a>(remedies: &'a [Remedy], s: &Symptoms<'_>) -> Option<Match<'a>> {
    let mut best: Option<Match<'a>> = None;
    for m in remedies.iter().filter_map(|r| match_remedy(r, s)) {
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

/// Runs every remedy's examples through [`best_match`]: a `matches` example must make the remedy
/// the best match of the whole pack for each job it applies to (another remedy winning is a
/// failure: diagnose would answer with that one); a `does_not_match` example must not match the
/// remedy. A remedy without a `matches` example is a failure too. Returns the failures and how
/// many examples ran.
pub fn test_examples(remedies: &[Remedy]) -> (Vec<ExampleFailure>, usize) {
    let mut failures = Vec::new();
    let mut ran = 0;
    for r in remedies {
        if r.examples.matches.is_empty() {
            failures.push(ExampleFailure {
                remedy: r.id.clone(),
                example: "matches".into(),
                job: r.applies_to.join(", "),
                output: String::new(),
                problem: "has no `matches` example: an untested remedy".into(),
            });
        }
        let groups = [("matches", &r.examples.matches, true), ("does_not_match", &r.examples.does_not_match, false)];
        for (group, examples, want) in groups {
            for (i, ex) in examples.iter().enumerate() {
                for job in &r.applies_to {
                    ran += 1;
                    if let Some(problem) = check_example(remedies, r, ex, job, want) {
                        failures.push(ExampleFailure {
                            remedy: r.id.clone(),
                            example: format!("{group}[{i}]"),
                            job: job.clone(),
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

fn check_example(remedies: &[Remedy], r: &Remedy, ex: &RemedyExample, job: &str, want: bool) -> Option<String> {
    let failed: Vec<&str> = ex.failed_evidence.iter().map(String::as_str).collect();
    let s = Symptoms { job, output: &ex.output, exit_code: ex.exit_code, failed_evidence: &failed };
    if want {
        match best_match(remedies, &s) {
            Some(m) if m.remedy.id == r.id => None,
            Some(m) => Some(format!(
                "should match, but remedy `{}` wins (confidence {:.1}, the earlier in the pack among equals)",
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
