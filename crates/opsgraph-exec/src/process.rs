//! One child process in its own process group, to its end: capture, timeout, cancel, TERM/KILL.
//! Shared by the local executor and the SSH executor (which runs the local `ssh` client).
//!
//! The calling thread does all the waiting: it reads both output pipes with `poll(2)` and reaps
//! the leader with `try_wait`, so a run costs no thread of its own (one only to feed stdin, when
//! there is some). The same `poll` watches a pidfd of the leader (`pidfd_open(2)`), so end of
//! output and the leader's exit each wake it at once, whichever comes first: output held open by
//! something the leader left behind does not hide its exit, and nothing wakes to look in
//! between (a wide DAG of short jobs spent most of its executor's time in those wake-ups, issue
//! [N] 5). Where the kernel has no pidfds (before Linux 5.3, or a sandbox refusing the call), it
//! wakes every few milliseconds to see whether the leader exited, as it did before.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use rustix::process::PidfdFlags;

use crate::capture::Capture;
use crate::spec::CANCEL_POLL;
use crate::{Cancel, Outcome, Output, Run, Spec};

/// How long output pipes may stay open after the leader exited before the holders count as
/// leaked.
const LEAK_TIMEOUT: Duration = Duration::from_millis(250);
/// How long to wait for pipes to close after SIGKILL (holders that left the group keep them).
const AFTER_KILL: Duration = Duration::from_millis(500);
const GROUP_POLL: Duration = Duration::from_millis(10);
/// Without a pidfd: how often a running leader whose output is still open is checked for having
/// exited: often in its first second, when most commands end, then less. Output held open by
/// another process hides the exit from `poll` (an `ssh` client on a multiplexed connection: the
/// master holds its descriptors), so this interval is what such a run waits beyond its end; at a
/// flat 10 ms it added 5 ms on average to every job over a warm SSH connection.
const EXIT_POLL_FIRST: Duration = Duration::from_millis(1);
const EXIT_POLL: Duration = Duration::from_millis(10);
const EXIT_POLL_FIRST_FOR: Duration = Duration::from_secs(1);
/// Without a pidfd: the first nap while waiting for a leader whose output is closed (it is
/// usually exiting).
const FIRST_NAP: Duration = Duration::from_micros(50);
/// The size of a read from an output pipe.
const READ_BUF: usize = 32 * 1024;

thread_local! {
    /// The read buffer of this thread's last run, kept for its next one: a run zeroed and freed
    /// a new 32 KiB one, a few microseconds a job where short jobs run back to back on a thread
    /// (a wide DAG's workers, issue [N] 5). Taken for a run and put back after it, so a run
    /// inside a run (a tee that runs something) takes a buffer of its own.
    static SPARE_BUF: Cell<Option<Box<[u8]>>> = const { Cell::new(None) };
}

