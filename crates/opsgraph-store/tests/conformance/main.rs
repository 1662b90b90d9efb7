//! The conformance suite: every store test, run on both backends (`conformance!`), plus the
//! SQLite tests that need several connections to one file.

use opsgraph_core::model::OperationState;
use serde_json::json;

use opsgraph_store::testing::TestDb;
use opsgraph_store::*;
use opsgraph_store_sqlite::{Durability, SqliteStore};

mod agents;
mod leases;
use agents::agent_tasks_are_claimed_once_and_fenced_by_their_lease;
use leases::{
    a_second_operation_on_a_busy_resource_is_refused, a_version_guard_refuses_a_commit_once_the_operation_moved,
    leases_are_acquired_renewed_expired_and_fenced, one_holder_wins_a_race_for_a_lease,
};

fn op(id: &str) -> OperationRecord {
    opsgraph_store::testing::operation(id, Some("tempo.instance/tempo-dev"))
}

fn entry(op: &str, event: &str) -> TimelineEntry {
    TimelineEntry {
        seq: 0,
        operation: op.into(),
        at: rfc3339(1_700_000_001, 5),
        actor: "user:alice".into(),
        event: event.into(),
        from: Some("draft_intent".into()),
        to: Some("plan_preview".into()),
        reason: "plan built".into(),
        data: json!({"jobs": 3}),
    }
}

/// The first state change of `op-1` (version 0), to `state`, with its timeline entry.
fn first_transition(state: OperationState, event: &str) -> Write {
    Write::Transition { operation: "op-1".into(), expect_version: 0, state, entry: entry("op-1", event) }
}

/// An empty directory of this process for SQLite files, named after `name`.
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("opsgraph-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn times_render_as_rfc3339() {
    assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(1_700_000_000, 42), "2023-11-14T22:13:20.042Z");
    assert_eq!(rfc3339(951_782_400, 0), "2000-02-29T00:00:00.000Z");
    assert!(now().ends_with('Z'));
    for (secs, ms) in [(0, 0), (1_700_000_000, 42), (951_782_400, 0), (4_102_444_799, 999)] {
        assert_eq!(parse_rfc3339(&rfc3339(secs, ms)), Some(secs * 1000 + ms as i64));
    }
    // Every field's digits, across the years the digit-by-digit form covers (0000–9999): read
    // back as what was written; outside them `format!`'s text.
    for k in 0..20_000_i64 {
        let (secs, ms) = (-62_167_219_200 + k * 15_778_469, (k * 37 % 1000) as u32);
        let text = rfc3339(secs, ms);
        assert_eq!((text.len(), parse_rfc3339(&text)), (24, Some(secs * 1000 + i64::from(ms))), "{text}");
    }
    assert_eq!(rfc3339(-62_167_219_201, 0), "-001-12-31T23:59:59.000Z");
    assert_eq!(rfc3339(253_402_300_800, 0), "10000-01-01T00:00:00.000Z");
    assert_eq!(parse_rfc3339("2026-12-03T20:00:00Z"), Some(1_796_328_000_000));
    for bad in ["", "2026-12-03 20:00:00Z", "2026-13-03T20:00:00.000Z", "2026-12-03T20:00:00.0Z", "yesterday"] {
        assert_eq!(parse_rfc3339(bad), None, "{bad}");
    }
}

/// A time a person gives (`audit --since`, `?since=`) is any RFC 3339 date-time of a real day,
/// put in the store's UTC form.
#[test]
fn times_people_give_are_any_rfc3339_time_in_the_stores_form() {
    let cases = [
        ("2026-01-31T12:00:00Z", Some("2026-01-31T12:00:00.000Z")),
        ("2026-01-31t12:00:00.5z", Some("2026-01-31T12:00:00.500Z")),
        ("2026-01-31T12:00:00.123456+02:00", Some("2026-01-31T10:00:00.123Z")),
        ("2026-01-01T00:30:00-01:00", Some("2026-01-01T01:30:00.000Z")),
        ("2024-02-29T23:59:59Z", Some("2024-02-29T23:59:59.000Z")),
        ("0000-00-00T00:00:00Z", None),
        ("2023-02-29T00:00:00Z", None),
        ("2026-04-31T00:00:00Z", None),
        ("2026-01-31T24:00:00Z", None),
        ("2026-01-31T12:00:00", None),
        ("2026-01-31T12:00:00.Z", None),
        ("2026-01-31T12:00:00+0200", None),
        ("2026-01-31", None),
        ("yesterday", None),
        ("", None),
    ];
    for (text, want) in cases {
        assert_eq!(opsgraph_store::normalize_time(text).as_deref(), want, "{text}");
    }
}

