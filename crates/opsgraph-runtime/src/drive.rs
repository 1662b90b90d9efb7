//! Creating an operation and driving it: the dispatcher loop.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opsgraph_core::model::{GateType, Health, OperationState, ProvidedCapability, Resource, ResourceStatus};
use opsgraph_core::pack::Pack;
use opsgraph_core::plan::lifecycle::{self, state_name, Event};
use opsgraph_core::plan::{JobInstance, Plan};
use opsgraph_exec::{Cancel, Executor, LocalExecutor, Program, SshExecutor};
use opsgraph_store::{
    now, ArtifactRecord, EvidenceRecord, GateRecord, JobRecord, JobState, OperationFilter, OperationRecord,
    ResourceRecord, TimelineEntry, Write,
};
use serde_json::{json, Value};

use crate::jobs::{self, artifact_env, param_text, render_key, Task, TaskResult};
use crate::{new_operation_id, Error, Runtime};

/// What the driver reports as it goes: each timeline entry once it is committed.
pub type Progress<'a> = &'a mut dyn FnMut(&TimelineEntry);

pub(crate) fn entry(op: &str, actor: &str, event: &str, reason: impl Into<String>, data: Value) -> TimelineEntry {
    TimelineEntry {
        seq: 0,
        operation: op.to_string(),
        at: now(),
        actor: actor.to_string(),
        event: event.to_string(),
        from: None,
        to: None,
        reason: reason.into(),
        data,
    }
}

/// Gates answered before the run starts; the others block their descendants mid-run.
pub(crate) fn is_pre_run(source: &str) -> bool {
    matches!(source, "resolution" | "risk" | "missing_input" | "policy" | "cost")
}

pub(crate) fn is_input_gate(t: GateType) -> bool {
    matches!(t, GateType::MissingInput | GateType::ProviderSelection)
}

/// What follows capability resolution: wait for input, then for approval, then run.
fn resolution_event(plan: &Plan, answered: &HashSet<String>) -> (Event, String) {
    let open = |input: bool| -> Vec<String> {
        plan.gates
            .iter()
            .filter(|g| is_pre_run(&g.source) && is_input_gate(g.type_) == input && !answered.contains(&g.id))
            .map(|g| g.id.clone())
            .collect()
    };
    let (inputs, approvals) = (open(true), open(false));
    if !inputs.is_empty() {
        let reason = format!("waiting for input at {}", inputs.join(", "));
        (Event::NeedInput { gates: inputs }, reason)
    } else if !approvals.is_empty() {
        let reason = format!("waiting for approval at {}", approvals.join(", "));
        (Event::NeedApproval { gates: approvals }, reason)
    } else {
        (Event::Start, "no approval needed".to_string())
    }
}

impl Runtime {
    /// Applies a lifecycle event and commits the new state, its timeline entry and `extra` in one
    /// transaction. Returns the new record.
    /// The write of a lifecycle transition (state, version check, timeline entry), not committed.
    pub(crate) fn transition_write(
        op: &OperationRecord,
        event: &Event,
        actor: &str,
        reason: &str,
    ) -> Result<(OperationRecord, Write, TimelineEntry), Error> {
        let (state, _effects) = lifecycle::apply(&op.state, event)?;
        let mut e = entry(&op.id, actor, event.name(), reason, serde_json::to_value(event).unwrap_or(Value::Null));
        e.from = Some(state_name(op.state.kind()).to_string());
        e.to = Some(state_name(state.kind()).to_string());
        let write = Write::Transition {
            operation: op.id.clone(),
            expect_version: op.version,
            state: state.clone(),
            entry: e.clone(),
        };
        let mut next = op.clone();
        next.state = state;
        next.version += 1;
        Ok((next, write, e))
    }

    pub(crate) fn transition(
        &mut self,
        op: &OperationRecord,
        event: Event,
        actor: &str,
        reason: &str,
        extra: Vec<Write>,
        progress: Progress<'_>,
    ) -> Result<OperationRecord, Error> {
        let (next, write, e) = Runtime::transition_write(op, &event, actor, reason)?;
        let mut writes = vec![write];
        writes.extend(extra);
        if let Err(err) = self.commit(&writes) {
            // Someone else moved the operation first (a person cancelled or paused it): what this
            // writer observed — job results, evidence — is still true and is kept.
            // An audit record alone is not kept: it describes the change that was refused.
            let observed = writes[1..].iter().any(|w| !matches!(w, Write::Audit(_)));
            if matches!(err, opsgraph_store::Error::Conflict { .. }) && observed {
                self.commit(&writes[1..])?;
                for w in &writes[1..] {
                    if let Write::Timeline(t) = w {
                        progress(t);
                    }
                }
            }
            return Err(err.into());
        }
        crate::failpoint::hit("transition.committed");
        progress(&e);
        for w in &writes[1..] {
            if let Write::Timeline(t) = w {
                progress(t);
            }
        }
        Ok(next)
    }

    pub(crate) fn commit_timeline(&mut self, writes: Vec<Write>, progress: Progress<'_>) -> Result<(), Error> {
        if writes.is_empty() {
            return Ok(());
        }
        self.commit(&writes)?;
        for w in &writes {
            if let Write::Timeline(t) = w {
                progress(t);
            }
        }
        Ok(())
    }

    /// Records an operation for a plan and takes it as far as it goes without running anything:
    /// to `running`, or to a wait for input or approval.
    pub fn create(&mut self, plan: &Plan, actor: &str, progress: Progress<'_>) -> Result<String, Error> {
        // Providers the resolution creates run first, as child operations, once the run starts
        // (after every gate before the run is answered: a cost or approval gate also guards them).
        let attached = self.take_attached();
        self.create_operation(plan, None, new_operation_id(), attached, actor, progress)
    }

    /// Records a child operation that creates `provider` for `requirement` of `parent`; the
    /// child and the parent's note of it are one transaction.
    pub(crate) fn start_sub_operation(
        &mut self,
        parent: &str,
        requirement: &str,
        provider: &str,
        plan: &Plan,
        actor: &str,
        progress: Progress<'_>,
    ) -> Result<String, Error> {
        let child = new_operation_id();
        let note = entry(
            parent,
            actor,
            "sub_operation_created",
            format!(
                "{requirement}: provider {provider} is created by operation {child} ({} {})",
                plan.action, plan.pack
            ),
            json!({"child": child, "requirement": requirement, "provider": provider}),
        );
        self.create_operation(plan, Some(parent), child, vec![Write::Timeline(note)], actor, progress)
    }

