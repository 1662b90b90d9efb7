//! The SSH executor against a real sshd (when root and /usr/sbin/sshd are here): commands,
//! host keys refused when unknown or changed, multiplexing, and the injection corpus.

use std::time::{Duration, Instant};

use expect_test::{expect, Expect};

use crate::testing::{closed_port, injection_corpus, Sshd, TempDir};
use crate::tests::{render, run_corpus_batched, sh, write_script};
use crate::{Cancel, Executor, Outcome, Program, Run, Spec, SshExecutor};

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
    let nobody = closed_port();
    let exec = SshExecutor { port: nobody.port, ..sshd.executor() };
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
