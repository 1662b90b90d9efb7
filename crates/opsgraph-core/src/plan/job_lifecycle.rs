//! The lifecycle of one job instance, beside the operation's (`lifecycle.rs`), as one pure, total
//! transition function: `(state, event) -> (state, effects)`. A job record's state changes only
//! through [`apply`]; the runtime stores the new state and its timeline entry, then carries out
//! the effects.
//!
//! ```text
//! pending --start--> running --passed--> succeeded | already_satisfied
//!    ^                  |  \--recovered--> recovered        (outcome unknown, evidence passes)
//!    |  failed, retry   |   \--cancelled--> cancelled
//!    +------------------+    \--failed--> failed            (no attempt left, or unknown without a key)
//! failed | cancelled --reset--> pending      (a person's retry, a patch)
//! failed | cancelled --recovered--> recovered (a person's retry of an unknown outcome that now passes)
//! failed --manually_fixed--> manually_fixed   (an intervention verified)
//! pending | failed | cancelled --skip--> skipped (a patch)
//! ```

use std::fmt;

use crate::model::JobState;

/// Something that happened to a job instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEvent {
    /// An attempt is recorded, before its process exists.
    Start,
    /// The attempt's evidence passed: it ran (`ran`), or its evidence passed before it had to
    /// (an idempotency key seen before). `keyed`: it has an idempotency key to remember.
    Passed { ran: bool, keyed: bool },
    /// Its outcome was unknown (its driver died, its agent or connection was lost) and its
    /// evidence passes.
    Recovered,
    /// The attempt failed. `retry`: its policy (and, for an unknown outcome, its idempotency key)
    /// allows another attempt. `unknown`: its outcome was unknown and its evidence fails.
    Failed { retry: bool, unknown: bool },
    /// It was stopped because the operation was cancelled.
    Cancelled,
    /// Run it again: a person's retry, or a patch that retries it.
    Reset,
    /// A patch skips it: done without running.
    Skip,
    /// A person fixed it by hand and the intervention's evidence passed.
    ManuallyFixed,
}

impl JobEvent {
    pub fn name(&self) -> &'static str {
        match self {
            JobEvent::Start => "start",
            JobEvent::Passed { .. } => "passed",
            JobEvent::Recovered => "recovered",
            JobEvent::Failed { .. } => "failed",
            JobEvent::Cancelled => "cancelled",
            JobEvent::Reset => "reset",
            JobEvent::Skip => "skip",
            JobEvent::ManuallyFixed => "manually_fixed",
        }
    }

    /// The timeline event that records this transition (`job_started`, `job_retry`, …); `None`
    /// for the ones recorded by the operation's own transition (a person's retry, a patch, an
    /// intervention's verification).
    pub fn timeline(&self) -> Option<&'static str> {
        Some(match self {
            JobEvent::Start => "job_started",
            JobEvent::Passed { ran: true, .. } => "job_succeeded",
            JobEvent::Passed { ran: false, .. } => "job_already_satisfied",
            JobEvent::Recovered => "job_recovered",
            JobEvent::Failed { retry: true, .. } => "job_retry",
            JobEvent::Failed { retry: false, unknown: true } => "job_outcome_unknown",
            JobEvent::Failed { retry: false, unknown: false } => "job_failed",
            JobEvent::Cancelled => "job_cancelled",
            JobEvent::Reset | JobEvent::Skip | JobEvent::ManuallyFixed => return None,
        })
    }
}

/// What the runtime must do after a job transition is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEffect {
    /// Start the attempt just recorded: run it, or hand it to its agent.
    RunAttempt,
    /// Remember its idempotency key as succeeded.
    RecordKey,
    /// Start it again after its retry policy's backoff.
    Backoff,
    /// The operation fails with this job's reason.
    FailOperation,
}

/// An event that the job's current state does not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IllegalJobTransition {
    pub state: JobState,
    pub event: &'static str,
}

