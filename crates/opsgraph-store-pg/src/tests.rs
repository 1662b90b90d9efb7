use crate::PgStore;

/// The schema version a fresh store migrates to: one per migration.
fn latest() -> i64 {
    crate::schema::MIGRATIONS.len() as i64
}

#[test]
fn postgres_schema_is_versioned_and_a_newer_one_refused() {
    let Some(db) = crate::test_db("postgres_schema_is_versioned_and_a_newer_one_refused") else { return };
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), latest());
    drop(store);
    // Connecting again migrates nothing.
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), latest());
    drop(store);
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    admin.batch_execute("UPDATE schema_version SET version = 99").unwrap();
    let err = PgStore::connect(db.url()).err().unwrap();
    assert_eq!(
        err.to_string(),
        format!("the store's schema version 99 is newer than this binary's {}; upgrade opsgraph", latest())
    );
    let err = PgStore::connect("postgres://postgres:hunter2@127.0.0.1:1/nowhere").err().unwrap();
    assert!(
        err.to_string().starts_with("failed to connect to PostgreSQL at postgres://postgres:***@127.0.0.1:1/nowhere: "),
        "{err}"
    );
}

/// A database made by the first `version` migrations and holding `rows` is connected to
/// (migrated to the latest) and `check`ed.
fn check_migration(test: &str, version: usize, rows: &str, check: fn(&dyn opsgraph_store::Store)) {
    let Some(db) = crate::test_db(test) else { return };
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES ({version})"
        ))
        .unwrap();
    for sql in &crate::schema::MIGRATIONS[..version] {
        admin.batch_execute(sql).unwrap();
    }
    admin.batch_execute(rows).unwrap();
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), latest());
    check(&store);
}

/// Migration 4 gives gates made before it their kind (`testing::assert_gates_got_their_kinds`).
#[test]
fn postgres_gates_made_before_kinds_existed_get_theirs() {
    use opsgraph_store::testing::{assert_gates_got_their_kinds, GATES_BEFORE_KINDS};
    check_migration(
        "postgres_gates_made_before_kinds_existed_get_theirs",
        3,
        GATES_BEFORE_KINDS,
        assert_gates_got_their_kinds,
    );
}

/// Migration 6 gives operations made before it their `intent_id` and `plan_id`
/// (`testing::assert_operations_got_their_ids`).
#[test]
fn postgres_operations_made_before_ids_existed_get_theirs() {
    use opsgraph_store::testing::{assert_operations_got_their_ids, OPERATIONS_BEFORE_IDS};
    check_migration(
        "postgres_operations_made_before_ids_existed_get_theirs",
        5,
        OPERATIONS_BEFORE_IDS,
        assert_operations_got_their_ids,
    );
}

/// A turn's commits in one transaction: when one is refused (a stale version, a fence that does
/// not hold), each runs again alone, in order; the refused ones get their own error, the others
/// hold.
#[test]
fn postgres_grouped_commits_fail_alone() {
    use opsgraph_core::model::OperationState;
    use opsgraph_store::{Store, TimelineEntry, Write};
    let Some(db) = crate::test_db("postgres_grouped_commits_fail_alone") else { return };
    let mut store = PgStore::connect(db.url()).unwrap();
    let note = |op: &str, event: &str| TimelineEntry {
        seq: 0,
        operation: op.into(),
        at: "2026-01-01T00:00:00Z".into(),
        actor: "test".into(),
        event: event.into(),
        from: None,
        to: None,
        reason: String::new(),
        data: serde_json::json!({}),
    };
    let create =
        |id: &str| Write::CreateOperation { op: opsgraph_store::testing::operation(id, None), plan: "{}".into() };
    store.commit(&[create("op-1"), create("op-2")]).unwrap();
    let lease = store.acquire_lease("op-2", "me", 60_000).unwrap();
    let transition = |version: i64, event: &str| Write::Transition {
        operation: "op-1".into(),
        expect_version: version,
        state: OperationState::Running,
        entry: note("op-1", event),
    };
    let stale = crate::pg_group::Pending::new(vec![transition(0, "stale")]);
    let fenced = crate::pg_group::Pending::new(vec![
        Write::Fence { operation: "op-2".into(), holder: "me".into(), token: lease.token + 1 },
        Write::Timeline(note("op-2", "fenced")),
    ]);
    let held = crate::pg_group::Pending::new(vec![lease.fence(), Write::Timeline(note("op-2", "held"))]);
    let mine = [transition(0, "first")];
    let out = store.commit_group(Some(&mine), vec![stale.clone(), fenced.clone(), held.clone()]);
    assert!(out.unwrap().is_ok());
    let err = stale.take().unwrap().unwrap_err().to_string();
    assert!(err.contains("op-1"), "{err}");
    let err = fenced.take().unwrap().unwrap_err().to_string();
    assert!(err.contains("me") && err.contains("op-2"), "{err}");
    assert!(held.take().unwrap().is_ok());
    let events = |op: &str| store.timeline(op).unwrap().into_iter().map(|e| (e.seq, e.event)).collect::<Vec<_>>();
    assert_eq!(events("op-1"), vec![(1, "first".to_string())]);
    assert_eq!(events("op-2"), vec![(2, "held".to_string())]);
    assert_eq!(store.operation("op-1").unwrap().unwrap().version, 1);
}