fn a_transition_and_its_timeline_entry_land_together_or_not_at_all(db: &TestDb) {
    let mut store = db.store();
    store
        .commit(&[Write::CreateOperation { op: op("op-1"), plan: json!({"jobs": []}).to_string().to_string() }])
        .unwrap();
    store.commit(&[first_transition(OperationState::PlanPreview, "plan_built")]).unwrap();
    let got = store.operation("op-1").unwrap().unwrap();
    assert_eq!(got.state, OperationState::PlanPreview);
    assert_eq!(got.version, 1);
    assert_eq!(store.timeline("op-1").unwrap().len(), 1);

    // A stale version: the whole batch is refused, including the writes before it.
    let err = store
        .commit(&[Write::Timeline(entry("op-1", "note")), first_transition(OperationState::Running, "start")])
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { expected: 0, .. }), "{err}");
    assert_eq!(store.timeline("op-1").unwrap().len(), 1);
    assert_eq!(store.operation("op-1").unwrap().unwrap().state, OperationState::PlanPreview);
}

/// Protocol §2: an operation carries its intent's id and the plan it was created from; a new
/// plan revision (a patch) moves `plan_revision`, not `plan_id`.
fn an_operation_keeps_its_intent_id_and_plan_id(db: &TestDb) {
    let mut store = db.store();
    let mut one = op("op-1");
    one.intent_id = Some("tempo-prod-1".into());
    store
        .commit(&[Write::CreateOperation { op: one.clone(), plan: json!({"jobs": []}).to_string().to_string() }])
        .unwrap();
    store
        .commit(&[Write::CreateOperation { op: op("op-2"), plan: json!({"jobs": []}).to_string().to_string() }])
        .unwrap();
    assert_eq!(store.operation("op-1").unwrap().unwrap(), one);
    store
        .commit(&[Write::SetPlan {
            operation: "op-1".into(),
            revision: "sha256:bb".into(),
            plan: json!({"jobs": [1]}).to_string().to_string(),
        }])
        .unwrap();
    let got = store.operation("op-1").unwrap().unwrap();
    assert_eq!(
        (got.intent_id.as_deref(), got.plan_id.as_str(), got.plan_revision.as_str()),
        (Some("tempo-prod-1"), "sha256:aa", "sha256:bb")
    );
    let listed = store.operations(&OperationFilter::default()).unwrap();
    let two = listed.iter().find(|o| o.id == "op-2").unwrap();
    assert_eq!((two.intent_id.as_deref(), two.plan_id.as_str()), (None, "sha256:aa"));
}

