use crate::PgStore;

#[test]
fn postgres_schema_is_versioned_and_a_newer_one_refused() {
    let Some(db) = crate::test_db("postgres_schema_is_versioned_and_a_newer_one_refused") else { return };
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), 3);
    drop(store);
    // Connecting again migrates nothing.
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), 3);
    drop(store);
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    admin.batch_execute("UPDATE schema_version SET version = 99").unwrap();
    let err = PgStore::connect(db.url()).err().unwrap();
    assert_eq!(err.to_string(), "the store's schema version 99 is newer than this binary's 3; upgrade opsgraph");
    let err = PgStore::connect("postgres://postgres:hunter2@127.0.0.1:1/nowhere").err().unwrap();
    assert!(
        err.to_string().starts_with("failed to connect to PostgreSQL at postgres://postgres:***@127.0.0.1:1/nowhere: "),
        "{err}"
    );
}
