//! The agent-task part of the conformance suite: claims, leases and reports of agent tasks,
//! written against the `Store` trait (run on both backends), and agents racing on one SQLite file.

use opsgraph_store::testing::TestDb;
use opsgraph_store::*;
use opsgraph_store_sqlite::{Durability, SqliteStore};
use serde_json::json;

use crate::{entry, op, scratch_dir};

fn agent_task(id: &str, resource: &str, expires_ms: i64) -> AgentTask {
    AgentTask {
        id: id.into(),
        operation: "op-1".into(),
        job: format!("j@{id}"),
        attempt: 1,
        kind: "run".into(),
        agent: "pool".into(),
        resource: resource.into(),
        state: AgentTaskState::Queued,
        payload: json!({"sealed": "x"}),
        lease: None,
        claimed_by: None,
        claims: 0,
        expires_ms,
        report: None,
        created_at: rfc3339(1_700_000_000, 0),
        updated_at: rfc3339(1_700_000_000, 0),
    }
}

fn claim_of(agent: &str, resources: &[&str], lease: &str, expires_ms: i64) -> AgentClaim {
    AgentClaim {
        agent: agent.into(),
        resources: resources.iter().map(|r| r.to_string()).collect(),
        lease: lease.into(),
        actor: format!("user:{agent}"),
        max: 1,
        expires_ms,
        at: rfc3339(1_700_000_002, 0),
        audit: AuditRecord {
            seq: 0,
            at: rfc3339(1_700_000_002, 0),
            actor: format!("user:{agent}"),
            action: "agent.claim".into(),
            target: String::new(),
            operation: None,
            resource: None,
            detail: json!({}),
        },
        entry: TimelineEntry { event: "agent_claimed".into(), reason: "claimed {task}".into(), ..entry("", "x") },
    }
}

/// The ids of the tasks a claim got.
fn claim_ids(store: &mut dyn Store, claim: AgentClaim) -> Vec<String> {
    store.agent_claim(&claim).unwrap().into_iter().map(|t| t.id).collect()
}

