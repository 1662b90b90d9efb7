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
        store.commit(&[Write::CreateOperation { op: op("op-1"), plan: json!({}) }]).unwrap();
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

/// Migration 5 gives gates made before it their kind: `patch-<id>` reviews patch `<id>` when that
/// patch was proposed for the gate's operation; any other gate, whatever its id, is the plan's.
#[test]
fn gates_made_before_kinds_existed_get_theirs() {
    use opsgraph_store::{GateKind, GateType};
    let dir = std::env::temp_dir().join(format!("opsgraph-store-kind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("opsgraph.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        for sql in &crate::schema::MIGRATIONS[..4] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch(
            "PRAGMA user_version = 4;
             INSERT INTO timeline (operation, at, actor, event, reason, data)
               VALUES ('op-1', 't', 'user:a', 'patch_proposed', 'p', '{\"patch\": \"p1\"}');
             INSERT INTO gates (operation, id, gate_type, reason, options, required_roles)
               VALUES ('op-1', 'approve', 'approval', 'r', '[]', '[]'),
                      ('op-1', 'patch-p1', 'approval', 'r', '[]', '[]'),
                      ('op-1', 'patch-nobody', 'missing_input', 'r', '[]', '[]'),
                      ('op-2', 'patch-p1', 'approval', 'r', '[]', '[]');",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path, Durability::Full).unwrap();
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
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}
