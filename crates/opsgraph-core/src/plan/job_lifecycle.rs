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

    const STATES: [JobState; 9] = JobState::ALL;

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
    /// each legal one, then the events refused (each refusal names the state and the event).
    fn check(states: &[JobState], events: &[JobEvent], expect: Expect) {
        let mut out = String::new();
        for state in states {
            out.push_str(&format!("{}:\n", state.as_str()));
            let mut refused = Vec::new();
            for e in events {
                match apply(*state, *e) {
                    Ok((next, effects)) => out.push_str(&format!("  {e:?} -> {} {effects:?}\n", next.as_str())),
                    Err(err) => {
                        let said = err.to_string();
                        let of_state = format!("` to a job in state `{}`", state.as_str());
                        assert!(said.starts_with("cannot apply `") && said.ends_with(&of_state), "{said}");
                        refused.push(format!("{e:?}"));
                    }
                }
            }
            if !refused.is_empty() {
                out.push_str(&format!("  refused: {}\n", refused.join(", ")));
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
                  Skip -> skipped []
                  refused: Passed { ran: true, keyed: true }, Passed { ran: true, keyed: false }, Passed { ran: false, keyed: true }, Passed { ran: false, keyed: false }, Recovered, Failed { retry: true, unknown: false }, Failed { retry: true, unknown: true }, Failed { retry: false, unknown: false }, Failed { retry: false, unknown: true }, Cancelled, Reset, ManuallyFixed
                running:
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
                  refused: Start, Reset, Skip, ManuallyFixed
                succeeded:
                  refused: Start, Passed { ran: true, keyed: true }, Passed { ran: true, keyed: false }, Passed { ran: false, keyed: true }, Passed { ran: false, keyed: false }, Recovered, Failed { retry: true, unknown: false }, Failed { retry: true, unknown: true }, Failed { retry: false, unknown: false }, Failed { retry: false, unknown: true }, Cancelled, Reset, Skip, ManuallyFixed
                failed:
                  Recovered -> recovered []
                  Reset -> pending []
                  Skip -> skipped []
                  ManuallyFixed -> manually_fixed []
                  refused: Start, Passed { ran: true, keyed: true }, Passed { ran: true, keyed: false }, Passed { ran: false, keyed: true }, Passed { ran: false, keyed: false }, Failed { retry: true, unknown: false }, Failed { retry: true, unknown: true }, Failed { retry: false, unknown: false }, Failed { retry: false, unknown: true }, Cancelled
                already_satisfied:
                  refused: Start, Passed { ran: true, keyed: true }, Passed { ran: true, keyed: false }, Passed { ran: false, keyed: true }, Passed { ran: false, keyed: false }, Recovered, Failed { retry: true, unknown: false }, Failed { retry: true, unknown: true }, Failed { retry: false, unknown: false }, Failed { retry: false, unknown: true }, Cancelled, Reset, Skip, ManuallyFixed
                recovered:
                  refused: Start, Passed { ran: true, keyed: true }, Passed { ran: true, keyed: false }, Passed { ran: false, keyed: true }, Passed { ran: false, keyed: false }, Recovered, Failed { retry: true, unknown: false }, Failed { retry: true, unknown: true }, Failed { retry: false, unknown: false }, Failed { retry: false, unknown: true }, Cancelled, Reset, Skip, ManuallyFixed
                manually_fixed:
                  refused: Start, Passed { ran: true, keyed: true }, Passed { ran: true, keyed: false }, Passed { ran: false, keyed: true }, Passed { ran: false, keyed: false }, Recovered, Failed { retry: true, unknown: false }, Failed { retry: true, unknown: true }, Failed { retry: false, unknown: false }, Failed { retry: false, unknown: true }, Cancelled, Reset, Skip, ManuallyFixed
                skipped:
                  refused: Start, Passed { ran: true, keyed: true }, Passed { ran: true, keyed: false }, Passed { ran: false, keyed: true }, Passed { ran: false, keyed: false }, Recovered, Failed { retry: true, unknown: false }, Failed { retry: true, unknown: true }, Failed { retry: false, unknown: false }, Failed { retry: false, unknown: true }, Cancelled, Reset, Skip, ManuallyFixed
                cancelled:
                  Recovered -> recovered []
                  Reset -> pending []
                  Skip -> skipped []
                  refused: Start, Passed { ran: true, keyed: true }, Passed { ran: true, keyed: false }, Passed { ran: false, keyed: true }, Passed { ran: false, keyed: false }, Failed { retry: true, unknown: false }, Failed { retry: true, unknown: true }, Failed { retry: false, unknown: false }, Failed { retry: false, unknown: true }, Cancelled, ManuallyFixed
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
