//! Stores for tests: [`TestDb`] gives each test a database of its own, on SQLite (a file in a
//! fresh temporary directory) or on PostgreSQL (a database created for the test on the server
//! `OPSGRAPH_TEST_PG` names, default `postgres://postgres@127.0.0.1:5432/test`, dropped when the
//! `TestDb` is). When PostgreSQL is unreachable a test prints a `SKIPPED` line and passes, except
//! under `CI=true`, where it fails: CI must not pass by skipping.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Durability, Error, Store};

/// The server tests create their databases on, when `OPSGRAPH_TEST_PG` is not set.
pub const DEFAULT_TEST_PG: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Which backend a [`TestDb`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// One test's database; removed (the directory) or dropped (the PostgreSQL database) on drop.
pub struct TestDb {
    pub backend: Backend,
    url: String,
    dir: Option<PathBuf>,
    /// The server URL it was created through and its name, to drop it.
    pg: Option<(String, String)>,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn unique(prefix: &str) -> String {
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

/// `url` with its database name replaced.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

impl TestDb {
    /// A SQLite file in a new temporary directory.
    pub fn sqlite() -> TestDb {
        let dir = std::env::temp_dir().join(unique("opsgraph-testdb"));
        std::fs::create_dir_all(&dir).expect("create a temporary directory");
        let url = format!("sqlite://{}", dir.join("opsgraph.db").display());
        TestDb { backend: Backend::Sqlite, url, dir: Some(dir), pg: None }
    }

    /// A new PostgreSQL database for the test `name`; `None` (after printing why) when the server
    /// is unreachable and `CI` is not `true`.
    pub fn postgres(name: &str) -> Option<TestDb> {
        let server = test_pg_url();
        let mut admin = match postgres::Client::connect(&server, postgres::NoTls) {
            Ok(c) => c,
            Err(e) => {
                let why =
                    format!("PostgreSQL unreachable at {} ({})", crate::redact(&server), crate::pg::pg_message(&e));
                if pg_required() {
                    panic!("{name}: {why}; CI=true requires PostgreSQL (set OPSGRAPH_TEST_PG)");
                }
                eprintln!("SKIPPED {name}: {why}; set OPSGRAPH_TEST_PG or start PostgreSQL to run it");
                return None;
            }
        };
        let db = unique("og_test");
        admin
            .batch_execute(&format!("CREATE DATABASE {db} TEMPLATE template0"))
            .unwrap_or_else(|e| panic!("{name}: failed to create database {db}: {e}"));
        Some(TestDb { backend: Backend::Postgres, url: with_database(&server, &db), dir: None, pg: Some((server, db)) })
    }

    /// A database of `backend`; `None` when it is PostgreSQL and that is skipped.
    pub fn new(backend: Backend, name: &str) -> Option<TestDb> {
        match backend {
            Backend::Sqlite => Some(TestDb::sqlite()),
            Backend::Postgres => TestDb::postgres(name),
        }
    }

    /// The URL `opsgraph --database` takes for it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A new connection to it (migrated).
    pub fn store(&self) -> Box<dyn Store> {
        self.try_store().unwrap_or_else(|e| panic!("open {}: {e}", self.url))
    }

    pub fn try_store(&self) -> Result<Box<dyn Store>, Error> {
        crate::open(&self.url, Durability::Full)
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
        if let Some((server, db)) = &self.pg {
            if let Ok(mut admin) = postgres::Client::connect(server, postgres::NoTls) {
                let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
            }
        }
    }
}

/// Defines one `#[test]` per backend for each `fn name(db: &TestDb)` listed: `mod sqlite` and
/// `mod postgres` with the same test names. PostgreSQL tests skip (or fail under `CI=true`) as
/// [`TestDb::postgres`] says.
#[macro_export]
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    let db = $crate::testing::TestDb::sqlite();
                    super::$name(&db);
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    let Some(db) = $crate::testing::TestDb::postgres(concat!(module_path!(), "::", stringify!($name))) else {
                        return;
                    };
                    super::$name(&db);
                }
            )*
        }
    };
}
