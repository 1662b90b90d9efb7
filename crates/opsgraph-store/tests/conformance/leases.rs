//! The lease part of the conformance suite (run on both backends): leases acquired, renewed,
//! expired and fenced; two holders racing for one; a version guard refusing a commit once the
//! operation moved; a second operation on a busy resource refused.

use opsgraph_core::model::OperationState;
use opsgraph_store::testing::TestDb;
use opsgraph_store::*;
use serde_json::json;

use crate::{entry, first_transition, op};

fn running(id: &str) -> OperationRecord {
    OperationRecord { state: OperationState::Running, ..op(id) }
}

fn fence(holder: &str, token: i64) -> Write {
    Write::Fence { operation: "op-1".into(), holder: holder.into(), token }
}

pub(crate) fn leases_are_acquired_renewed_expired_and_fenced(db: &TestDb) {
    let mut store = db.store();
    store.commit(&[Write::CreateOperation { op: running("op-1"), plan: json!({}).to_string().to_string() }]).unwrap();
    assert_eq!(store.adoptable().unwrap(), ["op-1"], "running and never leased");
    assert_eq!(store.lease("op-1").unwrap(), None);

    let a = store.acquire_lease("op-1", "replica-a", 60_000).unwrap();
    assert_eq!((a.holder.as_str(), a.token), ("replica-a", 1));
    assert!(a.expires_in_ms > 50_000, "{a:?}");
    assert!(store.adoptable().unwrap().is_empty());
    // Another holder waits for the expiry; the holder itself renews and keeps its token.
    let err = store.acquire_lease("op-1", "replica-b", 60_000).unwrap_err();
    assert!(matches!(&err, Error::LeaseHeld { holder, token: 1, .. } if holder == "replica-a"), "{err}");
    assert_eq!(store.acquire_lease("op-1", "replica-a", 60_000).unwrap().token, 1);
    assert_eq!(store.renew_lease(&a, 60_000).unwrap().token, 1);

    // Writes fenced with the current token land; with any other, the whole batch is refused.
    store.commit(&[fence("replica-a", 1), Write::Timeline(entry("op-1", "a"))]).unwrap();
    let err = store.commit(&[Write::Timeline(entry("op-1", "b")), fence("replica-b", 1)]).unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err}");
    assert_eq!(store.timeline("op-1").unwrap().len(), 1);

    // It expires: another holder takes it over with a greater token and the old one is fenced.
    store.acquire_lease("op-1", "replica-a", 1).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    assert_eq!(store.adoptable().unwrap(), ["op-1"], "its lease expired");
    assert!(!store.lease("op-1").unwrap().unwrap().released, "expired, not released");
    let b = store.acquire_lease("op-1", "replica-b", 60_000).unwrap();
    assert_eq!(b.token, 2);
    let err = store.commit(&[fence("replica-a", 1), Write::Timeline(entry("op-1", "stale"))]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "operation `op-1`: lease token 1 of replica-a is stale (the lease is now replica-b's with token 2); the write is refused"
    );
    assert!(matches!(store.renew_lease(&a, 60_000).unwrap_err(), Error::Fenced { .. }));
    store.release_lease(&a).unwrap();
    assert_eq!(store.lease("op-1").unwrap().unwrap().holder, "replica-b", "a stale release changes nothing");
    store.commit(&[fence("replica-b", 2), Write::Timeline(entry("op-1", "c"))]).unwrap();
    assert_eq!(store.timeline("op-1").unwrap().iter().map(|e| e.event.as_str()).collect::<Vec<_>>(), ["a", "c"]);

    assert!(!store.lease("op-1").unwrap().unwrap().released, "taken, not let go");
    // Released: adoptable at once, and the next acquisition's token is greater still.
    store.release_lease(&b).unwrap();
    assert!(store.lease("op-1").unwrap().unwrap().released);
    assert_eq!(store.adoptable().unwrap(), ["op-1"]);
    assert_eq!(store.acquire_lease("op-1", "replica-a", 60_000).unwrap().token, 3);
    // A fence on an operation never leased is refused too.
    let err = store.commit(&[Write::Fence { operation: "op-9".into(), holder: "x".into(), token: 1 }]).unwrap_err();
    assert!(err.to_string().contains("never leased"), "{err}");
}

