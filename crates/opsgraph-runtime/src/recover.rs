//! Attempts whose outcome is unknown: evidence first, never a blind second run.
//!
//! An attempt is recorded `running` before its process starts. When its driver died (a crash, a
//! `kill -9`, a lost lease) nobody recorded how it ended. Before anything decides about it, what
//! is left of it on this host is stopped ([`opsgraph_exec::stop_leftovers`]: processes carrying
//! the attempt's operation and job id in their environment), so the check never races the job
//! itself; then its evidence is checked. Crash recovery (`drive`) and a person's `retry` of a job
//! whose outcome is unknown both go through [`Runtime::check_unknown`].

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use opsgraph_core::model::Job;
use opsgraph_core::pack::Pack;
use opsgraph_core::plan::job_lifecycle::{self, JobEffect, JobEvent};
use opsgraph_core::plan::lifecycle::{self, Event};
use opsgraph_core::plan::{JobInstance, Plan};
use opsgraph_exec::Cancel;
use opsgraph_store::{now, JobRecord, OperationRecord, Write};
use serde_json::{json, Value};

use crate::attempt::Plain;
use crate::jobs;
use crate::task::TaskResult;
use crate::timeline::{entry, Progress};
use crate::{Error, Runtime};

/// How long a dead driver's leftovers may take to die before the check goes on regardless.
const LEFTOVERS: Duration = Duration::from_secs(5);
/// Between SIGTERM and SIGKILL for what is left of a dead driver's run on a remote host: a run's
/// own grace (`Spec::DEFAULT_GRACE`).
const REMOTE_GRACE: Duration = opsgraph_exec::Spec::DEFAULT_GRACE;

/// Whether a job record's outcome is unknown: its attempt's driver died before it recorded one,
/// or its run was lost (`lost: …`: the SSH connection dropped mid-job, so the job may have done
/// its work on the host, as a host whose network was cut does).
pub(crate) fn is_unknown(record: &JobRecord) -> bool {
    let outcome = record.outcome["outcome"].as_str().unwrap_or_default();
    (outcome == "unknown" || outcome.starts_with("lost: ")) && record.outcome["recovered"] != true
}

impl Runtime {
    /// Checks an attempt whose outcome is unknown: stops its leftovers, checks its evidence and
    /// its declared artifacts, and adds the result's writes to `writes`. Returns the failure
    /// (`None`: its effect is there).
    pub(crate) fn check_unknown(
        &mut self,
        (op, plan, pack): (&OperationRecord, &Plan, &Pack),
        (instance, job): (&JobInstance, &Job),
        record: &JobRecord,
        inputs: &BTreeMap<String, Value>,
        writes: &mut Vec<Write>,
    ) -> Result<Option<String>, Error> {
        let stopped = opsgraph_exec::stop_leftovers(
            &[("OPSGRAPH_OPERATION_ID", &op.id), ("OPSGRAPH_JOB_ID", &instance.id)],
            LEFTOVERS,
        );
        if stopped > 0 {
            writes.push(Write::Timeline(entry(
                &op.id,
                &self.actor,
                "job_leftovers_stopped",
                format!("{}: {stopped} process(es) of its attempt were still running; stopped", record.id),
                json!({"job": record.id, "processes": stopped}),
            )));
        }
        let executor = self.executor_for(instance, job);
        // Over SSH the run outlives its driver on the host: the mark recorded with the attempt
        // finds what is left of it there, stopped as a timed-out run is (TERM, grace, KILL).
        if let Some(said) = record.outcome["mark"].as_str().and_then(|mark| executor.stop_marked(mark, REMOTE_GRACE)) {
            writes.push(Write::Timeline(entry(
                &op.id,
                &self.actor,
                "job_remote_leftovers",
                format!("{}: {said}", record.id),
                json!({"job": record.id, "remote_stop": said}),
            )));
        }
        let mut mask = Vec::new();
        let env = self.environment(op, plan, instance, job, inputs, &[], Plain::Attempt, &mut mask)?;
        let checks: Vec<opsgraph_core::model::Evidence> =
            job.outputs.evidence.iter().filter_map(|e| pack.evidence.get(e).cloned()).collect();
        let (results, mut failure) = if checks.is_empty() {
            (vec![], Some("it declares no evidence".to_string()))
        } else {
            let (results, failure) = jobs::evidence(&checks, &*executor, &env, &Cancel::new());
            crate::masking::masked(mask, results, failure)
        };
        let _ = std::fs::remove_dir_all(self.data_dir.join("runs").join(&op.id).join("secrets").join(&instance.id));
        // Evidence says the job's effect is there; its declared artifacts must be too (found
        // by the crash sweep: killed after a blob was stored and before its record, the job
        // was recovered without its artifact). They are taken from the attempt's output
        // directory when the files survived; otherwise the outcome stays unknown.
        let out = self.data_dir.join("runs").join(&op.id).join(format!("{}.{}.out", record.id, record.attempts));
        let mut produced = Vec::new();
        if failure.is_none() {
            for artifact in &job.outputs.artifacts {
                let path = out.join(artifact);
                if path.is_file() {
                    produced.push((artifact.clone(), path));
                } else {
                    failure = Some(format!("its artifact {artifact} is not at {}", path.display()));
                    produced.clear();
                    break;
                }
            }
        }
        let result = TaskResult {
            instance: record.id.clone(),
            attempt: record.attempts,
            outcome: "outcome unknown after a restart".into(),
            failure: failure.clone(),
            satisfied_without_run: true,
            evidence: results,
            produced,
            log: None,
            duration: Duration::ZERO,
            cancelled: false,
            unknown: false,
            handed: None,
            after_sync: false,
            no_live_file: false,
        };
        self.result_writes(op, instance, &result, writes)?;
        Ok(failure)
    }

