//! The hosts' root filesystem: `debootstrap` once, cached under `CACHE/rootfs/<key>`. It is built
//! in a temporary directory and renamed when complete, so an interrupted build is never used.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::sys::{self, io};
use crate::Error;

pub(crate) const SUITE: &str = "bookworm";
pub(crate) const MIRROR: &str = "http://deb.debian.org/debian";
pub(crate) const INCLUDE: &str = "systemd,systemd-sysv,dbus,openssh-server,iproute2,procps,ca-certificates,python3";

/// The debootstrap arguments (without the target directory): what the cache key is made of.
fn args() -> Vec<String> {
    vec!["--variant=minbase".into(), format!("--include={INCLUDE}"), SUITE.into(), "TARGET".into(), MIRROR.into()]
}

/// `bookworm-` and 12 hex digits of the arguments' digest (plus the post-processing's version):
/// a change of the package list builds a new root filesystem instead of using a stale one.
pub(crate) fn key() -> String {
    key_of(&args())
}

fn key_of(args: &[String]) -> String {
    let mut h = Sha256::new();
    for a in args {
        h.update(a.as_bytes());
        h.update([0]);
    }
    h.update(b"post-1");
    let hex: String = h.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("{SUITE}-{hex}")
}

/// The cached root filesystem, built first when missing; `true` when this call built it.
pub(crate) fn ensure(cache: &Path, log: &mut dyn Write) -> Result<(PathBuf, bool), Error> {
    let done = cache.join(key());
    if done.join("lib/systemd/systemd").exists() {
        return Ok((done, false));
    }
    std::fs::create_dir_all(cache).map_err(io(format!("create {}", cache.display())))?;
    let tmp = cache.join(format!(".build-{}-{}", key(), std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(format!("remove {}", tmp.display())))?;
    }
    let _ = writeln!(log, "building the root filesystem with debootstrap (about a minute) into {}", done.display());
    let mut cmd = Command::new("debootstrap");
    for a in args() {
        cmd.arg(if a == "TARGET" { tmp.as_os_str().to_owned() } else { a.into() });
    }
    let built = sys::run("build the root filesystem (debootstrap)", &mut cmd).and_then(|_| post_process(&tmp));
    if let Err(e) = built {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    match std::fs::rename(&tmp, &done) {
        Ok(()) => Ok((done, true)),
        // Another build finished first: use it.
        Err(_) if done.join("lib/systemd/systemd").exists() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok((done, false))
        }
        Err(e) => Err(Error::Io { what: format!("rename {} to {}", tmp.display(), done.display()), source: e }),
    }
}

/// No host may share a secret or an identity through the shared layer: the SSH host keys made
/// by openssh-server's installation go, and the machine id is emptied (each host gets its own).
fn post_process(root: &Path) -> Result<(), Error> {
    let ssh = root.join("etc/ssh");
    for entry in std::fs::read_dir(&ssh).map_err(io(format!("read {}", ssh.display())))?.flatten() {
        if entry.file_name().to_string_lossy().starts_with("ssh_host_") {
            std::fs::remove_file(entry.path()).map_err(io(format!("remove {}", entry.path().display())))?;
        }
    }
    std::fs::write(root.join("etc/machine-id"), "").map_err(io("empty the root filesystem's machine id"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_key_names_the_suite_and_changes_with_the_arguments() {
        let k = super::key();
        assert!(k.starts_with("bookworm-") && k.len() == "bookworm-".len() + 12, "{k}");
        let mut more = super::args();
        more[1].push_str(",postgresql");
        assert_ne!(super::key_of(&more), k);
        // The cache of a published build: changing the key orphans every machine's cache.
        assert_eq!(k, "bookworm-17d2fa10c097");
    }
}
