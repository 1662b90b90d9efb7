//! Stores for tests: [`TestDb`] gives each test a database of its own, on SQLite (a file in a
//! fresh temporary directory) or on PostgreSQL (a database created for the test on the server
//! `OPSGRAPH_TEST_PG` names, default `postgres://postgres@127.0.0.1:5432/test`, dropped when the
//! `TestDb` is). When PostgreSQL is unreachable a test prints a `SKIPPED` line and passes, except
//! under `CI=true`, where it fails: CI must not pass by skipping.
//!
//! This crate knows no backend, so a `TestDb` is made by one: `opsgraph_store_sqlite::test_db()`
//! and `opsgraph_store_pg::test_db(name)` fill in its URL, how to open it and how to drop it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{rfc3339, BlobStore, Error, OperationRecord, Store};

/// The server tests create their databases on, when `OPSGRAPH_TEST_PG` is not set.
pub const DEFAULT_TEST_PG: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A timeline entry for tests: of `operation` (which no row need hold), event `e`, now, with
/// this reason.
pub fn entry(operation: &str, reason: &str) -> crate::TimelineEntry {
    crate::TimelineEntry {
        seq: 0,
        operation: operation.into(),
        at: crate::now(),
        actor: "test".into(),
        event: "e".into(),
        from: None,
        to: None,
        reason: reason.into(),
        data: serde_json::Value::Null,
    }
}

/// A queued agent task for tests: `id` of `operation`, the first attempt of job `j`, for agent
/// `a` on resource `r`, with a sealed-looking payload.
pub fn agent_task(id: &str, operation: &str) -> crate::AgentTask {
    crate::AgentTask {
        id: id.into(),
        operation: operation.into(),
        job: "j".into(),
        attempt: 1,
        kind: "run".into(),
        agent: "a".into(),
        resource: "r".into(),
        state: crate::AgentTaskState::Queued,
        payload: serde_json::json!({"sealed": "x"}),
        lease: None,
        claimed_by: None,
        claims: 0,
        expires_ms: 0,
        report: None,
        created_at: String::new(),
        updated_at: String::new(),
    }
}

/// A claim of one task for tests, by agent `a` under `lease`, that never expires, with its audit
/// row (`agent.claim`) and timeline entry (`claimed {task}`).
pub fn agent_claim(lease: &str) -> crate::AgentClaim {
    crate::AgentClaim {
        agent: "a".into(),
        resources: vec![],
        lease: lease.into(),
        actor: "agent:a".into(),
        max: 1,
        expires_ms: i64::MAX,
        at: crate::now(),
        audit: crate::AuditRecord {
            seq: 0,
            at: String::new(),
            actor: String::new(),
            action: "agent.claim".into(),
            target: String::new(),
            operation: None,
            resource: None,
            detail: serde_json::Value::Null,
        },
        entry: entry("", "claimed {task}"),
    }
}

/// An operation record for tests: `id`, a draft intent to install, made by `user:alice` at one
/// fixed time, on `resource` when given.
pub fn operation(id: &str, resource: Option<&str>) -> OperationRecord {
    OperationRecord {
        id: id.into(),
        parent: None,
        intent: serde_json::json!({"action": "install"}),
        resource: resource.map(str::to_string),
        state: opsgraph_core::model::OperationState::DraftIntent,
        plan_revision: "sha256:aa".into(),
        intent_id: None,
        plan_id: "sha256:aa".into(),
        actor: "user:alice".into(),
        created_at: rfc3339(1_700_000_000, 0),
        updated_at: rfc3339(1_700_000_000, 0),
        version: 0,
    }
}

/// Rows of a store made before gates had kinds (both backends' migration that adds them is
/// tested on these): patch `p1` proposed for `op-1`, and gates named like patch reviews or not.
pub const GATES_BEFORE_KINDS: &str = "
    INSERT INTO timeline (seq, operation, at, actor, event, reason, data)
      VALUES (1, 'op-1', 't', 'user:a', 'patch_proposed', 'p', '{\"patch\": \"p1\"}');
    INSERT INTO gates (operation, id, gate_type, reason, options, required_roles)
      VALUES ('op-1', 'approve', 'approval', 'r', '[]', '[]'),
             ('op-1', 'patch-p1', 'approval', 'r', '[]', '[]'),
             ('op-1', 'patch-nobody', 'missing_input', 'r', '[]', '[]'),
             ('op-2', 'patch-p1', 'approval', 'r', '[]', '[]');";

