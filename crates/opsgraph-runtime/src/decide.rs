//! The driver's one decision, pure: what the store says about an operation (a [`Snapshot`]) and
//! what happened (an [`Input`]) -> the writes to commit and the [`Effect`]s to carry out
//! (`(Vec<Write>, Vec<Effect>)`, restate's shape). No IO: the driver (`drive.rs`) reads the
//! snapshot, commits the writes and carries the effects out (`execute.rs`); tests below call it
//! with a built snapshot.
//!
//! Job records move only through `opsgraph_core::plan::job_lifecycle`, the operation only through
//! `opsgraph_core::plan::lifecycle`; both functions' effects are turned into writes and effects here.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use opsgraph_core::plan::job_lifecycle::{self, JobEffect, JobEvent};
use opsgraph_core::plan::lifecycle::{self, Event};
use opsgraph_core::plan::{JobInstance, RolloutPlan};
use opsgraph_exec::Cancel;
use opsgraph_store::{now, GateRecord, JobRecord, JobState, OperationRecord, Write};
use serde_json::json;

use crate::rollout::{stand, standings, Standing, Wait};
use crate::task::TaskResult;
use crate::timeline::entry_at;
use crate::waiting::Waiting;
use crate::Error;

/// What the store (and this driver's own bookkeeping) says about one operation, borrowed.
pub(crate) struct Snapshot<'a> {
    pub(crate) op: &'a OperationRecord,
    /// Who the driver acts as on the timeline.
    pub(crate) actor: &'a str,
    /// The plan's job instances, in plan order, and by id.
    pub(crate) plan: &'a [JobInstance],
    pub(crate) instances: &'a HashMap<&'a str, &'a JobInstance>,
    /// The job records, as last committed.
    pub(crate) jobs: &'a HashMap<String, JobRecord>,
    pub(crate) gates: &'a [GateRecord],
    /// Attempts started and not yet reported.
    pub(crate) in_flight: &'a HashMap<String, Cancel>,
    /// Jobs waiting for a retry's backoff, until when.
    pub(crate) not_before: &'a HashMap<String, Instant>,
    pub(crate) now: Instant,
    /// The wall clock now, in milliseconds since the epoch: the pause between a rollout's waves
    /// counts from the time its last job record was written, which survives a restart.
    pub(crate) wall_ms: i64,
    /// How many attempts run at once.
    pub(crate) concurrency: usize,
    /// Jobs (of the template) that wait for sub-operations, and the children they wait for.
    pub(crate) blocked: &'a HashSet<String>,
    pub(crate) waiting_children: &'a [String],
    /// Jobs before this index of `plan` are all done: the search for ready jobs starts here.
    pub(crate) done_prefix: usize,
    /// The jobs that may be ready (a superset: the filter below decides), kept by the driver.
    pub(crate) waiting: &'a Waiting,
    /// The plan's fleet rollouts: waves, limits in flight, failure budgets.
    pub(crate) rollouts: &'a [RolloutPlan],
}

/// What happened.
pub(crate) enum Input {
    /// Look for work: start what is ready; else complete, fail, pause, or wait.
    Tick,
    /// Attempts reported, in the order they arrived.
    Finished(Vec<Finished>),
}

/// One attempt's report, with what the driver knows about it.
pub(crate) struct Finished {
    pub(crate) result: TaskResult,
    /// Its idempotency key, as rendered when it started.
    pub(crate) key: Option<String>,
    pub(crate) max_attempts: u32,
    /// The retry policy's backoff before the second attempt (doubling after).
    pub(crate) backoff: Duration,
    /// Its evidence records and stored artifacts (collected by the driver: blobs are IO).
    pub(crate) observed: Vec<Write>,
}

/// What the driver must do after the decision's writes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// Commit the writes held so far (alone) before going on.
    Flush,
    /// Hold this decision's writes: they go into the next commit (with the attempts they let
    /// start, or alone before the driver waits or stops).
    Hold,
    /// Prepare and record an attempt of each of these instances, in one commit with the writes
    /// held, then start them.
    Start(Vec<String>),
    /// Nothing can start before a retry's backoff ends: wait this long, then look again.
    Sleep(Duration),
    /// Start this instance again no sooner than `delay` from now.
    Backoff { instance: String, delay: Duration },
    /// Move the operation, in one commit with this decision's writes; `effects` are the
    /// lifecycle's, carried out in the same transaction (resource writes).
    Transition { event: Event, reason: String, effects: Vec<lifecycle::Effect> },
    /// Signal the attempts in flight to stop (the operation was cancelled).
    CancelAttempts,
    /// The drive ends: the operation is no longer running and nothing is in flight.
    Stop,
}

