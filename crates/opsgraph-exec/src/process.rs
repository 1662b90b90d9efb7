//! One child process in its own process group, to its end: capture, timeout, cancel, TERM/KILL.
//! Shared by the local executor and the SSH executor (which runs the local `ssh` client).

use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::capture::Capture;
use crate::spec::CANCEL_POLL;
use crate::{Cancel, Outcome, Output, Run, Spec};

/// How long output pipes may stay open after the leader exited before the holders count as
/// leaked.
const LEAK_TIMEOUT: Duration = Duration::from_millis(250);
/// How long to wait for pipes to close after SIGKILL (holders that left the group keep them).
const AFTER_KILL: Duration = Duration::from_millis(500);
const GROUP_POLL: Duration = Duration::from_millis(10);

enum Event {
    Exited(io::Result<ExitStatus>),
    Eof,
}

#[derive(Clone, Copy)]
enum Stop {
    Timeout,
    Cancel,
}

/// Spawns `cmd` (its program, arguments, environment and directory already set) and runs it to
/// its end under `spec`'s limits. `what` names it in a could-not-start message.
pub(crate) fn run(mut cmd: Command, what: &str, spec: &Spec, cancel: &Cancel) -> Run {
    if cancel.is_cancelled() {
        return Run::cancelled();
    }
    cmd.process_group(0)
        .stdin(if spec.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return Run::could_not_start(format!("failed to start {what}: {e}")),
    };
    let pgid = child.id() as i32;
    let (tx, rx) = mpsc::channel();

    if let (Some(mut stdin), Some(bytes)) = (child.stdin.take(), spec.stdin.clone()) {
        // A program need not read its input: a broken pipe here is not an error.
        thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    let captures = [Capture::new(spec.output_cap), Capture::new(spec.output_cap)].map(|c| Arc::new(Mutex::new(c)));
    let mut open_streams = 0;
    if let Some(stdout) = child.stdout.take() {
        open_streams += 1;
        spawn_reader(stdout, captures[0].clone(), tx.clone());
    }
    if let Some(stderr) = child.stderr.take() {
        open_streams += 1;
        spawn_reader(stderr, captures[1].clone(), tx.clone());
    }
    thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send(Event::Exited(status));
    });

    let mut waiter = Waiter { rx, open_streams, status: None };
    let deadline = spec.timeout.map(|t| start + t);
    let mut stop: Option<(Stop, Instant)> = None;
    let mut killed = false;

    // Until the leader exits.
    while waiter.status.is_none() {
        let now = Instant::now();
        let mut wake = now + CANCEL_POLL;
        match stop {
            None => wake = deadline.map_or(wake, |d| wake.min(d)),
            Some((_, termed)) if !killed => wake = wake.min(termed + spec.grace),
            Some(_) => {}
        }
        waiter.wait_until(wake);
        if waiter.status.is_some() {
            break;
        }
        let now = Instant::now();
        match stop {
            None => {
                let why = if cancel.is_cancelled() {
                    Some(Stop::Cancel)
                } else if deadline.is_some_and(|d| now >= d) {
                    Some(Stop::Timeout)
                } else {
                    None
                };
                if let Some(why) = why {
                    signal_group(pgid, Signal::SIGTERM);
                    stop = Some((why, now));
                }
            }
            Some((_, termed)) if !killed && now >= termed + spec.grace => {
                signal_group(pgid, Signal::SIGKILL);
                killed = true;
            }
            Some(_) => {}
        }
    }

    // The leader is gone. After TERM, the rest of the group must go too; after a normal exit,
    // only what holds the output open is stopped.
    let mut leaked = false;
    match stop {
        Some((_, termed)) => {
            if !killed {
                let grace_end = termed + spec.grace;
                while group_alive(pgid) && Instant::now() < grace_end {
                    waiter.pause(GROUP_POLL.min(grace_end.saturating_duration_since(Instant::now())));
                }
                if group_alive(pgid) {
                    signal_group(pgid, Signal::SIGKILL);
                    killed = true;
                }
            }
            waiter.wait_until(Instant::now() + AFTER_KILL);
        }
        None => {
            waiter.wait_until(Instant::now() + LEAK_TIMEOUT);
            if waiter.open_streams > 0 {
                leaked = true;
                signal_group(pgid, Signal::SIGTERM);
                waiter.wait_until(Instant::now() + spec.grace);
                if waiter.open_streams > 0 {
                    signal_group(pgid, Signal::SIGKILL);
                    waiter.wait_until(Instant::now() + AFTER_KILL);
                }
            }
        }
    }

    let outcome = match (stop, waiter.status) {
        (Some((Stop::Timeout, _)), _) => Outcome::TimedOut { after: spec.timeout.unwrap_or_default(), killed },
        (Some((Stop::Cancel, _)), _) => Outcome::Cancelled,
        (None, Some(Ok(status))) => match (status.code(), status.signal()) {
            (Some(code), _) => Outcome::Exited { code },
            (None, Some(signal)) => Outcome::Signalled { signal },
            (None, None) => Outcome::Lost { reason: format!("unknown wait status {status:?}") },
        },
        (None, Some(Err(e))) => Outcome::Lost { reason: format!("failed to wait for the process: {e}") },
        (None, None) => Outcome::Lost { reason: "the process could not be waited for".to_owned() },
    };
    let [stdout, stderr] = captures.map(|c| {
        let c = c.lock().unwrap_or_else(|e| e.into_inner());
        (c.bytes(), c.truncated())
    });
    Run {
        outcome,
        output: Output {
            truncated: stdout.1 || stderr.1,
            stdout: stdout.0,
            stderr: stderr.0,
            duration: start.elapsed(),
        },
        http_status: None,
        leaked,
    }
}

