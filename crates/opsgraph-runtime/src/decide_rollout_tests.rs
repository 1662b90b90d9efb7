//! `decide` on fleet rollouts ([P]): waves and the limit in flight, failure budgets, the pause
//! between waves counted from the job records, and the checks between waves.

use expect_test::expect;
use opsgraph_store::JobState;

use super::{finished, report, running, Given, Input, WALL_MS};

impl Given {
    /// The last job added is in wave `k` of its job's rollout.
    fn in_wave(mut self, k: u32) -> Given {
        if let Some((i, _)) = self.jobs.last_mut() {
            i.wave = Some(k);
        }
        self
    }

    /// A rollout of job `job`: wave sizes, each wave's budget, the overall budget, the limit in
    /// flight and the pause between waves.
    fn rollout(
        mut self,
        job: &str,
        sizes: &[usize],
        per_wave: Option<usize>,
        budget: usize,
        max_in_flight: Option<usize>,
        pause: Option<&str>,
    ) -> Given {
        use opsgraph_core::plan::{RolloutPlan, WavePlan};
        self.rollouts.push(RolloutPlan {
            job: job.into(),
            waves: sizes.iter().map(|&size| WavePlan { size, max_failures: per_wave }).collect(),
            max_in_flight,
            max_failures: budget,
            pause_between: pause.map(str::to_string),
            canary_gate: None,
            from: "the pack".into(),
            checks: None,
        });
        self
    }

    /// Checks between waves after wave `k` of the last rollout added (an instance
    /// `verify-<job>-wave-<k>` in `state`).
    fn checks_after(mut self, k: u32, state: JobState, failure: Option<&str>) -> Given {
        use opsgraph_core::plan::rollout::{check_id, WaveChecks, WaveRef};
        let r = self.rollouts.last_mut().expect("a rollout first");
        let job = r.job.clone();
        r.checks = Some(WaveChecks {
            on: opsgraph_core::model::VerifyBetween::HostsDone,
            evidence: vec!["up_ok".into()],
            resource: vec![],
        });
        let id = check_id(&job, k);
        // After the hosts it checks, as the planner places it.
        let hosts: Vec<String> = self
            .jobs
            .iter()
            .filter(|(i, _)| i.job == job && i.wave.is_some_and(|w| w <= k))
            .map(|(i, _)| i.id.clone())
            .collect();
        let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
        self = self.job(&id, &hosts, state, u32::from(state != JobState::Pending), failure);
        if let Some((i, _)) = self.jobs.last_mut() {
            i.verifies = Some(WaveRef { job, wave: k });
            i.resource = None;
        }
        self
    }

    /// Job `id`'s record was last written `secs` seconds before the snapshot's wall clock.
    fn ago(mut self, id: &str, secs: i64) -> Given {
        if let Some((_, r)) = self.jobs.iter_mut().find(|(i, _)| i.id == id) {
            r.updated_at = opsgraph_store::rfc3339(WALL_MS / 1000 - secs, 0);
        }
        self
    }
}

/// Five hosts a..e upgraded in waves 1 + 2 + 2; `then@x` runs on each host after its upgrade.
fn fleet(states: [JobState; 5]) -> Given {
    let mut g = running();
    for (i, (host, state)) in ["a", "b", "c", "d", "e"].iter().zip(states).enumerate() {
        let attempts = u32::from(state != JobState::Pending);
        let failure = (state == JobState::Failed).then_some("exit 1");
        g = g.job(&format!("up@{host}"), &[], state, attempts, failure).in_wave([1, 2, 2, 3, 3][i]);
    }
    for host in ["a", "b", "c", "d", "e"] {
        let up = format!("up@{host}");
        g = g.pending(&format!("then@{host}"), &[up.as_str()]);
    }
    g
}