/// The writes to commit and the effects to carry out.
#[derive(Debug, Default)]
pub(crate) struct Decision {
    pub(crate) writes: Vec<Write>,
    pub(crate) effects: Vec<Effect>,
    /// The snapshot's `done_prefix`, advanced past jobs found done.
    pub(crate) done_prefix: usize,
}

/// The one decision.
pub(crate) fn decide(s: &Snapshot<'_>, input: Input) -> Result<Decision, Error> {
    match input {
        Input::Tick => tick(s),
        Input::Finished(reports) => finished(s, reports),
    }
}

fn transition(s: &Snapshot<'_>, event: Event, reason: String) -> Result<Effect, Error> {
    let (_, effects) = lifecycle::apply(&s.op.state, &event)?;
    Ok(Effect::Transition { event, reason, effects })
}

fn tick(s: &Snapshot<'_>) -> Result<Decision, Error> {
    let mut d = Decision { done_prefix: s.done_prefix, ..Decision::default() };
    if !matches!(s.op.state, opsgraph_core::model::OperationState::Running) {
        // Stop: cancel running attempts when cancelled, let them finish otherwise.
        d.effects.push(Effect::Flush);
        if matches!(s.op.state, opsgraph_core::model::OperationState::Cancelled { .. }) {
            d.effects.push(Effect::CancelAttempts);
        }
        if s.in_flight.is_empty() {
            d.effects.push(Effect::Stop);
        }
        return Ok(d);
    }
    let state_of = |id: &str| s.jobs.get(id).map(|j| j.state);
    // Fleet rollouts: a spent failure budget pauses the operation; waves and limits in flight
    // decide which of a rolled-out job's instances may start.
    let rolling = (!s.rollouts.is_empty()).then(|| standing(s, &HashMap::new()));
    let failure = |id: &str| s.jobs.get(id).and_then(|j| j.outcome["failure"].as_str());
    if let Some((reason, e)) = rolling.iter().flatten().find_map(|r| stopped(s, r, &failure)) {
        d.writes.push(Write::Timeline(e));
        d.effects.push(transition(s, Event::Pause { reason: reason.clone() }, reason)?);
        return Ok(d);
    }
    let mut chosen: HashMap<&str, usize> = HashMap::new();
    // What only the pause between waves holds back, and for how long.
    let mut pauses: Vec<i64> = Vec::new();
    let mut waited = |w: Result<(), Wait>| match w {
        Ok(()) => true,
        Err(Wait::Pause(left)) => {
            pauses.push(left);
            false
        }
        Err(Wait::NotYet) => false,
    };
    while s.plan.get(d.done_prefix).is_some_and(|j| state_of(&j.id).is_some_and(JobState::is_done)) {
        d.done_prefix += 1;
    }
    // Ready: pending, dependencies done, gates answered, not waiting for a retry; in plan order,
    // as many as there are free slots.
    let gate_done: HashMap<&str, bool> =
        s.gates.iter().map(|g| (g.id.as_str(), g.answer.as_deref().is_some_and(|a| a != "cancel operation"))).collect();
    let free = s.concurrency.max(1).saturating_sub(s.in_flight.len());
    let ready: Vec<String> = s
        .waiting
        .candidates(d.done_prefix)
        .map(|i| &s.plan[i])
        .filter(|j| state_of(&j.id) == Some(JobState::Pending) && !s.in_flight.contains_key(&j.id))
        .filter(|j| s.not_before.get(&j.id).is_none_or(|t| *t <= s.now))
        .filter(|j| !s.blocked.contains(&j.job))
        // Checks between waves wait for their hosts to finish, done or failed (below).
        .filter(|j| {
            j.verifies.is_some()
                || j.depends_on.iter().all(|d| match state_of(d) {
                    Some(st) => st.is_done(),
                    None => gate_done.get(d.as_str()).copied().unwrap_or(false),
                })
        })
        .filter(|j| match (j.wave, &j.verifies, &rolling) {
            (Some(k), _, Some(rolling)) => match rolling.iter().find(|r| r.plan.job == j.job) {
                Some(r) => {
                    let n = chosen.entry(j.job.as_str()).or_default();
                    let ok = waited(r.may_start(k, *n, s.wall_ms));
                    *n += usize::from(ok);
                    ok
                }
                None => true,
            },
            (_, Some(v), Some(rolling)) => {
                rolling.iter().find(|r| r.plan.job == v.job).is_none_or(|r| waited(r.may_check(v.wave, s.wall_ms)))
            }
            _ => true,
        })
        .take(free)
        .map(|j| j.id.clone())
        .collect();
    if !ready.is_empty() {
        if let Some(rolling) = &rolling {
            // A wave none of whose instances ran yet starts now: on the timeline.
            let mut seen: HashSet<(&str, u32)> = HashSet::new();
            for j in ready.iter().filter_map(|id| s.instances.get(id.as_str())) {
                let (Some(k), Some(r)) = (j.wave, rolling.iter().find(|r| r.plan.job == j.job)) else { continue };
                let w = &r.waves[k as usize - 1];
                if w.running.is_empty() && w.done.is_empty() && w.failed.is_empty() && seen.insert((&r.plan.job, k)) {
                    d.writes.push(Write::Timeline(r.wave_started(&s.op.id, s.actor, k)));
                }
            }
            if !d.writes.is_empty() {
                d.effects.push(Effect::Hold);
            }
        }
        d.effects.push(Effect::Start(ready));
        return Ok(d);
    }
    d.effects.push(Effect::Flush);
    if !s.in_flight.is_empty() {
        return Ok(d);
    }
    if s.plan.iter().all(|j| state_of(&j.id).is_some_and(JobState::is_done)) {
        let reason = "every job's outputs are verified by evidence".to_string();
        d.effects.push(transition(s, Event::Complete, reason)?);
        return Ok(d);
    }
    let waiting = s.not_before.iter().filter(|(j, _)| state_of(j) == Some(JobState::Pending));
    let pause = pauses.iter().min().map(|ms| Duration::from_millis(*ms as u64));
    if let Some(wait) = waiting.map(|(_, t)| t.saturating_duration_since(s.now)).chain(pause).min() {
        d.effects.push(Effect::Sleep(wait.min(Duration::from_secs(5))));
        return Ok(d);
    }
    // A job still failed (kept failed by a person's retry of others, or one an intervention did
    // not cover) fails the run again, naming it.
    if let Some(j) = s.plan.iter().find(|j| state_of(&j.id) == Some(JobState::Failed)) {
        let why = s.jobs.get(&j.id).and_then(|r| r.outcome["failure"].as_str()).unwrap_or("it failed");
        let reason = format!("{}: {why}", j.id);
        d.effects.push(transition(s, Event::JobFailed { job: j.id.clone(), reason: reason.clone() }, reason)?);
        return Ok(d);
    }
    let blocking: Vec<&str> = s.gates.iter().filter(|g| g.answer.is_none()).map(|g| g.id.as_str()).collect();
    let reason = if !s.waiting_children.is_empty() {
        format!("waiting for sub-operation {}", s.waiting_children.join(", "))
    } else if blocking.is_empty() {
        "no job can start".to_string()
    } else {
        format!("waiting for gate {}", blocking.join(", "))
    };
    d.effects.push(transition(s, Event::Pause { reason: reason.clone() }, reason)?);
    Ok(d)
}

