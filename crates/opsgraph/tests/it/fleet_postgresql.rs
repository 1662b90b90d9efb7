//! The bundled `postgresql` pack run for real by `opsgraph apply` on a fleet (docs/fleet.md):
//! Debian 12's PostgreSQL 15 over SSH, evidence deciding, a real TCP login from this machine;
//! then a streaming replica of it on another host; `source: pgdg` fails with the reason and `diagnose` names it (apt.postgresql.org is not
//! reachable from fleet hosts). Needs root and OPSGRAPH_FLEET=1, like every fleet test.

use std::process::Command;

use expect_test::expect;

use crate::fleet::{claim, machine, Fleet};
use crate::support::{dev_intent, opsgraph, path, temp_dir};

fn intent(name: &str, node: &str, source: &str) -> String {
    let body = format!(
        "  desired_result: PostgreSQL from {source} on {node}
  parameters:
    source: {source}
    postgresql_version: \"15\"
    database: orders
    owner: orders_app
    db_password: fleet-canary-pw-7f3a
    port: 5433
    listen_addresses: \"*\"
    client_cidr: 10.213.0.0/24
  targets:
    target_nodes: [compute_node/{node}]
"
    );
    dev_intent("postgresql.instance", "install", name, &body)
}

/// `psql` on this machine, over TCP to a fleet host (never to the machine's own server).
fn psql(host: &str, password: &str) -> std::process::Output {
    query(host, password, "select current_user")
}

/// SQL as the owner, with its password, over TCP to a fleet host.
fn sql(host: &str, statement: &str) -> std::process::Output {
    query(host, "fleet-canary-pw-7f3a", statement)
}

/// `psql` as the owner with `password`, over TCP to a fleet host: `statement`'s rows, unaligned.
pub(crate) fn query(host: &str, password: &str, statement: &str) -> std::process::Output {
    Command::new("psql")
        .args(["-X", "-w", "-q", &format!("host={host} port=5433 dbname=orders user=orders_app connect_timeout=10")])
        .args(["-tAc", statement])
        .env("PGPASSWORD", password)
        .output()
        .expect("psql (postgresql-client) is installed")
}

const REPLICATED: &str = "intent:
  target_resource_type: postgresql.instance
  action: install_replicated
  name: orders-ha
  environment: dev
  desired_result: the primary on fleet-1 with a streaming replica on fleet-3
  parameters:
    source: debian
    database: orders
    owner: orders_app
    db_password: fleet-canary-pw-7f3a
    replication_password: fleet-canary-repl-9c1d
    primary_host: 10.213.0.11
    replica_cidr: 10.213.0.0/24
    port: 5433
    listen_addresses: \"*\"
    client_cidr: 10.213.0.0/24
  targets:
    target_nodes: [compute_node/fleet-1]
    replica_nodes: [compute_node/fleet-3]
";

