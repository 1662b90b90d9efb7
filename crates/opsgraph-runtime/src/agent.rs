//! Jobs for resources that a remote agent serves (`access: {agent: NAME}`).
//!
//! Persist, then act, as everywhere else: the dispatcher enqueues the attempt as an agent task
//! ([`opsgraph_store::AgentTask`]) in the same transaction that records it `running`, with its
//! payload (program, script text, environment, the files it needs, evidence checks) sealed under
//! the master key. A worker thread then waits for the task through a store connection of its
//! own, copying the agent's log lines into the attempt's log file as they arrive, and turns the
//! report into the attempt's result.
//!
//! - Nobody claims it within [`Agents::claim_timeout`]: the attempt fails, naming the resource
//!   and the agent that should serve it (retried only as its retry policy says).
//! - Its agent stops heartbeating (the lease expired): the task is given up (`lost`, so the old
//!   holder is fenced off), and, as after a crash, its evidence is checked first — by an agent,
//!   through an `evidence` task: passes -> recovered; fails -> run again only when the job has
//!   an idempotency key and attempts left; else the operation fails with "outcome unknown".
//! - The operation is cancelled: the task is cancelled; its agent's next heartbeat is refused
//!   and it stops the job.
//!
//! The agent side ([`execute`]) runs the payload with the same code as a local attempt
//! (`jobs::run` on the local executor, the same evidence checks), streaming output lines
//! through [`LogStream`], masked.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use opsgraph_exec::{Cancel, EvidenceResult, Executor, LocalExecutor, Program};
use opsgraph_model::{Evidence, Job};
use opsgraph_plan::JobInstance;
use opsgraph_store::{now, now_ms, AgentTask, AgentTaskState, AgentWrite, Store, Write};
use serde_json::{json, Value};

use crate::agent_wire::{b64, unb64};
pub use crate::agent_wire::{AgentJob, AgentReport, WireEvidence, WireFile, WireProgram, MAX_FILES_BYTES};
use crate::jobs::{Task, TaskResult};
use crate::{Error, Runtime};

/// Opens another connection to the store.
pub type OpenStore = dyn Fn() -> Result<Box<dyn Store>, opsgraph_store::Error> + Send + Sync;

/// How a runtime reaches agents: through the store, which the server's agent routes share.
pub struct Agents {
    /// A connection for each attempt waiting for an agent.
    pub open: Arc<OpenStore>,
    /// Rung when agent work is queued or reported, so waiters in this process look at once;
    /// other processes' changes are seen by polling.
    pub bell: Arc<Bell>,
    /// How long a task may wait for an agent to claim it (default 60 s).
    pub claim_timeout: Duration,
    /// How long a claim lasts without a heartbeat (default 30 s; agents beat every third).
    pub lease: Duration,
    /// Connections of finished waits, for the next ones.
    pool: Mutex<Vec<Box<dyn Store>>>,
    /// The master keyring, loaded once (payloads and reports are sealed with it).
    keyring: std::sync::OnceLock<Result<Arc<opsgraph_secrets::Keyring>, String>>,
    /// What recent tasks' reports and logs are screened with.
    pub(crate) screens: crate::agent_screen::Screens,
}

impl Agents {
    pub fn new(open: Arc<OpenStore>) -> Agents {
        Agents {
            open,
            bell: Arc::new(Bell::default()),
            claim_timeout: Duration::from_secs(60),
            lease: Duration::from_secs(30),
            pool: Mutex::new(Vec::new()),
            keyring: std::sync::OnceLock::new(),
            screens: Default::default(),
        }
    }

