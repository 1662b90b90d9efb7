//! The postgresql pack's day-2 actions for real on a fleet host (docs/fleet.md), each through
//! `opsgraph apply` on the resource the install made (same type, name and host): the server
//! stopped behind Opsgraph's back, found degraded by `opsgraph verify` and started again by the
//! pack's `repair` under `repair: apply_safe`; a row written, `backup` (a pg_dump collected as a secret artifact), the table dropped, `restore` from that
//! artifact behind its destructive gate, the row back; the restore's evidence shown failing on
//! the host once the table is gone again; `upgrade` proving the server runs apt's candidate;
//! `add_replica` on a second host and `remove_replica` behind its gate; `uninstall` behind its
//! gate, the data directory kept, then again with `purge: true`, the data gone. Needs root and
//! OPSGRAPH_FLEET=1.

use std::collections::BTreeMap;

use crate::fleet::{machine, unavailable, Fleet, Operator, FLEET};
use crate::fleet_packs::{check_once, ssh_executor};
use crate::support::{dev_intent, opsgraph, path, printed, temp_dir};

const PASSWORD: &str = "fleet-canary-day2-4b8e";

/// An intent for `orders-db`. The day-2 ones give only what is new: the install's version, port,
/// database, owner, addresses and host come from the resource's record (docs/day2.md#day-2-actions).
fn intent(action: &str, body: &str) -> String {
    dev_intent("postgresql.instance", action, "orders-db", body)
}

/// SQL as the owner over TCP from this machine to fleet-1.
fn sql(statement: &str) -> std::process::Output {
    sql_at("10.213.0.11", statement)
}

fn sql_at(host: &str, statement: &str) -> std::process::Output {
    crate::fleet_postgresql::query(host, PASSWORD, statement)
}

