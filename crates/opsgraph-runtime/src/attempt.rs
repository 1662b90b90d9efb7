//! What an attempt is given: the executor that reaches its target, its environment (parameters,
//! bindings, credentials, the artifacts it requires) and the values of its idempotency key.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use opsgraph_core::model::Resource;
use opsgraph_core::plan::{JobInstance, Plan};
use opsgraph_exec::{Executor, LocalExecutor, SshExecutor};
use opsgraph_store::{ArtifactRecord, OperationRecord};
use serde_json::Value;

use crate::jobs::{artifact_env, param_text};
use crate::task::Refuse;
use crate::{Error, Runtime};

/// Where the plaintext files of a job's environment go (credentials, sealed artifacts).
#[derive(Clone, Copy)]
pub(crate) enum Plain<'a> {
    /// Its attempt's private directory, `runs/<op>/secrets/<job>`: the driver removes it after
    /// the attempt's result (recovery and a rollout's checks, after their checks).
    Attempt,
    /// `<root>/<job>`, a directory of the caller's own that it removes ([`Scratch`]): checks that
    /// run outside any attempt and may overlap another run of themselves (a resource's
    /// verification).
    Scratch(&'a Path),
}

/// A private directory of one caller's own under `runs/<op>/secrets/`, removed with everything
/// in it when dropped (on every path out, failures included).
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// A directory no other caller uses: `runs/<op>/secrets/<what>-<pid>-<n>-<nanos>` (not made
    /// until a file goes there). Those of `what` that a process now gone left there (killed
    /// before it could remove them) are removed first: their plaintext copies outlive nothing.
    pub(crate) fn new(data_dir: &Path, op: &str, what: &str) -> Scratch {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = data_dir.join("runs").join(op).join("secrets");
        sweep_orphans(&root, what);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
        let name = format!("{what}-{}-{}-{nanos}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        Scratch(root.join(name))
    }

    pub(crate) fn plain(&self) -> Plain<'_> {
        Plain::Scratch(&self.0)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the scratch directories of `what` under `root` whose process no longer runs (its pid,
/// the name's second field, has no `/proc` entry). A live process's, this one's included, stay:
/// it removes its own. A pid reused since is taken for alive: left for a later sweep.
fn sweep_orphans(root: &Path, what: &str) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix(what))
            .and_then(|n| n.strip_prefix('-'))
            .and_then(|n| n.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new("/proc").join(pid.to_string()).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

impl Runtime {
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
            (Some(ExecutorKind::Ssh) | None, None) => Arc::new(Refuse(format!(
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
        plain: Plain<'_>,
        secrets: &mut Vec<Vec<u8>>,
    ) -> Result<BTreeMap<String, String>, Error> {
        let mut env = BTreeMap::new();
        let secret_params = self.secret_params(plan);
        // Named only where a file goes there (credentials, artifacts): most jobs get none, and
        // its four paths were a tenth of this function a job (issue [N] 5).
        let private = || match plain {
            Plain::Attempt => self.data_dir.join("runs").join(&op.id).join("secrets").join(&instance.id),
            Plain::Scratch(root) => root.join(&instance.id),
        };
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
                match self.credentials_path(reference, &private(), secrets) {
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
        let lab = self.lab_dir.get_or_init(|| self.data_dir.join("lab").display().to_string());
        env.insert("OPSGRAPH_LAB_DIR".into(), lab.clone());
        self.artifact_parameters(plan, job, inputs, &private, &mut env, secrets)?;
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
                env.insert(artifact_env(a), self.artifact_file(r, &private(), secrets)?);
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
        if !plan.sub_operations.is_empty()
            || plan.gates.iter().any(|g| g.source == opsgraph_core::plan::GateSource::Resolution)
        {
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
        match reference.strip_prefix("artifact:") {
            Some(rest) => {
                let record = self
                    .produced_artifact(rest)
                    .map_err(|why| Error::Unsupported(format!("credentials `{reference}`: {why}")))?;
                self.artifact_file(&record, private, secrets)
            }
            None if Path::new(reference).is_absolute() => Ok(reference.to_string()),
            None => Err(Error::Unsupported(format!(
                "credentials `{reference}`: expected an absolute path or artifact:<operation>/<artifact>"
            ))),
        }
    }

    /// The record of an artifact an operation produced, from `<operation>/<artifact>` (a
    /// credentials reference after its `artifact:`, or an artifact parameter's value); the last
    /// one when the operation produced it more than once. Why not, in words, when there is none.
    pub(crate) fn produced_artifact(&self, reference: &str) -> Result<ArtifactRecord, String> {
        let (op, id) = reference.split_once('/').ok_or("expected <operation>/<artifact>")?;
        let records = self.store.artifacts(op).map_err(|e| format!("cannot read the artifacts of {op}: {e}"))?;
        records.into_iter().rfind(|a| a.id == id).ok_or_else(|| format!("operation {op} produced no artifact {id}"))
    }

    /// Artifact parameters (`artifact:` in the template): the file of the artifact each names, in
    /// the artifact's `OPSGRAPH_ARTIFACT_<ID>` as if a dependency had produced it — only for a
    /// job that declares the parameter among its `inputs.parameters`, as a required artifact
    /// reaches only the jobs that require it (a CA key named by a parameter is opened into the
    /// job that signs with it, not copied to every host of the plan). One that cannot be read
    /// (the operation was checked at creation) is told to the job in
    /// `OPSGRAPH_MISSING_ARTIFACT_<ID>`, and the job fails with that reason when it needs it.
    fn artifact_parameters(
        &self,
        plan: &Plan,
        job: &opsgraph_core::model::Job,
        inputs: &BTreeMap<String, Value>,
        private: &dyn Fn() -> PathBuf,
        env: &mut BTreeMap<String, String>,
        secrets: &mut Vec<Vec<u8>>,
    ) -> Result<(), Error> {
        for (name, spec, reference) in self.artifact_params(plan, inputs) {
            if !job.inputs.parameters.contains_key(&name) {
                continue;
            }
            let Some(id) = spec.artifact.as_deref() else { continue };
            match self.produced_artifact(&reference) {
                Ok(record) => {
                    env.insert(artifact_env(id), self.artifact_file(&record, &private(), secrets)?);
                }
                Err(why) => {
                    env.insert(
                        format!("OPSGRAPH_MISSING_ARTIFACT_{}", env_word(id)),
                        format!("parameter {name}: {why}"),
                    );
                }
            }
        }
        Ok(())
    }

    /// The plan's parameters that name an artifact of an earlier operation, with their values
    /// (from the intent, or given at a missing-input gate).
    pub(crate) fn artifact_params(
        &self,
        plan: &Plan,
        inputs: &BTreeMap<String, Value>,
    ) -> Vec<(String, opsgraph_core::model::ParamSpec, String)> {
        let Ok(pack) = self.pack(plan) else { return Vec::new() };
        let Some(template) = pack.templates.iter().find(|t| t.id == plan.template) else { return Vec::new() };
        template
            .parameters
            .iter()
            .filter(|(_, spec)| spec.artifact.is_some())
            .filter_map(|(name, spec)| {
                let value = inputs.get(name).or_else(|| plan.parameters.get(name))?.as_str()?.to_string();
                Some((name.clone(), spec.clone(), value))
            })
            .collect()
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
}

/// `object_storage.s3` -> `OBJECT_STORAGE_S3`.
fn env_word(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}
