use crate::model::{Command, Evidence, EvidenceSource};
use expect_test::{expect, Expect};

use super::*;

/// Lints `text` and renders each finding as `line:col code: message`, or `clean`.
fn check(text: &str, expect: Expect) {
    expect.assert_eq(&render(text, &shell(text)));
}

fn render(text: &str, findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "clean\n".to_owned();
    }
    findings
        .iter()
        .map(|f| {
            let at = line_col(text, f.offset);
            format!("{}:{} {}: {}\n", at.line, at.col, f.code.as_str(), f.message)
        })
        .collect()
}

#[test]
fn pipelines() {
    check(
        "kubectl get nodes --no-headers | awk '$2 !~ /^Ready/ {bad++} END {print bad + 0}'",
        expect![[r#"
            1:32 W001: a pipeline without pipefail: its status is its last stage's, so `kubectl` failing or missing goes unnoticed
        "#]],
    );
    check(
        "swapon --show | wc -l | tr -d ' '",
        expect![[r#"
        1:15 W001: a pipeline without pipefail: its status is its last stage's, so `swapon` failing or missing goes unnoticed
        1:23 W001: a pipeline without pipefail: its status is its last stage's, so `wc` failing or missing goes unnoticed
    "#]],
    );
    // The `|` between a case item's patterns is no pipeline; one in its commands still is.
    check(
        "s=$(dpkg-query -W kubeadm) || s=absent; case $s in absent | *not-installed) echo ok ;; (x|y) echo y ;; *) echo no ;; esac",
        expect!["clean\n"],
    );
    check(
        "case $1 in a) echo a ;; b | c) kubectl get nodes | awk '{print}' ;; esac",
        expect![[r#"
            1:50 W001: a pipeline without pipefail: its status is its last stage's, so `kubectl` failing or missing goes unnoticed
        "#]],
    );
    // pipefail set before, as an option of set or of the shell.
    check("set -o pipefail; kubectl get nodes | awk '{print}'", expect!["clean\n"]);
    check("set -euo pipefail\nkubectl get nodes | wc -l", expect!["clean\n"]);
    // The capture-then-pipe form: the stages before the last only print.
    check(r#"out=$(kubectl get nodes) && printf '%s\n' "$out" | awk '{print}'"#, expect!["clean\n"]);
    check(r#"echo "$x" | grep -q y"#, expect!["clean\n"]);
    // Printing a command substitution swallows the command's status.
    check(
        r#"printf '%s\n' "$(kubectl get nodes)" | wc -l"#,
        expect![[r#"
            1:38 W001: a pipeline without pipefail: its status is its last stage's, so `kubectl` failing or missing goes unnoticed
        "#]],
    );
    // Pipelines inside a command substitution, in double quotes.
    check(
        r#"test "$(ls "$d/images" | wc -l)" -ge 7"#,
        expect![[r#"
        1:24 W001: a pipeline without pipefail: its status is its last stage's, so `ls` failing or missing goes unnoticed
    "#]],
    );
    // `|` quoted, escaped, in a comment or in `${…}` is not a pipe; `||` is not one either.
    check(
        r#"grep -E 'a|b' f && echo "x|y" \| z # a | b
test "${V:-a|b}" = x || exit 1"#,
        expect!["clean\n"],
    );
    check(
        "kubectl get x 2>&1 | grep -q y",
        expect![[r#"
        1:20 W001: a pipeline without pipefail: its status is its last stage's, so `kubectl` failing or missing goes unnoticed
    "#]],
    );
    // A subshell inside a command substitution does not end it.
    check(
        "x=$( (a; b) | c ) && d",
        expect![[r#"
        1:13 W001: a pipeline without pipefail: its status is its last stage's, so `(…)` failing or missing goes unnoticed
    "#]],
    );
}

#[test]
fn swallowed_failures() {
    check(
        "systemctl is-active x || true",
        expect![[r#"
        1:23 W002: `|| true` turns a failure into success
    "#]],
    );
    check(
        "check-thing || :",
        expect![[r#"
        1:13 W002: `|| :` turns a failure into success
    "#]],
    );
    check(
        "check-thing || exit 0",
        expect![[r#"
        1:13 W002: `|| exit 0` turns a failure into success
    "#]],
    );
    check(
        "check-thing; true",
        expect![[r#"
        1:12 W002: a final `true` makes the whole command succeed whatever came before
    "#]],
    );
    check(
        "check-thing\n:\n",
        expect![[r#"
        1:12 W002: a final `:` makes the whole command succeed whatever came before
    "#]],
    );
    check(
        "check-thing &",
        expect![[r#"
        1:13 W002: a command run in the background (`&`) cannot fail the check: its status is never waited for
    "#]],
    );
    check("check-thing 2>&1 >/dev/null && echo ok", expect!["clean\n"]);
    // A fallback value, a failure made explicit, a `true` in the middle: not swallowed.
    check(r#"hb=$(cat f 2>/dev/null) || hb=0; test "$hb" -gt 0"#, expect!["clean\n"]);
    check("check-thing || exit 1", expect!["clean\n"]);
    check("true; check-thing", expect!["clean\n"]);
    check("echo '|| true'", expect!["clean\n"]);
}

fn ev(command: Command, expected: Option<&str>, exit: Option<i32>) -> Evidence {
    Evidence {
        command: Some(command),
        expected: expected.map(str::to_owned),
        expected_exit_code: exit,
        ..Evidence::new("probe", EvidenceSource::Command)
    }
}

#[test]
fn evidence_checks() {
    let run = |e: Evidence, expect: Expect| {
        let text = e.command.as_ref().and_then(shell_text).unwrap_or_default();
        expect.assert_eq(&render(&text, &evidence(&e)));
    };
    let line = |s: &str| Command::Line(s.to_owned());
    // Output compared: the exit status is checked too (opsgraph-exec), so pipefail suffices.
    run(ev(line("set -o pipefail; swapon --show | wc -l"), Some("0"), None), expect!["clean\n"]);
    run(ev(line("set -o pipefail; swapon --show | wc -l"), Some("0"), Some(0)), expect!["clean\n"]);
    run(
        ev(line("swapon --show | wc -l"), None, Some(0)),
        expect![[r#"
        1:15 W001: a pipeline without pipefail: its status is its last stage's, so `swapon` failing or missing goes unnoticed
    "#]],
    );
    // argv: a shell's -c script is linted, with the shell's own -o pipefail.
    let argv = |a: &[&str]| Command::Argv(a.iter().map(|s| (*s).to_owned()).collect());
    run(
        ev(argv(&["sh", "-c", "a | b || true"]), None, None),
        expect![[r#"
        1:3 W001: a pipeline without pipefail: its status is its last stage's, so `a` failing or missing goes unnoticed
        1:7 W002: `|| true` turns a failure into success
    "#]],
    );
    run(ev(argv(&["/bin/bash", "-o", "pipefail", "-c", "a | b"]), None, None), expect!["clean\n"]);
    run(ev(argv(&["kubectl", "get", "a|b"]), Some("x"), None), expect!["clean\n"]);
    // Other sources have no command to lint.
    let mut http = ev(line("a | b"), None, None);
    http.source = EvidenceSource::Http;
    run(http, expect!["clean\n"]);
}