    pub(crate) fn create_operation(
        &mut self,
        plan: &Plan,
        parent: Option<&str>,
        id: String,
        extra: Vec<Write>,
        actor: &str,
        progress: Progress<'_>,
    ) -> Result<String, Error> {
        if plan.is_blocked() {
            let reasons: Vec<String> = plan
                .resolution
                .iter()
                .filter_map(|r| match &r.outcome {
                    opsgraph_core::plan::Outcome::Unsatisfiable { reason } => {
                        Some(format!("{}: {reason}", r.requirement.capability))
                    }
                    _ => None,
                })
                .collect();
            return Err(Error::Blocked(reasons.join("; ")));
        }
        let resource = Runtime::target_resource(&plan.intent);
        if let Some(resource) = &resource {
            let busy = self.store.operations(&OperationFilter { state: None, resource: Some(resource.clone()) })?;
            if let Some(other) = busy.iter().find(|o| !lifecycle::is_terminal(&o.state)) {
                return Err(Error::Busy {
                    resource: resource.clone(),
                    operation: other.id.clone(),
                    state: state_name(other.state.kind()).to_string(),
                });
            }
        }
        // Secret parameter values are stored sealed (in the plan and in the intent).
        let mut stored = plan.clone();
        self.seal_plan(&mut stored)?;
        let at = now();
        let record = OperationRecord {
            id: id.clone(),
            parent: parent.map(str::to_string),
            intent: serde_json::to_value(&stored.intent).unwrap_or(Value::Null),
            resource,
            state: OperationState::DraftIntent,
            plan_revision: plan.revision.hash.clone(),
            actor: actor.to_string(),
            created_at: at.clone(),
            updated_at: at.clone(),
            version: 0,
        };
        let mut writes = vec![
            Write::CreateOperation { op: record.clone(), plan: serde_json::to_value(&stored).unwrap_or(Value::Null) },
            Write::Timeline(entry(
                &id,
                actor,
                "created",
                format!("{} {} from {}", plan.action, plan.pack, plan.template),
                json!({"revision": plan.revision.hash}),
            )),
        ];
        for j in &plan.jobs {
            writes.push(Write::Job(JobRecord {
                operation: id.clone(),
                id: j.id.clone(),
                // Skipped by a patch to the preview: done without running.
                state: if j.skipped.is_some() { JobState::Skipped } else { JobState::Pending },
                attempts: 0,
                outcome: Value::Null,
                updated_at: at.clone(),
            }));
        }
        for g in &plan.gates {
            writes.push(Write::Gate(GateRecord {
                operation: id.clone(),
                id: g.id.clone(),
                gate_type: g.type_.to_string(),
                reason: g.reason.clone(),
                options: g.options.clone(),
                required_roles: g.required_roles.clone(),
                answer: None,
                answered_by: None,
                answered_at: None,
                value: None,
            }));
        }
        // The inventory entries the plan runs on are kept, so later commands reach them without
        // being given the inventory again.
        let targets: HashSet<&str> = plan.jobs.iter().filter_map(|j| j.resource.as_deref()).collect();
        for r in self.resources.iter().filter(|r| targets.contains(r.id.as_str())) {
            if self.store.resource(&r.id)?.is_none() {
                writes.push(Write::Resource(ResourceRecord {
                    id: r.id.clone(),
                    doc: serde_json::to_value(r).unwrap_or(Value::Null),
                    last_operation: None,
                    updated_at: at.clone(),
                }));
            }
        }
        // The record and every step up to running (or a wait for a person) are one transaction:
        // a crash never leaves an operation half created.
        let (event, reason) = resolution_event(plan, &HashSet::new());
        let mut op = record;
        for (event, reason) in [
            (Event::PlanBuilt, "plan preview built".to_string()),
            (Event::Resolve, "capabilities resolved".to_string()),
            (event, reason),
        ] {
            let (next, write, _) = Runtime::transition_write(&op, &event, actor, &reason)?;
            writes.push(write);
            op = next;
        }
        writes.extend(extra);
        if let Some(resource) = &op.resource {
            // Checked again inside the transaction: another replica may be creating one too.
            writes.insert(0, Write::ExpectIdle { resource: resource.clone(), operation: id.clone() });
        }
        self.commit(&writes).map_err(|e| match e {
            opsgraph_store::Error::ResourceBusy { resource, operation, state } => {
                Error::Busy { resource, operation, state }
            }
            e => Error::Store(e),
        })?;
        crate::failpoint::hit("operation.created");
        for w in &writes {
            match w {
                Write::Timeline(e) | Write::Transition { entry: e, .. } => progress(e),
                _ => {}
            }
        }
        Ok(id)
    }

    /// From capability resolution: wait for input, then approval, then run.
    pub(crate) fn after_resolution(
        &mut self,
        op: &OperationRecord,
        plan: &Plan,
        actor: &str,
        progress: Progress<'_>,
    ) -> Result<OperationRecord, Error> {
        let answered: HashSet<String> =
            self.store.gates(&op.id)?.into_iter().filter(|g| g.answer.is_some()).map(|g| g.id).collect();
        let (event, reason) = resolution_event(plan, &answered);
        self.transition(op, event, actor, &reason, vec![], progress)
    }

    pub(crate) fn load(&self, id: &str) -> Result<(OperationRecord, Plan), Error> {
        let op = self.store.operation(id)?.ok_or_else(|| Error::NoOperation(id.to_string()))?;
        let plan = self.store.plan(&op.plan_revision)?.ok_or_else(|| Error::Plan(op.plan_revision.clone()))?;
        let plan: Plan = serde_json::from_value(plan).map_err(|_| Error::Plan(op.plan_revision.clone()))?;
        Ok((op, plan))
    }

    /// The pack version the plan was made from (`id@version`; several versions may be loaded).
    /// When the plan recorded a digest, the loaded pack must have it: an operation runs the
    /// files that were planned and approved, not whatever now carries the same version.
    pub(crate) fn pack(&self, plan: &Plan) -> Result<&Pack, Error> {
        let same = self.packs.iter().filter(|p| p.reference() == plan.pack);
        let mut first = None;
        for p in same {
            match plan.pack_digest.as_deref() {
                Some(d) if p.digest != d => first = first.or(Some(p)),
                _ => return Ok(p),
            }
        }
        match (first, plan.pack_digest.as_deref()) {
            (Some(p), Some(d)) => {
                Err(Error::PackChanged { pack: plan.pack.clone(), planned: d.to_string(), loaded: p.digest.clone() })
            }
            _ => Err(Error::NoPack(plan.pack.clone())),
        }
    }

