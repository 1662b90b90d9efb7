//! What attempts and operations leave in the store besides their records: evidence, artifacts,
//! and the resource an operation completed or failed.

use std::collections::BTreeMap;

use opsgraph_core::model::{Health, ProvidedCapability, Resource, ResourceStatus};
use opsgraph_core::pack::Pack;
use opsgraph_core::plan::{JobInstance, Plan};
use opsgraph_store::{
    now, ArtifactRecord, EvidenceRecord, OperationRecord, ResourceEventRecord, ResourceRecord, Write,
};
use serde_json::Value;

use crate::jobs;
use crate::task::TaskResult;
use crate::{Error, Runtime};

impl Runtime {
    /// Evidence records and stored artifacts of one attempt.
    pub(crate) fn result_writes(
        &self,
        op: &OperationRecord,
        instance: &JobInstance,
        r: &TaskResult,
        writes: &mut Vec<Write>,
    ) -> Result<(), Error> {
        // What the checks prove: the capabilities the job provides, on its resource (or the
        // operation's target when the job runs once).
        let provisions = self
            .packs
            .iter()
            .find_map(|p| p.jobs.get(&instance.job))
            .map(|j| j.outputs.provides.capabilities.clone())
            .unwrap_or_default();
        let proves: Vec<String> = provisions.iter().map(|c| c.capability.clone()).collect();
        let capability = (!proves.is_empty()).then(|| proves.join(", "));
        // A capability provided in a scope belongs to the resource the job ran on; one provided
        // unscoped belongs to what the operation creates or changes.
        let resource = if provisions.iter().any(|c| c.scope.is_none()) {
            op.resource.clone().or_else(|| instance.resource.clone())
        } else {
            instance.resource.clone().or_else(|| op.resource.clone())
        };
        for (check, result) in &r.evidence {
            writes.push(Write::Evidence(EvidenceRecord {
                operation: op.id.clone(),
                job: r.instance.clone(),
                check: check.id.clone(),
                source: serde_json::to_value(check.source)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                command: check
                    .command
                    .as_ref()
                    .map(ToString::to_string)
                    .or_else(|| check.url.clone())
                    .or_else(|| check.path.clone())
                    .or_else(|| check.host.as_ref().map(|h| format!("{h}:{}", check.port.unwrap_or(0))))
                    .unwrap_or_default(),
                expected: result.expected.clone(),
                observed: result.observed.clone(),
                passed: result.passed,
                at: now(),
                resource: resource.clone(),
                capability: capability.clone(),
            }));
        }
        if r.failure.is_none() {
            for (id, path) in &r.produced {
                let sensitivity = self
                    .packs
                    .iter()
                    .find_map(|p| p.artifacts.get(id))
                    .and_then(|a| serde_json::to_value(a.sensitivity).ok())
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_else(|| "internal".into());
                // Secret artifacts are sealed before they are stored; the plaintext file goes.
                let (location, size) = if sensitivity == "secret" {
                    self.seal_artifact(path, &crate::secrets::artifact_aad(&op.id, &r.instance, id))?
                } else {
                    jobs::store_blob(&*self.blobs, path)
                        .map_err(|source| Error::Io { path: path.display().to_string(), source })?
                };
                crate::failpoint::hit("artifact.stored");
                writes.push(Write::Artifact(ArtifactRecord {
                    operation: op.id.clone(),
                    job: r.instance.clone(),
                    id: id.clone(),
                    sensitivity,
                    location,
                    size,
                    at: now(),
                }));
            }
        }
        Ok(())
    }

    fn resource_doc(&self, plan: &Plan) -> Option<Resource> {
        let id = Runtime::target_resource(&plan.intent)?;
        let existing =
            self.store.resource(&id).ok().flatten().and_then(|r| serde_json::from_value::<Resource>(r.doc).ok());
        Some(existing.unwrap_or_else(|| Resource {
            id: id.clone(),
            type_: plan.intent.target_resource_type.clone(),
            name: plan.intent.name.clone().unwrap_or_default(),
            environment: plan.intent.environment.clone(),
            attributes: plan.intent.constraints.clone(),
            status: Some(ResourceStatus::Provisioning),
            ..Default::default()
        }))
    }

