//! Handing attempts to agents: the task enqueued with the attempt's `running` record, and
//! attempts left `running` after a restart waited for again.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use opsgraph_core::model::Job;
use opsgraph_core::plan::JobInstance;
use opsgraph_exec::{Cancel, LocalExecutor, Program};
use opsgraph_store::{now, now_ms, AgentTask, AgentTaskState, AgentWrite, Store, Write};
use serde_json::{json, Value};

use super::pool::{payload_aad, task_id, Waiting};
use super::wire::{b64, AgentJob, WireFile, WireProgram, MAX_FILES_BYTES};
use crate::task::{Refuse, Task};
use crate::{Error, Runtime};

impl Runtime {
    /// The agent that serves an instance's resource, unless the job runs `local` or `http`.
    pub(crate) fn agent_for(&self, instance: &JobInstance, job: &Job) -> Option<(String, String)> {
        use opsgraph_core::model::ExecutorKind;
        let id = instance.resource.as_ref()?;
        if matches!(job.run.as_ref().and_then(|r| r.executor), Some(ExecutorKind::Local | ExecutorKind::Http)) {
            return None;
        }
        let doc = self.resource_doc_by_id(id)?;
        let agent = doc.access.as_ref()?.agent.clone()?;
        Some((agent, id.clone()))
    }

    fn resource_doc_by_id(&self, id: &str) -> Option<opsgraph_core::model::Resource> {
        if let Some(r) = self.resources.iter().find(|r| r.id == id) {
            return Some(r.clone());
        }
        self.store.resource(id).ok().flatten().and_then(|r| serde_json::from_value(r.doc).ok())
    }

    /// When `task` is for a resource an agent serves: the write that enqueues it (committed with
    /// the attempt's `running` record), and the task now waits for that agent. An attempt that
    /// cannot be handed over gets an executor that says why.
    pub(crate) fn agent_enqueue(
        &self,
        operation: &str,
        instance: &JobInstance,
        task: &mut Task,
        key: Option<&str>,
    ) -> Result<Option<Write>, Error> {
        let Some((agent, resource)) = self.agent_for(instance, &task.job) else { return Ok(None) };
        let Some(agents) = self.agents.clone() else {
            task.executor = Arc::new(Refuse(format!(
                "{resource} is served by agent `{agent}`, and this runtime reaches no agents (run it through `opsgraph serve` or `apply`)"
            )));
            return Ok(None);
        };
        let payload = match agent_job(task, "run") {
            Ok(p) => p,
            Err(why) => {
                task.executor = Arc::new(Refuse(why));
                return Ok(None);
            }
        };
        let plain = serde_json::to_string(&payload).map_err(|e| Error::Secrets(e.to_string()))?;
        let sealed = self.seal_text(&plain, &payload_aad(operation, &task.instance, task.attempt))?;
        let id = task_id(operation, &task.instance, task.attempt, "run");
        let at = now();
        let max_attempts = task.job.controls.retry_policy.as_ref().map_or(1, |p| p.max_attempts);
        let mut record = AgentTask {
            id: id.clone(),
            operation: operation.to_string(),
            job: task.instance.clone(),
            attempt: task.attempt,
            kind: "run".into(),
            agent: agent.clone(),
            resource: resource.clone(),
            state: AgentTaskState::Queued,
            payload: json!({ "sealed": sealed }),
            lease: None,
            claimed_by: None,
            claims: 0,
            expires_ms: now_ms() + agents.claim_timeout.as_millis() as i64,
            report: None,
            created_at: at.clone(),
            updated_at: at,
        };
        // A claim of this process waiting for work takes it in this very commit: no transaction
        // of its own before its agent starts (it answers once the commit is done: `wait`).
        let keyring = self.keyring()?;
        let handed = agents.bell.hand(&mut record, agents.lease.as_millis() as i64);
        let waiting = Waiting {
            keyring,
            agents,
            operation: operation.to_string(),
            agent,
            resource,
            task: id,
            payload: record.payload.clone(),
            retry_allowed: key.is_some() && task.attempt < max_attempts,
            actor: self.actor.clone(),
            fresh: true,
        };
        task.instead = Some(Box::new(move |task| super::wait::wait(task, waiting)));
        Ok(Some(Write::Agent(match handed {
            Some(claim) => AgentWrite::Handed { task: Box::new(record), claim: Box::new(claim) },
            None => AgentWrite::Enqueue(Box::new(record)),
        })))
    }

