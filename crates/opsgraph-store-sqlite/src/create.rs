//! A new database file, made whole before it gets its name: the schema (`schema.rs`'s snapshot,
//! in one batch) is written into a temporary file beside it with SQLite's journal and syncs off
//! (nothing depends on that file yet), switched to WAL, `fsync`ed once, and linked under the
//! store's name only if nobody made the store meanwhile. One `fsync` instead of five (SQLite's
//! switch of a new file to WAL: four, the journal's directory among them; the schema's commit:
//! one); the file either exists with its whole schema or does not exist at all.
//!
//! The directory is not `fsync`ed here: the link only needs to be durable before something in
//! the store is, and nothing is until SQLite's first sync of the store's WAL, which `fsync`s the
//! same directory first (a WAL handle opened to create syncs its directory at its first sync,
//! `unixSync`), before the commit's own frames are synced. A power loss before that loses the
//! name, the new file and nothing anyone was told was kept (issue [N] 5, docs/benchmarks.md).
//!
//! A temporary file is `NAME.new-PID-N` (with SQLite's `-journal`, `-wal`, `-shm` beside it while
//! it is open). One left by a process that died is removed by the next process that opens the
//! store ([`sweep`]); one whose process still runs is left alone.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use opsgraph_store::Error;
use rusqlite::{Connection, OpenFlags};

use crate::Fail;

/// What [`create`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Created {
    /// The file is new, with the whole schema.
    Made,
    /// The file was there already (or another process made it first): opened as it is.
    Found,
    /// This file system would not take the link: SQLite creates the file the usual way.
    Unlinkable,
}

/// Makes `path` with the whole schema (`schema::upgrade` from empty: the snapshot) unless it
/// exists.
pub(crate) fn create(path: &Path) -> Result<Created, Fail> {
    // SQLite's own names (`:memory:`, `file:` URIs) and a directory that is not there (SQLite
    // says so in its words) are left to SQLite.
    let text = path.to_string_lossy();
    if text == ":memory:" || text.starts_with("file:") || !parent(path).is_dir() {
        return Ok(Created::Found);
    }
    sweep(path);
    if path.exists() {
        return Ok(Created::Found);
    }
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let temp = temp_name(path, std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let result = build(&temp).and_then(|()| link(&temp, path));
    remove(&temp);
    result
}

/// The schema in a file nobody else opens: no journal, no syncs, then WAL (the header says so),
/// closed, and one `fsync` of the whole file.
fn build(temp: &Path) -> Result<(), Fail> {
    remove(temp); // a file of the same name can only be from a dead process with this pid
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(temp, flags).map_err(|e| open_error(temp, e))?;
    conn.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; BEGIN EXCLUSIVE;")?;
    crate::schema::upgrade(&conn, 0)?;
    conn.execute_batch("COMMIT")?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if mode != "wal" {
        return Err(
            Error::Open { path: temp.display().to_string(), source: format!("journal mode {mode}").into() }.into()
        );
    }
    conn.close().map_err(|(_, e)| e)?;
    std::fs::File::open(temp).and_then(|f| f.sync_all()).map_err(|e| io_error(temp, e))?;
    Ok(())
}

/// Gives the finished file the store's name, unless a file has it already (another process made
/// the store meanwhile: that one is kept, this one dropped).
fn link(temp: &Path, path: &Path) -> Result<Created, Fail> {
    match std::fs::hard_link(temp, path) {
        Ok(()) => Ok(Created::Made),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Created::Found),
        // Swept by another process that took this one for dead (another pid namespace), or a
        // file system without links: SQLite creates the file as it always did.
        Err(_) => Ok(Created::Unlinkable),
    }
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn temp_name(path: &Path, pid: u32, n: u64) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".new-{pid}-{n}"));
    path.with_file_name(name)
}

/// The temporary file and what SQLite may have left beside it.
fn remove(temp: &Path) {
    for suffix in ["", "-journal", "-wal", "-shm"] {
        let mut name = temp.as_os_str().to_os_string();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
}

/// Removes the temporary files of `path` whose process is gone, once per file and process.
pub(crate) fn sweep(path: &Path) {
    static SWEPT: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(Default::default);
    if !SWEPT.lock().unwrap_or_else(|e| e.into_inner()).insert(path.to_path_buf()) {
        return;
    }
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return };
    let Ok(entries) = std::fs::read_dir(parent(path)) else { return };
    let prefix = format!("{name}.new-");
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(pid) = file.to_str().and_then(|f| f.strip_prefix(&prefix)).and_then(leftover_pid) else { continue };
        if gone(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The pid in `PID-N` or `PID-N-wal` (`-journal`, `-shm`).
fn leftover_pid(rest: &str) -> Option<u32> {
    let (pid, n) = rest.split_once('-')?;
    let n = ["-journal", "-wal", "-shm"].iter().fold(n, |n, s| n.strip_suffix(s).unwrap_or(n));
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Whether no process `pid` runs here (never said where `/proc` cannot tell).
fn gone(pid: u32) -> bool {
    pid != std::process::id() && Path::new("/proc/self").exists() && !Path::new(&format!("/proc/{pid}")).exists()
}

fn open_error(path: &Path, source: rusqlite::Error) -> Fail {
    Error::Open { path: path.display().to_string(), source: Box::new(source) }.into()
}

fn io_error(path: &Path, source: std::io::Error) -> Fail {
    Error::Open { path: path.display().to_string(), source: Box::new(source) }.into()
}

#[cfg(test)]
#[path = "create_tests.rs"]
mod tests;
