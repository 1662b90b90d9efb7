//! Creating an operation and driving it: the dispatcher loop.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::time::Instant;

use opsgraph_exec::{Cancel, Executor, LocalExecutor, SshExecutor};
use opsgraph_model::{GateType, Health, OperationState, ProvidedCapability, Resource, ResourceStatus};
use opsgraph_pack::Pack;
use opsgraph_plan::lifecycle::{self, state_name, Event};
use opsgraph_plan::{JobInstance, Plan};
use opsgraph_store::{
    now, ArtifactRecord, EvidenceRecord, GateRecord, JobRecord, JobState, OperationFilter, OperationRecord,
    ResourceRecord, TimelineEntry, Write,
};
use serde_json::{json, Value};

use crate::decide::{decide, Input, Snapshot};
use crate::execute::{raced, Drive, Flow};
use crate::jobs::{self, artifact_env, param_text, TaskResult};
use crate::timeline::{entry, Progress};
use crate::{new_operation_id, Error, Runtime};

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
                    opsgraph_plan::Outcome::Unsatisfiable { reason } => {
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
    pub(crate) fn executor_for(&self, instance: &JobInstance, job: &opsgraph_model::Job) -> Arc<dyn Executor> {
        use opsgraph_model::ExecutorKind;
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
        job: &opsgraph_model::Job,
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
                opsgraph_plan::Outcome::Bind { resource, .. } => {
                    out.push((r.requirement.capability.clone(), resource.clone()))
                }
                opsgraph_plan::Outcome::Gate { gate } => {
                    let chosen = answers.get(&gate.id).and_then(|a| {
                        gate.options.iter().find_map(|o| match o {
                            opsgraph_plan::resolve::GateOption::Bind { label, resource } if label == a => {
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
            return Ok(self.data_dir.join(&r.location).display().to_string());
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
    ///
    /// A short loop around one pure decision: read a snapshot of the operation, `decide` what to
    /// write and do, commit and carry it out (`execute`), then turn the workers' reports into the
    /// next decision. Sub-operations and crash recovery are steps of reading the snapshot: they
    /// drive children and check evidence before anything is decided.
    pub fn drive(&mut self, id: &str, progress: Progress<'_>) -> Result<OperationState, Error> {
        let (_, plan) = self.load(id)?;
        let pack = self.pack(&plan)?.clone();
        let inputs = self.gate_inputs(id)?;
        // Made once per drive: every attempt works and logs in the operation's run directory.
        let run_dir = self.data_dir.join("runs").join(id);
        for d in [&run_dir, &self.data_dir.join("lab")] {
            std::fs::create_dir_all(d).map_err(|source| Error::Io { path: d.display().to_string(), source })?;
        }
        // Plaintext copies of secrets a crashed driver left behind.
        let _ = std::fs::remove_dir_all(run_dir.join("secrets"));
        let mut d = Drive::new(&plan, &pack, inputs, self.actor.clone(), run_dir);

        loop {
            if let Some(lost) = self.lease_lost() {
                // Another replica carries on from the store; nothing more is started or recorded here.
                for c in d.in_flight.values() {
                    c.cancel();
                }
                return Err(lost);
            }
            let op = self.snapshot_op(&mut d, id)?;
            let running = matches!(op.state, OperationState::Running);
            if d.cache_stale {
                d.cache = self.store.jobs(id)?.into_iter().map(|j| (j.id.clone(), j)).collect();
                d.cache_stale = false;
                d.done_prefix = 0;
            }
            let gates = if plan.gates.is_empty() { Vec::new() } else { self.store.gates(id)? };

            // Sub-operations: providers created for this operation run first; the jobs that need
            // what they provide wait for them.
            let mut blocked: HashSet<String> = HashSet::new();
            let mut waiting_children: Vec<String> = Vec::new();
            if running {
                match self.sub_operations(id, &plan, &d.actor, progress)? {
                    Children::Failed(reason) => {
                        // The resource is not marked failed here (the lifecycle's
                        // `MarkResourceFailed` is not carried out): the jobs that change it never ran.
                        let actor = d.actor.clone();
                        let event = Event::JobFailed { job: "sub-operation".into(), reason: reason.clone() };
                        raced(self.transition(&op, event, &actor, &reason, vec![], progress))?;
                        continue;
                    }
                    Children::Progressed => continue,
                    Children::Blocking { jobs, waiting } => {
                        blocked = jobs;
                        waiting_children = waiting;
                    }
                }
            }

            // Recovery: attempts recorded as started whose outcome nobody recorded.
            if running && !d.recovered_checked && self.recover_orphans(&mut d, &op, progress)? {
                continue;
            }

            let snapshot = Snapshot {
                op: &op,
                actor: &d.actor,
                plan: &plan.jobs,
                instances: &d.instances,
                jobs: &d.cache,
                gates: &gates,
                in_flight: &d.in_flight,
                not_before: &d.not_before,
                now: Instant::now(),
                concurrency: self.concurrency,
                blocked: &blocked,
                waiting_children: &waiting_children,
                done_prefix: d.done_prefix,
            };
            let decision = decide(&snapshot, Input::Tick)?;
            match self.execute(&mut d, &op, decision, progress)? {
                Flow::Stop(state) => return Ok(state),
                Flow::Again => continue,
                Flow::Next => {}
            }
            if d.in_flight.is_empty() {
                continue;
            }
            // Wait for one report, then take every other one that is ready: one decision, one
            // commit for all.
            let Some(finished) = self.collect(&mut d, &op)? else { continue };
            let snapshot = Snapshot {
                op: &op,
                actor: &d.actor,
                plan: &plan.jobs,
                instances: &d.instances,
                jobs: &d.cache,
                gates: &gates,
                in_flight: &d.in_flight,
                not_before: &d.not_before,
                now: Instant::now(),
                concurrency: self.concurrency,
                blocked: &blocked,
                waiting_children: &waiting_children,
                done_prefix: d.done_prefix,
            };
            let decision = decide(&snapshot, Input::Finished(finished))?;
            self.execute(&mut d, &op, decision, progress)?;
        }
    }

    /// The operation row, read again only when the store's data version or this runtime's own
    /// operation writes say it may have changed.
    fn snapshot_op(&mut self, d: &mut Drive<'_>, id: &str) -> Result<OperationRecord, Error> {
        let data_version = self.store.data_version()?;
        Ok(match (&d.op_seen, data_version) {
            (Some((v, w, op)), Some(now)) if *v == now && *w == self.operation_writes => op.clone(),
            _ => {
                let op = self.store.operation(id)?.ok_or_else(|| Error::NoOperation(id.to_string()))?;
                d.op_seen = data_version.map(|v| (v, self.operation_writes, op.clone()));
                op
            }
        })
    }

    /// Crash recovery, once per drive: attempts recorded as started whose outcome nobody
    /// recorded are checked by evidence (those handed to agents are waited for again). Returns
    /// whether it rewrote job records (the snapshot must be read again).
    fn recover_orphans(
        &mut self,
        d: &mut Drive<'_>,
        op: &OperationRecord,
        progress: Progress<'_>,
    ) -> Result<bool, Error> {
        d.recovered_checked = true;
        let orphans: Vec<JobRecord> = d
            .cache
            .values()
            .filter(|j| j.state == JobState::Running && !d.in_flight.contains_key(&j.id))
            .cloned()
            .collect();
        // Attempts handed to agents are waited for again: their agent may still run them.
        let (in_flight, keys, workers) = (&mut d.in_flight, &mut d.keys, &mut d.workers);
        let orphans = self.agent_orphans(op, d.plan, d.pack, orphans, &d.run_dir, |task, key| {
            in_flight.insert(task.instance.clone(), task.cancel.clone());
            keys.insert(task.instance.clone(), key);
            workers.run(task, in_flight.len());
        })?;
        if orphans.is_empty() {
            return Ok(false);
        }
        self.recover(op, d.plan, d.pack, &orphans, &d.inputs, progress)?;
        d.cache_stale = true;
        Ok(true)
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
                opsgraph_plan::Outcome::Create { provider, .. } => Some(provider.clone()),
                opsgraph_plan::Outcome::Gate { gate } => answers.get(&gate.id).and_then(|a| {
                    gate.options.iter().find_map(|o| match o {
                        opsgraph_plan::resolve::GateOption::Create { label, provider, .. } if label == a => {
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

    pub(crate) fn key_values(
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
                    jobs::store_blob(&self.data_dir, path)
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
    pub(crate) fn completion_writes(
        &self,
        op: &OperationRecord,
        plan: &Plan,
        pack: &Pack,
    ) -> Result<Vec<Write>, Error> {
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