fn every_record_round_trips(db: &TestDb) {
    let mut store = db.store();
    let job = JobRecord {
        operation: "op-1".into(),
        id: "install@w1".into(),
        state: JobState::Running,
        attempts: 1,
        outcome: json!(null),
        updated_at: now(),
    };
    let evidence = EvidenceRecord {
        operation: "op-1".into(),
        job: "install@w1".into(),
        check: "svc_active".into(),
        source: "systemd".into(),
        command: "systemctl is-active x".into(),
        expected: "active".into(),
        observed: "inactive".into(),
        passed: false,
        at: now(),
        resource: Some("compute_node/w1".into()),
        capability: Some("x.service".into()),
    };
    let gate = GateRecord {
        operation: "op-1".into(),
        id: "approve-plan".into(),
        gate_type: GateType::Approval,
        kind: GateKind::Plan,
        reason: "high risk".into(),
        options: vec!["approve".into(), "cancel operation".into()],
        required_roles: vec!["sre".into()],
        answer: Some("approve".into()),
        answered_by: Some("user:bob".into()),
        answered_at: Some(now()),
        value: Some(json!(14)),
    };
    // A gate's type and kind are typed values: each type, and a patch's review (an approval whose
    // id says nothing: the kind names the patch).
    let mut gates = vec![gate.clone()];
    for (i, t) in
        [GateType::MissingInput, GateType::ProviderSelection, GateType::CostConfirmation].into_iter().enumerate()
    {
        gates.push(GateRecord {
            id: format!("g{i}"),
            gate_type: t,
            answer: None,
            answered_by: None,
            answered_at: None,
            value: None,
            ..gate.clone()
        });
    }
    gates.push(GateRecord {
        id: "review-of-p7".into(),
        kind: GateKind::PatchReview { patch: "p7".into() },
        answer: None,
        answered_by: None,
        answered_at: None,
        value: None,
        ..gate.clone()
    });
    gates.push(GateRecord { id: "patch-p8".into(), kind: GateKind::Plan, ..gates[1].clone() });
    let artifact = ArtifactRecord {
        operation: "op-1".into(),
        job: "install@w1".into(),
        id: "report".into(),
        sensitivity: "internal".into(),
        location: "artifacts/ab/cd".into(),
        size: 12,
        at: now(),
    };
    let resource = ResourceRecord {
        id: "tempo.instance/t".into(),
        doc: json!({"type": "tempo.instance"}),
        last_operation: Some("op-1".into()),
        updated_at: now(),
    };
    store
        .commit(&[
            Write::CreateOperation { op: op("op-1"), plan: json!({"p": 1}).to_string().to_string() },
            Write::Job(job.clone()),
            Write::Evidence(evidence.clone()),
            Write::Artifact(artifact.clone()),
            Write::Resource(resource.clone()),
            Write::Idempotency {
                key: "k:w1".into(),
                resource: Some("compute_node/w1".into()),
                operation: "op-1".into(),
                job: "install@w1".into(),
                at: now(),
            },
            Write::SetPlan {
                operation: "op-1".into(),
                revision: "sha256:bb".into(),
                plan: json!({"p": 2}).to_string().to_string(),
            },
        ])
        .unwrap();
    store.commit(&gates.iter().cloned().map(Write::Gate).collect::<Vec<_>>()).unwrap();
    assert_eq!(store.jobs("op-1").unwrap(), vec![job]);
    assert_eq!(store.evidence("op-1").unwrap(), vec![evidence]);
    assert_eq!(store.gates("op-1").unwrap(), gates);
    assert_eq!(store.artifacts("op-1").unwrap(), vec![artifact]);
    assert_eq!(store.resources().unwrap(), vec![resource.clone()]);
    assert_eq!(store.resource("tempo.instance/t").unwrap(), Some(resource));
    assert_eq!(store.idempotency("k:w1").unwrap(), Some(("op-1".into(), "install@w1".into())));
    assert_eq!(store.plan("sha256:bb").unwrap(), Some(json!({"p": 2})));
    assert_eq!(store.operation("op-1").unwrap().unwrap().plan_revision, "sha256:bb");
    let filtered = store.operations(&OperationFilter { state: Some("draft_intent".into()), resource: None }).unwrap();
    assert_eq!(filtered.len(), 1);
    assert!(store.operations(&OperationFilter { state: Some("running".into()), resource: None }).unwrap().is_empty());
    // A resource row is deleted; deleting one that is not there changes nothing.
    store.commit(&[Write::DeleteResource("tempo.instance/t".into())]).unwrap();
    assert_eq!(store.resource("tempo.instance/t").unwrap(), None);
    store.commit(&[Write::DeleteResource("tempo.instance/t".into())]).unwrap();
}

/// A resource's history keeps every entry in commit order; a read asks for the last few.
fn resource_history_keeps_its_order_and_reads_the_last_entries(db: &TestDb) {
    let mut store = db.store();
    let event = |resource: &str, n: i64| ResourceEventRecord {
        seq: 0,
        resource: resource.into(),
        at: format!("2026-12-03T20:00:{n:02}Z"),
        actor: "serve:r1".into(),
        kind: if n == 0 { "operation.completed".into() } else { "verified".into() },
        status: if n % 2 == 0 { "running".into() } else { "degraded".into() },
        operation: (n == 0).then(|| "op-1".into()),
        summary: format!("check {n}"),
        detail: json!({"checks": [{"check": "etcd_unit_active", "passed": n % 2 == 0}]}),
    };
    for n in 0..5 {
        store
            .commit(&[
                Write::ResourceEvent(event("etcd.cluster/a", n)),
                Write::ResourceEvent(event("etcd.cluster/b", n)),
            ])
            .unwrap();
    }
    let last = store.resource_events("etcd.cluster/a", 3).unwrap();
    assert_eq!(last.iter().map(|e| e.summary.as_str()).collect::<Vec<_>>(), ["check 2", "check 3", "check 4"]);
    assert!(last.windows(2).all(|w| w[0].seq < w[1].seq), "seqs grow: {last:?}");
    let all = store.resource_events("etcd.cluster/a", 100).unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(all[0], ResourceEventRecord { seq: all[0].seq, ..event("etcd.cluster/a", 0) });
    assert!(store.resource_events("etcd.cluster/none", 10).unwrap().is_empty());
}

