//! No orphans: the process groups this process starts die with it, however it dies.
//!
//! `PR_SET_PDEATHSIG` alone cannot promise that: it fires when the *thread* that forked exits,
//! and it reaches only the leader, never the rest of its group (the `sleep` a job's shell
//! started). So every group the executor starts is registered with a **guardian**: one small
//! `sh` per process, started with the first run, in a process group of its own (a terminal's
//! ^C or hang-up does not reach it), reading `+PGID` and `-PGID` lines on its standard input.
//! This process holds the only write end of that pipe (close-on-exec: jobs do not inherit it).
//! The lines are read by `awk`, a block per `read`, not by the shell's `read`, which takes one
//! byte per system call from a pipe (dash: ~20 reads a job in a wide DAG of short jobs; without
//! `awk` the shell's loop remains). A group's `-PGID` is sent when its run ends: held for the next
//! registration (one wake-up of the guardian a job fewer) it could name another process group by
//! the time the guardian acts on it — a group id is free again once its group is gone, and with a
//! `pid_max` of 32,768 it comes round within seconds on a busy machine.
//! When this process ends in any way — `exit`, a panic, `kill -9` — the kernel closes the pipe;
//! the guardian reads end of file, sends SIGKILL to every group still registered, and exits.
//!
//! A `kill -9` can land between a job's fork and its registration (a moment, but a long one on a
//! loaded machine; the workspace forbids the `unsafe` a `pre_exec` hook would need to close it).
//! So every command also carries `OPSGRAPH_GUARD=<pid>.<start>` in its environment, and the
//! guardian, after the registered groups, kills every process of this user carrying that mark,
//! with its group (one `grep` over `/proc/*/environ`).
//!
//! The guardian acts a moment after the death, when the next driver may already be starting:
//! [`stop_leftovers`] closes that gap for whoever takes over. Crash recovery stops every local
//! process carrying the orphaned attempt's identity in its environment before it checks the
//! attempt's evidence.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The guardian, in `dash`: the set of live groups is a space-separated string. `$1` is the
/// driver's pid (for `ps`), `$2` the marker every process the driver starts carries in its
/// environment (`OPSGRAPH_GUARD=$2`).
/// `awk` ends at end of file with the live groups; if it was killed instead, the guardian leaves
/// (this process, still alive, starts another at its next spawn).
const SCRIPT: &str = r#"trap '' INT HUP
if command -v awk >/dev/null 2>&1; then
  live=$(awk '$1 == "+" { g[$2] = 1 } $1 == "-" { delete g[$2] } END { for (p in g) print p }') || exit 0
else
  live=' '
  while read -r op pg; do
    case $op in
      +) live="$live$pg " ;;
      -) case $live in *" $pg "*) live="${live%% $pg *} ${live#* $pg }" ;; esac ;;
    esac
  done
fi
for pg in $live; do kill -s KILL -- "-$pg" 2>/dev/null; done
for f in $(grep -lzxF "OPSGRAPH_GUARD=$2" /proc/[0-9]*/environ 2>/dev/null); do
  p=${f#/proc/}; p=${p%/environ}
  read -r stat < "/proc/$p/stat" || continue
  set -- ${stat##*) }
  kill -s KILL -- "-$3" "$p" 2>/dev/null
done
"#;

/// The name the guardian runs under (`$0`), followed by the pid it guards.
const NAME: &str = "opsgraph-guard";

struct Guardian {
    child: Child,
    stdin: ChildStdin,
}

struct State {
    guardian: Option<Guardian>,
    /// The groups registered now: sent again to a new guardian if the old one went away.
    live: BTreeSet<i32>,
}

static STATE: Mutex<State> = Mutex::new(State::new());

impl State {
    const fn new() -> State {
        State { guardian: None, live: BTreeSet::new() }
    }

    /// `pgid` starts: the line to send.
    fn registered(&mut self, pgid: i32) -> String {
        self.live.insert(pgid);
        format!("+ {pgid}\n")
    }

    /// `pgid`'s run ended: the line to send at once, if it was registered.
    fn unregistered(&mut self, pgid: i32) -> Option<String> {
        self.live.remove(&pgid).then(|| format!("- {pgid}\n"))
    }
}

/// `<pid>.<start time>`: unique to this process while it lives.
fn token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        format!("{}.{nanos}", std::process::id())
    })
}

/// Marks a command this process starts: a process carrying the mark (the command and what it
/// starts, unless they clear their environment) is killed by the guardian if this process dies,
/// even when the kill came before its group was registered.
pub(crate) fn mark(cmd: &mut Command) {
    cmd.env("OPSGRAPH_GUARD", token());
}

