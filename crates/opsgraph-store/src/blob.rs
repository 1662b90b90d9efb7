//! Artifact contents and job logs: the bytes that are not rows. A [`BlobStore`] keeps artifacts
//! content-addressed (a location `blobs/ab/cdef…` of their SHA-256, what
//! [`crate::ArtifactRecord::location`] records) and each job attempt's log. [`FsBlobStore`] is
//! the data directory's own files, in the layout they always had; PostgreSQL keeps them in its
//! database (`opsgraph-store-pg`), so replicas share no filesystem. Run directories (a job's
//! working files while it runs) are local scratch and no blob store's business.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::Error;

/// Where artifact contents and job logs are kept. Every backend takes the same locations, so a
/// record written through one names its bytes in any other holding the same data.
pub trait BlobStore: Send + Sync {
    /// Stores `bytes` under their SHA-256; returns the location and the size. The same bytes
    /// stored twice are kept once.
    fn put(&self, bytes: &[u8]) -> Result<(String, i64), Error>;
    /// The bytes at a location [`BlobStore::put`] returned; `None` when nothing is there.
    fn get(&self, location: &str) -> Result<Option<Vec<u8>>, Error>;
    /// Appends to the log of a job's attempt.
    fn append_log(&self, log: &LogKey, bytes: &[u8]) -> Result<(), Error>;
    /// The log of a job's attempt; `None` when it has none.
    fn log(&self, log: &LogKey) -> Result<Option<Vec<u8>>, Error>;
    /// Removes a blob (an artifact sealed again under a new key leaves its old one); nothing
    /// when it is not there.
    fn remove(&self, location: &str) -> Result<(), Error>;
    /// The file a blob already is on this machine, for a job to read in place; `None` when the
    /// backend keeps it elsewhere (the caller copies it into the job's directory).
    fn local_path(&self, location: &str) -> Option<PathBuf> {
        let _ = location;
        None
    }
    /// Whether job logs are the files the executor writes (`runs/<op>/<job>.<attempt>.log`), so
    /// nothing needs copying into the store after an attempt.
    fn keeps_log_files(&self) -> bool {
        false
    }
    /// Whether a running attempt's live output is shared through this store, for the processes
    /// that cannot read the driver's run directory (server replicas on one database, each with
    /// a data directory of its own). `false` for the data directory's files: whoever reads them
    /// reads the run directory too.
    fn shares_live_logs(&self) -> bool {
        false
    }
    /// Adds `bytes`, the attempt's live output from offset `from` on, to what other processes
    /// read with [`BlobStore::live`], and forgets what lies more than `keep` bytes before their
    /// end. Nothing where live logs are not shared.
    fn put_live(&self, log: &LogKey, from: u64, bytes: &[u8], keep: u64) -> Result<(), Error> {
        let _ = (log, from, bytes, keep);
        Ok(())
    }
    /// The attempt's shared live output that ends after offset `after`: the offset of its first
    /// byte and the bytes (at most what [`BlobStore::put_live`] keeps); `None` when there is none.
    fn live(&self, log: &LogKey, after: u64) -> Result<Option<(u64, Vec<u8>)>, Error> {
        let _ = (log, after);
        Ok(None)
    }
}

/// Which log: an attempt of a job instance of an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogKey {
    pub operation: String,
    pub job: String,
    pub attempt: u32,
}

impl LogKey {
    pub fn new(operation: &str, job: &str, attempt: u32) -> LogKey {
        LogKey { operation: operation.to_string(), job: job.to_string(), attempt }
    }

    /// Its path under the data directory: `runs/<operation>/<job>.<attempt>.log`. Refused when
    /// an id would leave its directory.
    pub fn relative_path(&self) -> Result<PathBuf, Error> {
        for id in [&self.operation, &self.job] {
            if id.is_empty() || id.starts_with('.') || id.contains(['/', '\\', '\0']) {
                return Err(Error::BadBlob { what: format!("log id `{id}`"), reason: "not a plain name".into() });
            }
        }
        Ok(Path::new("runs").join(&self.operation).join(format!("{}.{}.log", self.job, self.attempt)))
    }
}

/// The location `bytes` are stored at: `blobs/` + the first two hex digits of their SHA-256 +
/// `/` + the other 62.
pub fn blob_location(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    format!("blobs/{}/{}", &hex[..2], &hex[2..])
}

/// Refuses anything but a location [`blob_location`] makes: a stored record never names a path
/// outside the blobs.
pub fn check_location(location: &str) -> Result<(), Error> {
    let ok = location.strip_prefix("blobs/").and_then(|rest| rest.split_once('/')).is_some_and(|(a, b)| {
        a.len() == 2 && b.len() == 62 && (a.chars().chain(b.chars())).all(|c| matches!(c, '0'..='9' | 'a'..='f'))
    });
    if ok {
        Ok(())
    } else {
        Err(Error::BadBlob { what: format!("location `{location}`"), reason: "not a blob location".into() })
    }
}

/// The data directory's files: `DATA_DIR/blobs/ab/cdef…` (0600, written to a temporary file and
/// renamed) and `DATA_DIR/runs/<operation>/<job>.<attempt>.log`.
#[derive(Debug, Clone)]
pub struct FsBlobStore {
    root: PathBuf,
}

impl FsBlobStore {
    pub fn new(data_dir: &Path) -> FsBlobStore {
        FsBlobStore { root: data_dir.to_path_buf() }
    }

