//! The kubernetes pack on real hosts (issue [H] item 2, docs/fleet.md): every stage that needs
//! only Debian's archive runs for real, and the first that needs pkgs.k8s.io fails for real.
//!
//! Three fleet hosts: fleet-1 the control-plane node, fleet-2 the worker, fleet-3 the site's own
//! image registry (Debian's `docker-registry`, plain HTTP on :5000), since registry.k8s.io is
//! unreachable from this machine. Two runs of `examples/kubernetes/fleet-intent.yaml`:
//!
//! 1. with the default `image_repository` (registry.k8s.io): `validate-credentials` fails for real
//!    before any node is changed, with curl's own reason;
//! 2. as written (the site registry, `runtime_source: debian`): validate-inputs, -nodes and
//!    -credentials, prepare-network (modules and sysctls inside the hosts' namespaces) and
//!    install-runtime (containerd and runc from Debian, containerd told the registry is plain
//!    HTTP) succeed with their evidence on both nodes; `install-kubeadm` fails because the package
//!    repository is unreachable, and `diagnose` names `package-repository-unreachable` from the
//!    real output. Afterwards the runtime's evidence is checked again on both nodes, and a stopped
//!    containerd makes it fail.
//!
//! Needs root and OPSGRAPH_FLEET=1, like every fleet test.

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use expect_test::expect;

use crate::fleet::{claim, machine, Fleet};
use crate::fleet_packs::{check_once, op_id, ssh_executor};
use crate::support::{opsgraph, path, temp_dir};

/// `GET /v2/` of the registry on fleet-3, from this machine: the status line.
fn registry_status(address: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&address.parse().unwrap(), Duration::from_secs(2)) else {
        return "no answer".into();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"GET /v2/ HTTP/1.0\r\nHost: registry\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.lines().next().unwrap_or("empty answer").to_owned()
}

/// An operation's jobs: `id state attempts` per line, and each failure's full text.
struct Jobs {
    table: String,
    rows: Vec<serde_json::Value>,
}

impl Jobs {
    fn failure(&self, id: &str) -> String {
        let row = self.rows.iter().find(|j| j["id"] == id).unwrap_or_else(|| panic!("no job {id}:\n{}", self.table));
        row["failure"].as_str().unwrap_or_default().to_owned()
    }
}

fn jobs_of(data: &str) -> Jobs {
    let out = opsgraph(&["--data-dir", data, "get", "jobs", &op_id(data), "-o", "json"]).out;
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let table = rows
        .iter()
        .map(|j| format!("{} {} {}\n", j["id"].as_str().unwrap(), j["state"].as_str().unwrap(), j["attempts"]))
        .collect();
    Jobs { table, rows }
}