/// The agent-task conformance suite, written against the trait: a PostgreSQL store runs it too.
fn agent_tasks_conform(store: &mut dyn Store) {
    store
        .commit(&[Write::CreateOperation { op: op("op-1"), plan: json!({"jobs": []}).to_string().to_string() }])
        .unwrap();
    store
        .commit(&[
            Write::Agent(AgentWrite::Enqueue(Box::new(agent_task("t1", "compute_node/a", 5_000)))),
            Write::Agent(AgentWrite::Enqueue(Box::new(agent_task("t2", "compute_node/b", 5_000)))),
        ])
        .unwrap();
    // Only a claimer of the task's agent name, and of its resource when it names resources.
    assert_eq!(claim_ids(store, claim_of("other", &[], "l0", 9_000)), Vec::<String>::new());
    let got = store.agent_claim(&claim_of("pool", &["compute_node/b"], "l1", 9_000)).unwrap().remove(0);
    assert_eq!(
        (got.id.as_str(), got.state, got.lease.as_deref(), got.claims),
        ("t2", AgentTaskState::Claimed, Some("l1"), 1)
    );
    assert_eq!(got.expires_ms, 9_000);
    assert_eq!(claim_ids(store, claim_of("pool", &[], "l2", 9_000)), ["t1"]);
    // Nothing is claimed twice; a claim retried with its lease gets what it holds, once.
    assert_eq!(claim_ids(store, claim_of("pool", &[], "l3", 9_000)), Vec::<String>::new());
    assert_eq!(claim_ids(store, claim_of("pool", &[], "l2", 9_000)), ["t1"]);
    assert_eq!(claim_ids(store, claim_of("other", &[], "l2", 9_000)), Vec::<String>::new());
    // Each claim landed with its audit row and timeline entry.
    let audit = store.audit(&AuditFilter::default()).unwrap();
    assert_eq!(audit.iter().map(|a| a.target.as_str()).collect::<Vec<_>>(), ["t2", "t1"]);
    assert_eq!(audit[0].resource.as_deref(), Some("compute_node/b"));
    let timeline = store.timeline("op-1").unwrap();
    assert_eq!(timeline.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(), ["claimed t2", "claimed t1"]);

    // Lease-fenced writes: the holder's pass, anyone else's are refused and change nothing.
    let beat = |lease: &str, expires_ms| {
        Write::Agent(AgentWrite::Heartbeat { task: "t1".into(), lease: lease.into(), expires_ms, at: now() })
    };
    let err = store.commit(&[beat("l1", 20_000)]).unwrap_err();
    assert!(matches!(&err, Error::StaleLease { task, state } if task == "t1" && state == "claimed"), "{err}");
    store.commit(&[beat("l2", 20_000)]).unwrap();
    assert_eq!(store.agent_task("t1").unwrap().unwrap().expires_ms, 20_000);
    let log = |lease: &str, text: &str| {
        Write::Agent(AgentWrite::Log { task: "t1".into(), lease: lease.into(), text: text.into(), at: now() })
    };
    store.commit(&[log("l2", "one\n")]).unwrap();
    store.commit(&[log("l2", "two\n")]).unwrap();
    assert!(matches!(store.commit(&[log("bad", "three\n")]), Err(Error::StaleLease { .. })));
    let lines = store.agent_log("t1", 0).unwrap();
    assert_eq!(lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(), ["one\n", "two\n"]);
    assert_eq!(store.agent_log("t1", lines[0].seq).unwrap().len(), 1);
    let report = |task: &str, lease: &str| {
        Write::Agent(AgentWrite::Report {
            task: task.into(),
            lease: lease.into(),
            report: json!({"ok": true}),
            at: now(),
        })
    };
    store.commit(&[report("t1", "l2")]).unwrap();
    let t1 = store.agent_task("t1").unwrap().unwrap();
    assert_eq!((t1.state, t1.report), (AgentTaskState::Reported, Some(json!({"ok": true}))));
    // The same task reported again under its lease (an agent's report sent again, to another
    // replica): done already, the first report stands. Under another lease: refused.
    let again = Write::Agent(AgentWrite::Report {
        task: "t1".into(),
        lease: "l2".into(),
        report: json!({"ok": false}),
        at: now(),
    });
    store.commit(&[again]).unwrap();
    let t1 = store.agent_task("t1").unwrap().unwrap();
    assert_eq!((t1.state, t1.report), (AgentTaskState::Reported, Some(json!({"ok": true}))));
    assert!(matches!(store.commit(&[report("t1", "l1")]), Err(Error::StaleLease { state, .. }) if state == "reported"));

    // Giving a task up needs its deadline passed; then its holder is fenced off.
    let settle = |task: &str, from, to, now_ms| {
        Write::Agent(AgentWrite::Settle { task: task.into(), from, to, now_ms, at: now() })
    };
    let (claimed, lost) = (AgentTaskState::Claimed, AgentTaskState::Lost);
    assert!(matches!(store.commit(&[settle("t2", claimed, lost, 8_999)]), Err(Error::AgentTaskMoved { .. })));
    store.commit(&[settle("t2", claimed, lost, 9_001)]).unwrap();
    assert!(matches!(store.commit(&[report("t2", "l1")]), Err(Error::StaleLease { state, .. }) if state == "lost"));
    // Queued past its deadline: unclaimed; a cancel needs no deadline.
    store.commit(&[Write::Agent(AgentWrite::Enqueue(Box::new(agent_task("t3", "compute_node/a", 5_000))))]).unwrap();
    store.commit(&[Write::Agent(AgentWrite::Enqueue(Box::new(agent_task("t4", "compute_node/a", 5_000))))]).unwrap();
    let (queued, unclaimed) = (AgentTaskState::Queued, AgentTaskState::Unclaimed);
    assert!(matches!(store.commit(&[settle("t3", queued, unclaimed, 4_000)]), Err(Error::AgentTaskMoved { .. })));
    store.commit(&[settle("t3", queued, unclaimed, 6_000)]).unwrap();
    store.commit(&[settle("t4", queued, AgentTaskState::Cancelled, 0)]).unwrap();
    assert_eq!(claim_ids(store, claim_of("pool", &[], "l5", 9_000)), Vec::<String>::new());
    let states: Vec<(String, AgentTaskState)> =
        store.agent_tasks("op-1").unwrap().into_iter().map(|t| (t.id, t.state)).collect();
    assert_eq!(
        states,
        [
            ("t1".to_string(), AgentTaskState::Reported),
            ("t2".to_string(), AgentTaskState::Lost),
            ("t3".to_string(), AgentTaskState::Unclaimed),
            ("t4".to_string(), AgentTaskState::Cancelled)
        ]
    );

    // A batch: the oldest queued tasks, at most `max`, under one lease, each with its audit row
    // and timeline entry; retried with that lease it gets the same batch and claims no more.
    let more: Vec<Write> = (5..9)
        .map(|i| Write::Agent(AgentWrite::Enqueue(Box::new(agent_task(&format!("t{i}"), "compute_node/a", 5_000)))))
        .collect();
    store.commit(&more).unwrap();
    let batch = |lease: &str, max| AgentClaim { max, ..claim_of("pool", &[], lease, 9_000) };
    let audited = |store: &dyn Store| store.audit(&AuditFilter::default()).unwrap().len();
    let before = (audited(store), store.timeline("op-1").unwrap().len());
    assert_eq!(claim_ids(store, batch("l6", 3)), ["t5", "t6", "t7"]);
    assert_eq!((audited(store), store.timeline("op-1").unwrap().len()), (before.0 + 3, before.1 + 3));
    assert_eq!(claim_ids(store, batch("l6", 3)), ["t5", "t6", "t7"]);
    assert_eq!(claim_ids(store, batch("l7", 3)), ["t8"]);
    assert_eq!(audited(store), before.0 + 4);
    // Each task of a batch is fenced on its own: reporting one leaves the others claimed.
    store
        .commit(&[Write::Agent(AgentWrite::Report {
            task: "t6".into(),
            lease: "l6".into(),
            report: json!({}),
            at: now(),
        })])
        .unwrap();
    assert_eq!(store.agent_task("t5").unwrap().unwrap().state, AgentTaskState::Claimed);
    assert_eq!(claim_ids(store, batch("l6", 3)), ["t5", "t7"]);

    // A report that claims the agent's next task: refused (a stale lease), it claims nothing;
    // accepted, the report lands and the task is claimed with its audit row and timeline entry.
    store.commit(&[Write::Agent(AgentWrite::Enqueue(Box::new(agent_task("t9", "compute_node/a", 5_000))))]).unwrap();
    let reported = |task: &str, lease: &str| {
        Write::Agent(AgentWrite::Report { task: task.into(), lease: lease.into(), report: json!({}), at: now() })
    };
    let next = |lease: &str| claim_of("pool", &[], lease, 9_000);
    let err = store.agent_commit_claim(&[reported("t5", "not-l6")], &next("l8")).unwrap_err();
    assert!(matches!(&err, Error::StaleLease { task, .. } if task == "t5"), "{err}");
    assert_eq!(store.agent_task("t9").unwrap().unwrap().state, AgentTaskState::Queued);
    let before = (audited(store), store.timeline("op-1").unwrap().len());
    let got = store.agent_commit_claim(&[reported("t5", "l6")], &next("l8")).unwrap();
    assert_eq!(got.iter().map(|t| (t.id.as_str(), t.lease.as_deref())).collect::<Vec<_>>(), [("t9", Some("l8"))]);
    assert_eq!(store.agent_task("t5").unwrap().unwrap().state, AgentTaskState::Reported);
    assert_eq!((audited(store), store.timeline("op-1").unwrap().len()), (before.0 + 1, before.1 + 1));
    // Nothing left to claim: the report lands all the same.
    assert!(store.agent_commit_claim(&[reported("t7", "l6")], &next("l9")).unwrap().is_empty());
    assert_eq!(store.agent_task("t7").unwrap().unwrap().state, AgentTaskState::Reported);

    // A task handed to a waiting claim: written claimed under its lease, with the claim's audit
    // row and timeline entry, in the enqueuing commit; its lease fences it as a claim's does, and
    // a claim made again with that lease gets it.
    let before = (audited(store), store.timeline("op-1").unwrap().len());
    let handed = AgentTask {
        state: AgentTaskState::Claimed,
        lease: Some("l10".into()),
        claimed_by: Some("agent:pool/h".into()),
        claims: 1,
        expires_ms: 9_000,
        ..agent_task("t10", "compute_node/a", 9_000)
    };
    let claim = Box::new(claim_of("pool", &[], "l10", 9_000));
    store.commit(&[Write::Agent(AgentWrite::Handed { task: Box::new(handed), claim })]).unwrap();
    let t10 = store.agent_task("t10").unwrap().unwrap();
    assert_eq!((t10.state, t10.lease.as_deref(), t10.claims), (AgentTaskState::Claimed, Some("l10"), 1));
    assert_eq!((audited(store), store.timeline("op-1").unwrap().len()), (before.0 + 1, before.1 + 1));
    assert_eq!(store.timeline("op-1").unwrap().last().unwrap().reason, "claimed t10");
    assert_eq!(claim_ids(store, claim_of("pool", &[], "l11", 9_000)), Vec::<String>::new());
    assert_eq!(claim_ids(store, claim_of("pool", &[], "l10", 9_000)), ["t10"]);
    assert!(matches!(store.commit(&[report("t10", "l11")]), Err(Error::StaleLease { .. })));
    store.commit(&[report("t10", "l10")]).unwrap();

    // A claim made inside a commit (an agent's report committed by the driver with the job's
    // result): it takes the oldest queued task, one the same commit enqueued before it included,
    // with its audit row and timeline entry; the claimer reads it back by its lease, and nothing
    // more is claimed. With nothing queued it claims nothing, and the commit lands.
    let in_commit = |lease: &str| Write::Agent(AgentWrite::Claim(Box::new(claim_of("pool", &[], lease, 9_000))));
    let enqueue = |id: &str| Write::Agent(AgentWrite::Enqueue(Box::new(agent_task(id, "compute_node/a", 5_000))));
    store.commit(&[enqueue("t11")]).unwrap();
    let before = (audited(store), store.timeline("op-1").unwrap().len());
    store.commit(&[enqueue("t12"), in_commit("l12"), in_commit("l13")]).unwrap();
    let lease_of = |store: &dyn Store, id: &str| {
        let t = store.agent_task(id).unwrap().unwrap();
        (t.state, t.lease)
    };
    assert_eq!(lease_of(store, "t11"), (AgentTaskState::Claimed, Some("l12".into())));
    assert_eq!(lease_of(store, "t12"), (AgentTaskState::Claimed, Some("l13".into())));
    assert_eq!((audited(store), store.timeline("op-1").unwrap().len()), (before.0 + 2, before.1 + 2));
    assert_eq!(store.timeline("op-1").unwrap().last().unwrap().reason, "claimed t12");
    assert_eq!(claim_ids(store, claim_of("pool", &[], "l12", 9_000)), ["t11"]);
    assert_eq!(claim_ids(store, claim_of("pool", &[], "l13", 9_000)), ["t12"]);
    assert_eq!(audited(store), before.0 + 2);
    store.commit(&[report("t11", "l12"), in_commit("l14")]).unwrap();
    assert_eq!(lease_of(store, "t11").0, AgentTaskState::Reported);
    assert_eq!(claim_ids(store, claim_of("pool", &[], "l14", 9_000)), Vec::<String>::new());
    assert_eq!(audited(store), before.0 + 2);
}

