//! The rules analyzer (seed §14, offline): a failed job's output, exit code and failed evidence
//! matched against its pack's remedies. A match is a Diagnosis with the remedy's patch; no match
//! is said plainly — never a guess dressed as a fix. The matching is `opsgraph_core::pack::remedy`'s,
//! the same `diagnose FILE` and `pack test` use.

use opsgraph_core::model::PlanPatch;
use opsgraph_core::pack::remedy::Basis;
use opsgraph_store::JobState;
use serde::Serialize;

use crate::{Error, Runtime};

/// What the analyzer found for one failed job.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnosis {
    pub operation: String,
    /// The failed job instance.
    pub job: String,
    pub summary: String,
    pub cause: String,
    /// 0 to 1: how sure the match is (an output signature is surer than an exit code).
    pub confidence: f64,
    /// What the diagnosis rests on: `log:<file>`, `exit:<code>`, `evidence:<check>`.
    pub evidence: Vec<String>,
    pub remedy: Option<String>,
    /// The remedy comes from the remedy library (not the pack).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_library: bool,
    /// None when no remedy matched, or when the remedy only diagnoses (no machine should guess).
    pub patch: Option<PlanPatch>,
    /// Who diagnosed: `rules` (the pack's remedies).
    pub analyzer: String,
}

/// Who proposes the patch of a remedy the rules analyzer matched: an AI's patch, which waits
/// for a person unless `ai_policy.auto_apply` covers it.
pub const ANALYZER_AUTHOR: &str = "ai-agent:planner";

impl Runtime {
    /// The patch of the first remedy the rules analyzer matches for `op_id`'s failed jobs, for
    /// [`ANALYZER_AUTHOR`] to propose; refused when none matches.
    pub fn analyzer_patch(&self, op_id: &str) -> Result<opsgraph_core::model::PlanPatch, Error> {
        let found = self.diagnose(op_id)?;
        if let Some(patch) = found.iter().find_map(|d| d.patch.clone()) {
            return Ok(patch);
        }
        Err(Error::Unsupported(match found.iter().find(|d| d.remedy.is_some()) {
            Some(d) => format!(
                "nothing to propose: remedy {} diagnoses without a patch ({})",
                d.remedy.as_deref().unwrap_or_default(),
                d.cause
            ),
            None => "nothing to propose: no remedy matches".into(),
        }))
    }

    /// Diagnoses every failed job of `op_id` against its pack's remedies.
    pub fn diagnose(&self, op_id: &str) -> Result<Vec<Diagnosis>, Error> {
        let (_, plan) = self.load(op_id)?;
        let pack = self.pack(&plan)?;
        let mut out = Vec::new();
        let evidence = self.store.evidence(op_id)?;
        for record in self.store.jobs(op_id)?.into_iter().filter(|j| j.state == JobState::Failed) {
            let Some(instance) = plan.jobs.iter().find(|j| j.id == record.id) else { continue };
            let log_file = format!("{}.{}.log", record.id, record.attempts);
            let log = self.job_log(op_id, &record.id, record.attempts).and_then(|b| String::from_utf8(b).ok());
            let log = log.unwrap_or_default();
            let outcome = record.outcome["outcome"].as_str().unwrap_or_default();
            let exit: Option<i32> = outcome.strip_prefix("exited with code ").and_then(|c| c.trim().parse().ok());
            let failed_checks: Vec<&str> =
                evidence.iter().filter(|e| e.job == record.id && !e.passed).map(|e| e.check.as_str()).collect();
            // The job's output first; then the attempt's recorded failure, which says what the
            // executor saw when there was no output to see (a host that stopped answering).
            let failure = record.outcome["failure"].as_str().unwrap_or_default();
            let mut source = format!("log:{log_file}");
            let mut found = None;
            let (job_type, provides) = opsgraph_core::pack::remedy::job_facts(pack, &instance.job);
            for (text, label) in [(log.as_str(), source.clone()), (failure, "outcome".to_string())] {
                let symptoms = opsgraph_core::pack::remedy::Symptoms {
                    job: &instance.job,
                    pack: &pack.manifest.id,
                    job_type,
                    provides: &provides,
                    output: text,
                    exit_code: exit,
                    failed_evidence: &failed_checks,
                };
                if let Some(m) = opsgraph_core::pack::remedy::best_match(&pack.remedies, &symptoms) {
                    found = Some(m);
                    source = label;
                    break;
                }
            }
            let best = found.map(|m| Diagnosis {
                operation: op_id.to_string(),
                job: record.id.clone(),
                summary: m.diagnosis(),
                cause: m.cause(),
                confidence: m.confidence,
                evidence: m
                    .basis
                    .iter()
                    .map(|b| match b {
                        Basis::Output(hit) => format!("{source}: {hit}"),
                        Basis::Exit(code) => format!("exit:{code}"),
                        Basis::Evidence(c) => format!("evidence:{c}"),
                    })
                    .collect(),
                remedy: Some(m.remedy.id.clone()),
                from_library: m.from_library(),
                patch: m.patch(&instance.job),
                analyzer: "rules".into(),
            });
            out.push(best.unwrap_or_else(|| Diagnosis {
                operation: op_id.to_string(),
                job: record.id.clone(),
                summary: format!("no remedy of pack {} matches this failure", pack.manifest.id),
                cause: record.outcome["failure"].as_str().unwrap_or(outcome).to_string(),
                confidence: 0.0,
                evidence: vec![format!("log:{log_file}")],
                remedy: None,
                from_library: false,
                patch: None,
                analyzer: "rules".into(),
            }));
        }
        Ok(out)
    }
}

