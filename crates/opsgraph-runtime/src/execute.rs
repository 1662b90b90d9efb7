//! The driver's executor: it carries out what [`decide`](crate::decide) decided — commits the
//! writes (holding results for a group commit), prepares and starts attempts on the workers,
//! waits, moves the operation with its lifecycle's effects — and turns the workers' reports into
//! the next decision's input.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use opsgraph_core::pack::{JobIndex, Pack};
use opsgraph_core::plan::job_lifecycle::JobEffect;
use opsgraph_core::plan::lifecycle;
use opsgraph_core::plan::{JobInstance, Plan};
use opsgraph_exec::{Cancel, Program};
use opsgraph_store::{AgentWrite, ArtifactRecord, GateRecord, JobRecord, JobState, OperationRecord, Write};
use serde_json::Value;

use crate::attempt::Plain;
use crate::decide::{self, Decision, Effect, Finished, Snapshot};
use crate::jobs::{self, render_key};
use crate::task::{Task, TaskResult};
use crate::timeline::Progress;
use crate::waiting::Waiting;
use crate::workers::Workers;
use crate::{Error, Runtime};

/// One drive of one operation: what it was started with, and what it keeps between decisions.
pub(crate) struct Drive<'p> {
    pub(crate) plan: &'p Plan,
    pub(crate) pack: &'p Pack,
    pub(crate) jobs: Option<JobIndex<'p>>,
    pub(crate) instances: HashMap<&'p str, &'p JobInstance>,
    /// Values given at answered missing-input gates.
    pub(crate) inputs: BTreeMap<String, Value>,
    pub(crate) actor: String,
    /// Every attempt works and logs in the operation's run directory.
    pub(crate) run_dir: PathBuf,
    pub(crate) tx: mpsc::Sender<TaskResult>,
    pub(crate) rx: mpsc::Receiver<TaskResult>,
    pub(crate) workers: Workers,
    pub(crate) in_flight: HashMap<String, Cancel>,
    pub(crate) not_before: HashMap<String, Instant>,
    /// The idempotency key of each attempt in flight, as rendered when it started.
    pub(crate) keys: HashMap<String, Option<String>>,
    /// The job records: read from the store once (and after recovery rewrote them); afterwards
    /// this driver is their only writer and keeps its copy current as it commits.
    pub(crate) cache: HashMap<String, JobRecord>,
    pub(crate) cache_stale: bool,
    pub(crate) recovered_checked: bool,
    /// Results not yet committed: they go into the same transaction as the attempts they let
    /// start (one commit per job on a chain), or alone before the driver waits or stops.
    pub(crate) carry: Vec<Write>,
    /// Agents' reports handed to workers in memory whose writes are in `carry`: told once
    /// `carry` is committed (their agents are answered then), or dropped uncommitted with the drive.
    pub(crate) handed: Vec<std::sync::Arc<crate::task::Handed>>,
    /// The claims of those reports' agents' next tasks (`AgentWrite::Claim`): committed with
    /// `carry`, last — after the tasks that commit enqueues, which they may take.
    pub(crate) claims: Vec<Write>,
    /// The operation row as last read, with the store's data version and this runtime's count of
    /// operation writes at that moment: while neither changed, nobody changed the row (pause,
    /// cancel and gate answers from other processes change the data version).
    pub(crate) op_seen: Option<(i64, u64, std::sync::Arc<OperationRecord>)>,
    /// The store cannot tell when another connection committed (no data version: PostgreSQL).
    /// Then the copy of the operation row is kept between turns anyway (every commit that starts
    /// attempts carries `Write::ExpectVersion` of it, on both backends: a pause or cancel
    /// committed meanwhile refuses the starts, and the row is read again). The copy is also
    /// dropped whenever the driver waits (for reports, for a backoff), so a change made while
    /// attempts run is seen after the wait, as when the row was read on every turn.
    pub(crate) guarded: bool,
    /// The next turn decides on the copy of the operation row without asking the store whether
    /// another connection committed (its data version): set for the turn right after a batch of
    /// results left nothing in flight (a chain's next job). Every write such a turn can make is
    /// guarded by the row's version — the commit that starts attempts by `ExpectVersion`, a
    /// transition by its expected version — so a pause or cancel committed meanwhile refuses it
    /// and the row is read again; with nothing in flight there is nothing to cancel sooner. One
    /// SQLite read transaction and one `PRAGMA` (prepared again at every run) fewer per chained
    /// job (issue [N] 5, docs/benchmarks.md).
    pub(crate) row_trusted: bool,
    /// Jobs before this index of `plan.jobs` are all done.
    pub(crate) done_prefix: usize,
    /// Which jobs may be ready, kept with `cache`.
    pub(crate) waiting: Waiting,
}

