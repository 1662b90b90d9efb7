//! What the server does with what an agent sends before it stores or shows any of it: an agent is
//! not trusted to have masked its output, nor to report only what its job declares.
//!
//! [`Screen`] is built from the task's own payload (the secret values to mask, the evidence
//! checks and artifacts the job declares): log text, the outcome, the failure and every evidence
//! value are masked with the same masker a local run uses (withheld when it cannot be built), and
//! the fields made printable as a local run's are (`masking::printable`); a
//! report naming an evidence check or an artifact the job does not declare, or a check twice, is
//! refused whole.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::wire::{unb64, AgentJob, AgentReport};
use crate::masking::Masking;
use crate::Error;

/// Screens of recent tasks: a log chunk arrives per line batch, and building a masker is not free.
#[derive(Default)]
pub(crate) struct Screens(Mutex<HashMap<String, Arc<Screen>>>);

/// How many tasks' screens are kept (any more and the cache starts over).
const CACHED: usize = 256;

/// A task's mask list and declarations.
pub struct Screen {
    masking: Masking,
    evidence: BTreeSet<String>,
    artifacts: BTreeSet<String>,
}

/// A report refused: a stable code and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
}

impl Screens {
    /// The screen cached under `key`, or the one `build` makes (then cached).
    pub(crate) fn get(&self, key: &str, build: impl FnOnce() -> Result<Screen, Error>) -> Result<Arc<Screen>, Error> {
        if let Some(s) = self.0.lock().unwrap_or_else(|e| e.into_inner()).get(key) {
            return Ok(s.clone());
        }
        let screen = Arc::new(build()?);
        self.keep(key, screen.clone());
        Ok(screen)
    }

    /// Keeps `screen` under `key` (a claim's answer, which opened the payload: the report then
    /// finds it here).
    pub(crate) fn put(&self, key: &str, screen: Screen) {
        self.keep(key, Arc::new(screen));
    }

    fn keep(&self, key: &str, screen: Arc<Screen>) {
        let mut cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHED {
            cache.clear();
        }
        cache.insert(key.to_string(), screen);
    }
}

impl Screen {
    pub fn new(job: &AgentJob) -> Screen {
        Screen {
            masking: Masking::new(job.mask.iter().map(|m| unb64(m)).collect()),
            evidence: job.evidence.iter().map(|e| e.id.clone()).collect(),
            artifacts: job.job.outputs.artifacts.iter().cloned().collect(),
        }
    }

    /// Log text as it may be stored and shown: masked, a NUL written as U+FFFD.
    pub fn log(&self, text: &str) -> String {
        crate::masking::storable_log(self.masking.text(text))
    }

    /// The report as it may be stored and shown, or why it is refused.
    pub fn report(&self, mut report: AgentReport) -> Result<AgentReport, Refusal> {
        let mut seen = BTreeSet::new();
        for e in &report.evidence {
            if !self.evidence.contains(&e.check) {
                return Err(Refusal {
                    code: "undeclared_evidence",
                    message: format!(
                        "the report names evidence check `{}`, which the job does not declare (it declares: {})",
                        self.masking.field(&e.check),
                        list(&self.evidence)
                    ),
                });
            }
            if !seen.insert(e.check.as_str()) {
                return Err(Refusal {
                    code: "undeclared_evidence",
                    message: format!("the report names evidence check `{}` twice", self.masking.field(&e.check)),
                });
            }
        }
        if let Some(f) = report.produced.iter().find(|f| !self.artifacts.contains(&f.name)) {
            return Err(Refusal {
                code: "undeclared_artifact",
                message: format!(
                    "the report carries artifact `{}`, which the job does not declare as an output (it declares: {})",
                    self.masking.field(&f.name),
                    list(&self.artifacts)
                ),
            });
        }
        report.outcome = self.masking.field(&report.outcome);
        report.failure = report.failure.map(|f| self.masking.field(&f));
        for e in &mut report.evidence {
            e.expected = self.masking.field(&e.expected);
            e.observed = self.masking.field(&e.observed);
            e.detail = self.masking.field(&e.detail);
        }
        Ok(report)
    }
}

