//! `opsgraph demo --real` and `opsgraph pack test DIR --fleet` (docs/fleet.md): operations on
//! real fleet hosts. Fleet tests need root and OPSGRAPH_FLEET=1 and take `FLEET` first.

use std::process::Command;

use crate::fleet::{claim, unavailable, Fleet, FLEET};
use crate::support::{opsgraph, printed, temp_dir};

#[test]
fn without_root_demo_real_and_pack_test_fleet_say_so_and_exit_2() {
    let bin = env!("CARGO_BIN_EXE_opsgraph");
    let dir = temp_dir(&[]);
    let d = dir.path().display().to_string();
    let runs: [&[&str]; 2] = [&["demo", "--real"], &["pack", "test", "packs/postgresql", "--fleet"]];
    for args in runs {
        let mut c = if opsgraph_fleet::can_run() {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin]);
            c
        } else {
            Command::new(bin)
        };
        let o = c.args(["--data-dir", &d]).args(args).output().unwrap();
        assert_eq!(
            format!("exit {}: {}", o.status.code().unwrap_or(-1), printed(&o)),
            "exit 2: error[fleet_needs_root]: the fleet needs root (namespaces, mounts, a bridge): run it as root\n",
            "{args:?}"
        );
    }
    assert!(!dir.path().exists(), "a refused command wrote something");
}

#[test]
fn demo_real_installs_a_primary_and_a_replica_and_leaves_the_fleet_up() {
    let Some(_one) = claim("demo_real_installs_a_primary_and_a_replica_and_leaves_the_fleet_up") else { return };
    let tmp = temp_dir(&[]);
    let data = tmp.path().display().to_string();
    let fleet = Fleet { dir: tmp.join("fleet") };
    let run = opsgraph(&["--data-dir", &data, "demo", "--real", "--hosts", "2"]);
    assert_eq!(run.code, 0, "{}", run.render());
    for line in [
        "opsgraph demo --real: PostgreSQL on a primary and streaming replicas of a fleet of 2, over SSH",
        "gate approve-real-host: the jobs run as root over SSH on a real host -> demo answers `approve` as user:demo-sre (sre)",
        "done      verify-postgresql@fleet-1: exited with code 0",
        "done      clone-replica@fleet-2: exited with code 0",
        "done      verify-replication@fleet-1: exited with code 0",
        "Resource postgresql.instance/demo-db: status running, health healthy",
        "psql -h 10.213.0.11 -U demo_app demo",
        "psql -h 10.213.0.12 -U demo_app demo   (read-only, streaming from fleet-1)",
        &format!("Tear it down with: opsgraph lab fleet down --dir {}", fleet.dir.display()),
    ] {
        assert!(run.out.contains(line), "missing {line:?} in:\n{}", run.out);
    }
    assert!(!run.out.contains("FAIL "), "{}", run.out);
    // The password is made per demo and only ever written to a private file.
    let demo = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("opsgraph-demo-"))
        .unwrap()
        .path();
    let password = std::fs::read_to_string(demo.join("db-password")).unwrap();
    assert_eq!(password.trim().len(), 24);
    assert!(!run.render().contains(password.trim()), "the password leaked");
    // A real login over the bridge with that password.
    let login = Command::new("psql")
        .args([
            "-X",
            "-w",
            "-tAc",
            "select current_user",
            "host=10.213.0.11 dbname=demo user=demo_app connect_timeout=10",
        ])
        .env("PGPASSWORD", password.trim())
        .output()
        .expect("psql (postgresql-client) is installed");
    assert_eq!(String::from_utf8_lossy(&login.stdout), "demo_app\n", "{}", String::from_utf8_lossy(&login.stderr));
    // The replica answers the same login, in recovery (a standby).
    let standby = Command::new("psql")
        .args([
            "-X",
            "-w",
            "-tAc",
            "select current_user, pg_is_in_recovery()",
            "host=10.213.0.12 dbname=demo user=demo_app connect_timeout=10",
        ])
        .env("PGPASSWORD", password.trim())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&standby.stdout),
        "demo_app|t\n",
        "{}",
        String::from_utf8_lossy(&standby.stderr)
    );
    let replication = std::fs::read_to_string(demo.join("replication-password")).unwrap();
    assert!(!run.render().contains(replication.trim()), "the replication password leaked");
    // The fleet stays up for the user; a second demo reuses it.
    let status = opsgraph(&["--data-dir", &data, "lab", "fleet", "status"]);
    assert_eq!(status.code, 0, "{}", status.render());
    drop(fleet);
}