#[test]
fn a_wave_starts_once_the_waves_before_it_finished_within_the_limit_in_flight() {
    use JobState::{Failed, Pending, Running, Succeeded};
    // Wave 1 is running: nothing of wave 2 starts.
    fleet([Running, Pending, Pending, Pending, Pending])
        .in_flight("up@a")
        .rollout("up", &[1, 2, 2], None, 1, None, None)
        .check(
            Input::Tick,
            expect![[r#"
                Flush
                done prefix 0"#]],
        );
    // Wave 1 done: wave 2 starts, on the timeline; then@a follows its host.
    fleet([Succeeded, Pending, Pending, Pending, Pending]).rollout("up", &[1, 2, 2], None, 1, None, None).check(
        Input::Tick,
        expect![[r#"
            write timeline wave_started: up wave 2 of 3: 2 instance(s) (b, c)
            Hold
            Start(["up@b", "up@c", "then@a"])
            done prefix 1"#]],
    );
    // At most one at once.
    fleet([Succeeded, Pending, Pending, Pending, Pending]).rollout("up", &[1, 2, 2], None, 1, Some(1), None).check(
        Input::Tick,
        expect![[r#"
            write timeline wave_started: up wave 2 of 3: 2 instance(s) (b, c)
            Hold
            Start(["up@b", "then@a"])
            done prefix 1"#]],
    );
    // A host failed within the budget: the next wave goes on, its own next job does not start.
    fleet([Succeeded, Failed, Succeeded, Pending, Pending]).rollout("up", &[1, 2, 2], None, 1, None, None).check(
        Input::Tick,
        expect![[r#"
            write timeline wave_started: up wave 3 of 3: 2 instance(s) (d, e)
            Hold
            Start(["up@d", "up@e", "then@a", "then@c"])
            done prefix 1"#]],
    );
}

#[test]
fn a_failure_within_the_budget_does_not_fail_the_operation_and_a_spent_budget_pauses_it() {
    use JobState::{Pending, Running, Succeeded};
    // Within the budget: the host is failed, the operation runs on.
    fleet([Succeeded, Running, Running, Pending, Pending]).rollout("up", &[1, 2, 2], None, 1, None, None).check(
        finished(vec![report("up@b", 1).failed("exit 1")]),
        expect![[r#"
                write job up@b failed attempt 1 failure=Some(String("exit 1")) key=None
                write timeline job_failed: up@b: exit 1
                Hold
                done prefix 0"#]],
    );
    // The wave ends with a second failure: over the budget of 1, the operation pauses with the
    // hosts listed; the wave's end is on the timeline.
    fleet([Succeeded, JobState::Failed, Running, Pending, Pending])
        .rollout("up", &[1, 2, 2], None, 1, None, None)
        .check(
            finished(vec![report("up@c", 1).failed("exit 1")]),
            expect![[r#"
                write job up@c failed attempt 1 failure=Some(String("exit 1")) key=None
                write timeline job_failed: up@c: exit 1
                write timeline wave_finished: up wave 2 of 3 finished: 0 done, 2 failed (b, c); budget left 0 of 1
                write timeline rollout_paused: rollout of up paused in wave 2 of 3: 2 failed, over its budget of 1; failed: b, c; 1 done, 0 running, 2 untouched; retry or skip the failed hosts, roll back, or cancel
                transition pause (rollout of up paused in wave 2 of 3: 2 failed, over its budget of 1; failed: b, c; 1 done, 0 running, 2 untouched; retry or skip the failed hosts, roll back, or cancel) {"effect":"stop_dispatch"}
                done prefix 0"#]],
        );
    // A wave's own budget: one failure in a wave that tolerates none.
    fleet([Succeeded, Running, Succeeded, Pending, Pending])
        .rollout("up", &[1, 2, 2], Some(0), 5, None, None)
        .check(
            finished(vec![report("up@b", 1).failed("exit 1")]),
            expect![[r#"
                write job up@b failed attempt 1 failure=Some(String("exit 1")) key=None
                write timeline job_failed: up@b: exit 1
                write timeline wave_finished: up wave 2 of 3 finished: 1 done, 1 failed (b); budget left 4 of 5
                write timeline rollout_paused: rollout of up paused in wave 2 of 3: wave 2 has 1 failed, over its budget of 0; failed: b; 2 done, 0 running, 2 untouched; retry or skip the failed hosts, roll back, or cancel
                transition pause (rollout of up paused in wave 2 of 3: wave 2 has 1 failed, over its budget of 0; failed: b; 2 done, 0 running, 2 untouched; retry or skip the failed hosts, roll back, or cancel) {"effect":"stop_dispatch"}
                done prefix 0"#]],
        );
    // Resumed without retrying or skipping the failed hosts: it pauses again at once.
    fleet([Succeeded, JobState::Failed, JobState::Failed, Pending, Pending])
        .rollout("up", &[1, 2, 2], None, 1, None, None)
        .check(
            Input::Tick,
            expect![[r#"
                write timeline rollout_paused: rollout of up paused in wave 2 of 3: 2 failed, over its budget of 1; failed: b, c; 1 done, 0 running, 2 untouched; retry or skip the failed hosts, roll back, or cancel
                transition pause (rollout of up paused in wave 2 of 3: 2 failed, over its budget of 1; failed: b, c; 1 done, 0 running, 2 untouched; retry or skip the failed hosts, roll back, or cancel) {"effect":"stop_dispatch"}
                done prefix 0"#]],
        );
}

#[test]
fn a_finished_wave_waits_the_pause_between_waves_and_the_end_names_the_failed_hosts() {
    use JobState::{Failed, Pending, Running, Succeeded};
    fleet([Succeeded, Succeeded, Running, Pending, Pending])
        .rollout("up", &[1, 2, 2], None, 1, None, Some("2m"))
        .check(
            finished(vec![report("up@c", 1)]),
            expect![[r#"
                write job up@c succeeded attempt 1 failure=None key=None
                write timeline job_succeeded: up@c: exit 0 (0 evidence checks passed)
                write timeline wave_finished: up wave 2 of 3 finished: 2 done, 0 failed; budget left 1 of 1; next: a pause of 2m
                Hold
                done prefix 0"#]],
        );
    // Everything else done; a host failed within the budget and its next job never ran: the
    // operation fails naming it (retry, skip or roll back from there).
    let mut g = fleet([Succeeded, Failed, Succeeded, Succeeded, Succeeded]);
    for host in ["a", "c", "d", "e"] {
        g.jobs.iter_mut().find(|(i, _)| i.id == format!("then@{host}")).unwrap().1.state = Succeeded;
    }
    g.rollout("up", &[1, 2, 2], None, 1, None, None).check(
        Input::Tick,
        expect![[r#"
            Flush
            transition job_failed (up@b: exit 1) {"effect":"stop_dispatch"} {"effect":"mark_resource_failed","reason":"up@b: exit 1"}
            done prefix 1"#]],
    );
}

#[test]
fn the_pause_between_waves_counts_from_the_records_so_a_restarted_driver_keeps_it() {
    use JobState::{Pending, Succeeded};
    // Wave 1 ended 30 s ago (its record's time), the pause is 2m: a driver that starts now (no
    // backoffs in memory) starts nothing of wave 2 and looks again in a while.
    fleet([Succeeded, Pending, Pending, Pending, Pending])
        .ago("up@a", 30)
        .rollout("up", &[1, 2, 2], None, 1, None, Some("2m"))
        .check(
            Input::Tick,
            expect![[r#"
            Start(["then@a"])
            done prefix 1"#]],
        );
    let mut g = fleet([Succeeded, Pending, Pending, Pending, Pending]).ago("up@a", 30);
    g.jobs.retain(|(i, _)| i.id != "then@a");
    g.rollout("up", &[1, 2, 2], None, 1, None, Some("2m")).check(
        Input::Tick,
        expect![[r#"
            Flush
            sleep about 5s
            done prefix 1"#]],
    );
    // Ended 3 minutes ago: wave 2 starts.
    let mut g = fleet([Succeeded, Pending, Pending, Pending, Pending]).ago("up@a", 180);
    g.jobs.retain(|(i, _)| i.id != "then@a");
    g.rollout("up", &[1, 2, 2], None, 1, None, Some("2m")).check(
        Input::Tick,
        expect![[r#"
            write timeline wave_started: up wave 2 of 3: 2 instance(s) (b, c)
            Hold
            Start(["up@b", "up@c"])
            done prefix 1"#]],
    );
}

#[test]
fn checks_between_waves_run_after_the_pause_gate_the_next_wave_and_pause_the_rollout_when_they_fail() {
    use JobState::{Failed, Pending, Running, Succeeded};
    let wave1 = |ago: i64| {
        let mut g = fleet([Succeeded, Pending, Pending, Pending, Pending]).ago("up@a", ago);
        g.jobs.retain(|(i, _)| !i.id.starts_with("then@"));
        g
    };
    // Wave 1 done, within the pause: neither the checks nor wave 2 start.
    wave1(30)
        .rollout("up", &[1, 2, 2], None, 1, None, Some("2m"))
        .checks_after(1, Pending, None)
        .checks_after(2, Pending, None)
        .check(
            Input::Tick,
            expect![[r#"
            Flush
            sleep about 5s
            done prefix 1"#]],
        );
    // The pause over: the checks after wave 1 start, wave 2 waits for them.
    wave1(180).rollout("up", &[1, 2, 2], None, 1, None, Some("2m")).checks_after(1, Pending, None).check(
        Input::Tick,
        expect![[r#"
            Start(["verify-up-wave-1"])
            done prefix 1"#]],
    );
    // A host of wave 1 failed within the budget: the checks still run (on the hosts done).
    let mut g = wave1(180);
    g.jobs[0].1.state = Failed;
    g.rollout("up", &[1, 2, 2], None, 1, None, Some("2m")).checks_after(1, Pending, None).check(
        Input::Tick,
        expect![[r#"
            Start(["verify-up-wave-1"])
            done prefix 0"#]],
    );
    // They passed: wave 2 starts.
    wave1(180).rollout("up", &[1, 2, 2], None, 1, None, None).checks_after(1, Succeeded, None).check(
        Input::Tick,
        expect![[r#"
            write timeline wave_started: up wave 2 of 3: 2 instance(s) (b, c)
            Hold
            Start(["up@b", "up@c"])
            done prefix 1"#]],
    );
    // They fail: the operation pauses (it does not fail), naming the check and the hosts.
    wave1(180).rollout("up", &[1, 2, 2], None, 1, None, None).checks_after(1, Running, None).in_flight("verify-up-wave-1").check(
        finished(vec![report("verify-up-wave-1", 1).failed("check up_ok@a failed: expected 1, observed 0")]),
        expect![[r#"
            write job verify-up-wave-1 failed attempt 1 failure=Some(String("check up_ok@a failed: expected 1, observed 0")) key=None
            write timeline job_failed: verify-up-wave-1: check up_ok@a failed: expected 1, observed 0
            write timeline rollout_paused: rollout of up paused after wave 1 of 3: verify-up-wave-1 failed: check up_ok@a failed: expected 1, observed 0; failed: none; 1 done, 0 running, 4 untouched; retry verify-up-wave-1 once fixed, skip it by a patch, roll back, or cancel
            transition pause (rollout of up paused after wave 1 of 3: verify-up-wave-1 failed: check up_ok@a failed: expected 1, observed 0; failed: none; 1 done, 0 running, 4 untouched; retry verify-up-wave-1 once fixed, skip it by a patch, roll back, or cancel) {"effect":"stop_dispatch"}
            done prefix 0"#]],
    );
    // Resumed as it is, it pauses again at once: wave 2 never starts on failed checks.
    wave1(180).rollout("up", &[1, 2, 2], None, 1, None, None).checks_after(1, Failed, Some("check up_ok@a failed")).check(
        Input::Tick,
        expect![[r#"
            write timeline rollout_paused: rollout of up paused after wave 1 of 3: verify-up-wave-1 failed: check up_ok@a failed; failed: none; 1 done, 0 running, 4 untouched; retry verify-up-wave-1 once fixed, skip it by a patch, roll back, or cancel
            transition pause (rollout of up paused after wave 1 of 3: verify-up-wave-1 failed: check up_ok@a failed; failed: none; 1 done, 0 running, 4 untouched; retry verify-up-wave-1 once fixed, skip it by a patch, roll back, or cancel) {"effect":"stop_dispatch"}
            done prefix 0"#]],
    );
}
