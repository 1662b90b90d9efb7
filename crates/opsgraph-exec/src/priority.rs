//! Local job processes below the control plane's CPU priority.
//!
//! A product decision (issue [N] 4, docs/operations.md#executors): the control plane stays
//! responsive while local jobs run, as kubelet keeps CPU for the system daemons. When a
//! machine's cores are all busy, the driver, the server's event streams and the API get their
//! turn ahead of the jobs' processes; the jobs still get every cycle nobody else wants. Every
//! process the executors start (a local job, an evidence check's `sh`, the `ssh` client of a
//! remote job and the connection master it starts) runs `OPSGRAPH_JOBS_NICE` nice steps (default
//! [`DEFAULT_JOBS_NICE`]; `0` turns this off) above the thread that asked for it, at most 19.
//!
//! How: the calling thread spawns the process at its own priority and lowers it as soon as
//! `spawn` returns (`setpriority(2)`), the job's whole process group at once ([`spawn_group`]:
//! a job leads a group of its own). No thread of the control plane is ever lowered. Until
//! issue [N] 5 (branch `prio8`) the runtime's attempt workers lowered themselves so that their
//! children inherited nice 10; but a worker is the control plane too: it waited for a CPU behind
//! everything at nice 0 at each of its two wake-ups a job (the attempt handed over, the child's
//! exit), ~10× their best on a busy machine (docs/benchmarks.md, `chain7`). Not chosen instead:
//! a `pre_exec` hook that lowers the child between `fork` and `exec` (it takes std off
//! `posix_spawn`, so every job would copy the control plane's page tables, docs/benchmarks.md
//! `prio8`), and a long-lived lowered thread that spawns for the workers (a hand-off a job, on
//! a thread that itself waits at nice 10: the delay moved, not removed). Toggling a worker's own
//! nice around the spawn needs privileges (a lowered thread cannot be raised back).
//!
//! What this guarantees: once `spawn` returned, the process and every process of its group
//! (threads included) are lowered, and whatever they start after inherits that. What it does
//! not: the child runs its first moments at the caller's priority (`std` spawns with
//! `posix_spawn`, which returns once the child has exec'd; the renice is the caller's next system
//! call), and a process that left the job's group in that window (`setsid`, `setpgid` in its
//! first microseconds) stays at the caller's priority. Accepted: the priority decides who gets a
//! busy machine's cores over the job's run, not its first microseconds, and a job's processes
//! stay in its group (its timeout, cancel and the guardian rely on that too).
//!
//! On Linux a nice value belongs to a thread (setpriority(2), BUGS): `PRIO_PROCESS` with a pid
//! acts on that thread only, `PRIO_PGRP` on every thread of every process in the group.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::OnceLock;

use rustix::process::Pid;

/// How many nice steps below the control plane local job processes run when
/// `OPSGRAPH_JOBS_NICE` is not set.
pub const DEFAULT_JOBS_NICE: i32 = 10;

/// The largest nice value on Linux.
const MAX_NICE: i32 = 19;

/// The nice steps between the control plane and its local job processes: `OPSGRAPH_JOBS_NICE`
/// (a whole number from 0 to 19; 0: jobs run at the control plane's priority), read once.
pub fn jobs_nice() -> i32 {
    static NICE: OnceLock<i32> = OnceLock::new();
    *NICE.get_or_init(|| match parse(std::env::var("OPSGRAPH_JOBS_NICE").ok().as_deref()) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("warning: {e}; jobs run {DEFAULT_JOBS_NICE} nice steps below the control plane");
            DEFAULT_JOBS_NICE
        }
    })
}

/// `OPSGRAPH_JOBS_NICE`'s value: unset or empty is the default.
pub(crate) fn parse(value: Option<&str>) -> Result<i32, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(DEFAULT_JOBS_NICE),
        Some(v) => match v.parse::<i32>() {
            Ok(n) if (0..=MAX_NICE).contains(&n) => Ok(n),
            _ => Err(format!("OPSGRAPH_JOBS_NICE must be a whole number from 0 to {MAX_NICE}, not `{v}`")),
        },
    }
}

/// Spawns `cmd` as the leader of a new process group (a job, its checks, the `ssh` client of a
/// remote job) and lowers the group below the calling thread, which keeps its priority.
pub(crate) fn spawn_group(mut cmd: Command) -> io::Result<Child> {
    cmd.process_group(0);
    let child = cmd.spawn()?;
    lower(Lowered::Group, &child);
    Ok(child)
}

/// Spawns `cmd` in the caller's process group (the `ssh` helpers: a connection master, a
/// transfer) and lowers the process below the calling thread, which keeps its priority.
pub(crate) fn spawn(mut cmd: Command) -> io::Result<Child> {
    let child = cmd.spawn()?;
    lower(Lowered::Process, &child);
    Ok(child)
}

/// What [`lower`] lowers.
#[derive(Clone, Copy)]
enum Lowered {
    /// The child's process group (the child leads it).
    Group,
    /// The child's first thread.
    Process,
}

