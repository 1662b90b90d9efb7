use opsgraph_store::{OperationRecord, Store, Write};
use serde_json::json;

use crate::{Durability, SqliteStore};

fn op(id: &str) -> OperationRecord {
    opsgraph_store::testing::operation(id, None)
}

#[test]
fn file_store_uses_wal_and_full_sync_and_migrates_once() {
    let dir = std::env::temp_dir().join(format!("opsgraph-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("opsgraph.db");
    {
        let mut store = SqliteStore::open(&path, Durability::Full).unwrap();
        assert_eq!(store.schema_version().unwrap(), crate::schema::MIGRATIONS.len() as i64);
        let mode: String = store.conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        let sync: i64 = store.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!((mode.as_str(), sync), ("wal", 2));
        store.commit(&[Write::CreateOperation { op: op("op-1"), plan: json!({}).to_string().to_string() }]).unwrap();
    }
    let store = SqliteStore::open(&path, Durability::Full).unwrap();
    assert!(store.operation("op-1").unwrap().is_some());
    store.conn.execute_batch("PRAGMA user_version = 99").unwrap();
    drop(store);
    let err = SqliteStore::open(&path, Durability::Full).err().unwrap();
    let latest = crate::schema::MIGRATIONS.len();
    assert_eq!(
        err.to_string(),
        format!("the store's schema version 99 is newer than this binary's {latest}; upgrade opsgraph")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A store made by the first `version` migrations and holding `rows` is opened (migrated to the
/// latest) and `check`ed.
fn check_migration(name: &str, version: usize, rows: &str, check: fn(&dyn Store)) {
    let dir = std::env::temp_dir().join(format!("opsgraph-store-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("opsgraph.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        for sql in &crate::schema::MIGRATIONS[..version] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch(&format!("PRAGMA user_version = {version}")).unwrap();
        conn.execute_batch(rows).unwrap();
    }
    let store = SqliteStore::open(&path, Durability::Full).unwrap();
    check(&store);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Migration 5 gives gates made before it their kind (`testing::assert_gates_got_their_kinds`).
#[test]
fn gates_made_before_kinds_existed_get_theirs() {
    use opsgraph_store::testing::{assert_gates_got_their_kinds, GATES_BEFORE_KINDS};
    check_migration("kind", 4, GATES_BEFORE_KINDS, assert_gates_got_their_kinds);
}

/// Migration 7 gives operations made before it their `intent_id` and `plan_id`
/// (`testing::assert_operations_got_their_ids`).
#[test]
fn operations_made_before_ids_existed_get_theirs() {
    use opsgraph_store::testing::{assert_operations_got_their_ids, OPERATIONS_BEFORE_IDS};
    check_migration("ids", 6, OPERATIONS_BEFORE_IDS, assert_operations_got_their_ids);
}

/// A deferred commit (the runtime's committer, `wal.rs`) is made and visible at once, another
/// connection's reader sees it, and the syncer makes it durable (a sync of the WAL file). The
/// connection stays at `synchronous=NORMAL` for the next deferred commit and is set back to
/// `FULL` before a durable one. Without full durability or without a file there is nothing to
/// defer to.
#[test]
fn a_deferred_commit_is_made_at_once_and_synced_by_the_syncer() {
    let dir = std::env::temp_dir().join(format!("opsgraph-deferred-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("opsgraph.db");
    let mut store = SqliteStore::open(&path, Durability::Full).unwrap();
    let syncer = store.syncer().expect("a file with full durability syncs deferred commits");
    store.commit_deferred(&[Write::CreateOperation { op: op("op-1"), plan: "{}".into() }]).unwrap();
    assert_eq!(synchronous(&store), 1, "made at NORMAL, and left there for the next deferred commit");
    let reader = SqliteStore::open(&path, Durability::Full).unwrap();
    assert!(reader.operation("op-1").unwrap().is_some());
    syncer.sync().unwrap();
    store.commit(&[Write::Timeline(entry("op-1", "durable"))]).unwrap();
    assert_eq!(synchronous(&store), 2, "a durable commit is made at FULL");
    assert!(SqliteStore::open(&dir.join("normal.db"), Durability::Normal).unwrap().syncer().is_none());
    assert!(SqliteStore::memory().unwrap().syncer().is_none());
    drop((store, reader));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_cached_statement_is_not_parsed_again_when_its_values_change() {
    // `lease = ?2` is a term the primary key's look-up does not use, and `LIMIT ?3` a bound limit:
    // without the query planner stability guarantee SQLite marks both, and the statement put back
    // in rusqlite's cache (its bindings cleared) is parsed and planned again at its next use.
    use rusqlite::{params, OptionalExtension, StatementStatus};
    let sql = "SELECT id FROM agent_tasks WHERE id = ?1 AND lease = ?2 AND state = 'claimed' LIMIT ?3";
    let dir = std::env::temp_dir().join(format!("opsgraph-store-prepared-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for store in
        [SqliteStore::memory().unwrap(), SqliteStore::open(&dir.join("opsgraph.db"), Durability::Full).unwrap()]
    {
        for k in 0..4_i64 {
            let mut stmt = store.conn.prepare_cached(sql).unwrap();
            let row: Option<String> =
                stmt.query_row(params![format!("task-{k}"), format!("lease-{k}"), k], |r| r.get(0)).optional().unwrap();
            assert_eq!(row, None);
        }
        let stmt = store.conn.prepare_cached(sql).unwrap();
        assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A new directory for one test, and its store file's path.
fn store_path(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("opsgraph-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("opsgraph.db");
    (dir, path)
}

fn synchronous(store: &SqliteStore) -> i64 {
    store.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap()
}

/// A timeline entry of `operation` with this reason.
fn entry(operation: &str, reason: &str) -> opsgraph_store::TimelineEntry {
    opsgraph_store::testing::entry(operation, reason)
}

/// Under `Full`, a lease's commits are deferred (`synchronous=NORMAL`, `lease.rs`), refused or
/// not, and so are the committer's; the connection stays at `NORMAL` between them and is set to
/// `FULL` before every commit synced at its commit (a refused one included); they are read back
/// by the next connection. Under `Normal` nothing is switched.
#[test]
fn a_leases_commits_leave_the_connection_synced() {
    let (dir, path) = store_path("lease");
    let mut store = SqliteStore::open(&path, Durability::Full).unwrap();
    assert_eq!(synchronous(&store), 2);
    let lease = store.acquire_lease("op-1", "me", 10_000).unwrap();
    assert_eq!(synchronous(&store), 1);
    store.renew_lease(&lease, 10_000).unwrap();
    assert!(store.acquire_lease("op-1", "another", 10_000).is_err(), "held");
    store.commit_deferred(&[Write::Timeline(entry("op-1", "deferred"))]).unwrap();
    assert_eq!(synchronous(&store), 1, "no switch between deferred commits");
    store.commit(&[Write::Timeline(entry("op-1", "durable"))]).unwrap();
    assert_eq!(synchronous(&store), 2, "a durable commit is made at FULL");
    store.acquire_lease("op-2", "me", 10_000).unwrap();
    store.release_lease(&lease).unwrap();
    assert_eq!(synchronous(&store), 1);
    let refused = store.commit(&[Write::Transition {
        operation: "none".into(),
        expect_version: 1,
        state: opsgraph_core::model::OperationState::Running,
        entry: entry("none", "t"),
    }]);
    assert!(refused.is_err());
    assert_eq!(synchronous(&store), 2, "set before the commit, refused or not");
    drop(store);
    let mut store = SqliteStore::open(&path, Durability::Normal).unwrap();
    assert!(store.lease("op-1").unwrap().is_some_and(|l| l.released));
    assert!(store.lease("op-2").unwrap().is_some_and(|l| !l.released));
    assert_eq!(store.timeline("op-1").unwrap().len(), 2);
    store.acquire_lease("op-3", "me", 10_000).unwrap();
    store.commit_deferred(&[Write::Timeline(entry("op-3", "deferred"))]).unwrap();
    assert_eq!(synchronous(&store), 1);
    store.commit(&[Write::Timeline(entry("op-3", "durable"))]).unwrap();
    assert_eq!(synchronous(&store), 1, "NORMAL durability stays NORMAL");
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A task enqueued by a deferred commit (`synchronous=NORMAL`, not synced: the runtime's
/// `Durable::ByItsClaims`) reaches an agent only through a claim, and every claim — alone, or in
/// a report's commit — is made at `FULL` on whatever connection makes it, even one whose last
/// commit was deferred: synced at its commit, which syncs the WAL and with it the enqueue
/// written before it. What the runtime leaves unsynced rests on this.
#[test]
fn a_claim_is_synced_at_its_commit_after_deferred_ones() {
    use opsgraph_store::{AgentClaim, AgentTask, AgentWrite};
    let (dir, path) = store_path("claim-sync");
    let mut driver = SqliteStore::open(&path, Durability::Full).unwrap();
    let mut route = SqliteStore::open(&path, Durability::Full).unwrap();
    let task = |id: &str| -> AgentTask {
        serde_json::from_value(json!({
            "id": id, "operation": "op-1", "job": "j", "attempt": 1, "kind": "run", "agent": "a",
            "resource": "r", "state": "queued", "payload": {"sealed": "x"}, "lease": null, "claimed_by": null,
            "claims": 0, "expires_ms": 0, "report": null, "created_at": "", "updated_at": ""
        }))
        .unwrap()
    };
    let claim = |lease: &str| AgentClaim {
        agent: "a".into(),
        resources: vec![],
        lease: lease.into(),
        actor: "agent:a".into(),
        max: 1,
        expires_ms: i64::MAX,
        at: opsgraph_store::now(),
        audit: serde_json::from_value(json!({
            "seq": 0, "at": "", "actor": "", "action": "agent.claim", "target": "", "operation": null,
            "resource": null, "detail": null
        }))
        .unwrap(),
        entry: entry("", "claimed {task}"),
    };
    driver.commit(&[Write::CreateOperation { op: op("op-1"), plan: json!({"jobs": []}).to_string() }]).unwrap();
    let mut seen = Vec::new();
    for (id, lease) in [("t1", "lease-one-0000000001"), ("t2", "lease-two-0000000002")] {
        driver.commit_deferred(&[Write::Agent(AgentWrite::Enqueue(Box::new(task(id))))]).unwrap();
        route.commit_deferred(&[Write::Timeline(entry("op-1", "deferred on the route's connection"))]).unwrap();
        seen.push(format!("{id} enqueued: driver {}, route {}", synchronous(&driver), synchronous(&route)));
        let got = if id == "t1" {
            route.agent_claim(&claim(lease)).unwrap()
        } else {
            route.agent_commit_claim(&[Write::Timeline(entry("op-1", "a report"))], &claim(lease)).unwrap()
        };
        let ids: Vec<String> = got.into_iter().map(|t| t.id).collect();
        seen.push(format!("claimed {ids:?} at synchronous {}", synchronous(&route)));
    }
    assert_eq!(
        seen,
        [
            "t1 enqueued: driver 1, route 1",
            r#"claimed ["t1"] at synchronous 2"#,
            "t2 enqueued: driver 1, route 1",
            r#"claimed ["t2"] at synchronous 2"#,
        ]
    );
    drop((driver, route));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Closing last under `Full` leaves a small WAL as it is (SQLite's checkpoint at close is two
/// `fsync`s that guard nothing there) and the next connection reads every commit back from it;
/// a WAL over 1 MiB, and any WAL under `Normal` (whose checkpoint is where commits are synced),
/// are checkpointed and removed at close as before.
#[test]
fn a_small_wal_is_left_at_close_and_read_back() {
    let wal = |path: &std::path::Path| std::fs::metadata(format!("{}-wal", path.display())).map(|m| m.len()).ok();
    let create = |id: &str| Write::CreateOperation { op: op(id), plan: json!({}).to_string() };
    let (dir, path) = store_path("close");
    let mut store = SqliteStore::open(&path, Durability::Full).unwrap();
    store.commit(&[create("op-1")]).unwrap();
    drop(store);
    assert!(wal(&path).is_some_and(|n| n > 0), "the WAL is left");
    let mut store = SqliteStore::open(&path, Durability::Full).unwrap();
    assert!(store.operation("op-1").unwrap().is_some(), "read back from the WAL");
    // Over 1 MiB: checkpointed at close.
    let big = opsgraph_store::TimelineEntry {
        seq: 0,
        operation: "op-1".into(),
        at: opsgraph_store::now(),
        actor: "test".into(),
        event: "e".into(),
        from: None,
        to: None,
        reason: (0..300_000u64).map(|i| format!("{:x}", i.wrapping_mul(0x9e37_79b9))).collect(),
        data: serde_json::Value::Null,
    };
    store.commit(&[create("op-2"), create("op-3"), Write::Timeline(big)]).unwrap();
    drop(store);
    assert_eq!(wal(&path), None, "checkpointed and removed");
    let mut store = SqliteStore::open(&path, Durability::Normal).unwrap();
    store.commit(&[create("op-4")]).unwrap();
    drop(store);
    assert_eq!(wal(&path), None, "under Normal the checkpoint at close syncs");
    let store = SqliteStore::open(&path, Durability::Full).unwrap();
    assert_eq!(store.operations(&Default::default()).unwrap().len(), 4);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The writes of a commit of `n` jobs as the driver makes them: the operation's version guard,
/// then a job record and a timeline entry a job, every third job written again (its result in
/// the same commit), a guard in the middle that ends one run of rows and starts another.
fn rows_of_a_commit(n: usize) -> Vec<Write> {
    use opsgraph_store::JobState;
    let job = |i: usize, state: JobState| {
        Write::Job(opsgraph_store::JobRecord {
            operation: "op-1".into(),
            id: format!("j{i}"),
            state,
            attempts: 1,
            outcome: if state == JobState::Running { serde_json::Value::Null } else { json!({"outcome": i}) },
            updated_at: format!("t{i}"),
        })
    };
    let mut writes = vec![Write::ExpectVersion { operation: "op-1".into(), version: op("op-1").version }];
    for i in 0..n {
        writes.push(job(i, JobState::Running));
        let mut e = entry("op-1", &format!("started j{i}"));
        e.from = (i % 2 == 0).then(|| "pending".into());
        writes.push(Write::Timeline(e));
        if i % 3 == 0 {
            writes.push(job(i, JobState::Succeeded));
        }
        if i == n / 2 {
            writes.push(Write::ExpectVersion { operation: "op-1".into(), version: op("op-1").version });
        }
    }
    writes
}

/// A run of job records and timeline entries is written several rows a statement (`apply::rows`,
/// every batch size and remainder up to 40 rows): the commit leaves the rows that one commit a
/// write leaves — a job written twice holds its last record, the entries have their `seq` in
/// order — and a refused guard still refuses the whole commit.
#[test]
fn a_run_of_rows_leaves_what_one_commit_a_write_leaves() {
    for n in [1, 2, 3, 5, 16, 17, 40] {
        let writes = rows_of_a_commit(n);
        let create = [Write::CreateOperation { op: op("op-1"), plan: "{}".into() }];
        let mut grouped = SqliteStore::memory().unwrap();
        grouped.commit(&create).unwrap();
        grouped.commit(&writes).unwrap();
        let mut single = SqliteStore::memory().unwrap();
        single.commit(&create).unwrap();
        for w in &writes {
            single.commit(std::slice::from_ref(w)).unwrap();
        }
        assert_eq!(grouped.jobs("op-1").unwrap(), single.jobs("op-1").unwrap(), "{n} jobs");
        assert_eq!(grouped.timeline("op-1").unwrap(), single.timeline("op-1").unwrap(), "{n} jobs");
        assert_eq!(grouped.jobs("op-1").unwrap().len(), n);
        assert!(grouped.jobs("op-1").unwrap().iter().all(
            |j| (j.state == opsgraph_store::JobState::Succeeded) == (j.id[1..].parse::<usize>().unwrap() % 3 == 0)
        ));

        let mut refused = rows_of_a_commit(n);
        refused.push(Write::ExpectVersion { operation: "op-1".into(), version: op("op-1").version + 7 });
        let mut store = SqliteStore::memory().unwrap();
        store.commit(&create).unwrap();
        assert!(store.commit(&refused).is_err());
        assert!(store.jobs("op-1").unwrap().is_empty() && store.timeline("op-1").unwrap().is_empty());
    }
}
