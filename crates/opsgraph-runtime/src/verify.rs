//! Day 2 ([I]): a resource's verification. Its pack declares, per resource type, the evidence
//! that must keep passing (`verify`), the evidence whose captures are its observed state
//! (`observe`), the job whose instances give the checks their hosts and environment (`on`) and an
//! interval. `opsgraph verify` runs it once; `opsgraph serve` runs it on schedule (`schedule.rs`).
//!
//! A verification runs only on a resource whose latest operation completed: while one runs or
//! waits for repair, that operation owns the resource's state. All checks pass -> `running`;
//! any fails -> `degraded` with the failing checks as the reason. Each result joins the
//! resource's history; the document keeps the last one and what has been observed.

use std::collections::BTreeMap;
use std::sync::Arc;

use opsgraph_core::model::{
    Evidence, FailedCheck, Job, OperationStateKind, Resource, ResourceSpec, ResourceStatus, Verification,
};
use opsgraph_core::pack::Pack;
use opsgraph_core::plan::Plan;
use opsgraph_exec::{check_evidence, Cancel, EvidenceResult, Executor};
use opsgraph_store::{now, OperationFilter, OperationRecord, ResourceEventRecord, ResourceRecord, Write};
use serde_json::json;

use crate::attempt::Scratch;
use crate::masking::Masking;
use crate::report::{CheckRun, VerifyReport};
use crate::{Error, Runtime};

/// A check prepared to run: where, with what.
pub(crate) struct Prepared {
    pub(crate) instance: String,
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) env: BTreeMap<String, String>,
}

impl Runtime {
    /// The loaded pack and the verification its manifest declares for `type_`, if any.
    pub fn resource_spec(&self, type_: &str) -> Option<(&Pack, &ResourceSpec)> {
        self.packs.iter().find_map(|p| p.manifest.resource_spec(type_).map(|s| (p, s)))
    }

