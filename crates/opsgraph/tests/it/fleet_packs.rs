//! The bundled packs run for real on one 3-host fleet (issue [H] items 2 and 3, docs/fleet.md),
//! sharing one `up` to keep CI's fleet time down:
//!
//! 1. every bundled command/systemd check, over SSH, on a fresh host (nothing installed) must
//!    fail, and the checks that prove absence must pass (`evidence.rs`'s run, the SSH executor in
//!    place of the local one, `postgresql_server_installed` included);
//! 2. `opsgraph apply` of the etcd example on the three hosts: Debian's etcd-server, TLS, evidence
//!    `etcdctl endpoint health --cluster` and member list on every member; then one member's etcd
//!    stopped behind Opsgraph's back, and the health check fails.
//!
//! The kubernetes pack runs on a fleet of its own (`fleet_kubernetes.rs`).
//!
//! Needs root and OPSGRAPH_FLEET=1, like every fleet test.

use std::collections::BTreeMap;
use std::path::Path;

use expect_test::expect;
use opsgraph::load::Source;
use opsgraph_core::model::SshAccess;
use opsgraph_exec::{check_evidence, Cancel, SshExecutor};

use crate::fleet::{claim, machine, Fleet};
use crate::serve::{describe_resource, status_within, Process};
use crate::support::{opsgraph, path, temp_dir};

/// The SSH executor for a fleet host, as the inventory describes it (pinned host key), and as a
/// run uses it: over one multiplexed connection a host, made before a check's time starts (a
/// check timed with a fresh key exchange in it timed out at 10 s on a loaded CI machine).
pub(crate) fn ssh_executor(fleet_dir: &Path, address: &str) -> SshExecutor {
    let access = SshAccess {
        host: address.to_owned(),
        port: 22,
        user: Some("root".to_owned()),
        key: Some(fleet_dir.join("id_ed25519").display().to_string()),
        known_hosts: Some(fleet_dir.join("known_hosts").display().to_string()),
    };
    SshExecutor::from_access(&access, Some(fleet_dir.join("ssh")))
}

/// One evidence check of a bundled pack, once, through `exec`.
pub(crate) fn check_once(pack: &str, id: &str, exec: &SshExecutor, env: &BTreeMap<String, String>) -> (bool, String) {
    let (packs, _) = opsgraph::load::packs(&[Source::parse(&path("packs"))]);
    let pack = packs.iter().find(|p| p.id() == pack).unwrap();
    let mut ev = pack.evidence.get(id).unwrap().clone();
    ev.retries = None;
    let r = check_evidence(&ev, exec, env, &Cancel::new());
    (r.passed, format!("{}; {}", r.observed, r.detail))
}

/// The jobs table with each retried job's attempts shown as 1, once the retries are within what
/// `retried` allows (a job's id prefix and its retry policy's `max_attempts`: e.g. an `apt-get`
/// that a fresh machine's package cache failed once) and the failed attempts' output is printed.
/// Any other retry stays in the table, and the snapshot fails on it.
fn first_attempts(data: &str, id: &str, jobs: &str, retried: &[(&str, u32)]) -> String {
    let mut table = String::new();
    for line in jobs.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let attempts: Option<u32> = fields.get(2).and_then(|a| a.parse().ok());
        let job = fields.first().copied().unwrap_or_default();
        let allowed = retried.iter().find(|(prefix, _)| job.starts_with(&format!("{prefix}@")));
        match (attempts, allowed) {
            (Some(n), Some((_, max))) if n > 1 && n <= *max => {
                let logs = opsgraph(&["--data-dir", data, "logs", id, job]);
                eprintln!("{job} ran {n} attempts; their output:\n{}", logs.render());
                let at = line.find(&format!("  {n}  ")).expect("the attempts column") + 2;
                table.push_str(&format!("{}1{}\n", &line[..at], &line[at + n.to_string().len()..]));
            }
            _ => table.push_str(&format!("{line}\n")),
        }
    }
    table
}

pub(crate) fn op_id(data: &str) -> String {
    let ops: serde_json::Value =
        serde_json::from_str(&opsgraph(&["--data-dir", data, "get", "operations", "-o", "json"]).out).unwrap();
    ops[0]["id"].as_str().unwrap().to_owned()
}