    /// Crash recovery for attempts with no recorded outcome: evidence first.
    pub(crate) fn recover(
        &mut self,
        op: &OperationRecord,
        plan: &Plan,
        pack: &Pack,
        orphans: &[JobRecord],
        inputs: &BTreeMap<String, Value>,
        progress: Progress<'_>,
    ) -> Result<(), Error> {
        let template = pack.templates.iter().find(|t| t.id == plan.template);
        let jobs = template.map(|t| pack.job_index(t));
        let instances: HashMap<&str, &JobInstance> = plan.jobs.iter().map(|j| (j.id.as_str(), j)).collect();
        let mut writes = Vec::new();
        let mut unknown: Option<String> = None;
        for record in orphans {
            let Some(instance) = instances.get(record.id.as_str()).copied() else { continue };
            // Checks between a rollout's waves change nothing: they run again.
            let checks = instance.verifies.is_some();
            let job = jobs.as_ref().and_then(|j| j.get(&instance.job)).cloned();
            let (failure, retry_allowed) = match job {
                _ if checks => (Some("its checks did not finish".to_string()), true),
                None => continue,
                Some(job) => {
                    let failure =
                        self.check_unknown((op, plan, pack), (instance, &job), record, inputs, &mut writes)?;
                    let max_attempts = job.controls.retry_policy.as_ref().map_or(1, |p| p.max_attempts);
                    (failure, job.controls.idempotency.is_some() && record.attempts < max_attempts)
                }
            };
            let (event, reason) = match &failure {
                Some(_) if checks => (
                    JobEvent::Failed { retry: true, unknown: true },
                    format!("{}: checks between waves cut short by a restart; they change nothing and run again", record.id),
                ),
                None => (JobEvent::Recovered, format!("{}: outcome unknown after a restart; its evidence passes", record.id)),
                Some(f) if retry_allowed => (
                    JobEvent::Failed { retry: true, unknown: true },
                    format!("{}: outcome unknown after a restart and {f}; idempotent, retrying", record.id),
                ),
                Some(f) => (
                    JobEvent::Failed { retry: false, unknown: true },
                    format!("{}: outcome unknown after a restart and {f}; not retried without an idempotency key and attempts left: a person decides", record.id),
                ),
            };
            let (state, effects) = job_lifecycle::apply(record.state, event)?;
            for effect in effects {
                match effect {
                    JobEffect::FailOperation => {
                        unknown.get_or_insert_with(|| reason.clone());
                    }
                    // The attempt it replaces died with its driver, long enough ago: it starts again
                    // at once, with the rest of the drive.
                    JobEffect::Backoff => {}
                    JobEffect::RunAttempt | JobEffect::RecordKey => {}
                }
            }
            writes.push(Write::Job(JobRecord {
                operation: op.id.clone(),
                id: record.id.clone(),
                state,
                attempts: record.attempts,
                outcome: {
                    let mut outcome = json!({"outcome": "unknown", "failure": failure, "recovered": failure.is_none()});
                    // Kept for a person's retry, which stops what may still be left on the host.
                    if let Some(mark) = record.outcome.get("mark") {
                        outcome["mark"] = mark.clone();
                    }
                    outcome
                },
                updated_at: now(),
            }));
            let event = event.timeline().unwrap_or(event.name());
            writes.push(Write::Timeline(entry(&op.id, &self.actor, event, reason, json!({"job": record.id}))));
        }
        crate::failpoint::hit("recovery.checked");
        match unknown {
            Some(reason) => {
                let job = reason.split(':').next().unwrap_or_default().to_string();
                let event = Event::JobFailed { job, reason: reason.clone() };
                // The lifecycle's effects (the resource marked failed) join the transition.
                let (_, effects) = lifecycle::apply(&op.state, &event)?;
                let mut extra = writes;
                extra.extend(self.lifecycle_writes(op, plan, pack, effects)?);
                let actor = self.actor.clone();
                self.transition(op, event, &actor, &reason, extra, progress)?;
            }
            None => self.commit_timeline(&writes, progress)?,
        }
        Ok(())
    }

