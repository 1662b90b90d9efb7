//! Waiting for an agent's report on a worker thread: claims, log lines (into the attempt's log
//! and its live log), heartbeats, a lost lease (then the evidence is checked, as after a crash),
//! cancellation.

use std::io::Write as _;
use std::time::{Duration, Instant};

use opsgraph_exec::EvidenceResult;
use opsgraph_store::{now, now_ms, AgentTask, AgentTaskState, AgentWrite, Write};
use serde_json::{json, Value};

use super::pool::{open_with, report_aad, task_id, Pooled, Waiting};
use super::wire::{unb64, AgentReport};
use crate::live::{live_path, LiveLog};
use crate::task::{Handed, Task, TaskResult};

fn failed(task: &Task, outcome: &str, failure: String) -> TaskResult {
    let mut r = TaskResult::of(task);
    r.outcome = outcome.into();
    r.failure = Some(failure);
    r
}

/// Waits for the agent's report of `task` (on a worker thread).
pub(crate) fn wait(task: Task, w: Waiting) -> TaskResult {
    let started = Instant::now();
    // Its commit is done: a claim it was handed to answers now; else waiting claims look.
    let bell = w.agents.bell.clone();
    if !bell.deliver(&w.task) {
        bell.ring_work();
    }
    let mut store = match w.agents.connection() {
        Ok(s) => s,
        Err(e) => {
            return failed(&task, "could not start", format!("could not open the store to wait for the agent: {e}"))
        }
    };
    let mut watched = Watched { bell: &bell, task: w.task.clone() };
    let mut mark = bell.watch(&watched.task);
    let log_path = task.dir.join(format!("{}.log", task.stem));
    // The lines also go to the attempt's live log, as a local run's output does, so the job's
    // log route shows them while it runs. The server masked them already; a job producing secret
    // artifacts shows one line instead, as locally.
    let mut live = LiveLog::new(
        live_path(&task.dir, &task.stem),
        vec![],
        !task.secret_outputs.is_empty(),
        task.share_live.as_ref(),
    );
    let mut log_seq = 0i64;
    let mut logged = false;
    let mut current = w.task.clone();
    let mut recovering = false;
    let poll = Duration::from_millis(100);
    // Enqueued (or handed to a claim) in the commit just done: its row says nothing new until the
    // task moves, which rings this worker (a claim, a log chunk, a report of this process) or is
    // seen at the next poll (another process's) — one read of the row and of its log a job fewer.
    let mut known = w.fresh && !task.cancel.is_cancelled();
    loop {
        // A report handed over by this process's report route: taken first, its task's row is
        // not read (the route read it, and the driver's commit is fenced by its lease).
        let hand = bell.take_report(&current);
        // Reported in its route's own commit (done): taken as the route screened it, the row
        // not read back and the sealed report not opened again.
        let done = if hand.is_none() { bell.take_committed(&current) } else { None };
        let t = match hand {
            Some(_) => None,
            None if done.is_some() => None,
            None if known => {
                known = false;
                mark = bell.wait_task(&current, mark, poll);
                continue;
            }
            None => match store.agent_task(&current) {
                Ok(Some(t)) => Some(t),
                Ok(None) => return failed(&task, "lost", format!("agent task {current} is not in the store")),
                Err(_) => {
                    // The store may be busy: look again.
                    std::thread::sleep(poll);
                    continue;
                }
            },
        };
        if !recovering {
            if let Ok(lines) = store.agent_log(&current, log_seq) {
                if let Some(last) = lines.last() {
                    log_seq = last.seq;
                    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&log_path) {
                        for l in &lines {
                            let _ = f.write_all(l.text.as_bytes());
                            live.push(0, l.text.as_bytes());
                        }
                        logged = true;
                    }
                }
            }
        }
        // The report handed over (the lines its agent logged before are copied above): its
        // writes go to the driver's commit with this result, and its agent is answered after
        // that commit.
        if let Some(hand) = hand {
            if !hand.text.is_empty() {
                if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&log_path) {
                    let _ = f.write_all(hand.text.as_bytes());
                    live.push(0, hand.text.as_bytes());
                    logged = true;
                }
            }
            let mut r = reported(&w, &task, hand.report, recovering, logged.then_some(&log_path), started);
            let (settled, id) = (bell.clone(), current.clone());
            let told = Box::new(move |committed: bool| settled.settle_report(&id, committed));
            r.handed = Some(std::sync::Arc::new(Handed::new(hand.writes, told)));
            return r;
        }
        // Its last lines were committed with it, and copied above.
        if let Some(report) = done {
            return reported(&w, &task, report, recovering, logged.then_some(&log_path), started);
        }
        let Some(t) = t else { continue };
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
                mark = watched.switch(&evidence_id);
                bell.ring_work();
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
                    bell.ring_work();
                }
                mark = watched.switch(&evidence_id);
                current = evidence_id;
                recovering = true;
                continue;
            }
            AgentTaskState::Reported => {
                let report = match open_report(&w, &t) {
                    Ok(r) => r,
                    Err(e) => return failed(&task, "lost", format!("the agent's report does not open: {e}")),
                };
                return reported(&w, &task, report, recovering, logged.then_some(&log_path), started);
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
        // Until this task moves in this process, the deadline passes, or it is time to look for
        // what other processes changed.
        let until = Duration::from_millis((t.expires_ms - now).clamp(1, 250) as u64);
        mark = bell.wait_task(&current, mark, until.min(poll));
    }
}

/// The task a worker watches on the bell, unwatched when the wait ends however it ends.
struct Watched<'a> {
    bell: &'a super::pool::Bell,
    task: String,
}

impl Watched<'_> {
    /// Watches `task` instead; returns its mark.
    fn switch(&mut self, task: &str) -> u64 {
        self.bell.unwatch(&self.task);
        self.task = task.to_string();
        self.bell.watch(task)
    }
}

impl Drop for Watched<'_> {
    fn drop(&mut self) {
        self.bell.unwatch(&self.task);
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

/// The attempt's result from its agent's report (of the evidence check, when `recovering`).
fn reported(
    w: &Waiting,
    task: &Task,
    report: AgentReport,
    recovering: bool,
    log: Option<&std::path::PathBuf>,
    started: Instant,
) -> TaskResult {
    let mut r = to_result(task, report);
    r.log = log.cloned();
    if recovering {
        r.unknown = true;
        r.satisfied_without_run = true;
        r.outcome = "outcome unknown: its agent was lost".into();
        r.produced.clear();
        r.failure = r.failure.map(|f| format!("its agent was lost and {f}"));
        if r.failure.is_some() && !w.retry_allowed {
            r.failure = r
                .failure
                .map(|f| format!("{f}; not run again without an idempotency key and attempts left: a person decides"));
        }
    } else if r.duration.is_zero() {
        r.duration = started.elapsed();
    }
    r
}

fn open_report(w: &Waiting, t: &AgentTask) -> Result<AgentReport, String> {
    let sealed = t.report.as_ref().and_then(|r| r.get("sealed")).and_then(Value::as_str).unwrap_or_default();
    let plain = open_with(&w.keyring, sealed, &report_aad(&t.id)).map_err(|e| e.to_string())?;
    serde_json::from_slice(plain.expose()).map_err(|e| e.to_string())
}

/// The attempt's result from a report: produced files written where a local run leaves them.
fn to_result(task: &Task, report: AgentReport) -> TaskResult {
    let mut r = TaskResult::of(task);
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
                captured: Default::default(),
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

#[cfg(test)]
#[path = "wait_tests.rs"]
mod tests;
