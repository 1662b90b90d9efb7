//! Running things: a local process, a command over SSH, one HTTP request, and evidence checks.
//!
//! A [`Spec`] says what to run ([`Program`], environment, working directory, timeout, grace,
//! output cap, stdin); an [`Executor`] runs it and returns a [`Run`]: one [`Outcome`] that names
//! every way a run can end (exited with a code, could not start, timed out, killed by a signal,
//! cancelled, lost, or an HTTP status outside 2xx) plus the captured [`Output`]. Everything is
//! synchronous: a run blocks its thread; the runtime runs many on many threads.
//!
//! # Why argv, not a shell
//!
//! Commands are exec'd directly whenever they can be ([`program_for`] keeps a `Line` as a shell
//! line only when it holds shell syntax). Spawning through `sh -c` costs about 1 ms more per job
//! (0.8 ms for `/bin/true` against 1.85 ms through a shell on the CI machine), and, more
//! importantly, argv has no second parser: a parameter is one argv element or one environment
//! variable ([`param_env`]) and can never become code. Parameters never reach a shell line by
//! interpolation here.
//!
//! # The timeout state machine
//!
//! Every local process (and the local `ssh` client of a remote command) starts as the leader of a
//! new process group, so signals reach everything it started:
//!
//! ```text
//! running ──exit──────────────────────────────────────────────→ Exited / Signalled
//!    │ deadline or cancel
//!    ↓
//! SIGTERM to the group ──group gone within `grace`──────────────→ TimedOut{killed: false} / Cancelled
//!    │ grace elapsed, something of the group still alive
//!    ↓
//! SIGKILL to the group ─────────────────────────────────────────→ TimedOut{killed: true} / Cancelled
//! ```
//!
//! "Gone" means no live (non-zombie) process is left in the group, not only that the leader
//! exited: a shell that dies on TERM while its child traps it still gets the KILL. After a normal
//! exit, processes that keep the output pipes open are waited for 250 ms (the leader may have
//! exited just before them); then they get the same TERM, grace, KILL and the run is marked
//! `leaked`. Background processes that redirected their output are left alone: a job that wants
//! something to outlive it must detach it properly (or hand it to systemd).
//!
//! Every process starts `OPSGRAPH_JOBS_NICE` nice steps below the thread that asked for it (10
//! by default; `priority.rs`): the control plane keeps its turn on a CPU while jobs run.
//!
//! Every group is also registered with this process's guardian (`guard.rs`), which kills it if
//! this process dies first (`kill -9` included): no job outlives its driver.
//!
//! Over SSH the local client is signalled as above, and then the remote command's own process
//! group, through a second `ssh` (`remote_group.rs`): OpenSSH has no way to signal a remote command
//! without a terminal, and a remote process that neither reads stdin nor writes output would
//! otherwise outlive the run. [`Run::remote_stop`] says what that did.
//!
//! # Secrets and captured output
//!
//! - Environment variables are how parameters (secret ones included) reach commands. Locally they
//!   are readable by the same user and root through `/proc/<pid>/environ`. Over SSH they travel
//!   as shell-quoted assignments inside the remote command, so for the moment between `sshd`
//!   starting the login shell and the shell exec'ing the program they are visible in the remote
//!   host's process list.
//! - Output is captured raw, up to [`Spec::output_cap`] bytes per stream (the head and the tail;
//!   the middle is replaced by a marker and the run is marked truncated). Nothing here masks
//!   secret values: the caller masks before it stores or shows output. A secret cut by the
//!   truncation marker can survive masking in pieces, so mask with the prefixes in mind or cap
//!   generously.
//! - `Spec`'s `Debug` prints environment names, not values.
//! - Unless [`Spec::inherit_env`] is set, a local job sees only its own environment (plus a
//!   fixed `PATH` when it sets none), never the control plane's variables.

mod capture;
mod duration;
mod evidence;
mod guard;
mod http;
mod local;
mod outcome;
mod priority;
mod process;
mod procfs;
mod quote;
mod remote_group;
mod spec;
mod ssh;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_http_evidence;
#[cfg(test)]
mod tests_remote_stop;
#[cfg(test)]
mod tests_ssh;

pub use duration::parse_duration;
pub use evidence::{check_evidence, EvidenceResult};
pub use guard::stop_leftovers;
pub use http::HttpExecutor;
pub use local::LocalExecutor;
pub use outcome::{Outcome, Output, Run};
pub use priority::{job_thread, jobs_nice, DEFAULT_JOBS_NICE};
pub use quote::shell_quote;

/// Starts this process's guardian (`guard.rs`) now rather than at the first spawn: a command
/// about to run jobs calls it on a thread of its own while it loads its inputs and opens its
/// store, so the first job does not wait for the guardian's `sh` to start. The executor still
/// makes sure of the guardian before every spawn, as without this call.
pub fn start_guardian() -> std::io::Result<()> {
    guard::ensure()
}
pub use spec::{param_env, program_for, Bundle, Cancel, Download, Program, Spec, Tee, TeeFn, Transfer};
pub use ssh::SshExecutor;

/// Runs a [`Spec`] somewhere. Implementations never panic on bad input: what cannot run comes
/// back as [`Outcome::CouldNotStart`].
pub trait Executor: Send + Sync {
    /// Runs `spec` to its end; polls `cancel` while it waits.
    fn run(&self, spec: &Spec, cancel: &Cancel) -> Run;

    /// Whether commands run on this machine. File evidence is then read in-process; otherwise it
    /// is read through the executor on the target.
    fn is_local(&self) -> bool {
        false
    }

    /// Whether its runs carry a mark on their target that [`Executor::stop_marked`] can find
    /// after the caller died (SSH: a remote command outlives the client that started it).
    fn marks_runs(&self) -> bool {
        false
    }

    /// Stops what is left of the run that carried `mark` on the target (SIGTERM, `grace`,
    /// SIGKILL), as a timed-out run is stopped; the sentence saying what was found and done, or
    /// why stopping failed. `None` when this executor marks no runs.
    fn stop_marked(&self, mark: &str, grace: std::time::Duration) -> Option<String> {
        let _ = (mark, grace);
        None
    }
}

/// A fresh mark for a remote run ([`Spec::mark`]): 32 hex digits from the kernel's generator.
pub fn new_mark() -> Result<String, String> {
    remote_group::token()
}

/// What the few fallible helpers of this crate report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("invalid duration `{input}`: {reason}")]
    InvalidDuration { input: String, reason: &'static str },
    #[error("invalid url `{url}`: {reason}")]
    InvalidUrl { url: String, reason: &'static str },
}