impl fmt::Display for IllegalJobTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot apply `{}` to a job in state `{}`", self.event, self.state.as_str())
    }
}

impl std::error::Error for IllegalJobTransition {}

/// The one job transition function.
pub fn apply(state: JobState, event: JobEvent) -> Result<(JobState, Vec<JobEffect>), IllegalJobTransition> {
    use JobEffect as F;
    use JobEvent as E;
    use JobState as S;
    let next = match (state, event) {
        (S::Pending, E::Start) => (S::Running, vec![F::RunAttempt]),
        (S::Running, E::Passed { ran: true, keyed: true }) => (S::Succeeded, vec![F::RecordKey]),
        (S::Running, E::Passed { ran: true, keyed: false }) => (S::Succeeded, vec![]),
        (S::Running, E::Passed { ran: false, .. }) => (S::AlreadySatisfied, vec![]),
        (S::Running | S::Failed | S::Cancelled, E::Recovered) => (S::Recovered, vec![]),
        (S::Running, E::Failed { retry: true, .. }) => (S::Pending, vec![F::Backoff]),
        (S::Running, E::Failed { retry: false, .. }) => (S::Failed, vec![F::FailOperation]),
        (S::Running, E::Cancelled) => (S::Cancelled, vec![]),
        (S::Failed | S::Cancelled, E::Reset) => (S::Pending, vec![]),
        (S::Pending | S::Failed | S::Cancelled, E::Skip) => (S::Skipped, vec![]),
        (S::Failed, E::ManuallyFixed) => (S::ManuallyFixed, vec![]),
        (
            S::Pending
            | S::Running
            | S::Succeeded
            | S::Failed
            | S::AlreadySatisfied
            | S::Recovered
            | S::ManuallyFixed
            | S::Skipped
            | S::Cancelled,
            E::Start
            | E::Passed { .. }
            | E::Recovered
            | E::Failed { .. }
            | E::Cancelled
            | E::Reset
            | E::Skip
            | E::ManuallyFixed,
        ) => return Err(IllegalJobTransition { state, event: event.name() }),
    };
    Ok(next)
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};

    use super::*;

    const STATES: [JobState; 9] = [
        JobState::Pending,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::AlreadySatisfied,
        JobState::Recovered,
        JobState::ManuallyFixed,
        JobState::Skipped,
        JobState::Cancelled,
    ];

    const EVENTS: [JobEvent; 14] = [
        JobEvent::Start,
        JobEvent::Passed { ran: true, keyed: true },
        JobEvent::Passed { ran: true, keyed: false },
        JobEvent::Passed { ran: false, keyed: true },
        JobEvent::Passed { ran: false, keyed: false },
        JobEvent::Recovered,
        JobEvent::Failed { retry: true, unknown: false },
        JobEvent::Failed { retry: true, unknown: true },
        JobEvent::Failed { retry: false, unknown: false },
        JobEvent::Failed { retry: false, unknown: true },
        JobEvent::Cancelled,
        JobEvent::Reset,
        JobEvent::Skip,
        JobEvent::ManuallyFixed,
    ];

    /// Every event of `events` applied to every state of `states`: the state and effects after
    /// it, or the refusal naming the state and the event.
    fn check(states: &[JobState], events: &[JobEvent], expect: Expect) {
        let mut out = String::new();
        for state in states {
            out.push_str(&format!("{}:\n", state.as_str()));
            for e in events {
                let line = match apply(*state, *e) {
                    Ok((next, effects)) => format!("  {e:?} -> {} {effects:?}", next.as_str()),
                    Err(err) => format!("  {e:?} -> error: {err}"),
                };
                out.push_str(&line);
                out.push('\n');
            }
        }
        expect.assert_eq(&out);
    }

    #[test]
    fn every_state_and_event() {
        check(
            &STATES,
            &EVENTS,
            expect![[r#"
            pending:
              Start -> running [RunAttempt]
              Passed { ran: true, keyed: true } -> error: cannot apply `passed` to a job in state `pending`
              Passed { ran: true, keyed: false } -> error: cannot apply `passed` to a job in state `pending`
              Passed { ran: false, keyed: true } -> error: cannot apply `passed` to a job in state `pending`
              Passed { ran: false, keyed: false } -> error: cannot apply `passed` to a job in state `pending`
              Recovered -> error: cannot apply `recovered` to a job in state `pending`
              Failed { retry: true, unknown: false } -> error: cannot apply `failed` to a job in state `pending`
              Failed { retry: true, unknown: true } -> error: cannot apply `failed` to a job in state `pending`
              Failed { retry: false, unknown: false } -> error: cannot apply `failed` to a job in state `pending`
              Failed { retry: false, unknown: true } -> error: cannot apply `failed` to a job in state `pending`
              Cancelled -> error: cannot apply `cancelled` to a job in state `pending`
              Reset -> error: cannot apply `reset` to a job in state `pending`
              Skip -> skipped []
              ManuallyFixed -> error: cannot apply `manually_fixed` to a job in state `pending`
            running:
              Start -> error: cannot apply `start` to a job in state `running`
              Passed { ran: true, keyed: true } -> succeeded [RecordKey]
              Passed { ran: true, keyed: false } -> succeeded []
              Passed { ran: false, keyed: true } -> already_satisfied []
              Passed { ran: false, keyed: false } -> already_satisfied []
              Recovered -> recovered []
              Failed { retry: true, unknown: false } -> pending [Backoff]
              Failed { retry: true, unknown: true } -> pending [Backoff]
              Failed { retry: false, unknown: false } -> failed [FailOperation]
              Failed { retry: false, unknown: true } -> failed [FailOperation]
              Cancelled -> cancelled []
              Reset -> error: cannot apply `reset` to a job in state `running`
              Skip -> error: cannot apply `skip` to a job in state `running`
              ManuallyFixed -> error: cannot apply `manually_fixed` to a job in state `running`
            succeeded:
              Start -> error: cannot apply `start` to a job in state `succeeded`
              Passed { ran: true, keyed: true } -> error: cannot apply `passed` to a job in state `succeeded`
              Passed { ran: true, keyed: false } -> error: cannot apply `passed` to a job in state `succeeded`
              Passed { ran: false, keyed: true } -> error: cannot apply `passed` to a job in state `succeeded`
              Passed { ran: false, keyed: false } -> error: cannot apply `passed` to a job in state `succeeded`
              Recovered -> error: cannot apply `recovered` to a job in state `succeeded`
              Failed { retry: true, unknown: false } -> error: cannot apply `failed` to a job in state `succeeded`
              Failed { retry: true, unknown: true } -> error: cannot apply `failed` to a job in state `succeeded`
              Failed { retry: false, unknown: false } -> error: cannot apply `failed` to a job in state `succeeded`
              Failed { retry: false, unknown: true } -> error: cannot apply `failed` to a job in state `succeeded`
              Cancelled -> error: cannot apply `cancelled` to a job in state `succeeded`
              Reset -> error: cannot apply `reset` to a job in state `succeeded`
              Skip -> error: cannot apply `skip` to a job in state `succeeded`
              ManuallyFixed -> error: cannot apply `manually_fixed` to a job in state `succeeded`
            failed:
              Start -> error: cannot apply `start` to a job in state `failed`
              Passed { ran: true, keyed: true } -> error: cannot apply `passed` to a job in state `failed`
              Passed { ran: true, keyed: false } -> error: cannot apply `passed` to a job in state `failed`
              Passed { ran: false, keyed: true } -> error: cannot apply `passed` to a job in state `failed`
              Passed { ran: false, keyed: false } -> error: cannot apply `passed` to a job in state `failed`
              Recovered -> recovered []
              Failed { retry: true, unknown: false } -> error: cannot apply `failed` to a job in state `failed`
              Failed { retry: true, unknown: true } -> error: cannot apply `failed` to a job in state `failed`
              Failed { retry: false, unknown: false } -> error: cannot apply `failed` to a job in state `failed`
              Failed { retry: false, unknown: true } -> error: cannot apply `failed` to a job in state `failed`
              Cancelled -> error: cannot apply `cancelled` to a job in state `failed`
              Reset -> pending []
              Skip -> skipped []
              ManuallyFixed -> manually_fixed []
            already_satisfied:
              Start -> error: cannot apply `start` to a job in state `already_satisfied`
              Passed { ran: true, keyed: true } -> error: cannot apply `passed` to a job in state `already_satisfied`
              Passed { ran: true, keyed: false } -> error: cannot apply `passed` to a job in state `already_satisfied`
              Passed { ran: false, keyed: true } -> error: cannot apply `passed` to a job in state `already_satisfied`
              Passed { ran: false, keyed: false } -> error: cannot apply `passed` to a job in state `already_satisfied`
              Recovered -> error: cannot apply `recovered` to a job in state `already_satisfied`
              Failed { retry: true, unknown: false } -> error: cannot apply `failed` to a job in state `already_satisfied`
              Failed { retry: true, unknown: true } -> error: cannot apply `failed` to a job in state `already_satisfied`
              Failed { retry: false, unknown: false } -> error: cannot apply `failed` to a job in state `already_satisfied`
              Failed { retry: false, unknown: true } -> error: cannot apply `failed` to a job in state `already_satisfied`
              Cancelled -> error: cannot apply `cancelled` to a job in state `already_satisfied`
              Reset -> error: cannot apply `reset` to a job in state `already_satisfied`
              Skip -> error: cannot apply `skip` to a job in state `already_satisfied`
              ManuallyFixed -> error: cannot apply `manually_fixed` to a job in state `already_satisfied`
            recovered:
              Start -> error: cannot apply `start` to a job in state `recovered`
              Passed { ran: true, keyed: true } -> error: cannot apply `passed` to a job in state `recovered`
              Passed { ran: true, keyed: false } -> error: cannot apply `passed` to a job in state `recovered`
              Passed { ran: false, keyed: true } -> error: cannot apply `passed` to a job in state `recovered`
              Passed { ran: false, keyed: false } -> error: cannot apply `passed` to a job in state `recovered`
              Recovered -> error: cannot apply `recovered` to a job in state `recovered`
              Failed { retry: true, unknown: false } -> error: cannot apply `failed` to a job in state `recovered`
              Failed { retry: true, unknown: true } -> error: cannot apply `failed` to a job in state `recovered`
              Failed { retry: false, unknown: false } -> error: cannot apply `failed` to a job in state `recovered`
              Failed { retry: false, unknown: true } -> error: cannot apply `failed` to a job in state `recovered`
              Cancelled -> error: cannot apply `cancelled` to a job in state `recovered`
              Reset -> error: cannot apply `reset` to a job in state `recovered`
              Skip -> error: cannot apply `skip` to a job in state `recovered`
              ManuallyFixed -> error: cannot apply `manually_fixed` to a job in state `recovered`
            manually_fixed:
              Start -> error: cannot apply `start` to a job in state `manually_fixed`
              Passed { ran: true, keyed: true } -> error: cannot apply `passed` to a job in state `manually_fixed`
              Passed { ran: true, keyed: false } -> error: cannot apply `passed` to a job in state `manually_fixed`
              Passed { ran: false, keyed: true } -> error: cannot apply `passed` to a job in state `manually_fixed`
              Passed { ran: false, keyed: false } -> error: cannot apply `passed` to a job in state `manually_fixed`
              Recovered -> error: cannot apply `recovered` to a job in state `manually_fixed`
              Failed { retry: true, unknown: false } -> error: cannot apply `failed` to a job in state `manually_fixed`
              Failed { retry: true, unknown: true } -> error: cannot apply `failed` to a job in state `manually_fixed`
              Failed { retry: false, unknown: false } -> error: cannot apply `failed` to a job in state `manually_fixed`
              Failed { retry: false, unknown: true } -> error: cannot apply `failed` to a job in state `manually_fixed`
              Cancelled -> error: cannot apply `cancelled` to a job in state `manually_fixed`
              Reset -> error: cannot apply `reset` to a job in state `manually_fixed`
              Skip -> error: cannot apply `skip` to a job in state `manually_fixed`
              ManuallyFixed -> error: cannot apply `manually_fixed` to a job in state `manually_fixed`
            skipped:
              Start -> error: cannot apply `start` to a job in state `skipped`
              Passed { ran: true, keyed: true } -> error: cannot apply `passed` to a job in state `skipped`
              Passed { ran: true, keyed: false } -> error: cannot apply `passed` to a job in state `skipped`
              Passed { ran: false, keyed: true } -> error: cannot apply `passed` to a job in state `skipped`
              Passed { ran: false, keyed: false } -> error: cannot apply `passed` to a job in state `skipped`
              Recovered -> error: cannot apply `recovered` to a job in state `skipped`
              Failed { retry: true, unknown: false } -> error: cannot apply `failed` to a job in state `skipped`
              Failed { retry: true, unknown: true } -> error: cannot apply `failed` to a job in state `skipped`
              Failed { retry: false, unknown: false } -> error: cannot apply `failed` to a job in state `skipped`
              Failed { retry: false, unknown: true } -> error: cannot apply `failed` to a job in state `skipped`
              Cancelled -> error: cannot apply `cancelled` to a job in state `skipped`
              Reset -> error: cannot apply `reset` to a job in state `skipped`
              Skip -> error: cannot apply `skip` to a job in state `skipped`
              ManuallyFixed -> error: cannot apply `manually_fixed` to a job in state `skipped`
            cancelled:
              Start -> error: cannot apply `start` to a job in state `cancelled`
              Passed { ran: true, keyed: true } -> error: cannot apply `passed` to a job in state `cancelled`
              Passed { ran: true, keyed: false } -> error: cannot apply `passed` to a job in state `cancelled`
              Passed { ran: false, keyed: true } -> error: cannot apply `passed` to a job in state `cancelled`
              Passed { ran: false, keyed: false } -> error: cannot apply `passed` to a job in state `cancelled`
              Recovered -> recovered []
              Failed { retry: true, unknown: false } -> error: cannot apply `failed` to a job in state `cancelled`
              Failed { retry: true, unknown: true } -> error: cannot apply `failed` to a job in state `cancelled`
              Failed { retry: false, unknown: false } -> error: cannot apply `failed` to a job in state `cancelled`
              Failed { retry: false, unknown: true } -> error: cannot apply `failed` to a job in state `cancelled`
              Cancelled -> error: cannot apply `cancelled` to a job in state `cancelled`
              Reset -> pending []
              Skip -> skipped []
              ManuallyFixed -> error: cannot apply `manually_fixed` to a job in state `cancelled`
        "#]],
        );
    }

    #[test]
    fn timeline_names() {
        let names: Vec<String> = EVENTS.iter().map(|e| format!("{e:?}: {:?}", e.timeline())).collect();
        expect![[r#"
            Start: Some("job_started")
            Passed { ran: true, keyed: true }: Some("job_succeeded")
            Passed { ran: true, keyed: false }: Some("job_succeeded")
            Passed { ran: false, keyed: true }: Some("job_already_satisfied")
            Passed { ran: false, keyed: false }: Some("job_already_satisfied")
            Recovered: Some("job_recovered")
            Failed { retry: true, unknown: false }: Some("job_retry")
            Failed { retry: true, unknown: true }: Some("job_retry")
            Failed { retry: false, unknown: false }: Some("job_failed")
            Failed { retry: false, unknown: true }: Some("job_outcome_unknown")
            Cancelled: Some("job_cancelled")
            Reset: None
            Skip: None
            ManuallyFixed: None"#]]
        .assert_eq(&names.join("\n"));
    }
}