    /// Where an instance runs: locally when it has no resource, its resource is this machine or
    /// the job says `executor: local`; over SSH when its resource has SSH access; else nowhere
    /// (the attempt fails as "could not start" rather than running on the wrong machine).
    pub(crate) fn executor_for(&self, instance: &JobInstance, job: &opsgraph_core::model::Job) -> Arc<dyn Executor> {
        use opsgraph_core::model::ExecutorKind;
        let stored: Option<Resource> = instance.resource.as_ref().and_then(|id| {
            if self.resources.iter().any(|r| r.id == *id) {
                return None;
            }
            self.store.resource(id).ok().flatten().and_then(|r| serde_json::from_value(r.doc).ok())
        });
        let resource =
            instance.resource.as_ref().and_then(|id| self.resources.iter().find(|r| r.id == *id)).or(stored.as_ref());
        let wants = job.run.as_ref().and_then(|r| r.executor);
        let access = resource.and_then(|r| r.access.as_ref());
        let ssh = access.and_then(|a| a.ssh.as_ref());
        let local = instance.resource.is_none() || access.is_some_and(|a| a.local);
        match (wants, ssh) {
            (Some(ExecutorKind::Http), _) => Arc::new(opsgraph_exec::HttpExecutor),
            (Some(ExecutorKind::Local), _) => Arc::new(LocalExecutor),
            (Some(ExecutorKind::Ssh) | None, Some(ssh)) => Arc::new(SshExecutor {
                host: ssh.host.clone(),
                port: ssh.port,
                user: ssh.user.clone(),
                key: ssh.key.as_ref().map(PathBuf::from),
                known_hosts: ssh.known_hosts.as_ref().map(PathBuf::from),
                control_dir: Some(self.data_dir.join("ssh")),
            }),
            (None, None) if local => Arc::new(LocalExecutor),
            (Some(ExecutorKind::Ssh) | None, None) => Arc::new(Unreachable(format!(
                "{} has no {}access in the inventory",
                instance.resource.as_deref().unwrap_or("the control host"),
                if wants == Some(ExecutorKind::Ssh) { "SSH " } else { "" }
            ))),
        }
    }

    /// The environment of a job instance: parameters, target, operation, artifacts it requires.
    #[expect(clippy::too_many_arguments, reason = "the inputs of one job's environment, each distinct")]
    pub(crate) fn environment(
        &self,
        op: &OperationRecord,
        plan: &Plan,
        instance: &JobInstance,
        job: &opsgraph_core::model::Job,
        inputs: &BTreeMap<String, Value>,
        pending: &[ArtifactRecord],
        secrets: &mut Vec<Vec<u8>>,
    ) -> Result<BTreeMap<String, String>, Error> {
        let mut env = BTreeMap::new();
        let secret_params = self.secret_params(plan);
        let private = self.data_dir.join("runs").join(&op.id).join("secrets").join(&instance.id);
        for (k, v) in job
            .inputs
            .parameters
            .iter()
            .chain(plan.parameters.iter())
            .chain(inputs.iter())
            .chain(instance.parameters.iter())
        {
            let text = if secret_params.contains(k.as_str()) && crate::secrets::is_sealed(v) {
                let aad = format!("param:{}/{k}", plan.revision.hash);
                let plain = self.open_text(v.as_str().unwrap_or_default(), &aad)?;
                String::from_utf8_lossy(plain.expose()).into_owned()
            } else {
                param_text(v)
            };
            if secret_params.contains(k.as_str()) {
                secrets.push(text.as_bytes().to_vec());
            }
            env.insert(opsgraph_exec::param_env(k), text);
        }
        // What each external requirement is bound to: OPSGRAPH_BINDING_<CAPABILITY>_RESOURCE and
        // one variable per attribute of the bound capability and resource.
        for (capability, resource) in self.bindings(&op.id, plan)? {
            let prefix = format!("OPSGRAPH_BINDING_{}", env_word(&capability));
            let doc = self.resource_by_id(&resource);
            env.insert(format!("{prefix}_RESOURCE"), resource.clone());
            if let Some(reference) = doc.as_ref().and_then(|d| d.credentials.get(&capability)) {
                // An unusable reference does not stop the driver: the job is told why, and fails
                // with that reason when it needs the credentials.
                match self.credentials_path(reference, &private, secrets) {
                    Ok(path) => {
                        if capability == "kubernetes.cluster" {
                            env.insert("KUBECONFIG".into(), path.clone());
                        }
                        env.insert(format!("{prefix}_CREDENTIALS"), path);
                    }
                    Err(e) => {
                        env.insert(format!("{prefix}_CREDENTIALS_ERROR"), e.to_string());
                    }
                }
            }
            if let Some(doc) = doc {
                let provided = doc.provides.iter().find(|c| c.capability == capability).map(|c| &c.attributes);
                for (k, v) in doc.attributes.iter().chain(provided.into_iter().flatten()) {
                    env.insert(format!("{prefix}_{}", env_word(k)), param_text(v));
                }
            }
        }
        env.insert("OPSGRAPH_OPERATION_ID".into(), op.id.clone());
        env.insert("OPSGRAPH_JOB_ID".into(), instance.id.clone());
        if let Some(name) = &plan.intent.name {
            env.insert("OPSGRAPH_INTENT_NAME".into(), name.clone());
        }
        if let Some(r) = &instance.resource {
            env.insert("OPSGRAPH_TARGET_ID".into(), r.clone());
            env.insert("OPSGRAPH_TARGET_NAME".into(), r.rsplit('/').next().unwrap_or(r).to_string());
        }
        let lab = self.data_dir.join("lab");
        env.insert("OPSGRAPH_LAB_DIR".into(), lab.display().to_string());
        // Required artifacts: the file of the dependency that produced it (on the same resource
        // when there is one).
        if job.inputs.requires.artifacts.is_empty() {
            return Ok(env);
        }
        let mut artifacts = self.store.artifacts(&op.id)?;
        artifacts.extend(pending.iter().cloned());
        for a in &job.inputs.requires.artifacts {
            let mut candidates: Vec<&ArtifactRecord> =
                artifacts.iter().filter(|r| r.id == *a && instance.depends_on.contains(&r.job)).collect();
            candidates.sort_by_key(|r| {
                let same = plan.jobs.iter().find(|j| j.id == r.job).is_some_and(|j| j.resource == instance.resource);
                !same
            });
            if let Some(r) = candidates.first() {
                env.insert(artifact_env(a), self.artifact_file(r, &private, secrets)?);
            }
        }
        Ok(env)
    }