    fn connection(&self) -> Result<Pooled<'_>, opsgraph_store::Error> {
        let pooled = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let store = match pooled {
            Some(s) => s,
            None => (self.open)()?,
        };
        Ok(Pooled { agents: self, store: Some(store) })
    }

    /// The master keyring of `data_dir`, loaded on first use.
    pub fn keyring(&self, data_dir: &Path) -> Result<Arc<opsgraph_secrets::Keyring>, Error> {
        self.keyring
            .get_or_init(|| {
                opsgraph_secrets::Keyring::load(data_dir).map(|(k, _)| Arc::new(k)).map_err(|e| e.to_string())
            })
            .clone()
            .map_err(Error::Secrets)
    }

    /// The plaintext payload of a claimed task, for the agent that claimed it; its `kind` is the
    /// task's (an evidence task shares its run task's payload and must never run the job).
    pub fn open_payload(&self, data_dir: &Path, task: &AgentTask) -> Result<Value, Error> {
        let sealed = task.payload.get("sealed").and_then(Value::as_str).unwrap_or_default();
        let aad = payload_aad(&task.operation, &task.job, task.attempt);
        let plain = open_with(&*self.keyring(data_dir)?, sealed, &aad)?;
        let mut payload: Value =
            serde_json::from_slice(plain.expose()).map_err(|e| Error::Secrets(format!("agent payload: {e}")))?;
        payload["kind"] = Value::String(task.kind.clone());
        Ok(payload)
    }

    /// What `task`'s log text and report are screened with before they are stored or shown
    /// (see [`Screen`](crate::Screen)), from its sealed payload.
    pub fn screen(&self, data_dir: &Path, task: &AgentTask) -> Result<Arc<crate::Screen>, Error> {
        self.screens.get(&task.id, || {
            let payload = self.open_payload(data_dir, task)?;
            let job: AgentJob =
                serde_json::from_value(payload).map_err(|e| Error::Secrets(format!("agent payload: {e}")))?;
            Ok(crate::Screen::new(&job))
        })
    }

    /// An agent's report, sealed for the store (it may hold secret artifacts).
    pub fn seal_report(&self, data_dir: &Path, task: &str, report: &Value) -> Result<Value, Error> {
        let text = serde_json::to_string(report).map_err(|e| Error::Secrets(e.to_string()))?;
        Ok(json!({ "sealed": seal_with(&*self.keyring(data_dir)?, &text, &report_aad(task))? }))
    }
}

/// A connection of the pool, given back when dropped.
struct Pooled<'a> {
    agents: &'a Agents,
    store: Option<Box<dyn Store>>,
}

impl std::ops::Deref for Pooled<'_> {
    type Target = dyn Store;
    fn deref(&self) -> &(dyn Store + 'static) {
        self.store.as_deref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut (dyn Store + 'static) {
        self.store.as_deref_mut().expect("present until dropped")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        let mut pool = self.agents.pool.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = self.store.take().filter(|_| pool.len() < 64) {
            pool.push(s);
        }
    }
}

/// `sealed:<base64>`, as `Runtime::seal_text` writes it.
fn seal_with(keys: &opsgraph_secrets::Keyring, plain: &str, aad: &str) -> Result<String, Error> {
    let sealed = keys.seal(plain.as_bytes(), aad.as_bytes()).map_err(|e| Error::Secrets(e.to_string()))?;
    Ok(format!("sealed:{}", b64(&sealed)))
}

fn open_with(keys: &opsgraph_secrets::Keyring, value: &str, aad: &str) -> Result<opsgraph_secrets::Secret, Error> {
    let b = value.strip_prefix("sealed:").ok_or_else(|| Error::Secrets(format!("{aad}: not a sealed value")))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b)
        .map_err(|_| Error::Secrets(format!("{aad}: the sealed value is not base64")))?;
    keys.open(&bytes, aad.as_bytes()).map_err(|e| Error::Secrets(format!("{aad}: {e}")))
}

/// A counter with a condition variable: `ring` bumps it, `wait` returns when it moved past what
/// the waiter saw, or at the timeout.
#[derive(Default)]
pub struct Bell {
    count: Mutex<u64>,
    rung: Condvar,
}

impl Bell {
    pub fn ring(&self) {
        let mut n = self.count.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        self.rung.notify_all();
    }

