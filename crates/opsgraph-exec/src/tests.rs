//! Tests against real processes, sockets, files, and (when root and sshd are here) a real sshd.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use expect_test::{expect, Expect};
use opsgraph_core::model::{Command, Evidence, EvidenceSource};

use crate::capture::Capture;
use crate::procfs::process_state;
use crate::ssh::remote_command;
use crate::testing::{free_port, injection_corpus, HttpServer, Sshd, TempDir};
use crate::{
    check_evidence, param_env, parse_duration, program_for, shell_quote, Cancel, EvidenceResult, Executor,
    HttpExecutor, LocalExecutor, Outcome, Program, Run, Spec, SshExecutor,
};

// ---------------------------------------------------------------------------------------------
// Helpers

fn sh(line: &str) -> Spec {
    Spec::new(Program::Shell(line.to_owned()))
}

fn local(spec: &Spec) -> Run {
    LocalExecutor.run(spec, &Cancel::new())
}

/// A run without its duration, for snapshots.
fn render(run: &Run) -> String {
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

fn write_script(dir: &TempDir, name: &str, text: &str) -> std::path::PathBuf {
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

// ---------------------------------------------------------------------------------------------
// HTTP executor

fn http_server() -> HttpServer {
    HttpServer::start(|req| match req.path.as_str() {
        "/health" => HttpServer::response(200, "ok"),
        "/down" => HttpServer::response(503, "maintenance"),
        "/echo" => HttpServer::response(201, &format!("{} {}", req.method, String::from_utf8_lossy(&req.body))),
        "/chunked" => {
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n6\r\npedia \r\n0\r\n\r\n".to_vec()
        }
        "/until-close" => b"HTTP/1.1 200 OK\r\n\r\nno length".to_vec(),
        "/cut" => b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort".to_vec(),
        "/garbage" => b"SSH-2.0-OpenSSH\r\n\r\n".to_vec(),
        "/slow" => {
            thread::sleep(Duration::from_millis(1500));
            HttpServer::response(200, "late")
        }
        _ => HttpServer::response(404, "not found"),
    })
}

fn http(method: &str, url: &str, body: &str) -> Spec {
    Spec::new(Program::Http {
        method: method.into(),
        url: url.into(),
        headers: vec![("X-Test".into(), "1".into())],
        body: body.as_bytes().to_vec(),
    })
}

#[test]
fn http_executor() {
    let server = http_server();
    let mut out = String::new();
    for (method, path, body) in [
        ("GET", "/health", ""),
        ("GET", "/down", ""),
        ("POST", "/echo", "{\"a\":1}"),
        ("GET", "/chunked", ""),
        ("GET", "/until-close", ""),
        ("GET", "/cut", ""),
        ("GET", "/garbage", ""),
        ("GET", "/missing", ""),
    ] {
        let run = HttpExecutor.run(&http(method, &server.url(path), body), &Cancel::new());
        write!(out, "{method} {path}: {}", render(&run)).unwrap();
    }
    let mut slow = http("GET", &server.url("/slow"), "");
    slow.timeout = Some(Duration::from_millis(200));
    write!(out, "slow: {}", render(&HttpExecutor.run(&slow, &Cancel::new()))).unwrap();
    let closed = format!("http://127.0.0.1:{}/", free_port());
    let run = HttpExecutor.run(&http("GET", &closed, ""), &Cancel::new());
    write!(out, "closed port: {}", render(&run).replace(&closed[7..closed.len() - 1], "ADDR")).unwrap();
    for (method, url) in
        [("GET", "https://example.com/"), ("GET", "ftp://x/"), ("get", "http://x/"), ("GET", "http://a b/")]
    {
        write!(out, "{method} {url}: {}", render(&HttpExecutor.run(&http(method, url, ""), &Cancel::new()))).unwrap();
    }
    write!(out, "argv: {}", render(&HttpExecutor.run(&Spec::argv(["true"]), &Cancel::new()))).unwrap();
    expect![[r#"
        GET /health: Exited { code: 0 }
        stdout: "ok"
        http status 200
        GET /down: HttpStatus { status: 503 }
        stdout: "maintenance"
        http status 503
        POST /echo: Exited { code: 0 }
        stdout: "POST {\"a\":1}"
        http status 201
        GET /chunked: Exited { code: 0 }
        stdout: "Wikipedia "
        http status 200
        GET /until-close: Exited { code: 0 }
        stdout: "no length"
        http status 200
        GET /cut: Lost { reason: "the server closed the connection before the response was complete" }
        GET /garbage: Lost { reason: "not an http/1.x response: `SSH-2.0-OpenSSH`" }
        GET /missing: HttpStatus { status: 404 }
        stdout: "not found"
        http status 404
        slow: TimedOut { after: 200ms, killed: false }
        closed port: CouldNotStart { error: "failed to connect to ADDR: Connection refused (os error 111)" }
        GET https://example.com/: CouldNotStart { error: "invalid url `https://example.com/`: https is not supported: this client has no TLS" }
        GET ftp://x/: CouldNotStart { error: "invalid url `ftp://x/`: expected http://host[:port]/path" }
        get http://x/: CouldNotStart { error: "invalid http method `get`" }
        GET http://a b/: CouldNotStart { error: "failed to resolve a b: failed to lookup address information: Name or service not known" }
        argv: CouldNotStart { error: "the http executor sends http requests, it does not run programs" }
    "#]]
    .assert_eq(&out);
}

#[test]
fn http_cancel() {
    let server = http_server();
    let cancel = Cancel::new();
    let c = cancel.clone();
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        c.cancel();
    });
    let run = HttpExecutor.run(&http("GET", &server.url("/slow"), ""), &cancel);
    t.join().unwrap();
    assert_eq!(run.outcome, Outcome::Cancelled);
    assert!(run.output.duration < Duration::from_secs(1), "{:?}", run.output.duration);
}

// ---------------------------------------------------------------------------------------------
// Evidence

fn ev(source: EvidenceSource) -> Evidence {
    Evidence::new("e", source)
}

fn render_evidence(r: &EvidenceResult) -> String {
    format!(
        "{} ({} attempt{})\n  expected: {}\n  observed: {}\n  detail: {}\n",
        if r.passed { "passed" } else { "FAILED" },
        r.attempts,
        if r.attempts == 1 { "" } else { "s" },
        r.expected,
        r.observed,
        r.detail
    )
}

/// Runs each check on the local executor and renders the results, one after another.
fn check_evidences(cases: Vec<(&str, Evidence)>, replace: &[(&str, &str)], expect: Expect) {
    let mut out = String::new();
    let env = BTreeMap::from([("OPSGRAPH_PARAM_UNIT".to_owned(), "containerd".to_owned())]);
    for (name, e) in cases {
        let r = check_evidence(&e, &LocalExecutor, &env, &Cancel::new());
        write!(out, "{name}: {}", render_evidence(&r)).unwrap();
    }
    for (from, to) in replace {
        out = out.replace(from, to);
    }
    expect.assert_eq(&out);
}

fn line(s: &str) -> Option<Command> {
    Some(Command::Line(s.to_owned()))
}

#[test]
fn evidence_command_and_systemd() {
    let with = |source, command: &str, f: &dyn Fn(&mut Evidence)| {
        let mut e = ev(source);
        e.command = line(command);
        f(&mut e);
        e
    };
    use EvidenceSource::{Command as Cmd, Systemd};
    check_evidences(
        vec![
            ("systemd active", with(Systemd, "echo active", &|e| e.expected = Some("active".into()))),
            (
                "systemd inactive",
                with(Systemd, "sh -c 'echo inactive; exit 3'", &|e| e.expected = Some("active".into())),
            ),
            ("exit 0 by default", with(Cmd, "true", &|_| {})),
            ("exit 0 by default, failing", with(Cmd, "sh -c 'echo no such cluster; exit 1'", &|_| {})),
            ("exit code given", with(Cmd, "sh -c 'exit 3'", &|e| e.expected_exit_code = Some(3))),
            (
                "exit code and contains",
                with(Cmd, "printf 'STATUS: deployed\\nREVISION: 2'", &|e| {
                    e.expected_exit_code = Some(0);
                    e.contains = Some("STATUS: deployed".into());
                }),
            ),
            (
                "contains, failing",
                with(Cmd, "echo 'STATUS: failed'", &|e| e.contains = Some("STATUS: deployed".into())),
            ),
            (
                "contains, but the command failed",
                with(Cmd, "sh -c 'echo STATUS: deployed; exit 1'", &|e| e.contains = Some("STATUS: deployed".into())),
            ),
            (
                "expected 0, the awk of a missing tool's empty output",
                with(Cmd, "no-such-kubectl get nodes | awk '{n++} END {print n + 0}'; exit 127", &|e| {
                    e.expected = Some("0".into())
                }),
            ),
            ("matches", with(Cmd, "echo v1.7.13", &|e| e.matches = Some(r"^v1\.7\.\d+".into()))),
            ("matches, failing", with(Cmd, "echo v2.0.0", &|e| e.matches = Some(r"^v1\.7\.\d+".into()))),
            (
                "param env reaches the command",
                with(Cmd, "printf %s \"$OPSGRAPH_PARAM_UNIT\"", &|e| e.expected = Some("containerd".into())),
            ),
            ("empty output", with(Cmd, "true", &|e| e.expected = Some("1".into()))),
            ("not found", with(Cmd, "no-such-tool info", &|_| {})),
            (
                "timeout",
                with(Cmd, "sleep 5", &|e| {
                    e.timeout = Some("100ms".into());
                }),
            ),
            ("bad regex", with(Cmd, "true", &|e| e.matches = Some("(".into()))),
            ("bad interval", with(Cmd, "true", &|e| e.interval = Some("soon".into()))),
            ("no command", ev(Cmd)),
        ],
        &[],
        expect![[r#"
            systemd active: passed (1 attempt)
              expected: active
              observed: active
              detail: command `echo active`
            systemd inactive: FAILED (1 attempt)
              expected: active
              observed: inactive
              detail: command `sh -c 'echo inactive; exit 3'`
            exit 0 by default: passed (1 attempt)
              expected: exit code 0
              observed: exit code 0
              detail: command `true`
            exit 0 by default, failing: FAILED (1 attempt)
              expected: exit code 0
              observed: exit code 1, output no such cluster
              detail: command `sh -c 'echo no such cluster; exit 1'`
            exit code given: passed (1 attempt)
              expected: exit code 3
              observed: exit code 3
              detail: command `sh -c 'exit 3'`
            exit code and contains: passed (1 attempt)
              expected: exit code 0; output containing `STATUS: deployed`
              observed: exit code 0; STATUS: deployed
            REVISION: 2
              detail: command `printf 'STATUS: deployed\nREVISION: 2'`
            contains, failing: FAILED (1 attempt)
              expected: output containing `STATUS: deployed`
              observed: STATUS: failed

              detail: command `echo 'STATUS: failed'`
            contains, but the command failed: FAILED (1 attempt)
              expected: exit code 0
              observed: exit code 1, output STATUS: deployed
              detail: command `sh -c 'echo STATUS: deployed; exit 1'`
            expected 0, the awk of a missing tool's empty output: FAILED (1 attempt)
              expected: exit code 0
              observed: exit code 127, output 0
              detail: command `no-such-kubectl get nodes | awk '{n++} END {print n + 0}'; exit 127`; stderr: /bin/sh: 1: no-such-kubectl: not found
            matches: passed (1 attempt)
              expected: output matching /^v1\.7\.\d+/
              observed: v1.7.13

              detail: command `echo v1.7.13`
            matches, failing: FAILED (1 attempt)
              expected: output matching /^v1\.7\.\d+/
              observed: v2.0.0

              detail: command `echo v2.0.0`
            param env reaches the command: passed (1 attempt)
              expected: containerd
              observed: containerd
              detail: command `printf %s "$OPSGRAPH_PARAM_UNIT"`
            empty output: FAILED (1 attempt)
              expected: 1
              observed: (empty output)
              detail: command `true`
            not found: FAILED (1 attempt)
              expected: exit code 0
              observed: could not start: failed to start `no-such-tool`: No such file or directory (os error 2)
              detail: command `no-such-tool info`
            timeout: FAILED (1 attempt)
              expected: exit code 0
              observed: timed out after 100ms
              detail: command `sleep 5`
            bad regex: FAILED (0 attempts)
              expected: a valid check
              observed: invalid check: invalid regex `(`: regex parse error:
                (
                ^
            error: unclosed group
              detail: evidence `e`: invalid regex `(`: regex parse error:
                (
                ^
            error: unclosed group
            bad interval: FAILED (0 attempts)
              expected: a valid check
              observed: invalid check: interval: invalid duration `soon`: expected a number, like `30s`, `500ms` or `10m`
              detail: evidence `e`: interval: invalid duration `soon`: expected a number, like `30s`, `500ms` or `10m`
            no command: FAILED (0 attempts)
              expected: a valid check
              observed: invalid check: a command check needs `command`
              detail: evidence `e`: a command check needs `command`
        "#]],
    );
}

#[test]
fn evidence_retries_until_it_settles() {
    let dir = TempDir::new();
    let counter = dir.join("count");
    let mut e = ev(EvidenceSource::Command);
    // Passes on the third attempt.
    e.command = line(&format!(
        "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; test $n -ge 3",
        c = counter.display()
    ));
    e.retries = Some(5);
    e.interval = Some("10ms".into());
    let r = check_evidence(&e, &LocalExecutor, &BTreeMap::new(), &Cancel::new());
    assert!(r.passed, "{}", render_evidence(&r));
    assert_eq!(r.attempts, 3);
    // Never passes: every attempt is used, and the detail says so.
    e.command = line("false");
    e.retries = Some(2);
    let r = check_evidence(&e, &LocalExecutor, &BTreeMap::new(), &Cancel::new());
    expect![[r#"
        FAILED (3 attempts)
          expected: exit code 0
          observed: exit code 1
          detail: 3 attempts, 10ms apart; the last: command `false`
    "#]]
    .assert_eq(&render_evidence(&r));
    // Cancelled while waiting between attempts.
    e.interval = Some("10m".into());
    let cancel = Cancel::new();
    let c = cancel.clone();
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        c.cancel();
    });
    let start = Instant::now();
    let r = check_evidence(&e, &LocalExecutor, &BTreeMap::new(), &cancel);
    t.join().unwrap();
    assert!(!r.passed);
    assert_eq!(r.attempts, 1);
    assert!(r.detail.starts_with("cancelled"), "{}", render_evidence(&r));
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn evidence_http() {
    let server = http_server();
    let with = |path: &str, f: &dyn Fn(&mut Evidence)| {
        let mut e = ev(EvidenceSource::Http);
        e.url = Some(server.url(path));
        f(&mut e);
        e
    };
    let closed = free_port();
    check_evidences(
        vec![
            ("200", with("/health", &|_| {})),
            ("200 and body", with("/health", &|e| e.expected = Some("ok".into()))),
            ("503", with("/down", &|_| {})),
            ("503 expected", with("/down", &|e| e.expected_status = Some(503))),
            ("body contains, failing", with("/health", &|e| e.contains = Some("ready".into()))),
            ("body matches", with("/chunked", &|e| e.matches = Some("^Wiki".into()))),
            ("cut off", with("/cut", &|_| {})),
            ("slow", with("/slow", &|e| e.timeout = Some("200ms".into()))),
            ("closed", {
                let mut e = ev(EvidenceSource::Http);
                e.url = Some(format!("http://127.0.0.1:{closed}/"));
                e
            }),
            ("https", {
                let mut e = ev(EvidenceSource::Http);
                e.url = Some("https://example.com/".into());
                e
            }),
        ],
        &[(&server.port.to_string(), "PORT"), (&closed.to_string(), "CLOSED")],
        expect![[r#"
            200: passed (1 attempt)
              expected: status 200
              observed: status 200
              detail: GET http://127.0.0.1:PORT/health
            200 and body: passed (1 attempt)
              expected: status 200; ok
              observed: status 200; ok
              detail: GET http://127.0.0.1:PORT/health
            503: FAILED (1 attempt)
              expected: status 200
              observed: status 503
              detail: GET http://127.0.0.1:PORT/down; body: maintenance
            503 expected: passed (1 attempt)
              expected: status 503
              observed: status 503
              detail: GET http://127.0.0.1:PORT/down
            body contains, failing: FAILED (1 attempt)
              expected: body containing `ready`
              observed: ok
              detail: GET http://127.0.0.1:PORT/health
            body matches: passed (1 attempt)
              expected: status 200; body matching /^Wiki/
              observed: status 200; Wikipedia 
              detail: GET http://127.0.0.1:PORT/chunked
            cut off: FAILED (1 attempt)
              expected: status 200
              observed: the server closed the connection before the response was complete
              detail: GET http://127.0.0.1:PORT/cut
            slow: FAILED (1 attempt)
              expected: status 200
              observed: no response within 200ms
              detail: GET http://127.0.0.1:PORT/slow
            closed: FAILED (1 attempt)
              expected: status 200
              observed: failed to connect to 127.0.0.1:CLOSED: Connection refused (os error 111)
              detail: GET http://127.0.0.1:CLOSED/
            https: FAILED (0 attempts)
              expected: a valid check
              observed: invalid check: invalid url `https://example.com/`: https is not supported: this client has no TLS
              detail: evidence `e`: invalid url `https://example.com/`: https is not supported: this client has no TLS
        "#]],
    );
}

#[test]
fn evidence_tcp_and_file() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open = listener.local_addr().unwrap().port();
    let closed = free_port();
    let tcp = |port| {
        let mut e = ev(EvidenceSource::Tcp);
        e.host = Some("127.0.0.1".into());
        e.port = Some(port);
        e
    };
    let dir = TempDir::new();
    let path = dir.join("config.toml");
    std::fs::write(&path, "version = 2\n[plugins]\n").unwrap();
    let file = |p: &Path, f: &dyn Fn(&mut Evidence)| {
        let mut e = ev(EvidenceSource::File);
        e.path = Some(p.display().to_string());
        f(&mut e);
        e
    };
    check_evidences(
        vec![
            ("tcp open", tcp(open)),
            ("tcp closed", tcp(closed)),
            ("tcp without port", {
                let mut e = tcp(1);
                e.port = None;
                e
            }),
            ("file exists", file(&path, &|_| {})),
            ("file missing", file(&dir.join("missing"), &|_| {})),
            ("file contains", file(&path, &|e| e.contains = Some("[plugins]".into()))),
            ("file matches, failing", file(&path, &|e| e.matches = Some("^version = 3".into()))),
            ("file expected", file(&path, &|e| e.expected = Some("version = 2\n[plugins]".into()))),
        ],
        &[(&open.to_string(), "OPEN"), (&closed.to_string(), "CLOSED"), (&dir.path().display().to_string(), "DIR")],
        expect![[r#"
            tcp open: passed (1 attempt)
              expected: a tcp connection to 127.0.0.1:OPEN
              observed: connected
              detail: connect to 127.0.0.1:OPEN within 10s
            tcp closed: FAILED (1 attempt)
              expected: a tcp connection to 127.0.0.1:CLOSED
              observed: connection refused
              detail: connect to 127.0.0.1:CLOSED within 10s
            tcp without port: FAILED (0 attempts)
              expected: a valid check
              observed: invalid check: a tcp check needs `host` and `port`
              detail: evidence `e`: a tcp check needs `host` and `port`
            file exists: passed (1 attempt)
              expected: file DIR/config.toml exists
              observed: exists
              detail: read DIR/config.toml
            file missing: FAILED (1 attempt)
              expected: file DIR/missing exists
              observed: no such file
              detail: read DIR/missing
            file contains: passed (1 attempt)
              expected: content containing `[plugins]`
              observed: version = 2
            [plugins]

              detail: read DIR/config.toml
            file matches, failing: FAILED (1 attempt)
              expected: content matching /^version = 3/
              observed: version = 2
            [plugins]

              detail: read DIR/config.toml
            file expected: passed (1 attempt)
              expected: version = 2
            [plugins]
              observed: version = 2
            [plugins]
              detail: read DIR/config.toml
        "#]],
    );
    drop(listener);
}

// ---------------------------------------------------------------------------------------------
// SSH executor, against a real sshd when root and /usr/sbin/sshd are here

#[test]
fn ssh_runs_commands() {
    let Some(sshd) = Sshd::start_or_skip("ssh_runs_commands") else {
        return;
    };
    let dir = TempDir::new();
    let exec = sshd.executor();
    let cancel = Cancel::new();
    let run = |spec: &Spec| exec.run(spec, &cancel);

    let r = run(&Spec::argv(["printf", "%s|", "a b", "$HOME", "*"]));
    assert_eq!(render(&r), "Exited { code: 0 }\nstdout: \"a b|$HOME|*|\"\n", "{}", sshd.log());
    check_run(
        run(&sh("echo out; echo err >&2; exit 3")),
        expect![[r#"
        Exited { code: 3 }
        stdout: "out\n"
        stderr: "err\n"
    "#]],
    );
    // The command's own 255 stays an exit code.
    check_run(
        run(&sh("exit 255")),
        expect![[r#"
        Exited { code: 255 }
    "#]],
    );
    let mut spec = sh("printf '%s|%s' \"$FOO\" \"$PWD\"");
    spec.env.insert("FOO".into(), "it's here".into());
    spec.workdir = Some(dir.path().to_owned());
    assert_eq!(run(&spec).output.stdout_lossy(), format!("it's here|{}", dir.path().display()));
    let mut spec = Spec::argv(["cat"]);
    spec.stdin = Some(b"from stdin".to_vec());
    assert_eq!(run(&spec).output.stdout_lossy(), "from stdin");
    // Scripts run with sh -eu, from the text on this machine, stdin left to the job.
    let script = write_script(&dir, "unset.sh", "echo before\ncat\necho \"$NOT_SET\"\necho after\n");
    let mut spec = Spec::new(Program::Script { path: script, args: vec![] });
    spec.stdin = Some(b"input\n".to_vec());
    let r = run(&spec);
    assert_eq!(r.outcome, Outcome::Exited { code: 2 }, "{}", render(&r));
    assert_eq!(r.output.stdout_lossy(), "before\ninput\n");
    assert!(r.output.stderr_lossy().contains("NOT_SET: parameter not set"), "{}", render(&r));
    // A program that is not there: the remote shell says so (no way to tell could-not-start).
    let r = run(&Spec::argv(["no-such-program-anywhere"]));
    assert_eq!(r.outcome, Outcome::Exited { code: 127 }, "{}", render(&r));
    assert!(r.output.stderr_lossy().contains("not found"), "{}", render(&r));
    // Timeout: the local client is terminated, then the remote group (tests_remote_stop.rs).
    let mut spec = Spec::argv(["sleep", "3"]);
    spec.timeout = Some(Duration::from_millis(500));
    let r = run(&spec);
    assert_eq!(r.outcome, Outcome::TimedOut { after: Duration::from_millis(500), killed: false }, "{}", render(&r));
    assert!(r.output.duration < Duration::from_secs(3));
}

fn check_run(run: Run, expect: Expect) {
    expect.assert_eq(&render(&run));
}

#[test]
fn ssh_refuses_unknown_and_changed_host_keys() {
    let Some(sshd) = Sshd::start_or_skip("ssh_refuses_unknown_and_changed_host_keys") else {
        return;
    };
    let dir = TempDir::new();
    let marker = dir.join("ran");
    let spec = Spec::argv(["touch", marker.to_str().unwrap()]);
    let cancel = Cancel::new();

    // Unknown: an empty known_hosts.
    let empty = dir.join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    let exec = SshExecutor { known_hosts: Some(empty), ..sshd.executor() };
    let run = exec.run(&spec, &cancel);
    assert_eq!(
        run.outcome,
        Outcome::CouldNotStart { error: "ssh: Host key verification failed.".into() },
        "{}",
        render(&run)
    );
    assert!(run.output.stderr_lossy().contains("No ED25519 host key is known"), "{}", render(&run));

    // Changed: another key for the same host and port.
    let other = dir.join("other_key");
    std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&other)
        .status()
        .unwrap();
    let other_pub = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    let changed = dir.join("changed_known_hosts");
    let fields: Vec<&str> = other_pub.split_whitespace().take(2).collect();
    std::fs::write(&changed, format!("[127.0.0.1]:{} {}\n", sshd.port, fields.join(" "))).unwrap();
    let exec = SshExecutor { known_hosts: Some(changed), ..sshd.executor() };
    let run = exec.run(&spec, &cancel);
    assert!(
        matches!(&run.outcome, Outcome::CouldNotStart { error } if error.contains("Host key verification failed")
            || error.contains("IDENTIFICATION HAS CHANGED")),
        "{}",
        render(&run)
    );
    // Wrong user key.
    let exec = SshExecutor { key: Some(other), ..sshd.executor() };
    let run = exec.run(&spec, &cancel);
    assert!(
        matches!(&run.outcome, Outcome::CouldNotStart { error } if error.contains("Permission denied")),
        "{}",
        render(&run)
    );
    // Nobody listening.
    let exec = SshExecutor { port: free_port(), ..sshd.executor() };
    let run = exec.run(&spec, &cancel);
    assert!(
        matches!(&run.outcome, Outcome::CouldNotStart { error } if error.contains("Connection refused")),
        "{}",
        render(&run)
    );
    // A host that would be an option.
    let exec = SshExecutor { host: "-oProxyCommand=touch /tmp/x".into(), ..sshd.executor() };
    check_run(
        exec.run(&spec, &cancel),
        expect![[r#"
        CouldNotStart { error: "invalid ssh host `-oProxyCommand=touch /tmp/x`" }
    "#]],
    );
    assert!(!marker.exists());
}

#[test]
fn ssh_multiplexed_and_injection_corpus() {
    let Some(sshd) = Sshd::start_or_skip("ssh_multiplexed_and_injection_corpus") else {
        return;
    };
    let exec = sshd.multiplexed_executor();
    let cancel = Cancel::new();
    // The first run starts the master; later ones reuse its one connection.
    let start = Instant::now();
    for _ in 0..4 {
        let r = exec.run(&Spec::argv(["true"]), &cancel);
        assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{}\n{}", render(&r), sshd.log());
    }
    eprintln!("4 multiplexed ssh runs: {:?}", start.elapsed());

    // The corpus in batches (each run costs the remote login shell's startup).
    let dir = TempDir::new();
    let marker = dir.join("marker");
    let corpus = injection_corpus(&marker);
    let start = Instant::now();
    let runs = run_corpus_batched(&exec, &corpus, &dir);
    eprintln!("injection corpus over ssh: {} payloads, {runs} runs in {:?}", corpus.len(), start.elapsed());
    assert!(!marker.exists(), "a payload ran over ssh");
    assert_eq!(sshd.connections(), 1, "runs did not share one connection:\n{}", sshd.log());
    exec.close();
}

/// The corpus through `exec` with many payloads per run (for executors where a run is costly):
/// environment variables read by a script and written to files, argv elements, script
/// arguments. Returns the number of runs.
fn run_corpus_batched(exec: &dyn Executor, corpus: &[String], dir: &TempDir) -> usize {
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
