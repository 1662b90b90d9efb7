//! Opening storage: the one place where a data directory and `--database` become a store. A
//! `postgres://` or `postgresql://` URL is PostgreSQL (`opsgraph-store-pg`); `sqlite://PATH` or a
//! plain path is a SQLite file, created if needed (`opsgraph-store-sqlite`); without
//! `--database` it is the data directory's `opsgraph.db`. Neither backend knows the other: this
//! module is where the binary chooses, and every command, the server, the lease keeper and the
//! agents' connections open through [`opener`] (or [`open_store`], which is its first call).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use opsgraph_store::blob::Layered;
use opsgraph_store::{BlobStore, Error, FsBlobStore, Store};
pub use opsgraph_store_sqlite::Durability;

/// The databases given with `--database` (or `OPSGRAPH_DATABASE`), by data directory: commands
/// run in-process (tests) with several data directories at once.
static DATABASES: std::sync::Mutex<BTreeMap<PathBuf, String>> = std::sync::Mutex::new(BTreeMap::new());

/// Sets (or, with `None`, forgets) the database of a data directory for this process.
pub fn use_database(data_dir: &Path, url: Option<String>) {
    let mut map = DATABASES.lock().unwrap_or_else(|e| e.into_inner());
    match url.filter(|u| !u.trim().is_empty()) {
        Some(u) => map.insert(data_dir.to_path_buf(), u),
        None => map.remove(data_dir),
    };
}

/// The store URL of a data directory: `--database`, else its SQLite file `opsgraph.db`.
pub fn database_url(data_dir: &Path) -> String {
    let map = DATABASES.lock().unwrap_or_else(|e| e.into_inner());
    map.get(data_dir).cloned().unwrap_or_else(|| data_dir.join("opsgraph.db").display().to_string())
}

/// `OPSGRAPH_SYNC=normal` trades the last commits on power loss for speed (SQLite).
pub fn durability() -> Durability {
    match std::env::var("OPSGRAPH_SYNC").as_deref() {
        Ok("normal") => Durability::Normal,
        _ => Durability::Full,
    }
}

/// Opens (and migrates) the store a URL names.
pub fn open(url: &str, durability: Durability) -> Result<Box<dyn Store>, Error> {
    if opsgraph_store::is_postgres(url) {
        return opsgraph_store_pg::open(url);
    }
    opsgraph_store_sqlite::open(Path::new(url.strip_prefix("sqlite://").unwrap_or(url)), durability)
}

/// How this process opens connections to a data directory's store: its URL and durability are
/// read once, now.
pub type Opener = Arc<dyn Fn() -> Result<Box<dyn Store>, Error> + Send + Sync>;

/// The opener of a data directory's store (`--database`, else its SQLite file).
pub fn opener(data_dir: &Path) -> Opener {
    let (url, durability) = (database_url(data_dir), durability());
    Arc::new(move || open(&url, durability))
}

/// Where a data directory keeps artifact contents and job logs: with PostgreSQL, its tables, in
/// front of the files a deployment wrote before (still read where they are); otherwise the data
/// directory's own files.
pub fn blobs(data_dir: &Path) -> Result<Arc<dyn BlobStore>, Error> {
    let url = database_url(data_dir);
    if opsgraph_store::is_postgres(&url) {
        let primary = opsgraph_store_pg::PgBlobStore::connect(&url)?;
        return Ok(Arc::new(Layered { primary, older: FsBlobStore::new(data_dir) }));
    }
    Ok(Arc::new(FsBlobStore::new(data_dir)))
}

/// Opens the store of a data directory: creates the directory (this user's only; one that
/// exists keeps its mode) and opens through [`opener`].
pub fn open_store(data_dir: &Path) -> anyhow::Result<Box<dyn Store>> {
    // The data directory holds the database (SQLite), logs and blobs.
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data_dir)
        .with_context(|| format!("failed to create the data directory {}", data_dir.display()))?;
    opener(data_dir)()
        .with_context(|| format!("failed to open the store {}", opsgraph_store::redact(&database_url(data_dir))))
}