    /// Verifies resource `id` once, as `actor`: runs its checks, records the result on the
    /// resource and its history (and an audit row when a person asked, or the status changed).
    pub fn verify(&mut self, id: &str, actor: &str) -> Result<VerifyReport, Error> {
        let record = self.store.resource(id)?.ok_or_else(|| Error::NoResource(id.to_string()))?;
        let mut doc: Resource = serde_json::from_value(record.doc.clone())
            .map_err(|e| Error::Unsupported(format!("resource `{id}`: {e}")))?;
        let (pack, spec) = self.resource_spec(&doc.type_).ok_or_else(|| {
            Error::Unsupported(format!(
                "no loaded pack declares how to verify a `{}` (`resources:` in its pack.yaml)",
                doc.type_
            ))
        })?;
        let (pack, spec) = (pack.clone(), spec.clone());
        let (op, plan) = self.verifiable(id, &spec)?;
        let template = pack.templates.iter().find(|t| t.id == plan.template);
        let checks: Vec<Evidence> = spec
            .verify
            .iter()
            .chain(spec.observe.iter().filter(|e| !spec.verify.contains(e)))
            .filter_map(|e| pack.evidence.get(e))
            .map(for_verification)
            .collect();
        let inputs = self.gate_inputs(&op.id)?;
        let mut secrets = Vec::new();
        // Credentials and sealed artifacts the checks read, in plaintext while they run only: a
        // directory of this verification's own (another may run at once on this resource: a
        // person's and the schedule's), removed when it returns.
        let scratch = Scratch::new(&self.data_dir, &op.id, "verify");
        let mut prepared = Vec::new();
        for instance in plan.jobs.iter().filter(|j| spec.on.contains(&j.job) && j.skipped.is_none()) {
            let job: Job = template
                .and_then(|t| pack.job(t, &instance.job))
                .or_else(|| pack.jobs.get(&instance.job))
                .cloned()
                .ok_or_else(|| {
                    Error::Unsupported(format!("pack {} has no job `{}`", pack.reference(), instance.job))
                })?;
            prepared.push(Prepared {
                instance: instance.id.clone(),
                executor: self.executor_for(instance, &job),
                env: self.environment(&op, &plan, instance, &job, &inputs, &[], scratch.plain(), &mut secrets)?,
            });
        }
        let runs = run_checks(&checks, prepared, self.concurrency.max(1));
        let masking = Masking::new(secrets);
        let checks: Vec<CheckRun> = runs
            .into_iter()
            .map(|(instance, check, r)| {
                let (_, r) = masking.evidence(vec![(check.clone(), r)]).remove(0);
                CheckRun {
                    check: check.id.clone(),
                    on: instance,
                    passed: r.passed,
                    expected: r.expected,
                    observed: r.observed,
                    captured: r.captured,
                }
            })
            .collect();
        let before = doc.status;
        let status = if checks.iter().all(|c| c.passed) { ResourceStatus::Running } else { ResourceStatus::Degraded };
        observe(&mut doc.observed, checks.iter().filter(|c| spec.observe.contains(&c.check)));
        let at = now();
        doc.status = Some(status);
        doc.health = status.health();
        doc.verification = Some(Verification {
            at: at.clone(),
            checks: checks.len(),
            failed: checks
                .iter()
                .filter(|c| !c.passed)
                .map(|c| FailedCheck {
                    check: c.check.clone(),
                    on: c.on.clone(),
                    expected: c.expected.clone(),
                    observed: c.observed.clone(),
                })
                .collect(),
            operation: op.id.clone(),
        });
        let verified = VerifyReport {
            resource: id.to_string(),
            before,
            status,
            operation: op.id.clone(),
            checks,
            observed: doc.observed.clone(),
            repair: None,
        };
        doc.observed_state = Some(observed_state(&verified));
        let summary = verified.summary();
        let mut writes = vec![
            // An operation that started on it meanwhile owns its state: this result is dropped.
            Write::ExpectIdle { resource: id.to_string(), operation: String::new() },
            Write::Resource(ResourceRecord {
                id: id.to_string(),
                doc: serde_json::to_value(&doc).unwrap_or_default(),
                last_operation: record.last_operation.clone(),
                updated_at: at.clone(),
            }),
            Write::ResourceEvent(ResourceEventRecord {
                seq: 0,
                resource: id.to_string(),
                at,
                actor: actor.to_string(),
                kind: "verified".into(),
                status: status.as_str().into(),
                operation: Some(op.id.clone()),
                summary: summary.clone(),
                detail: json!({ "checks": verified.checks }),
            }),
        ];
        let by_person = !actor.starts_with("serve:");
        if by_person || before != Some(status) {
            writes.push(Write::Audit(crate::audit::record(
                actor,
                "resource.verify",
                id,
                Some(&op.id),
                Some(id),
                json!({ "from": before.map(ResourceStatus::as_str), "to": status.as_str(), "summary": summary }),
            )));
        }
        self.store.commit(&writes).map_err(|e| match e {
            opsgraph_store::Error::ResourceBusy { resource, operation, state } => {
                Error::Busy { resource, operation, state }
            }
            e => Error::Store(e),
        })?;
        let mut verified = verified;
        if status == ResourceStatus::Degraded && before != Some(ResourceStatus::Degraded) {
            verified.repair = Some(self.on_drift(&verified, actor)?);
        }
        Ok(verified)
    }

    /// Right after operation `id` completed: its resource is verified at once when its type
    /// declares a verification, so its observed state is what the checks saw, not what the run
    /// did. A verification that cannot run leaves the completion as it is.
    pub(crate) fn verify_completed(&mut self, id: &str) {
        let Ok(Some(op)) = self.store.operation(id) else { return };
        let Some(resource) = op.resource else { return };
        let Ok(Some(record)) = self.store.resource(&resource) else { return };
        let declared = record.doc["type"].as_str().is_some_and(|t| self.resource_spec(t).is_some());
        if declared {
            let actor = self.actor.clone();
            let _ = self.verify(&resource, &actor);
        }
    }

