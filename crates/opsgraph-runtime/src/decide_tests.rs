//! `decide` without IO: a snapshot built here, an input, and the writes and effects expected,
//! rendered one per line.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use expect_test::{expect, Expect};
use opsgraph_core::model::OperationState;
use opsgraph_core::plan::JobInstance;
use opsgraph_exec::Cancel;
use opsgraph_store::{GateRecord, JobRecord, JobState, OperationRecord, Write};

use crate::fixtures::instance;
use serde_json::{json, Value};

use super::{attempt_writes, decide, Effect, Finished, Input, Snapshot};
use crate::task::TaskResult;

/// The snapshot's wall clock: 2026-12-05T12:00:00Z.
const WALL_MS: i64 = 1_796_472_000_000;

/// What the store says, built up one call at a time.
struct Given {
    state: OperationState,
    jobs: Vec<(JobInstance, JobRecord)>,
    gates: Vec<GateRecord>,
    in_flight: Vec<String>,
    /// Milliseconds from now until each job may start again.
    not_before: Vec<(String, u64)>,
    concurrency: usize,
    blocked: Vec<String>,
    children: Vec<String>,
    rollouts: Vec<opsgraph_core::plan::RolloutPlan>,
}

fn given(state: OperationState) -> Given {
    Given {
        state,
        jobs: vec![],
        gates: vec![],
        in_flight: vec![],
        not_before: vec![],
        concurrency: 8,
        blocked: vec![],
        children: vec![],
        rollouts: vec![],
    }
}

fn running() -> Given {
    given(OperationState::Running)
}

impl Given {
    /// Job instance `id` (of template job `id` before any `@`), after `deps`, in `state`.
    fn job(mut self, id: &str, deps: &[&str], state: JobState, attempts: u32, failure: Option<&str>) -> Given {
        let instance = instance(id, deps);
        let record = JobRecord {
            operation: "op-1".into(),
            id: id.into(),
            state,
            attempts,
            outcome: json!({ "failure": failure }),
            updated_at: String::new(),
        };
        self.jobs.push((instance, record));
        self
    }

    fn pending(self, id: &str, deps: &[&str]) -> Given {
        self.job(id, deps, JobState::Pending, 0, None)
    }

    fn gate(mut self, id: &str, answer: Option<&str>) -> Given {
        self.gates.push(GateRecord {
            operation: "op-1".into(),
            id: id.into(),
            gate_type: opsgraph_core::model::GateType::Approval,
            kind: opsgraph_core::model::GateKind::Plan,
            reason: String::new(),
            options: vec![],
            required_roles: vec![],
            answer: answer.map(str::to_string),
            answered_by: None,
            answered_at: None,
            value: None,
        });
        self
    }

    fn in_flight(mut self, id: &str) -> Given {
        self.in_flight.push(id.into());
        self
    }

    fn not_before(mut self, id: &str, ms: u64) -> Given {
        self.not_before.push((id.into(), ms));
        self
    }

    fn concurrency(mut self, n: usize) -> Given {
        self.concurrency = n;
        self
    }

    fn blocked(mut self, job: &str, child: &str) -> Given {
        self.blocked.push(job.into());
        self.children.push(child.into());
        self
    }

    /// Decides `input` on this snapshot and renders the decision, or the refusal.
    fn check(self, input: Input, expect: Expect) {
        let op = OperationRecord {
            id: "op-1".into(),
            parent: None,
            intent: Value::Null,
            resource: None,
            state: self.state,
            plan_revision: String::new(),
            intent_id: None,
            plan_id: String::new(),
            actor: "ann".into(),
            created_at: String::new(),
            updated_at: String::new(),
            version: 3,
        };
        let plan: Vec<JobInstance> = self.jobs.iter().map(|(i, _)| i.clone()).collect();
        let instances: HashMap<&str, &JobInstance> = plan.iter().map(|j| (j.id.as_str(), j)).collect();
        let jobs: HashMap<String, JobRecord> = self.jobs.iter().map(|(_, r)| (r.id.clone(), r.clone())).collect();
        let in_flight: HashMap<String, Cancel> = self.in_flight.iter().map(|j| (j.clone(), Cancel::new())).collect();
        let now = Instant::now();
        let not_before: HashMap<String, Instant> =
            self.not_before.iter().map(|(j, ms)| (j.clone(), now + Duration::from_millis(*ms))).collect();
        let blocked: HashSet<String> = self.blocked.iter().cloned().collect();
        let waiting = crate::waiting::Waiting::new(&plan, &jobs);
        let snapshot = Snapshot {
            op: &op,
            actor: "opsgraph",
            plan: &plan,
            instances: &instances,
            jobs: &jobs,
            gates: &self.gates,
            in_flight: &in_flight,
            not_before: &not_before,
            now,
            wall_ms: WALL_MS,
            concurrency: self.concurrency,
            blocked: &blocked,
            waiting_children: &self.children,
            done_prefix: 0,
            waiting: &waiting,
            rollouts: &self.rollouts,
        };
        let out = match decide(&snapshot, input) {
            Ok(d) => {
                let mut lines: Vec<String> = d.writes.iter().map(write).collect();
                lines.extend(d.effects.iter().map(effect));
                lines.push(format!("done prefix {}", d.done_prefix));
                lines.join("\n")
            }
            Err(e) => format!("error: {e}"),
        };
        expect.assert_eq(&out);
    }
}