/// What an attempt's report means for its job, by the job lifecycle's events.
fn job_event(f: &Finished, running: bool) -> JobEvent {
    let r = &f.result;
    match &r.failure {
        // Its agent was lost: decided by its evidence, as after a crash.
        None if r.unknown => JobEvent::Recovered,
        Some(_) if r.unknown && (f.key.is_none() || r.attempt >= f.max_attempts) => {
            JobEvent::Failed { retry: false, unknown: true }
        }
        None => JobEvent::Passed { ran: !r.satisfied_without_run, keyed: f.key.is_some() },
        Some(_) if r.cancelled => JobEvent::Cancelled,
        Some(_) => JobEvent::Failed { retry: r.attempt < f.max_attempts && running, unknown: r.unknown },
    }
}

fn finished(s: &Snapshot<'_>, reports: Vec<Finished>) -> Result<Decision, Error> {
    let running = matches!(s.op.state, opsgraph_core::model::OperationState::Running);
    let mut d = Decision { done_prefix: s.done_prefix, ..Decision::default() };
    let mut failed: Option<(String, String)> = None;
    // The states this report batch leaves, for the rollouts' waves and budgets.
    let mut after: HashMap<String, JobState> = HashMap::new();
    // One time for the batch's records and entries.
    let at = now();
    for f in reports {
        let Some(instance) = s.instances.get(f.result.instance.as_str()) else { continue };
        let event = job_event(&f, running);
        // An attempt reported was recorded running when it started.
        let from = s.jobs.get(&f.result.instance).map_or(JobState::Running, |j| j.state);
        let (state, effects) = job_lifecycle::apply(from, event)?;
        let r = &f.result;
        let reason = match &r.failure {
            None if r.unknown => format!("{}: its agent was lost mid-run; its evidence passes", r.instance),
            None if r.satisfied_without_run => format!("{}: already satisfied, evidence passes", r.instance),
            None => format!("{}: {} ({} evidence checks passed)", r.instance, r.outcome, r.evidence.len()),
            Some(fail) if state == JobState::Pending => {
                format!("{}: {fail}; attempt {} of {}, retrying", r.instance, r.attempt, f.max_attempts)
            }
            Some(fail) => format!("{}: {fail}", r.instance),
        };
        d.writes.extend(f.observed);
        for effect in effects {
            match effect {
                JobEffect::RecordKey => {
                    if let Some(k) = &f.key {
                        d.writes.push(Write::Idempotency {
                            key: k.clone(),
                            resource: instance.resource.clone(),
                            operation: s.op.id.clone(),
                            job: r.instance.clone(),
                            at: at.clone(),
                        });
                    }
                }
                JobEffect::Backoff => d.effects.push(Effect::Backoff {
                    instance: r.instance.clone(),
                    delay: f.backoff.saturating_mul(1 << (r.attempt - 1).min(16)),
                }),
                // A rolled-out instance fails within its rollout's budget, the checks between
                // waves pause the rollout (both checked below).
                JobEffect::FailOperation if instance.wave.is_some() || instance.verifies.is_some() => {}
                JobEffect::FailOperation => {
                    failed.get_or_insert_with(|| (r.instance.clone(), reason.clone()));
                }
                // Only a start has this effect.
                JobEffect::RunAttempt => {}
            }
        }
        after.insert(r.instance.clone(), state);
        d.writes.push(Write::Job(JobRecord {
            operation: s.op.id.clone(),
            id: r.instance.clone(),
            state,
            attempts: r.attempt,
            outcome: {
                let mut outcome = json!({
                    "outcome": r.outcome, "failure": r.failure, "key": f.key,
                    "log": r.log.as_ref().map(|p| p.display().to_string()),
                    "duration_ms": r.duration.as_millis() as u64,
                });
                // A run lost mid-way may go on on its host: the mark lets the check of its
                // unknown outcome (a retry) stop it first.
                if let Some(mark) = s
                    .jobs
                    .get(&r.instance)
                    .and_then(|j| j.outcome.get("mark"))
                    .filter(|_| r.outcome.starts_with("lost: "))
                {
                    outcome["mark"] = mark.clone();
                }
                outcome
            },
            updated_at: at.clone(),
        }));
        let name = event.timeline().unwrap_or(event.name());
        let data = json!({"job": r.instance, "attempt": r.attempt});
        d.writes.push(Write::Timeline(entry_at(&s.op.id, s.actor, name, reason, data, at.clone())));
    }
    let pause = if s.rollouts.is_empty() { None } else { waves_after(s, &after, &mut d) };
    match (failed, pause) {
        (Some((job, reason)), _) if running => {
            d.effects.push(transition(s, Event::JobFailed { job, reason: reason.clone() }, reason)?)
        }
        (_, Some(reason)) if running => d.effects.push(transition(s, Event::Pause { reason: reason.clone() }, reason)?),
        _ => d.effects.push(Effect::Hold),
    }
    Ok(d)
}

