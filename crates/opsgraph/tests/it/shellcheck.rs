//! `shellcheck` (Debian's package) over every shell script and every shell line of every bundled
//! pack: scripts as `sh -eu` runs them, evidence and job lines as `sh -c` does — both dash on
//! Debian. Any finding of severity warning or above fails. Without shellcheck it says it skipped
//! (`.ci/run` installs it as root).

use std::process::Command;

use expect_test::expect;
use opsgraph::load::Source;
use opsgraph_core::model::Command as Cmd;
use opsgraph_exec::{program_for, Program};

use crate::support::{path, temp_dir};

/// The shell text of a command, when a shell runs it: a line with shell syntax, or the script of
/// an argv `sh -c` / `bash -c`.
fn shell_text(cmd: &Cmd) -> Option<String> {
    match (program_for(cmd), cmd) {
        (Program::Shell(line), _) => Some(line),
        (_, Cmd::Argv(argv)) if argv.first().is_some_and(|s| s.ends_with("sh")) => {
            argv.iter().position(|a| a == "-c").and_then(|c| argv.get(c + 1)).cloned()
        }
        _ => None,
    }
}

#[test]
fn every_bundled_script_and_shell_line_passes_shellcheck() {
    if Command::new("shellcheck").arg("--version").output().is_err() {
        eprintln!("skipped: shellcheck is not installed (apt-get install shellcheck; .ci/run does as root)");
        return;
    }
    let (packs, diags) = opsgraph::load::packs(&[Source::parse(&path("packs"))]);
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    let dir = temp_dir(&[(".keep", "")]);
    let mut files = Vec::new();
    let mut scripts = 0;
    let mut lines = 0;
    for pack in &packs {
        let root = std::path::Path::new(&pack.root);
        // The pack's scripts and its libraries (`scripts/lib`, which they source).
        for dir in ["scripts", "scripts/lib"] {
            for entry in std::fs::read_dir(root.join(dir)).into_iter().flatten() {
                let p = entry.unwrap().path();
                if p.extension().is_some_and(|e| e == "sh") {
                    files.push(p);
                    scripts += 1;
                }
            }
        }
        let jobs = pack.jobs.values().chain(pack.templates.iter().flat_map(|t| {
            t.jobs.iter().filter_map(|e| match e {
                opsgraph_core::model::JobEntry::Inline(j) => Some(&**j),
                opsgraph_core::model::JobEntry::Ref(_) => None,
            })
        }));
        let job_lines = jobs.filter_map(|j| Some((format!("job-{}", j.id), j.run.as_ref()?.command.as_ref()?.clone())));
        let evidence_lines =
            pack.evidence.values().filter_map(|e| Some((format!("evidence-{}", e.id), e.command.as_ref()?.clone())));
        for (name, cmd) in job_lines.chain(evidence_lines) {
            let Some(text) = shell_text(&cmd) else { continue };
            let file = dir.path().join(format!("{}.{name}.sh", pack.id()));
            // Line 1 and 2 are this header: findings on line N are on line N-2 of the command.
            std::fs::write(&file, format!("#!/bin/sh\n# shellcheck shell=dash\n{text}\n")).unwrap();
            files.push(file);
            lines += 1;
        }
    }
    let out = Command::new("shellcheck")
        .args(["--shell=dash", "--severity=warning", "--format=gcc", "--external-sources"])
        .args(&files)
        .output()
        .expect("shellcheck runs");
    let findings = String::from_utf8_lossy(&out.stdout)
        .replace(&dir.path().display().to_string(), "$INLINE")
        .replace(&path(""), "");
    expect![[r#"
        116 scripts, 105 shell lines
    "#]]
    .assert_eq(&format!("{scripts} scripts, {lines} shell lines\n{findings}"));
    assert!(
        out.status.success() && findings.is_empty(),
        "shellcheck: {findings}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
