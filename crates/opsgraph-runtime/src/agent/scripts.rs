//! The scripts an agent keeps between tasks, by content (`scripts/<hash>/<name>`), and the
//! private directories its tasks run in.
//!
//! The cache holds at most [`KEPT_SCRIPTS`] scripts; when a new one would pass that, the kept
//! ones are removed — but never while a task holds one ([`KeptScript`]): a slot that found its
//! script kept and is about to run it must not see it removed by another slot making room for a
//! new one. Agents may share one work directory (their slots are `slot-PID-N`), so a hold is a
//! shared `flock` of the cache's lock file (`scripts.lock` beside it), taken before the script
//! is looked for, and the removal needs that lock exclusively, tried without waiting: with any
//! script held by any process, the cache may pass the limit; the first new script after they are
//! let go empties it.

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

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

/// A kept script a task runs: the cache removes nothing while one of its scripts is held (the
/// shared lock goes with the file).
pub(crate) struct KeptScript {
    pub(crate) path: PathBuf,
    _hold: Flock<File>,
}

fn io(e: nix::errno::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

/// The cache's lock file, opened (made 0600 when new) and locked shared.
fn hold(scripts: &Path) -> std::io::Result<Flock<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let lock =
        std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(scripts.with_extension("lock"))?;
    Flock::lock(lock, FlockArg::LockShared).map_err(|(_, e)| io(e))
}

/// Empties the cache when no process holds a script of it (its lock file taken exclusively,
/// without waiting, on a descriptor of its own); `held` is this caller's hold, let go meanwhile
/// and taken again after.
fn make_room(scripts: &Path, held: Flock<File>) -> std::io::Result<Flock<File>> {
    let mine = held.unlock().map_err(|(_, e)| io(e))?;
    let lock = File::options().append(true).open(scripts.with_extension("lock"))?;
    if let Ok(only) = Flock::lock(lock, FlockArg::LockExclusiveNonblock) {
        for entry in std::fs::read_dir(scripts)?.flatten() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
        drop(only);
    }
    Flock::lock(mine, FlockArg::LockShared).map_err(|(_, e)| io(e))
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
    if let Some(parent) = scripts.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut held = hold(scripts)?;
    if !std::fs::read(&path).is_ok_and(|kept| kept == content) {
        private_dir(scripts)?;
        if !dir.exists() && std::fs::read_dir(scripts)?.count() >= KEPT_SCRIPTS {
            held = make_room(scripts, held)?;
        }
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = crate::secrets::private_file(&dir, &format!(".{name}.{}.{n}", std::process::id()), content)?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(KeptScript { path, _hold: held })
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

    /// Another process holding a script of the cache (here `flock -s` on its lock file, as an
    /// agent sharing the work directory holds one) keeps the cache from being emptied too.
    #[test]
    fn a_script_held_by_another_process_is_not_removed() {
        let dir = std::env::temp_dir().join(format!("opsgraph-scripts-other-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let scripts = dir.join("scripts");
        let theirs = kept(&scripts, "job.sh", b"echo theirs\n");
        let lock = scripts.with_extension("lock");
        // `-o`: the lock is the `flock` process's alone; its `sh` ends when its stdin closes.
        let mut other = std::process::Command::new("flock")
            .args(["-o", "-s", &lock.display().to_string(), "-c", "echo held; read -r _"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = [0u8; 5];
        std::io::Read::read_exact(other.stdout.as_mut().unwrap(), &mut said).unwrap();
        for i in 1..KEPT_SCRIPTS {
            kept(&scripts, "job.sh", format!("echo {i}\n").as_bytes());
        }
        kept(&scripts, "job.sh", b"echo new\n");
        assert_eq!(std::fs::read(&theirs).unwrap(), b"echo theirs\n", "a script the other process holds was removed");
        other.kill().unwrap();
        other.wait().unwrap();
        drop(other.stdin.take());
        kept(&scripts, "job.sh", b"echo after\n");
        assert_eq!(std::fs::read_dir(&scripts).unwrap().count(), 1, "the cache was emptied once nothing was held");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