    /// Requirement -> bound resource id: bound at planning, chosen at a gate, or created by a
    /// sub-operation.
    fn bindings(&self, op: &str, plan: &Plan) -> Result<Vec<(String, String)>, Error> {
        let mut out = Vec::new();
        let answers: HashMap<String, String> = if plan.gates.is_empty() {
            HashMap::new()
        } else {
            self.store.gates(op)?.into_iter().filter_map(|g| Some((g.id, g.answer?))).collect()
        };
        for r in &plan.resolution {
            match &r.outcome {
                opsgraph_core::plan::Outcome::Bind { resource, .. } => {
                    out.push((r.requirement.capability.clone(), resource.clone()))
                }
                opsgraph_core::plan::Outcome::Gate { gate } => {
                    let chosen = answers.get(&gate.id).and_then(|a| {
                        gate.options.iter().find_map(|o| match o {
                            opsgraph_core::plan::resolve::GateOption::Bind { label, resource } if label == a => {
                                Some(resource.clone())
                            }
                            _ => None,
                        })
                    });
                    out.extend(chosen.map(|res| (r.requirement.capability.clone(), res)));
                }
                _ => {}
            }
        }
        // Bound while running: a provider created by a sub-operation, an external resource a
        // person described at a gate.
        if !plan.sub_operations.is_empty() || plan.gates.iter().any(|g| g.source == "resolution") {
            for e in self.store.timeline(op)? {
                if !matches!(e.event.as_str(), "sub_operation_bound" | "external_bound") {
                    continue;
                }
                if let (Some(cap), Some(res)) =
                    (e.data.get("requirement").and_then(Value::as_str), e.data.get("resource").and_then(Value::as_str))
                {
                    out.push((cap.to_string(), res.to_string()));
                }
            }
        }
        Ok(out)
    }

    /// Seals the values of secret parameters (and those of the sub-operations' plans).
    fn seal_plan(&self, plan: &mut Plan) -> Result<(), Error> {
        let names = self.secret_params(plan);
        for name in &names {
            let aad = format!("param:{}/{name}", plan.revision.hash);
            for map in [&mut plan.parameters, &mut plan.intent.parameters] {
                if let Some(v) = map.get_mut(name).filter(|v| !v.is_null() && !crate::secrets::is_sealed(v)) {
                    *v = Value::String(self.seal_text(&param_text(v), &aad)?);
                }
            }
        }
        for sub in &mut plan.sub_operations {
            if let Some(p) = sub.plan.as_deref_mut() {
                self.seal_plan(p)?;
            }
        }
        Ok(())
    }

