//! How a run ended.

use std::fmt;
use std::time::Duration;

use crate::duration::format_duration;

/// Every way a run can end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The program ran and exited with this code (an HTTP request that got a 2xx: code 0).
    Exited { code: i32 },
    /// Nothing ran: the program, script or working directory was not found, a name was invalid,
    /// the SSH connection or authentication failed, the HTTP server could not be reached.
    CouldNotStart { error: String },
    /// The timeout elapsed; the group got SIGTERM and, when it outlived the grace, SIGKILL.
    TimedOut { after: Duration, killed: bool },
    /// The program was killed by a signal nobody here sent.
    Signalled { signal: i32 },
    /// The [`crate::Cancel`] token was cancelled; the group got TERM, grace, KILL.
    Cancelled,
    /// The run started but we cannot tell how it ended (the SSH connection dropped, the HTTP
    /// response was cut off, the process could not be waited for).
    Lost { reason: String },
    /// The HTTP server answered with a status outside 2xx.
    HttpStatus { status: u16 },
}

impl Outcome {
    /// Exited with code 0.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Exited { code: 0 })
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Exited { code } => write!(f, "exited with code {code}"),
            Outcome::CouldNotStart { error } => write!(f, "could not start: {error}"),
            Outcome::TimedOut { after, killed: false } => {
                write!(f, "timed out after {}", format_duration(*after))
            }
            Outcome::TimedOut { after, killed: true } => {
                write!(f, "timed out after {} (killed: it outlived SIGTERM)", format_duration(*after))
            }
            Outcome::Signalled { signal } => write!(f, "killed by signal {signal}"),
            Outcome::Cancelled => f.write_str("cancelled"),
            Outcome::Lost { reason } => write!(f, "lost: {reason}"),
            Outcome::HttpStatus { status } => write!(f, "http status {status}"),
        }
    }
}

/// What a run printed (or an HTTP response's body, as stdout).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// A stream was longer than the cap: its middle was replaced by a marker line.
    pub truncated: bool,
    /// From the start to the end of the run (including draining the output).
    pub duration: Duration,
}

impl Output {
    pub fn stdout_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// One run: how it ended and what it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub outcome: Outcome,
    pub output: Output,
    /// The status of the HTTP response, when there was one.
    pub http_status: Option<u16>,
    /// Processes of the run's group kept its output open after it ended and were terminated.
    pub leaked: bool,
    /// After a timeout or cancel over SSH: what became of the remote command's process group
    /// (terminated, killed, already gone, or why stopping it failed). `None` elsewhere.
    pub remote_stop: Option<String>,
}

impl Run {
    pub(crate) fn cancelled() -> Run {
        Run {
            outcome: Outcome::Cancelled,
            output: Output::default(),
            http_status: None,
            leaked: false,
            remote_stop: None,
        }
    }

    pub(crate) fn could_not_start(error: impl Into<String>) -> Run {
        Run {
            outcome: Outcome::CouldNotStart { error: error.into() },
            output: Output::default(),
            http_status: None,
            leaked: false,
            remote_stop: None,
        }
    }
}