    /// The resource an operation is about to change ([I]): a new one exists from now on as
    /// `provisioning`; an existing one keeps its state and is linked to the operation. With an
    /// entry of its history.
    pub(crate) fn start_writes(&self, op_id: &str, plan: &Plan, actor: &str) -> Vec<Write> {
        let Some(doc) = self.resource_doc(plan) else { return vec![] };
        let summary = format!("{} {}", plan.action, doc.id);
        left_as(&doc, op_id, actor, "operation.started", summary, Value::Null)
    }

    /// The resource an operation completed: its capabilities, desired and observed state, health.
    pub(crate) fn completion_writes(
        &self,
        op: &OperationRecord,
        plan: &Plan,
        pack: &Pack,
    ) -> Result<Vec<Write>, Error> {
        let Some(mut doc) = self.resource_doc(plan) else { return Ok(vec![]) };
        if plan.action == "rollback" {
            if let Some(writes) = self.back_to_record(&doc, op, plan)? {
                return Ok(writes);
            }
            // Undone: it provides nothing any more, and nobody has observed it since.
            doc.provides.clear();
            doc.credentials.clear();
            doc.desired_state = Some("rolled back".into());
            doc.observed_state = Some(format!("rolled back by operation {}: {} jobs undone", op.id, plan.jobs.len()));
            doc.health = Health::Unknown;
            doc.status = None;
            doc.observed.clear();
            doc.verification = None;
            return Ok(left_as(&doc, &op.id, &op.actor, "operation.completed", "rolled back".into(), Value::Null));
        }
        if plan.removes_resource {
            // Removed (`uninstall`): nothing is running any more; the record goes, its history
            // stays, and a later install starts a new life.
            let summary = format!("removed by {} (operation {})", plan.action, op.id);
            return Ok(vec![
                Write::DeleteResource(doc.id.clone()),
                history(&doc.id, &op.actor, "operation.completed", "removed", &op.id, summary, Value::Null),
            ]);
        }
        // What it provides: the template's `provides`; a template without one provides the
        // pack's only when it creates the resource — a day-2 action (backup, restore) adds none.
        let template = pack.templates.iter().find(|t| t.id == plan.template);
        let creates = match crate::manage::completed_plans(&*self.store, &doc.id)?.first() {
            Some((_, first)) => first.action == plan.action,
            None => true,
        };
        let provisions = match template.map(|t| t.provides.clone()).filter(|p| !p.is_empty()) {
            Some(own) => own,
            None if creates => pack.manifest.provides.clone(),
            None => Vec::new(),
        };
        let artifacts = self.store.artifacts(&op.id)?;
        for p in provisions {
            // The credentials to use it: a reference to the artifact, never its content.
            if let Some(a) = p.credentials.as_ref().filter(|a| artifacts.iter().any(|r| r.id == **a)) {
                doc.credentials.insert(p.capability.clone(), format!("artifact:{}/{a}", op.id));
            }
            if !doc.provides.iter().any(|c| c.capability == p.capability) {
                doc.provides.push(ProvidedCapability { capability: p.capability, attributes: p.attributes });
            }
        }
        let evidence = self.store.evidence(&op.id)?;
        let passed = evidence.iter().filter(|e| e.passed).count();
        doc.desired_state = plan
            .intent
            .desired_result
            .clone()
            .or_else(|| Some(format!("{} {}", plan.action, plan.intent.target_resource_type)));
        // What the run's evidence proved; the values its pack observes come from the
        // verification that follows a completed operation (`verify.rs`).
        let summary = format!("completed: {passed} evidence checks passed");
        Ok(running_again(doc, op, summary))
    }

    /// A completed rollback of a day-2 action ([I] 6): the operations before the one it undid
    /// still make up the resource, which is running again as they left it (its capabilities
    /// kept; its observed values cleared until the verification that follows the completion).
    /// `None` when the rollback undid what created the resource.
    fn back_to_record(&self, doc: &Resource, op: &OperationRecord, plan: &Plan) -> Result<Option<Vec<Write>>, Error> {
        let Some(undone) = &plan.rolls_back else { return Ok(None) };
        let before = crate::manage::completed_plans(&*self.store, &doc.id)?;
        match before.first() {
            Some((first, _)) if first.id != *undone => {}
            _ => return Ok(None),
        }
        let mut doc = doc.clone();
        let summary = format!("rolled back {undone}: {} jobs undone", plan.jobs.len());
        doc.desired_state = Some(format!("as before operation {undone}"));
        doc.observed.clear();
        doc.verification = None;
        Ok(Some(running_again(doc, op, summary)))
    }