    /// The names of the plan's secret parameters.
    pub(crate) fn secret_params(&self, plan: &Plan) -> HashSet<String> {
        let Ok(pack) = self.pack(plan) else { return HashSet::new() };
        let template = pack.templates.iter().find(|t| t.id == plan.template);
        template
            .into_iter()
            .flat_map(|t| t.parameters.iter())
            .filter(|(_, spec)| spec.secret)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The file a job reads for an artifact: its blob, or for a secret one, a plaintext copy in
    /// the job's private directory (removed when the attempt's result is recorded).
    fn artifact_file(&self, r: &ArtifactRecord, private: &Path, secrets: &mut Vec<Vec<u8>>) -> Result<String, Error> {
        if r.sensitivity != "secret" {
            return Ok(self.plain_artifact_file(r, private)?.display().to_string());
        }
        let aad = crate::secrets::artifact_aad(&r.operation, &r.job, &r.id);
        let (path, plain) = self.open_artifact_into(&r.location, &aad, private, &r.id)?;
        secrets.push(plain.expose().to_vec());
        Ok(path.display().to_string())
    }

    /// The file behind a credentials reference: an artifact an operation produced (its blob), or
    /// an absolute path the inventory names.
    fn credentials_path(&self, reference: &str, private: &Path, secrets: &mut Vec<Vec<u8>>) -> Result<String, Error> {
        let bad = |why: &str| Error::Unsupported(format!("credentials `{reference}`: {why}"));
        match reference.strip_prefix("artifact:") {
            Some(rest) => {
                let (op, id) = rest.split_once('/').ok_or_else(|| bad("expected artifact:<operation>/<artifact>"))?;
                let record = self
                    .store
                    .artifacts(op)?
                    .into_iter()
                    .rfind(|a| a.id == id)
                    .ok_or_else(|| bad("no such artifact was produced"))?;
                self.artifact_file(&record, private, secrets)
            }
            None if Path::new(reference).is_absolute() => Ok(reference.to_string()),
            None => Err(bad("expected an absolute path or artifact:<operation>/<artifact>")),
        }
    }

    fn resource_by_id(&self, id: &str) -> Option<Resource> {
        if let Some(r) = self.resources.iter().find(|r| r.id == id) {
            return Some(r.clone());
        }
        self.store.resource(id).ok().flatten().and_then(|r| serde_json::from_value(r.doc).ok())
    }

    /// Values given at answered missing-input gates, by parameter name.
    pub(crate) fn gate_inputs(&self, op: &str) -> Result<BTreeMap<String, Value>, Error> {
        self.store
            .gates(op)?
            .into_iter()
            .filter_map(|g| {
                let param = g.id.strip_prefix("input-")?.replace('-', "_");
                let value = g.value?;
                if !crate::secrets::is_sealed(&value) {
                    return Some(Ok((param, value)));
                }
                let aad = format!("gate:{op}/{}", g.id);
                Some(
                    self.open_text(value.as_str().unwrap_or_default(), &aad)
                        .map(|plain| (param, Value::String(String::from_utf8_lossy(plain.expose()).into_owned()))),
                )
            })
            .collect::<Result<_, Error>>()
    }

    /// Runs an operation until it completes, fails, is cancelled, or waits for a person.
    /// Returns the state it stopped in.
    pub fn drive(&mut self, id: &str, progress: Progress<'_>) -> Result<OperationState, Error> {
        let (_, plan) = self.load(id)?;
        let pack = self.pack(&plan)?.clone();
        let template = pack.templates.iter().find(|t| t.id == plan.template).cloned();
        let inputs = self.gate_inputs(id)?;
        let actor = self.actor.clone();
        let (tx, rx) = mpsc::channel::<TaskResult>();
        let mut in_flight: HashMap<String, Cancel> = HashMap::new();
        let mut not_before: HashMap<String, Instant> = HashMap::new();
        // The idempotency key of each attempt in flight, as rendered when it started.
        let mut keys: HashMap<String, Option<String>> = HashMap::new();
        let mut cache: HashMap<String, JobRecord> = HashMap::new();
        let mut cache_stale = true;
        let mut recovered_checked = false;
        // Results not yet committed: they go into the same transaction as the attempts they let
        // start (one commit per job on a chain), or alone before the driver waits or stops.
        let mut carry: Vec<Write> = Vec::new();
        let instances: HashMap<&str, &JobInstance> = plan.jobs.iter().map(|j| (j.id.as_str(), j)).collect();
        let jobs = template.as_ref().map(|t| pack.job_index(t));
        // Made once per drive: every attempt works and logs in the operation's run directory.
        let run_dir = self.data_dir.join("runs").join(id);
        for d in [&run_dir, &self.data_dir.join("lab")] {
            std::fs::create_dir_all(d).map_err(|source| Error::Io { path: d.display().to_string(), source })?;
        }
        // Plaintext copies of secrets a crashed driver left behind.
        let _ = std::fs::remove_dir_all(run_dir.join("secrets"));
        let mut workers = Workers::new(tx.clone());
        // The operation row as last read, with the store's data version and this runtime's count of
        // operation writes at that moment: while neither changed, nobody changed the row (pause,
        // cancel and gate answers from other processes change the data version).
        let mut op_seen: Option<(i64, u64, OperationRecord)> = None;
        // Jobs before this index of `plan.jobs` are all done: the search for ready jobs starts here.
        let mut done_prefix = 0;

        loop {
            if let Some(lost) = self.lease_lost() {
                // Another replica carries on from the store; nothing more is started or recorded here.
                for c in in_flight.values() {
                    c.cancel();
                }
                return Err(lost);
            }
            let data_version = self.store.data_version()?;
            let op = match (&op_seen, data_version) {
                (Some((v, w, op)), Some(now)) if *v == now && *w == self.operation_writes => op.clone(),
                _ => {
                    let op = self.store.operation(id)?.ok_or_else(|| Error::NoOperation(id.to_string()))?;
                    op_seen = data_version.map(|v| (v, self.operation_writes, op.clone()));
                    op
                }
            };
            let running = matches!(op.state, OperationState::Running);
            if !running && !carry.is_empty() {
                self.commit_timeline(std::mem::take(&mut carry), progress)?;
            }
            if !running {
                // Stop: cancel running jobs when cancelled, let them finish otherwise.
                if matches!(op.state, OperationState::Cancelled { .. }) {
                    for c in in_flight.values() {
                        c.cancel();
                    }
                }
                if in_flight.is_empty() {
                    return Ok(op.state);
                }
            }
            // Jobs are read from the store once (and after recovery rewrote them); afterwards this
            // driver is their only writer and keeps its copy current as it commits.
            if cache_stale {
                cache = self.store.jobs(id)?.into_iter().map(|j| (j.id.clone(), j)).collect();
                cache_stale = false;
                done_prefix = 0;
            }
            let state_of = |id: &str| cache.get(id).map(|j| j.state);
            let gates = if plan.gates.is_empty() { Vec::new() } else { self.store.gates(id)? };
            let gate_done: HashMap<&str, bool> = gates
                .iter()
                .map(|g| (g.id.as_str(), g.answer.as_deref().is_some_and(|a| a != "cancel operation")))
                .collect();

            // Sub-operations: providers created for this operation run first; the jobs that need
            // what they provide wait for them.
            let mut blocked_jobs: HashSet<String> = HashSet::new();
            let mut waiting_children: Vec<String> = Vec::new();
            if running {
                match self.sub_operations(id, &plan, &actor, progress)? {
                    Children::Failed(reason) => {
                        raced(self.transition(
                            &op,
                            Event::JobFailed { job: "sub-operation".into(), reason: reason.clone() },
                            &actor,
                            &reason,
                            vec![],
                            progress,
                        ))?;
                        continue;
                    }
                    Children::Progressed => continue,
                    Children::Blocking { jobs, waiting } => {
                        blocked_jobs = jobs;
                        waiting_children = waiting;
                    }
                }
            }

            // Recovery: attempts recorded as started whose outcome nobody recorded.
            if running && !recovered_checked {
                recovered_checked = true;
                let orphans: Vec<JobRecord> = cache
                    .values()
                    .filter(|j| j.state == JobState::Running && !in_flight.contains_key(&j.id))
                    .cloned()
                    .collect();
                // Attempts handed to agents are waited for again: their agent may still run them.
                let orphans = self.agent_orphans(&op, &plan, &pack, orphans, &run_dir, |task, key| {
                    in_flight.insert(task.instance.clone(), task.cancel.clone());
                    keys.insert(task.instance.clone(), key);
                    workers.run(task, in_flight.len());
                })?;
                if !orphans.is_empty() {
                    self.recover(&op, &plan, &pack, &orphans, &inputs, progress)?;
                    cache_stale = true;
                    continue;
                }
            }

            if running {
                // Ready: pending, dependencies done, gates answered, not waiting for a retry; in plan
                // order, as many as there are free slots.
                let now_i = Instant::now();
                while plan.jobs.get(done_prefix).is_some_and(|j| state_of(&j.id).is_some_and(JobState::is_done)) {
                    done_prefix += 1;
                }
                let free = self.concurrency.max(1).saturating_sub(in_flight.len());
                let ready: Vec<&JobInstance> = plan.jobs[done_prefix..]
                    .iter()
                    .filter(|j| state_of(&j.id) == Some(JobState::Pending) && !in_flight.contains_key(&j.id))
                    .filter(|j| not_before.get(&j.id).is_none_or(|t| *t <= now_i))
                    .filter(|j| !blocked_jobs.contains(&j.job))
                    .filter(|j| {
                        j.depends_on.iter().all(|d| match state_of(d) {
                            Some(s) => s.is_done(),
                            None => gate_done.get(d.as_str()).copied().unwrap_or(false),
                        })
                    })
                    .take(free)
                    .collect();
                if ready.is_empty() && !carry.is_empty() {
                    self.commit_timeline(std::mem::take(&mut carry), progress)?;
                }

                if ready.is_empty() && in_flight.is_empty() {
                    if plan.jobs.iter().all(|j| state_of(&j.id).is_some_and(JobState::is_done)) {
                        let extra = self.completion_writes(&op, &plan, &pack)?;
                        raced(self.transition(
                            &op,
                            Event::Complete,
                            &actor,
                            "every job's outputs are verified by evidence",
                            extra,
                            progress,
                        ))?;
                        continue;
                    }
                    let waiting = not_before.iter().filter(|(j, _)| state_of(j) == Some(JobState::Pending));
                    if let Some(wait) = waiting.map(|(_, t)| t.saturating_duration_since(now_i)).min() {
                        std::thread::sleep(wait.min(Duration::from_secs(5)));
                        continue;
                    }
                    // A job still failed (kept failed by a person's retry of others, or one an
                    // intervention did not cover) fails the run again, naming it.
                    if let Some(j) = plan.jobs.iter().find(|j| state_of(&j.id) == Some(JobState::Failed)) {
                        let why = cache.get(&j.id).and_then(|r| r.outcome["failure"].as_str()).unwrap_or("it failed");
                        let reason = format!("{}: {why}", j.id);
                        let event = Event::JobFailed { job: j.id.clone(), reason: reason.clone() };
                        let extra = self.failure_writes(&op, &plan, &reason)?;
                        raced(self.transition(&op, event, &actor, &reason, extra, progress))?;
                        continue;
                    }
                    let blocking: Vec<&str> =
                        gates.iter().filter(|g| g.answer.is_none()).map(|g| g.id.as_str()).collect();
                    let reason = if !waiting_children.is_empty() {
                        format!("waiting for sub-operation {}", waiting_children.join(", "))
                    } else if blocking.is_empty() {
                        "no job can start".to_string()
                    } else {
                        format!("waiting for gate {}", blocking.join(", "))
                    };
                    raced(self.transition(
                        &op,
                        Event::Pause { reason: reason.clone() },
                        &actor,
                        &reason,
                        vec![],
                        progress,
                    ))?;
                    continue;
                }

                // Start: record each attempt before its process exists (one commit for all, with the
                // results that made them ready).
                let mut writes = std::mem::take(&mut carry);
                let pending: Vec<ArtifactRecord> = writes
                    .iter()
                    .filter_map(|w| match w {
                        Write::Artifact(a) => Some(a.clone()),
                        _ => None,
                    })
                    .collect();
                let mut tasks = Vec::new();
                for instance in ready {
                    let job = jobs
                        .as_ref()
                        .ok_or_else(|| Error::NoPack(plan.template.clone()))?
                        .get(&instance.job)
                        .cloned()
                        .ok_or_else(|| Error::NoPack(format!("{} (job {})", plan.pack, instance.job)))?;
                    let record = cache.get(&instance.id).cloned();
                    let attempt = record.map_or(0, |r| r.attempts) + 1;
                    let mut mask = Vec::new();
                    let env = self.environment(&op, &plan, instance, &job, &inputs, &pending, &mut mask)?;
                    let key_values = self.key_values(&op, &plan, instance, &env);
                    let key = job.controls.idempotency.as_ref().map(|k| render_key(&k.key, &key_values));
                    let check_first = match &key {
                        Some(k) => self.store.idempotency(k)?.is_some(),
                        None => false,
                    };
                    let dir = run_dir.clone();
                    let stem = format!("{}.{attempt}", instance.id);
                    let program = job.run.as_ref().and_then(|r| {
                        if let Some(script) = &r.script {
                            Some(Program::Script { path: PathBuf::from(&pack.root).join(script), args: vec![] })
                        } else if let Some(cmd) = &r.command {
                            Some(opsgraph_exec::program_for(cmd))
                        } else {
                            r.url.as_ref().map(|url| Program::Http {
                                method: r.method.clone().unwrap_or_else(|| "GET".into()),
                                url: url.clone(),
                                headers: vec![],
                                body: vec![],
                            })
                        }
                    });
                    let timeout = job
                        .run
                        .as_ref()
                        .and_then(|r| r.timeout.as_deref())
                        .and_then(|t| opsgraph_exec::parse_duration(t).ok());
                    let evidence = job.outputs.evidence.iter().filter_map(|e| pack.evidence.get(e).cloned()).collect();
                    writes.push(Write::Job(JobRecord {
                        operation: op.id.clone(),
                        id: instance.id.clone(),
                        state: JobState::Running,
                        attempts: attempt,
                        outcome: json!({"key": key}),
                        updated_at: now(),
                    }));
                    writes.push(Write::Timeline(entry(
                        &op.id,
                        &actor,
                        "job_started",
                        format!(
                            "{} attempt {attempt}{}",
                            instance.id,
                            if check_first { " (idempotency key seen before: evidence first)" } else { "" }
                        ),
                        json!({"job": instance.id, "attempt": attempt, "key": key}),
                    )));
                    let cancel = Cancel::new();
                    not_before.remove(&instance.id);
                    keys.insert(instance.id.clone(), key.clone());
                    in_flight.insert(instance.id.clone(), cancel.clone());
                    if let Some(held) = &self.lease {
                        held.watch(&instance.id, Some(&cancel));
                    }
                    let job_secret_outputs: Vec<String> = job
                        .outputs
                        .artifacts
                        .iter()
                        .filter(|a| {
                            pack.artifacts
                                .get(*a)
                                .is_some_and(|d| d.sensitivity == opsgraph_core::model::Sensitivity::Secret)
                        })
                        .cloned()
                        .collect();
                    let mut task = Task {
                        instance: instance.id.clone(),
                        attempt,
                        executor: self.executor_for(instance, &job),
                        job,
                        evidence,
                        program,
                        env,
                        timeout,
                        dir,
                        stem,
                        cancel,
                        check_first,
                        secret_outputs: job_secret_outputs,
                        mask,
                        agent: None,
                    };
                    // A resource an agent serves: the attempt is enqueued for it in this commit.
                    if let Some(w) = self.agent_enqueue(&op.id, instance, &mut task, key.as_deref())? {
                        writes.push(w);
                    }
                    tasks.push(task);
                }
                let started: Vec<JobRecord> = job_records(&writes);
                self.commit_timeline(writes, progress)?;
                crate::failpoint::hit("attempts.recorded");
                cache.extend(started.into_iter().map(|j| (j.id.clone(), j)));
                for task in tasks {
                    if task.is_trivial() {
                        // Nothing to run, check or collect: its result is known now, without a
                        // thread (the no-op job type; it still went through the attempt record).
                        let _ = tx.send(jobs::run(task));
                    } else {
                        workers.run(task, in_flight.len());
                    }
                }
            }

            if in_flight.is_empty() {
                continue;
            }
            // Wait for one result, then take every other one that is ready: one commit for all.
            let first = match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(r) => r,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => continue,
            };
            let mut results = vec![first];
            results.extend(rx.try_iter());
            crate::failpoint::hit("job.exited");
            let mut writes = Vec::new();
            let mut failed: Option<(String, String)> = None;
            for r in results {
                in_flight.remove(&r.instance);
                if let Some(held) = &self.lease {
                    held.watch(&r.instance, None);
                }
                // Plaintext copies of secrets live only while the attempt runs.
                let _ = std::fs::remove_dir_all(run_dir.join("secrets").join(&r.instance));
                let Some(instance) = instances.get(r.instance.as_str()) else { continue };
                let job = jobs.as_ref().and_then(|j| j.get(&instance.job)).cloned();
                let max_attempts =
                    job.as_ref().and_then(|j| j.controls.retry_policy.as_ref()).map_or(1, |p| p.max_attempts);
                let key = keys.remove(&r.instance).flatten();
                self.result_writes(&op, instance, &r, &mut writes)?;
                let state = match (&r.failure, r.satisfied_without_run) {
                    // Its agent was lost: decided by its evidence, as after a crash.
                    (None, _) if r.unknown => JobState::Recovered,
                    (Some(_), _) if r.unknown && (key.is_none() || r.attempt >= max_attempts) => JobState::Failed,
                    (None, true) => JobState::AlreadySatisfied,
                    (None, false) => JobState::Succeeded,
                    (Some(_), _) if r.cancelled => JobState::Cancelled,
                    (Some(_), _) if r.attempt < max_attempts && running => JobState::Pending,
                    (Some(_), _) => JobState::Failed,
                };
                if state == JobState::Pending {
                    let backoff = job
                        .as_ref()
                        .and_then(|j| j.controls.retry_policy.as_ref())
                        .and_then(|p| p.backoff.as_deref())
                        .and_then(|b| opsgraph_exec::parse_duration(b).ok())
                        .unwrap_or(Duration::ZERO);
                    let delay = backoff.saturating_mul(1 << (r.attempt - 1).min(16));
                    not_before.insert(r.instance.clone(), Instant::now() + delay);
                }
                if matches!(state, JobState::Succeeded) {
                    if let Some(k) = &key {
                        writes.push(Write::Idempotency {
                            key: k.clone(),
                            resource: instance.resource.clone(),
                            operation: op.id.clone(),
                            job: r.instance.clone(),
                            at: now(),
                        });
                    }
                }
                let event = match state {
                    JobState::Recovered => "job_recovered",
                    JobState::Failed if r.unknown => "job_outcome_unknown",
                    JobState::Succeeded => "job_succeeded",
                    JobState::AlreadySatisfied => "job_already_satisfied",
                    JobState::Pending => "job_retry",
                    JobState::Cancelled => "job_cancelled",
                    _ => "job_failed",
                };
                let reason = match &r.failure {
                    None if r.unknown => format!("{}: its agent was lost mid-run; its evidence passes", r.instance),
                    None if r.satisfied_without_run => format!("{}: already satisfied, evidence passes", r.instance),
                    None => format!("{}: {} ({} evidence checks passed)", r.instance, r.outcome, r.evidence.len()),
                    Some(f) if state == JobState::Pending => {
                        format!("{}: {f}; attempt {} of {max_attempts}, retrying", r.instance, r.attempt)
                    }
                    Some(f) => format!("{}: {f}", r.instance),
                };
                self.keep_log(&op.id, &r.instance, r.attempt, r.log.as_deref())?;
                writes.push(Write::Job(JobRecord {
                    operation: op.id.clone(),
                    id: r.instance.clone(),
                    state,
                    attempts: r.attempt,
                    outcome: json!({
                        "outcome": r.outcome, "failure": r.failure, "key": key,
                        "log": r.log.as_ref().map(|p| p.display().to_string()),
                        "duration_ms": r.duration.as_millis() as u64,
                    }),
                    updated_at: now(),
                }));
                writes.push(Write::Timeline(entry(
                    &op.id,
                    &actor,
                    event,
                    reason.clone(),
                    json!({"job": r.instance, "attempt": r.attempt}),
                )));
                if state == JobState::Failed && failed.is_none() {
                    failed = Some((r.instance.clone(), reason));
                }
            }
            let finished: Vec<JobRecord> = job_records(&writes);
            match failed {
                Some((job, reason)) if running => {
                    let mut extra = writes;
                    extra.extend(self.failure_writes(&op, &plan, &reason)?);
                    raced(self.transition(
                        &op,
                        Event::JobFailed { job, reason: reason.clone() },
                        &actor,
                        &reason,
                        extra,
                        progress,
                    ))?;
                }
                _ => carry.extend(writes),
            }
            cache.extend(finished.into_iter().map(|j| (j.id.clone(), j)));
        }
    }

