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
//! On Linux a nice value belongs to a thread, not to the process (setpriority(2), BUGS), and a
//! child starts with the nice value of the thread that forked it. So a thread that only runs
//! jobs lowers itself once ([`job_thread`], the runtime's attempt workers, an agent's runners,
//! which start their side thread first); any other thread (the driver's crash recovery,
//! `intervene --verify` on a server thread) keeps its priority and has its processes forked by
//! the process's spawning thread, which lowered itself once ([`spawn`]). Raising a priority
//! back needs privileges: a lowered thread stays lowered.

use std::cell::Cell;
use std::io;
use std::process::{Child, Command};
use std::sync::{mpsc, OnceLock};

/// How many nice steps below the control plane local job processes run when
/// `OPSGRAPH_JOBS_NICE` is not set.
pub const DEFAULT_JOBS_NICE: i32 = 10;

/// The largest nice value on Linux.
const MAX_NICE: i32 = 19;

thread_local! {
    /// Whether this thread lowered itself for jobs (its children inherit its nice value).
    static LOWERED: Cell<bool> = const { Cell::new(false) };
}

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

/// Marks the calling thread as one that runs jobs and nothing of the control plane: lowers it
/// by [`jobs_nice`] steps, once; the processes it starts inherit that. Never call it on a
/// thread that serves anything else afterwards: it cannot be raised again.
pub fn job_thread() {
    if LOWERED.with(Cell::get) {
        return;
    }
    lower(jobs_nice());
    LOWERED.with(|l| l.set(true));
}

/// Lowers the calling thread by `steps` (on Linux `setpriority(PRIO_PROCESS, 0)` acts on the
/// calling thread only). A failure leaves it as it was: jobs then run at its priority.
fn lower(steps: i32) {
    if steps == 0 {
        return;
    }
    let now = rustix::process::getpriority_process(None).unwrap_or(0);
    let _ = rustix::process::setpriority_process(None, (now + steps).min(MAX_NICE));
}

/// Spawns `cmd` below the control plane: from this thread when it runs jobs only (lowered
/// already), else from the process's spawning thread ([`spawner`]), lowered once, so the caller
/// keeps its priority. Where that thread cannot be started (or is gone) it spawns from here, at
/// the caller's priority.
pub(crate) fn spawn(cmd: Command) -> io::Result<Child> {
    let steps = jobs_nice();
    if steps == 0 || LOWERED.with(Cell::get) {
        let mut cmd = cmd;
        return cmd.spawn();
    }
    let Some(spawner) = spawner(steps) else {
        let mut cmd = cmd;
        return cmd.spawn();
    };
    let (answer, answered) = mpsc::sync_channel(1);
    match spawner.send((cmd, answer)) {
        Ok(()) => answered.recv().unwrap_or_else(|_| Err(io::Error::other("the spawning thread panicked"))),
        Err(mpsc::SendError((mut cmd, _))) => cmd.spawn(),
    }
}

/// A command to spawn and where its child goes.
type Spawn = (Command, mpsc::SyncSender<io::Result<Child>>);

/// The process's spawning thread (`job spawn`), started by the first spawn of a thread that is
/// not a job thread, lowered by `steps` once and kept: it spawns what such threads ask for (the
/// driver's crash recovery, a verification on a server thread), one after another. A thread
/// started, lowered and joined per spawn cost a start, a stack and an exit each; an agent's
/// runners, which spawned twice a job through it, are job threads now (issue [N] 2). Its
/// children start `steps` below the thread that first asked (threads that are not job threads
/// keep the process's priority). `None` where no thread can be started.
fn spawner(steps: i32) -> Option<&'static mpsc::Sender<Spawn>> {
    static SPAWNER: OnceLock<Option<mpsc::Sender<Spawn>>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (ask, asked) = mpsc::channel::<Spawn>();
            std::thread::Builder::new()
                .name("job spawn".into())
                .spawn(move || {
                    lower(steps);
                    LOWERED.with(|l| l.set(true));
                    for (mut cmd, answer) in asked {
                        let _ = answer.send(cmd.spawn());
                    }
                })
                .ok()
                .map(|_| ask)
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cancel, Executor, LocalExecutor, Program, Spec};

    /// The calling thread's nice value.
    fn own_nice() -> i32 {
        rustix::process::getpriority_process(None).expect("getpriority")
    }

    /// The nice value a local job reports for itself (field 19 of its `/proc/self/stat`).
    fn job_nice() -> i32 {
        let argv = ["cut", "-d", " ", "-f19", "/proc/self/stat"].map(String::from).to_vec();
        let run = LocalExecutor.run(&Spec::new(Program::Argv(argv)), &Cancel::new());
        String::from_utf8_lossy(&run.output.stdout).trim().parse().expect("a nice value")
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

    /// A thread that is not a job thread (the driver, a server thread) starts jobs below itself
    /// and keeps its own priority.
    #[test]
    fn a_job_starts_below_the_thread_that_asked_which_keeps_its_priority() {
        let before = own_nice();
        let expected = (before + jobs_nice()).min(MAX_NICE);
        assert_eq!(job_nice(), expected);
        assert_eq!(job_nice(), expected, "the second job too");
        assert_eq!(own_nice(), before, "the asking thread keeps its priority");
    }

    /// The threads of this process named `job spawn`, by id.
    fn spawning_threads() -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| {
                let t = t.ok()?;
                let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
                (name.trim() == "job spawn").then(|| t.file_name().to_string_lossy().into_owned())
            })
            .collect();
        ids.sort();
        ids
    }

    /// Threads that are not job threads have their jobs spawned by one thread of the process,
    /// started once and kept, not by a thread started and joined per spawn (issue [N] 2).
    #[test]
    fn jobs_of_other_threads_are_spawned_by_one_kept_thread() {
        if jobs_nice() == 0 {
            return;
        }
        job_nice();
        let first = spawning_threads();
        assert_eq!(first.len(), 1, "one spawning thread after a spawn: {first:?}");
        for _ in 0..3 {
            job_nice();
        }
        std::thread::spawn(job_nice).join().unwrap();
        assert_eq!(spawning_threads(), first, "the same thread spawned every job");
    }

    /// A job thread lowers itself once (nice is per thread on Linux: the test's thread stays),
    /// and its jobs inherit that, no further.
    #[test]
    fn a_job_thread_lowers_itself_once_and_only_itself() {
        let before = own_nice();
        let expected = (before + jobs_nice()).min(MAX_NICE);
        let (worker, job) = std::thread::spawn(|| {
            job_thread();
            job_thread();
            (own_nice(), job_nice())
        })
        .join()
        .unwrap();
        assert_eq!((worker, job), (expected, expected));
        assert_eq!(own_nice(), before, "another thread of the process keeps its priority");
    }
}
