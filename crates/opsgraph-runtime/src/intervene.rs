//! Manual interventions (seed §13): a person fixed a failed stage by hand. The fix is recorded,
//! then verified by the evidence it names, run on the failed jobs' targets: pass, and those jobs
//! become "manually fixed, verified" and the run goes on; fail, and the operation is failed
//! again with the evidence that says why. failed -> verification -> running | failed.

use opsgraph_core::model::{Intervention, OperationState};
use opsgraph_core::plan::job_lifecycle::{self, JobEvent};
use opsgraph_core::plan::lifecycle::Event;
use opsgraph_store::{now, JobRecord, JobState, Write};
use serde_json::json;

use crate::attempt::Plain;
use crate::jobs;
use crate::task::TaskResult;
use crate::timeline::entry;
use crate::{Error, Runtime};

/// What an intervention did.
#[derive(Debug, Clone)]
pub struct Verified {
    pub intervention: String,
    /// The jobs it was about.
    pub jobs: Vec<String>,
    /// Every check run: (job instance, check, passed, expected, observed).
    pub checks: Vec<(String, String, bool, String, String)>,
    pub state: OperationState,
}

impl Runtime {
    /// Records `iv` for a failed operation and verifies it.
    pub fn intervene(&mut self, op_id: &str, iv: &Intervention, actor: &str) -> Result<Verified, Error> {
        let (op, plan) = self.load(op_id)?;
        if !matches!(op.state, OperationState::Failed { .. }) {
            return Err(Error::Unsupported(format!(
                "an intervention is recorded on a failed operation; {op_id} is {}",
                opsgraph_core::plan::lifecycle::state_name(op.state.kind())
            )));
        }
        let pack = self.pack(&plan)?.clone();
        let template = pack.templates.iter().find(|t| t.id == plan.template).cloned();
        let failed: Vec<String> =
            self.store.jobs(op_id)?.into_iter().filter(|j| j.state == JobState::Failed).map(|j| j.id).collect();
        // The failed jobs it is about: those of the stage (id or name) or the job named.
        let targets: Vec<&opsgraph_core::plan::JobInstance> = plan
            .jobs
            .iter()
            .filter(|j| failed.contains(&j.id))
            .filter(|j| match (&iv.target_stage, &iv.target_job) {
                (_, Some(job)) => j.job == *job || j.id == *job,
                (Some(stage), None) => {
                    j.stage == *stage || plan.stages.iter().any(|s| s.id == j.stage && s.name == *stage)
                }
                (None, None) => true,
            })
            .collect();
        if targets.is_empty() {
            let what = iv.target_job.as_deref().or(iv.target_stage.as_deref()).unwrap_or("the operation");
            return Err(Error::Unsupported(format!(
                "no failed job in {what} (failed: {})",
                if failed.is_empty() { "none".into() } else { failed.join(", ") }
            )));
        }
        for t in &targets {
            let job = template.as_ref().and_then(|tp| pack.job(tp, &t.job));
            if job.and_then(|j| j.controls.manual_intervention.as_ref()).is_some_and(|m| !m.allowed) {
                return Err(Error::Unsupported(format!(
                    "job {} does not allow manual intervention (controls.manual_intervention.allowed: false)",
                    t.job
                )));
            }
        }
        if iv.requires_verification.is_empty() {
            return Err(Error::Unsupported(
                "an intervention names the evidence that proves the fix (requires_verification, --verify)".into(),
            ));
        }
        let mut checks = Vec::new();
        for id in &iv.requires_verification {
            match pack.evidence.get(id) {
                Some(c) => checks.push(c.clone()),
                None => {
                    let known: Vec<&str> = pack.evidence.keys().map(String::as_str).collect();
                    return Err(Error::Unsupported(format!(
                        "no evidence check `{id}` in pack {} (checks: {})",
                        pack.manifest.id,
                        known.join(", ")
                    )));
                }
            }
        }
        let n = self.store.timeline(op_id)?.iter().filter(|e| e.event == "intervention_recorded").count() + 1;
        let id = format!("iv{n}");
        let jobs_named: Vec<String> = targets.iter().map(|t| t.id.clone()).collect();
        let attached = self.take_attached();
        let mut writes = vec![Write::Timeline(entry(
            op_id,
            actor,
            "intervention_recorded",
            format!("{id} by {actor} on {}: {}", jobs_named.join(", "), iv.note),
            json!({"intervention": id, "jobs": jobs_named, "note": iv.note, "verify": iv.requires_verification}),
        ))];
        writes.extend(attached);
        let op = self.transition(
            &op,
            Event::ManuallyFixed { intervention: id.clone() },
            actor,
            &iv.note,
            writes,
            &mut |_| {},
        )?;

        // Verification: the named checks on each job's target, with the job's environment.
        let inputs = self.gate_inputs(op_id)?;
        let mut writes = Vec::new();
        let mut results = Vec::new();
        let mut broken: Option<String> = None;
        for t in &targets {
            let Some(job) = template.as_ref().and_then(|tp| pack.job(tp, &t.job)).cloned() else { continue };
            let mut mask = Vec::new();
            let env = self.environment(&op, &plan, t, &job, &inputs, &[], Plain::Attempt, &mut mask)?;
            let executor = self.executor_for(t, &job);
            let (evidence, failure) = jobs::evidence(&checks, &*executor, &env, &opsgraph_exec::Cancel::new());
            let (evidence, failure) = crate::masking::masked(mask, evidence, failure);
            let _ = std::fs::remove_dir_all(self.data_dir.join("runs").join(op_id).join("secrets").join(&t.id));
            for (c, r) in &evidence {
                results.push((t.id.clone(), c.id.clone(), r.passed, r.expected.clone(), r.observed.clone()));
            }
            if let (Some(f), None) = (&failure, &broken) {
                broken = Some(format!("verification of {id} failed on {}: {f}", t.id));
            }
            let result = TaskResult {
                instance: t.id.clone(),
                attempt: 0,
                outcome: "verification".into(),
                failure,
                satisfied_without_run: false,
                evidence,
                produced: vec![],
                log: None,
                duration: std::time::Duration::ZERO,
                cancelled: false,
                unknown: false,
                handed: None,
                after_sync: false,
                no_live_file: false,
            };
            self.result_writes(&op, t, &result, &mut writes)?;
        }
        let records = self.store.jobs(op_id)?;
        let state = match broken {
            None => {
                for t in &targets {
                    if let Some(r) = records.iter().find(|r| r.id == t.id) {
                        let (state, _no_effects) = job_lifecycle::apply(r.state, JobEvent::ManuallyFixed)?;
                        writes.push(Write::Job(JobRecord { state, updated_at: now(), ..r.clone() }));
                    }
                }
                let reason = format!("{id} verified by {} check(s)", results.len());
                self.transition(&op, Event::Verified, actor, &reason, writes, &mut |_| {})?.state
            }
            Some(reason) => {
                self.transition(
                    &op,
                    Event::StillBroken { reason: reason.clone() },
                    actor,
                    &reason,
                    writes,
                    &mut |_| {},
                )?
                .state
            }
        };
        Ok(Verified { intervention: id, jobs: jobs_named, checks: results, state })
    }
}