    /// An operation cancelled while it was creating its resource ([I]): a resource nothing was
    /// done to is forgotten; one whose jobs ran is in an unknown, partial state: `error`.
    pub(crate) fn cancel_writes(&self, op: &OperationRecord, actor: &str) -> Result<Vec<Write>, Error> {
        let Some(id) = &op.resource else { return Ok(vec![]) };
        let Some(record) = self.store.resource(id)? else { return Ok(vec![]) };
        let Ok(mut doc) = serde_json::from_value::<Resource>(record.doc) else { return Ok(vec![]) };
        if doc.status != Some(ResourceStatus::Provisioning) || record.last_operation.as_deref() != Some(op.id.as_str())
        {
            return Ok(vec![]);
        }
        let ran = self.store.jobs(&op.id)?.iter().any(|j| j.attempts > 0);
        if !ran {
            let summary = "cancelled before any job ran: the resource was never created".to_string();
            return Ok(vec![
                Write::DeleteResource(id.clone()),
                history(
                    id,
                    actor,
                    "operation.cancelled",
                    ResourceStatus::Provisioning.as_str(),
                    &op.id,
                    summary,
                    Value::Null,
                ),
            ]);
        }
        let summary = format!("operation {} was cancelled while creating it: partly provisioned", op.id);
        doc.status = Some(ResourceStatus::Error);
        doc.health = Health::Error;
        doc.observed_state = Some(summary.clone());
        Ok(left_as(&doc, &op.id, actor, "operation.cancelled", summary, Value::Null))
    }

    pub(crate) fn failure_writes(&self, op: &OperationRecord, plan: &Plan, reason: &str) -> Result<Vec<Write>, Error> {
        let Some(mut doc) = self.resource_doc(plan) else { return Ok(vec![]) };
        doc.health = Health::Error;
        doc.status = Some(ResourceStatus::Error);
        // The failing checks are the reason, when evidence failed; else the job's failure.
        // Each failing check once, as its latest attempt saw it (a retried job records its checks
        // again); the failure's own attempt may still be in this transaction, and then its reason
        // is in the summary.
        let mut latest: BTreeMap<(String, String), EvidenceRecord> = BTreeMap::new();
        for e in self.store.evidence(&op.id)? {
            latest.insert((e.job.clone(), e.check.clone()), e);
        }
        let failed: Vec<Value> = latest
            .into_values()
            .filter(|e| !e.passed)
            .map(|e| serde_json::json!({"check": e.check, "on": e.job, "expected": e.expected, "observed": e.observed}))
            .collect();
        let summary = format!("operation {} failed: {reason}", op.id);
        doc.observed_state = Some(summary.clone());
        Ok(left_as(&doc, &op.id, &op.actor, "operation.failed", summary, serde_json::json!({"failed": failed})))
    }
}

/// The resource's record as an operation leaves it.
fn resource_write(doc: &Resource, op: &str) -> Write {
    Write::Resource(ResourceRecord {
        id: doc.id.clone(),
        doc: serde_json::to_value(doc).unwrap_or(Value::Null),
        last_operation: Some(op.to_string()),
        updated_at: now(),
    })
}

/// The resource's record as operation `op` leaves it, with the entry of its history that says so
/// (`kind`, and the record's status: `provisioning` while it has none).
fn left_as(doc: &Resource, op: &str, actor: &str, kind: &str, summary: String, detail: Value) -> Vec<Write> {
    let status = doc.status.unwrap_or(ResourceStatus::Provisioning);
    vec![resource_write(doc, op), history(&doc.id, actor, kind, status.as_str(), op, summary, detail)]
}

/// A completed operation leaves `doc` running and healthy, `summary` its observed state: the
/// resource's write and its history entry.
fn running_again(mut doc: Resource, op: &OperationRecord, summary: String) -> Vec<Write> {
    doc.observed_state = Some(summary.clone());
    doc.health = Health::Healthy;
    doc.status = Some(ResourceStatus::Running);
    left_as(&doc, &op.id, &op.actor, "operation.completed", summary, Value::Null)
}

/// An entry of a resource's history for an operation.
fn history(resource: &str, actor: &str, kind: &str, status: &str, op: &str, summary: String, detail: Value) -> Write {
    Write::ResourceEvent(ResourceEventRecord {
        seq: 0,
        resource: resource.to_string(),
        at: now(),
        actor: actor.to_string(),
        kind: kind.to_string(),
        status: status.to_string(),
        operation: Some(op.to_string()),
        summary,
        detail,
    })
}