impl<'p> Drive<'p> {
    pub(crate) fn new(
        plan: &'p Plan,
        pack: &'p Pack,
        inputs: BTreeMap<String, Value>,
        actor: String,
        run_dir: PathBuf,
    ) -> Self {
        let template = pack.templates.iter().find(|t| t.id == plan.template);
        let (tx, rx) = mpsc::channel::<TaskResult>();
        Drive {
            plan,
            pack,
            jobs: template.map(|t| pack.job_index(t)),
            instances: plan.jobs.iter().map(|j| (j.id.as_str(), j)).collect(),
            inputs,
            actor,
            run_dir,
            workers: Workers::new(tx.clone()),
            tx,
            rx,
            in_flight: HashMap::new(),
            not_before: HashMap::new(),
            keys: HashMap::new(),
            cache: HashMap::new(),
            cache_stale: true,
            recovered_checked: false,
            carry: Vec::new(),
            handed: Vec::new(),
            claims: Vec::new(),
            op_seen: None,
            guarded: false,
            row_trusted: false,
            done_prefix: 0,
            waiting: Waiting::default(),
        }
    }

    /// What `decide` sees: this drive's bookkeeping with what was just read from the store.
    pub(crate) fn snapshot<'a>(
        &'a self,
        op: &'a OperationRecord,
        gates: &'a [GateRecord],
        blocked: &'a HashSet<String>,
        waiting_children: &'a [String],
        concurrency: usize,
    ) -> Snapshot<'a> {
        Snapshot {
            op,
            actor: &self.actor,
            plan: &self.plan.jobs,
            instances: &self.instances,
            jobs: &self.cache,
            gates,
            in_flight: &self.in_flight,
            not_before: &self.not_before,
            now: Instant::now(),
            wall_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            concurrency,
            blocked,
            waiting_children,
            done_prefix: self.done_prefix,
            waiting: &self.waiting,
            rollouts: &self.plan.rollouts,
        }
    }

    /// The driver is about to wait: a guarded copy of the operation row is read again after it.
    pub(crate) fn forget_op(&mut self) {
        if self.guarded {
            self.op_seen = None;
        }
    }

    /// What `carry` commits when it is committed alone: its writes, then the claims.
    fn take_carry(&mut self) -> Vec<Write> {
        let mut writes = std::mem::take(&mut self.carry);
        writes.append(&mut self.claims);
        writes
    }

    /// `carry` was committed: the reports handed over with it are durable, their agents may be answered.
    fn carried(&mut self) {
        for h in self.handed.drain(..) {
            h.committed();
        }
    }

    fn remember(&mut self, writes: &[Write]) {
        for j in writes.iter().filter_map(Write::job) {
            self.waiting.update(&self.plan.jobs, &self.cache, j);
            self.cache.insert(j.id.clone(), cached_of(j));
        }
    }
}

/// What the driver keeps of a job record: all of a running one (recovery reads its key), and of
/// any other only the failure of its outcome, the one part `decide` reads. An outcome object per
/// finished job was most of a 10,000-job drive's memory. The store keeps the whole record.
pub(crate) fn cached(mut j: JobRecord) -> JobRecord {
    if j.state != JobState::Running {
        j.outcome = kept_outcome(&j.outcome);
    }
    j
}

