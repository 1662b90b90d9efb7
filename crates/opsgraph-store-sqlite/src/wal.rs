//! Deferred durability of the driver's commits (issue [N] 5, the runtime's committer): a commit
//! made with `synchronous=NORMAL` is in the WAL (made, visible) but not synced; one `fdatasync`
//! of the WAL file, begun after it, makes it durable together with every commit before it (the
//! WAL is appended in commit order, and one sync of a file covers everything written to it
//! before). Checkpoints stay safe under `NORMAL` (SQLite syncs the WAL before one and the
//! database file after it, and a WAL is only reused after a complete checkpoint), so the WAL's
//! frames are never overwritten before they are in the synced database file.

use std::fs::File;
use std::path::PathBuf;
use std::sync::OnceLock;

use opsgraph_store::{Error, Syncer};

/// The WAL file of one database, synced on demand ([`Syncer`]).
pub(crate) struct Wal {
    path: PathBuf,
    /// Opened at the first sync (the file exists once this process's connection wrote to it;
    /// SQLite removes it only when the last connection closes, after a complete checkpoint).
    file: OnceLock<File>,
}

impl Wal {
    pub(crate) fn of(db: &std::path::Path) -> Wal {
        let mut path = db.as_os_str().to_owned();
        path.push("-wal");
        Wal { path: PathBuf::from(path), file: OnceLock::new() }
    }

    /// The WAL file's path (`DB-wal`).
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Syncer for Wal {
    fn sync(&self) -> Result<(), Error> {
        let failed = |e: std::io::Error| Error::NotDurable { reason: format!("{}: {e}", self.path.display()) };
        let file = match self.file.get() {
            Some(f) => f,
            None => {
                let f = File::open(&self.path).map_err(failed)?;
                self.file.get_or_init(|| f)
            }
        };
        file.sync_data().map_err(failed)
    }
}
