//! Commands on another machine, through the system's OpenSSH client.
//!
//! An SSH exec request carries one string that the remote login shell parses. So the remote
//! command is built here from single-quoted words only ([`shell_quote`]), and it is the only
//! place where a parameter meets a shell:
//!
//! ```text
//! [cd -- '<workdir>' &&] NAME='<value>' ... '<argv0>' '<argv1>' ...
//! [cd -- '<workdir>' &&] NAME='<value>' ... sh -euc '<script text>' '<script path>' '<arg>' ...
//! [cd -- '<workdir>' &&] NAME='<value>' ... sh -c '<shell line>'
//! ```
//!
//! That string is then wrapped (`remote_group::wrap`) so that it runs in a session and process
//! group of its own, found on the host by a token of the run, which a timeout or cancel stops
//! through a second `ssh`.
//!
//! Variables are set as assignment words in front of the command rather than through
//! `env NAME=value argv...`: `env` would read an `argv[0]` containing `=` as one more assignment
//! and one starting with `-` as its own option, while a quoted word is never an assignment, a
//! keyword or an option to the shell. The remote account's login shell must be a POSIX shell
//! (sh, dash, bash, ksh, zsh).
//!
//! Scripts travel as the text of `sh -euc`, not on stdin to `sh -eu -s`: with `-s`, any command
//! of the script that reads stdin would eat the rest of the script, and the job's own stdin would
//! be taken. The cost is a limit: the whole remote command is one argument of the remote shell,
//! at most 128 KiB on Linux.
//!
//! Host keys: `StrictHostKeyChecking=yes` always. With `known_hosts` the host key is checked
//! against that file only (`GlobalKnownHostsFile=/dev/null`); without it, against the user's and
//! the system's known_hosts. An unknown or changed host key fails the run
//! ([`Outcome::CouldNotStart`]); we never accept a host key silently. `BatchMode=yes`: no
//! password or passphrase prompts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::quote::shell_quote;
use crate::{process, remote_group, Cancel, Executor, Outcome, Program, Run, Spec};

/// The longest remote command: Linux's limit on one argument (`MAX_ARG_STRLEN`, with its NUL).
const MAX_REMOTE_COMMAND: usize = 128 * 1024 - 1;
/// How long an idle multiplexing master stays up.
const CONTROL_PERSIST: &str = "60s";
/// How long stopping a remote command may take beyond the run's grace: a fresh connection
/// (`ConnectTimeout=10`) and the wait after SIGKILL (2 s).
const STOP_LIMIT: Duration = Duration::from_secs(15);

/// One lock per control socket: two runs for the same host do not start two masters, and runs
/// for different hosts start theirs at the same time (one global lock made a fan-out over 20
/// hosts wait for 20 handshakes one after another).
static MASTER_START: Mutex<Option<HashMap<PathBuf, Arc<Mutex<()>>>>> = Mutex::new(None);

fn master_lock(socket: &Path) -> Arc<Mutex<()>> {
    let mut locks = MASTER_START.lock().unwrap_or_else(|e| e.into_inner());
    locks.get_or_insert_with(HashMap::new).entry(socket.to_path_buf()).or_default().clone()
}

/// The string the remote login shell runs for `spec` (see the module doc). Scripts are read
/// from this machine.
pub(crate) fn remote_command(spec: &Spec) -> Result<String, String> {
    let mut out = String::new();
    if let Some(dir) = &spec.workdir {
        let dir = dir.to_str().ok_or("the working directory is not valid UTF-8")?;
        out.push_str("cd -- ");
        out.push_str(&shell_quote(dir));
        out.push_str(" && ");
    }
    if let Some(error) = spec.env_error() {
        return Err(error);
    }
    for (name, value) in &spec.env {
        out.push_str(name);
        out.push('=');
        out.push_str(&shell_quote(value));
        out.push(' ');
    }
    match &spec.program {
        Program::Argv(argv) => {
            if argv.is_empty() {
                return Err("the command is empty".to_owned());
            }
            let words: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
            out.push_str(&words.join(" "));
        }
        Program::Script { path, args } => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("failed to read script {}: {e}", path.display()))?;
            let name = path.to_str().ok_or("the script path is not valid UTF-8")?;
            out.push_str("sh -euc ");
            out.push_str(&shell_quote(&text));
            out.push(' ');
            out.push_str(&shell_quote(name));
            for arg in args {
                out.push(' ');
                out.push_str(&shell_quote(arg));
            }
        }
        Program::Shell(line) => {
            out.push_str("sh -c ");
            out.push_str(&shell_quote(line));
        }
        Program::Http { .. } => return Err("the ssh executor runs commands, not http requests".to_owned()),
    }
    if out.len() > MAX_REMOTE_COMMAND {
        return Err(format!(
            "the remote command is {} bytes; one shell argument holds at most {MAX_REMOTE_COMMAND}",
            out.len()
        ));
    }
    Ok(out)
}