/// [`cached`] of a record that stays where it is (a write about to be committed): its outcome is
/// not copied only to be dropped.
pub(crate) fn cached_of(j: &JobRecord) -> JobRecord {
    JobRecord {
        operation: j.operation.clone(),
        id: j.id.clone(),
        state: j.state,
        attempts: j.attempts,
        outcome: if j.state == JobState::Running { j.outcome.clone() } else { kept_outcome(&j.outcome) },
        updated_at: j.updated_at.clone(),
    }
}

fn kept_outcome(outcome: &Value) -> Value {
    match outcome.get("failure").filter(|f| !f.is_null()) {
        Some(f) => serde_json::json!({ "failure": f }),
        None => Value::Null,
    }
}

/// What the drive does after an executed decision.
pub(crate) enum Flow {
    /// Go on: wait for reports when attempts are in flight, else decide again.
    Next,
    /// Decide again now.
    Again,
    /// The drive is over, in this state.
    Stop(opsgraph_core::model::OperationState),
}

impl Runtime {
    /// Carries out one decision.
    pub(crate) fn execute(
        &mut self,
        d: &mut Drive<'_>,
        op: &OperationRecord,
        decision: Decision,
        progress: Progress<'_>,
    ) -> Result<Flow, Error> {
        d.done_prefix = decision.done_prefix;
        // What was carried before this decision (results): kept even when its starts are refused.
        let carried = d.carry.len();
        let mut writes = Some(decision.writes);
        let mut flow = Flow::Next;
        for effect in decision.effects {
            match effect {
                Effect::Flush => {
                    if !d.carry.is_empty() {
                        self.commit_timeline(&d.take_carry(), progress)?;
                        d.carried();
                    }
                }
                Effect::Hold => {
                    let held = writes.take().unwrap_or_default();
                    d.remember(&held);
                    d.carry.extend(held);
                }
                Effect::Start(ready) => {
                    if !self.start_attempts(d, op, &ready, progress)? {
                        // The operation moved since its row was read (guarded): the results
                        // carried are committed alone, and the next turn reads the row again.
                        d.carry.truncate(carried);
                        self.commit_timeline(&d.take_carry(), progress)?;
                        d.carried();
                        return Ok(Flow::Again);
                    }
                }
                Effect::Sleep(wait) => {
                    d.forget_op();
                    std::thread::sleep(wait);
                    flow = Flow::Again;
                }
                Effect::Backoff { instance, delay } => {
                    d.not_before.insert(instance, Instant::now() + delay);
                }
                Effect::Transition { event, reason, effects } => {
                    let mut extra = writes.take().unwrap_or_default();
                    extra.extend(self.lifecycle_writes(op, d.plan, d.pack, effects)?);
                    let actor = d.actor.clone();
                    raced(self.transition(op, event, &actor, &reason, extra.clone(), progress))?;
                    // Job records are kept even when another writer moved the operation first
                    // (`transition` commits them alone then).
                    d.remember(&extra);
                    flow = Flow::Again;
                }
                Effect::CancelAttempts => {
                    for c in d.in_flight.values() {
                        c.cancel();
                    }
                }
                Effect::Stop => return Ok(Flow::Stop(op.state.clone())),
            }
        }
        Ok(flow)
    }