impl Runtime {
    /// A note on an operation's timeline (an analyzer's answer, accepted or refused).
    pub fn note(
        &mut self,
        op_id: &str,
        actor: &str,
        event: &str,
        reason: &str,
        data: serde_json::Value,
    ) -> Result<(), Error> {
        let attached = self.take_attached();
        let mut writes =
            vec![opsgraph_store::Write::Timeline(crate::timeline::entry(op_id, actor, event, reason, data))];
        writes.extend(attached);
        self.commit(&writes)?;
        Ok(())
    }

    /// What an analyzer may read about a failed job: its contract, attempts, outcome, the masked
    /// tail of its output, its evidence results, and what the pack offers to fix it.
    pub fn failure_context(&self, op_id: &str) -> Result<serde_json::Value, Error> {
        let (op, plan) = self.load(op_id)?;
        let pack = self.pack(&plan)?;
        let template = pack.templates.iter().find(|t| t.id == plan.template);
        let evidence = self.store.evidence(op_id)?;
        let mut failed = Vec::new();
        for record in self.store.jobs(op_id)?.into_iter().filter(|j| j.state == JobState::Failed) {
            let Some(instance) = plan.jobs.iter().find(|j| j.id == record.id) else { continue };
            let job = template.and_then(|t| pack.job(t, &instance.job));
            let log = self.job_log(op_id, &record.id, record.attempts).unwrap_or_default();
            let tail = String::from_utf8_lossy(&log[log.len().saturating_sub(4096)..]).into_owned();
            failed.push(serde_json::json!({
                "job": record.id,
                "contract": job.map(|j| serde_json::json!({
                    "id": j.id, "title": j.title, "description": j.description,
                    "requires": j.inputs.requires, "provides": j.outputs.provides, "evidence": j.outputs.evidence,
                })),
                "attempts": record.attempts,
                "outcome": record.outcome["outcome"],
                "failure": record.outcome["failure"],
                "output_tail": tail,
                "evidence": evidence.iter().filter(|e| e.job == record.id).map(|e| serde_json::json!({
                    "check": e.check, "passed": e.passed, "expected": e.expected, "observed": e.observed,
                })).collect::<Vec<_>>(),
            }));
        }
        // Artifacts by metadata only (never content), and what was last observed of the resource.
        let artifacts: Vec<serde_json::Value> = self
            .store
            .artifacts(op_id)?
            .iter()
            .map(|a| serde_json::json!({"id": a.id, "job": a.job, "sensitivity": a.sensitivity, "size": a.size}))
            .collect();
        let observed = op
            .resource
            .as_deref()
            .and_then(|r| self.store.resource(r).ok().flatten())
            .map(|r| serde_json::json!({"status": r.doc["status"], "health": r.doc["health"], "observed_state": r.doc["observed_state"]}));
        Ok(serde_json::json!({
            "operation": op.id,
            "pack": plan.pack,
            "action": plan.action,
            "resource": op.resource,
            "resource_observed": observed,
            "artifacts": artifacts,
            "failed_jobs": failed,
            "job_library": pack.jobs.keys().collect::<Vec<_>>(),
            "stages": plan.stages.iter().map(|s| serde_json::json!({"id": s.id, "jobs": s.jobs})).collect::<Vec<_>>(),
            // The pack's remedies, then the remedy library's (the same order the rules analyzer tries).
            "remedies": pack.remedies.iter().map(|r| (r, "pack")).chain(opsgraph_core::pack::library::remedies().iter().map(|r| (r, "library")))
                .map(|(r, source)| serde_json::json!({"id": r.id, "source": source, "applies_to": r.applies_to, "diagnosis": r.diagnosis, "proposes_a_patch": r.plan_patch.is_some()}))
                .collect::<Vec<_>>(),
        }))
    }
}
