//! The write turn of a database file in this process: its connections take turns on a mutex,
//! in order, instead of in SQLite's busy handler, which sleeps 1, 2, 5, 10 … ms between tries
//! (another process's writer is still waited for there).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};

/// The write turn of each database file this process opened, by its canonical path.
static WRITERS: LazyLock<Mutex<HashMap<PathBuf, Weak<Mutex<()>>>>> = LazyLock::new(Default::default);

pub(crate) fn writer_of(path: &Path) -> Arc<Mutex<()>> {
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut writers = WRITERS.lock().unwrap_or_else(|e| e.into_inner());
    writers.retain(|_, w| w.strong_count() > 0);
    if let Some(w) = writers.get(&key).and_then(Weak::upgrade) {
        return w;
    }
    let w = Arc::new(Mutex::new(()));
    writers.insert(key, Arc::downgrade(&w));
    w
}

/// This connection's turn to write (a poisoned turn is still a turn: the lock guards no data).
pub(crate) fn turn(writer: &Mutex<()>) -> MutexGuard<'_, ()> {
    writer.lock().unwrap_or_else(|e| e.into_inner())
}