#[test]
fn fleet_bundled_packs_for_real_on_three_hosts() {
    let Some(_one) = claim("fleet_bundled_packs_for_real_on_three_hosts") else { return };
    let tmp = temp_dir(&[]);
    let dir = tmp.join("fleet");
    let before = machine();
    let t0 = std::time::Instant::now();
    let fleet = Fleet::up(&dir, 3);
    eprintln!("TIME fleet up: {:.1} s", t0.elapsed().as_secs_f64());
    let inventory = dir.join("inventory").display().to_string();
    let packs = path("packs");

    // 1. A fresh host has none of the packs' tools: every check fails there, except those that
    //    prove absence. Its own PATH; the lab directory exists and is empty.
    let t = std::time::Instant::now();
    let fresh = ssh_executor(&dir, "10.213.0.13");
    let env: BTreeMap<String, String> = [
        ("OPSGRAPH_LAB_DIR", "/tmp/opsgraph-lab"),
        ("OPSGRAPH_TARGET_NAME", "fleet-3"),
        ("OPSGRAPH_INTENT_NAME", "probe"),
        ("OPSGRAPH_OPERATION_ID", "op-probe"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let (state, _) = opsgraph_fleet::status(&dir).unwrap().unwrap();
    let mk = opsgraph_fleet::exec(&state.hosts[2], &["mkdir", "-p", "/tmp/opsgraph-lab"]).output().unwrap();
    assert!(mk.status.success());
    let (report, wrong) = crate::evidence::run_every_check(&fresh, &env, "/tmp/opsgraph-lab", true);
    // The same checks as evidence.rs runs on this machine, with the same verdicts but these: the
    // host has Debian's base tools, systemd and sysctl where this machine's bare PATH has only
    // coreutils; it shares the machine's kernel state (not judged); it has none of this
    // machine's PostgreSQL files (run there).
    let (here, _) = crate::evidence::bare_host_report();
    expect![[r#"
        failed, exit code 127 → failed, exit code 1: etcd/etcd_runs_candidate_version, postgresql/postgresql_runs_candidate_version
        failed, could not start: failed to start `etcd`: No such file or directory (os error 2) → failed, (empty output): etcd/etcd_server_installed
        failed, could not start: failed to start `systemctl`: No such file or directory (os error 2) → failed, inactive: etcd/etcd_unit_active, kubernetes/containerd_service_active, kubernetes/haproxy_active, kubernetes/keepalived_active, kubernetes/kubelet_active
        failed, could not start: failed to start `systemctl`: No such file or directory (os error 2) → failed, (empty output): etcd/etcd_unit_enabled, kubernetes/kubelet_enabled
        failed, could not start: failed to start `etcdctl`: No such file or directory (os error 2) → failed, (empty output): etcd/etcdctl_installed
        failed, could not start: failed to start `sysctl`: No such file or directory (os error 2) → not judged, it reads net.bridge.bridge-nf-call-iptables, set in every namespace by the machine's br_netfilter: kubernetes/br_netfilter_enabled
        failed, could not start: failed to start `ctr`: No such file or directory (os error 2) → failed, (empty output): kubernetes/containerd_answers
        failed, could not start: failed to start `containerd`: No such file or directory (os error 2) → failed, (empty output): kubernetes/containerd_systemd_cgroup
        failed, could not start: failed to start `crictl`: No such file or directory (os error 2) → failed, exit code 127: kubernetes/crictl_works
        failed, could not start: failed to start `sysctl`: No such file or directory (os error 2) → failed, 0: kubernetes/ip_forward_enabled
        failed, could not start: failed to start `kubeadm`: No such file or directory (os error 2) → failed, (empty output): kubernetes/kubeadm_installed
        failed, (empty output) → failed, kubeadm is not installed (absent) though purge is false: the packages were to stay: kubernetes/kubernetes_packages_as_requested
        failed, could not start: failed to start `kubectl`: No such file or directory (os error 2) → failed, (empty output): kubernetes/kubernetes_server_version
        failed, (empty output) → not judged, it reads /proc/swaps, the machine's swap devices: kubernetes/swap_disabled
        failed, exit code 127 → failed, exit code 2: lab-cluster/lab_admin_conf_present, lab-cluster/lab_cluster_observed, lab-cluster/lab_cluster_spec_recorded, lab-cluster/lab_cluster_status_ready, lab-cluster/lab_cni_config_present, lab-cluster/lab_containerd_mirror_loaded, lab-cluster/lab_credentials_checked, lab-cluster/lab_join_token_registered, lab-cluster/lab_kubeadm_installed, lab-cluster/lab_kubelet_conf_present, lab-cluster/lab_network_configured, lab-cluster/lab_node_ready, lab-cluster/lab_node_registered, lab-cluster/lab_registry_mirror_configured, lab-database/labdb_database_exists, lab-database/labdb_service_recorded, postgresql-local/pg_local_service_recorded
        not run, it checks /var/lib/postgresql/15/main of this machine → passed (proves absence): postgresql/postgresql_cluster_absent
        not run, it checks /var/lib/postgresql/15/main/PG_VERSION of this machine → failed, exit code 1: postgresql/postgresql_data_as_requested
        not run, it checks /usr/lib/postgresql/15/bin/postgres of this machine → failed, exit code 1: postgresql/postgresql_server_installed
        not run, it checks /usr/lib/postgresql/15/bin/postgres of this machine → passed (proves absence): postgresql/postgresql_server_removed
        failed, (empty output) → failed, inactive: postgresql/postgresql_unit_active
    "#]]
    .assert_eq(&crate::evidence::changed_verdicts(&here, &report));
    assert!(wrong.is_empty(), "checks that passed on a host without their tools:\n{}", wrong.join("\n"));
    eprintln!("TIME absent-tool checks on fleet-3: {:.1} s", t.elapsed().as_secs_f64());

    // 2. etcd on the three hosts, for real.
    let t = std::time::Instant::now();
    let data = tmp.join("data-etcd").display().to_string();
    let intent = path("examples/etcd/fleet-intent.yaml");
    let etcd =
        opsgraph(&["--data-dir", &data, "apply", "-f", &intent, "--packs", &packs, "--inventory", &inventory, "--yes"]);
    assert_eq!(etcd.code, 0, "{}", etcd.render());
    assert!(etcd.out.contains("Resource etcd.cluster/config-store: status running, health healthy"), "{}", etcd.out);
    let id = op_id(&data);
    let jobs = opsgraph(&["--data-dir", &data, "get", "jobs", &id]).out;
    expect![[r#"
        ID                                STATE      ATTEMPTS  OUTCOME             FAILURE
        issue-etcd-ca                     succeeded  1         exited with code 0  -
        issue-member-certificate@fleet-1  succeeded  1         exited with code 0  -
        issue-member-certificate@fleet-2  succeeded  1         exited with code 0  -
        issue-member-certificate@fleet-3  succeeded  1         exited with code 0  -
        check-etcd-ca@fleet-1             succeeded  1         exited with code 0  -
        check-etcd-ca@fleet-2             succeeded  1         exited with code 0  -
        check-etcd-ca@fleet-3             succeeded  1         exited with code 0  -
        install-etcd-member@fleet-1       succeeded  1         exited with code 0  -
        install-etcd-member@fleet-2       succeeded  1         exited with code 0  -
        install-etcd-member@fleet-3       succeeded  1         exited with code 0  -
        configure-etcd-member@fleet-1     succeeded  1         exited with code 0  -
        configure-etcd-member@fleet-2     succeeded  1         exited with code 0  -
        configure-etcd-member@fleet-3     succeeded  1         exited with code 0  -
        start-etcd-member@fleet-1         succeeded  1         exited with code 0  -
        start-etcd-member@fleet-2         succeeded  1         exited with code 0  -
        start-etcd-member@fleet-3         succeeded  1         exited with code 0  -
        verify-etcd-cluster@fleet-1       succeeded  1         exited with code 0  -
        verify-etcd-cluster@fleet-2       succeeded  1         exited with code 0  -
        verify-etcd-cluster@fleet-3       succeeded  1         exited with code 0  -
    "#]]
    .assert_eq(&first_attempts(&data, &id, &jobs, &[("install-etcd-member", 3)]));
    // The members' keys are secret artifacts: sealed at rest, never printed.
    assert!(!etcd.render().contains("PRIVATE KEY"), "{}", etcd.render());
    eprintln!("TIME etcd on 3 hosts: {:.1} s", t.elapsed().as_secs_f64());

    // Evidence on every member: the cluster healthy, three members started.
    let members = [("fleet-1", "10.213.0.11"), ("fleet-2", "10.213.0.12"), ("fleet-3", "10.213.0.13")];
    let member_env: BTreeMap<String, String> = BTreeMap::from([(
        "OPSGRAPH_PARAM_MEMBER_ADDRESSES".to_owned(),
        "fleet-1=10.213.0.11,fleet-2=10.213.0.12,fleet-3=10.213.0.13".to_owned(),
    )]);
    for (name, address) in members {
        let exec = ssh_executor(&dir, address);
        for check in ["etcd_cluster_healthy", "etcd_members_started"] {
            let (passed, observed) = check_once("etcd", check, &exec, &member_env);
            assert!(passed, "{check} on {name}: {observed}");
        }
    }

    // Day 2 ([I]): verified right after it completed, with what the checks observed.
    let r = describe_resource(&data, "etcd.cluster/config-store");
    assert_eq!(r["resource"]["status"], "running", "{r:#}");
    assert_eq!(r["resource"]["observed"]["members"], "3", "{r:#}");
    assert!(r["resource"]["observed"]["version"].as_str().is_some_and(|v| v.starts_with("3.")), "{r:#}");
    // `opsgraph serve` verifies it every 15 s (the pack's interval) from now on, and repairs what
    // drifts at once (`repair: apply_safe` for dev, the example's environment).
    let policy = tmp.join("repair-policy.yaml");
    std::fs::write(&policy, "operations_policy:\n  dev: {repair: apply_safe}\n").unwrap();
    let policy = policy.display().to_string();
    let server = Process::start(
        std::process::Command::new(env!("CARGO_BIN_EXE_opsgraph"))
            .args(["--data-dir", &data, "serve", "--listen", "127.0.0.1:0", "--packs", &packs])
            .args(["--inventory", &inventory, "--inventory", &policy])
            .env("OPSGRAPH_VERIFY_TICK_MS", "500"),
        &tmp.join("serve.log"),
    );
    let status_within = |want: &str, limit: std::time::Duration| {
        let every = std::time::Duration::from_millis(500);
        let (took, r) = status_within(&data, "etcd.cluster/config-store", want, limit, every);
        eprintln!("TIME etcd.cluster {want} after {:.1} s", took.as_secs_f64());
        r
    };

    // etcd stopped on fleet-2 behind Opsgraph's back: the health check fails on every member
    // (fleet-2's own endpoint does not answer; the others see fleet-2's endpoint unhealthy).
    let stop = opsgraph_fleet::exec(&state.hosts[1], &["systemctl", "stop", "etcd"]).output().unwrap();
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    for (name, address) in members {
        let (passed, observed) = check_once("etcd", "etcd_cluster_healthy", &ssh_executor(&dir, address), &member_env);
        assert!(!passed, "etcd_cluster_healthy passed on {name} with fleet-2's etcd stopped: {observed}");
        assert!(observed.starts_with("exit code 1;"), "{name}: {observed}");
    }
    // Within one interval (15 s, plus up to 1.5 s of jitter and the checks' own time), serve
    // finds it degraded, with the failing checks as the reason, and under the policy plans the
    // pack's repair and runs it: etcd on fleet-2 is started again, and the cluster verified
    // running. Each step is on the resource's history.
    status_within("degraded", std::time::Duration::from_secs(40));
    let r = status_within("running", std::time::Duration::from_secs(90));
    let history = r["history"].as_array().unwrap();
    let degraded = history
        .iter()
        .find(|e| e["kind"] == "verified" && e["status"] == "degraded")
        .unwrap_or_else(|| panic!("{r:#}"));
    let failed = degraded["detail"]["checks"].as_array().unwrap();
    assert!(
        failed.iter().any(|c| c["check"] == "etcd_unit_active"
            && c["on"] == "verify-etcd-cluster@fleet-2"
            && c["passed"] == false),
        "{degraded:#}"
    );
    let repair = history.iter().find(|e| e["kind"] == "repair").unwrap_or_else(|| panic!("{r:#}"));
    let repair_op = repair["operation"].as_str().unwrap_or_else(|| panic!("{repair:#}")).to_string();
    assert!(
        history.iter().any(|e| e["kind"] == "operation.completed" && e["operation"] == repair_op.as_str()),
        "{r:#}"
    );
    let active = opsgraph_fleet::exec(&state.hosts[1], &["systemctl", "is-active", "etcd"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&active.stdout).trim(), "active");
    let jobs = opsgraph(&["--data-dir", &data, "get", "jobs", &repair_op]);
    let line = jobs.out.lines().find(|l| l.starts_with("repair-etcd-member@fleet-2 ")).unwrap_or_default();
    assert!(line.split_whitespace().nth(1) == Some("succeeded"), "{}", jobs.render());
    drop(server);

    drop(fleet);
    assert_eq!(machine(), before, "down leaves the machine as it found it");
    eprintln!("TIME whole test: {:.1} s", t0.elapsed().as_secs_f64());
}