    /// Carries out the operation lifecycle's effects that are writes, for the transaction of the
    /// transition that had them.
    pub(crate) fn lifecycle_writes(
        &self,
        op: &OperationRecord,
        plan: &Plan,
        pack: &Pack,
        effects: Vec<lifecycle::Effect>,
    ) -> Result<Vec<Write>, Error> {
        use lifecycle::Effect as F;
        let mut writes = Vec::new();
        for effect in effects {
            match effect {
                F::UpdateResource => writes.extend(self.completion_writes(op, plan, pack)?),
                F::MarkResourceFailed { reason } => writes.extend(self.failure_writes(op, plan, &reason)?),
                // The driver carries these out by what it decides next from the state it reads:
                // nothing starts unless the operation runs, attempts are cancelled once it is
                // cancelled (`decide`), ready jobs start while it runs.
                F::StopDispatch | F::CancelRunningJobs | F::DispatchReadyJobs => {}
                // Carried out by the person-facing calls that make these transitions (gate
                // answers, retry, patch, intervene, diagnose), never by the driver's events.
                F::ResolveRequirements
                | F::OpenGates { .. }
                | F::ResetJobs { .. }
                | F::RunDiagnosis
                | F::RunVerification { .. } => {}
            }
        }
        Ok(writes)
    }