    /// Drives this operation's sub-operations as far as they go. Returns which jobs must still
    /// wait, and for which children; or that one failed; or that one made progress (look again).
    fn sub_operations(
        &mut self,
        id: &str,
        plan: &Plan,
        actor: &str,
        progress: Progress<'_>,
    ) -> Result<Children, Error> {
        let mut jobs = HashSet::new();
        let mut waiting = Vec::new();
        if plan.sub_operations.is_empty() {
            return Ok(Children::Blocking { jobs, waiting });
        }
        let timeline = self.store.timeline(id)?;
        let bound: HashSet<String> = timeline
            .iter()
            .filter(|e| e.event == "sub_operation_bound")
            .filter_map(|e| e.data.get("child").and_then(Value::as_str).map(str::to_string))
            .collect();
        let children: Vec<(String, String)> = timeline
            .iter()
            .filter(|e| e.event == "sub_operation_created")
            .filter_map(|e| {
                Some((e.data.get("child")?.as_str()?.to_string(), e.data.get("requirement")?.as_str()?.to_string()))
            })
            .collect();
        // Providers to create: chosen by the resolution, or by a person at its gate.
        let answers: HashMap<String, String> =
            self.store.gates(id)?.into_iter().filter_map(|g| Some((g.id, g.answer?))).collect();
        for r in &plan.resolution {
            let provider = match &r.outcome {
                opsgraph_core::plan::Outcome::Create { provider, .. } => Some(provider.clone()),
                opsgraph_core::plan::Outcome::Gate { gate } => answers.get(&gate.id).and_then(|a| {
                    gate.options.iter().find_map(|o| match o {
                        opsgraph_core::plan::resolve::GateOption::Create { label, provider, .. } if label == a => {
                            Some(provider.clone())
                        }
                        _ => None,
                    })
                }),
                _ => None,
            };
            let Some(provider) = provider else { continue };
            let cap = &r.requirement.capability;
            if children.iter().any(|(_, req)| req == cap) {
                continue;
            }
            let sub = plan.sub_operations.iter().find(|s| s.provider == provider && s.requirement == *cap);
            let Some(sub_plan) = sub.and_then(|s| s.plan.as_deref()) else {
                return Ok(Children::Failed(format!(
                    "provider {provider} for {cap} has no plan to create it: {}",
                    sub.and_then(|s| s.error.clone()).unwrap_or_else(|| "its pack is not loaded".into())
                )));
            };
            let sub_plan = sub_plan.clone();
            self.start_sub_operation(id, cap, &provider, &sub_plan, actor, progress)?;
            return Ok(Children::Progressed);
        }
        for (child, requirement) in children {
            let Some(record) = self.store.operation(&child)? else { continue };
            match &record.state {
                OperationState::Completed => {
                    if !bound.contains(&child) {
                        let note = entry(
                            id,
                            actor,
                            "sub_operation_bound",
                            format!(
                                "{requirement}: bound to {} created by {child}",
                                record.resource.clone().unwrap_or_default()
                            ),
                            json!({"child": child, "requirement": requirement, "resource": record.resource}),
                        );
                        self.commit_timeline(vec![Write::Timeline(note)], progress)?;
                    }
                }
                OperationState::Failed { reason } | OperationState::Cancelled { reason } => {
                    return Ok(Children::Failed(format!(
                        "sub-operation {child} for {requirement} did not complete: {reason}"
                    )));
                }
                OperationState::Running => {
                    self.drive(&child, progress)?;
                    return Ok(Children::Progressed);
                }
                other => {
                    waiting.push(format!("{child} ({})", state_name(other.kind())));
                    for r in plan.resolution.iter().filter(|r| r.requirement.capability == requirement) {
                        if r.required_by.iter().all(|u| u == "pack") {
                            jobs.extend(plan.jobs.iter().map(|j| j.job.clone()));
                        }
                        jobs.extend(r.required_by.iter().filter(|u| *u != "pack").cloned());
                    }
                }
            }
        }
        Ok(Children::Blocking { jobs, waiting })
    }

