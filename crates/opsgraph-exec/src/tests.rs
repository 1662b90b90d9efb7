//! Tests against real processes, sockets, files, and (when root and sshd are here) a real sshd.

use std::fmt::Write as _;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use expect_test::{expect, Expect};
use opsgraph_core::model::Command;

use crate::capture::Capture;
use crate::procfs::process_state;
use crate::ssh::remote_command;
use crate::testing::{injection_corpus, TempDir};
use crate::{
    param_env, parse_duration, program_for, shell_quote, Cancel, Executor, LocalExecutor, Outcome, Program, Run, Spec,
};

// ---------------------------------------------------------------------------------------------
// Helpers

pub(crate) fn sh(line: &str) -> Spec {
    Spec::new(Program::Shell(line.to_owned()))
}

fn local(spec: &Spec) -> Run {
    LocalExecutor.run(spec, &Cancel::new())
}

/// A run without its duration, for snapshots.
pub(crate) fn render(run: &Run) -> String {
    let mut out = format!("{:?}\n", run.outcome);
    for (name, bytes) in [("stdout", &run.output.stdout), ("stderr", &run.output.stderr)] {
        if !bytes.is_empty() {
            writeln!(out, "{name}: {:?}", String::from_utf8_lossy(bytes)).unwrap();
        }
    }
    if run.output.truncated {
        out.push_str("truncated\n");
    }
    if run.leaked {
        out.push_str("leaked\n");
    }
    if let Some(status) = run.http_status {
        writeln!(out, "http status {status}").unwrap();
    }
    out
}

fn check(spec: Spec, expect: Expect) {
    expect.assert_eq(&render(&local(&spec)));
}