/// The file name of `path` with every character but `[A-Za-z0-9._-]` replaced by `_`: safe inside
/// a quoted remote path.
fn plain_name(path: &Path) -> String {
    path.file_name()
        .map(|f| {
            f.to_string_lossy()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' })
                .collect()
        })
        .unwrap_or_default()
}

/// Runs commands on `host` with the system `ssh` (see the module doc for the remote command and
/// the host key policy).
///
/// With `control_dir`, one multiplexing master per host/port/user is started on first use
/// (`ControlMaster`, `ControlPersist=60s`) and later runs reuse its connection (about 11 ms a
/// command instead of about 230 ms). Keep `control_dir` short: the socket path
/// (`<dir>/<user>@<host>:<port>`) must fit in 104 bytes.
///
/// On timeout or cancel, the local `ssh` client is stopped and then the remote command's process
/// group too, through a second `ssh` (see `remote_group.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshExecutor {
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
    /// Private key file (`-i`, with `IdentitiesOnly=yes`).
    pub key: Option<PathBuf>,
    /// The only known_hosts file to trust.
    pub known_hosts: Option<PathBuf>,
    pub control_dir: Option<PathBuf>,
}

impl SshExecutor {
    pub fn new(host: impl Into<String>, port: u16) -> SshExecutor {
        SshExecutor { host: host.into(), port, user: None, key: None, known_hosts: None, control_dir: None }
    }

    /// From a resource's `access.ssh`.
    pub fn from_access(access: &opsgraph_core::model::SshAccess, control_dir: Option<PathBuf>) -> SshExecutor {
        SshExecutor {
            host: access.host.clone(),
            port: access.port,
            user: access.user.clone(),
            key: access.key.as_ref().map(PathBuf::from),
            known_hosts: access.known_hosts.as_ref().map(PathBuf::from),
            control_dir,
        }
    }

