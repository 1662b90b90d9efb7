//! The scripts an agent keeps between tasks, by content (`scripts/<hash>/<name>`), and the
//! private directories its tasks run in.
//!
//! The cache holds at most [`KEPT_SCRIPTS`] scripts; when a new one would pass that, the kept
//! ones are removed — but never while a task holds one ([`KeptScript`]): a slot that found its
//! script kept and is about to run it must not see it removed by another slot making room for a
//! new one. The count of holders and the removal are under one lock per cache directory, so a
//! script is either found and held before the removal, or written again after it. While any
//! script is held the cache may pass the limit; the first new script after they are let go
//! empties it. (Agents that share one work directory between processes are not covered: each
//! process counts only its own holders.)

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

/// Scripts kept in one directory, so that the cache does not grow without end.
const KEPT_SCRIPTS: usize = 1024;

/// `dir`, made private to this user (0700) when it does not exist; an existing one is made
/// private only when it is not (a chmod is a metadata write, not free).
pub(crate) fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    if std::fs::metadata(dir)?.permissions().mode() & 0o777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// A kept script a task runs: the cache removes nothing while one of its scripts is held.
pub(crate) struct KeptScript {
    pub(crate) path: PathBuf,
    holders: Arc<Mutex<usize>>,
}

impl Drop for KeptScript {
    fn drop(&mut self) {
        *self.holders.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
    }
}

/// The count of held scripts of the cache in `scripts` (one per directory, for the process).
fn holders_of(scripts: &Path) -> Arc<Mutex<usize>> {
    static CACHES: LazyLock<Mutex<HashMap<PathBuf, Arc<Mutex<usize>>>>> = LazyLock::new(Default::default);
    let mut caches = CACHES.lock().unwrap_or_else(|e| e.into_inner());
    Arc::clone(caches.entry(scripts.to_path_buf()).or_default())
}

/// The file holding script `content` under `name`, kept between tasks in `scripts` (private to
/// this user, 0700 / 0600): `scripts/<hash of the content>/<name>`, held until the returned
/// [`KeptScript`] is dropped. A task runs the same few scripts again and again, and creating and
/// deleting a file and its directory per task was most of what an agent spent beside the job
/// itself (ext4 allocates and frees an inode each time). The kept file is compared with `content`
/// before it is used, and written again (to a new name, then renamed over it) when it differs:
/// the hash only finds it.
pub(crate) fn script_file(scripts: &Path, name: &str, content: &[u8]) -> std::io::Result<KeptScript> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    content.hash(&mut h);
    let dir = scripts.join(format!("{:016x}", h.finish()));
    let path = dir.join(name);
    let holders = holders_of(scripts);
    let mut held = holders.lock().unwrap_or_else(|e| e.into_inner());
    if !std::fs::read(&path).is_ok_and(|kept| kept == content) {
        private_dir(scripts)?;
        if *held == 0 && !dir.exists() && std::fs::read_dir(scripts)?.count() >= KEPT_SCRIPTS {
            for entry in std::fs::read_dir(scripts)?.flatten() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = crate::secrets::private_file(&dir, &format!(".{name}.{}.{n}", std::process::id()), content)?;
        std::fs::rename(&tmp, &path)?;
    }
    *held += 1;
    drop(held);
    Ok(KeptScript { path, holders })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    fn kept(scripts: &Path, name: &str, content: &[u8]) -> PathBuf {
        script_file(scripts, name, content).unwrap().path.clone()
    }

    /// A script is kept by content: the same script again is the same file, untouched; another
    /// content under the same name is another file; a kept file whose bytes differ from the
    /// script's (tampered, half written) is written again before it is used.
    #[test]
    fn scripts_are_kept_by_content_and_checked_before_use() {
        let dir = std::env::temp_dir().join(format!("opsgraph-scripts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let scripts = dir.join("scripts");
        let a = kept(&scripts, "step.sh", b"echo a\n");
        assert_eq!((mode(&scripts), mode(a.parent().unwrap()), mode(&a)), (0o700, 0o700, 0o600));
        assert_eq!(a.file_name().unwrap(), "step.sh");
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let first = inode(&a);
        assert_eq!(kept(&scripts, "step.sh", b"echo a\n"), a);
        assert_eq!(inode(&a), first, "the same script again is not written again");
        let b = kept(&scripts, "step.sh", b"echo b\n");
        assert_ne!(a, b);
        assert_eq!(std::fs::read(&b).unwrap(), b"echo b\n");
        std::fs::write(&a, b"rm -rf /\n").unwrap();
        assert_eq!(kept(&scripts, "step.sh", b"echo a\n"), a);
        assert_eq!(std::fs::read(&a).unwrap(), b"echo a\n");
        // Only the scripts are left in their directories (no temporary names).
        let names: Vec<String> = std::fs::read_dir(a.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["step.sh"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The cache full, a new script empties it — unless a task holds a kept script: then that
    /// one stays (a slot about to run it would find it gone), and the first new script after it
    /// is let go empties the cache.
    #[test]
    fn a_held_script_is_not_removed_when_the_cache_makes_room() {
        let dir = std::env::temp_dir().join(format!("opsgraph-scripts-held-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let scripts = dir.join("scripts");
        let held = script_file(&scripts, "job.sh", b"echo held\n").unwrap();
        for i in 1..KEPT_SCRIPTS {
            kept(&scripts, "job.sh", format!("echo {i}\n").as_bytes());
        }
        let count = || std::fs::read_dir(&scripts).unwrap().count();
        assert_eq!(count(), KEPT_SCRIPTS);
        let new = kept(&scripts, "job.sh", b"echo new\n");
        assert_eq!(std::fs::read(&held.path).unwrap(), b"echo held\n", "the held script was removed");
        assert_eq!(count(), KEPT_SCRIPTS + 1);
        drop(held);
        let after = kept(&scripts, "job.sh", b"echo after\n");
        assert_eq!(count(), 1, "the cache was emptied once nothing was held");
        assert!(after.exists() && !new.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
