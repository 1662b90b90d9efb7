//! The etcd pack's day-2 actions for real on four fleet hosts (docs/fleet.md, docs/day2.md#etcd),
//! each through `opsgraph apply` on the cluster `create_cluster` made on fleet-1..3 (same type
//! and name): a key written, `backup` (a snapshot collected as an artifact, its evidence shown
//! failing on a host without it and on a corrupted copy), a second key written; `add_member`
//! fleet-4 (its certificate from the cluster's CA; the record then names four members);
//! `remove_member` refused, changing nothing, while a member is down (the members that stay
//! would not be a quorum), then done behind its gate; `restore` of the snapshot behind its gate
//! (the first key back, the second gone; its evidence failing once a key is written);
//! `upgrade` proving every member runs apt's candidate; `uninstall` behind its gate, the data
//! kept, the resource no longer recorded, then again with `purge: true`, the data gone. Needs
//! root and OPSGRAPH_FLEET=1.

use std::collections::BTreeMap;

use crate::fleet::{claim, machine, Fleet, Operator};
use crate::fleet_packs::{check_once, ssh_executor};
use crate::support::{dev_intent, opsgraph, temp_dir};

const THREE: &str = "fleet-1=10.213.0.11,fleet-2=10.213.0.12,fleet-3=10.213.0.13";
const FOUR: &str = "fleet-1=10.213.0.11,fleet-2=10.213.0.12,fleet-3=10.213.0.13,fleet-4=10.213.0.14";
const MEMBERS3: &str = "[compute_node/fleet-1, compute_node/fleet-2, compute_node/fleet-3]";
const MEMBERS4: &str = "[compute_node/fleet-1, compute_node/fleet-2, compute_node/fleet-3, compute_node/fleet-4]";

