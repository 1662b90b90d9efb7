//! A timed-out or cancelled SSH run stops its remote command: the wrapper and the kill script
//! on this machine's `sh` (always), and through a real sshd on loopback (when root).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use expect_test::{expect, Expect};

use crate::remote_group::{describe, kill_script, wrap};
use crate::testing::{Sshd, TempDir};
use crate::{Cancel, Executor, Outcome, Program, Run, Spec, SshExecutor};

/// Whether `pid` is a live process (not a zombie).
fn alive(pid: i32) -> bool {
    crate::procfs::process_state(&pid.to_string()).is_some_and(|(s, _)| s != 'Z' && s != 'X')
}

/// Whether `pid` is a live process (not a zombie), after waiting up to 3 s for it to go.
fn alive_after_wait(pid: i32) -> bool {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let live = alive(pid);
        if !live || Instant::now() >= until {
            return live;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pids written to `files`, waiting up to 10 s for each file to hold one.
fn pids(files: &[&Path]) -> Vec<i32> {
    let until = Instant::now() + Duration::from_secs(10);
    files
        .iter()
        .map(|f| loop {
            if let Some(pid) = std::fs::read_to_string(f).ok().and_then(|s| s.trim().parse().ok()) {
                break pid;
            }
            assert!(Instant::now() < until, "{} was never written", f.display());
            std::thread::sleep(Duration::from_millis(20));
        })
        .collect()
}

/// A job that leaves three sleepers in its session: one in its group, one that ignores TERM
/// when `stubborn`, one in a process group of its own (bash's `set -m`; dash
/// has no job control without a terminal). Each writes its pid to `dir`.
fn sleepers(dir: &TempDir, stubborn: bool) -> Spec {
    let d = dir.path().display();
    let trap = if stubborn { "trap '' TERM; " } else { "" };
    Spec::new(Program::Shell(format!(
        "{trap}echo $$ > {d}/shell; sleep 600 & echo $! > {d}/child; \
         bash -c 'set -m; sleep 600 & echo $! > {d}/own_group; wait' & wait"
    )))
}

/// The remote stop's sentence with its group id replaced by `N`.
fn stop_text(run: &Run) -> String {
    let text = run.remote_stop.clone().unwrap_or_else(|| "no remote stop".to_owned());
    regex::Regex::new(r"group \d+").unwrap().replace(&text, "group N").into_owned()
}

fn check_stop(run: &Run, expect: Expect) {
    expect.assert_eq(&format!("{:?}\n{}\n", run.outcome, stop_text(run)));
}

/// `sh -c SCRIPT` on this machine with `TMPDIR=dir`: its stdout, or its stderr as the error.
fn local_sh(script: &str, dir: &TempDir) -> Result<String, String> {
    let out = Command::new("sh").args(["-c", script]).env("TMPDIR", dir.path()).output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// `sh -c wrap(command, token)` in `dir` with `TMPDIR=dir`; under `setsid` when `leader`, so that
/// the shell leads its own session and group as every command `sshd` starts without a terminal
/// does (`setsid` from a process that leads no group makes the session in place and execs the `sh`).
fn wrapped(dir: &TempDir, command: &str, token: &str, leader: bool) -> Command {
    let mut cmd = Command::new(if leader { "setsid" } else { "sh" });
    if leader {
        cmd.arg("sh");
    }
    cmd.args(["-c", &wrap(command, token)]).current_dir(dir.path()).env("TMPDIR", dir.path());
    cmd
}

/// Whether any per-attempt file is in `dir`.
fn group_files(dir: &TempDir) -> Vec<String> {
    let names = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned());
    names.filter(|n| n.starts_with("opsgraph-pg.")).collect()
}

/// Without a session of its own (here: `sh` spawned by the test, in the test's session), the
/// wrapper records its group in a file, as on a host without `/proc`.
#[test]
fn without_a_session_of_its_own_the_wrapper_records_its_group_in_a_file() {
    let dir = TempDir::new();
    let token = &crate::remote_group::token().unwrap();
    let file = dir.join(&format!("opsgraph-pg.{token}"));
    // A normal end: the exit code passes through, and the file is gone afterwards.
    let mut child = wrapped(&dir, "echo $$ > pid; exit 7", token, false).spawn().unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(7));
    assert!(!file.exists(), "the wrapper left its file");
    assert_eq!(
        describe("h", local_sh(&kill_script(token, Duration::from_millis(200)), &dir)),
        "no remote process group of the job was found on h (the command ended, or had not started)"
    );

    // A running command in its own session: TERM stops it, the file is removed.
    let mut child = wrapped(&dir, "sleep 600 & echo $! > child; wait", token, false).spawn().unwrap();
    let [pg, sleeper] = pids(&[&file, &dir.join("child")])[..] else { unreachable!() };
    let (_, group) = crate::procfs::process_state(&sleeper.to_string()).unwrap();
    assert_eq!(group, pg, "the command is not in the recorded group");
    assert_ne!(pg, nix::unistd::getpgrp().as_raw(), "setsid did not make a new group");
    let answer = local_sh(&kill_script(token, Duration::from_secs(2)), &dir);
    assert_eq!(answer, Ok(format!("{pg} term\n")));
    assert!(!alive_after_wait(sleeper), "the sleeper survived");
    let _ = child.wait();
    assert!(!file.exists(), "the kill script left the file");

    // A planted file with no group id in it: stopping fails, and says why.
    std::fs::write(&file, "not a pid\n").unwrap();
    let answer = local_sh(&kill_script(token, Duration::from_millis(200)), &dir);
    assert_eq!(
        describe("h", answer).replace(&dir.path().display().to_string(), "TMP"),
        format!("stopping the remote process group on h failed: TMP/opsgraph-pg.{token} holds no process group id")
    );
    // And the wrapper refuses to run under a name someone else made (it would not own it).
    let out = wrapped(&dir, "touch ran", token, false).output().unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("opsgraph: cannot record the process group"));
    assert!(!dir.join("ran").exists());
}