#[test]
fn postgresql_pack_installs_for_real_on_a_fleet_host() {
    let Some(_one) = claim("postgresql_pack_installs_for_real_on_a_fleet_host") else { return };
    let tmp = temp_dir(&[
        ("debian.yaml", &intent("orders-db", "fleet-1", "debian")),
        ("pgdg.yaml", &intent("pgdg-db", "fleet-2", "pgdg")),
        ("replicated.yaml", REPLICATED),
    ]);
    let dir = tmp.join("fleet");
    let before = machine();
    let fleet = Fleet::up(&dir, 3);
    let inventory = dir.join("inventory").display().to_string();
    let packs = path("packs");

    // Both at once, on two hosts, each with its own data directory.
    let apply = |file: &str, data: &str| {
        let (f, d, i, p) = (
            tmp.join(file).display().to_string(),
            tmp.join(data).display().to_string(),
            inventory.clone(),
            packs.clone(),
        );
        std::thread::spawn(move || {
            let run = opsgraph(&["--data-dir", &d, "apply", "-f", &f, "--packs", &p, "--inventory", &i, "--yes"]);
            (run, d)
        })
    };
    let pgdg = apply("pgdg.yaml", "data-pgdg");
    let (debian, data) = apply("debian.yaml", "data-debian").join().unwrap();
    assert_eq!(debian.code, 0, "{}", debian.render());
    assert!(debian.out.contains("Evidence: 10 of 10 checks passed"), "{}", debian.out);
    assert!(
        debian.out.contains("Resource postgresql.instance/orders-db: status running, health healthy"),
        "{}",
        debian.out
    );
    // The secret parameter never reaches the output.
    assert!(!debian.out.contains("fleet-canary-pw-7f3a") && !debian.err.contains("fleet-canary-pw-7f3a"));
    let ops: serde_json::Value =
        serde_json::from_str(&opsgraph(&["--data-dir", &data, "get", "operations", "-o", "json"]).out).unwrap();
    let id = ops[0]["id"].as_str().unwrap().to_owned();
    expect![[r#"
        ID                                   STATE      ATTEMPTS  OUTCOME             FAILURE
        install-postgresql-packages@fleet-1  succeeded  1         exited with code 0  -
        ensure-postgresql-cluster@fleet-1    succeeded  1         exited with code 0  -
        configure-postgresql@fleet-1         succeeded  1         exited with code 0  -
        start-postgresql@fleet-1             succeeded  1         exited with code 0  -
        create-database-and-user@fleet-1     succeeded  1         exited with code 0  -
        verify-postgresql@fleet-1            succeeded  1         exited with code 0  -
    "#]]
    .assert_eq(&opsgraph(&["--data-dir", &data, "get", "jobs", &id]).out);

    // A real login from this machine over the bridge, with the password; a wrong one is refused.
    let ok = psql("10.213.0.11", "fleet-canary-pw-7f3a");
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "orders_app\n", "{}", String::from_utf8_lossy(&ok.stderr));
    let bad = psql("10.213.0.11", "not-the-password");
    assert!(!bad.status.success(), "a wrong password logged in");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("password authentication failed for user \"orders_app\""));

    // Evidence decides: with the server stopped behind Opsgraph's back, applying again finds
    // the start job's evidence failing, runs it, and the login works again.
    let (state, _) = opsgraph_fleet::status(&dir).unwrap().unwrap();
    let h1 = &state.hosts[0];
    let stop = opsgraph_fleet::exec(h1, &["systemctl", "stop", "postgresql@15-main"]).output().unwrap();
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    assert!(!psql("10.213.0.11", "fleet-canary-pw-7f3a").status.success());
    let (f, i) = (tmp.join("debian.yaml").display().to_string(), inventory.clone());
    let again = opsgraph(&["--data-dir", &data, "apply", "-f", &f, "--packs", &packs, "--inventory", &i, "--yes"]);
    assert_eq!(again.code, 0, "{}", again.render());
    assert!(again.out.contains("done      start-postgresql@fleet-1: exited with code 0"), "{}", again.out);
    assert_eq!(String::from_utf8_lossy(&psql("10.213.0.11", "fleet-canary-pw-7f3a").stdout), "orders_app\n");

    // A streaming replica on fleet-3 of the primary on fleet-1 (template postgresql.replicated):
    // the primary's jobs find their work done or redo it idempotently; a row written on the
    // primary is read on the replica, which refuses writes.
    let (r, i) = (tmp.join("replicated.yaml").display().to_string(), inventory.clone());
    let replicated = opsgraph(&["--data-dir", &data, "apply", "-f", &r, "--packs", &packs, "--inventory", &i, "--yes"]);
    assert_eq!(replicated.code, 0, "{}", replicated.render());
    assert!(replicated.out.contains("done      clone-replica@fleet-3: exited with code 0"), "{}", replicated.out);
    assert!(replicated.out.contains("done      verify-replication@fleet-1: exited with code 0"), "{}", replicated.out);
    assert!(replicated.out.contains("Evidence: 14 of 14 checks passed"), "{}", replicated.out);
    assert!(!replicated.render().contains("fleet-canary-repl-9c1d"), "the replication password leaked");
    let write =
        sql("10.213.0.11", "create table replicated (x text); insert into replicated values ('from the primary')");
    assert!(write.status.success(), "{}", String::from_utf8_lossy(&write.stderr));
    // The replica replays the write soon: read until it has the row.
    let read = crate::fleet::until_nonempty(|| {
        String::from_utf8_lossy(&sql("10.213.0.13", "select x, pg_is_in_recovery() from replicated").stdout)
            .into_owned()
    });
    assert_eq!(read, "from the primary|t\n");
    let refused = sql("10.213.0.13", "insert into replicated values ('on the replica')");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("cannot execute INSERT in a read-only transaction"));

    // PGDG is unreachable from fleet hosts: the job fails saying so, and diagnose names it.
    let (pgdg, pgdg_data) = pgdg.join().unwrap();
    assert_eq!(pgdg.code, 1, "{}", pgdg.render());
    assert!(
        pgdg.out.contains("failed: install-postgresql-packages@fleet-2: exited with code 1: install-postgresql-packages[compute_node/fleet-2]: ERROR: the PGDG repository is unreachable from this host: its signing key (https://www.postgresql.org/media/keys/ACCC4CF8.asc) could not be downloaded: curl: (6) Could not resolve host: www.postgresql.org."),
        "{}",
        pgdg.out
    );
    let ops: serde_json::Value =
        serde_json::from_str(&opsgraph(&["--data-dir", &pgdg_data, "get", "operations", "-o", "json"]).out).unwrap();
    let failed = ops[0]["id"].as_str().unwrap().to_owned();
    let diagnosis = opsgraph(&["--data-dir", &pgdg_data, "diagnose", &failed, "--packs", &packs]);
    assert!(diagnosis.out.contains("remedy: postgresql-pgdg-unreachable"), "{}", diagnosis.render());
    assert!(diagnosis.out.contains("cannot be reached from the host"), "{}", diagnosis.render());

    drop(fleet);
    assert_eq!(machine(), before, "down leaves the machine as it found it");
}
