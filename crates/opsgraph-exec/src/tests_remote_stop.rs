//! A timed-out or cancelled SSH run stops its remote command: the wrapper and the kill script
//! on this machine's `sh` (always), and through a real sshd on loopback (when root).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use expect_test::{expect, Expect};

use crate::remote_group::{describe, kill_script, wrap};
use crate::testing::{Sshd, TempDir};
use crate::{Cancel, Executor, Outcome, Program, Run, Spec, SshExecutor};

/// Whether `pid` is a live process (not a zombie), after waiting up to 3 s for it to go.
fn alive_after_wait(pid: i32) -> bool {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let live = crate::procfs::process_state(&pid.to_string()).is_some_and(|(s, _)| s != 'Z' && s != 'X');
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

#[test]
fn the_wrapper_records_its_group_and_the_kill_script_stops_it() {
    let dir = TempDir::new();
    let token = "0123456789abcdef0123456789abcdef";
    let file = dir.join(&format!("opsgraph-pg.{token}"));
    // A normal end: the exit code passes through, and the file is gone afterwards.
    let mut child = Command::new("sh")
        .args(["-c", &wrap("echo $$ > pid; exit 7", token)])
        .current_dir(dir.path())
        .env("TMPDIR", dir.path())
        .spawn()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(7));
    assert!(!file.exists(), "the wrapper left its file");
    assert_eq!(
        describe("h", local_sh(&kill_script(token, Duration::from_millis(200)), &dir)),
        "no remote process group was recorded on h (the command ended, or had not started)"
    );

    // A running command in its own session: TERM stops it, the file is removed.
    let mut child = Command::new("sh")
        .args(["-c", &wrap("sleep 600 & echo $! > child; wait", token)])
        .current_dir(dir.path())
        .env("TMPDIR", dir.path())
        .spawn()
        .unwrap();
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
        "stopping the remote process group on h failed: TMP/opsgraph-pg.0123456789abcdef0123456789abcdef holds no process group id"
    );
    // And the wrapper refuses to run under a name someone else made (it would not own it).
    let out = Command::new("sh")
        .args(["-c", &wrap("touch ran", token)])
        .current_dir(dir.path())
        .env("TMPDIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("opsgraph: cannot record the process group"));
    assert!(!dir.join("ran").exists());
}

/// A login shell that already leads its own session and process group, as every command `sshd`
/// starts without a terminal does, runs the wrapper's `sh` in its place: the group recorded is
/// the shell's own pid (with `setsid -w` it would be a forked child's), and the command still
/// runs, passes its exit code and has its file removed.
#[test]
fn a_session_leader_runs_the_wrapper_in_place() {
    let dir = TempDir::new();
    let token = "ffeeddccbbaa99887766554433221100";
    // `setsid` (no `-w`) from a process that leads no group makes the session in place and execs
    // the `sh`: the spawned pid leads its session and group, as under `sshd`.
    let child = Command::new("setsid")
        .args(["sh", "-c", &wrap("echo \"$(cat \"$1\") $$\"; exit 3", token)])
        .current_dir(dir.path())
        .env("TMPDIR", dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("{pid} {pid}"), "not run in place");
    assert!(!dir.join(&format!("opsgraph-pg.{token}")).exists(), "the wrapper left its file");
}

/// A short command travels as an argument, a long one on a here-document; both run as given,
/// with the file's name as `$1`, and record their group.
#[test]
fn short_and_long_commands_run_as_given() {
    let dir = TempDir::new();
    let token = "00112233445566778899aabbccddeeff";
    let check = |command: &str, expect: &str| {
        let wrapped = wrap(command, token);
        let out = Command::new("sh")
            .args(["-c", &wrapped])
            .current_dir(dir.path())
            .env("TMPDIR", dir.path())
            .output()
            .unwrap();
        let here_doc = wrapped.contains("3<<'OPSGRAPH_");
        let got = format!("{} here-doc={here_doc}", String::from_utf8_lossy(&out.stdout).trim());
        assert_eq!(got, expect, "{}", String::from_utf8_lossy(&out.stderr));
        assert!(!dir.join(&format!("opsgraph-pg.{token}")).exists(), "the wrapper left its file");
    };
    let quotes = "echo 'it'\\''s' \"$(basename \"$1\")\" \"$2\"";
    check(quotes, "it's opsgraph-pg.00112233445566778899aabbccddeeff here-doc=false");
    // A command that sets its own positional parameters: the wrapper still removes its file, and
    // only its file (it once removed whatever `$1` named at exit).
    std::fs::write(dir.join("bystander"), "kept").unwrap();
    check("set -- bystander; echo moved", "moved here-doc=false");
    assert!(dir.join("bystander").exists(), "the wrapper removed the command's `$1`, not its own file");
    let long = format!(": '{}'; echo \"$(cat \"$1\")\" = $$", "x".repeat(20 * 1024));
    let got = {
        let out = Command::new("sh")
            .args(["-c", &wrap(&long, token)])
            .current_dir(dir.path())
            .env("TMPDIR", dir.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let (recorded, pid) = got.split_once(" = ").unwrap_or_else(|| panic!("{got:?}"));
    assert_eq!(recorded, pid, "the long command's group is not the one recorded");
    assert!(wrap(&long, token).contains("3<<'OPSGRAPH_"));
    check(&format!(": '{}'; echo long", "y".repeat(20 * 1024)), "long here-doc=true");
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
    let unreachable = SshExecutor { port: crate::testing::free_port(), ..sshd.executor() };
    let stop = unreachable.stop_remote_for_test("0123456789abcdef0123456789abcdef", Duration::from_millis(100));
    assert!(stop.starts_with("stopping the remote process group on 127.0.0.1 failed: ssh: "), "{stop}");
    assert!(stop.contains("Connection refused"), "{stop}");
}