/// The driver skips re-reading an operation while the data version stands still: it must move
/// when another connection commits, and only then.
#[test]
fn data_version_moves_on_other_connections_commits_only() {
    let dir = scratch_dir("store-dv");
    let path = dir.join("opsgraph.db");
    let mut mine = SqliteStore::open(&path, Durability::Full).unwrap();
    let mut other = SqliteStore::open(&path, Durability::Full).unwrap();
    let before = mine.data_version().unwrap().expect("sqlite knows its data version");
    mine.commit(&[Write::CreateOperation { op: op("op-1"), plan: json!({}).to_string().to_string() }]).unwrap();
    assert_eq!(mine.data_version().unwrap(), Some(before), "its own commit");
    other.commit(&[first_transition(OperationState::PlanPreview, "plan_built")]).unwrap();
    assert_ne!(mine.data_version().unwrap(), Some(before), "another connection's commit");
    let _ = std::fs::remove_dir_all(&dir);
}

fn timeline_after_pages_one_operation_or_all_and_stats_count(db: &TestDb) {
    let mut store = db.store();
    let mut running = op("op-2");
    running.state = OperationState::Running;
    store
        .commit(&[
            Write::CreateOperation { op: op("op-1"), plan: json!({}).to_string().to_string() },
            Write::CreateOperation { op: running, plan: json!({}).to_string().to_string() },
            Write::Timeline(entry("op-1", "a")),
            Write::Timeline(entry("op-2", "b")),
            Write::Timeline(entry("op-1", "c")),
        ])
        .unwrap();
    let events = |op: Option<&str>, after: i64, limit: usize| -> Vec<String> {
        store.timeline_after(op, after, limit).unwrap().iter().map(|e| format!("{}:{}", e.seq, e.event)).collect()
    };
    assert_eq!(events(None, 0, 10), ["1:a", "2:b", "3:c"]);
    assert_eq!(events(None, 1, 1), ["2:b"]);
    assert_eq!(events(Some("op-1"), 1, 10), ["3:c"]);
    assert!(events(Some("op-1"), 3, 10).is_empty());

    let job = |id: &str, state: JobState, ms: Option<u64>| {
        Write::Job(JobRecord {
            operation: "op-2".into(),
            id: id.into(),
            state,
            attempts: 1,
            outcome: ms.map_or(json!(null), |ms| json!({"duration_ms": ms})),
            updated_at: rfc3339(1_700_000_002, 0),
        })
    };
    store
        .commit(&[
            job("a", JobState::Succeeded, Some(40)),
            job("b", JobState::Failed, Some(2_000)),
            job("c", JobState::Pending, None),
            job("d", JobState::Pending, None),
        ])
        .unwrap();
    let stats = store.stats().unwrap();
    assert_eq!(stats.operations.get("running"), Some(&1));
    assert_eq!(stats.operations.get("draft_intent"), Some(&1));
    assert_eq!(stats.jobs.get("pending"), Some(&2));
    assert_eq!(stats.queue_depth, 2);
    assert_eq!((stats.duration_count, stats.duration_sum_ms), (2, 2_040.0));
    // Cumulative: 40 ms is under every bound from 50 ms, 2 s from 5 s.
    let at = |bound: f64| stats.duration_buckets.iter().find(|(b, _)| *b == bound).unwrap().1;
    assert_eq!((at(10.0), at(50.0), at(1_000.0), at(5_000.0)), (0, 1, 1, 2));
}