    /// Records an attempt of each ready instance before its process exists (one commit for all,
    /// with the results that made them ready), then starts them. False when the commit was
    /// refused by its version guard (the operation moved since `op` was read): nothing started,
    /// `carry` is kept.
    fn start_attempts(
        &mut self,
        d: &mut Drive<'_>,
        op: &OperationRecord,
        ready: &[String],
        progress: Progress<'_>,
    ) -> Result<bool, Error> {
        let mut writes = std::mem::take(&mut d.carry);
        let carried = writes.len();
        // On both backends: a pause or cancel committed after this turn's look at the operation
        // (on SQLite, between its `data_version` and this commit) refuses the starts.
        writes.push(Write::ExpectVersion { operation: op.id.clone(), version: op.version });
        // What is undone if the commit is refused: each start's instance and its backoff.
        let mut started: Vec<(String, Option<Instant>)> = Vec::new();
        let pending: Vec<ArtifactRecord> = writes.iter().filter_map(Write::artifact).cloned().collect();
        let (plan, pack) = (d.plan, d.pack);
        let mut tasks = Vec::new();
        // One time for the starts' records and entries.
        let at = opsgraph_store::now();
        for id in ready {
            let Some(instance) = d.instances.get(id.as_str()).copied() else { continue };
            let (attempt, from) =
                d.cache.get(&instance.id).map_or((1, JobState::Pending), |r| (r.attempts + 1, r.state));
            // Checks between a rollout's waves: recorded as any attempt, run by their own task.
            if let Some(v) = &instance.verifies {
                let (recorded, effects) =
                    decide::attempt_writes(&op.id, &d.actor, from, (&instance.id, attempt), (None, None), false, &at)?;
                writes.extend(recorded);
                let cancel = self.begin(d, &mut started, &instance.id, None);
                let task = self.wave_checks_task(d, op, instance, v, attempt, cancel)?;
                if effects.contains(&JobEffect::RunAttempt) {
                    tasks.push(Handoff::Task(Box::new(task), false));
                }
                continue;
            }
            let job = d
                .jobs
                .as_ref()
                .ok_or_else(|| Error::NoPack(plan.template.clone()))?
                .get(&instance.job)
                .ok_or_else(|| Error::NoPack(format!("{} (job {})", plan.pack, instance.job)))?;
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
            let evidence: Vec<_> = job.outputs.evidence.iter().filter_map(|e| pack.evidence.get(e).cloned()).collect();
            let executor = self.executor_for(instance, job);
            let agent = self.agent_for(instance, job);
            // Recorded with the attempt: a driver that takes over after this one died stops
            // what is left of the run on its host before it checks the evidence (`recover.rs`).
            let mark = if executor.marks_runs() && agent.is_none() { opsgraph_exec::new_mark().ok() } else { None };
            // Nothing to run, check or collect, no idempotency key, no agent: the attempt's result
            // is known now (`Task::is_trivial`'s), so neither its environment nor a task is made
            // (the in-process no-op job: its copy of the job, variables and names, issue [N] 5).
            if agent.is_none()
                && job.controls.idempotency.is_none()
                && crate::task::nothing_to_run(program.as_ref(), &evidence, job)
            {
                let ids = (&instance.id[..], attempt);
                let (recorded, effects) =
                    decide::attempt_writes(&op.id, &d.actor, from, ids, (None, mark.as_deref()), false, &at)?;
                writes.extend(recorded);
                self.begin(d, &mut started, &instance.id, None);
                if effects.contains(&JobEffect::RunAttempt) {
                    tasks.push(Handoff::Known(TaskResult::nothing_to_run(instance.id.clone(), attempt)));
                }
                continue;
            }
            #[cfg(test)]
            {
                self.prepared += 1;
            }
            let job = job.clone();
            let mut mask = Vec::new();
            let env = self.environment(op, plan, instance, &job, &d.inputs, &pending, Plain::Attempt, &mut mask)?;
            let key = job
                .controls
                .idempotency
                .as_ref()
                .map(|k| render_key(&k.key, &self.key_values(op, plan, instance, &env)));
            let check_first = match &key {
                Some(k) => self.store.idempotency(k)?.is_some(),
                None => false,
            };
            let timeout =
                job.run.as_ref().and_then(|r| r.timeout.as_deref()).and_then(|t| opsgraph_exec::parse_duration(t).ok());
            let (recorded, effects) = decide::attempt_writes(
                &op.id,
                &d.actor,
                from,
                (&instance.id, attempt),
                (key.as_deref(), mark.as_deref()),
                check_first,
                &at,
            )?;
            writes.extend(recorded);
            let cancel = self.begin(d, &mut started, &instance.id, key.clone());
            let secret_outputs: Vec<String> = job
                .outputs
                .artifacts
                .iter()
                .filter(|a| {
                    pack.artifacts.get(*a).is_some_and(|d| d.sensitivity == opsgraph_core::model::Sensitivity::Secret)
                })
                .cloned()
                .collect();
            let mut task = Task {
                instance: instance.id.clone(),
                attempt,
                executor,
                mark,
                job,
                evidence,
                libraries: if matches!(program, Some(Program::Script { .. })) {
                    pack.library_paths().into_iter().map(PathBuf::from).collect()
                } else {
                    vec![]
                },
                program,
                env,
                timeout,
                dir: d.run_dir.clone(),
                stem: format!("{}.{attempt}", instance.id),
                cancel,
                check_first,
                secret_outputs,
                mask,
                instead: None,
                share_live: self.share_live(&op.id, &instance.id, attempt),
            };
            // A resource an agent serves: the attempt is enqueued for it in this commit.
            let served = match self.agent_enqueue(&op.id, instance, &mut task, key.as_deref())? {
                Some(w) => {
                    writes.push(w);
                    true
                }
                None => false,
            };
            // The lifecycle's one effect of a start: run the attempt just recorded.
            if effects.contains(&JobEffect::RunAttempt) {
                tasks.push(Handoff::Task(Box::new(task), served));
            }
        }
        // Agents' next claims, carried with their reports, go last: after the tasks this commit
        // enqueues, which they may take when nothing older is queued.
        let claims_at = writes.len();
        writes.append(&mut d.claims);
        // Made now, durable once the committer's sync covers it (`committer.rs`): the driver
        // goes on deciding meanwhile; what it guards waits for the durable mark. When every
        // attempt in flight is one this commit records and one of them is a process to start (a
        // chain's next job), the driver has nothing to do but wait for the sync: it syncs here,
        // and the worker finds its record durable (one hand-off fewer per job). A commit that
        // only enqueues for agents is made durable by the claims that take its tasks, each synced
        // at its commit before its agent hears of them (`Durable::ByItsClaims`); one that hands
        // a task to a parked claim or carries a report its agent waits on is synced at once.
        let process = |h: &Handoff| matches!(h, Handoff::Task(t, false) if !t.is_trivial());
        let only_these = d.in_flight.len() == started.len() && tasks.iter().any(process);
        let agents_only = !tasks.iter().any(process);
        let durable = crate::Durable::of_starts(&writes, only_these, agents_only);
        let made = match self.commit_timeline_as(&writes, durable, progress) {
            Err(Error::Store(opsgraph_store::Error::Conflict { .. })) => {
                for (instance, not_before) in started {
                    d.in_flight.remove(&instance);
                    d.keys.remove(&instance);
                    if let Some(held) = &self.lease {
                        held.watch(&instance, None);
                    }
                    if let Some(t) = not_before {
                        d.not_before.insert(instance, t);
                    }
                }
                d.op_seen = None;
                d.claims = writes.split_off(claims_at);
                writes.truncate(carried);
                d.carry = writes;
                return Ok(false);
            }
            other => other?,
        };
        crate::failpoint::hit("attempts.recorded");
        let guard = made.filter(|_| self.committer.defers()).map(|n| self.committer.guard(n));
        for handoff in tasks {
            let (task, served) = match handoff {
                // Its result joins a later commit than its `running` record's (rule 3).
                Handoff::Known(result) => {
                    let _ = d.tx.send(result);
                    continue;
                }
                Handoff::Task(task, served) => (*task, served),
            };
            if task.is_trivial() {
                // Nothing to run, check or collect: its result is known now, without a thread
                // (the no-op job type; it still went through the attempt record). It has no
                // effect outside the driver, so it need not wait for the sync: it joins a later
                // commit than its `running` record's (rule 3).
                let _ = d.tx.send(jobs::run(task));
            } else if served && durable == crate::Durable::ByItsClaims {
                // Its worker waits for the agent and starts nothing: no guard (the claim that
                // hands the task out is durable, and covers this commit).
                d.workers.run(task, d.in_flight.len(), None);
            } else {
                // The worker starts it once its `running` record is durable (rule 1).
                d.workers.run(task, d.in_flight.len(), guard.clone());
            }
        }
        // The driver's cache after the hand-off: a chain's next job is started (its commit synced
        // here) without waiting for this bookkeeping, which the next decision needs, not the job.
        // Only the starts' records: the results carried were remembered when they were held
        // (`Effect::Hold`; an agent's report carried with them writes no job record), as a
        // `Flush` of them relies on. Each was remembered twice (issue [N] 5).
        debug_assert!(writes[..carried]
            .iter()
            .filter_map(Write::job)
            .all(|j| d.cache.get(&j.id).is_some_and(|c| (c.state, c.attempts) == (j.state, j.attempts))));
        d.remember(&writes[carried..]);
        // After the workers started: a claim handed one of these tasks is delivered as soon as
        // its agent's report is answered — once the report's commit is durable.
        if let (Some(n), false) = (made, d.handed.is_empty()) {
            self.committer.wait(n)?;
        }
        d.carried();
        Ok(true)
    }