/// An intent for `config-store`. The day-2 ones give only what is new: cluster_name,
/// member_addresses and targets.members come from the resource's record.
fn intent(action: &str, body: &str) -> String {
    dev_intent("etcd.cluster", action, "config-store", body)
}

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn etcd_day2_actions_on_fleet_hosts() {
    let Some(_one) = claim("etcd_day2_actions_on_fleet_hosts") else { return };
    let t0 = std::time::Instant::now();
    let create = intent(
        "create_cluster",
        &format!("  parameters:\n    cluster_name: config-store\n    member_addresses: {THREE}\n  targets:\n    members: {MEMBERS3}\n"),
    );
    let tmp = temp_dir(&[
        ("data/config.yaml", "users:\n  alice: [sre]\n"),
        ("create.yaml", &create),
        ("backup.yaml", &intent("backup", "  targets:\n    source: [compute_node/fleet-1]\n")),
        (
            "remove.yaml",
            &intent(
                "remove_member",
                &format!("  parameters:\n    member_addresses: {THREE}\n  targets:\n    members: {MEMBERS3}\n    leaving: [compute_node/fleet-4]\n"),
            ),
        ),
        ("upgrade.yaml", &intent("upgrade", "")),
        ("uninstall.yaml", &intent("uninstall", "")),
    ]);
    let dir = tmp.join("fleet");
    let before = machine();
    let fleet = Fleet::up(&dir, 4);
    let data = tmp.join("data").display().to_string();
    let operator = Operator::new(tmp.path(), &data, &dir);
    let apply = |file: &str| operator.apply(file);
    let answer = |op: &str, gate: &str| operator.answer(op, gate);
    let resource = || -> serde_json::Value {
        let described =
            opsgraph(&["--data-dir", &data, "describe", "resource", "etcd.cluster/config-store", "-o", "json"]);
        serde_json::from_str(&described.out).unwrap_or_else(|e| panic!("{e}: {}", described.render()))
    };
    let (state, _) = opsgraph_fleet::status(&dir).unwrap().unwrap();
    let on = |host: usize, args: &[&str]| opsgraph_fleet::exec(&state.hosts[host], args).output().unwrap();
    // etcdctl over TLS on a member, with its own certificate.
    let etcdctl = |host: usize, args: &[&str]| {
        let mut argv = vec![
            "etcdctl",
            "--endpoints=https://127.0.0.1:2379",
            "--cacert=/etc/etcd/pki/ca.crt",
            "--cert=/etc/etcd/pki/member.crt",
            "--key=/etc/etcd/pki/member.key",
        ];
        argv.extend_from_slice(args);
        let out = on(host, &argv);
        assert!(out.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let started =
        |host: usize| etcdctl(host, &["member", "list"]).lines().filter(|l| l.contains(", started, ")).count();

    // The cluster on fleet-1..3, and a key.
    let run = apply("create.yaml");
    assert_eq!(run.code, 0, "{}", run.render());
    let create_op = run.operation_id();
    etcdctl(0, &["put", "/app/before", "kept"]);
    eprintln!("TIME created: {:.1} s", t0.elapsed().as_secs_f64());

    // create_cluster applied again as it was: its new CA is refused on every member
    // (check-etcd-ca) before anything is installed, naming the parameters to give; the members
    // keep the CA their peers and clients trust.
    let ca_digests =
        || -> Vec<Vec<u8>> { (0..3).map(|h| on(h, &["sha256sum", "/etc/etcd/pki/ca.crt"]).stdout).collect() };
    let held = ca_digests();
    let again = apply("create.yaml");
    assert_ne!(again.code, 0, "{}", again.render());
    let again_op = again.operation_id();
    let jobs = opsgraph(&["--data-dir", &data, "get", "jobs", &again_op]).out;
    for host in ["fleet-1", "fleet-2", "fleet-3"] {
        let line = |job: &str| jobs.lines().find(|l| l.starts_with(&format!("{job}@{host} "))).unwrap_or("").to_owned();
        assert!(line("check-etcd-ca").contains(" failed "), "{jobs}");
        assert!(!line("install-etcd-member").contains("succeeded"), "{jobs}");
        let logs = opsgraph(&["--data-dir", &data, "logs", &again_op, &format!("check-etcd-ca@{host}")]);
        let hint = format!("ca_cert: {create_op}/etcd_ca_cert and ca_key: {create_op}/etcd_ca_key");
        assert!(logs.out.contains(&hint), "{}", logs.render());
    }
    assert_eq!(opsgraph(&["--data-dir", &data, "cancel", &again_op]).code, 0);
    assert_eq!(ca_digests(), held, "a member's CA changed");
    // Given the cluster's CA, applying again converges: the CA kept, the data there.
    let named = create.replace(
        "  parameters:\n",
        &format!("  parameters:\n    ca_cert: {create_op}/etcd_ca_cert\n    ca_key: {create_op}/etcd_ca_key\n"),
    );
    std::fs::write(tmp.join("create-again.yaml"), named).unwrap();
    let again = apply("create-again.yaml");
    assert_eq!(again.code, 0, "{}", again.render());
    let logs = opsgraph(&["--data-dir", &data, "logs", &again.operation_id(), "issue-etcd-ca"]);
    assert!(logs.out.contains(&format!("kept the CA of cluster config-store from {create_op}")), "{}", logs.render());
    assert!(!again.render().contains("PRIVATE KEY"), "{}", again.render());
    assert_eq!(ca_digests(), held, "a member's CA changed");
    assert_eq!(started(0), 3);
    assert!(etcdctl(0, &["get", "/app/before"]).contains("kept"));
    eprintln!("TIME create_cluster again: {:.1} s", t0.elapsed().as_secs_f64());

    // Backup: a snapshot from fleet-1, checked there, collected as an artifact with a manifest.
    let backup = apply("backup.yaml");
    assert_eq!(backup.code, 0, "{}", backup.render());
    assert!(backup.out.contains("done      backup-etcd@fleet-1: exited with code 0"), "{}", backup.out);
    assert!(backup.out.contains("Evidence: 1 of 1 checks passed"), "{}", backup.out);
    let backup_op = backup.operation_id();
    let described = opsgraph(&["--data-dir", &data, "describe", "operation", &backup_op, "-o", "json"]);
    assert!(described.out.contains("etcd_snapshot_manifest"), "{}", described.render());
    assert!(described.out.contains("\"etcd_snapshot\""), "{}", described.render());
    // Its evidence fails where there is no snapshot (fleet-2), and on a copy that was altered.
    let snapshot_env = env(&[("OPSGRAPH_OPERATION_ID", &backup_op)]);
    let fleet1 = ssh_executor(&dir, "10.213.0.11");
    let (passed, why) = check_once("etcd", "etcd_snapshot_valid", &fleet1, &snapshot_env);
    assert!(passed, "etcd_snapshot_valid fails on the snapshot taken: {why}");
    let (passed, why) = check_once("etcd", "etcd_snapshot_valid", &ssh_executor(&dir, "10.213.0.12"), &snapshot_env);
    assert!(!passed, "etcd_snapshot_valid passed on a host without the snapshot: {why}");
    let copy = format!("/var/lib/opsgraph/etcd/backups/{backup_op}.db");
    assert!(on(0, &["cp", &copy, "/root/snapshot.db"]).status.success());
    assert!(on(0, &["truncate", "-s", "-512", &copy]).status.success());
    let (passed, why) = check_once("etcd", "etcd_snapshot_valid", &fleet1, &snapshot_env);
    assert!(!passed, "etcd_snapshot_valid passed on a truncated snapshot: {why}");
    assert!(on(0, &["cp", "/root/snapshot.db", &copy]).status.success());
    etcdctl(0, &["put", "/app/after", "lost"]);
    eprintln!("TIME backup: {:.1} s", t0.elapsed().as_secs_f64());

    // add_member: fleet-4 joins with a certificate of the cluster's CA (the create operation's
    // artifacts); the intent gives the membership after the add.
    let add = intent(
        "add_member",
        &format!(
            "  parameters:\n    member_addresses: {FOUR}\n    ca_cert: {create_op}/etcd_ca_cert\n    ca_key: {create_op}/etcd_ca_key\n  targets:\n    members: {MEMBERS4}\n    joining: [compute_node/fleet-4]\n"
        ),
    );
    // Four members is an even count: refused (P012) before anything is created, unless forced.
    std::fs::write(tmp.join("add.yaml"), &add).unwrap();
    let refused = apply("add.yaml");
    assert_eq!(refused.code, 1, "{}", refused.render());
    assert!(refused.render().contains("error[P012]: refused by template `etcd.add_member`"), "{}", refused.render());
    assert_eq!(started(0), 3);
    std::fs::write(tmp.join("add.yaml"), add.replace("  parameters:\n", "  parameters:\n    force: true\n")).unwrap();
    let added = apply("add.yaml");
    assert_eq!(added.code, 0, "{}", added.render());
    assert!(added.out.contains(&format!("~ member_addresses  {THREE} → {FOUR}")), "{}", added.out);
    assert!(added.out.contains("done      join-etcd-member@fleet-4: exited with code 0"), "{}", added.out);
    assert!(added.out.contains("done      verify-etcd-cluster@fleet-4: exited with code 0"), "{}", added.out);
    assert!(!added.render().contains("PRIVATE KEY"), "{}", added.render());
    assert_eq!(started(0), 4);
    assert_eq!(etcdctl(3, &["get", "/app/before", "--print-value-only"]), "kept\n");
    // The CA key was opened on the control host only: no member holds a copy of it.
    for host in 0..4 {
        let found = on(host, &["sh", "-c", "grep -rl 'PRIVATE KEY' /root /tmp /var/tmp 2>/dev/null | head -n 5"]);
        assert_eq!(
            String::from_utf8_lossy(&found.stdout),
            "",
            "a private key under /root or /tmp on fleet-{}",
            host + 1
        );
    }
    let r = resource();
    assert_eq!(r["resource"]["status"], "running", "{r:#}");
    assert_eq!(r["resource"]["observed"]["members"], "4", "{r:#}");
    // The member count evidence fails against the membership before the add.
    let (passed, why) =
        check_once("etcd", "etcd_members_started", &fleet1, &env(&[("OPSGRAPH_PARAM_MEMBER_ADDRESSES", THREE)]));
    assert!(!passed, "etcd_members_started passed with 4 members started and 3 expected: {why}");
    eprintln!("TIME add_member: {:.1} s", t0.elapsed().as_secs_f64());

    // remove_member is refused while fleet-2 is down: of the four members, the healthy ones that
    // would stay (fleet-1, fleet-3) are not a quorum (3). Nothing changes.
    assert!(on(1, &["systemctl", "stop", "etcd"]).status.success());
    let refused = apply("remove.yaml");
    let refused_op = refused.operation_id();
    let refused = if refused.out.contains("confirm-remove-etcd-member") {
        answer(&refused_op, "confirm-remove-etcd-member")
    } else {
        refused
    };
    assert_ne!(refused.code, 0, "{}", refused.render());
    let jobs = opsgraph(&["--data-dir", &data, "get", "jobs", &refused_op]).out;
    let state_of = |id: &str| {
        jobs.lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("-")
            .to_owned()
    };
    assert_eq!(state_of("check-etcd-remove@fleet-1"), "failed", "{jobs}");
    assert!(
        ["pending", "-", "blocked", "skipped"].contains(&state_of("remove-etcd-member@fleet-4").as_str()),
        "{jobs}"
    );
    let logs = opsgraph(&["--data-dir", &data, "logs", &refused_op, "check-etcd-remove@fleet-1"]);
    assert!(logs.out.contains("needs 3 (a quorum of 4): refusing"), "{}", logs.render());
    assert!(on(1, &["systemctl", "start", "etcd"]).status.success());
    assert_eq!(opsgraph(&["--data-dir", &data, "cancel", &refused_op]).code, 0);
    let active = on(3, &["systemctl", "is-active", "etcd"]);
    assert_eq!(String::from_utf8_lossy(&active.stdout), "active\n", "fleet-4 was touched");
    let mut members = 0;
    for _ in 0..30 {
        members = started(0);
        if members == 4 && on(1, &["systemctl", "is-active", "--quiet", "etcd"]).status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    assert_eq!(members, 4);

    // remove_member behind its gate: fleet-4 leaves, its data goes, three members stay.
    operator.confirmed("remove.yaml", "confirm-remove-etcd-member");
    assert_eq!(started(0), 3);
    let active = on(3, &["systemctl", "is-active", "etcd"]);
    assert_eq!(String::from_utf8_lossy(&active.stdout), "inactive\n");
    assert!(
        on(3, &["test", "!", "-e", "/var/lib/etcd/config-store"]).status.success(),
        "fleet-4's data is still there"
    );
    let r = resource();
    assert_eq!(r["resource"]["observed"]["members"], "3", "{r:#}");
    // The removal's evidence fails on a member that stays.
    let cluster_env = env(&[("OPSGRAPH_PARAM_CLUSTER_NAME", "config-store")]);
    let fleet4 = ssh_executor(&dir, "10.213.0.14");
    for check in ["etcd_unit_not_active", "etcd_data_absent"] {
        let (passed, why) = check_once("etcd", check, &fleet4, &cluster_env);
        assert!(passed, "{check} fails on fleet-4: {why}");
        let (passed, why) = check_once("etcd", check, &fleet1, &cluster_env);
        assert!(!passed, "{check} passed on fleet-1, a member: {why}");
    }
    eprintln!("TIME remove_member: {:.1} s", t0.elapsed().as_secs_f64());

    // Restore the snapshot behind its gate: the key written before the backup is back, the one
    // written after it is gone. Planned against the record: three members, as removal left them.
    let restore = intent("restore", &format!("  parameters:\n    snapshot: {backup_op}/etcd_snapshot\n"));
    std::fs::write(tmp.join("restore.yaml"), restore).unwrap();
    let (restore, _) = operator.confirmed("restore.yaml", "confirm-restore-etcd-member");
    assert!(restore.out.contains(&format!("member_addresses={THREE}")), "{}", restore.out);
    let restore_op = restore.operation_id();
    for host in 0..3 {
        assert_eq!(etcdctl(host, &["get", "/app/before", "--print-value-only"]), "kept\n");
        assert_eq!(etcdctl(host, &["get", "/app/after", "--print-value-only"]), "");
    }
    assert_eq!(started(0), 3);
    // Its evidence fails once the cluster moved on from the snapshot's revision.
    let restore_env = env(&[("OPSGRAPH_OPERATION_ID", &restore_op)]);
    let (passed, why) = check_once("etcd", "etcd_restored_revision", &fleet1, &restore_env);
    assert!(passed, "etcd_restored_revision fails right after the restore: {why}");
    etcdctl(0, &["put", "/app/later", "x"]);
    let (passed, why) = check_once("etcd", "etcd_restored_revision", &fleet1, &restore_env);
    assert!(!passed, "etcd_restored_revision passed after a write: {why}");
    eprintln!("TIME restore: {:.1} s", t0.elapsed().as_secs_f64());

    // Upgrade: every member runs apt's candidate (Debian 12 has one etcd: nothing restarts).
    let upgrade = apply("upgrade.yaml");
    assert_eq!(upgrade.code, 0, "{}", upgrade.render());
    // Planned against the record, which the scale operations left at three members.
    let recorded = format!(
        "as recorded: cluster_name=config-store, member_addresses={THREE}, \
         targets.members=compute_node/fleet-1,compute_node/fleet-2,compute_node/fleet-3"
    );
    assert!(upgrade.out.contains(&recorded), "{}", upgrade.out);
    for m in ["fleet-1", "fleet-2", "fleet-3"] {
        assert!(
            upgrade.out.contains(&format!("done      upgrade-etcd-member@{m}: exited with code 0")),
            "{}",
            upgrade.out
        );
    }
    let (passed, why) = check_once("etcd", "etcd_runs_candidate_version", &fleet1, &BTreeMap::new());
    assert!(passed, "{why}");
    let (passed, why) = check_once("etcd", "etcd_runs_candidate_version", &fleet4, &BTreeMap::new());
    assert!(!passed, "etcd_runs_candidate_version passed on fleet-4, where etcd does not run: {why}");
    eprintln!("TIME upgrade: {:.1} s", t0.elapsed().as_secs_f64());

    // Uninstall behind its gate: etcd gone from the three members, their data kept; the
    // resource is no longer recorded.
    operator.confirmed("uninstall.yaml", "confirm-uninstall-etcd-member");
    for host in 0..3 {
        assert!(on(host, &["test", "!", "-e", "/usr/bin/etcd"]).status.success());
        assert!(on(host, &["test", "-d", "/var/lib/etcd/config-store/member"]).status.success(), "the data is gone");
    }
    let described = opsgraph(&["--data-dir", &data, "describe", "resource", "etcd.cluster/config-store"]);
    assert_ne!(described.code, 0, "the uninstalled cluster is still recorded: {}", described.render());
    // The data evidence fails where the data went against the request: purge asked, data kept.
    let purge_env = env(&[("OPSGRAPH_PARAM_CLUSTER_NAME", "config-store"), ("OPSGRAPH_PARAM_PURGE", "true")]);
    let (passed, why) = check_once("etcd", "etcd_data_as_requested", &fleet1, &purge_env);
    assert!(!passed, "etcd_data_as_requested passed with purge asked and the data there: {why}");

    // Asked again with purge: true, the data, configuration and keys go too. Nothing is recorded
    // any more: the intent names the cluster and its members.
    let purge = intent(
        "uninstall",
        &format!(
            "  parameters:\n    cluster_name: config-store\n    purge: true\n  targets:\n    members: {MEMBERS3}\n"
        ),
    );
    std::fs::write(tmp.join("purge.yaml"), purge).unwrap();
    let purge = apply("purge.yaml");
    let purged = answer(&purge.operation_id(), "confirm-uninstall-etcd-member");
    assert_eq!(purged.code, 0, "{}", purged.render());
    for host in 0..3 {
        for gone in ["/var/lib/etcd/config-store", "/etc/default/etcd", "/etc/etcd"] {
            assert!(on(host, &["test", "!", "-e", gone]).status.success(), "{gone} is still on fleet-{}", host + 1);
        }
    }
    let (passed, why) = check_once("etcd", "etcd_data_as_requested", &fleet1, &purge_env);
    assert!(passed, "{why}");

    drop(fleet);
    assert_eq!(machine(), before, "down leaves the machine as it found it");
    eprintln!("TIME whole test: {:.1} s", t0.elapsed().as_secs_f64());
}