    /// A person's retry of jobs whose outcome is unknown: each is checked like crash recovery
    /// checks it. Evidence passes: `recovered`, not run again. Otherwise it runs again (a person
    /// asked for that). Returns the writes.
    pub(crate) fn retry_checks(
        &mut self,
        op: &OperationRecord,
        plan: &Plan,
        chosen: &[JobRecord],
        actor: &str,
    ) -> Result<Vec<Write>, Error> {
        let mut writes = Vec::new();
        let pack = if chosen.iter().any(is_unknown) { Some(self.pack(plan)?.clone()) } else { None };
        let template = pack.as_ref().and_then(|p| p.templates.iter().find(|t| t.id == plan.template));
        let inputs = if pack.is_some() { self.gate_inputs(&op.id)? } else { BTreeMap::new() };
        for record in chosen {
            let instance = plan.jobs.iter().find(|j| j.id == record.id);
            let checked = match (&pack, template, instance) {
                (Some(pack), Some(template), Some(instance)) if is_unknown(record) => {
                    match pack.job(template, &instance.job).cloned() {
                        Some(job) => Some(self.check_unknown(
                            (op, plan, pack),
                            (instance, &job),
                            record,
                            &inputs,
                            &mut writes,
                        )?),
                        None => None,
                    }
                }
                _ => None,
            };
            let (state, outcome) = match checked {
                Some(None) => {
                    writes.push(Write::Timeline(entry(
                        &op.id,
                        actor,
                        "job_recovered",
                        format!("{}: outcome was unknown; its evidence passes now, so it is not run again", record.id),
                        json!({"job": record.id}),
                    )));
                    (JobEvent::Recovered, json!({"outcome": "unknown", "failure": null, "recovered": true}))
                }
                _ => (JobEvent::Reset, record.outcome.clone()),
            };
            // Neither has an effect of its own: the operation's `retry` dispatches them.
            let (state, _no_effects) = job_lifecycle::apply(record.state, state)?;
            writes.push(Write::Job(JobRecord { state, outcome, updated_at: now(), ..record.clone() }));
        }
        Ok(writes)
    }
}