/// A pack whose one template marks a fleet host; `evidence` is its check's command.
fn marker_pack(evidence: &str) -> Vec<(String, String)> {
    let files = [
        (
            "pack.yaml",
            "scenario_pack:
  id: marker
  version: 0.1.0
  resource_types: [marker.file]
  actions: [install]
  requires:
    - {capability: linux.host, scope: target_nodes}
    - {capability: ssh.access, scope: target_nodes}
  provides:
    - capability: marker.file
  plan_templates:
    - {id: marker.install, entrypoint: write-marker, action: install}
  risk:
    default_level: low
"
            .to_owned(),
        ),
        (
            "templates.yaml",
            "plan_template:
  id: marker.install
  action: install
  parameters:
    text: {type: string, required: true}
    mode: {type: string, default: \"0644\"}
  scopes:
    target_nodes: {resource_type: compute_node, from: targets.target_nodes, min: 1, max: 1}
  requires:
    - {capability: linux.host, scope: target_nodes}
    - {capability: ssh.access, scope: target_nodes}
  stages:
    - {id: write, name: Write, jobs: [write-marker]}
  jobs: [write-marker]
  provides:
    - capability: marker.file
"
            .to_owned(),
        ),
        (
            "jobs.yaml",
            "job:
  id: write-marker
  scope: {resources: [compute_node], target: target_nodes}
  inputs:
    parameters: {text: x, mode: \"0644\"}
    requires:
      capabilities:
        - {key: linux.host, scope: target_nodes}
        - {key: ssh.access, scope: target_nodes}
  outputs:
    evidence: [marker_written]
  controls:
    idempotency: {key: \"marker:{node_id}\"}
  run:
    executor: ssh
    script: scripts/write-marker.sh
    timeout: 1m
"
            .to_owned(),
        ),
        (
            "evidence.yaml",
            format!("evidence:\n  - id: marker_written\n    source: command\n    command: {evidence}\n    expected_exit_code: 0\n"),
        ),
        (
            "scripts/write-marker.sh",
            "#!/bin/sh\nset -eu\nprintf '%s\\n' \"$OPSGRAPH_PARAM_TEXT\" > /root/marker\nchmod \"$OPSGRAPH_PARAM_MODE\" /root/marker\n"
                .to_owned(),
        ),
    ];
    files.into_iter().map(|(p, t)| (p.to_owned(), t)).collect()
}

#[test]
fn pack_test_fleet_runs_the_template_then_every_check_again() {
    if let Some(why) = unavailable() {
        eprintln!("SKIPPED pack_test_fleet_runs_the_template_then_every_check_again: {why}");
        return;
    }
    // The host's own address, filled in from the `{address:target_nodes}` placeholder.
    let good = marker_pack("grep -qx 'hello fleet-1=10.213.0.11' /root/marker");
    // Its check asks for what the job never writes: the harness must say FAIL and exit 1.
    let bad = marker_pack("test -x /root/marker");
    let files: Vec<(String, String)> = good
        .iter()
        .map(|(p, t)| (format!("good/{p}"), t.clone()))
        .chain(bad.iter().map(|(p, t)| (format!("bad/{p}"), t.clone())))
        .collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let tmp = temp_dir(&refs);
    let data = tmp.join("data").display().to_string();
    let (good_dir, bad_dir) = (tmp.join("good").display().to_string(), tmp.join("bad").display().to_string());

    // Bad input changes nothing: a required parameter missing is said before any fleet is built.
    let missing = opsgraph(&["--data-dir", &data, "pack", "test", &good_dir, "--fleet"]);
    assert_eq!(missing.code, 1, "{}", missing.render());
    assert!(missing.err.contains("error[pack_test_parameter_missing]: template marker.install of pack marker@0.1.0 needs text: give them with --set NAME=VALUE"), "{}", missing.err);
    let unknown = opsgraph(&["--data-dir", &data, "pack", "test", &good_dir, "--fleet", "--template", "marker.nope"]);
    assert_eq!(unknown.code, 1, "{}", unknown.render());
    assert!(
        unknown
            .err
            .contains("error[pack_test_unknown_template]: no template marker.nope; the packs have marker.install"),
        "{}",
        unknown.err
    );
    let scope =
        opsgraph(&["--data-dir", &data, "pack", "test", &good_dir, "--fleet", "--set", "text={address:workers}"]);
    assert_eq!(scope.code, 1, "{}", scope.render());
    assert!(
        scope.err.contains("{address:workers}: no scope `workers` (the template's scopes and targets: target_nodes)"),
        "{}",
        scope.err
    );
    assert!(!tmp.join("data/fleet/fleet.json").exists());

    let _one = FLEET.lock().unwrap_or_else(|e| e.into_inner());
    let fleet = Fleet { dir: tmp.join("data/fleet") };
    let ok = opsgraph(&[
        "--data-dir",
        &data,
        "pack",
        "test",
        &good_dir,
        "--fleet",
        "--template",
        "marker.install",
        "--set",
        "text=hello {members:target_nodes}",
    ]);
    assert_eq!(ok.code, 0, "{}", ok.render());
    let table = ok.out.split("Pack test on the fleet:\n").nth(1).unwrap_or_default();
    let table = regex::Regex::new(r"\s+\n").unwrap().replace_all(table, "\n").into_owned();
    expect_test::expect![[r#"
          ok   job    write-marker@fleet-1                         succeeded  exited with code 0
          ok   check  marker_written@fleet-1                       pass
        2 of 2 passed
    "#]]
    .assert_eq(&table);
    assert!(!tmp.join("data/fleet/fleet.json").exists(), "the fleet it built was not brought down");

    let failed = opsgraph(&["--data-dir", &data, "pack", "test", &bad_dir, "--fleet", "--keep", "--set", "text=x"]);
    assert_eq!(failed.code, 1, "{}", failed.render());
    assert!(failed.out.contains("FAIL job    write-marker@fleet-1"), "{}", failed.out);
    assert!(failed.out.contains("The fleet stays up."), "{}", failed.out);
    assert!(tmp.join("data/fleet/fleet.json").exists(), "--keep brought the fleet down");
    drop(fleet);
}