#[test]
fn postgresql_day2_actions_on_fleet_hosts() {
    if let Some(why) = unavailable() {
        eprintln!("SKIPPED postgresql_day2_actions_on_fleet_hosts: {why}");
        return;
    }
    let _one = FLEET.lock().unwrap_or_else(|e| e.into_inner());
    let install = intent(
        "install",
        &format!(
            "  parameters:\n    postgresql_version: \"15\"\n    port: 5433\n    database: orders\n    owner: orders_app\n    db_password: {PASSWORD}\n    listen_addresses: \"*\"\n    client_cidr: 10.213.0.0/24\n  targets:\n    target_nodes: [compute_node/fleet-1]\n"
        ),
    );
    let tmp = temp_dir(&[
        ("data/config.yaml", "users:\n  alice: [sre]\n"),
        ("install.yaml", &install),
        ("backup.yaml", &intent("backup", "")),
        ("upgrade.yaml", &intent("upgrade", "")),
        ("uninstall.yaml", &intent("uninstall", "")),
        (
            "add-replica.yaml",
            &intent(
                "add_replica",
                "  parameters:\n    replication_password: fleet-canary-repl-2d7f\n    primary_host: 10.213.0.11\n    replica_cidr: 10.213.0.0/24\n  targets:\n    replica_nodes: [compute_node/fleet-2]\n",
            ),
        ),
        ("remove-replica.yaml", &intent("remove_replica", "  targets:\n    replica_nodes: [compute_node/fleet-2]\n")),
    ]);
    let dir = tmp.join("fleet");
    let before = machine();
    let up = opsgraph(&["lab", "fleet", "up", "--hosts", "2", "--dir", &dir.display().to_string()]);
    assert_eq!(up.code, 0, "{}", up.render());
    let fleet = Fleet { dir: dir.clone() };
    let data = tmp.join("data").display().to_string();
    let operator = Operator::new(tmp.path(), &data, &dir);
    let apply = |file: &str| operator.apply(file);
    let answer = |op: &str, gate: &str| operator.answer(op, gate);
    let (state, _) = opsgraph_fleet::status(&dir).unwrap().unwrap();
    let host = &state.hosts[0];
    let on_host = |args: &[&str]| opsgraph_fleet::exec(host, args).output().unwrap();

    // Install, and the application's rows.
    let run = apply("install.yaml");
    assert_eq!(run.code, 0, "{}", run.render());
    let rows = "create table items (id int primary key, note text); \
                insert into items values (1, 'first'), (2, 'second'), (3, 'third')";
    let write = sql(rows);
    assert!(write.status.success(), "{}", printed(&write));

    // Verified at once after the install, with the version the server reports. Stopped behind
    // Opsgraph's back, `opsgraph verify` finds it degraded with the failing checks; under the
    // dev environment's `repair: apply_safe`, the pack's low-risk repair is planned from the
    // instance's record and run at once: the server is started again, and verified running.
    let described =
        opsgraph(&["--data-dir", &data, "describe", "resource", "postgresql.instance/orders-db", "-o", "json"]);
    let resource: serde_json::Value = serde_json::from_str(&described.out).unwrap();
    assert_eq!(resource["resource"]["status"], "running", "{resource:#}");
    let version = resource["resource"]["observed"]["version"].as_str().unwrap_or_default();
    assert!(version.starts_with("15."), "{resource:#}");
    let policy = tmp.join("repair-policy.yaml");
    std::fs::write(&policy, "operations_policy:\n  dev: {repair: apply_safe}\n").unwrap();
    let policy = policy.display().to_string();
    let (packs, inventory) = (path("packs"), dir.join("inventory").display().to_string());
    let verify = || {
        opsgraph(&[
            "--data-dir",
            &data,
            "verify",
            "postgresql.instance/orders-db",
            "--packs",
            &packs,
            "--inventory",
            &inventory,
            "--inventory",
            &policy,
        ])
    };
    let stop = on_host(&["systemctl", "stop", "postgresql@15-main"]);
    assert!(stop.status.success(), "{}", printed(&stop));
    let degraded = verify();
    assert_eq!(degraded.code, 1, "{}", degraded.render());
    assert!(degraded.out.starts_with("postgresql.instance/orders-db: degraded (was running)"), "{}", degraded.out);
    assert!(
        degraded
            .out
            .contains("FAILED postgresql_unit_active on verify-postgresql@fleet-1: expected active, observed inactive"),
        "{}",
        degraded.out
    );
    let repair_line = degraded.out.lines().find(|l| l.starts_with("repair operation ")).unwrap_or_default();
    assert!(repair_line.ends_with("completed"), "{}", degraded.render());
    let active = on_host(&["systemctl", "is-active", "postgresql@15-main"]);
    assert_eq!(String::from_utf8_lossy(&active.stdout).trim(), "active");
    // The repair's completion verified it at once: it is running again before anyone asks.
    let running = verify();
    assert_eq!(running.code, 0, "{}", running.render());
    assert!(running.out.starts_with("postgresql.instance/orders-db: running; 5/5 checks passed"), "{}", running.out);
    assert!(running.out.contains(&format!("observed: version={version}")), "{}", running.out);

    // Backup: the dump is checked on the host and collected as a secret artifact.
    let backup = apply("backup.yaml");
    assert_eq!(backup.code, 0, "{}", backup.render());
    assert!(backup.out.contains("done      backup-postgresql@fleet-1: exited with code 0"), "{}", backup.out);
    assert!(backup.out.contains("Evidence: 1 of 1 checks passed"), "{}", backup.out);
    let backup_op = backup.operation_id();
    let manifest = opsgraph(&["--data-dir", &data, "describe", "operation", &backup_op, "-o", "json"]);
    assert!(manifest.out.contains("postgresql_backup_manifest"), "{}", manifest.render());
    assert!(manifest.out.contains("postgresql_backup"), "{}", manifest.render());
    let described =
        opsgraph(&["--data-dir", &data, "describe", "resource", "postgresql.instance/orders-db", "-o", "json"]);
    let resource: serde_json::Value = serde_json::from_str(&described.out).unwrap();
    assert_eq!(resource["resource"]["status"], "running", "{resource:#}");
    assert_eq!(resource["resource"]["provides"].as_array().map(Vec::len), Some(1), "{resource:#}");

    // The table is lost.
    let dropped = sql("drop table items");
    assert!(dropped.status.success(), "{}", printed(&dropped));
    assert!(!sql("select count(*) from items").status.success());

    // Restore from the backup artifact: it waits at the destructive gate, then the rows are back.
    let restore_intent = intent("restore", &format!("  parameters:\n    backup: {backup_op}/postgresql_backup\n"));
    std::fs::write(tmp.join("restore.yaml"), restore_intent).unwrap();
    let (restore, _) = operator.confirmed("restore.yaml", "confirm-restore-postgresql");
    let restore_op = restore.operation_id();
    let back = sql("select string_agg(id || ':' || note, ',' order by id) from items");
    assert_eq!(String::from_utf8_lossy(&back.stdout), "1:first,2:second,3:third\n", "{}", printed(&back));

    // The restore's evidence fails where it must: the same check, on the same host, once the
    // table is gone again (a database without the backup's data).
    let exec = ssh_executor(&dir, "10.213.0.11");
    let env: BTreeMap<String, String> = [
        ("OPSGRAPH_OPERATION_ID", restore_op.as_str()),
        ("OPSGRAPH_PARAM_PORT", "5433"),
        ("OPSGRAPH_PARAM_DATABASE", "orders"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let (passed, why) = check_once("postgresql", "postgresql_restored_rows", &exec, &env);
    assert!(passed, "the restore's evidence fails on the restored database: {why}");
    assert!(sql("delete from items where id = 3").status.success());
    let (passed, why) = check_once("postgresql", "postgresql_restored_rows", &exec, &env);
    assert!(!passed, "the restore's evidence passed with a row missing: {why}");
    assert!(sql("drop table items").status.success());
    let (passed, why) = check_once("postgresql", "postgresql_restored_rows", &exec, &env);
    assert!(!passed, "the restore's evidence passed without the table: {why}");

    // Minor upgrade: whether or not the archive has a newer minor, the server runs apt's candidate.
    let upgrade = apply("upgrade.yaml");
    assert_eq!(upgrade.code, 0, "{}", upgrade.render());
    // Planned against the record: the intent gave nothing, the version, port and host are the install's.
    let recorded =
        "as recorded: cluster_name=main, port=5433, postgresql_version=15, targets.target_nodes=compute_node/fleet-1";
    assert!(upgrade.out.contains(recorded), "{}", upgrade.out);
    assert!(upgrade.out.contains("done      upgrade-postgresql@fleet-1: exited with code 0"), "{}", upgrade.out);
    let policy = on_host(&["sh", "-c", "LC_ALL=C apt-cache policy postgresql-15"]);
    let policy = String::from_utf8_lossy(&policy.stdout).into_owned();
    let candidate = policy.lines().find_map(|l| l.trim().strip_prefix("Candidate: ")).unwrap().to_owned();
    let version = sql("show server_version");
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim_end(),
        format!("{} (Debian {candidate})", candidate.split('-').next().unwrap())
    );

    // Scale out: a streaming replica on fleet-2 of the running primary; a row written on the
    // primary is read there. Scale in: the replica removed behind its gate, the primary untouched.
    let add = apply("add-replica.yaml");
    assert_eq!(add.code, 0, "{}", add.render());
    assert!(add.out.contains("done      check-primary@fleet-1: exited with code 0"), "{}", add.out);
    assert!(add.out.contains("done      clone-replica@fleet-2: exited with code 0"), "{}", add.out);
    assert!(add.out.contains("done      verify-replication@fleet-1: exited with code 0"), "{}", add.out);
    assert!(!add.render().contains("fleet-canary-repl-2d7f"), "the replication password leaked");
    let write = sql("create table scaled (x text); insert into scaled values ('on the primary')");
    assert!(write.status.success(), "{}", printed(&write));
    // The replica replays the write soon: read until it has the row.
    let read = crate::fleet::until_nonempty(|| {
        String::from_utf8_lossy(&sql_at("10.213.0.12", "select x, pg_is_in_recovery() from scaled").stdout).into_owned()
    });
    assert_eq!(read, "on the primary|t\n");
    operator.confirmed("remove-replica.yaml", "confirm-remove-replica");
    assert!(!sql_at("10.213.0.12", "select 1").status.success(), "the replica still answers");
    let replica = &state.hosts[1];
    let gone = opsgraph_fleet::exec(replica, &["test", "!", "-e", "/var/lib/postgresql/15/main"]).output().unwrap();
    assert!(gone.status.success(), "the replica's data directory is still there");
    assert_eq!(String::from_utf8_lossy(&sql("select x from scaled").stdout), "on the primary\n");

    // Uninstall behind its gate: the service and the server are gone, the data directory stays.
    let (_, done) = operator.confirmed("uninstall.yaml", "confirm-uninstall-postgresql");
    assert!(!sql("select 1").status.success(), "the server still answers");
    let active = on_host(&["systemctl", "is-active", "postgresql@15-main"]);
    assert_eq!(String::from_utf8_lossy(&active.stdout), "inactive\n");
    assert!(on_host(&["test", "!", "-e", "/usr/lib/postgresql/15/bin/postgres"]).status.success());
    assert!(on_host(&["test", "-s", "/var/lib/postgresql/15/main/PG_VERSION"]).status.success(), "the data is gone");
    assert!(done.out.contains("Evidence: 3 of 3 checks passed"), "{}", done.out);
    // Uninstalled, the resource is no longer recorded; its history says it was removed.
    let described = opsgraph(&["--data-dir", &data, "describe", "resource", "postgresql.instance/orders-db"]);
    assert_ne!(described.code, 0, "the uninstalled resource is still recorded: {}", described.render());

    // Asked again with purge: true, the cluster's data directory and configuration go too.
    // The resource is no longer recorded: nothing is inherited, the intent names the host.
    let purge_intent = "  parameters:\n    purge: true\n  targets:\n    target_nodes: [compute_node/fleet-1]\n";
    std::fs::write(tmp.join("purge.yaml"), intent("uninstall", purge_intent)).unwrap();
    let purge = apply("purge.yaml");
    let purged = answer(&purge.operation_id(), "confirm-uninstall-postgresql");
    assert_eq!(purged.code, 0, "{}", purged.render());
    assert!(on_host(&["test", "!", "-e", "/var/lib/postgresql/15/main"]).status.success(), "the data is still there");
    assert!(
        on_host(&["test", "!", "-e", "/etc/postgresql/15/main"]).status.success(),
        "the configuration is still there"
    );

    for run in [&backup, &restore, &done, &upgrade] {
        assert!(!run.render().contains(PASSWORD), "the password leaked");
    }
    drop(fleet);
    assert_eq!(machine(), before, "down leaves the machine as it found it");
}