/// Lowers `child` (or its group) [`jobs_nice`] steps below the calling thread. A failure leaves
/// it as it was: it then runs at the caller's priority.
fn lower(what: Lowered, child: &Child) {
    let steps = jobs_nice();
    if steps == 0 {
        return;
    }
    let nice = (rustix::process::getpriority_process(None).unwrap_or(0) + steps).min(MAX_NICE);
    let pid = Some(Pid::from_child(child));
    let _ = match what {
        Lowered::Group => rustix::process::setpriority_pgrp(pid, nice),
        Lowered::Process => rustix::process::setpriority_process(pid, nice),
    };
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::{Cancel, Executor, LocalExecutor, Spec, Tee};

    /// The calling thread's nice value.
    fn own_nice() -> i32 {
        rustix::process::getpriority_process(None).expect("getpriority")
    }

    /// A process's nice value as the kernel shows it: field 19 of `/proc/PID/stat`.
    fn nice_of(pid: &str) -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.split(' ').nth(16)?.parse().ok()
    }

    /// What a lowered process's nice value must be, from this thread.
    fn expected() -> i32 {
        (own_nice() + jobs_nice()).min(MAX_NICE)
    }

    /// A running local job's nice value and that of the process it started, read from `/proc`
    /// by the thread that started it, which then cancels it: the job prints both pids at once
    /// and waits, so what is read is what holds once the spawn returned, whatever the job's
    /// speed.
    fn job_nices() -> (Option<i32>, Option<i32>) {
        let cancel = Cancel::new();
        let seen = Arc::new(Mutex::new(None));
        let tee = {
            let (cancel, seen) = (cancel.clone(), Arc::clone(&seen));
            Tee(Arc::new(move |stream: usize, bytes: &[u8]| {
                let line = String::from_utf8_lossy(bytes);
                if let (0, [job, child]) = (stream, &line.split_whitespace().collect::<Vec<_>>()[..]) {
                    *seen.lock().unwrap() = Some((nice_of(job), nice_of(child)));
                    cancel.cancel();
                }
            }))
        };
        let spec = Spec {
            tee: Some(tee),
            timeout: Some(std::time::Duration::from_secs(10)),
            ..Spec::argv(["/bin/sh", "-c", "sleep 30 & echo $$ $!; wait"])
        };
        let run = LocalExecutor.run(&spec, &cancel);
        let seen = seen.lock().unwrap().take();
        seen.unwrap_or_else(|| panic!("the job printed no pids: {run:?}"))
    }

    #[test]
    fn the_setting_is_0_to_19_and_10_when_unset() {
        assert_eq!(parse(None), Ok(10));
        assert_eq!(parse(Some(" ")), Ok(10));
        assert_eq!(parse(Some("0")), Ok(0));
        assert_eq!(parse(Some("19")), Ok(19));
        assert_eq!(parse(Some("20")), Err("OPSGRAPH_JOBS_NICE must be a whole number from 0 to 19, not `20`".into()));
        assert_eq!(parse(Some("-5")), Err("OPSGRAPH_JOBS_NICE must be a whole number from 0 to 19, not `-5`".into()));
        if std::env::var_os("OPSGRAPH_JOBS_NICE").is_none() {
            assert_eq!(jobs_nice(), DEFAULT_JOBS_NICE);
        }
    }

    /// A job and what it starts run below the thread that started it, as the kernel sees them
    /// once the spawn returned; that thread (a worker, the driver, a server thread) keeps its
    /// priority, job after job.
    #[test]
    fn a_job_and_its_children_run_below_the_thread_that_started_it_which_keeps_its_priority() {
        let before = own_nice();
        let lowered = Some(expected());
        assert_eq!(job_nices(), (lowered, lowered));
        assert_eq!(job_nices(), (lowered, lowered), "the second job too");
        assert_eq!(own_nice(), before, "the starting thread keeps its priority");
    }

    /// What a job started before it was lowered (a process of its group forked in the moment
    /// between its `exec` and the renice) is lowered with it: the renice takes the whole group.
    #[test]
    fn a_process_the_job_started_before_the_renice_is_lowered_with_its_group() {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "sleep 30 & echo $!; exec sleep 30"]).process_group(0).stdout(std::process::Stdio::piped());
        let mut job = cmd.spawn().expect("spawn");
        let mut line = String::new();
        io::BufRead::read_line(&mut io::BufReader::new(job.stdout.take().unwrap()), &mut line).unwrap();
        let (leader, child) = (job.id().to_string(), line.trim().to_owned());
        assert_eq!((nice_of(&leader), nice_of(&child)), (Some(own_nice()), Some(own_nice())), "not lowered yet");
        lower(Lowered::Group, &job);
        let lowered = (nice_of(&leader), nice_of(&child));
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(job.id() as i32), nix::sys::signal::SIGKILL);
        let _ = job.wait();
        assert_eq!(lowered, (Some(expected()), Some(expected())));
    }

    /// A process spawned in the caller's group (an `ssh` helper) is lowered alone.
    #[test]
    fn a_helper_process_is_lowered_and_its_caller_is_not() {
        let before = own_nice();
        let mut cmd = Command::new("/bin/sleep");
        cmd.arg("30");
        let mut helper = spawn(cmd).expect("spawn");
        let nice = nice_of(&helper.id().to_string());
        let _ = helper.kill();
        let _ = helper.wait();
        assert_eq!(nice, Some(expected()));
        assert_eq!(own_nice(), before);
    }
}
