//! Processes on this machine.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::spec::DEFAULT_PATH;
use crate::{process, Cancel, Executor, Outcome, Program, Run, Spec};

/// Runs programs on this machine: argv exec'd directly, scripts with `sh -eu`, shell lines with
/// `sh -c`; each run in a new process group.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalExecutor;

impl Executor for LocalExecutor {
    fn run(&self, spec: &Spec, cancel: &Cancel) -> Run {
        match command(spec) {
            Ok((cmd, what)) => {
                let run = process::run(cmd, &what, spec, cancel);
                // A working directory that is not one fails the spawn (its `chdir`): said so here,
                // where it is looked at only then, not with a `statx` before every spawn.
                match &spec.workdir {
                    Some(dir) if matches!(run.outcome, Outcome::CouldNotStart { .. }) && !dir.is_dir() => {
                        Run::could_not_start(format!("working directory {} does not exist", dir.display()))
                    }
                    _ => run,
                }
            }
            Err(error) => Run::could_not_start(error),
        }
    }

    fn is_local(&self) -> bool {
        true
    }
}

/// The command for `spec` (its program, arguments, environment and directory) and how a
/// could-not-start message names it; or why it cannot start.
fn command(spec: &Spec) -> Result<(Command, String), String> {
    if let Some(error) = spec.env_error() {
        return Err(error);
    }
    // The job's `PATH` where it is not this process's.
    let path = match spec.env.get("PATH") {
        Some(path) => Some(path.as_str()),
        None => (!spec.inherit_env).then_some(DEFAULT_PATH),
    };
    let (mut cmd, what) = match &spec.program {
        Program::Argv(argv) => {
            let Some((program, args)) = argv.split_first() else {
                return Err("the command is empty".to_owned());
            };
            let mut cmd = match path.and_then(|path| resolve(program, path)) {
                Some(found) => {
                    let mut cmd = Command::new(found);
                    cmd.arg0(program);
                    cmd
                }
                None => Command::new(program),
            };
            cmd.args(args);
            (cmd, format!("`{program}`"))
        }
        Program::Script { path, args } => {
            let resolved = match &spec.workdir {
                Some(dir) if path.is_relative() => dir.join(path),
                _ => path.clone(),
            };
            if !resolved.is_file() {
                return Err(format!("script {} not found", resolved.display()));
            }
            let mut cmd = Command::new("/bin/sh");
            cmd.arg("-eu").arg(path).args(args);
            (cmd, format!("script {}", path.display()))
        }
        Program::Shell(line) => {
            let mut cmd = Command::new("/bin/sh");
            cmd.arg("-c").arg(line);
            (cmd, "/bin/sh".to_owned())
        }
        Program::Http { .. } => return Err("the local executor runs processes, not http requests".to_owned()),
    };
    if let Some(dir) = &spec.workdir {
        cmd.current_dir(dir);
    }
    if !spec.inherit_env {
        cmd.env_clear();
        if let (None, Some(path)) = (spec.env.get("PATH"), path) {
            cmd.env("PATH", path);
        }
    }
    cmd.envs(&spec.env);
    Ok((cmd, what))
}