fn gate(answer: Option<&str>) -> GateRecord {
    GateRecord {
        operation: "op-1".into(),
        id: "approve".into(),
        gate_type: GateType::Approval,
        kind: GateKind::Plan,
        reason: "risky".into(),
        options: vec!["approve".into()],
        required_roles: vec!["sre".into()],
        answer: answer.map(str::to_string),
        answered_by: answer.map(|_| "user:bob".to_string()),
        answered_at: answer.map(|_| now()),
        value: None,
    }
}

fn a_gate_answers_once_inside_the_transaction(db: &TestDb) {
    let mut store = db.store();
    store
        .commit(&[
            Write::CreateOperation { op: op("op-1"), plan: json!({}).to_string().to_string() },
            Write::Gate(gate(None)),
        ])
        .unwrap();
    store.commit(&[Write::Gate(gate(Some("approve")))]).unwrap();
    let audit = AuditRecord {
        seq: 0,
        at: now(),
        actor: "token:t2".into(),
        action: "gate.answer".into(),
        target: "op-1/approve".into(),
        operation: Some("op-1".into()),
        resource: None,
        detail: json!({}),
    };
    // An answer for another plan revision is refused with everything in its transaction.
    let guard = Write::ExpectPlan { operation: "op-1".into(), revision: "sha256:old".into() };
    let err = store.commit(&[Write::Audit(audit.clone()), guard]).unwrap_err();
    assert_eq!(err.to_string(), "operation `op-1` runs plan revision sha256:aa, not sha256:old");
    store.commit(&[Write::ExpectPlan { operation: "op-1".into(), revision: "sha256:aa".into() }]).unwrap();
    // The second answer is refused, and its audit row with it.
    let err = store.commit(&[Write::Audit(audit), Write::Gate(gate(Some("approve")))]).unwrap_err();
    assert_eq!(err.to_string(), "gate `approve` of operation `op-1` is already answered");
    assert!(store.audit(&AuditFilter::default()).unwrap().is_empty());
}

fn tokens_audit_rows_and_request_keys_round_trip(db: &TestDb) {
    let mut store = db.store();
    let token = TokenRecord {
        id: "tok-1".into(),
        name: "ci".into(),
        hash: "sha256:00ff".into(),
        roles: vec!["operator".into()],
        created_by: "bootstrap".into(),
        created_at: rfc3339(1_700_000_000, 0),
        revoked_at: None,
    };
    let audit = |actor: &str, operation: Option<&str>, at: i64| AuditRecord {
        seq: 0,
        at: rfc3339(at, 0),
        actor: actor.into(),
        action: "token.create".into(),
        target: "tok-1".into(),
        operation: operation.map(str::to_string),
        resource: None,
        detail: json!({"roles": ["operator"]}),
    };
    store.commit(&[Write::Token(token.clone()), Write::Audit(audit("bootstrap", None, 1_700_000_000))]).unwrap();
    store.commit(&[Write::Audit(audit("token:tok-1", Some("op-1"), 1_700_000_100))]).unwrap();
    assert_eq!(store.token_by_hash("sha256:00ff").unwrap(), Some(token.clone()));
    assert_eq!(store.token_by_hash("sha256:00fe").unwrap(), None);
    let revoked = TokenRecord { revoked_at: Some(now()), name: "ignored".into(), ..token.clone() };
    store.commit(&[Write::Token(revoked.clone())]).unwrap();
    // Revoking sets only `revoked_at`.
    assert_eq!(store.tokens().unwrap(), vec![TokenRecord { name: "ci".into(), ..revoked }]);

    let all = store.audit(&AuditFilter::default()).unwrap();
    assert_eq!(all.iter().map(|a| a.seq).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(all[0].detail, json!({"roles": ["operator"]}));
    let by = |f: AuditFilter| store.audit(&f).unwrap().len();
    assert_eq!(by(AuditFilter { actor: Some("bootstrap".into()), ..Default::default() }), 1);
    assert_eq!(by(AuditFilter { operation: Some("op-1".into()), ..Default::default() }), 1);
    assert_eq!(by(AuditFilter { since: Some(rfc3339(1_700_000_050, 0)), ..Default::default() }), 1);

    let request = RequestRecord {
        actor: "token:tok-1".into(),
        key: "k1".into(),
        fingerprint: "sha256:ab".into(),
        status: 201,
        response: json!({"id": "op-1"}),
        at: now(),
    };
    store.commit(&[Write::Request(request.clone())]).unwrap();
    assert_eq!(store.request("token:tok-1", "k1").unwrap(), Some(request.clone()));
    assert_eq!(store.request("token:other", "k1").unwrap(), None);
    let err = store.commit(&[Write::Request(request)]).unwrap_err();
    assert_eq!(err.to_string(), "idempotency key `k1` of token:tok-1 is already recorded");
}

/// Writers on their own connections append timeline entries while a reader pages with
/// `timeline_after`, as a live stream does: the reader must see every entry, in seq order, none
/// skipped because it committed after a later seq was read.
fn timeline_seqs_follow_commit_order_across_writers(db: &TestDb) {
    const WRITERS: usize = 4;
    const EACH: usize = 40;
    let done = std::sync::atomic::AtomicBool::new(false);
    drop(db.store()); // migrated once, before the writers connect
    let seen = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let store = db.store();
            let mut seen: Vec<i64> = Vec::new();
            loop {
                let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                let after = seen.last().copied().unwrap_or(0);
                let page = store.timeline_after(None, after, 1000).unwrap();
                seen.extend(page.iter().map(|e| e.seq));
                if finished && page.is_empty() {
                    return seen;
                }
            }
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                s.spawn(move || {
                    let mut store = db.store();
                    for i in 0..EACH {
                        let e = entry(&format!("op-{w}"), &format!("e{i}"));
                        store.commit(&[Write::Timeline(e.clone()), Write::Timeline(e)]).unwrap();
                    }
                })
            })
            .collect();
        let results: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(results.iter().all(Result::is_ok), "a writer failed");
        reader.join().unwrap()
    });
    let all = db.store().timeline_after(None, 0, 10_000).unwrap();
    assert_eq!(all.len(), WRITERS * EACH * 2);
    assert_eq!(seen, all.iter().map(|e| e.seq).collect::<Vec<_>>(), "the reader missed or reordered entries");
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
}