/// `Write::ExpectVersion`: a commit made under a copy of the operation row lands while nobody moved
/// the operation, and is refused with everything in it once another writer did (a driven
/// operation's commit on PostgreSQL, one statement, and any other commit alike).
pub(crate) fn a_version_guard_refuses_a_commit_once_the_operation_moved(db: &TestDb) {
    let mut store = db.store();
    store.commit(&[Write::CreateOperation { op: running("op-1"), plan: json!({}).to_string() }]).unwrap();
    store.acquire_lease("op-1", "replica-a", 60_000).unwrap();
    let job = |state: JobState| {
        Write::Job(JobRecord {
            operation: "op-1".into(),
            id: "j".into(),
            state,
            attempts: 1,
            outcome: json!({}),
            updated_at: now(),
        })
    };
    let guard = |version: i64| Write::ExpectVersion { operation: "op-1".into(), version };
    let driven = |state: JobState, version: i64, event: &str| {
        vec![fence("replica-a", 1), job(state), Write::Timeline(entry("op-1", event)), guard(version)]
    };
    store.commit(&driven(JobState::Running, 0, "started")).unwrap();

    // Another writer (a person's pause on another connection) moves the operation.
    let paused = OperationState::Paused { reason: "a person paused it".into() };
    db.store().commit(&[first_transition(paused, "paused")]).unwrap();

    let err = store.commit(&driven(JobState::Succeeded, 0, "refused")).unwrap_err();
    assert!(matches!(&err, Error::Conflict { id, expected: 0 } if id == "op-1"), "{err}");
    let err = store.commit(&[Write::Audit(audit_row()), guard(0)]).unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    let err = store
        .commit(&[Write::ExpectVersion { operation: "op-9".into(), version: 0 }, Write::Audit(audit_row())])
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "an operation that does not exist: {err}");
    assert_eq!(store.jobs("op-1").unwrap()[0].state, JobState::Running, "nothing of a refused commit");
    let events: Vec<String> = store.timeline("op-1").unwrap().into_iter().map(|e| e.event).collect();
    assert_eq!(events, ["started", "paused"]);
    assert!(store.audit(&AuditFilter::default()).unwrap().is_empty());

    // Under the version read again, it lands; with a transition of the same commit too.
    store.commit(&driven(JobState::Succeeded, 1, "finished")).unwrap();
    let mut writes = driven(JobState::Succeeded, 1, "resumed");
    writes.push(Write::Transition {
        operation: "op-1".into(),
        expect_version: 1,
        state: OperationState::Running,
        entry: entry("op-1", "running"),
    });
    store.commit(&writes).unwrap();
    assert_eq!(store.operation("op-1").unwrap().unwrap().version, 2);
    assert_eq!(store.jobs("op-1").unwrap()[0].state, JobState::Succeeded);
}

fn audit_row() -> AuditRecord {
    AuditRecord {
        seq: 0,
        at: now(),
        actor: "user:a".into(),
        action: "test.write".into(),
        target: "op-1".into(),
        operation: Some("op-1".into()),
        resource: None,
        detail: json!({}),
    }
}

/// Two holders race for one expired lease: exactly one wins each round.
pub(crate) fn one_holder_wins_a_race_for_a_lease(db: &TestDb) {
    db.store()
        .commit(&[Write::CreateOperation { op: running("op-1"), plan: json!({}).to_string().to_string() }])
        .unwrap();
    for round in 0..5 {
        let wins: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|i| {
                    s.spawn(move || {
                        let mut store = db.store();
                        store.acquire_lease("op-1", &format!("r{round}-{i}"), 60_000).is_ok()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(wins.iter().filter(|w| **w).count(), 1, "round {round}: {wins:?}");
        let mut store = db.store();
        let l = store.lease("op-1").unwrap().unwrap();
        assert_eq!(l.token, round + 1);
        store.release_lease(&l).unwrap();
    }
}

pub(crate) fn a_second_operation_on_a_busy_resource_is_refused(db: &TestDb) {
    let mut store = db.store();
    let idle = |id: &str| Write::ExpectIdle { resource: "tempo.instance/tempo-dev".into(), operation: id.into() };
    store
        .commit(&[
            idle("op-1"),
            Write::CreateOperation { op: running("op-1"), plan: json!({}).to_string().to_string() },
        ])
        .unwrap();
    let err = store
        .commit(&[idle("op-2"), Write::CreateOperation { op: op("op-2"), plan: json!({}).to_string().to_string() }])
        .unwrap_err();
    assert_eq!(err.to_string(), "resource `tempo.instance/tempo-dev` is being changed by operation `op-1` (running)");
    assert!(store.operation("op-2").unwrap().is_none());
    // The operation itself does not count, and a finished one frees the resource.
    store.commit(&[idle("op-1")]).unwrap();
    store.commit(&[first_transition(OperationState::Completed, "completed")]).unwrap();
    store
        .commit(&[idle("op-2"), Write::CreateOperation { op: op("op-2"), plan: json!({}).to_string().to_string() }])
        .unwrap();
}