/// What the migration must make of [`GATES_BEFORE_KINDS`]: `patch-<id>` reviews patch `<id>`
/// when that patch was proposed for the gate's operation; any other gate, whatever its id, is
/// the plan's.
pub fn assert_gates_got_their_kinds(store: &dyn Store) {
    use opsgraph_core::model::{GateKind, GateType};
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

/// Operations stored before they had `intent_id` and `plan_id` (both backends' migration that
/// adds them is tested on these): one whose intent has an id, one whose intent has none.
pub const OPERATIONS_BEFORE_IDS: &str = "
    INSERT INTO operations (id, parent, intent, resource, state, state_kind, plan_revision, actor, created_at, updated_at, version)
      VALUES ('op-1', NULL, '{\"id\": \"make-b1\", \"action\": \"install\"}', NULL, '{\"state\": \"draft_intent\"}', 'draft_intent', 'sha256:r1', 'user:a', 't', 't', 0),
             ('op-2', NULL, '{\"action\": \"install\"}', NULL, '{\"state\": \"draft_intent\"}', 'draft_intent', 'sha256:r2', 'user:a', 't', 't', 0);";

/// What the migration must make of [`OPERATIONS_BEFORE_IDS`]: the intent's id when it had one,
/// and the revision each ran as its `plan_id`.
pub fn assert_operations_got_their_ids(store: &dyn Store) {
    let ids = |id: &str| {
        let o = store.operation(id).unwrap().unwrap();
        (o.intent_id, o.plan_id)
    };
    assert_eq!(ids("op-1"), (Some("make-b1".to_string()), "sha256:r1".to_string()));
    assert_eq!(ids("op-2"), (None, "sha256:r2".to_string()));
}

/// Which backend a [`TestDb`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// How a backend opens (and migrates) a store from its URL.
pub type Opener = fn(&str) -> Result<Box<dyn Store>, Error>;

/// How a backend opens the blob store that goes with a test database.
pub type BlobOpener = fn(&TestDb) -> Result<Box<dyn BlobStore>, Error>;

/// One test's database; removed (the directory) or dropped (the PostgreSQL database) on drop.
pub struct TestDb {
    pub backend: Backend,
    url: String,
    dir: Option<PathBuf>,
    open: Opener,
    open_blobs: BlobOpener,
    /// Drops the database (PostgreSQL), run once on drop.
    cleanup: Option<Box<dyn FnOnce() + Send + Sync>>,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A name no other test of any process running now has: `prefix_pid_n_nanos`.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    format!("{prefix}_{}_{}_{nanos}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst))
}

/// The URL of the PostgreSQL server tests use.
pub fn test_pg_url() -> String {
    std::env::var("OPSGRAPH_TEST_PG").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| DEFAULT_TEST_PG.to_string())
}

/// Whether a test that needs PostgreSQL must fail rather than skip (`CI=true`).
pub fn pg_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

impl TestDb {
    /// A test database a backend made: its URL, the temporary directory to remove (if any), how
    /// to open it and its blob store, and what drops it.
    pub fn new(
        backend: Backend,
        url: String,
        dir: Option<PathBuf>,
        (open, open_blobs): (Opener, BlobOpener),
        cleanup: Option<Box<dyn FnOnce() + Send + Sync>>,
    ) -> TestDb {
        TestDb { backend, url, dir, open, open_blobs, cleanup }
    }

    /// Its blob store (SQLite: files in its directory; PostgreSQL: its tables).
    pub fn blobs(&self) -> Box<dyn BlobStore> {
        (self.open_blobs)(self).unwrap_or_else(|e| panic!("open the blobs of {}: {e}", self.url))
    }

    /// The URL `opsgraph --database` takes for it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How its backend opens a URL: for a test that opens connections of its own.
    pub fn opener(&self) -> Opener {
        self.open
    }

    /// A new connection to it (migrated).
    pub fn store(&self) -> Box<dyn Store> {
        self.try_store().unwrap_or_else(|e| panic!("open {}: {e}", self.url))
    }

    pub fn try_store(&self) -> Result<Box<dyn Store>, Error> {
        (self.open)(&self.url)
    }

    /// A directory for the test's other files (SQLite: the database's own).
    pub fn dir(&self) -> Option<&std::path::Path> {
        self.dir.as_deref()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some(cleanup) = self.cleanup.take() {
            cleanup();
        }
    }
}

/// Defines one `#[test]` per backend for each `fn name(db: &TestDb)` listed: `mod sqlite` and
/// `mod postgres` with the same test names. The two makers are the backends' `test_db`
/// functions (`opsgraph_store_sqlite::test_db`, `opsgraph_store_pg::test_db`); PostgreSQL tests
/// skip (or fail under `CI=true`) as the latter says.
#[macro_export]
macro_rules! conformance {
    (sqlite: $sqlite:path, postgres: $postgres:path; $($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    let db: $crate::testing::TestDb = $sqlite();
                    super::$name(&db);
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    let Some(db): Option<$crate::testing::TestDb> = $postgres(concat!(module_path!(), "::", stringify!($name))) else {
                        return;
                    };
                    super::$name(&db);
                }
            )*
        }
    };
}