/// Where the plan's rollouts stand, with `after` (states a report batch leaves) over the records.
fn standing<'a>(s: &'a Snapshot<'_>, after: &HashMap<String, JobState>) -> Vec<Standing<'a>> {
    let in_flight = |id: &str| s.in_flight.contains_key(id) && !after.contains_key(id);
    standings(
        s.rollouts,
        s.plan,
        |j| {
            let record = s.jobs.get(&j.id);
            let state = after.get(&j.id).copied().or(record.map(|r| r.state));
            stand(state, record.map_or(0, |r| r.attempts), in_flight(&j.id))
        },
        in_flight,
        // Finished by this batch: now; else when its record was last written.
        |j| match after.contains_key(&j.id) {
            true => Some(s.wall_ms),
            false => s.jobs.get(&j.id).and_then(|r| opsgraph_store::parse_rfc3339(&r.updated_at)),
        },
    )
}

/// Why a rollout stops the operation, if it does: a failure budget spent, or checks between
/// waves that failed (the instance's recorded failure names the check). The pause's reason and
/// its `rollout_paused` entry.
fn stopped<'a>(
    s: &Snapshot<'_>,
    r: &Standing<'_>,
    failure: &dyn Fn(&str) -> Option<&'a str>,
) -> Option<(String, opsgraph_store::TimelineEntry)> {
    if let Some((wave, why)) = r.over_budget() {
        return Some(r.paused(&s.op.id, s.actor, wave, &why, None));
    }
    let (wave, check) = r.failed_check()?;
    let failure = failure(&check.id).unwrap_or("a check failed");
    let why = format!("{} failed: {failure}", check.id);
    Some(r.paused(&s.op.id, s.actor, wave, &why, Some(&check.id)))
}