    fn key_values(
        &self,
        op: &OperationRecord,
        plan: &Plan,
        instance: &JobInstance,
        env: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut values: BTreeMap<String, String> =
            plan.parameters.iter().map(|(k, v)| (k.clone(), param_text(v))).collect();
        for (k, v) in env {
            if let Some(p) = k.strip_prefix("OPSGRAPH_PARAM_") {
                values.insert(p.to_lowercase(), v.clone());
            }
        }
        // A key is stored and shown: a secret parameter never goes into one.
        for name in self.secret_params(plan) {
            values.insert(name, "(secret)".into());
        }
        if let Some(r) = &instance.resource {
            values.insert("node_id".into(), r.rsplit('/').next().unwrap_or(r).to_string());
            values.insert("resource".into(), r.clone());
        }
        if let Some(n) = &plan.intent.name {
            values.insert("name".into(), n.clone());
        }
        values.insert("operation_id".into(), op.id.clone());
        values
    }

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
            provider: None,
            labels: BTreeMap::new(),
            attributes: plan.intent.constraints.clone(),
            desired_state: None,
            observed_state: None,
            health: Health::Unknown,
            status: Some(ResourceStatus::Provisioning),
            provides: Vec::new(),
            access: None,
            credentials: BTreeMap::new(),
        }))
    }

    /// The resource an operation completed: its capabilities, desired and observed state, health.
    fn completion_writes(&self, op: &OperationRecord, plan: &Plan, pack: &Pack) -> Result<Vec<Write>, Error> {
        let Some(mut doc) = self.resource_doc(plan) else { return Ok(vec![]) };
        if plan.action == "rollback" {
            // Undone: it provides nothing any more, and nobody has observed it since.
            doc.provides.clear();
            doc.credentials.clear();
            doc.desired_state = Some("rolled back".into());
            doc.observed_state = Some(format!("rolled back by operation {}: {} jobs undone", op.id, plan.jobs.len()));
            doc.health = Health::Unknown;
            doc.status = None;
            return Ok(vec![Write::Resource(ResourceRecord {
                id: doc.id.clone(),
                doc: serde_json::to_value(&doc).unwrap_or(Value::Null),
                last_operation: Some(op.id.clone()),
                updated_at: now(),
            })]);
        }
        let template = pack.templates.iter().find(|t| t.id == plan.template);
        let provisions = template
            .map(|t| t.provides.clone())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| pack.manifest.provides.clone());
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
        doc.observed_state = Some(format!("{} jobs done; {passed} evidence checks passed", plan.jobs.len()));
        doc.health = Health::Healthy;
        doc.status = Some(ResourceStatus::Running);
        Ok(vec![Write::Resource(ResourceRecord {
            id: doc.id.clone(),
            doc: serde_json::to_value(&doc).unwrap_or(Value::Null),
            last_operation: Some(op.id.clone()),
            updated_at: now(),
        })])
    }

    pub(crate) fn failure_writes(&self, op: &OperationRecord, plan: &Plan, reason: &str) -> Result<Vec<Write>, Error> {
        let Some(mut doc) = self.resource_doc(plan) else { return Ok(vec![]) };
        doc.health = Health::Error;
        doc.status = Some(ResourceStatus::Error);
        doc.observed_state = Some(format!("operation {} failed: {reason}", op.id));
        Ok(vec![Write::Resource(ResourceRecord {
            id: doc.id.clone(),
            doc: serde_json::to_value(&doc).unwrap_or(Value::Null),
            last_operation: Some(op.id.clone()),
            updated_at: now(),
        })])
    }
}

