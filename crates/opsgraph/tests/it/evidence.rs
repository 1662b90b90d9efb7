//! Evidence that can fail (issue [H] item 3): every command and systemd check of every bundled
//! pack is run, once and without retries, where the tools it names are absent — `PATH` is a
//! directory holding only `sh` and coreutils, the lab directory is empty — and must fail. A check
//! that proves something is *gone* passes there, and must: those are listed by name.
//!
//! The run goes through `opsgraph_exec::check_evidence` and any `Executor`, so a fleet host (over
//! SSH, with the tools uninstalled) can take the local executor's place.

use std::collections::BTreeMap;
use std::path::Path;

use expect_test::expect;
use opsgraph::load::Source;
use opsgraph_core::model::EvidenceSource;
use opsgraph_exec::{check_evidence, Cancel, Executor, LocalExecutor};

use crate::support::{path, temp_dir};

/// Packs left out of this test (none: every bundled pack's checks are held to it).
const NOT_HERE: &[&str] = &[];

/// Checks that look only at a file this machine has itself (its PostgreSQL 15 server serves the
/// store's tests): they cannot show their tool's absence here and are listed, not run. A fleet
/// host has none of these files.
const MACHINE_FILES: &[(&str, &str)] = &[
    ("postgresql_server_installed", "/usr/lib/postgresql/15/bin/postgres"),
    ("postgresql_server_removed", "/usr/lib/postgresql/15/bin/postgres"),
    ("postgresql_data_as_requested", "/var/lib/postgresql/15/main/PG_VERSION"),
    ("postgresql_cluster_absent", "/var/lib/postgresql/15/main"),
];

/// Checks that read kernel state a fleet host shares with the machine, with tools every Debian
/// host has (`sysctl`, `swapon`): the machine's loaded `br_netfilter` sets
/// `net.bridge.bridge-nf-call-iptables` in every network namespace, and `/proc/swaps` is the
/// machine's. A fresh host may already hold them. Listed there, not run: they would judge the
/// machine. (Locally, without their tools, they run and fail like the others.)
const KERNEL_STATE: &[(&str, &str)] = &[
    (
        "br_netfilter_enabled",
        "net.bridge.bridge-nf-call-iptables, set in every namespace by the machine's br_netfilter",
    ),
    ("swap_disabled", "/proc/swaps, the machine's swap devices"),
];

/// Checks that prove absence: with nothing installed they pass, as they should.
const ABSENCE: &[&str] = &[
    "etcd_unit_not_active",
    "etcd_data_absent",
    "etcd_server_removed",
    "etcd_member_ready_for_scale",
    "kubeadm_state_absent",
    "lab_node_absent",
    "labdb_absent",
    "pg_local_absent",
    "postgresql_unit_not_active",
    "postgresql_server_removed",
    "postgresql_cluster_absent",
];

/// The programs of a bare host: a shell and coreutils, nothing a pack installs.
const COREUTILS: &[&str] = &[
    "cat", "ls", "wc", "tr", "test", "[", "date", "echo", "printf", "true", "false", "head", "tail", "sort", "uniq",
    "cut", "mkdir", "rm", "env", "basename", "dirname", "id", "sleep", "stat", "touch", "tee", "readlink",
];

fn bare_bin(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink("/bin/sh", bin.join("sh")).unwrap();
    for name in COREUTILS {
        let found = ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.exists());
        if let Some(p) = found {
            std::os::unix::fs::symlink(p, bin.join(name)).unwrap();
        }
    }
}