fn write(w: &Write) -> String {
    match w {
        Write::Job(j) => {
            let failure = j.outcome.get("failure").filter(|f| !f.is_null());
            let key = j.outcome.get("key").filter(|k| !k.is_null());
            format!("write job {} {} attempt {} failure={failure:?} key={key:?}", j.id, j.state.as_str(), j.attempts)
        }
        Write::Timeline(e) => format!("write timeline {}: {}", e.event, e.reason),
        Write::Idempotency { key, job, resource, .. } => format!("write idempotency {key} by {job} on {resource:?}"),
        Write::Evidence(e) => format!("write evidence {} of {} passed={}", e.check, e.job, e.passed),
        other => format!("write {other:?}"),
    }
}

fn effect(e: &Effect) -> String {
    match e {
        Effect::Transition { event, reason, effects } => {
            let effects: Vec<String> = effects.iter().map(|f| serde_json::to_string(f).unwrap_or_default()).collect();
            format!("transition {} ({reason}) {}", event.name(), effects.join(" "))
        }
        Effect::Sleep(d) => format!("sleep about {}s", (d.as_millis() + 500) / 1000),
        other => format!("{other:?}"),
    }
}

/// An attempt's report.
struct Report(Finished);

fn report(job: &str, attempt: u32) -> Report {
    Report(Finished {
        result: TaskResult {
            instance: job.into(),
            attempt,
            outcome: "exit 0".into(),
            failure: None,
            satisfied_without_run: false,
            evidence: vec![],
            produced: vec![],
            log: Some(PathBuf::from(format!("/runs/{job}.{attempt}.log"))),
            duration: Duration::from_millis(5),
            cancelled: false,
            unknown: false,
            handed: None,
            after_sync: false,
            no_live_file: false,
        },
        key: None,
        max_attempts: 1,
        backoff: Duration::ZERO,
        observed: vec![],
    })
}

impl Report {
    fn failed(mut self, why: &str) -> Report {
        self.0.result.outcome = "exit 1".into();
        self.0.result.failure = Some(why.into());
        self
    }
    fn retries(mut self, max_attempts: u32, backoff_ms: u64) -> Report {
        self.0.max_attempts = max_attempts;
        self.0.backoff = Duration::from_millis(backoff_ms);
        self
    }
    fn key(mut self, key: &str) -> Report {
        self.0.key = Some(key.into());
        self
    }
    fn satisfied(mut self) -> Report {
        self.0.result.satisfied_without_run = true;
        self.0.result.outcome = "evidence already passes".into();
        self
    }
    fn unknown(mut self) -> Report {
        self.0.result.unknown = true;
        self
    }
    fn cancelled(mut self) -> Report {
        self.0.result.cancelled = true;
        self
    }
}

fn finished(reports: Vec<Report>) -> Input {
    Input::Finished(reports.into_iter().map(|r| r.0).collect())
}