    fn control_path(&self) -> Option<PathBuf> {
        let dir = self.control_dir.as_ref()?;
        let name: String = format!("{}@{}:{}", self.user.as_deref().unwrap_or(""), self.host, self.port)
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || "._@:-".contains(c) { c } else { '_' })
            .collect();
        Some(dir.join(name))
    }

    /// Options common to every `ssh` invocation.
    fn options(&self) -> Result<Vec<String>, String> {
        let mut args: Vec<String> = [
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "ServerAliveCountMax=3",
            "-o",
            "ForwardAgent=no",
            "-o",
            "ForwardX11=no",
            "-o",
            "ClearAllForwardings=yes",
            "-o",
            "LogLevel=ERROR",
        ]
        .map(str::to_owned)
        .into();
        args.extend(["-p".to_owned(), self.port.to_string()]);
        if let Some(file) = &self.known_hosts {
            args.extend(["-o".to_owned(), format!("UserKnownHostsFile={}", option_path(file)?)]);
            args.extend(["-o".to_owned(), "GlobalKnownHostsFile=/dev/null".to_owned()]);
        }
        if let Some(key) = &self.key {
            args.extend(["-i".to_owned(), path_str(key)?.to_owned(), "-o".to_owned(), "IdentitiesOnly=yes".to_owned()]);
        }
        if let Some(user) = &self.user {
            args.extend(["-l".to_owned(), user.clone()]);
        }
        if let Some(path) = self.control_path() {
            args.extend(["-o".to_owned(), format!("ControlPath={}", option_path(&path)?)]);
        }
        Ok(args)
    }

    /// Starts the multiplexing master unless its socket exists. Failures are left to the run
    /// itself, which then connects on its own and reports them.
    fn ensure_master(&self, options: &[String]) {
        let (Some(dir), Some(socket)) = (&self.control_dir, self.control_path()) else {
            return;
        };
        let lock = master_lock(&socket);
        let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        if socket.exists() {
            return;
        }
        let _ = std::fs::create_dir_all(dir);
        // `-f` forks after authentication; the master keeps stdout and stderr, so they are null.
        let _ = Command::new("ssh")
            .args(options)
            .args(["-o", "ControlMaster=yes", "-o"])
            .arg(format!("ControlPersist={CONTROL_PERSIST}"))
            .args(["-f", "-N", "--", &self.host])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Stops the multiplexing master, if there is one.
    pub fn close(&self) {
        let Some(socket) = self.control_path() else {
            return;
        };
        if !socket.exists() {
            return;
        }
        if let Ok(options) = self.options() {
            let _ = Command::new("ssh")
                .args(&options)
                .args(["-O", "exit", "--", &self.host])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl SshExecutor {
    /// One helper command on the host (through the master when there is one): its stdout, or
    /// why it failed.
    fn helper(&self, options: &[String], remote: &str, stdin: Option<&Path>) -> Result<Vec<u8>, String> {
        let mut cmd = Command::new("ssh");
        cmd.args(options).args(["-o", "ControlMaster=no", "--", &self.host, remote]);
        cmd.stdin(match stdin {
            Some(path) => {
                Stdio::from(std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?)
            }
            None => Stdio::null(),
        });
        let out = cmd.output().map_err(|e| format!("failed to start ssh: {e}"))?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            Err(format!("`{remote}` failed on {}: {}", self.host, err.trim()))
        }
    }

    /// Makes the remote directory and uploads the files of `transfer`; returns the directory and
    /// the spec to run there.
    fn stage_in(&self, options: &[String], spec: &Spec, transfer: &crate::Transfer) -> Result<(String, Spec), String> {
        let made = self.helper(
            options,
            "umask 077 && d=$(mktemp -d \"${TMPDIR:-/tmp}/opsgraph.XXXXXXXX\") && mkdir \"$d/in\" \"$d/out\" && printf %s \"$d\"",
            None,
        )?;
        let dir = String::from_utf8(made).map_err(|_| "the remote temporary directory is not UTF-8".to_owned())?;
        if !dir.starts_with('/') || dir.contains(['\n', '\'']) {
            return Err(format!("unexpected remote temporary directory `{dir}`"));
        }
        let mut staged = spec.clone();
        staged.workdir = Some(PathBuf::from(&dir));
        for (n, name) in transfer.upload.iter().enumerate() {
            let Some(local) = spec.env.get(name) else { continue };
            let target = format!("{dir}/in/{n}-{}", plain_name(Path::new(local)));
            self.helper(options, &format!("umask 077 && cat > {}", shell_quote(&target)), Some(Path::new(local)))?;
            staged.env.insert(name.clone(), target);
        }
        if let Some(b) = transfer.bundle.as_ref().filter(|b| !b.files.is_empty()) {
            let bundle = format!("{dir}/lib");
            self.helper(options, &format!("mkdir -m 700 -- {}", shell_quote(&bundle)), None)?;
            for file in &b.files {
                let name = plain_name(file);
                if name.is_empty() || name.starts_with('.') {
                    return Err(format!("`{}` has no plain file name", file.display()));
                }
                let target = shell_quote(&format!("{bundle}/{name}"));
                self.helper(options, &format!("umask 077 && cat > {target}"), Some(file))?;
            }
            staged.env.insert(b.env.clone(), bundle);
        }
        if let Some(d) = &transfer.download {
            staged.env.insert(d.env.clone(), format!("{dir}/out"));
        }
        Ok((dir, staged))
    }

    /// Fetches the produced files, then removes the remote directory. Missing files are skipped
    /// (the caller reports what was not produced).
    fn stage_out(&self, options: &[String], dir: &str, transfer: &crate::Transfer) -> Result<(), String> {
        let mut result = Ok(());
        if let Some(d) = &transfer.download {
            for file in &d.files {
                if file.is_empty() || file.contains('/') || file == "." || file == ".." {
                    result = Err(format!("`{file}` is not a plain file name"));
                    break;
                }
                let remote = format!("{dir}/out/{file}");
                let q = shell_quote(&remote);
                match self.helper(
                    options,
                    &format!("if [ -f {q} ]; then printf 1; cat -- {q}; else printf 0; fi"),
                    None,
                ) {
                    Ok(bytes) if bytes.first() == Some(&b'1') => {
                        let write = std::fs::create_dir_all(&d.local_dir)
                            .and_then(|()| std::fs::write(d.local_dir.join(file), &bytes[1..]));
                        if let Err(e) = write {
                            result = Err(format!("cannot write {}: {e}", d.local_dir.join(file).display()));
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        let _ = self.helper(options, &format!("rm -rf -- {}", shell_quote(dir)), None);
        result
    }
}

impl Executor for SshExecutor {
    fn marks_runs(&self) -> bool {
        true
    }

    fn stop_marked(&self, mark: &str, grace: Duration) -> Option<String> {
        if !remote_group::is_token(mark) {
            return Some(remote_group::describe(&self.host, Err("the run's mark is not 32 hex digits".to_string())));
        }
        let answer = self.options().and_then(|options| {
            self.ensure_master(&options);
            self.stop_remote(&options, mark, grace)
        });
        Some(remote_group::describe(&self.host, answer))
    }

    fn run(&self, spec: &Spec, cancel: &Cancel) -> Run {
        if self.host.is_empty() || self.host.starts_with('-') {
            return Run::could_not_start(format!("invalid ssh host `{}`", self.host));
        }
        let Some(transfer) = spec.transfer.as_ref() else { return self.run_here(spec, cancel) };
        if transfer.is_empty() {
            // The control host's directory means nothing there: run in the login directory.
            return self.run_here(&Spec { workdir: None, ..spec.clone() }, cancel);
        }
        let options = match self.options() {
            Ok(options) => options,
            Err(error) => return Run::could_not_start(error),
        };
        self.ensure_master(&options);
        let (dir, staged) = match self.stage_in(&options, spec, transfer) {
            Ok(staged) => staged,
            Err(error) => return Run::could_not_start(format!("could not stage files on {}: {error}", self.host)),
        };
        let mut run = self.run_here(&staged, cancel);
        if let Err(error) = self.stage_out(&options, &dir, transfer) {
            if run.outcome.is_success() {
                run.outcome = Outcome::Lost { reason: format!("could not fetch produced files: {error}") };
            }
        }
        run
    }
}

impl SshExecutor {
    fn run_here(&self, spec: &Spec, cancel: &Cancel) -> Run {
        let remote = match remote_command(spec) {
            Ok(remote) => remote,
            Err(error) => return Run::could_not_start(error),
        };
        let options = match self.options() {
            Ok(options) => options,
            Err(error) => return Run::could_not_start(error),
        };
        if cancel.is_cancelled() {
            return Run::cancelled();
        }
        let token = match &spec.mark {
            Some(mark) if remote_group::is_token(mark) => mark.clone(),
            Some(_) => return Run::could_not_start("the run's mark is not 32 hex digits".to_string()),
            None => match remote_group::token() {
                Ok(token) => token,
                Err(error) => return Run::could_not_start(error),
            },
        };
        let remote = remote_group::wrap(&remote, &token);
        if remote.len() > MAX_REMOTE_COMMAND {
            return Run::could_not_start(format!(
                "the remote command is {} bytes with its wrapper; one shell argument holds at most {MAX_REMOTE_COMMAND}",
                remote.len()
            ));
        }
        self.ensure_master(&options);
        let mut cmd = Command::new("ssh");
        // The local client keeps the control plane's environment (HOME, SSH_AUTH_SOCK): it is ours.
        cmd.args(&options).args(["-o", "ControlMaster=no", "--", &self.host, &remote]);
        let mut run = process::run(cmd, "ssh", spec, cancel);
        if matches!(run.outcome, Outcome::TimedOut { .. } | Outcome::Cancelled) {
            // The local client is gone; the remote command is not (see remote_group.rs).
            run.remote_stop = Some(remote_group::describe(&self.host, self.stop_remote(&options, &token, spec.grace)));
            return run;
        }
        if run.outcome == (Outcome::Exited { code: 125 })
            && run.output.stderr_lossy().contains("opsgraph: cannot record the process group")
        {
            run.outcome = Outcome::CouldNotStart { error: run.output.stderr_lossy().trim().to_owned() };
            return run;
        }
        if let Outcome::Exited { code: 255 } = run.outcome {
            if let Some(outcome) = classify_ssh_failure(&run.output.stderr_lossy()) {
                run.outcome = outcome;
            } else if let Some(error) = self.unreachable(&options) {
                // A multiplexed session whose master lost the host exits 255 and says nothing
                // (the master's own words go nowhere): a fresh connection tells what happened.
                run.outcome = Outcome::Lost { reason: format!("the connection dropped mid-run and {error}") };
            }
        }
        run
    }

    /// Runs the kill script for `token` on the host (through the master when there is one), with
    /// a limit of its own: its stdout, or why it failed.
    fn stop_remote(&self, options: &[String], token: &str, grace: Duration) -> Result<String, String> {
        let mut cmd = Command::new("ssh");
        cmd.args(options).args(["-o", "ControlMaster=no", "--", &self.host, &remote_group::kill_script(token, grace)]);
        let limit = grace + STOP_LIMIT;
        let spec = Spec { timeout: Some(limit), ..Spec::argv(["ssh"]) };
        let run = process::run(cmd, "ssh", &spec, &Cancel::new());
        match run.outcome {
            Outcome::Exited { code: 0 } => Ok(run.output.stdout_lossy()),
            Outcome::Exited { code: 255 } => Err(match classify_ssh_failure(&run.output.stderr_lossy()) {
                Some(Outcome::CouldNotStart { error } | Outcome::Lost { reason: error }) => error,
                _ => format!("ssh exited with 255: {}", run.output.stderr_lossy().trim()),
            }),
            Outcome::Exited { .. } => Err(run.output.stderr_lossy().trim().to_owned()),
            Outcome::TimedOut { .. } => {
                Err(format!("no answer from the host within {}", crate::duration::format_duration(limit)))
            }
            other => Err(other.to_string()),
        }
    }

    /// Connects afresh (not through the master) and runs `true`: `None` when the host answers,
    /// else why it does not (`ssh: connect to host …: No route to host`).
    fn unreachable(&self, options: &[String]) -> Option<String> {
        // ssh keeps the first value it is given for an option: these come before `options`
        // (which name the master's ControlPath), or the probe would try the dead master's
        // socket first and report that instead of the host.
        let out = Command::new("ssh")
            .args(["-o", "ControlMaster=no", "-o", "ControlPath=none", "-o", "ConnectTimeout=5"])
            .args(options)
            .args(["--", &self.host, "true"])
            .stdin(Stdio::null())
            .output()
            .ok()?;
        if out.status.success() {
            return None;
        }
        match classify_ssh_failure(&String::from_utf8_lossy(&out.stderr)) {
            Some(Outcome::CouldNotStart { error }) | Some(Outcome::Lost { reason: error }) => {
                Some(format!("the host does not answer: {error}"))
            }
            _ => None,
        }
    }
}

fn path_str(path: &Path) -> Result<&str, String> {
    path.to_str().ok_or_else(|| format!("path {} is not valid UTF-8", path.display()))
}

/// A path as an `ssh -o` value: quoted when it holds spaces (the value is a list).
fn option_path(path: &Path) -> Result<String, String> {
    let s = path_str(path)?;
    if s.contains(['"', '%']) {
        return Err(format!("path {s} holds `\"` or `%`, which ssh options cannot carry"));
    }
    Ok(if s.contains(char::is_whitespace) { format!("\"{s}\"") } else { s.to_owned() })
}

/// `ssh` exits 255 for its own failures, and a remote command may exit 255 too. Its stderr tells
/// which: a failure before the command ran (connection, host key, authentication) could not
/// start; a dropped connection is lost; anything else is the command's own 255.
fn classify_ssh_failure(stderr: &str) -> Option<Outcome> {
    const LOST: &[&str] = &[
        "closed by remote host",
        "Broken pipe",
        "Connection reset",
        "Timeout, server",
        "client_loop:",
        "packet_write_wait",
    ];
    const NOT_STARTED: &[&str] = &[
        "Host key verification failed",
        "REMOTE HOST IDENTIFICATION HAS CHANGED",
        "host key for",
        "Permission denied",
        "Too many authentication failures",
        "Could not resolve hostname",
        "Connection refused",
        "Connection timed out",
        "No route to host",
        "Network is unreachable",
        "kex_exchange_identification",
        "banner exchange",
        "Connection closed by",
        "Unable to negotiate",
        "Bad configuration option",
        "Identity file",
        "Load key",
    ];
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if let Some(line) = lines.iter().rev().find(|l| LOST.iter().any(|p| l.contains(p))) {
        return Some(Outcome::Lost { reason: format!("ssh: {}", line.trim_start_matches("ssh: ")) });
    }
    let line = lines.iter().find(|l| NOT_STARTED.iter().any(|p| l.contains(p)))?;
    Some(Outcome::CouldNotStart { error: format!("ssh: {}", line.trim_start_matches("ssh: ")) })
}