pub(crate) fn agent_tasks_are_claimed_once_and_fenced_by_their_lease(db: &TestDb) {
    let mut store = db.store();
    agent_tasks_conform(&mut *store);
}

#[test]
fn agents_racing_on_one_file_claim_each_task_once() {
    let dir = scratch_dir("agent-race");
    let path = dir.join("store.db");
    let mut store = SqliteStore::open(&path, Durability::Normal).unwrap();
    let tasks: Vec<Write> = (0..200)
        .map(|i| Write::Agent(AgentWrite::Enqueue(Box::new(agent_task(&format!("t{i}"), "compute_node/a", 5_000)))))
        .collect();
    store.commit(&tasks).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|n| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut store = SqliteStore::open(&path, Durability::Normal).unwrap();
                // Batches of 1 to 4 tasks: a batch is claimed whole or not at all.
                let mut mine = Vec::new();
                loop {
                    let claim =
                        AgentClaim { max: n + 1, ..claim_of("pool", &[], &format!("l{n}-{}", mine.len()), 9_000) };
                    let got = store.agent_claim(&claim).unwrap();
                    if got.is_empty() {
                        break;
                    }
                    assert!(got.len() <= n as usize + 1);
                    mine.extend(got.into_iter().map(|t| t.id));
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<String> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    all.sort();
    let n = all.len();
    all.dedup();
    assert_eq!((n, all.len()), (200, 200));
    let _ = std::fs::remove_dir_all(&dir);
}