/// After a report batch: where each finished instance's wave stands (on its job entry), each
/// wave it finished on the timeline; the reason to pause when a failure budget is spent or checks
/// between waves failed. (The pause before the next wave needs nothing here: `tick` counts it
/// from the wave's job records.)
fn waves_after(s: &Snapshot<'_>, after: &HashMap<String, JobState>, d: &mut Decision) -> Option<String> {
    let before = standing(s, &HashMap::new());
    let now = standing(s, after);
    // Each finished instance's job entry says where its wave stands.
    for w in d.writes.iter_mut() {
        let Write::Timeline(e) = w else { continue };
        let Some(j) = e.data["job"].as_str().and_then(|id| s.instances.get(id)) else { continue };
        let Some(r) = j.wave.and_then(|_| now.iter().find(|r| r.plan.job == j.job)) else { continue };
        e.data["progress"] = json!(r.progress(j.wave.unwrap_or(1)));
    }
    for (b, r) in before.iter().zip(&now) {
        for (k, (wb, wa)) in b.waves.iter().zip(&r.waves).enumerate() {
            if !wb.settled() && wa.settled() {
                d.writes.push(Write::Timeline(r.wave_finished(&s.op.id, s.actor, k as u32 + 1)));
            }
        }
    }
    // The failure of checks this batch reported is in its writes, not yet in the records.
    let written: HashMap<&str, &JobRecord> =
        d.writes.iter().filter_map(Write::job).map(|j| (j.id.as_str(), j)).collect();
    let failure = |id: &str| written.get(id).copied().or(s.jobs.get(id)).and_then(|j| j.outcome["failure"].as_str());
    let (reason, e) = now.iter().find_map(|r| stopped(s, r, &failure))?;
    d.writes.push(Write::Timeline(e));
    Some(reason)
}

/// The writes that record attempt `attempt` of `instance` (now in state `from`) before its
/// process exists: the job record `running`, through the job lifecycle, and its `job_started`
/// entry, both stamped `at`. Returns them with the lifecycle's effects.
pub(crate) fn attempt_writes(
    op: &str,
    actor: &str,
    from: JobState,
    (instance, attempt): (&str, u32),
    (key, mark): (Option<&str>, Option<&str>),
    check_first: bool,
    at: &str,
) -> Result<(Vec<Write>, Vec<JobEffect>), Error> {
    let event = JobEvent::Start;
    let (state, effects) = job_lifecycle::apply(from, event)?;
    let writes = vec![
        Write::Job(JobRecord {
            operation: op.to_string(),
            id: instance.to_string(),
            state,
            attempts: attempt,
            outcome: match mark {
                Some(mark) => json!({"key": key, "mark": mark}),
                None => json!({"key": key}),
            },
            updated_at: at.to_string(),
        }),
        Write::Timeline(entry_at(
            op,
            actor,
            event.timeline().unwrap_or(event.name()),
            format!(
                "{instance} attempt {attempt}{}",
                if check_first { " (idempotency key seen before: evidence first)" } else { "" }
            ),
            json!({"job": instance, "attempt": attempt, "key": key}),
            at.to_string(),
        )),
    ];
    Ok((writes, effects))
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
