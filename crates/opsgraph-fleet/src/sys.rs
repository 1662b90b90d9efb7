//! The machine: running its tools, reading `/proc`, and the cgroup subtrees hosts live in.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;

/// Runs a command to completion; a non-zero exit is an error carrying its standard error.
pub(crate) fn run(what: &str, cmd: &mut Command) -> Result<String, Error> {
    let line = format!("{cmd:?}");
    let out = cmd.output().map_err(|source| Error::Spawn { what: what.to_owned(), command: line.clone(), source })?;
    checked(what, line, out)
}

/// [`run`] with `input` on the command's standard input (written from a thread, so that a
/// command that answers while it reads cannot block on a full pipe).
pub(crate) fn run_with_input(what: &str, cmd: &mut Command, input: String) -> Result<String, Error> {
    use std::io::Write as _;
    use std::process::Stdio;
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let line = format!("{cmd:?}");
    let spawn = |source| Error::Spawn { what: what.to_owned(), command: line.clone(), source };
    let mut child = cmd.spawn().map_err(spawn)?;
    let mut stdin = child.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().map_err(spawn)?;
    let _ = writer.join();
    checked(what, line, out)
}

/// A finished command's standard output, or the error naming it with its standard error.
fn checked(what: &str, line: String, out: std::process::Output) -> Result<String, Error> {
    if !out.status.success() {
        return Err(Error::Command {
            what: what.to_owned(),
            command: line,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A fresh ed25519 host key at `key` (and `key.pub`), commented with the host's `name`: its
/// public half as `known_hosts` wants it (`type base64`).
pub(crate) fn host_key(name: &str, key: &Path) -> Result<String, Error> {
    let _ = std::fs::remove_file(key);
    let _ = std::fs::remove_file(key.with_extension("pub"));
    run(
        "make the host's SSH host key",
        Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C"]).arg(name).arg("-f").arg(key),
    )?;
    let public = std::fs::read_to_string(key.with_extension("pub")).map_err(io("read the host key"))?;
    Ok(public.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
}

/// `ip ARGS`.
pub(crate) fn ip(what: &str, args: &[&str]) -> Result<String, Error> {
    run(what, Command::new("ip").args(args))
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Starts `cmd` without input, in a process group of its own (a Ctrl-C of the caller does not
/// reach it), its output and errors written to the file `log` (`log_what` names it); its pid.
/// `what` and `command` name it in a failure to start.
pub(crate) fn spawn_logged(
    cmd: &mut Command,
    log: &Path,
    log_what: &str,
    what: String,
    command: &str,
) -> Result<u32, Error> {
    use std::os::unix::process::CommandExt as _;
    let out = std::fs::File::create(log).map_err(io(format!("create {log_what}")))?;
    let err = out.try_clone().map_err(io(format!("create {log_what}")))?;
    let child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|source| Error::Spawn { what, command: command.to_owned(), source })?;
    Ok(child.id())
}

pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A process that exists and is not a zombie (a killed child of this process stays a zombie
/// until it is reaped, which in a test process may be never).
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // pid (comm) STATE ...: comm may hold spaces and parentheses; the state follows the last ')'.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, None | Some("Z" | "X"))
}

pub(crate) fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim().to_owned())
}

/// The children of a process (its threads' children together).
pub(crate) fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

/// Whether the process is in a cgroup named `name` (or below it) in some hierarchy.
pub(crate) fn in_cgroup(pid: u32, name: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else { return false };
    names_cgroup(&text, name)
}

fn names_cgroup(proc_cgroup: &str, name: &str) -> bool {
    proc_cgroup.lines().any(|l| l.splitn(3, ':').nth(2).is_some_and(|path| path.split('/').any(|part| part == name)))
}

pub(crate) fn kill(pid: u32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
}

/// Polls `done` every 50 ms until it holds or `limit` passes.
pub(crate) fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Mount points of this mount namespace (`/proc/self/mountinfo`, octal escapes decoded).
pub(crate) fn mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(unescape))
        .collect()
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let oct: String = chars.by_ref().take(3).collect();
            match u8::from_str_radix(&oct, 8) {
                Ok(b) => out.push(b as char),
                Err(_) => {
                    out.push('\\');
                    out.push_str(&oct);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One cgroup hierarchy the caller belongs to: where it is mounted and the caller's path in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hierarchy {
    pub(crate) mount: PathBuf,
    pub(crate) path: String,
}

/// The caller's cgroup in every mounted hierarchy (v1, the hybrid's `unified`, or pure v2).
pub(crate) fn hierarchies() -> Result<Vec<Hierarchy>, Error> {
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(io("read /proc/self/cgroup"))?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").map_err(io("read /proc/self/mountinfo"))?;
    Ok(match_hierarchies(&own, &info))
}

/// Pairs `/proc/self/cgroup` lines with cgroup mounts by their controller set (pure, tested).
pub(crate) fn match_hierarchies(own: &str, mountinfo: &str) -> Vec<Hierarchy> {
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let mut r = right.split(' ');
        let (Some(fstype), Some(_src), Some(opts)) = (r.next(), r.next(), r.next()) else { continue };
        let Some(mount) = left.split(' ').nth(4) else { continue };
        let key = match fstype {
            "cgroup2" => String::new(),
            "cgroup" => {
                let mut set: Vec<&str> = opts
                    .split(',')
                    .filter(|o| {
                        !matches!(*o, "rw" | "ro" | "xattr" | "noprefix" | "clone_children" | "cpuset_v2_mode")
                            && !o.starts_with("release_agent=")
                    })
                    .collect();
                set.sort_unstable();
                set.join(",")
            }
            _ => continue,
        };
        let path = own.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
            let mut set: Vec<&str> = ctrl.split(',').filter(|c| !c.is_empty()).collect();
            set.sort_unstable();
            (set.join(",") == key).then(|| path.to_owned())
        });
        if let Some(path) = path {
            out.push(Hierarchy { mount: PathBuf::from(unescape(mount)), path });
        }
    }
    out
}

/// Makes `name` under the caller's cgroup in every hierarchy; returns the directories made.
/// cpuset needs its cpus and mems before a process may join, copied from the parent.
pub(crate) fn make_cgroups(name: &str) -> Result<Vec<PathBuf>, Error> {
    let mut made = Vec::new();
    for h in hierarchies()? {
        let parent = h.mount.join(h.path.trim_start_matches('/'));
        let dir = parent.join(name);
        if !dir.exists() {
            std::fs::create_dir(&dir).map_err(io(format!("create cgroup {}", dir.display())))?;
        }
        for knob in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(value) = std::fs::read_to_string(parent.join(knob)) {
                std::fs::write(dir.join(knob), value.trim())
                    .map_err(io(format!("write {}", dir.join(knob).display())))?;
            }
        }
        made.push(dir);
    }
    Ok(made)
}