/// A login shell that already leads its own session and process group, as every command `sshd`
/// starts without a terminal does, runs the command itself: no file, no other shell; the command
/// is its child (the shell never execs it in place, so the mark stays on the leader), passes its
/// exit code, and the kill script finds the leader by the mark and stops its group.
#[test]
fn a_session_leader_carries_the_mark_and_the_stop_finds_it() {
    let dir = TempDir::new();
    let token = &crate::remote_group::token().unwrap();
    let command = "echo \"$$ $(tr '\\0' ' ' </proc/$$/cmdline)\"; sh -c 'echo $PPID; exit 3'";
    let child = wrapped(&dir, command, token, true).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    let (first, second) = text.trim().split_once('\n').unwrap_or_else(|| panic!("{text:?}"));
    assert!(first.starts_with(&format!("{pid} sh -c : OPSGRAPH_{token}; ")), "not run in the leader: {first}");
    assert_eq!(second, pid.to_string(), "the command's parent is not the leader");
    assert_eq!(group_files(&dir), Vec::<String>::new(), "a file was made");

    // Running: the stop finds the leader by its mark, TERM stops the group and the session.
    let mut child = wrapped(&dir, "sleep 600 & echo $! > child; wait", token, true).spawn().unwrap();
    let leader = child.id() as i32;
    let [sleeper] = pids(&[&dir.join("child")])[..] else { unreachable!() };
    assert_eq!(crate::procfs::process_state(&sleeper.to_string()).unwrap().1, leader);
    let answer = local_sh(&kill_script(token, Duration::from_secs(2)), &dir);
    assert_eq!(answer, Ok(format!("{leader} term\n")));
    assert!(!alive_after_wait(sleeper), "the sleeper survived");
    let _ = child.wait();
    assert_eq!(group_files(&dir), Vec::<String>::new());
    // Once it ended, nothing carries the mark.
    assert_eq!(local_sh(&kill_script(token, Duration::from_millis(200)), &dir), Ok("- none\n".to_owned()));
}