#[test]
fn ready_jobs_start_in_plan_order_within_the_free_slots() {
    running()
        .job("a", &[], JobState::Succeeded, 1, None)
        .pending("b", &["a"])
        .pending("c", &["b"])
        .pending("d", &[])
        .pending("e", &[])
        .in_flight("x")
        .job("x", &[], JobState::Running, 1, None)
        .concurrency(3)
        .check(
            Input::Tick,
            expect![[r#"
                Start(["b", "d"])
                done prefix 1"#]],
        );
}

#[test]
fn gates_backoff_and_sub_operations_hold_jobs_back() {
    running()
        .gate("approve", None)
        .gate("approve-db", Some("approve"))
        .gate("cancelled", Some("cancel operation"))
        .pending("a", &["approve"])
        .pending("b", &["approve-db"])
        .pending("c", &["cancelled"])
        .pending("d", &[])
        .not_before("d", 60_000)
        .pending("e@db", &[])
        .blocked("e", "op-child")
        .check(
            Input::Tick,
            expect![[r#"
                Start(["b"])
                done prefix 0"#]],
        );
}

#[test]
fn with_nothing_ready_and_nothing_in_flight_the_run_completes_waits_fails_or_pauses() {
    // Every job done: complete, and the resource is written in the same transaction.
    running()
        .job("a", &[], JobState::Succeeded, 1, None)
        .job("b", &[], JobState::Skipped, 0, None)
        .job("c", &[], JobState::Recovered, 1, None)
        .check(
            Input::Tick,
            expect![[r#"
                Flush
                transition complete (every job's outputs are verified by evidence) {"effect":"update_resource"}
                done prefix 3"#]],
        );
    // A retry's backoff: sleep until it ends (five seconds at most), then look again.
    running().pending("a", &[]).not_before("a", 60_000).check(
        Input::Tick,
        expect![[r#"
            Flush
            sleep about 5s
            done prefix 0"#]],
    );
    // A job still failed fails the run again, naming it; the resource is marked failed.
    running().job("a", &[], JobState::Failed, 2, Some("exit 1")).pending("b", &["a"]).check(
        Input::Tick,
        expect![[r#"
            Flush
            transition job_failed (a: exit 1) {"effect":"stop_dispatch"} {"effect":"mark_resource_failed","reason":"a: exit 1"}
            done prefix 0"#]],
    );
    // Only a gate or a sub-operation blocks: pause, saying which.
    running().gate("approve", None).pending("a", &["approve"]).check(
        Input::Tick,
        expect![[r#"
            Flush
            transition pause (waiting for gate approve) {"effect":"stop_dispatch"}
            done prefix 0"#]],
    );
    running().pending("e@db", &[]).blocked("e", "op-child (waiting_for_approval)").check(
        Input::Tick,
        expect![[r#"
            Flush
            transition pause (waiting for sub-operation op-child (waiting_for_approval)) {"effect":"stop_dispatch"}
            done prefix 0"#]],
    );
    // Attempts in flight: commit what is held and wait for their reports.
    running().pending("a", &["b"]).job("b", &[], JobState::Running, 1, None).in_flight("b").check(
        Input::Tick,
        expect![[r#"
            Flush
            done prefix 0"#]],
    );
}

#[test]
fn a_stopped_operation_waits_for_its_attempts_and_a_cancelled_one_cancels_them() {
    given(OperationState::Cancelled { reason: "stop".into() })
        .job("a", &[], JobState::Running, 1, None)
        .in_flight("a")
        .check(
            Input::Tick,
            expect![[r#"
                Flush
                CancelAttempts
                done prefix 0"#]],
        );
    given(OperationState::Paused { reason: "a person paused it".into() }).pending("a", &[]).check(
        Input::Tick,
        expect![[r#"
            Flush
            Stop
            done prefix 0"#]],
    );
}

#[test]
fn reports_become_job_records_and_timeline_entries_held_for_the_next_commit() {
    running()
        .job("a", &[], JobState::Running, 1, None)
        .job("b@n1", &[], JobState::Running, 1, None)
        .job("c", &[], JobState::Running, 1, None)
        .job("d", &[], JobState::Running, 2, None)
        .check(
            finished(vec![
                report("a", 1),
                report("b@n1", 1).key("install:n1"),
                report("c", 1).satisfied().key("c"),
                report("d", 2).failed("exit 1").retries(3, 100),
                report("not-in-plan", 1),
            ]),
            expect![[r#"
                write job a succeeded attempt 1 failure=None key=None
                write timeline job_succeeded: a: exit 0 (0 evidence checks passed)
                write idempotency install:n1 by b@n1 on Some("n1")
                write job b@n1 succeeded attempt 1 failure=None key=Some(String("install:n1"))
                write timeline job_succeeded: b@n1: exit 0 (0 evidence checks passed)
                write job c already_satisfied attempt 1 failure=None key=Some(String("c"))
                write timeline job_already_satisfied: c: already satisfied, evidence passes
                write job d pending attempt 2 failure=Some(String("exit 1")) key=None
                write timeline job_retry: d: exit 1; attempt 2 of 3, retrying
                Backoff { instance: "d", delay: 200ms }
                Hold
                done prefix 0"#]],
        );
}

#[test]
fn a_failed_job_fails_the_running_operation_with_its_results_in_the_same_commit() {
    running()
        .job("a", &[], JobState::Running, 1, None)
        .job("b", &[], JobState::Running, 3, None)
        .job("c", &[], JobState::Running, 1, None)
        .check(
            finished(vec![report("a", 1), report("b", 3).failed("exit 2").retries(3, 0), report("c", 1).failed("exit 3")]),
            expect![[r#"
                write job a succeeded attempt 1 failure=None key=None
                write timeline job_succeeded: a: exit 0 (0 evidence checks passed)
                write job b failed attempt 3 failure=Some(String("exit 2")) key=None
                write timeline job_failed: b: exit 2
                write job c failed attempt 1 failure=Some(String("exit 3")) key=None
                write timeline job_failed: c: exit 3
                transition job_failed (b: exit 2) {"effect":"stop_dispatch"} {"effect":"mark_resource_failed","reason":"b: exit 2"}
                done prefix 0"#]],
        );
    // Paused (or cancelled): no retry, no transition; the results are held.
    given(OperationState::Paused { reason: "p".into() })
        .job("a", &[], JobState::Running, 1, None)
        .job("b", &[], JobState::Running, 1, None)
        .check(
            finished(vec![report("a", 1).failed("exit 1").retries(3, 0), report("b", 1).failed("killed").cancelled()]),
            expect![[r#"
                write job a failed attempt 1 failure=Some(String("exit 1")) key=None
                write timeline job_failed: a: exit 1
                write job b cancelled attempt 1 failure=Some(String("killed")) key=None
                write timeline job_cancelled: b: killed
                Hold
                done prefix 0"#]],
        );
}

#[test]
fn a_lost_agent_is_decided_by_evidence_as_after_a_crash() {
    running()
        .job("a", &[], JobState::Running, 1, None)
        .job("b", &[], JobState::Running, 1, None)
        .job("c", &[], JobState::Running, 1, None)
        .check(
            finished(vec![
                report("a", 1).unknown(),
                report("b", 1).unknown().failed("evidence up failed").retries(3, 0).key("b"),
                report("c", 1).unknown().failed("evidence up failed").retries(3, 0),
            ]),
            expect![[r#"
                write job a recovered attempt 1 failure=None key=None
                write timeline job_recovered: a: its agent was lost mid-run; its evidence passes
                write job b pending attempt 1 failure=Some(String("evidence up failed")) key=Some(String("b"))
                write timeline job_retry: b: evidence up failed; attempt 1 of 3, retrying
                write job c failed attempt 1 failure=Some(String("evidence up failed")) key=None
                write timeline job_outcome_unknown: c: evidence up failed
                Backoff { instance: "b", delay: 0ns }
                transition job_failed (c: evidence up failed) {"effect":"stop_dispatch"} {"effect":"mark_resource_failed","reason":"c: evidence up failed"}
                done prefix 0"#]],
        );
}

#[test]
fn a_report_for_a_job_not_running_is_refused_naming_state_and_event() {
    running().job("a", &[], JobState::Succeeded, 1, None).check(
        finished(vec![report("a", 1)]),
        expect![[r#"error: cannot apply `passed` to a job in state `succeeded`"#]],
    );
}

#[test]
fn an_attempt_is_recorded_running_before_it_starts() {
    let render = |from: JobState, attempt: u32, key: Option<&str>, check_first: bool| match attempt_writes(
        "op-1",
        "opsgraph",
        from,
        ("a@n1", attempt),
        (key, None),
        check_first,
        &opsgraph_store::now(),
    ) {
        Ok((writes, effects)) => {
            let mut lines: Vec<String> = writes.iter().map(write).collect();
            lines.push(format!("{effects:?}"));
            lines.join("\n")
        }
        Err(e) => format!("error: {e}"),
    };
    expect![[r#"
        write job a@n1 running attempt 1 failure=None key=None
        write timeline job_started: a@n1 attempt 1
        [RunAttempt]"#]]
    .assert_eq(&render(JobState::Pending, 1, None, false));
    expect![[r#"
        write job a@n1 running attempt 2 failure=None key=Some(String("k"))
        write timeline job_started: a@n1 attempt 2 (idempotency key seen before: evidence first)
        [RunAttempt]"#]]
    .assert_eq(&render(JobState::Pending, 2, Some("k"), true));
    expect![[r#"error: cannot apply `start` to a job in state `running`"#]].assert_eq(&render(
        JobState::Running,
        2,
        None,
        false,
    ));
}

/// Fleet rollouts ([P]): waves, budgets, the pause and the checks between waves.
#[path = "decide_rollout_tests.rs"]
mod rollout;