    /// The file a location is kept in.
    pub fn path(&self, location: &str) -> Result<PathBuf, Error> {
        check_location(location)?;
        Ok(self.root.join(location))
    }
}

fn io(what: &Path, e: std::io::Error) -> Error {
    Error::Blob { what: what.display().to_string(), source: Box::new(e) }
}

impl BlobStore for FsBlobStore {
    fn put(&self, bytes: &[u8]) -> Result<(String, i64), Error> {
        let rel = blob_location(bytes);
        let path = self.root.join(&rel);
        if !path.exists() {
            std::fs::create_dir_all(path.parent().unwrap_or(&self.root)).map_err(|e| io(&path, e))?;
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, bytes).map_err(|e| io(&tmp, e))?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).map_err(|e| io(&tmp, e))?;
            }
            std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
        }
        Ok((rel, bytes.len() as i64))
    }

    fn get(&self, location: &str) -> Result<Option<Vec<u8>>, Error> {
        read(&self.path(location)?)
    }

    fn append_log(&self, log: &LogKey, bytes: &[u8]) -> Result<(), Error> {
        use std::io::Write as _;
        let path = self.root.join(log.relative_path()?);
        std::fs::create_dir_all(path.parent().unwrap_or(&self.root)).map_err(|e| io(&path, e))?;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(|e| io(&path, e))?;
        f.write_all(bytes).map_err(|e| io(&path, e))
    }

    fn log(&self, log: &LogKey) -> Result<Option<Vec<u8>>, Error> {
        read(&self.root.join(log.relative_path()?))
    }

    fn remove(&self, location: &str) -> Result<(), Error> {
        let path = self.path(location)?;
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&path, e)),
            _ => Ok(()),
        }
    }

    fn local_path(&self, location: &str) -> Option<PathBuf> {
        self.path(location).ok()
    }

    fn keeps_log_files(&self) -> bool {
        true
    }
}

/// A boxed blob store is a blob store (a test's, a layer's primary).
impl<B: BlobStore + ?Sized> BlobStore for Box<B> {
    fn put(&self, bytes: &[u8]) -> Result<(String, i64), Error> {
        (**self).put(bytes)
    }
    fn get(&self, location: &str) -> Result<Option<Vec<u8>>, Error> {
        (**self).get(location)
    }
    fn append_log(&self, log: &LogKey, bytes: &[u8]) -> Result<(), Error> {
        (**self).append_log(log, bytes)
    }
    fn log(&self, log: &LogKey) -> Result<Option<Vec<u8>>, Error> {
        (**self).log(log)
    }
    fn remove(&self, location: &str) -> Result<(), Error> {
        (**self).remove(location)
    }
    fn local_path(&self, location: &str) -> Option<PathBuf> {
        (**self).local_path(location)
    }
    fn keeps_log_files(&self) -> bool {
        (**self).keeps_log_files()
    }
    fn shares_live_logs(&self) -> bool {
        (**self).shares_live_logs()
    }
    fn put_live(&self, log: &LogKey, from: u64, bytes: &[u8], keep: u64) -> Result<(), Error> {
        (**self).put_live(log, from, bytes, keep)
    }
    fn live(&self, log: &LogKey, after: u64) -> Result<Option<(u64, Vec<u8>)>, Error> {
        (**self).live(log, after)
    }
}

/// A database's blob store in front of the data directory's files: what is written goes to the
/// database, and what is not there yet is read from the files it was written to before (blobs
/// and logs of a deployment that kept them on disk stay readable where they are).
pub struct Layered<B> {
    pub primary: B,
    pub older: FsBlobStore,
}

impl<B: BlobStore> BlobStore for Layered<B> {
    fn put(&self, bytes: &[u8]) -> Result<(String, i64), Error> {
        self.primary.put(bytes)
    }

    fn get(&self, location: &str) -> Result<Option<Vec<u8>>, Error> {
        match self.primary.get(location)? {
            Some(bytes) => Ok(Some(bytes)),
            None => self.older.get(location),
        }
    }

    fn append_log(&self, log: &LogKey, bytes: &[u8]) -> Result<(), Error> {
        self.primary.append_log(log, bytes)
    }

    fn log(&self, log: &LogKey) -> Result<Option<Vec<u8>>, Error> {
        match self.primary.log(log)? {
            Some(bytes) => Ok(Some(bytes)),
            None => self.older.log(log),
        }
    }

    fn remove(&self, location: &str) -> Result<(), Error> {
        self.primary.remove(location)?;
        self.older.remove(location)
    }

    fn shares_live_logs(&self) -> bool {
        self.primary.shares_live_logs()
    }

    fn put_live(&self, log: &LogKey, from: u64, bytes: &[u8], keep: u64) -> Result<(), Error> {
        self.primary.put_live(log, from, bytes, keep)
    }

    fn live(&self, log: &LogKey, after: u64) -> Result<Option<(u64, Vec<u8>)>, Error> {
        self.primary.live(log, after)
    }
}

/// The I/O error a failed [`FsBlobStore`] call carries, as it was (for callers that report
/// `std::io::Error`s); any other error wrapped.
pub fn into_io(e: Error) -> std::io::Error {
    match e {
        Error::Blob { source, .. } => match source.downcast::<std::io::Error>() {
            Ok(io) => *io,
            Err(other) => std::io::Error::other(other),
        },
        e => std::io::Error::other(e),
    }
}

fn read(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path, e)),
    }
}