/// Children killed (with their sessions when they lead one) when dropped, so that a failing test
/// leaves no sleeper behind.
struct Reap(Vec<std::process::Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            if nix::unistd::getsid(Some(pid)) == Ok(pid) {
                let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Processes that carry the mark but are not the job's leader are never signalled: one that
/// leads no session, one of another user (when root), and two leaders of ours at once (someone
/// copied the mark from the job's command line: the stop cannot tell which is the job's, so it
/// fails and stops neither).
#[test]
fn the_stop_signals_nothing_that_is_not_the_jobs_leader() {
    let dir = TempDir::new();
    let token = &crate::remote_group::token().unwrap();
    // (A loop, not a last `sleep` that the shell would exec in its place, dropping the mark.)
    let copy = format!(": OPSGRAPH_{token}; while :; do sleep 1; done");
    let stop = || local_sh(&kill_script(token, Duration::from_millis(200)), &dir);
    // In the test's own session and group: carries the mark, leads nothing.
    let mut decoys = Reap(vec![Command::new("sh").args(["-c", &copy]).spawn().unwrap()]);
    // Another user's session leader with the mark (root can signal it; it must not).
    if nix::unistd::geteuid().is_root() {
        let setpriv = ["--reuid=65534", "--regid=65534", "--clear-groups", "setsid", "sh", "-c", &copy];
        decoys.0.push(Command::new("setpriv").args(setpriv).spawn().unwrap());
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(stop(), Ok("- none\n".to_owned()));
    std::thread::sleep(Duration::from_millis(300));
    for d in &decoys.0 {
        assert!(alive(d.id() as i32), "a decoy was signalled");
    }
    // The job, and a copy of its mark in a session of ours: refused, both untouched.
    let job = Reap(vec![wrapped(&dir, "sleep 600 & echo $! > child; wait", token, true).spawn().unwrap()]);
    let job_pid = job.0[0].id() as i32;
    let [sleeper] = pids(&[&dir.join("child")])[..] else { unreachable!() };
    let copied = Reap(vec![Command::new("setsid").args(["sh", "-c", &copy]).spawn().unwrap()]);
    std::thread::sleep(Duration::from_millis(300));
    let answer = describe("h", stop());
    let re = regex::Regex::new(
        r"^stopping the remote process group on h failed: processes \d+ and \d+ both carry the job's mark: stopping neither$",
    )
    .unwrap();
    assert!(re.is_match(&answer), "{answer}");
    std::thread::sleep(Duration::from_millis(300));
    for pid in [job_pid, sleeper, copied.0[0].id() as i32] {
        assert!(alive(pid), "{pid} was signalled");
    }
    // The copy gone, the job alone is found and stopped.
    drop(copied);
    assert_eq!(stop(), Ok(format!("{job_pid} term\n")));
    assert!(!alive_after_wait(sleeper), "the sleeper survived");
    for d in &mut decoys.0 {
        assert!(alive(d.id() as i32), "a decoy was signalled");
    }
    drop(job);
}

/// A short command travels as an argument, a long one on a here-document; both run as given, in
/// the leader (the mark) and in a wrapper `sh` (the file, whose name is its `$1`).
#[test]
fn short_and_long_commands_run_as_given() {
    let dir = TempDir::new();
    let token = &crate::remote_group::token().unwrap();
    let check = |command: &str, leader: bool, expect: &str| {
        let wrapped_text = wrap(command, token);
        let out = wrapped(&dir, command, token, leader).output().unwrap();
        let here_doc = wrapped_text.contains("3<<'OPSGRAPH_");
        let got = format!("{} here-doc={here_doc}", String::from_utf8_lossy(&out.stdout).trim());
        assert_eq!(got, expect, "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(group_files(&dir), Vec::<String>::new(), "the wrapper left its file");
    };
    let quotes = "echo 'it'\\''s' \"[$(basename \"${1:-}\")]\" \"[${2:-}]\"";
    check(quotes, false, &format!("it's [opsgraph-pg.{token}] [] here-doc=false"));
    check(quotes, true, "it's [] [] here-doc=false");
    // A command that sets its own positional parameters: the wrapper still removes its file, and
    // only its file (it once removed whatever `$1` named at exit).
    std::fs::write(dir.join("bystander"), "kept").unwrap();
    check("set -- bystander; echo moved", false, "moved here-doc=false");
    check("set -- bystander; echo moved", true, "moved here-doc=false");
    assert!(dir.join("bystander").exists(), "the wrapper removed the command's `$1`, not its own file");
    // A long command: the file's `sh` records its own pid; the leader runs it itself.
    let long = format!(": '{}'; echo \"$(cat \"$1\")\" = $$", "x".repeat(20 * 1024));
    let out = wrapped(&dir, &long, token, false).output().unwrap();
    let got = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (recorded, pid) = got.split_once(" = ").unwrap_or_else(|| panic!("{got:?}"));
    assert_eq!(recorded, pid, "the long command's group is not the one recorded");
    assert!(wrap(&long, token).contains("3<<'OPSGRAPH_"));
    let long = format!(": '{}'; echo $$", "z".repeat(20 * 1024));
    let child = wrapped(&dir, &long, token, true).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    assert_eq!(String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout).trim(), pid.to_string());
    check(&format!(": '{}'; echo long", "y".repeat(20 * 1024)), false, "long here-doc=true");
    check(&format!(": '{}'; echo long; exit 4", "y".repeat(20 * 1024)), true, "long here-doc=true");
}

/// Runs `spec` on `exec`, cancelling once `first` holds a pid when `cancel` is set.
fn run_until(exec: &SshExecutor, spec: &Spec, cancel_after: Option<&Path>) -> Run {
    let cancel = Cancel::new();
    std::thread::scope(|s| {
        if let Some(file) = cancel_after {
            let cancel = cancel.clone();
            s.spawn(move || {
                pids(&[file]);
                std::thread::sleep(Duration::from_millis(200));
                cancel.cancel();
            });
        }
        exec.run(spec, &cancel)
    })
}

#[test]
fn ssh_timeout_stops_the_remote_process_group() {
    let Some(sshd) = Sshd::start_or_skip("ssh_timeout_stops_the_remote_process_group") else {
        return;
    };
    let dir = TempDir::new();
    let exec = sshd.multiplexed_executor();
    let mut spec = sleepers(&dir, false);
    spec.timeout = Some(Duration::from_secs(2));
    let run = run_until(&exec, &spec, None);
    check_stop(
        &run,
        expect![[r#"
            TimedOut { after: 2s, killed: false }
            the remote process group N on 127.0.0.1 was terminated (SIGTERM)
        "#]],
    );
    let all = pids(&[&dir.join("shell"), &dir.join("child"), &dir.join("own_group")]);
    for pid in all {
        assert!(!alive_after_wait(pid), "remote process {pid} outlived the timeout\n{}", sshd.log());
    }
    // The connection is fine afterwards.
    let r = exec.run(&Spec::argv(["true"]), &Cancel::new());
    assert_eq!(r.outcome, Outcome::Exited { code: 0 });
    assert_eq!(r.remote_stop, None);
    exec.close();
}

#[test]
fn ssh_cancel_kills_a_remote_group_that_ignores_term() {
    let Some(sshd) = Sshd::start_or_skip("ssh_cancel_kills_a_remote_group_that_ignores_term") else {
        return;
    };
    let dir = TempDir::new();
    // Without multiplexing: the stop makes a connection of its own.
    let exec = sshd.executor();
    let mut spec = sleepers(&dir, true);
    spec.grace = Duration::from_millis(500);
    let run = run_until(&exec, &spec, Some(&dir.join("own_group")));
    check_stop(
        &run,
        expect![[r#"
            Cancelled
            the remote process group N on 127.0.0.1 was killed (SIGKILL after SIGTERM and the grace)
        "#]],
    );
    for pid in pids(&[&dir.join("shell"), &dir.join("child"), &dir.join("own_group")]) {
        assert!(!alive_after_wait(pid), "remote process {pid} outlived the cancel\n{}", sshd.log());
    }
    // A host that cannot be reached for the stop: the failure says so.
    let nobody = crate::testing::closed_port();
    let unreachable = SshExecutor { port: nobody.port, ..sshd.executor() };
    let stop = unreachable.stop_marked("0123456789abcdef0123456789abcdef", Duration::from_millis(100)).unwrap();
    assert!(stop.starts_with("stopping the remote process group on 127.0.0.1 failed: ssh: "), "{stop}");
    assert!(stop.contains("Connection refused"), "{stop}");
}

/// The local `ssh` clients whose command line carries `mark` (not the remote shells that carry it
/// too: this machine is the host).
fn clients_of(mark: &str) -> Vec<i32> {
    let mark = format!("OPSGRAPH_{mark}");
    let entries = std::fs::read_dir("/proc").unwrap().flatten();
    let pids = entries.filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()));
    pids.filter(|pid| {
        let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let mut words = argv.split(|b| *b == 0);
        words.next() == Some(b"ssh") && words.any(|w| String::from_utf8_lossy(w).contains(&mark))
    })
    .collect()
}

/// A run whose client died with its caller (a driver killed: no cancel, no stop sent) goes on on
/// the host; the mark the caller gave it, recorded beforehand, finds it and stops it there.
#[test]
fn a_run_whose_client_died_is_stopped_later_by_its_mark() {
    let Some(sshd) = Sshd::start_or_skip("a_run_whose_client_died_is_stopped_later_by_its_mark") else {
        return;
    };
    let dir = TempDir::new();
    let exec = sshd.multiplexed_executor();
    let mark = crate::new_mark().unwrap();
    let mut spec = sleepers(&dir, false);
    spec.mark = Some(mark.clone());
    let run = std::thread::scope(|s| {
        let run = s.spawn(|| exec.run(&spec, &Cancel::new()));
        pids(&[&dir.join("shell"), &dir.join("child"), &dir.join("own_group")]);
        let clients = clients_of(&mark);
        assert_eq!(clients.len(), 1, "{clients:?}");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(clients[0]), nix::sys::signal::SIGKILL).unwrap();
        run.join().unwrap()
    });
    assert_eq!(run.remote_stop, None, "{:?}", run.outcome);
    let all = pids(&[&dir.join("shell"), &dir.join("child"), &dir.join("own_group")]);
    for pid in &all {
        assert!(alive(*pid), "the premise: remote process {pid} outlives its client");
    }
    let stop = exec.stop_marked(&mark, Duration::from_secs(2)).unwrap();
    assert_eq!(
        regex::Regex::new(r"group \d+").unwrap().replace(&stop, "group N"),
        "the remote process group N on 127.0.0.1 was terminated (SIGTERM)"
    );
    for pid in all {
        assert!(!alive_after_wait(pid), "remote process {pid} outlived the stop\n{}", sshd.log());
    }
    // Once more: nothing is left to stop.
    assert_eq!(
        exec.stop_marked(&mark, Duration::from_secs(2)).unwrap(),
        "no remote process group of the job was found on 127.0.0.1 (the command ended, or had not started)"
    );
    // A mark goes into shell scripts: one that is not 32 hex digits is refused, and nothing runs.
    let stop = exec.stop_marked("0; touch /tmp/opsgraph-injected; #0123456", Duration::from_secs(1)).unwrap();
    assert_eq!(stop, "stopping the remote process group on 127.0.0.1 failed: the run's mark is not 32 hex digits");
    let mut bad = Spec::new(Program::Shell(format!("touch {}/ran", dir.path().display())));
    bad.mark = Some("not-hex-not-hex-not-hex-not-hex!".into());
    let run = exec.run(&bad, &Cancel::new());
    assert_eq!(run.outcome, Outcome::CouldNotStart { error: "the run's mark is not 32 hex digits".into() });
    assert!(!dir.join("ran").exists());
    exec.close();
}