struct Waiter {
    rx: mpsc::Receiver<Event>,
    open_streams: u32,
    status: Option<io::Result<ExitStatus>>,
}

impl Waiter {
    /// Waits `d`, taking events meanwhile.
    fn pause(&mut self, d: Duration) {
        let until = Instant::now() + d;
        self.wait_until(until);
        thread::sleep(until.saturating_duration_since(Instant::now()));
    }

    /// Takes events until `until`, or until the leader exited (when it had not), or until both
    /// streams closed (when the leader had exited).
    fn wait_until(&mut self, until: Instant) {
        let had_exited = self.status.is_some();
        loop {
            if had_exited && self.open_streams == 0 {
                return;
            }
            let left = until.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Event::Exited(status)) => {
                    self.status = Some(status);
                    if !had_exited {
                        return;
                    }
                }
                Ok(Event::Eof) => self.open_streams = self.open_streams.saturating_sub(1),
                Err(RecvTimeoutError::Timeout) => return,
                Err(RecvTimeoutError::Disconnected) => {
                    // Every thread is done: nothing more will come.
                    self.open_streams = 0;
                    if self.status.is_none() {
                        self.status = Some(Err(io::Error::other("the waiting thread ended")));
                    }
                    return;
                }
            }
        }
    }
}

fn spawn_reader(mut stream: impl Read + Send + 'static, capture: Arc<Mutex<Capture>>, tx: mpsc::Sender<Event>) {
    thread::spawn(move || {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => capture.lock().unwrap_or_else(|e| e.into_inner()).push(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = tx.send(Event::Eof);
    });
}

fn signal_group(pgid: i32, signal: Signal) {
    if pgid > 1 {
        // ESRCH (nobody left) is the good case.
        let _ = killpg(Pid::from_raw(pgid), signal);
    }
}

/// Whether a live process is left in the group. Zombies do not count: where PID 1 does not reap
/// orphans (containers), a dead grandchild stays a zombie in the group forever.
pub(crate) fn group_alive(pgid: i32) -> bool {
    if pgid <= 1 || killpg(Pid::from_raw(pgid), None).is_err() {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else {
            return false;
        };
        process_state(pid).is_some_and(|(state, pgrp)| pgrp == pgid && state != 'Z' && state != 'X')
    })
}

/// State letter and process group of a process, from `/proc/<pid>/stat`.
pub(crate) fn process_state(pid: &str) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}
