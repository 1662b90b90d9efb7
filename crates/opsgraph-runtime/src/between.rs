//! The checks between a fleet rollout's waves ([P]), as an attempt: the plan's
//! `verify-<job>-wave-<k>` instance runs no script of the pack; its attempt checks the rollout's
//! evidence (the job's own, and its resource type's verification of [I]) on the hosts done so
//! far — and with `verify_between_waves: resource` the resource's checks on every host of the
//! rollout not failed — on a worker, like any attempt. Its result goes through `decide` like any
//! other: passed, the next wave may start; failed, the rollout pauses naming the check.

use std::collections::HashMap;

use opsgraph_core::model::{Evidence, Job, VerifyBetween};
use opsgraph_core::plan::rollout::WaveRef;
use opsgraph_core::plan::JobInstance;
use opsgraph_exec::{Cancel, EvidenceResult};
use opsgraph_store::{JobRecord, JobState, OperationRecord};

use crate::attempt::Plain;
use crate::execute::Drive;
use crate::masking::Masking;
use crate::task::{Task, TaskResult};
use crate::verify::{for_verification, run_checks, Prepared};
use crate::{Error, Runtime};

/// The hosts the checks after wave `k` run on, from the job records: those done in waves up to
/// `k` get every check; with `resource`, the others not failed (later waves, not yet touched)
/// get the resource's checks. In plan order.
pub(crate) fn hosts<'a>(
    plan: &'a [JobInstance],
    records: &HashMap<String, JobRecord>,
    v: &WaveRef,
    on: VerifyBetween,
) -> (Vec<&'a JobInstance>, Vec<&'a JobInstance>) {
    let state = |j: &JobInstance| records.get(&j.id).map(|r| r.state);
    let mine = plan.iter().filter(|j| j.job == v.job && j.wave.is_some() && j.skipped.is_none());
    let (mut done, mut rest) = (Vec::new(), Vec::new());
    for j in mine {
        match state(j) {
            Some(s) if s.is_done() && j.wave.is_some_and(|w| w <= v.wave) => done.push(j),
            Some(JobState::Failed | JobState::Cancelled) => {}
            _ if on == VerifyBetween::Resource => rest.push(j),
            _ => {}
        }
    }
    (done, rest)
}

impl Runtime {
    /// The attempt of checks-between-waves instance `instance` (`v`): a task whose worker runs
    /// the checks on each host with that host's executor and environment.
    pub(crate) fn wave_checks_task(
        &self,
        d: &Drive<'_>,
        op: &OperationRecord,
        instance: &JobInstance,
        v: &WaveRef,
        attempt: u32,
        cancel: Cancel,
    ) -> Result<Task, Error> {
        let (plan, pack) = (d.plan, d.pack);
        let rollout = plan.rollouts.iter().find(|r| r.job == v.job).and_then(|r| r.checks.clone());
        let checks = rollout.unwrap_or(opsgraph_core::plan::rollout::WaveChecks {
            on: VerifyBetween::None,
            evidence: vec![],
            resource: vec![],
        });
        let evidence = |ids: &[String]| -> Vec<Evidence> {
            ids.iter().filter_map(|e| pack.evidence.get(e)).map(for_verification).collect()
        };
        let resource = evidence(&checks.resource);
        let mut all = evidence(&checks.evidence);
        all.extend(resource.iter().filter(|e| !checks.evidence.contains(&e.id)).cloned());
        let job = d
            .jobs
            .as_ref()
            .and_then(|j| j.get(&v.job))
            .cloned()
            .ok_or_else(|| Error::NoPack(format!("{} (job {})", plan.pack, v.job)))?;
        let (done, rest) = hosts(&plan.jobs, &d.cache, v, checks.on);
        let mut secrets = Vec::new();
        let mut prepare = |hosts: &[&JobInstance]| -> Result<Vec<Prepared>, Error> {
            hosts
                .iter()
                .map(|h| {
                    Ok(Prepared {
                        instance: h.id.clone(),
                        executor: self.executor_for(h, &job),
                        env: self.environment(op, plan, h, &job, &d.inputs, &[], Plain::Attempt, &mut secrets)?,
                    })
                })
                .collect()
        };
        // A host whose environment cannot be made (an input it needs is gone) fails the checks
        // with that reason: the rollout pauses naming it; the driver goes on.
        let (on_done, on_rest, unprepared) = match (prepare(&done), prepare(&rest)) {
            (Ok(a), Ok(b)) => (a, b, None),
            (Err(e), _) | (_, Err(e)) => {
                (Vec::new(), Vec::new(), Some(format!("the checks could not be prepared: {e}")))
            }
        };
        let secret_dirs: Vec<_> = done.iter().chain(&rest).map(|h| d.run_dir.join("secrets").join(&h.id)).collect();
        let limit = self.concurrency.max(1);
        let masking = Masking::new(secrets);
        let hosts = on_done.len() + on_rest.len();
        let run = move |task: Task| -> TaskResult {
            let started = std::time::Instant::now();
            let mut runs = run_checks(&all, on_done, limit);
            runs.extend(run_checks(&resource, on_rest, limit));
            for dir in &secret_dirs {
                let _ = std::fs::remove_dir_all(dir);
            }
            let mut result = TaskResult::of(&task);
            result.duration = started.elapsed();
            result.evidence = runs
                .into_iter()
                .map(|(on, check, r)| {
                    let (mut check, r) = masking.evidence(vec![(check, r)]).remove(0);
                    check.id = format!("{}@{}", check.id, on.split_once('@').map_or(on.as_str(), |(_, h)| h));
                    (check, r)
                })
                .collect();
            let failed: Vec<&(Evidence, EvidenceResult)> = result.evidence.iter().filter(|(_, r)| !r.passed).collect();
            result.outcome = format!("checked on {hosts} hosts");
            result.failure = unprepared.or_else(|| {
                failed.first().map(|(c, r)| {
                    let more = match failed.len() {
                        1 => String::new(),
                        n => format!(" (and {} more)", n - 1),
                    };
                    format!("check {} failed: expected {}, observed {}{more}", c.id, r.expected, r.observed)
                })
            });
            result
        };
        Ok(Task {
            instance: instance.id.clone(),
            attempt,
            job: Job {
                id: instance.job.clone(),
                title: instance.title.clone(),
                description: None,
                type_: Default::default(),
                scope: None,
                inputs: Default::default(),
                outputs: Default::default(),
                controls: Default::default(),
                run: None,
                after: Vec::new(),
                cost: None,
            },
            evidence: Vec::new(),
            program: None,
            env: Default::default(),
            libraries: Vec::new(),
            timeout: None,
            executor: std::sync::Arc::new(crate::task::Refuse("checks between waves run on their hosts".into())),
            mark: None,
            dir: d.run_dir.clone(),
            stem: format!("{}.{attempt}", instance.id),
            cancel,
            check_first: false,
            secret_outputs: Vec::new(),
            mask: Vec::new(),
            instead: Some(Box::new(run)),
            share_live: None,
        })
    }
}