/// Runs every command check of the bundled packs through `exec` with `env`; one line per check,
/// and the checks whose verdict is wrong. On this machine (`fresh_host` false) the checks of
/// `MACHINE_FILES` are listed, not run; on a fresh fleet host they run like the others.
pub(crate) fn run_every_check(
    exec: &dyn Executor,
    env: &BTreeMap<String, String>,
    tmp: &str,
    fresh_host: bool,
) -> (String, Vec<String>) {
    let (packs, diags) = opsgraph::load::packs(&[Source::parse(&path("packs"))]);
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    let mut report = String::new();
    let mut wrong = Vec::new();
    for pack in packs.iter().filter(|p| !NOT_HERE.contains(&p.id())) {
        for ev in pack.evidence.values() {
            if !matches!(ev.source, EvidenceSource::Command | EvidenceSource::Systemd) {
                continue;
            }
            if let Some((_, file)) = MACHINE_FILES.iter().find(|(id, _)| *id == ev.id && !fresh_host) {
                report.push_str(&format!("{}/{}: not run, it checks {file} of this machine\n", pack.id(), ev.id));
                continue;
            }
            if let Some((_, what)) = KERNEL_STATE.iter().find(|(id, _)| *id == ev.id && fresh_host) {
                report.push_str(&format!("{}/{}: not judged, it reads {what}\n", pack.id(), ev.id));
                continue;
            }
            let mut once = ev.clone();
            once.retries = None;
            once.timeout = Some("10s".to_owned());
            let result = check_evidence(&once, exec, env, &Cancel::new());
            let absence = ABSENCE.contains(&ev.id.as_str());
            let verdict = if result.passed { "passed" } else { "failed" };
            if result.passed != absence {
                wrong.push(format!(
                    "{}/{}: {verdict}, observed {}; {}",
                    pack.id(),
                    ev.id,
                    result.observed,
                    result.detail
                ));
            }
            report.push_str(&format!(
                "{}/{}: {verdict}{}\n",
                pack.id(),
                ev.id,
                if result.passed { " (proves absence)".to_owned() } else { format!(", {}", result.observed) }
            ));
        }
    }
    (report.replace(tmp, "$TMP"), wrong)
}

/// Every check run on this machine where the tools are absent: `PATH` a directory holding only
/// `sh` and coreutils, the lab directory empty. The report and the checks whose verdict is wrong.
pub(crate) fn bare_host_report() -> (String, Vec<String>) {
    let dir = temp_dir(&[("lab/.keep", "")]);
    bare_bin(dir.path());
    let tmp = dir.path().display().to_string();
    let env: BTreeMap<String, String> = [
        ("PATH", format!("{tmp}/bin")),
        ("OPSGRAPH_LAB_DIR", format!("{tmp}/lab")),
        ("OPSGRAPH_TARGET_NAME", "node-1".to_owned()),
        ("OPSGRAPH_INTENT_NAME", "probe".to_owned()),
        ("OPSGRAPH_OPERATION_ID", "op-probe".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    run_every_check(&LocalExecutor, &env, &tmp, false)
}

/// How the verdicts of `there` differ from those of `here`, two reports of the same checks:
/// a line per change of verdict (`here → there`), naming the checks it happened to.
pub(crate) fn changed_verdicts(here: &str, there: &str) -> String {
    let split = |report: &str| -> Vec<(String, String)> {
        report.lines().map(|l| l.split_once(": ").map(|(id, v)| (id.to_owned(), v.to_owned())).unwrap()).collect()
    };
    let (here, there) = (split(here), split(there));
    let ids = |r: &[(String, String)]| r.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&here), ids(&there), "the two runs checked different things");
    let mut changes: Vec<((&str, &str), Vec<&str>)> = Vec::new();
    for ((id, a), (_, b)) in here.iter().zip(&there).filter(|((_, a), (_, b))| a != b) {
        match changes.iter_mut().find(|(change, _)| *change == (a.as_str(), b.as_str())) {
            Some((_, checks)) => checks.push(id),
            None => changes.push(((a, b), vec![id])),
        }
    }
    changes.iter().map(|((a, b), checks)| format!("{a} → {b}: {}\n", checks.join(", "))).collect()
}

