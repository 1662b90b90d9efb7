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

/// Migration 4 gives gates made before it their kind (`testing::assert_gates_got_their_kinds`).
#[test]
fn postgres_gates_made_before_kinds_existed_get_theirs() {
    let Some(db) = crate::test_db("postgres_gates_made_before_kinds_existed_get_theirs") else { return };
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    admin
        .batch_execute("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (3)")
        .unwrap();
    for sql in &crate::schema::MIGRATIONS[..3] {
        admin.batch_execute(sql).unwrap();
    }
    admin.batch_execute(opsgraph_store::testing::GATES_BEFORE_KINDS).unwrap();
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), latest());
    opsgraph_store::testing::assert_gates_got_their_kinds(&store);
}

/// Migration 6 gives operations made before it their `intent_id` and `plan_id`
/// (`testing::assert_operations_got_their_ids`).
#[test]
fn postgres_operations_made_before_ids_existed_get_theirs() {
    let Some(db) = crate::test_db("postgres_operations_made_before_ids_existed_get_theirs") else { return };
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    admin
        .batch_execute("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (5)")
        .unwrap();
    for sql in &crate::schema::MIGRATIONS[..5] {
        admin.batch_execute(sql).unwrap();
    }
    admin.batch_execute(opsgraph_store::testing::OPERATIONS_BEFORE_IDS).unwrap();
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), latest());
    opsgraph_store::testing::assert_operations_got_their_ids(&store);
}