    /// After a restart: attempts left `running` on agent-served resources whose agent task
    /// exists are handed to `wait` (their agent may still be running them, or have reported, or
    /// be lost: the waiting worker decides as it would have); the others are returned for the
    /// usual recovery.
    pub(crate) fn agent_orphans(
        &self,
        op: &opsgraph_store::OperationRecord,
        plan: &opsgraph_core::plan::Plan,
        pack: &opsgraph_core::pack::Pack,
        orphans: Vec<opsgraph_store::JobRecord>,
        run_dir: &Path,
        mut wait: impl FnMut(Task, Option<String>),
    ) -> Result<Vec<opsgraph_store::JobRecord>, Error> {
        let Some(agents) = self.agents.clone() else { return Ok(orphans) };
        let template = pack.templates.iter().find(|t| t.id == plan.template);
        let mut left = Vec::new();
        for record in orphans {
            let found = plan.jobs.iter().find(|j| j.id == record.id).and_then(|i| {
                let job = template.and_then(|t| pack.job(t, &i.job))?.clone();
                Some((i, job))
            });
            let Some((instance, job)) = found else {
                left.push(record);
                continue;
            };
            let Some((agent, resource)) = self.agent_for(instance, &job) else {
                left.push(record);
                continue;
            };
            let id = task_id(&op.id, &instance.id, record.attempts, "run");
            let Some(stored) = self.store.agent_task(&id)? else {
                left.push(record);
                continue;
            };
            let key = record.outcome.get("key").and_then(Value::as_str).map(str::to_string);
            let max_attempts = job.controls.retry_policy.as_ref().map_or(1, |p| p.max_attempts);
            let evidence = job.outputs.evidence.iter().filter_map(|e| pack.evidence.get(e).cloned()).collect();
            let task = Task {
                instance: instance.id.clone(),
                attempt: record.attempts,
                job,
                evidence,
                program: None,
                env: BTreeMap::new(),
                libraries: vec![],
                timeout: None,
                executor: Arc::new(LocalExecutor),
                mark: None,
                dir: run_dir.to_path_buf(),
                stem: format!("{}.{}", instance.id, record.attempts),
                cancel: Cancel::new(),
                check_first: false,
                secret_outputs: vec![],
                mask: vec![],
                instead: Some({
                    let waiting = Waiting {
                        keyring: self.keyring()?,
                        agents: agents.clone(),
                        operation: op.id.clone(),
                        agent,
                        resource,
                        task: id,
                        payload: stored.payload,
                        retry_allowed: key.is_some() && record.attempts < max_attempts,
                        actor: self.actor.clone(),
                        fresh: false,
                    };
                    Box::new(move |task| super::wait::wait(task, waiting))
                }),
                share_live: self.share_live(&op.id, &instance.id, record.attempts),
            };
            wait(task, key);
        }
        Ok(left)
    }
}

/// The payload of `task`: the program by value, files by content.
fn agent_job(task: &Task, kind: &str) -> Result<AgentJob, String> {
    let program = match &task.program {
        None => None,
        Some(Program::Argv(a)) => Some(WireProgram::Argv(a.clone())),
        Some(Program::Shell(l)) => Some(WireProgram::Shell(l.clone())),
        Some(Program::Script { path, args }) => {
            let content = std::fs::read(path).map_err(|e| format!("cannot read the script {}: {e}", path.display()))?;
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "script.sh".into());
            Some(WireProgram::Script { name, content: b64(&content), args: args.clone() })
        }
        Some(Program::Http { method, url, headers, body }) => Some(WireProgram::Http {
            method: method.clone(),
            url: url.clone(),
            headers: headers.clone(),
            body: b64(body),
        }),
    };
    let mut files = Vec::new();
    let mut total = 0usize;
    for (k, v) in &task.env {
        if !(k.starts_with("OPSGRAPH_ARTIFACT_") || k.ends_with("_CREDENTIALS") || k == "KUBECONFIG") {
            continue;
        }
        let bytes = std::fs::read(v).map_err(|e| format!("cannot read {k} ({v}) for the agent: {e}"))?;
        total += bytes.len();
        if total > MAX_FILES_BYTES {
            return Err(format!(
                "the files this job needs are larger than the {} MiB an agent job carries ({k})",
                MAX_FILES_BYTES >> 20
            ));
        }
        files.push(WireFile { name: k.clone(), content: b64(&bytes) });
    }
    let mut libraries = Vec::new();
    for path in &task.libraries {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read the library {}: {e}", path.display()))?;
        total += bytes.len();
        if total > MAX_FILES_BYTES {
            return Err(format!(
                "the files this job needs are larger than the {} MiB an agent job carries ({})",
                MAX_FILES_BYTES >> 20,
                path.display()
            ));
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        libraries.push(WireFile { name, content: b64(&bytes) });
    }
    Ok(AgentJob {
        instance: task.instance.clone(),
        attempt: task.attempt,
        kind: kind.to_string(),
        job: task.job.clone(),
        evidence: task.evidence.clone(),
        program,
        env: task.env.clone(),
        files,
        libraries,
        timeout_ms: task.timeout.map(|t| t.as_millis() as u64),
        check_first: task.check_first,
        secret_outputs: task.secret_outputs.clone(),
        mask: task.mask.iter().map(|m| b64(m)).collect(),
    })
}