#[test]
fn every_bundled_check_fails_where_its_tools_are_absent() {
    let (report, wrong) = bare_host_report();
    // Not vacuous: every check exercised is listed, and the count is part of the snapshot.
    let report = format!("{} checks\n{report}", report.lines().count());
    expect![[r#"
        122 checks
        etcd/etcd_cluster_healthy: failed, exit code 127
        etcd/etcd_data_absent: passed (proves absence)
        etcd/etcd_data_as_requested: failed, exit code 1
        etcd/etcd_member_key_private: failed, (empty output)
        etcd/etcd_member_ready_for_scale: passed (proves absence)
        etcd/etcd_members_started: failed, (empty output)
        etcd/etcd_restore_prepared: failed, (empty output)
        etcd/etcd_restored_revision: failed, exit code 1
        etcd/etcd_runs_candidate_version: failed, exit code 127
        etcd/etcd_server_installed: failed, could not start: failed to start `etcd`: No such file or directory (os error 2)
        etcd/etcd_server_removed: passed (proves absence)
        etcd/etcd_snapshot_valid: failed, (empty output)
        etcd/etcd_unit_active: failed, could not start: failed to start `systemctl`: No such file or directory (os error 2)
        etcd/etcd_unit_enabled: failed, could not start: failed to start `systemctl`: No such file or directory (os error 2)
        etcd/etcd_unit_not_active: passed (proves absence)
        etcd/etcdctl_installed: failed, could not start: failed to start `etcdctl`: No such file or directory (os error 2)
        kubernetes/api_endpoint_answers: failed, (empty output)
        kubernetes/apiserver_readyz: failed, (empty output)
        kubernetes/apiserver_runs_target_version: failed, exit code 127
        kubernetes/br_netfilter_enabled: failed, could not start: failed to start `sysctl`: No such file or directory (os error 2)
        kubernetes/cni_daemonsets_ready: failed, (empty output)
        kubernetes/containerd_answers: failed, could not start: failed to start `ctr`: No such file or directory (os error 2)
        kubernetes/containerd_service_active: failed, could not start: failed to start `systemctl`: No such file or directory (os error 2)
        kubernetes/containerd_systemd_cgroup: failed, could not start: failed to start `containerd`: No such file or directory (os error 2)
        kubernetes/control_plane_pods_ready: failed, exit code 127
        kubernetes/coredns_available: failed, exit code 127
        kubernetes/crictl_works: failed, could not start: failed to start `crictl`: No such file or directory (os error 2)
        kubernetes/etcd_member_per_control_plane: failed, (empty output)
        kubernetes/haproxy_active: failed, could not start: failed to start `systemctl`: No such file or directory (os error 2)
        kubernetes/ip_forward_enabled: failed, could not start: failed to start `sysctl`: No such file or directory (os error 2)
        kubernetes/keepalived_active: failed, could not start: failed to start `systemctl`: No such file or directory (os error 2)
        kubernetes/kubeadm_installed: failed, could not start: failed to start `kubeadm`: No such file or directory (os error 2)
        kubernetes/kubeadm_state_absent: passed (proves absence)
        kubernetes/kubelet_active: failed, could not start: failed to start `systemctl`: No such file or directory (os error 2)
        kubernetes/kubelet_enabled: failed, could not start: failed to start `systemctl`: No such file or directory (os error 2)
        kubernetes/kubelet_runs_target_version: failed, exit code 127
        kubernetes/kubernetes_apt_repository_verified: failed, (empty output)
        kubernetes/kubernetes_images_present: failed, exit code 127
        kubernetes/kubernetes_packages_as_requested: failed, (empty output)
        kubernetes/kubernetes_server_version: failed, could not start: failed to start `kubectl`: No such file or directory (os error 2)
        kubernetes/node_cordoned_self: failed, (empty output)
        kubernetes/node_ready_self: failed, (empty output)
        kubernetes/node_schedulable_self: failed, (empty output)
        kubernetes/nodes_all_ready: failed, (empty output)
        kubernetes/swap_disabled: failed, (empty output)
        lab-cluster/lab_admin_conf_present: failed, exit code 127
        lab-cluster/lab_apiserver_alive: failed, exit code 1
        lab-cluster/lab_apiserver_heartbeat_fresh: failed, exit code 1
        lab-cluster/lab_apiserver_replicas: failed, exit code 2, output replicas=0
        lab-cluster/lab_cluster_observed: failed, exit code 127
        lab-cluster/lab_cluster_spec_recorded: failed, exit code 127
        lab-cluster/lab_cluster_status_ready: failed, exit code 127
        lab-cluster/lab_cni_alive: failed, exit code 1
        lab-cluster/lab_cni_config_present: failed, exit code 127
        lab-cluster/lab_cni_heartbeat_fresh: failed, exit code 1
        lab-cluster/lab_containerd_alive: failed, exit code 1
        lab-cluster/lab_containerd_heartbeat_fresh: failed, exit code 1
        lab-cluster/lab_containerd_mirror_loaded: failed, exit code 127
        lab-cluster/lab_credentials_checked: failed, exit code 127
        lab-cluster/lab_join_token_registered: failed, exit code 127
        lab-cluster/lab_kubeadm_installed: failed, exit code 127
        lab-cluster/lab_kubelet_alive: failed, exit code 1
        lab-cluster/lab_kubelet_conf_present: failed, exit code 127
        lab-cluster/lab_kubelet_heartbeat_fresh: failed, exit code 1
        lab-cluster/lab_kubernetes_images_present: failed, exit code 1
        lab-cluster/lab_network_configured: failed, exit code 127
        lab-cluster/lab_node_absent: passed (proves absence)
        lab-cluster/lab_node_dir_writable: failed, exit code 1
        lab-cluster/lab_node_ready: failed, exit code 127
        lab-cluster/lab_node_registered: failed, exit code 127
        lab-cluster/lab_node_version: failed, (empty output)
        lab-cluster/lab_nodes_all_ready: failed, no nodes
        lab-cluster/lab_registry_mirror_configured: failed, exit code 127
        lab-database/labdb_absent: passed (proves absence)
        lab-database/labdb_database_exists: failed, exit code 127
        lab-database/labdb_datadir_initialised: failed, exit code 1
        lab-database/labdb_heartbeat_fresh: failed, exit code 1
        lab-database/labdb_installed: failed, (empty output)
        lab-database/labdb_owner_login: failed, (empty output)
        lab-database/labdb_select_one: failed, (empty output)
        lab-database/labdb_server_alive: failed, exit code 1
        lab-database/labdb_service_recorded: failed, exit code 127
        minio/minio_bucket_job_succeeded: failed, (empty output)
        minio/minio_chart_is_target: failed, exit code 127
        minio/minio_health_ready: failed, exit code 127
        minio/minio_helm_release_deployed: failed, (empty output)
        minio/minio_pods_ready: failed, exit code 127
        minio/minio_pools_as_requested: failed, exit code 127
        minio/minio_release_absent: failed, (empty output)
        minio/minio_smoke_job_succeeded: failed, (empty output)
        postgresql/postgresql_accepting_connections: failed, exit code 127
        postgresql/postgresql_backup_valid: failed, exit code 1
        postgresql/postgresql_cluster_absent: not run, it checks /var/lib/postgresql/15/main of this machine
        postgresql/postgresql_cluster_exists: failed, exit code 127
        postgresql/postgresql_config_valid: failed, exit code 1
        postgresql/postgresql_data_as_requested: not run, it checks /var/lib/postgresql/15/main/PG_VERSION of this machine
        postgresql/postgresql_database_exists: failed, (empty output)
        postgresql/postgresql_is_primary: failed, (empty output)
        postgresql/postgresql_owner_login_tcp: failed, exit code 127
        postgresql/postgresql_replicas_streaming: failed, exit code 2
        postgresql/postgresql_replication_role: failed, exit code 1
        postgresql/postgresql_restored_rows: failed, exit code 1
        postgresql/postgresql_runs_candidate_version: failed, exit code 127
        postgresql/postgresql_select_one: failed, (empty output)
        postgresql/postgresql_server_installed: not run, it checks /usr/lib/postgresql/15/bin/postgres of this machine
        postgresql/postgresql_server_removed: not run, it checks /usr/lib/postgresql/15/bin/postgres of this machine
        postgresql/postgresql_server_version: failed, (empty output)
        postgresql/postgresql_standby_streaming: failed, exit code 1
        postgresql/postgresql_unit_active: failed, (empty output)
        postgresql/postgresql_unit_not_active: passed (proves absence)
        postgresql-local/pg_local_absent: passed (proves absence)
        postgresql-local/pg_local_accepting_connections: failed, exit code 127
        postgresql-local/pg_local_cluster_initialised: failed, exit code 1
        postgresql-local/pg_local_owner_select_one: failed, (empty output)
        postgresql-local/pg_local_server_found: failed, (empty output)
        postgresql-local/pg_local_service_recorded: failed, exit code 127
        tempo/tempo_bucket_job_succeeded: failed, (empty output)
        tempo/tempo_chart_is_target: failed, exit code 127
        tempo/tempo_helm_release_deployed: failed, (empty output)
        tempo/tempo_ready_endpoint: failed, (empty output)
        tempo/tempo_release_absent: failed, (empty output)
        tempo/tempo_rollout_complete: failed, exit code 127
    "#]].assert_eq(&report);
    assert!(wrong.is_empty(), "checks that passed without their tools:\n{}", wrong.join("\n"));
}
