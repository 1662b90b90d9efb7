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
