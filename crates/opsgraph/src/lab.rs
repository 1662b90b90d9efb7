//! The lab nodes' background processes (plain `sh` loops started with `setsid` by the lab packs,
//! each with a pid file under `<node>/run/`): found and stopped when the demo ends.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// Stops every process the lab under `lab` started: the process group of each pid file's process
/// (a `setsid` leader), then any process left whose command line names the lab's data directory.
/// TERM first, KILL after a second. Returns how many processes were signalled.
pub fn stop_processes(lab: &Path) -> usize {
    let Some(data) = lab.parent().map(|p| format!("{}/", p.display())) else { return 0 };
    let mut pids = Vec::new();
    pid_files(lab, 0, &mut pids);
    // A pid file can outlive its process and the pid be reused: only a process whose command
    // line names this data directory is ours.
    let mut ours: Vec<i32> = pids.into_iter().filter(|p| names(*p, &data)).collect();
    ours.extend(processes().into_iter().filter(|p| names(*p, &data) && *p != std::process::id() as i32));
    ours.sort_unstable();
    ours.dedup();
    for &p in &ours {
        let _ = killpg(Pid::from_raw(p), Signal::SIGTERM);
        let _ = kill(Pid::from_raw(p), Signal::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline && ours.iter().any(|p| alive(*p)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &p in ours.iter().filter(|p| alive(**p)) {
        let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    ours.len()
}

fn pid_files(dir: &Path, depth: usize, out: &mut Vec<i32>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let path = e.path();
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() && depth < 6 {
            pid_files(&path, depth + 1, out);
        } else if kind.is_file() && path.extension().is_some_and(|x| x == "pid") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if let Some(pid) = text.lines().next().and_then(|l| l.trim().parse::<i32>().ok()).filter(|p| *p > 1) {
                out.push(pid);
            }
        }
    }
}

/// Every process id in /proc.
fn processes() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()).collect()
}

/// Whether process `pid`'s command line names `needle`.
fn names(pid: i32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

/// A live process: not gone and not a zombie waiting to be reaped.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}