/// Removes a cgroup directory and the groups the host's systemd made inside it, deepest first.
/// Waits up to `limit` for their processes to be gone.
pub(crate) fn remove_cgroup(dir: &Path, limit: Duration) -> Result<(), Error> {
    if !dir.exists() {
        return Ok(());
    }
    let mut last = None;
    let ok = wait_until(limit, || match rmdir_tree(dir) {
        Ok(()) => true,
        Err(e) => {
            last = Some(e);
            false
        }
    });
    match (ok, last) {
        (true, _) => Ok(()),
        (false, Some(source)) => Err(Error::Io { what: format!("remove cgroup {}", dir.display()), source }),
        (false, None) => Ok(()),
    }
}

fn rmdir_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_type()?.is_dir() {
            rmdir_tree(&entry.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use expect_test::expect;

    #[test]
    fn hierarchies_pair_by_controllers() {
        let own = "9:name=systemd:/\n4:memory:/process_api/ab\n3:cpuset:/\n1:cpu,cpuacct:/x\n0::/\n";
        let info = "\
30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpuacct,cpu
31 25 0:27 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
32 25 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
33 25 0:29 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
34 25 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
35 25 0:31 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
36 25 0:32 / /mnt/with\\040space rw - ext4 /dev/vda rw
";
        let got: Vec<String> =
            super::match_hierarchies(own, info).iter().map(|h| format!("{} {}", h.mount.display(), h.path)).collect();
        // pids is mounted but the process is in no pids group: not listed (cannot happen on a
        // real machine, where every hierarchy has a line).
        expect![[r#"
            [
                "/sys/fs/cgroup/cpu,cpuacct /x",
                "/sys/fs/cgroup/cpuset /",
                "/sys/fs/cgroup/memory /process_api/ab",
                "/sys/fs/cgroup/systemd /",
                "/sys/fs/cgroup/unified /",
            ]
        "#]]
        .assert_debug_eq(&got);
    }

    #[test]
    fn a_process_belongs_to_a_host_by_its_cgroup() {
        let host = "9:name=systemd:/process_api/ab/opsgraph-fleet-1/init.scope\n0::/process_api/ab/opsgraph-fleet-1\n";
        assert!(super::names_cgroup(host, "opsgraph-fleet-1"));
        assert!(!super::names_cgroup(host, "opsgraph-fleet-10"), "a prefix is not the name");
        assert!(!super::names_cgroup("4:memory:/process_api/ab\n0::/\n", "opsgraph-fleet-1"));
        assert!(!super::in_cgroup(std::process::id(), "opsgraph-fleet-1"));
    }

    #[test]
    fn mount_points_unescape() {
        assert_eq!(super::unescape("/a\\040b\\134c"), "/a b\\c");
    }
}
