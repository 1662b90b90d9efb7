//! The operation lifecycle: each script of events from draft, with the state and effects after
//! each one, or the refusal that names the state and the event.

use expect_test::{expect, Expect};
use opsgraph_core::model::OperationState;
use opsgraph_core::plan::lifecycle::{apply, state_name, Event};

fn check(events: &[Event], expect: Expect) {
    let mut state = OperationState::DraftIntent;
    let mut out = String::new();
    for e in events {
        match apply(&state, e) {
            Ok((next, effects)) => {
                let effects: Vec<String> = effects.iter().map(|f| serde_json::to_string(f).unwrap()).collect();
                let line = format!(
                    "{} --{}--> {} {}",
                    state_name(state.kind()),
                    e.name(),
                    state_name(next.kind()),
                    effects.join(" ")
                );
                out.push_str(line.trim_end());
                out.push('\n');
                state = next;
            }
            Err(err) => out.push_str(&format!("error: {err}\n")),
        }
    }
    expect.assert_eq(&out);
}

fn to_running() -> Vec<Event> {
    vec![Event::PlanBuilt, Event::Resolve, Event::Start]
}

#[test]
fn happy_path_with_gates() {
    check(
        &[
            Event::PlanBuilt,
            Event::Resolve,
            Event::NeedInput { gates: vec!["select-s3".into()] },
            Event::InputProvided { gate: "select-s3".into() },
            Event::NeedApproval { gates: vec!["approve-plan".into(), "approve-s3".into()] },
            Event::Approved { gate: "approve-plan".into() },
            Event::Approved { gate: "approve-plan".into() },
            Event::Approved { gate: "approve-s3".into() },
            Event::Pause { reason: "maintenance window".into() },
            Event::Resume,
            Event::Complete,
            Event::Resume,
            Event::Cancel { reason: "too late".into() },
        ],
        expect![[r#"
            draft_intent --plan_built--> plan_preview
            plan_preview --resolve--> capability_resolution {"effect":"resolve_requirements"}
            capability_resolution --need_input--> waiting_for_input {"effect":"open_gates","gates":["select-s3"]}
            waiting_for_input --input_provided--> capability_resolution {"effect":"resolve_requirements"}
            capability_resolution --need_approval--> waiting_for_approval {"effect":"open_gates","gates":["approve-plan","approve-s3"]}
            waiting_for_approval --approved--> waiting_for_approval
            error: cannot apply `approved` to an operation in state `waiting_for_approval`: that gate is not open; it may have been answered already
            waiting_for_approval --approved--> running {"effect":"dispatch_ready_jobs"}
            running --pause--> paused {"effect":"stop_dispatch"}
            paused --resume--> running {"effect":"dispatch_ready_jobs"}
            running --complete--> completed {"effect":"update_resource"}
            error: cannot apply `resume` to an operation in state `completed`: the operation is completed
            error: cannot apply `cancel` to an operation in state `completed`: a completed operation cannot be cancelled
        "#]],
    );
}

#[test]
fn repair_paths() {
    let mut events = to_running();
    events.extend([
        Event::JobFailed { job: "init-control-plane".into(), reason: "exit 1".into() },
        Event::Diagnose,
        Event::ProposePatch { patch: "p1".into() },
        Event::PatchApplied { patch: "p2".into(), revision: "r2".into() },
        Event::PatchApplied { patch: "p1".into(), revision: "r2".into() },
        Event::JobFailed { job: "join-workers@worker-3".into(), reason: "kubelet not ready".into() },
        Event::ManuallyFixed { intervention: "i1".into() },
        Event::StillBroken { reason: "node_registered failed".into() },
        Event::ManuallyFixed { intervention: "i2".into() },
        Event::Verified,
        Event::JobFailed { job: "verify".into(), reason: "flaky".into() },
        Event::Retry { jobs: vec!["verify".into()] },
        // A rollout paused by its failure budget retries its failed hosts.
        Event::Pause { reason: "rollout of up paused in wave 2 of 3".into() },
        Event::Retry { jobs: vec!["up@b".into()] },
        Event::Complete,
    ]);
    check(
        &events,
        expect![[r#"
            draft_intent --plan_built--> plan_preview
            plan_preview --resolve--> capability_resolution {"effect":"resolve_requirements"}
            capability_resolution --start--> running {"effect":"dispatch_ready_jobs"}
            running --job_failed--> failed {"effect":"stop_dispatch"} {"effect":"mark_resource_failed","reason":"exit 1"}
            failed --diagnose--> diagnosing {"effect":"run_diagnosis"}
            diagnosing --propose_patch--> plan_patch_review
            error: cannot apply `patch_applied` to an operation in state `plan_patch_review`: a different patch is under review
            plan_patch_review --patch_applied--> running {"effect":"dispatch_ready_jobs"}
            running --job_failed--> failed {"effect":"stop_dispatch"} {"effect":"mark_resource_failed","reason":"kubelet not ready"}
            failed --manually_fixed--> verification {"effect":"run_verification","intervention":"i1"}
            verification --still_broken--> failed
            failed --manually_fixed--> verification {"effect":"run_verification","intervention":"i2"}
            verification --verified--> running {"effect":"dispatch_ready_jobs"}
            running --job_failed--> failed {"effect":"stop_dispatch"} {"effect":"mark_resource_failed","reason":"flaky"}
            failed --retry--> running {"effect":"reset_jobs","jobs":["verify"]} {"effect":"dispatch_ready_jobs"}
            running --pause--> paused {"effect":"stop_dispatch"}
            paused --retry--> running {"effect":"reset_jobs","jobs":["up@b"]} {"effect":"dispatch_ready_jobs"}
            running --complete--> completed {"effect":"update_resource"}
        "#]],
    );
}

#[test]
fn illegal_transitions_name_state_and_event() {
    check(
        &[
            Event::Start,
            Event::Approved { gate: "g".into() },
            Event::Complete,
            Event::Cancel { reason: "stop".into() },
            Event::Resume,
        ],
        expect![[r#"
            error: cannot apply `start` to an operation in state `draft_intent`
            error: cannot apply `approved` to an operation in state `draft_intent`
            error: cannot apply `complete` to an operation in state `draft_intent`
            draft_intent --cancel--> cancelled {"effect":"stop_dispatch"} {"effect":"cancel_running_jobs"}
            error: cannot apply `resume` to an operation in state `cancelled`
        "#]],
    );
}