    /// An attempt of `instance` begins (its `running` record is among the commit's writes): in
    /// flight with a cancel of its own, its idempotency key kept, watched by the lease; noted in
    /// `started` with the backoff it waited for, undone if the commit is refused.
    fn begin(
        &self,
        d: &mut Drive<'_>,
        started: &mut Vec<(String, Option<Instant>)>,
        instance: &str,
        key: Option<String>,
    ) -> Cancel {
        let cancel = Cancel::new();
        started.push((instance.to_string(), d.not_before.remove(instance)));
        d.keys.insert(instance.to_string(), key);
        d.in_flight.insert(instance.to_string(), cancel.clone());
        if let Some(held) = &self.lease {
            held.watch(instance, Some(&cancel));
        }
        cancel
    }

    /// Waits for one report (a quarter of a second at most), takes every other one that is
    /// ready, and turns them into the next decision's input: each attempt's evidence and
    /// artifacts stored, its plaintext secrets removed.
    pub(crate) fn collect(&mut self, d: &mut Drive<'_>, op: &OperationRecord) -> Result<Option<Vec<Finished>>, Error> {
        let first = match d.rx.try_recv() {
            Ok(r) => r,
            Err(mpsc::TryRecvError::Disconnected) => return Ok(None),
            Err(mpsc::TryRecvError::Empty) => {
                d.forget_op();
                match d.rx.recv_timeout(Duration::from_millis(250)) {
                    Ok(r) => r,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        // A quiet moment: what was left to agents' claims is synced now, so that
                        // what readers see is durable within a wait (`Durable::ByItsClaims`).
                        self.committer.catch_up();
                        #[cfg(test)]
                        {
                            self.quiet_waits += 1;
                        }
                        return Ok(None);
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(None),
                }
            }
        };
        // A batch of starts per sync (`committer.rs`, rule 6): the attempts these reports make
        // room for could not be durable before the sync under way ended; the reports that come
        // in meanwhile join them in one commit.
        if first.after_sync {
            self.committer.wait_idle()?;
        }
        let mut results = vec![first];
        results.extend(d.rx.try_iter());
        crate::failpoint::hit("job.exited");
        let mut finished = Vec::with_capacity(results.len());
        for mut r in results {
            // An agent's report handed over in memory: its writes (the report, its last lines,
            // audit row and timeline entry) are committed with this result, before its agent is
            // answered.
            if let Some(h) = r.handed.take() {
                for w in &h.writes {
                    let to = if matches!(w, Write::Agent(AgentWrite::Claim(_))) { &mut d.claims } else { &mut d.carry };
                    to.push(w.clone());
                }
                d.handed.push(h);
            }
            d.in_flight.remove(&r.instance);
            if let Some(held) = &self.lease {
                held.watch(&r.instance, None);
            }
            // Plaintext copies of secrets live only while the attempt runs. None was made unless
            // this runtime wrote one (the drive's start removed any a crashed driver left).
            if self.private_made.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = std::fs::remove_dir_all(d.run_dir.join("secrets").join(&r.instance));
                #[cfg(test)]
                {
                    self.private_removals += 1;
                }
            }
            // The attempt's log joins the blob store before its record is committed.
            self.keep_log(&op.id, &r.instance, r.attempt, r.log.as_deref())?;
            // The live log has served its time: the final log replaces it.
            if !r.no_live_file {
                let _ =
                    std::fs::remove_file(crate::live::live_path(&d.run_dir, &format!("{}.{}", r.instance, r.attempt)));
            }
            let Some(instance) = d.instances.get(r.instance.as_str()).copied() else { continue };
            let job = d.jobs.as_ref().and_then(|j| j.get(&instance.job));
            let policy = job.and_then(|j| j.controls.retry_policy.as_ref());
            let key = d.keys.remove(&r.instance).flatten();
            let mut observed = Vec::new();
            self.result_writes(op, instance, &r, &mut observed)?;
            finished.push(Finished {
                max_attempts: policy.map_or(1, |p| p.max_attempts),
                backoff: policy
                    .and_then(|p| p.backoff.as_deref())
                    .and_then(|b| opsgraph_exec::parse_duration(b).ok())
                    .unwrap_or(Duration::ZERO),
                key,
                observed,
                result: r,
            });
        }
        Ok(Some(finished))
    }
}

/// What a start hands on once its commit is made: a task for a worker (and whether an agent
/// serves it), or the result of an attempt with nothing to run, known at once.
enum Handoff {
    /// Boxed: a task is five times the size of a result, and each one starts a process or more.
    Task(Box<Task>, bool),
    Known(TaskResult),
}

/// A transition that lost a race with another writer is not an error of the driver: it re-reads
/// the operation and goes on from the state the other writer left.
pub(crate) fn raced<T>(result: Result<T, Error>) -> Result<Option<T>, Error> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(Error::Store(opsgraph_store::Error::Conflict { .. })) => Ok(None),
        Err(e) => Err(e),
    }
}