/// Jobs list in the order they were first written; a job written twice in one batch keeps the
/// last record, as two upserts in a row would.
fn jobs_keep_their_order_and_the_last_write_of_a_batch_wins(db: &TestDb) {
    let mut store = db.store();
    let job = |id: &str, state: JobState, attempts: u32| {
        Write::Job(JobRecord {
            operation: "op-1".into(),
            id: id.into(),
            state,
            attempts,
            outcome: json!({"attempt": attempts}),
            updated_at: now(),
        })
    };
    let ids = ["z", "a", "m", "b"];
    let mut writes = vec![Write::CreateOperation { op: op("op-1"), plan: json!({}).to_string().to_string() }];
    writes.extend(ids.iter().map(|id| job(id, JobState::Pending, 0)));
    store.commit(&writes).unwrap();
    store
        .commit(&[job("m", JobState::Pending, 1), job("a", JobState::Running, 1), job("m", JobState::Running, 2)])
        .unwrap();
    let got: Vec<(String, JobState, u32)> =
        store.jobs("op-1").unwrap().into_iter().map(|j| (j.id, j.state, j.attempts)).collect();
    assert_eq!(
        got,
        [
            ("z".into(), JobState::Pending, 0),
            ("a".into(), JobState::Running, 1),
            ("m".into(), JobState::Running, 2),
            ("b".into(), JobState::Pending, 0)
        ]
    );
}

/// The event hubs wait for timeline entries instead of polling: a wait must run to its timeout
/// while nothing is committed, and end soon after another connection commits an entry.
fn a_timeline_commit_wakes_a_reader_waiting_for_one(db: &TestDb) {
    use std::time::{Duration, Instant};
    let mut reader = db.store();
    let mut writer = db.store();
    writer.commit(&[Write::CreateOperation { op: op("op-1"), plan: json!({}).to_string() }]).unwrap();
    assert!(reader.wait_for_timeline(Duration::ZERO).unwrap(), "the first wait starts listening and says so");
    let quiet = Instant::now();
    assert!(!reader.wait_for_timeline(Duration::from_millis(300)).unwrap(), "nothing was committed");
    assert!(quiet.elapsed() >= Duration::from_millis(300), "{:?}", quiet.elapsed());
    std::thread::scope(|s| {
        let write = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            writer.commit(&[Write::Timeline(entry("op-1", "note"))]).unwrap();
            Instant::now()
        });
        assert!(reader.wait_for_timeline(Duration::from_secs(20)).unwrap(), "an entry was committed");
        let woke = Instant::now();
        let written = write.join().unwrap();
        assert!(woke.saturating_duration_since(written) < Duration::from_secs(2), "woke {:?} late", woke - written);
    });
    assert_eq!(reader.timeline_after(Some("op-1"), 0, 10).unwrap().len(), 1);
}

