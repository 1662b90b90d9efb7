use crate::PgStore;

/// The schema version a fresh store migrates to: one per migration.
const LATEST: i64 = crate::schema::MIGRATIONS.len() as i64;

#[test]
fn postgres_schema_is_versioned_and_a_newer_one_refused() {
    let Some(db) = crate::test_db("postgres_schema_is_versioned_and_a_newer_one_refused") else { return };
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), LATEST);
    drop(store);
    // Connecting again migrates nothing.
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), LATEST);
    drop(store);
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    admin.batch_execute("UPDATE schema_version SET version = 99").unwrap();
    let err = PgStore::connect(db.url()).err().unwrap();
    assert_eq!(
        err.to_string(),
        format!("the store's schema version 99 is newer than this binary's {LATEST}; upgrade opsgraph")
    );
    let err = PgStore::connect("postgres://postgres:hunter2@127.0.0.1:1/nowhere").err().unwrap();
    assert!(
        err.to_string().starts_with("failed to connect to PostgreSQL at postgres://postgres:***@127.0.0.1:1/nowhere: "),
        "{err}"
    );
}

/// Migration 4 gives gates made before it their kind: `patch-<id>` reviews patch `<id>` when that
/// patch was proposed for the gate's operation; any other gate, whatever its id, is the plan's.
#[test]
fn postgres_gates_made_before_kinds_existed_get_theirs() {
    use opsgraph_store::{GateKind, GateType, Store};
    let Some(db) = crate::test_db("postgres_gates_made_before_kinds_existed_get_theirs") else { return };
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    admin
        .batch_execute("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (3)")
        .unwrap();
    for sql in &crate::schema::MIGRATIONS[..3] {
        admin.batch_execute(sql).unwrap();
    }
    admin
        .batch_execute(
            "INSERT INTO timeline (seq, operation, at, actor, event, reason, data)
               VALUES (1, 'op-1', 't', 'user:a', 'patch_proposed', 'p', '{\"patch\": \"p1\"}');
             INSERT INTO gates (operation, id, gate_type, reason, options, required_roles)
               VALUES ('op-1', 'approve', 'approval', 'r', '[]', '[]'),
                      ('op-1', 'patch-p1', 'approval', 'r', '[]', '[]'),
                      ('op-1', 'patch-nobody', 'missing_input', 'r', '[]', '[]'),
                      ('op-2', 'patch-p1', 'approval', 'r', '[]', '[]');",
        )
        .unwrap();
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), LATEST);
    let kinds = |op: &str| -> Vec<(String, GateType, GateKind)> {
        store.gates(op).unwrap().into_iter().map(|g| (g.id, g.gate_type, g.kind)).collect()
    };
    let review = GateKind::PatchReview { patch: "p1".into() };
    assert_eq!(
        kinds("op-1"),
        [
            ("approve".to_string(), GateType::Approval, GateKind::Plan),
            ("patch-p1".to_string(), GateType::Approval, review),
            ("patch-nobody".to_string(), GateType::MissingInput, GateKind::Plan),
        ]
    );
    assert_eq!(kinds("op-2"), [("patch-p1".to_string(), GateType::Approval, GateKind::Plan)]);
}