/// The threads that run one drive's attempts: started as attempts need them, never more than
/// are in flight at once (so at most the concurrency), reused for the rest of the drive, ended
/// when the drive returns. Each attempt still runs alone on its thread from start to result.
struct Workers {
    tasks: mpsc::Sender<Task>,
    queue: Arc<Mutex<mpsc::Receiver<Task>>>,
    results: mpsc::Sender<TaskResult>,
    started: usize,
}

impl Workers {
    fn new(results: mpsc::Sender<TaskResult>) -> Workers {
        let (tasks, queue) = mpsc::channel();
        Workers { tasks, queue: Arc::new(Mutex::new(queue)), results, started: 0 }
    }

    /// Hands `task` to a worker; `in_flight` counts the attempts started and not yet reported,
    /// this one included. A worker is free for every one of them.
    fn run(&mut self, task: Task, in_flight: usize) {
        while self.started < in_flight {
            let queue = Arc::clone(&self.queue);
            let results = self.results.clone();
            std::thread::spawn(move || loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                let Ok(task) = next else { break };
                if results.send(jobs::run(task)).is_err() {
                    break;
                }
            });
            self.started += 1;
        }
        // The receiving side lives as long as a worker does; a send fails only if none could start.
        let _ = self.tasks.send(task);
    }
}

/// An executor for a target nothing can reach: every run is "could not start".
struct Unreachable(String);

impl Executor for Unreachable {
    fn run(&self, _: &opsgraph_exec::Spec, _: &Cancel) -> opsgraph_exec::Run {
        opsgraph_exec::Run {
            outcome: opsgraph_exec::Outcome::CouldNotStart { error: self.0.clone() },
            output: opsgraph_exec::Output::default(),
            http_status: None,
            leaked: false,
        }
    }
}

fn job_records(writes: &[Write]) -> Vec<JobRecord> {
    writes
        .iter()
        .filter_map(|w| match w {
            Write::Job(j) => Some(j.clone()),
            _ => None,
        })
        .collect()
}

/// A transition that lost a race with another writer is not an error of the driver: it re-reads
/// the operation and goes on from the state the other writer left.
fn raced<T>(result: Result<T, Error>) -> Result<Option<T>, Error> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(Error::Store(opsgraph_store::Error::Conflict { .. })) => Ok(None),
        Err(e) => Err(e),
    }
}

enum Children {
    /// These jobs wait for these children (which wait for a person).
    Blocking {
        jobs: HashSet<String>,
        waiting: Vec<String>,
    },
    Failed(String),
    /// A child was driven: look again.
    Progressed,
}

/// `object_storage.s3` -> `OBJECT_STORAGE_S3`.
fn env_word(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}