fn start() -> io::Result<Guardian> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new("/bin/sh")
        .args(["-c", SCRIPT, NAME, &std::process::id().to_string(), token()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .process_group(0)
        .spawn()?;
    let stdin = child.stdin.take().ok_or_else(|| io::Error::other("the guardian has no stdin"))?;
    Ok(Guardian { child, stdin })
}

/// Sends `line` to the guardian, starting it (again) when needed.
fn send(state: &mut State, line: &str) -> io::Result<()> {
    if let Some(g) = &mut state.guardian {
        if g.stdin.write_all(line.as_bytes()).is_ok() {
            return Ok(());
        }
        // It went away (someone killed it): reap it and start another with every live group.
        let _ = g.child.kill();
        let _ = g.child.wait();
        state.guardian = None;
    }
    let mut g = start()?;
    let mut all: String = state.live.iter().map(|pg| format!("+ {pg}\n")).collect();
    all.push_str(line);
    g.stdin.write_all(all.as_bytes())?;
    state.guardian = Some(g);
    Ok(())
}

/// Starts the guardian when it is not running, before a group is spawned: registering right
/// after the spawn is then one write, not the start of a process (which, done lazily, left the
/// first job of a process unguarded for milliseconds).
pub(crate) fn ensure() -> io::Result<()> {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let gone = match &mut state.guardian {
        Some(g) => !matches!(g.child.try_wait(), Ok(None)),
        None => true,
    };
    if gone {
        let all: String = state.live.iter().map(|pg| format!("+ {pg}\n")).collect();
        if let Some(mut old) = state.guardian.take() {
            let _ = old.child.wait();
        }
        let mut g = start()?;
        if !all.is_empty() {
            g.stdin.write_all(all.as_bytes())?;
        }
        state.guardian = Some(g);
    }
    Ok(())
}

/// Registers a process group this process started: it is killed if this process dies first.
pub(crate) fn register(pgid: i32) -> io::Result<()> {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let lines = state.registered(pgid);
    send(&mut state, &lines)
}

/// The group's run ended: what is left of it (a daemon that detached its output) is its own.
pub(crate) fn unregister(pgid: i32) {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(lines) = state.unregistered(pgid) {
        let _ = send(&mut state, &lines);
    }
}

/// Stops what is left of a run whose driver died: every process of this host whose environment
/// holds all of `marks` (`NAME=value`, as the run's environment set them), with its process
/// group, by SIGKILL; then waits (at most `limit`) until none is alive. Returns how many were
/// found. Crash recovery calls it before it checks a job's evidence, so the check never races the
/// job itself: that covers a guardian that has not acted yet and a job killed in the moment
/// between its fork and its registration. Processes of other users are not readable and not
/// touched.
pub fn stop_leftovers(marks: &[(&str, &str)], limit: Duration) -> usize {
    let marks: Vec<Vec<u8>> = marks.iter().map(|(k, v)| format!("{k}={v}").into_bytes()).collect();
    let find = || -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        let me = std::process::id() as i32;
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
            .filter(|pid| *pid != me)
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                    let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
                    marks.iter().all(|m| vars.contains(&m.as_slice()))
                })
            })
            .filter(|pid| crate::procfs::process_state(&pid.to_string()).is_some_and(|(s, _)| s != 'Z' && s != 'X'))
            .collect()
    };
    let found = find();
    if found.is_empty() {
        return 0;
    }
    let until = Instant::now() + limit;
    loop {
        let live = find();
        if live.is_empty() || Instant::now() >= until {
            break;
        }
        for pid in live {
            use nix::sys::signal::{kill, killpg, Signal};
            use nix::unistd::Pid;
            if let Some((_, pgrp)) = crate::procfs::process_state(&pid.to_string()) {
                if pgrp > 1 && pgrp != nix::unistd::getpgrp().as_raw() {
                    let _ = killpg(Pid::from_raw(pgrp), Signal::SIGKILL);
                }
            }
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    found.len()
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::{Duration, Instant};

    use super::{start, State};

    /// A group's end is sent at once, never held: by the time the guardian acted on a held one,
    /// its id could name another process group (with a `pid_max` of 32,768, seconds away).
    #[test]
    fn an_end_is_sent_at_once() {
        let mut state = State::new();
        assert_eq!(state.registered(11), "+ 11\n");
        assert_eq!(state.registered(12), "+ 12\n");
        assert_eq!(state.unregistered(11).as_deref(), Some("- 11\n"));
        assert_eq!(state.unregistered(11), None, "an unknown group");
        assert_eq!(state.unregistered(12).as_deref(), Some("- 12\n"));
        assert!(state.live.is_empty());
    }

    /// Read system calls of `pid` and its children, from `/proc/<pid>/io`.
    fn reads_of_tree(pid: u32) -> u64 {
        let reads = |pid: &str| -> u64 {
            let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
            io.lines().find_map(|l| l.strip_prefix("syscr: ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
        };
        let children = std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{name}/stat")).ok()?;
            let ppid: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == pid).then_some(name)
        });
        reads(&pid.to_string()) + children.map(|c| reads(&c)).sum::<u64>()
    }

    /// The guardian takes its lines a block per `read`: 400 lines (~4,000 bytes) cost it a few
    /// hundred reads at most, not one per byte (the shell's `read` from a pipe). A guardian of its
    /// own, killed before its input ends, so it never acts; its groups cannot exist (above the
    /// largest pid Linux gives, 2^22).
    #[test]
    fn the_guardian_reads_its_lines_in_blocks() {
        if !std::path::Path::new("/proc/self/io").exists() {
            return;
        }
        let mut g = start().expect("a guardian");
        let pid = g.child.id();
        std::thread::sleep(Duration::from_millis(100));
        let before = reads_of_tree(pid);
        for i in 0..200 {
            let pg = 5_000_000 + i;
            g.stdin.write_all(format!("+ {pg}\n- {pg}\n").as_bytes()).unwrap();
            if i % 20 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let until = Instant::now() + Duration::from_secs(2);
        let mut reads = reads_of_tree(pid) - before;
        while reads < 10 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
            reads = reads_of_tree(pid) - before;
        }
        std::thread::sleep(Duration::from_millis(200));
        let reads = reads_of_tree(pid) - before;
        let _ = g.child.kill();
        let _ = g.child.wait();
        assert!(reads > 0, "the guardian read nothing");
        assert!(reads < 400, "the guardian made {reads} reads for 400 lines");
    }
}