/// The site's registry on fleet-3 (`host`): Debian's docker-registry through the fleet's package
/// cache, anonymous-pull (Debian's configuration asks for htpasswd logins), answering.
fn site_registry(host: &opsgraph_fleet::HostState) {
    let t = Instant::now();
    let install = opsgraph_fleet::exec(
        host,
        &["sh", "-c", "apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-registry >/dev/null"],
    )
    .output()
    .unwrap();
    assert!(install.status.success(), "{}", String::from_utf8_lossy(&install.stderr));
    let anonymous = opsgraph_fleet::exec(
        host,
        &["sh", "-c", "sed -i '/^auth:/,/^[^ ]/{/^auth:/d;/^ /d}' /etc/docker/registry/config.yml && systemctl restart docker-registry"],
    )
    .output()
    .unwrap();
    assert!(anonymous.status.success(), "{}", String::from_utf8_lossy(&anonymous.stderr));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !registry_status("10.213.0.13:5000").ends_with(" 200 OK") {
        assert!(Instant::now() < deadline, "the registry on fleet-3: {}", registry_status("10.213.0.13:5000"));
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!("TIME registry on fleet-3: {:.1} s", t.elapsed().as_secs_f64());
}

/// The fleet's inventory, its hosts reaching the site registry (the operator says so): a
/// directory under `tmp`.
fn registry_inventory(tmp: &std::path::Path, fleet_dir: &std::path::Path) -> String {
    let inventory = tmp.join("inventory");
    std::fs::create_dir_all(&inventory).unwrap();
    let hosts = std::fs::read_to_string(fleet_dir.join("inventory/fleet.yaml")).unwrap();
    let hosts =
        hosts.replace("    - package.manager.apt\n", "    - package.manager.apt\n    - network.registry_access\n");
    std::fs::write(inventory.join("fleet.yaml"), hosts).unwrap();
    inventory.display().to_string()
}

/// `opsgraph apply` of `intent` with the bundled packs; its approve-plan gate answered by alice.
fn apply_approved(intent: &str, data: &str, inventory: &str) -> crate::support::Run {
    let packs = path("packs");
    let run =
        opsgraph(&["--data-dir", data, "apply", "-f", intent, "--packs", &packs, "--inventory", inventory, "--yes"]);
    if !run.out.contains("waiting for approval at approve-plan") {
        return run;
    }
    let op = op_id(data);
    opsgraph(&[
        "--data-dir",
        data,
        "gate",
        "answer",
        "approve-plan",
        "--operation",
        &op,
        "--option",
        "approve",
        "--as",
        "alice",
    ])
}

#[test]
fn fleet_kubernetes_runs_for_real_until_pkgs_k8s_io() {
    let Some(_one) = claim("fleet_kubernetes_runs_for_real_until_pkgs_k8s_io") else { return };
    let tmp = temp_dir(&[("data/config.yaml", "users:\n  alice: [sre]\n")]);
    let dir = tmp.join("fleet");
    let before = machine();
    let t0 = Instant::now();
    let fleet = Fleet::up(&dir, 3);
    let (state, _) = opsgraph_fleet::status(&dir).unwrap().unwrap();

    site_registry(&state.hosts[2]);
    let inventory = registry_inventory(tmp.path(), &dir);
    let intent = path("examples/kubernetes/fleet-intent.yaml");
    let data = tmp.join("data").display().to_string();
    let apply = |intent: &str, data: &str| apply_approved(intent, data, &inventory);

    // 1. registry.k8s.io: refused before any node is changed.
    let t = Instant::now();
    let public = tmp.join("public-intent.yaml");
    let text = std::fs::read_to_string(&intent).unwrap();
    let text = text.replace("    image_repository: 10.213.0.13:5000/k8s\n    image_repository_insecure: true\n", "");
    assert!(!text.contains("image_repository"), "{text}");
    std::fs::write(&public, text).unwrap();
    let data_public = tmp.join("data-public");
    std::fs::create_dir_all(&data_public).unwrap();
    std::fs::copy(tmp.join("data/config.yaml"), data_public.join("config.yaml")).unwrap();
    let data_public = data_public.display().to_string();
    let run = apply(&public.display().to_string(), &data_public);
    assert_ne!(run.code, 0, "{}", run.render());
    let jobs = jobs_of(&data_public);
    expect![[r#"
        validate-inputs succeeded 1
        validate-nodes@fleet-1 succeeded 1
        validate-nodes@fleet-2 succeeded 1
        validate-credentials failed 3
        prepare-network@fleet-1 pending 0
        prepare-network@fleet-2 pending 0
        install-runtime@fleet-1 pending 0
        install-runtime@fleet-2 pending 0
        install-kubeadm@fleet-1 pending 0
        install-kubeadm@fleet-2 pending 0
        init-control-plane@fleet-1 pending 0
        install-cni@fleet-1 pending 0
        join-workers@fleet-2 pending 0
        verify@fleet-1 pending 0
    "#]]
    .assert_eq(&jobs.table);
    let failure = jobs.failure("validate-credentials");
    assert!(
        failure.contains("validate-credentials: ERROR: https://registry.k8s.io/v2/ does not answer (network or TLS)"),
        "{failure}"
    );
    eprintln!("TIME registry.k8s.io refused: {:.1} s", t.elapsed().as_secs_f64());

    // 2. The site registry: everything up to pkgs.k8s.io runs for real.
    let t = Instant::now();
    let run = apply(&intent, &data);
    assert_ne!(run.code, 0, "{}", run.render());
    let jobs = jobs_of(&data);
    expect![[r#"
        validate-inputs succeeded 1
        validate-nodes@fleet-1 succeeded 1
        validate-nodes@fleet-2 succeeded 1
        validate-credentials succeeded 1
        prepare-network@fleet-1 succeeded 1
        prepare-network@fleet-2 succeeded 1
        install-runtime@fleet-1 succeeded 1
        install-runtime@fleet-2 succeeded 1
        install-kubeadm@fleet-1 failed 2
        install-kubeadm@fleet-2 failed 2
        init-control-plane@fleet-1 pending 0
        install-cni@fleet-1 pending 0
        join-workers@fleet-2 pending 0
        verify@fleet-1 pending 0
    "#]]
    .assert_eq(&jobs.table);
    for node in ["fleet-1", "fleet-2"] {
        let failure = jobs.failure(&format!("install-kubeadm@{node}"));
        assert!(
            failure.contains("ERROR: the package repository https://pkgs.k8s.io/")
                && failure.contains(" is unreachable"),
            "{failure}"
        );
    }
    let diagnosis = opsgraph(&["--data-dir", &data, "diagnose", &op_id(&data), "--packs", &path("packs")]).out;
    assert!(diagnosis.contains("remedy: package-repository-unreachable"), "{diagnosis}");
    eprintln!("TIME kubernetes on 2 nodes until install-kubeadm: {:.1} s", t.elapsed().as_secs_f64());

    // The runtime is really there, and told about the plain-HTTP registry; its evidence fails
    // once containerd is stopped behind Opsgraph's back.
    let env = Default::default();
    for (i, address) in [(0, "10.213.0.11"), (1, "10.213.0.12")] {
        let exec = ssh_executor(&dir, address);
        for check in ["containerd_service_active", "containerd_answers", "containerd_systemd_cgroup"] {
            let (passed, observed) = check_once("kubernetes", check, &exec, &env);
            assert!(passed, "{check} on {address}: {observed}");
        }
        let hosts =
            opsgraph_fleet::exec(&state.hosts[i], &["cat", "/etc/containerd/certs.d/10.213.0.13:5000/hosts.toml"])
                .output()
                .unwrap();
        assert!(String::from_utf8_lossy(&hosts.stdout).contains("server = \"http://10.213.0.13:5000\""), "{hosts:?}");
    }
    let stop = opsgraph_fleet::exec(&state.hosts[1], &["systemctl", "stop", "containerd"]).output().unwrap();
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    let (passed, observed) = check_once("kubernetes", "containerd_answers", &ssh_executor(&dir, "10.213.0.12"), &env);
    assert!(!passed, "containerd_answers passed with containerd stopped: {observed}");

    drop(fleet);
    assert_eq!(machine(), before, "down leaves the machine as it found it");
    eprintln!("TIME whole test: {:.1} s", t0.elapsed().as_secs_f64());
}

/// Which fleet hosts hold the HA endpoint's VIP (keepalived adds it to the host's interface).
fn vip_holders(state: &opsgraph_fleet::State) -> Vec<String> {
    state
        .hosts
        .iter()
        .filter(|h| {
            let out =
                opsgraph_fleet::exec(h, &["ip", "-o", "-4", "addr", "show", "to", "10.213.0.100/32"]).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            !out.stdout.is_empty()
        })
        .map(|h| h.name.clone())
        .collect()
}

/// An HA control plane (`create_ha_cluster`, examples/kubernetes/fleet-ha-intent.yaml) on three
/// fleet hosts: the endpoint's load balancer — haproxy and keepalived from Debian on each
/// control-plane node — runs for real and holds the VIP 10.213.0.100:8443 on exactly one node,
/// reachable from this machine; when that node's haproxy stops, the VIP moves to the next node
/// within seconds, and the stopped node's check fails. install-kubeadm then fails at pkgs.k8s.io
/// as in the single control-plane test. Needs root and OPSGRAPH_FLEET=1.
#[test]
fn fleet_kubernetes_ha_endpoint_runs_for_real() {
    let Some(_one) = claim("fleet_kubernetes_ha_endpoint_runs_for_real") else { return };
    let tmp = temp_dir(&[("data/config.yaml", "users:\n  alice: [sre]\n")]);
    let dir = tmp.join("fleet");
    let before = machine();
    let t0 = Instant::now();
    let fleet = Fleet::up(&dir, 3);
    let (state, _) = opsgraph_fleet::status(&dir).unwrap().unwrap();
    site_registry(&state.hosts[2]);
    let inventory = registry_inventory(tmp.path(), &dir);
    let data = tmp.join("data").display().to_string();

    let run = apply_approved(&path("examples/kubernetes/fleet-ha-intent.yaml"), &data, &inventory);
    assert_ne!(run.code, 0, "{}", run.render());
    let jobs = jobs_of(&data);
    // The operation fails at the first install-kubeadm whose attempts are spent; the other
    // nodes' may still wait for their retry then (three nodes do not fail in lockstep).
    let (kubeadm, rest): (Vec<&str>, Vec<&str>) = jobs.table.lines().partition(|l| l.starts_with("install-kubeadm@"));
    expect![[r#"
        validate-inputs succeeded 1
        validate-nodes@fleet-1 succeeded 1
        validate-nodes@fleet-2 succeeded 1
        validate-nodes@fleet-3 succeeded 1
        validate-credentials succeeded 1
        prepare-network@fleet-1 succeeded 1
        prepare-network@fleet-2 succeeded 1
        prepare-network@fleet-3 succeeded 1
        install-api-load-balancer@fleet-1 succeeded 1
        install-api-load-balancer@fleet-2 succeeded 1
        install-api-load-balancer@fleet-3 succeeded 1
        install-runtime@fleet-1 succeeded 1
        install-runtime@fleet-2 succeeded 1
        install-runtime@fleet-3 succeeded 1
        init-ha-control-plane@fleet-1 pending 0
        join-control-plane@fleet-2 pending 0
        join-control-plane@fleet-3 pending 0
        install-cni@fleet-1 pending 0
        verify-ha@fleet-1 pending 0
    "#]]
    .assert_eq(&(rest.join("\n") + "\n"));
    assert_eq!(kubeadm.len(), 3, "{}", jobs.table);
    assert!(kubeadm.iter().all(|l| l.contains(" failed ") || l.contains(" pending ")), "{}", jobs.table);
    let failed: Vec<&str> =
        kubeadm.iter().filter(|l| l.contains(" failed ")).map(|l| l.split(' ').next().unwrap()).collect();
    assert!(!failed.is_empty(), "{}", jobs.table);
    for id in failed {
        let failure = jobs.failure(id);
        assert!(failure.contains("ERROR: the package repository https://pkgs.k8s.io/"), "{id}: {failure}");
    }
    eprintln!("TIME HA until install-kubeadm: {:.1} s", t0.elapsed().as_secs_f64());

    // The VIP is on fleet-1 (the highest priority) and nowhere else; this machine reaches
    // haproxy through it.
    assert_eq!(vip_holders(&state), ["fleet-1"]);
    let connect = |what: &str| {
        std::net::TcpStream::connect_timeout(&"10.213.0.100:8443".parse().unwrap(), Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("{what}: 10.213.0.100:8443: {e}"))
    };
    drop(connect("with fleet-1 holding the VIP"));
    let mut env = std::collections::BTreeMap::new();
    env.insert("OPSGRAPH_PARAM_CONTROL_PLANE_ENDPOINT".to_string(), "10.213.0.100:8443".to_string());
    for address in ["10.213.0.11", "10.213.0.12", "10.213.0.13"] {
        let exec = ssh_executor(&dir, address);
        for check in ["haproxy_active", "keepalived_active", "api_endpoint_answers"] {
            let (passed, observed) = check_once("kubernetes", check, &exec, &env);
            assert!(passed, "{check} on {address}: {observed}");
        }
    }

    // fleet-1's haproxy stops: keepalived there lowers its priority below fleet-2's, and the VIP
    // moves to fleet-2, which still serves.
    let stop = opsgraph_fleet::exec(&state.hosts[0], &["systemctl", "stop", "haproxy"]).output().unwrap();
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    let t = Instant::now();
    while vip_holders(&state) != ["fleet-2"] {
        assert!(t.elapsed() < Duration::from_secs(20), "the VIP did not move to fleet-2: {:?}", vip_holders(&state));
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!("TIME VIP moved to fleet-2 after {:.1} s", t.elapsed().as_secs_f64());
    drop(connect("with fleet-2 holding the VIP"));
    let (passed, observed) = check_once("kubernetes", "haproxy_active", &ssh_executor(&dir, "10.213.0.11"), &env);
    assert!(!passed, "haproxy_active passed on fleet-1 with haproxy stopped: {observed}");

    drop(fleet);
    assert_eq!(machine(), before, "down leaves the machine as it found it");
    eprintln!("TIME whole test: {:.1} s", t0.elapsed().as_secs_f64());
}