/// Where `execvp(3)` would find `program` (a bare name, `kubectl`) in the job's `path`: a
/// regular file this process may execute (`access(2)`, as the kernel's `execve` decides: an
/// execute bit for another user, or a `noexec` mount, is passed over as `execvp` passes over its
/// `EACCES`) that starts as a program (`#!` or ELF). Resolved here
/// because std's `Command` spawns with `posix_spawn` (a `vfork`) only when the child's `PATH` is
/// not set or the program is a path, and otherwise `fork`s the whole control plane (its page
/// tables copied, a job at a time) to search the child's `PATH` itself. `None` where only that
/// search would be right: an entry that is not absolute (looked up in the job's working
/// directory), a file without `#!` (`execvp` hands it to `sh`), or nothing found (the spawn then
/// fails as it always did). The process still gets `program` as its `argv[0]`.
fn resolve(program: &str, path: &str) -> Option<PathBuf> {
    if program.is_empty() || program.contains('/') {
        return None;
    }
    for dir in path.split(':') {
        if !dir.starts_with('/') {
            return None;
        }
        let candidate = Path::new(dir).join(program);
        let Ok(meta) = std::fs::metadata(&candidate) else { continue };
        if !meta.is_file() || rustix::fs::access(&candidate, rustix::fs::Access::EXEC_OK).is_err() {
            continue;
        }
        let mut magic = [0u8; 4];
        let read = std::fs::File::open(&candidate).and_then(|mut f| f.read(&mut magic)).unwrap_or(0);
        return (magic[..read.min(2)] == *b"#!" || magic[..read] == *b"\x7fELF").then_some(candidate);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{command, resolve};
    use crate::{Cancel, Executor, LocalExecutor, Spec};

    /// A bare program name is looked up in the job's `PATH` as `execvp` would, where that is
    /// certain; else left to std (which then forks the control plane to look).
    #[test]
    fn a_bare_program_is_found_in_the_jobs_path_where_that_is_certain() {
        let sh = resolve("sh", "/nonexistent:/usr/bin:/bin").expect("sh in /usr/bin or /bin");
        assert!(sh.ends_with("sh") && sh.is_absolute(), "{sh:?}");
        assert_eq!(resolve("sh", "/nonexistent"), None, "not found: std's own search and its error");
        assert_eq!(resolve("sh", "bin:/bin"), None, "a relative entry is the job's directory's");
        assert_eq!(resolve("sh", ":/bin"), None, "so is an empty one");
        assert_eq!(resolve("/bin/sh", "/bin"), None, "a path is not searched");
        assert_eq!(resolve("passwd", "/etc"), None, "not executable");
        assert_eq!(resolve("etc", "/"), None, "not a file");
    }

    /// An entry this process may not execute (its execute bit is another user's) is passed
    /// over as `execvp` passes over it: what `resolve` finds is what std's own search runs.
    #[test]
    fn an_entry_this_process_may_not_execute_is_passed_over_as_execvp_does() {
        use std::os::unix::fs::PermissionsExt;
        let dir = crate::testing::TempDir::new();
        let (one, two) = (dir.join("one"), dir.join("two"));
        // `one/prog` is executable by group and others only, not by its owner (this process,
        // unless it is root, for whom any execute bit will do); `two/prog` by anyone.
        for (d, mode) in [(&one, 0o411), (&two, 0o755)] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("prog"), format!("#!/bin/sh\necho {}\n", d.display())).unwrap();
            std::fs::set_permissions(d.join("prog"), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let path = format!("{}:{}", one.display(), two.display());
        let execvp = std::process::Command::new("prog").env_clear().env("PATH", &path).output().unwrap();
        let ran = String::from_utf8_lossy(&execvp.stdout).trim().to_owned();
        let root = nix::unistd::geteuid().is_root();
        assert_eq!(ran, if root { one.display() } else { two.display() }.to_string(), "{execvp:?}");
        assert_eq!(
            resolve("prog", &path),
            Some(std::path::PathBuf::from(&ran).join("prog")),
            "as execvp, root: {root}"
        );
    }

    /// A job naming its program bare (and so setting `PATH` for it) runs the program found in
    /// its `PATH`, spawned by the path (std's `posix_spawn`, no `fork` of the control plane),
    /// with the name it gave as `argv[0]`.
    #[test]
    fn a_job_names_its_program_bare_and_gets_it_with_that_name() {
        let mut spec = Spec::argv(["cat", "/proc/self/cmdline"]);
        spec.env.insert("PATH".into(), "/nonexistent:/usr/bin:/bin".into());
        let (cmd, _) = command(&spec).unwrap();
        assert!(cmd.get_program().to_string_lossy().ends_with("bin/cat"), "by its path: {cmd:?}");
        assert!(command(&Spec::argv(["cat"])).unwrap().0.get_program().to_string_lossy().ends_with("bin/cat"));
        let run = LocalExecutor.run(&spec, &Cancel::new());
        assert_eq!(run.output.stdout, b"cat\0/proc/self/cmdline\0", "{run:?}");
        let missing = LocalExecutor.run(&Spec::argv(["no-such-program-here"]), &Cancel::new());
        assert!(format!("{:?}", missing.outcome).contains("No such file"), "{missing:?}");
    }
}