/// A read buffer: this thread's spare one, or a new one.
fn take_buf() -> Box<[u8]> {
    SPARE_BUF.take().unwrap_or_else(|| vec![0u8; READ_BUF].into_boxed_slice())
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
    crate::guard::mark(&mut cmd);
    cmd.process_group(0)
        .stdin(if spec.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The guardian runs before the group exists, so registering it is one write.
    if let Err(e) = crate::guard::ensure() {
        return Run::could_not_start(format!("failed to start {what}: the process guardian did not start: {e}"));
    }
    let start = Instant::now();
    // Below the control plane's priority (`priority.rs`).
    let mut child = match crate::priority::spawn(cmd) {
        Ok(child) => child,
        Err(e) => return Run::could_not_start(format!("failed to start {what}: {e}")),
    };
    let pgid = child.id() as i32;
    // Readable once the leader exited; the child is not reaped before, so its pid cannot have
    // been reused. Without one the waiter looks every few milliseconds.
    let exit = rustix::process::pidfd_open(rustix::process::Pid::from_child(&child), PidfdFlags::empty()).ok();
    // Registered with this process's guardian, so the group dies with this process.
    if let Err(e) = crate::guard::register(pgid) {
        signal_group(pgid, Signal::SIGKILL);
        let _ = child.wait();
        return Run::could_not_start(format!("failed to start {what}: the process guardian did not start: {e}"));
    }

    if let (Some(mut stdin), Some(bytes)) = (child.stdin.take(), spec.stdin.clone()) {
        // A program need not read its input: a broken pipe here is not an error.
        thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    let stdout = child.stdout.take().map(|s| File::from(OwnedFd::from(s)));
    let stderr = child.stderr.take().map(|s| File::from(OwnedFd::from(s)));
    let mut waiter = Waiter {
        started: start,
        child,
        exit,
        exit_seen: false,
        streams: [stdout, stderr],
        captures: [Capture::new(spec.output_cap), Capture::new(spec.output_cap)],
        status: None,
        buf: take_buf(),
        tee: spec.tee.clone(),
    };
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
            if waiter.open_streams() > 0 {
                leaked = true;
                signal_group(pgid, Signal::SIGTERM);
                waiter.wait_until(Instant::now() + spec.grace);
                if waiter.open_streams() > 0 {
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
    crate::guard::unregister(pgid);
    SPARE_BUF.set(Some(std::mem::take(&mut waiter.buf)));
    let [stdout, stderr] = waiter.captures.map(|c| (c.bytes(), c.truncated()));
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
        remote_stop: None,
    }
}

struct Waiter {
    started: Instant,
    child: Child,
    /// A pidfd of the leader: `poll` wakes when it exits.
    exit: Option<OwnedFd>,
    /// The pidfd was readable: the leader exited and may be reaped.
    exit_seen: bool,
    /// stdout and stderr while they are open.
    streams: [Option<File>; 2],
    captures: [Capture; 2],
    status: Option<io::Result<ExitStatus>>,
    buf: Box<[u8]>,
    tee: Option<crate::Tee>,
}

impl Waiter {
    fn open_streams(&self) -> usize {
        self.streams.iter().filter(|s| s.is_some()).count()
    }

    /// Waits `d`, taking output meanwhile.
    fn pause(&mut self, d: Duration) {
        let until = Instant::now() + d;
        self.wait_until(until);
        thread::sleep(until.saturating_duration_since(Instant::now()));
    }

    /// Takes output until `until`, or until the leader exited (when it had not), or until both
    /// streams closed (when the leader had exited).
    fn wait_until(&mut self, until: Instant) {
        let had_exited = self.status.is_some();
        let mut nap = FIRST_NAP;
        loop {
            // With a pidfd, reaped only once it said the leader exited: a `wait4` before that
            // finds it running (2 of 3 calls a short job were futile, issue [N] 5).
            if !had_exited && (self.exit.is_none() || self.exit_seen) {
                #[cfg(test)]
                tests::REAPS.with(|r| r.set(r.get() + 1));
                match self.child.try_wait() {
                    Ok(Some(status)) => self.status = Some(Ok(status)),
                    Ok(None) => {}
                    Err(e) => self.status = Some(Err(e)),
                }
                if self.status.is_some() {
                    return;
                }
                // Not expected once the pidfd is readable; polled again rather than trusted.
                self.exit_seen = false;
            } else if had_exited && self.open_streams() == 0 {
                return;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let watch_exit = !had_exited && self.exit.is_some();
            if self.open_streams() > 0 || watch_exit {
                let exit_poll = if self.started.elapsed() < EXIT_POLL_FIRST_FOR { EXIT_POLL_FIRST } else { EXIT_POLL };
                self.read_ready(if had_exited || watch_exit { left } else { left.min(exit_poll) }, watch_exit);
            } else {
                // Output closed, leader not reaped yet: it is most likely exiting right now.
                #[cfg(test)]
                tests::WAKES.with(|w| w.set(w.get() + 1));
                thread::sleep(nap.min(left));
                nap = (nap * 2).min(EXIT_POLL);
            }
        }
    }

    /// Waits at most `timeout` for output (and, with `watch_exit`, for the leader's exit), and
    /// reads what is there; end of file closes a stream.
    fn read_ready(&mut self, timeout: Duration, watch_exit: bool) {
        #[cfg(test)]
        tests::WAKES.with(|w| w.set(w.get() + 1));
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as u64;
        let mut ready = [false; 2];
        {
            let open: Vec<usize> = (0..2).filter(|i| self.streams[*i].is_some()).collect();
            let mut fds: Vec<PollFd<'_>> = open
                .iter()
                .filter_map(|i| self.streams[*i].as_ref())
                .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN))
                .collect();
            // After the streams: only their places are read below.
            if let Some(exit) = self.exit.as_ref().filter(|_| watch_exit) {
                fds.push(PollFd::new(exit.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)) {
                Ok(0) | Err(Errno::EINTR) => return,
                Ok(_) => {
                    for (fd, i) in fds.iter().zip(&open) {
                        ready[*i] = fd.revents().is_some_and(|r| !r.is_empty());
                    }
                    if watch_exit {
                        self.exit_seen = fds.last().and_then(PollFd::revents).is_some_and(|r| !r.is_empty());
                    }
                }
                // Not expected with valid descriptors; as a reader would, treat it as the end
                // (and look whether the leader exited).
                Err(_) => {
                    ready = [true; 2];
                    self.exit_seen = true;
                }
            }
        }
        for (i, is_ready) in ready.into_iter().enumerate() {
            let Some(stream) = self.streams[i].as_mut().filter(|_| is_ready) else { continue };
            match stream.read(&mut self.buf) {
                Ok(0) => self.streams[i] = None,
                Ok(n) => {
                    self.captures[i].push(&self.buf[..n]);
                    if let Some(tee) = &self.tee {
                        (tee.0)(i, &self.buf[..n]);
                    }
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock) => {}
                Err(_) => self.streams[i] = None,
            }
        }
    }
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
        crate::procfs::process_state(pid).is_some_and(|(state, pgrp)| pgrp == pgid && state != 'Z' && state != 'X')
    })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use crate::{Cancel, Executor, LocalExecutor, Spec};

    thread_local! {
        /// How often this thread's waiter woke (a `poll` returned or a nap ended).
        pub(super) static WAKES: Cell<usize> = const { Cell::new(0) };
        /// How often this thread's waiter tried to reap its leader (`wait4`).
        pub(super) static REAPS: Cell<usize> = const { Cell::new(0) };
    }

    /// How often the waiter of a run of `spec` woke, and at most how often it may have: a few
    /// times, and once more for each look at its cancel flag (`CANCEL_POLL`) the run's length
    /// allowed, twice over — a job slowed by a loaded machine may be looked at more often, but
    /// polling for the exit (every millisecond) is well over it.
    fn wakes_of(spec: &Spec) -> (usize, usize) {
        WAKES.with(|w| w.set(0));
        let start = std::time::Instant::now();
        let run = LocalExecutor.run(spec, &Cancel::new());
        let looks = start.elapsed().as_micros() / crate::spec::CANCEL_POLL.as_micros();
        assert!(run.outcome.is_success(), "{run:?}");
        (WAKES.with(Cell::get), 5 + 2 * looks as usize)
    }

    /// A thread's runs share one read buffer (a wide DAG's workers run short jobs back to back):
    /// after a run it is kept for the next, which reads its own output only, however short.
    #[test]
    fn a_thread_keeps_its_read_buffer_for_its_next_run() {
        std::thread::spawn(|| {
            let spare = || super::SPARE_BUF.with(|b| b.take().map(|buf| (buf.as_ptr() as usize, buf)));
            let long = LocalExecutor.run(&Spec::argv(["/bin/sh", "-c", "printf %0100d 7"]), &Cancel::new());
            assert_eq!(long.output.stdout, format!("{:0100}", 7).into_bytes());
            let (first, buf) = spare().expect("the buffer is kept after a run");
            super::SPARE_BUF.set(Some(buf));
            let short = LocalExecutor.run(&Spec::argv(["/bin/echo", "hi"]), &Cancel::new());
            assert_eq!(short.output.stdout, b"hi\n", "only its own output");
            let (second, _) = spare().expect("kept again");
            assert_eq!(first, second, "the same buffer");
        })
        .join()
        .unwrap();
    }

    /// The leader's exit wakes the waiter through its pidfd: a job that runs 300 ms with its
    /// output open wakes it only to look at its cancel flag (every 20 ms), not every millisecond
    /// to see whether it exited (~300 wakes without a pidfd); one that exits at once wakes it a
    /// few times. Also when what it left behind holds its output: its exit is seen at once. The
    /// bounds follow each run's length, which a loaded machine stretches.
    #[test]
    fn the_leaders_exit_wakes_the_waiter_which_does_not_poll_for_it() {
        let (sleeper, most) = wakes_of(&Spec::argv(["/bin/sh", "-c", "sleep 0.3"]));
        assert!(sleeper <= most, "a 300 ms job woke its waiter {sleeper} times (at most {most})");
        let (quick, most) = wakes_of(&Spec::argv(["/bin/true"]));
        assert!(quick <= most, "/bin/true woke its waiter {quick} times (at most {most})");
    }

    /// With a pidfd the leader is reaped once it said it exited, not looked for before: one
    /// `wait4` a run (a short job made three, two finding it still running), also when its
    /// output closed before it exited, and after a timeout's kill.
    #[test]
    fn the_leader_is_reaped_once_its_pidfd_says_it_exited() {
        let reaps = |spec: &Spec| {
            REAPS.with(|r| r.set(0));
            let run = LocalExecutor.run(spec, &Cancel::new());
            (run, REAPS.with(Cell::get))
        };
        for argv in [&["/bin/true"][..], &["/bin/sh", "-c", "exec >&- 2>&-; sleep 0.1"]] {
            let (run, n) = reaps(&Spec::argv(argv.iter().copied()));
            assert!(run.outcome.is_success(), "{run:?}");
            assert_eq!(n, 1, "{argv:?} was looked for {n} times");
        }
        let mut spec = Spec::argv(["/bin/sleep", "5"]);
        spec.timeout = Some(std::time::Duration::from_millis(100));
        let (run, n) = reaps(&spec);
        assert!(matches!(run.outcome, crate::Outcome::TimedOut { .. }), "{run:?}");
        assert_eq!(n, 1, "a timed-out leader was looked for {n} times");
    }
}
