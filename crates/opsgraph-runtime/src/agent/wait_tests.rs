//! Tests of `wait.rs`: what the worker of an agent task reads while it waits.

use std::collections::BTreeMap;
use std::sync::Arc;

use opsgraph_exec::{Cancel, LocalExecutor};

use super::*;
use crate::agent::pool::Agents;

fn task(dir: &std::path::Path) -> Task {
    Task {
        instance: "j".into(),
        attempt: 1,
        job: serde_json::from_value(json!({"id": "j"})).unwrap(),
        evidence: vec![],
        program: None,
        env: BTreeMap::new(),
        libraries: vec![],
        timeout: None,
        executor: Arc::new(LocalExecutor),
        mark: None,
        dir: dir.to_path_buf(),
        stem: "j.1".into(),
        cancel: Cancel::new(),
        check_first: false,
        secret_outputs: vec![],
        mask: vec![],
        instead: None,
        share_live: None,
    }
}

/// The worker of a task enqueued in the commit just done does not read its row before the
/// task moves (issue [N] 2): here the row is not in the store at all, which a first read
/// would take for a lost task; the report its route committed is what the worker returns.
#[test]
fn a_worker_reads_nothing_of_a_task_it_just_enqueued_before_the_task_moves() {
    let dir = std::env::temp_dir().join(format!("opsgraph-wait-fresh-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("opsgraph.db");
    let open: Arc<super::super::pool::OpenStore> = Arc::new(move || {
        let store = opsgraph_store_sqlite::SqliteStore::open(&db, opsgraph_store_sqlite::Durability::Full)?;
        Ok(Box::new(store) as Box<dyn opsgraph_store::Store>)
    });
    let agents = Arc::new(Agents::new(open));
    let waiting = |fresh| Waiting {
        agents: agents.clone(),
        keyring: Arc::new(
            opsgraph_secrets::Keyring::new(opsgraph_secrets::MasterKey::generate().unwrap(), vec![]).unwrap(),
        ),
        operation: "op".into(),
        agent: "a".into(),
        resource: "r".into(),
        task: "t1".into(),
        payload: Value::Null,
        retry_allowed: false,
        actor: "test".into(),
        fresh,
    };
    let report = AgentReport { outcome: "done".into(), ..Default::default() };
    let (t, w) = (task(&dir), waiting(true));
    let worker = std::thread::spawn(move || wait(t, w));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !agents.bell.watching("t1") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Time for a first look at the store, had the worker taken one.
    std::thread::sleep(Duration::from_millis(20));
    agents.bell.report_committed("t1", report.clone());
    let r = worker.join().unwrap();
    assert_eq!((r.outcome.as_str(), r.failure), ("done", None));
    // Found after a restart, its row is read first: not in the store, the task is lost.
    let r = wait(task(&dir), waiting(false));
    assert_eq!(r.outcome, "lost");
    let _ = std::fs::remove_dir_all(&dir);
}