/// Dead, or dying: a process sent SIGKILL is gone within moments, but not always before the
/// executor returns on a loaded machine, so this waits up to two seconds for it.
fn dead(pid: &str) -> bool {
    let until = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        if process_state(pid).is_none_or(|(state, _)| state == 'Z' || state == 'X') {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn write_script(dir: &TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

// ---------------------------------------------------------------------------------------------
// Local executor

#[test]
fn argv_is_exec_directly() {
    check(
        Spec::argv(["printf", "%s|", "a b", "$HOME", "*", ""]),
        expect![[r#"
            Exited { code: 0 }
            stdout: "a b|$HOME|*||"
        "#]],
    );
}

#[test]
fn exit_codes_and_signals() {
    check(
        Spec::argv(["true"]),
        expect![[r#"
        Exited { code: 0 }
    "#]],
    );
    check(
        Spec::argv(["false"]),
        expect![[r#"
        Exited { code: 1 }
    "#]],
    );
    check(
        sh("echo out; echo err >&2; exit 3"),
        expect![[r#"
        Exited { code: 3 }
        stdout: "out\n"
        stderr: "err\n"
    "#]],
    );
    check(
        sh("exit 255"),
        expect![[r#"
        Exited { code: 255 }
    "#]],
    );
    check(
        sh("kill -KILL $$"),
        expect![[r#"
        Signalled { signal: 9 }
    "#]],
    );
    check(
        sh("kill -SEGV $$"),
        expect![[r#"
        Signalled { signal: 11 }
    "#]],
    );
}

#[test]
fn scripts_run_with_sh_eu() {
    let dir = TempDir::new();
    let unset = write_script(&dir, "unset.sh", "echo before\necho \"$NOT_SET_ANYWHERE\"\necho after\n");
    let failing = write_script(&dir, "failing.sh", "echo before\nfalse\necho after\n");
    let args = write_script(&dir, "args.sh", "printf '%s|' \"$0\" \"$@\"\n");
    let run = local(&Spec::new(Program::Script { path: unset.clone(), args: vec![] }));
    assert_eq!(run.outcome, Outcome::Exited { code: 2 }, "{}", render(&run));
    assert_eq!(run.output.stdout_lossy(), "before\n");
    assert!(run.output.stderr_lossy().contains("NOT_SET_ANYWHERE: parameter not set"), "{}", render(&run));
    check(
        Spec::new(Program::Script { path: failing, args: vec![] }),
        expect![[r#"
        Exited { code: 1 }
        stdout: "before\n"
    "#]],
    );
    let run =
        local(&Spec::new(Program::Script { path: args.clone(), args: vec!["a b".into(), "".into(), "-x".into()] }));
    assert_eq!(run.output.stdout_lossy(), format!("{}|a b||-x|", args.display()));
    // A relative script path is found in the working directory.
    let mut spec = Spec::new(Program::Script { path: "args.sh".into(), args: vec![] });
    spec.workdir = Some(dir.path().to_owned());
    check(
        spec,
        expect![[r#"
        Exited { code: 0 }
        stdout: "args.sh|"
    "#]],
    );
}

#[test]
fn could_not_start() {
    check(
        Spec::argv(["/nonexistent/program"]),
        expect![[r#"
        CouldNotStart { error: "failed to start `/nonexistent/program`: No such file or directory (os error 2)" }
    "#]],
    );
    check(
        Spec::argv(["no-such-program-anywhere"]),
        expect![[r#"
        CouldNotStart { error: "failed to start `no-such-program-anywhere`: No such file or directory (os error 2)" }
    "#]],
    );
    check(
        Spec::argv(["/"]),
        expect![[r#"
        CouldNotStart { error: "failed to start `/`: Permission denied (os error 13)" }
    "#]],
    );
    check(
        Spec::argv(Vec::<String>::new()),
        expect![[r#"
        CouldNotStart { error: "the command is empty" }
    "#]],
    );
    check(
        Spec::new(Program::Script { path: "/nonexistent.sh".into(), args: vec![] }),
        expect![[r#"
        CouldNotStart { error: "script /nonexistent.sh not found" }
    "#]],
    );
    let mut spec = Spec::argv(["true"]);
    spec.workdir = Some("/nonexistent/dir".into());
    check(
        spec,
        expect![[r#"
        CouldNotStart { error: "working directory /nonexistent/dir does not exist" }
    "#]],
    );
    let mut spec = Spec::argv(["/bin/true"]);
    spec.workdir = Some("/etc/passwd".into());
    check(
        spec,
        expect![[r#"
        CouldNotStart { error: "working directory /etc/passwd does not exist" }
    "#]],
    );
    let mut spec = Spec::argv(["true"]);
    spec.env.insert("BAD NAME".into(), "x".into());
    check(
        spec,
        expect![[r#"
        CouldNotStart { error: "invalid environment variable name `BAD NAME` (expected [A-Za-z_][A-Za-z0-9_]*)" }
    "#]],
    );
    check(
        Spec::new(Program::Http { method: "GET".into(), url: "http://x/".into(), headers: vec![], body: vec![] }),
        expect![[r#"
            CouldNotStart { error: "the local executor runs processes, not http requests" }
        "#]],
    );
}

#[test]
fn timeout_when_the_program_exits_on_term() {
    let mut spec = Spec::argv(["sleep", "30"]);
    spec.timeout = Some(Duration::from_millis(200));
    spec.grace = Duration::from_secs(5);
    let run = local(&spec);
    assert_eq!(run.outcome, Outcome::TimedOut { after: Duration::from_millis(200), killed: false });
    assert!(run.output.duration < Duration::from_secs(2), "{:?}", run.output.duration);
    assert_eq!(run.outcome.to_string(), "timed out after 200ms");
}

#[test]
fn timeout_when_the_program_traps_term_needs_kill() {
    let mut spec = sh("trap '' TERM; echo started; sleep 30");
    spec.timeout = Some(Duration::from_millis(200));
    spec.grace = Duration::from_millis(300);
    let run = local(&spec);
    check_timed_out_killed(&run);
    assert_eq!(run.output.stdout_lossy(), "started\n");
    assert!(run.output.duration >= Duration::from_millis(500), "{:?}", run.output.duration);
    assert!(run.output.duration < Duration::from_secs(3), "{:?}", run.output.duration);
}

fn check_timed_out_killed(run: &Run) {
    assert_eq!(run.outcome, Outcome::TimedOut { after: Duration::from_millis(200), killed: true }, "{}", render(run));
    assert_eq!(run.outcome.to_string(), "timed out after 200ms (killed: it outlived SIGTERM)");
}

#[test]
fn timeout_kills_the_whole_group() {
    let dir = TempDir::new();
    // A background child that dies on TERM with its parent.
    let mut spec = sh("sleep 1000 & echo $! > pid; wait");
    spec.workdir = Some(dir.path().to_owned());
    spec.timeout = Some(Duration::from_millis(200));
    let run = local(&spec);
    assert_eq!(run.outcome, Outcome::TimedOut { after: Duration::from_millis(200), killed: false }, "{}", render(&run));
    let pid = std::fs::read_to_string(dir.join("pid")).unwrap();
    assert!(dead(pid.trim()), "the background sleep {pid} survived");

    // A leader that dies on TERM, and a child that ignores it: the child still gets KILL.
    let mut spec = sh("(trap '' TERM; exec sleep 1000) & echo $! > pid2; wait");
    spec.workdir = Some(dir.path().to_owned());
    spec.timeout = Some(Duration::from_millis(200));
    spec.grace = Duration::from_millis(300);
    let run = local(&spec);
    check_timed_out_killed(&run);
    let pid = std::fs::read_to_string(dir.join("pid2")).unwrap();
    assert!(dead(pid.trim()), "the TERM-proof child {pid} survived");
}

#[test]
fn output_is_capped_head_and_tail() {
    let mut spec = sh("printf 'HEAD'; head -c 10000 /dev/zero | tr '\\0' a; printf 'TAIL'; printf 'err' >&2");
    spec.output_cap = 20;
    check(
        spec,
        expect![[r#"
        Exited { code: 0 }
        stdout: "HEADaaaaaa\n[opsgraph: 9988 bytes omitted]\naaaaaaTAIL"
        stderr: "err"
        truncated
    "#]],
    );
    // Exactly the cap is not truncated.
    let mut spec = Spec::argv(["printf", "0123456789"]);
    spec.output_cap = 10;
    check(
        spec,
        expect![[r#"
        Exited { code: 0 }
        stdout: "0123456789"
    "#]],
    );
    // Large output drains without deadlock, and the cap holds.
    let mut spec = sh("head -c 5000000 /dev/zero");
    spec.output_cap = 1000;
    let run = local(&spec);
    assert!(run.output.truncated);
    assert_eq!(run.output.stdout.len(), 1000 + "\n[opsgraph: 4999000 bytes omitted]\n".len());
}

#[test]
fn capture_keeps_head_and_tail_across_pushes() {
    let mut c = Capture::new(6);
    for chunk in ["ab", "cd", "ef", "gh", "i"] {
        c.push(chunk.as_bytes());
    }
    assert!(c.truncated());
    assert_eq!(String::from_utf8(c.bytes()).unwrap(), "abc\n[opsgraph: 3 bytes omitted]\nghi");
    let mut c = Capture::new(0);
    c.push(b"x");
    assert_eq!(String::from_utf8(c.bytes()).unwrap(), "\n[opsgraph: 1 bytes omitted]\n");
    let mut c = Capture::new(7);
    c.push(b"1234567");
    assert!(!c.truncated());
    assert_eq!(c.bytes(), b"1234567");
}

#[test]
fn cancel_stops_a_run() {
    let cancel = Cancel::new();
    let canceller = {
        let cancel = cancel.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            cancel.cancel();
        })
    };
    let start = Instant::now();
    let run = LocalExecutor.run(&Spec::argv(["sleep", "30"]), &cancel);
    canceller.join().unwrap();
    assert_eq!(run.outcome, Outcome::Cancelled);
    assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
    // Cancelled before it starts: nothing runs.
    let dir = TempDir::new();
    let marker = dir.join("ran");
    let run = LocalExecutor.run(&Spec::argv(["touch", marker.to_str().unwrap()]), &cancel);
    assert_eq!(run.outcome, Outcome::Cancelled);
    assert!(!marker.exists());
}

#[test]
fn env_workdir_and_stdin() {
    let dir = TempDir::new();
    let mut spec = sh("printf '%s|%s|%s|%s' \"$FOO\" \"$PWD\" \"${HOME-unset}\" \"$PATH\"");
    spec.env.insert("FOO".into(), "bar baz".into());
    spec.workdir = Some(dir.path().to_owned());
    let run = local(&spec);
    assert_eq!(
        run.output.stdout_lossy(),
        format!("bar baz|{}|unset|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", dir.path().display())
    );
    // Inheriting: the control plane's variables are there, and `env` still wins.
    std::env::var("HOME").expect("HOME is set for the tests");
    spec.inherit_env = true;
    spec.env.insert("HOME".into(), "/elsewhere".into());
    let run = local(&spec);
    assert!(run.output.stdout_lossy().contains("|/elsewhere|"), "{}", render(&run));
    // PATH from env is used to find the program.
    let mut spec = Spec::argv(["printf", "found"]);
    spec.env.insert("PATH".into(), "/nonexistent".into());
    assert!(matches!(local(&spec).outcome, Outcome::CouldNotStart { .. }));
    // stdin
    let mut spec = Spec::argv(["cat"]);
    spec.stdin = Some(b"line one\nline two".to_vec());
    check(
        spec,
        expect![[r#"
        Exited { code: 0 }
        stdout: "line one\nline two"
    "#]],
    );
    // A program that does not read its stdin is fine.
    let mut spec = Spec::argv(["true"]);
    spec.stdin = Some(vec![b'x'; 1 << 20]);
    check(
        spec,
        expect![[r#"
        Exited { code: 0 }
    "#]],
    );
}

#[test]
fn leaked_output_holders_are_stopped_and_detached_ones_left_alone() {
    let start = Instant::now();
    check(
        sh("sleep 30 & echo done"),
        expect![[r#"
        Exited { code: 0 }
        stdout: "done\n"
        leaked
    "#]],
    );
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());

    let dir = TempDir::new();
    let mut spec = sh("sleep 30 >/dev/null 2>&1 & echo $! > pid");
    spec.workdir = Some(dir.path().to_owned());
    check(
        spec,
        expect![[r#"
        Exited { code: 0 }
    "#]],
    );
    let pid = std::fs::read_to_string(dir.join("pid")).unwrap();
    assert!(!dead(pid.trim()), "a detached background process was killed");
    let _ = std::process::Command::new("kill").arg(pid.trim()).status();
}

#[test]
fn debug_of_a_spec_hides_values() {
    let mut spec = Spec::argv(["deploy"]);
    spec.env.insert("OPSGRAPH_PARAM_TOKEN".into(), "s3cr3t".into());
    spec.stdin = Some(b"s3cr3t".to_vec());
    let debug = format!("{spec:?}");
    assert!(!debug.contains("s3cr3t"), "{debug}");
    assert!(debug.contains("OPSGRAPH_PARAM_TOKEN=<redacted>"), "{debug}");
}

// ---------------------------------------------------------------------------------------------
// Small pure helpers

#[test]
fn program_for_lines() {
    let cases = [
        "systemctl is-active containerd",
        "  crictl   info\t--verbose ",
        "kubectl get --raw /healthz",
        "echo $HOME",
        "a | b",
        "a && b",
        "cat 'file name'",
        "ls *.txt",
        "FOO=1 run",
        "cd /tmp",
        "exit 3",
        "~/bin/tool",
        "x # comment",
        "line\nbreak",
        "",
        "   ",
        "! true",
        "echo {a,b}",
    ];
    let mut out = String::new();
    for line in cases {
        writeln!(out, "{line:?} -> {:?}", program_for(&Command::Line(line.to_owned()))).unwrap();
    }
    writeln!(out, "argv -> {:?}", program_for(&Command::Argv(vec!["a;b".into(), "$x".into()]))).unwrap();
    expect![[r#"
        "systemctl is-active containerd" -> Argv(["systemctl", "is-active", "containerd"])
        "  crictl   info\t--verbose " -> Argv(["crictl", "info", "--verbose"])
        "kubectl get --raw /healthz" -> Argv(["kubectl", "get", "--raw", "/healthz"])
        "echo $HOME" -> Shell("echo $HOME")
        "a | b" -> Shell("a | b")
        "a && b" -> Shell("a && b")
        "cat 'file name'" -> Shell("cat 'file name'")
        "ls *.txt" -> Shell("ls *.txt")
        "FOO=1 run" -> Shell("FOO=1 run")
        "cd /tmp" -> Shell("cd /tmp")
        "exit 3" -> Shell("exit 3")
        "~/bin/tool" -> Shell("~/bin/tool")
        "x # comment" -> Shell("x # comment")
        "line\nbreak" -> Shell("line\nbreak")
        "" -> Shell("")
        "   " -> Shell("   ")
        "! true" -> Shell("! true")
        "echo {a,b}" -> Shell("echo {a,b}")
        argv -> Argv(["a;b", "$x"])
    "#]]
    .assert_eq(&out);
}

#[test]
fn a_line_split_into_argv_means_the_same_as_through_sh() {
    // Whenever program_for splits a line, sh would have split it the same way.
    let dir = TempDir::new();
    for payload in injection_corpus(&dir.join("marker")) {
        let line = format!("printf %s| {payload}");
        if let Program::Argv(argv) = program_for(&Command::Line(line.clone())) {
            let direct = local(&Spec::new(Program::Argv(argv)));
            let through_sh = local(&sh(&line));
            assert_eq!(direct.output.stdout, through_sh.output.stdout, "{line:?}");
        }
    }
    assert!(!dir.join("marker").exists());
}

#[test]
fn param_env_names() {
    let out: Vec<String> =
        ["version", "release-name", "node_id", "a.b c", "ünï", "9lives", ""].iter().map(|n| param_env(n)).collect();
    expect![[r#"
        [
            "OPSGRAPH_PARAM_VERSION",
            "OPSGRAPH_PARAM_RELEASE_NAME",
            "OPSGRAPH_PARAM_NODE_ID",
            "OPSGRAPH_PARAM_A_B_C",
            "OPSGRAPH_PARAM__N_",
            "OPSGRAPH_PARAM_9LIVES",
            "OPSGRAPH_PARAM_",
        ]
    "#]]
    .assert_debug_eq(&out);
}

#[test]
fn durations() {
    let mut out = String::new();
    for input in [
        "30s",
        "500ms",
        "10m",
        "1h30m",
        "2d",
        "0s",
        "1h1m1s1ms",
        "",
        "30",
        "s",
        "5x",
        "1.5s",
        "-1s",
        "99999999999999999999s",
        "10 s",
    ] {
        match parse_duration(input) {
            Ok(d) => writeln!(out, "{input:?} -> {d:?}").unwrap(),
            Err(e) => writeln!(out, "{input:?} -> {e}").unwrap(),
        }
    }
    expect![[r#"
        "30s" -> 30s
        "500ms" -> 500ms
        "10m" -> 600s
        "1h30m" -> 5400s
        "2d" -> 172800s
        "0s" -> 0ns
        "1h1m1s1ms" -> 3661.001s
        "" -> invalid duration ``: it is empty
        "30" -> invalid duration `30`: a unit is missing (ms, s, m, h or d)
        "s" -> invalid duration `s`: expected a number, like `30s`, `500ms` or `10m`
        "5x" -> invalid duration `5x`: unknown unit (expected ms, s, m, h or d)
        "1.5s" -> invalid duration `1.5s`: a unit is missing (ms, s, m, h or d)
        "-1s" -> invalid duration `-1s`: expected a number, like `30s`, `500ms` or `10m`
        "99999999999999999999s" -> invalid duration `99999999999999999999s`: the number is too large
        "10 s" -> invalid duration `10 s`: a unit is missing (ms, s, m, h or d)
    "#]]
    .assert_eq(&out);
}

#[test]
fn shell_quote_words() {
    let out: Vec<String> = ["", "plain", "it's", "'", "a\nb", "-n", "$(x)"].iter().map(|s| shell_quote(s)).collect();
    expect![[r#"
        [
            "''",
            "'plain'",
            "'it'\\''s'",
            "''\\'''",
            "'a\nb'",
            "'-n'",
            "'$(x)'",
        ]
    "#]]
    .assert_debug_eq(&out);
}

#[test]
fn remote_commands() {
    let dir = TempDir::new();
    let script = write_script(&dir, "s.sh", "echo \"$1\"\n");
    let mut spec = Spec::argv(["printf", "%s", "it's"]);
    spec.env.insert("A".into(), "x y".into());
    spec.env.insert("B".into(), "".into());
    spec.workdir = Some("/var/tmp".into());
    let mut out = remote_command(&spec).unwrap();
    out.push('\n');
    spec.program = Program::Script { path: script.clone(), args: vec!["--flag".into()] };
    spec.workdir = None;
    out.push_str(&remote_command(&spec).unwrap().replace(&script.display().to_string(), "SCRIPT"));
    out.push('\n');
    spec.program = Program::Shell("a | b".into());
    spec.env.clear();
    out.push_str(&remote_command(&spec).unwrap());
    out.push('\n');
    spec.env.insert("BAD=NAME".into(), "x".into());
    out.push_str(&remote_command(&spec).unwrap_err());
    out.push('\n');
    spec.env.clear();
    spec.program = Program::Argv(vec!["x".repeat(200_000)]);
    out.push_str(&remote_command(&spec).unwrap_err());
    expect![[r#"
        cd -- '/var/tmp' && A='x y' B='' 'printf' '%s' 'it'\''s'
        A='x y' B='' sh -euc 'echo "$1"
        ' 'SCRIPT' '--flag'
        sh -c 'a | b'
        invalid environment variable name `BAD=NAME` (expected [A-Za-z_][A-Za-z0-9_]*)
        the remote command is 200002 bytes; one shell argument holds at most 131071"#]]
    .assert_eq(&out);
}

/// The remote command, run by the local shells an sshd would hand it to: every payload arrives
/// byte for byte, in the environment and in argv, and nothing runs. (The SSH test below does the
/// same through a real sshd when it can.)
#[test]
fn remote_commands_survive_real_shells() {
    let dir = TempDir::new();
    let marker = dir.join("marker");
    let shells: Vec<&str> = ["/bin/sh", "/bin/bash", "/bin/dash", "/usr/bin/zsh", "/bin/ksh"]
        .into_iter()
        .filter(|s| Path::new(s).exists())
        .collect();
    assert!(!shells.is_empty());
    for payload in injection_corpus(&marker) {
        let argv_spec = Spec::argv(["printf", "%s", payload.as_str()]);
        let mut env_spec = Spec::new(Program::Shell("printf %s \"$X\"".into()));
        env_spec.env.insert("X".into(), payload.clone());
        for spec in [&argv_spec, &env_spec] {
            let remote = remote_command(spec).unwrap();
            for shell in &shells {
                let run = local(&Spec::argv([shell, "-c", remote.as_str()]));
                assert_eq!(run.outcome, Outcome::Exited { code: 0 }, "{shell} {payload:?}: {}", render(&run));
                assert_eq!(run.output.stdout_lossy(), payload, "{shell} changed {payload:?}");
            }
        }
    }
    assert!(!marker.exists(), "a payload ran");
}

// ---------------------------------------------------------------------------------------------
// Injection corpus, local executor

/// Every payload through every parameter slot of the local executor: an environment variable
/// read by a script, an argv element, a script argument. Nothing runs, and the bytes arrive
/// exactly.
#[test]
fn injection_corpus_local() {
    let dir = TempDir::new();
    let marker = dir.join("marker");
    let corpus = injection_corpus(&marker);
    assert!(corpus.len() >= 500, "{}", corpus.len());
    eprintln!("injection corpus: {} payloads through 4 slots of the local executor", corpus.len());
    run_corpus(&LocalExecutor, &corpus, &dir);
    // The batched harness the SSH test uses, checked here too.
    run_corpus_batched(&LocalExecutor, &corpus, &dir);
    assert!(!marker.exists(), "a payload ran");
}

/// Runs the corpus through `exec` (whose files live in `dir`, on the same machine).
fn run_corpus(exec: &dyn Executor, corpus: &[String], dir: &TempDir) {
    let env_script = write_script(dir, "env.sh", "printf %s \"$OPSGRAPH_PARAM_X\" > \"$OUT_FILE\"\n");
    let arg_script = write_script(dir, "arg.sh", "printf %s \"$1\"\n");
    let out_file = dir.join("received");
    let cancel = Cancel::new();
    for payload in corpus {
        // An environment variable, written by a script to a file.
        let _ = std::fs::remove_file(&out_file);
        let mut spec = Spec::new(Program::Script { path: env_script.clone(), args: vec![] });
        spec.env.insert(param_env("x"), payload.clone());
        spec.env.insert("OUT_FILE".into(), out_file.display().to_string());
        let run = exec.run(&spec, &cancel);
        assert_eq!(run.outcome, Outcome::Exited { code: 0 }, "env {payload:?}: {}", render(&run));
        assert_eq!(std::fs::read(&out_file).unwrap(), payload.as_bytes(), "env changed {payload:?}");

        // An argv element.
        let run = exec.run(&Spec::argv(["printf", "%s", payload.as_str()]), &cancel);
        assert_eq!(run.outcome, Outcome::Exited { code: 0 }, "argv {payload:?}: {}", render(&run));
        assert_eq!(run.output.stdout, payload.as_bytes(), "argv changed {payload:?}");

        // A script argument.
        let run =
            exec.run(&Spec::new(Program::Script { path: arg_script.clone(), args: vec![payload.clone()] }), &cancel);
        assert_eq!(run.outcome, Outcome::Exited { code: 0 }, "script arg {payload:?}: {}", render(&run));
        assert_eq!(run.output.stdout, payload.as_bytes(), "script arg changed {payload:?}");

        // As argv[0] it is only ever a program name that is not found.
        if !payload.is_empty() {
            let run = exec.run(&Spec::argv([payload.as_str()]), &cancel);
            assert!(
                matches!(run.outcome, Outcome::CouldNotStart { .. } | Outcome::Exited { code: 126 | 127 }),
                "argv[0] {payload:?}: {}",
                render(&run)
            );
        }
    }
}

/// The corpus through `exec` with many payloads per run (for executors where a run is costly):
/// environment variables read by a script and written to files, argv elements, script
/// arguments. Returns the number of runs.
pub(crate) fn run_corpus_batched(exec: &dyn Executor, corpus: &[String], dir: &TempDir) -> usize {
    // Batches whose quoted size stays well within one remote shell argument.
    let mut batches: Vec<Vec<&String>> = vec![Vec::new()];
    let mut size = 0;
    for payload in corpus {
        let quoted = shell_quote(payload).len() + 32;
        if size + quoted > 100_000 && !batches.last().unwrap().is_empty() {
            batches.push(Vec::new());
            size = 0;
        }
        size += quoted;
        batches.last_mut().unwrap().push(payload);
    }
    let env_script = write_script(
        dir,
        "env_batch.sh",
        "i=0\nwhile [ \"$i\" -lt \"$COUNT\" ]; do\n  eval \"printf %s \\\"\\$OPSGRAPH_PARAM_P$i\\\"\" > \"$OUT_DIR/$i\"\n  i=$((i + 1))\ndone\n",
    );
    let arg_script = write_script(dir, "arg_batch.sh", "for a in \"$@\"; do printf '%s\\0' \"$a\"; done\n");
    let cancel = Cancel::new();
    let mut runs = 0;
    for (b, batch) in batches.iter().enumerate() {
        // Environment variables.
        let out_dir = dir.join(&format!("out{b}"));
        std::fs::create_dir_all(&out_dir).unwrap();
        let mut spec = Spec::new(Program::Script { path: env_script.clone(), args: vec![] });
        for (i, payload) in batch.iter().enumerate() {
            spec.env.insert(param_env(&format!("p{i}")), (*payload).clone());
        }
        spec.env.insert("COUNT".into(), batch.len().to_string());
        spec.env.insert("OUT_DIR".into(), out_dir.display().to_string());
        let run = exec.run(&spec, &cancel);
        runs += 1;
        assert_eq!(run.outcome, Outcome::Exited { code: 0 }, "env batch {b}: {}", render(&run));
        for (i, payload) in batch.iter().enumerate() {
            assert_eq!(
                std::fs::read(out_dir.join(i.to_string())).unwrap(),
                payload.as_bytes(),
                "env changed {payload:?}"
            );
        }

        // Argv elements, and script arguments: each comes back NUL-terminated.
        let expected: Vec<u8> = batch.iter().flat_map(|p| p.bytes().chain([0])).collect();
        let mut argv = vec!["printf".to_owned(), "%s\\0".to_owned()];
        argv.extend(batch.iter().map(|p| (*p).clone()));
        let argv_spec = Spec::new(Program::Argv(argv));
        let script_spec =
            Spec::new(Program::Script { path: arg_script.clone(), args: batch.iter().map(|p| (*p).clone()).collect() });
        for (slot, spec) in [("argv", argv_spec), ("script arg", script_spec)] {
            let run = exec.run(&spec, &cancel);
            runs += 1;
            assert_eq!(run.outcome, Outcome::Exited { code: 0 }, "{slot} batch {b}: {}", render(&run));
            if run.output.stdout != expected {
                let got: Vec<&[u8]> = run.output.stdout.split(|&c| c == 0).collect();
                for (i, payload) in batch.iter().enumerate() {
                    assert_eq!(got.get(i).copied(), Some(payload.as_bytes()), "{slot} changed {payload:?}");
                }
                panic!("{slot} batch {b}: output differs");
            }
        }
    }
    runs
}