    pub fn seen(&self) -> u64 {
        *self.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until the count differs from `seen` or `timeout` passes; returns the count.
    pub fn wait(&self, seen: u64, timeout: Duration) -> u64 {
        let n = self.count.lock().unwrap_or_else(|e| e.into_inner());
        let (n, _) = self.rung.wait_timeout_while(n, timeout, |n| *n == seen).unwrap_or_else(|e| e.into_inner());
        *n
    }
}

/// The associated data of a task's payload: the attempt, whatever the kind, so recovery can
/// hand the same payload to an `evidence` task.
fn payload_aad(operation: &str, job: &str, attempt: u32) -> String {
    format!("agent:{operation}/{job}/{attempt}")
}

/// The associated data of a task's sealed report.
pub fn report_aad(task: &str) -> String {
    format!("agent-report:{task}")
}

fn task_id(operation: &str, job: &str, attempt: u32, kind: &str) -> String {
    format!("{operation}/{job}/{attempt}/{kind}")
}

/// The worker's side of an attempt handed to an agent.
pub(crate) struct Waiting {
    agents: Arc<Agents>,
    keyring: Arc<opsgraph_secrets::Keyring>,
    operation: String,
    agent: String,
    resource: String,
    /// The run task, and its payload (copied into an evidence task when its agent is lost).
    task: String,
    payload: Value,
    /// Run again after a lost agent when its evidence fails: an idempotency key and attempts left.
    retry_allowed: bool,
    actor: String,
}

impl Runtime {
    /// The agent that serves an instance's resource, unless the job runs `local` or `http`.
    pub(crate) fn agent_for(&self, instance: &JobInstance, job: &Job) -> Option<(String, String)> {
        use opsgraph_model::ExecutorKind;
        let id = instance.resource.as_ref()?;
        if matches!(job.run.as_ref().and_then(|r| r.executor), Some(ExecutorKind::Local | ExecutorKind::Http)) {
            return None;
        }
        let doc = self.resource_doc_by_id(id)?;
        let agent = doc.access.as_ref()?.agent.clone()?;
        Some((agent, id.clone()))
    }