fn list(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        return "none".into();
    }
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};
    use serde_json::json;

    use super::*;

    const CANARY: &str = "canary-7f3a9c1e5b";

    /// A job declaring evidence `done` and artifact `note`, told to mask [`CANARY`].
    fn screen() -> Screen {
        use base64::Engine as _;
        let job: AgentJob = serde_json::from_value(json!({
            "instance": "make@w0", "attempt": 1, "kind": "run",
            "job": {"id": "make", "outputs": {"artifacts": ["note"], "evidence": ["done"]}},
            "evidence": [{"id": "done", "source": "file", "path": "/tmp/x"}],
            "program": null, "env": {}, "files": [], "timeout_ms": null, "check_first": false,
            "secret_outputs": [],
            "mask": [base64::engine::general_purpose::STANDARD.encode(CANARY)],
        }))
        .unwrap();
        Screen::new(&job)
    }

    /// `report` (JSON) screened: what is stored, or the refusal.
    fn check(report: serde_json::Value, expect: Expect) {
        let report: AgentReport = serde_json::from_value(report).unwrap();
        let shown = match screen().report(report) {
            Ok(r) => serde_json::to_string_pretty(&r).unwrap(),
            Err(r) => format!("refused {}: {}", r.code, r.message),
        };
        expect.assert_eq(&shown);
    }

    fn report(evidence: serde_json::Value, produced: serde_json::Value) -> serde_json::Value {
        json!({
            "outcome": format!("exit code 0 {CANARY}"), "failure": format!("echoed {CANARY}"),
            "satisfied_without_run": false, "cancelled": false, "duration_ms": 1,
            "evidence": evidence, "produced": produced,
        })
    }

    #[test]
    fn reports_are_masked_and_keep_to_the_jobs_declarations() {
        let base64 = "Y2FuYXJ5LTdmM2E5YzFlNWI=";
        check(
            report(
                json!([{"check": "done", "passed": false, "expected": CANARY, "observed": format!("got {base64}"),
                        "detail": format!("{CANARY}\n"), "attempts": 1}]),
                json!([{"name": "note", "content": "bm90ZQ=="}]),
            ),
            expect![[r#"
                {
                  "outcome": "exit code 0 ***",
                  "failure": "echoed ***",
                  "satisfied_without_run": false,
                  "cancelled": false,
                  "evidence": [
                    {
                      "check": "done",
                      "passed": false,
                      "expected": "***",
                      "observed": "got ***",
                      "detail": "***\n",
                      "attempts": 1
                    }
                  ],
                  "produced": [
                    {
                      "name": "note",
                      "content": "bm90ZQ=="
                    }
                  ],
                  "duration_ms": 1
                }"#]],
        );
        let forged = |check: &str| json!([{"check": check, "passed": true, "expected": "", "observed": "", "detail": "", "attempts": 1}]);
        check(
            report(forged("healthy"), json!([])),
            expect!["refused undeclared_evidence: the report names evidence check `healthy`, which the job does not declare (it declares: `done`)"],
        );
        check(
            report(forged(CANARY), json!([])),
            expect!["refused undeclared_evidence: the report names evidence check `***`, which the job does not declare (it declares: `done`)"],
        );
        let twice = json!([
            {"check": "done", "passed": false, "expected": "", "observed": "", "detail": "", "attempts": 1},
            {"check": "done", "passed": true, "expected": "", "observed": "", "detail": "", "attempts": 1},
        ]);
        check(
            report(twice, json!([])),
            expect!["refused undeclared_evidence: the report names evidence check `done` twice"],
        );
        check(
            report(json!([]), json!([{"name": "kubeconfig", "content": ""}])),
            expect!["refused undeclared_artifact: the report carries artifact `kubeconfig`, which the job does not declare as an output (it declares: `note`)"],
        );
    }

    #[test]
    fn an_agents_fields_are_stored_printable() {
        // A NUL would fail PostgreSQL's commit of the job's result; an escape sequence would reach
        // the operator's terminal.
        let evidence = json!([{"check": "done", "passed": false, "expected": "ok", "observed": "\u{1b}[32mok\0",
                                "detail": "\r", "attempts": 1}]);
        let report = json!({
            "outcome": "exit code 1", "failure": format!("exit code 1: {CANARY}\u{1b}]0;pwned\u{7}\0"),
            "satisfied_without_run": false, "cancelled": false, "duration_ms": 1,
            "evidence": evidence, "produced": [],
        });
        check(
            report,
            expect![[r#"
                {
                  "outcome": "exit code 1",
                  "failure": "exit code 1: ***\\x1b]0;pwned\\x07\\x00",
                  "satisfied_without_run": false,
                  "cancelled": false,
                  "evidence": [
                    {
                      "check": "done",
                      "passed": false,
                      "expected": "ok",
                      "observed": "\\x1b[32mok\\x00",
                      "detail": "\\x0d",
                      "attempts": 1
                    }
                  ],
                  "produced": [],
                  "duration_ms": 1
                }"#]],
        );
    }

    #[test]
    fn log_text_is_masked() {
        let screen = screen();
        expect!["token ***\nbase64 ***\n"]
            .assert_eq(&screen.log(&format!("token {CANARY}\nbase64 Y2FuYXJ5LTdmM2E5YzFlNWI=\n")));
    }
}