opsgraph_store::conformance!(
    sqlite: opsgraph_store_sqlite::test_db,
    postgres: opsgraph_store_pg::test_db;
    a_transition_and_its_timeline_entry_land_together_or_not_at_all,
    every_record_round_trips,
    an_operation_keeps_its_intent_id_and_plan_id,
    timeline_after_pages_one_operation_or_all_and_stats_count,
    a_gate_answers_once_inside_the_transaction,
    tokens_audit_rows_and_request_keys_round_trip,
    leases_are_acquired_renewed_expired_and_fenced,
    a_version_guard_refuses_a_commit_once_the_operation_moved,
    one_holder_wins_a_race_for_a_lease,
    a_second_operation_on_a_busy_resource_is_refused,
    timeline_seqs_follow_commit_order_across_writers,
    jobs_keep_their_order_and_the_last_write_of_a_batch_wins,
    agent_tasks_are_claimed_once_and_fenced_by_their_lease,
    resource_history_keeps_its_order_and_reads_the_last_entries,
    a_timeline_commit_wakes_a_reader_waiting_for_one,
);

/// Writers of one file in one process are grouped into shared transactions (one fsync for
/// several commits): each commit still gets its own answer, and a refused one (here a request
/// key recorded before) changes nothing, its audit row included, while the others land.
#[test]
fn grouped_commits_keep_each_ones_answer_and_roll_back_only_the_refused() {
    let dir = scratch_dir("group-commit");
    let path = dir.join("store.db");
    drop(SqliteStore::open(&path, Durability::Full).unwrap());
    let request = |key: String| RequestRecord {
        actor: "user:a".into(),
        key,
        fingerprint: "sha256:x".into(),
        status: 200,
        response: json!({}),
        at: rfc3339(1_700_000_000, 0),
    };
    let audit = |target: String| AuditRecord {
        seq: 0,
        at: rfc3339(1_700_000_000, 0),
        actor: "user:a".into(),
        action: "test.write".into(),
        target,
        operation: None,
        resource: None,
        detail: json!({}),
    };
    let threads: Vec<_> = (0..8)
        .map(|n| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut store = SqliteStore::open(&path, Durability::Full).unwrap();
                let mut answers = Vec::new();
                for i in 0..40 {
                    // Every fifth commit repeats the key of the one before it: refused.
                    let key = if i % 5 == 4 { format!("k{n}-{}", i - 1) } else { format!("k{n}-{i}") };
                    let r = store.commit(&[Write::Audit(audit(format!("t{n}-{i}"))), Write::Request(request(key))]);
                    answers.push((format!("t{n}-{i}"), r.map_err(|e| matches!(e, Error::RequestRecorded { .. }))));
                }
                answers
            })
        })
        .collect();
    let answers: Vec<(String, Result<(), bool>)> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let refused: Vec<&String> = answers.iter().filter(|(_, r)| r.is_err()).map(|(t, _)| t).collect();
    assert_eq!(refused.len(), 8 * 8);
    assert!(answers.iter().all(|(t, r)| r.is_ok() || (r == &Err(true) && t.ends_with(['4', '9']))), "{answers:?}");
    let store = SqliteStore::open(&path, Durability::Full).unwrap();
    let mut landed: Vec<String> = store.audit(&AuditFilter::default()).unwrap().into_iter().map(|a| a.target).collect();
    let mut passed: Vec<String> = answers.iter().filter(|(_, r)| r.is_ok()).map(|(t, _)| t.clone()).collect();
    landed.sort();
    passed.sort();
    assert_eq!(landed, passed);
    let _ = std::fs::remove_dir_all(&dir);
}