    fn resource_doc_by_id(&self, id: &str) -> Option<opsgraph_model::Resource> {
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
        let record = AgentTask {
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
        task.agent = Some(Waiting {
            keyring: self.keyring()?,
            agents,
            operation: operation.to_string(),
            agent,
            resource,
            task: id,
            payload: record.payload.clone(),
            retry_allowed: key.is_some() && task.attempt < max_attempts,
            actor: self.actor.clone(),
        });
        Ok(Some(Write::Agent(AgentWrite::Enqueue(Box::new(record)))))
    }

    /// After a restart: attempts left `running` on agent-served resources whose agent task
    /// exists are handed to `wait` (their agent may still be running them, or have reported, or
    /// be lost: the waiting worker decides as it would have); the others are returned for the
    /// usual recovery.
    pub(crate) fn agent_orphans(
        &self,
        op: &opsgraph_store::OperationRecord,
        plan: &opsgraph_plan::Plan,
        pack: &opsgraph_pack::Pack,
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
                timeout: None,
                executor: Arc::new(LocalExecutor),
                dir: run_dir.to_path_buf(),
                stem: format!("{}.{}", instance.id, record.attempts),
                cancel: Cancel::new(),
                check_first: false,
                secret_outputs: vec![],
                mask: vec![],
                agent: Some(Waiting {
                    keyring: self.keyring()?,
                    agents: agents.clone(),
                    operation: op.id.clone(),
                    agent,
                    resource,
                    task: id,
                    payload: stored.payload,
                    retry_allowed: key.is_some() && record.attempts < max_attempts,
                    actor: self.actor.clone(),
                }),
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
    Ok(AgentJob {
        instance: task.instance.clone(),
        attempt: task.attempt,
        kind: kind.to_string(),
        job: task.job.clone(),
        evidence: task.evidence.clone(),
        program,
        env: task.env.clone(),
        files,
        timeout_ms: task.timeout.map(|t| t.as_millis() as u64),
        check_first: task.check_first,
        secret_outputs: task.secret_outputs.clone(),
        mask: task.mask.iter().map(|m| b64(m)).collect(),
    })
}

/// An executor that refuses, saying why: the attempt is "could not start" with that reason.
struct Refuse(String);

impl Executor for Refuse {
    fn run(&self, _: &opsgraph_exec::Spec, _: &Cancel) -> opsgraph_exec::Run {
        opsgraph_exec::Run {
            outcome: opsgraph_exec::Outcome::CouldNotStart { error: self.0.clone() },
            output: opsgraph_exec::Output::default(),
            http_status: None,
            leaked: false,
        }
    }
}

fn result(task: &Task) -> TaskResult {
    TaskResult {
        instance: task.instance.clone(),
        attempt: task.attempt,
        outcome: String::new(),
        failure: None,
        satisfied_without_run: false,
        evidence: Vec::new(),
        produced: Vec::new(),
        log: None,
        duration: Duration::ZERO,
        cancelled: false,
        unknown: false,
    }
}

fn failed(task: &Task, outcome: &str, failure: String) -> TaskResult {
    let mut r = result(task);
    r.outcome = outcome.into();
    r.failure = Some(failure);
    r
}

/// Waits for the agent's report of `task` (on a worker thread).
pub(crate) fn wait(task: Task, w: Waiting) -> TaskResult {
    let started = Instant::now();
    let mut store = match w.agents.connection() {
        Ok(s) => s,
        Err(e) => {
            return failed(&task, "could not start", format!("could not open the store to wait for the agent: {e}"))
        }
    };
    w.agents.bell.ring();
    let log_path = task.dir.join(format!("{}.log", task.stem));
    let mut log_seq = 0i64;
    let mut logged = false;
    let mut current = w.task.clone();
    let mut recovering = false;
    let poll = Duration::from_millis(100);
    loop {
        let seen = w.agents.bell.seen();
        let t = match store.agent_task(&current) {
            Ok(Some(t)) => t,
            Ok(None) => return failed(&task, "lost", format!("agent task {current} is not in the store")),
            Err(_) => {
                // The store may be busy: look again.
                std::thread::sleep(poll);
                continue;
            }
        };
        if !recovering {
            if let Ok(lines) = store.agent_log(&current, log_seq) {
                if let Some(last) = lines.last() {
                    log_seq = last.seq;
                    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&log_path) {
                        for l in &lines {
                            let _ = f.write_all(l.text.as_bytes());
                        }
                        logged = true;
                    }
                }
            }
        }
        let now = now_ms();
        let settle = |store: &mut Pooled<'_>, to: AgentTaskState, extra: Vec<Write>| {
            let at = opsgraph_store::now();
            let mut writes =
                vec![Write::Agent(AgentWrite::Settle { task: t.id.clone(), from: t.state, to, now_ms: now, at })];
            writes.extend(extra);
            store.commit(&writes)
        };
        if task.cancel.is_cancelled() && matches!(t.state, AgentTaskState::Queued | AgentTaskState::Claimed) {
            if settle(&mut store, AgentTaskState::Cancelled, vec![]).is_ok() {
                w.agents.bell.ring();
                let mut r = failed(&task, "cancelled", "cancelled".into());
                r.cancelled = true;
                return r;
            }
            continue;
        }
        match t.state {
            AgentTaskState::Queued if now > t.expires_ms => {
                if settle(&mut store, AgentTaskState::Unclaimed, vec![]).is_err() {
                    continue;
                }
                let waited = w.agents.claim_timeout.as_secs_f64();
                let why =
                    format!(
                    "no agent serving {} (agent `{}`) claimed {} within {waited}s; is `opsgraph agent` running for it?",
                    w.resource, w.agent, if recovering { "the evidence check" } else { "the job" }
                );
                let mut r = failed(&task, "no agent", why);
                if recovering {
                    r.unknown = true;
                    r.failure = Some(format!("its agent was lost and {}", r.failure.unwrap_or_default()));
                }
                return r;
            }
            AgentTaskState::Claimed if now > t.expires_ms => {
                if recovering {
                    if settle(&mut store, AgentTaskState::Lost, vec![]).is_err() {
                        continue;
                    }
                    let mut r =
                        failed(&task, "lost", "its agent was lost, and the agent checking its evidence too".into());
                    r.unknown = true;
                    return r;
                }
                // Given up first (the old holder is fenced off), then the evidence is checked
                // by an agent before anything runs again.
                let evidence_id = task_id(&w.operation, &task.instance, task.attempt, "evidence");
                let note = crate::timeline::entry(
                    &w.operation,
                    &w.actor,
                    "agent_lost",
                    format!(
                        "{} attempt {}: agent {} stopped heartbeating; its outcome is unknown: checking its evidence before anything runs again",
                        task.instance,
                        task.attempt,
                        t.claimed_by.clone().unwrap_or_default()
                    ),
                    json!({"job": task.instance, "attempt": task.attempt, "task": t.id}),
                );
                let extra = vec![Write::Timeline(note), evidence_task(&w, &task, &evidence_id)];
                if settle(&mut store, AgentTaskState::Lost, extra).is_err() {
                    continue;
                }
                w.agents.bell.ring();
                current = evidence_id;
                recovering = true;
                continue;
            }
            AgentTaskState::Lost if !recovering => {
                // A restart found it lost: check its evidence (once).
                let evidence_id = task_id(&w.operation, &task.instance, task.attempt, "evidence");
                if matches!(store.agent_task(&evidence_id), Ok(None)) {
                    if store.commit(&[evidence_task(&w, &task, &evidence_id)]).is_err() {
                        continue;
                    }
                    w.agents.bell.ring();
                }
                current = evidence_id;
                recovering = true;
                continue;
            }
            AgentTaskState::Reported => {
                let report = match open_report(&w, &t) {
                    Ok(r) => r,
                    Err(e) => return failed(&task, "lost", format!("the agent's report does not open: {e}")),
                };
                let mut r = to_result(&task, report);
                if logged {
                    r.log = Some(log_path.clone());
                }
                if recovering {
                    r.unknown = true;
                    r.satisfied_without_run = true;
                    r.outcome = "outcome unknown: its agent was lost".into();
                    r.produced.clear();
                    r.failure = r.failure.map(|f| format!("its agent was lost and {f}"));
                    if r.failure.is_some() && !w.retry_allowed {
                        r.failure = r.failure.map(|f| {
                            format!("{f}; not run again without an idempotency key and attempts left: a person decides")
                        });
                    }
                } else if r.duration.is_zero() {
                    r.duration = started.elapsed();
                }
                return r;
            }
            AgentTaskState::Unclaimed | AgentTaskState::Lost => {
                let mut r = failed(&task, "lost", format!("agent task {} was given up ({})", t.id, t.state.as_str()));
                r.unknown = recovering;
                return r;
            }
            AgentTaskState::Cancelled => {
                let mut r = failed(&task, "cancelled", "cancelled".into());
                r.cancelled = true;
                return r;
            }
            _ => {}
        }
        // Until something moves here, another process commits, or the deadline passes.
        let until = Duration::from_millis((t.expires_ms - now).clamp(1, 250) as u64);
        w.agents.bell.wait(seen, until.min(poll));
    }
}

/// The evidence task that replaces a lost run task: the same payload, checks only.
fn evidence_task(w: &Waiting, task: &Task, id: &str) -> Write {
    let at = now();
    Write::Agent(AgentWrite::Enqueue(Box::new(AgentTask {
        id: id.to_string(),
        operation: w.operation.clone(),
        job: task.instance.clone(),
        attempt: task.attempt,
        kind: "evidence".into(),
        agent: w.agent.clone(),
        resource: w.resource.clone(),
        state: AgentTaskState::Queued,
        payload: w.payload.clone(),
        lease: None,
        claimed_by: None,
        claims: 0,
        expires_ms: now_ms() + w.agents.claim_timeout.as_millis() as i64,
        report: None,
        created_at: at.clone(),
        updated_at: at,
    })))
}

fn open_report(w: &Waiting, t: &AgentTask) -> Result<AgentReport, String> {
    let sealed = t.report.as_ref().and_then(|r| r.get("sealed")).and_then(Value::as_str).unwrap_or_default();
    let plain = open_with(&w.keyring, sealed, &report_aad(&t.id)).map_err(|e| e.to_string())?;
    serde_json::from_slice(plain.expose()).map_err(|e| e.to_string())
}

/// The attempt's result from a report: produced files written where a local run leaves them.
fn to_result(task: &Task, report: AgentReport) -> TaskResult {
    let mut r = result(task);
    r.outcome = report.outcome;
    r.failure = report.failure;
    r.satisfied_without_run = report.satisfied_without_run;
    r.cancelled = report.cancelled;
    r.duration = Duration::from_millis(report.duration_ms);
    r.evidence = report
        .evidence
        .into_iter()
        .filter_map(|e| {
            let check = task.evidence.iter().find(|c| c.id == e.check)?.clone();
            let result = EvidenceResult {
                passed: e.passed,
                expected: e.expected,
                observed: e.observed,
                detail: e.detail,
                attempts: e.attempts,
            };
            Some((check, result))
        })
        .collect();
    if !report.produced.is_empty() {
        let out = task.dir.join(format!("{}.out", task.stem));
        let _ = std::fs::create_dir_all(&out);
        for f in report.produced {
            // Only the job's declared outputs, as plain names.
            if !task.job.outputs.artifacts.contains(&f.name) || f.name.contains('/') {
                continue;
            }
            let path = out.join(&f.name);
            if crate::secrets::private_file(&out, &f.name, &unb64(&f.content)).is_ok() {
                r.produced.push((f.name, path));
            }
        }
    }
    r
}

/// Runs a claimed payload on this machine the way a local attempt runs: `jobs::run` on the
/// local executor (the HTTP one for HTTP jobs) and the same evidence checks. `dir` is the task's
/// private working directory; `tee` sees the job's output as it arrives.
pub fn execute(payload: &Value, dir: &Path, tee: Option<opsgraph_exec::Tee>, cancel: &Cancel) -> AgentReport {
    let refused =
        |why: String| AgentReport { outcome: "could not start".into(), failure: Some(why), ..Default::default() };
    let job: AgentJob = match serde_json::from_value(payload.clone()) {
        Ok(j) => j,
        Err(e) => return refused(format!("the payload is not a job this agent understands: {e}")),
    };
    if let Err(e) = crate::secrets::private_file(dir, ".task", b"") {
        return refused(format!("cannot make the working directory {}: {e}", dir.display()));
    }
    let mut env = job.env.clone();
    for f in &job.files {
        match crate::secrets::private_file(&dir.join("files"), &f.name, &unb64(&f.content)) {
            Ok(path) => {
                env.insert(f.name.clone(), path.display().to_string());
            }
            Err(e) => return refused(format!("cannot write {}: {e}", f.name)),
        }
    }
    let program = match &job.program {
        None => None,
        Some(WireProgram::Argv(a)) => Some(Program::Argv(a.clone())),
        Some(WireProgram::Shell(l)) => Some(Program::Shell(l.clone())),
        Some(WireProgram::Script { name, content, args }) => {
            let name = if name.is_empty() || name.contains('/') || name.starts_with('.') { "script.sh" } else { name };
            match crate::secrets::private_file(&dir.join("script"), name, &unb64(content)) {
                Ok(path) => Some(Program::Script { path, args: args.clone() }),
                Err(e) => return refused(format!("cannot write the script: {e}")),
            }
        }
        Some(WireProgram::Http { method, url, headers, body }) => Some(Program::Http {
            method: method.clone(),
            url: url.clone(),
            headers: headers.clone(),
            body: unb64(body),
        }),
    };
    let executor: Arc<dyn Executor> = if matches!(program, Some(Program::Http { .. })) {
        Arc::new(opsgraph_exec::HttpExecutor)
    } else {
        Arc::new(TeeExecutor(tee))
    };
    let mask: Vec<Vec<u8>> = job.mask.iter().map(|m| unb64(m)).collect();
    let started = Instant::now();
    if job.kind == "evidence" {
        let (checks, failure) = crate::jobs::evidence(&job.evidence, &*executor, &env, cancel);
        let (checks, failure) = crate::jobs::masked(mask, checks, failure);
        return AgentReport {
            outcome: "evidence checked".into(),
            failure,
            satisfied_without_run: true,
            evidence: wire_evidence(checks),
            duration_ms: started.elapsed().as_millis() as u64,
            ..Default::default()
        };
    }
    let task = Task {
        instance: job.instance.clone(),
        attempt: job.attempt,
        job: job.job.clone(),
        evidence: job.evidence.clone(),
        program,
        env,
        timeout: job.timeout_ms.map(Duration::from_millis),
        executor,
        dir: dir.to_path_buf(),
        stem: "job".into(),
        cancel: cancel.clone(),
        check_first: job.check_first,
        secret_outputs: job.secret_outputs.clone(),
        mask,
        agent: None,
    };
    let r = crate::jobs::run(task);
    AgentReport {
        outcome: r.outcome,
        failure: r.failure,
        satisfied_without_run: r.satisfied_without_run,
        cancelled: r.cancelled,
        evidence: wire_evidence(r.evidence),
        produced: r
            .produced
            .iter()
            .filter_map(|(id, path)| Some(WireFile { name: id.clone(), content: b64(&std::fs::read(path).ok()?) }))
            .collect(),
        duration_ms: r.duration.as_millis() as u64,
    }
}

fn wire_evidence(checks: Vec<(Evidence, EvidenceResult)>) -> Vec<WireEvidence> {
    checks
        .into_iter()
        .map(|(e, r)| WireEvidence {
            check: e.id,
            passed: r.passed,
            expected: r.expected,
            observed: r.observed,
            detail: r.detail,
            attempts: r.attempts,
        })
        .collect()
}

/// The local executor, with the job's own run (the spec that carries a transfer) teed.
struct TeeExecutor(Option<opsgraph_exec::Tee>);

impl Executor for TeeExecutor {
    fn run(&self, spec: &opsgraph_exec::Spec, cancel: &Cancel) -> opsgraph_exec::Run {
        match &self.0 {
            Some(tee) if spec.transfer.is_some() => {
                let mut spec = spec.clone();
                spec.tee = Some(tee.clone());
                LocalExecutor.run(&spec, cancel)
            }
            _ => LocalExecutor.run(spec, cancel),
        }
    }

    fn is_local(&self) -> bool {
        true
    }
}

/// A job's output on its way to the server: whole lines, secret values masked (a value split
/// across a line break is not recognised; the final log is masked the same way).
pub struct LogStream {
    masking: crate::jobs::Masking,
    pending: Vec<u8>,
}

impl LogStream {
    /// For the payload an agent claimed (its secret values are masked).
    pub fn for_payload(payload: &Value) -> LogStream {
        let mask: Vec<Vec<u8>> = payload
            .get("mask")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(unb64)
            .collect();
        LogStream { masking: crate::jobs::Masking::new(mask), pending: Vec::new() }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The complete lines so far, masked (everything, when `all` or past 64 KiB), at most
    /// 128 KiB at a time.
    pub fn take(&mut self, all: bool) -> String {
        let cut = if all || self.pending.len() > 64 << 10 {
            self.pending.len()
        } else {
            match self.pending.iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                None => return String::new(),
            }
        };
        // At most 128 KiB a chunk (the server takes 256 KiB): call again for the rest.
        let cut = cut.min(128 << 10);
        let chunk: Vec<u8> = self.pending.drain(..cut).collect();
        String::from_utf8_lossy(&self.masking.bytes(&chunk)).into_owned()
    }
}