    /// The completed operation (newest first) whose plan gives the checks their place, with its
    /// plan; refused while an operation on the resource has not completed.
    fn verifiable(&self, id: &str, spec: &ResourceSpec) -> Result<(OperationRecord, Plan), Error> {
        let mut ops = self.store.operations(&OperationFilter { state: None, resource: Some(id.to_string()) })?;
        ops.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
        let mut ops = ops.into_iter().peekable();
        match ops.peek() {
            None => return Err(Error::Unsupported(format!("`{id}` has no operation to verify it against"))),
            Some(o)
                if o.state.kind() != OperationStateKind::Completed
                    && o.state.kind() != OperationStateKind::Cancelled =>
            {
                return Err(Error::Busy {
                    resource: id.to_string(),
                    operation: o.id.clone(),
                    state: opsgraph_core::plan::lifecycle::state_name(o.state.kind()).to_string(),
                })
            }
            Some(_) => {}
        }
        // A rollback of a day-2 action leaves the operations before it in place: the checks run
        // where they ran before the undone one. A rollback of what created it ends the search.
        let life: Vec<String> =
            crate::manage::completed_plans(&*self.store, id)?.into_iter().map(|(o, _)| o.id).collect();
        for op in ops.filter(|o| o.state.kind() == OperationStateKind::Completed) {
            let (op, plan) = self.load(&op.id)?;
            if plan.action == "rollback" {
                if plan.rolls_back.as_ref().is_some_and(|undone| !life.contains(undone)) && !life.is_empty() {
                    continue;
                }
                return Err(Error::Unsupported(format!("`{id}` was rolled back by operation {}", op.id)));
            }
            if !life.contains(&op.id) {
                continue;
            }
            if plan.jobs.iter().any(|j| spec.on.contains(&j.job)) {
                return Ok((op, plan));
            }
        }
        Err(Error::Unsupported(format!(
            "no completed operation of `{id}` ran job `{}`, where its checks run",
            spec.on.join("` or `")
        )))
    }
}

/// A check as a verification runs it: once more at most after a failure, a second later. A
/// job's evidence may wait for a service to come up (`retries: 20`, `interval: 3s`); a
/// verification asks whether it is up now, and must answer well within its interval. The one
/// retry keeps a blip (a check racing a heartbeat) from flapping the resource.
pub(crate) fn for_verification(e: &Evidence) -> Evidence {
    let mut e = e.clone();
    if e.retries.is_some_and(|r| r > 0) {
        e.retries = Some(1);
        e.interval = Some("1s".into());
    }
    e
}

/// Every check on every prepared instance, `limit` instances at a time; results in the order of
/// instances, then checks.
pub(crate) fn run_checks(
    checks: &[Evidence],
    prepared: Vec<Prepared>,
    limit: usize,
) -> Vec<(String, Evidence, EvidenceResult)> {
    let mut out = Vec::new();
    for chunk in prepared.chunks(limit) {
        let results: Vec<Vec<(String, Evidence, EvidenceResult)>> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|p| {
                    s.spawn(move || {
                        // Checks only, below the control plane (`opsgraph_exec::job_thread`).
                        opsgraph_exec::job_thread();
                        let cancel = Cancel::new();
                        checks
                            .iter()
                            .map(|c| (p.instance.clone(), c.clone(), check_evidence(c, &*p.executor, &p.env, &cancel)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
        });
        out.extend(results.into_iter().flatten());
    }
    out
}

/// Merges what the observing checks captured into `observed`: a value every host agrees on
/// under its name (`version`), else one per host (`version@fleet-2`), replacing what an earlier
/// verification saw under either form. A failed check captured nothing and changes nothing.
fn observe<'a>(observed: &mut BTreeMap<String, String>, checks: impl Iterator<Item = &'a CheckRun>) {
    let mut seen: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    for c in checks {
        let host = c.on.split_once('@').map(|(_, r)| r.rsplit('/').next().unwrap_or(r)).unwrap_or("");
        for (name, value) in &c.captured {
            seen.entry(name).or_default().push((host, value));
        }
    }
    for (name, values) in seen {
        observed.retain(|k, _| k != name && !k.starts_with(&format!("{name}@")));
        if values.iter().all(|(_, v)| *v == values[0].1) {
            observed.insert(name.to_string(), values[0].1.to_string());
        } else {
            for (host, value) in values {
                observed.insert(format!("{name}@{host}"), value.to_string());
            }
        }
    }
}

/// One line for `observed_state`: the observed values, then the verification's verdict.
fn observed_state(v: &VerifyReport) -> String {
    let values: Vec<String> = v.observed.iter().map(|(k, val)| format!("{k}={val}")).collect();
    if values.is_empty() {
        return v.summary();
    }
    format!("{}; {}", values.join(", "), v.summary())
}
