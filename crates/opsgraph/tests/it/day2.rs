//! Day 2 on the lab cluster ([I]): a resource exists from its first operation, its state comes
//! from evidence (observed values captured by its pack's checks), `opsgraph verify` and the
//! scheduler of `opsgraph serve` notice when its apiserver dies and when it comes back, and every
//! result joins its history. The same on real hosts: `fleet_day2.rs`.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::lab::LabDir;
use crate::serve::{describe_resource, status_within, Process};
use crate::support::{opsgraph, path, temp_dir, Run};

const CLUSTER: &str = "lab.cluster/lab-k8s";

struct Lab {
    dir: LabDir,
}

impl Lab {
    fn new() -> Lab {
        Lab { dir: LabDir(temp_dir(&[("data/config.yaml", "users:\n  alice: [sre]\n  bob: [sre]\n")])) }
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn run(&self, args: &[&str]) -> Run {
        let data = self.data();
        opsgraph(&[&["--data-dir", data.as_str()], args].concat())
    }

    /// The lab cluster of `examples/lab`, created and approved.
    fn create_cluster(&self) {
        let intent = path("examples/lab/intents/lab-create-cluster.yaml");
        let inventory = path("examples/lab/inventory");
        let applied = self.run(&["apply", "-f", &intent, "--inventory", &inventory, "--yes"]);
        assert!(applied.out.contains("waiting for approval"), "{}", applied.render());
        // Before its first job runs, the resource exists: provisioning, linked to the operation.
        let r = self.resource();
        assert_eq!(r["resource"]["status"], "provisioning", "{r:#}");
        let op = r["last_operation"].as_str().unwrap().to_string();
        let approved =
            self.run(&["gate", "answer", "approve-plan", "--operation", &op, "--option", "approve", "--as", "bob"]);
        assert!(approved.out.contains("operation running -> completed"), "{}", approved.render());
    }

    fn resource(&self) -> Value {
        describe_resource(&self.data(), CLUSTER)
    }

    fn node(&self) -> std::path::PathBuf {
        self.dir.join("data/lab/lab-1")
    }

    /// Kills the control plane's apiserver loop behind Opsgraph's back, and returns once it is
    /// dead (gone, or a zombie nobody reaped yet): a signal is delivered, not obeyed, by the
    /// time `kill` returns, and a verification run at once on a loaded machine found it alive.
    fn kill_apiserver(&self) {
        let pid = std::fs::read_to_string(self.node().join("run/apiserver.pid")).unwrap();
        let killed = std::process::Command::new("kill").args(["-KILL", pid.trim()]).status().unwrap();
        assert!(killed.success());
        let stat = format!("/proc/{}/stat", pid.trim());
        let until = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&stat).is_ok_and(|s| !s.contains(") Z ")) {
            assert!(Instant::now() < until, "the apiserver (pid {}) still runs 10 s after SIGKILL", pid.trim());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts it again, as a person repairing it by hand would, and returns once the new daemon
    /// named itself in the pid file and beat: the old pid file and heartbeat are still there
    /// (a killed daemon leaves them), so their mere presence says nothing of the new one.
    fn start_apiserver(&self) {
        let node = self.node().display().to_string();
        let run = self.node().join("run");
        let old = std::fs::read_to_string(run.join("apiserver.pid")).unwrap_or_default();
        let beat = run.join("apiserver.heartbeat");
        let _ = std::fs::remove_file(&beat);
        let log = std::fs::File::create(self.node().join("log/apiserver.restarted.log")).unwrap();
        // `setsid -f`: the daemon forks away in a session of its own; setsid itself returns.
        let started = std::process::Command::new("setsid")
            .args(["-f", "sh", &format!("{node}/bin/lab-daemon"), "apiserver", &node, "containerd"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .status()
            .unwrap();
        assert!(started.success());
        let until = Instant::now() + Duration::from_secs(10);
        let up = || {
            std::fs::read_to_string(run.join("apiserver.pid")).is_ok_and(|p| !p.trim().is_empty() && p != old)
                && std::fs::read_to_string(&beat).is_ok_and(|b| !b.trim().is_empty())
        };
        while !up() {
            assert!(Instant::now() < until, "the apiserver did not start again");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn history_kinds(&self) -> Vec<(String, String)> {
        let r = self.resource();
        r["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["kind"].as_str().unwrap().to_string(), e["status"].as_str().unwrap().to_string()))
            .collect()
    }
}

#[test]
fn the_lab_cluster_is_verified_by_hand_degraded_when_its_apiserver_dies_and_running_when_back() {
    let lab = Lab::new();
    lab.create_cluster();
    // Completed, then verified at once: running, with what the checks observed.
    let r = lab.resource();
    assert_eq!(r["resource"]["status"], "running", "{r:#}");
    assert_eq!(r["resource"]["observed"]["version"], "1.30", "{r:#}");
    assert_eq!(r["resource"]["observed"]["nodes"], "3", "{r:#}");
    assert_eq!(r["resource"]["verification"]["checks"], 5, "{r:#}");
    let kinds = lab.history_kinds();
    assert_eq!(
        kinds,
        [("operation.started", "provisioning"), ("operation.completed", "running"), ("verified", "running")]
            .map(|(k, s)| (k.to_string(), s.to_string())),
    );

    lab.kill_apiserver();
    let verified = lab.run(&["verify", CLUSTER, "--as", "alice"]);
    assert_eq!(verified.code, 1, "{}", verified.render());
    assert!(verified.out.starts_with("lab.cluster/lab-k8s: degraded (was running); "), "{}", verified.out);
    assert!(
        verified.out.contains("FAILED lab_apiserver_alive on verify@lab-1: expected exit code 0"),
        "{}",
        verified.out
    );
    let r = lab.resource();
    assert_eq!(r["resource"]["status"], "degraded");
    assert_eq!(r["resource"]["health"], "degraded");
    let failed: Vec<&str> = r["resource"]["verification"]["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap())
        .collect();
    assert!(failed.contains(&"lab_apiserver_alive"), "{r:#}");
    // The person's verification is audited.
    let audit = lab.run(&["audit", "--resource", CLUSTER]);
    assert!(audit.out.contains("resource.verify"), "{}", audit.render());

    lab.start_apiserver();
    let verified = lab.run(&["verify", CLUSTER, "-o", "json"]);
    assert_eq!(verified.code, 0, "{}", verified.render());
    let report: Value = serde_json::from_str(&verified.out).unwrap();
    assert_eq!((report["before"].as_str(), report["status"].as_str()), (Some("degraded"), Some("running")));
    let kinds = lab.history_kinds();
    assert_eq!(
        kinds[kinds.len() - 2..],
        [("verified".into(), "degraded".into()), ("verified".into(), "running".into())]
    );

    // Refused, and nothing changed: an unknown resource, a resource no pack verifies.
    let unknown = lab.run(&["verify", "lab.cluster/nope"]);
    assert_ne!(unknown.code, 0, "{}", unknown.render());
    assert!(unknown.err.contains("no resource `lab.cluster/nope`"), "{}", unknown.render());
    let host = lab.run(&["verify", "compute_node/lab-1"]);
    assert!(host.err.contains("no loaded pack declares how to verify a `compute_node`"), "{}", host.render());
}

/// `opsgraph serve` verifies on schedule: the lab cluster's interval is 10 s.
#[test]
fn serve_notices_a_dead_apiserver_within_one_interval_and_its_return() {
    let lab = Lab::new();
    lab.create_cluster();
    let data = lab.data();
    let _server = Process::start(
        std::process::Command::new(env!("CARGO_BIN_EXE_opsgraph"))
            .args(["--data-dir", &data, "serve", "--listen", "127.0.0.1:0"])
            .env("OPSGRAPH_VERIFY_TICK_MS", "200"),
        &lab.dir.join("serve.log"),
    );
    let status_within =
        |want: &str, limit: Duration| status_within(&data, CLUSTER, want, limit, Duration::from_millis(250));
    lab.kill_apiserver();
    // One interval (10 s) plus its jitter (at most 1 s), the tick and the checks themselves.
    let (_, r) = status_within("degraded", Duration::from_secs(15));
    let last = r["history"].as_array().unwrap().last().unwrap().clone();
    assert!(last["actor"].as_str().unwrap().starts_with("serve:"), "{last:#}");
    assert!(last["summary"].as_str().unwrap().contains("lab_apiserver_alive"), "{last:#}");
    lab.start_apiserver();
    status_within("running", Duration::from_secs(15));
}

/// Two replicas on one store never verify one resource at once: each takes the resource's
/// verification lease first, and the one that gets it second finds the resource verified.
#[test]
fn two_replicas_racing_verify_a_resource_once() {
    use opsgraph::load::Source;
    use opsgraph_store::{Store, Write};
    let lab = Lab::new();
    lab.create_cluster();
    let data = lab.dir.join("data");
    let packs = opsgraph::load::packs(&[Source::parse(&path("packs/lab-cluster"))]).0;
    let url = data.join("opsgraph.db").display().to_string();
    let open = || opsgraph::storage::open(&url, opsgraph::storage::Durability::Full).unwrap();
    let verified = || lab.history_kinds().iter().filter(|(k, _)| k == "verified").count();
    // Due again: its last verification is long past.
    let due = |store: &mut dyn Store| {
        let mut r = store.resource(CLUSTER).unwrap().unwrap();
        r.doc["verification"]["at"] = "2000-01-01T00:00:00.000Z".into();
        store.commit(&[Write::Resource(r)]).unwrap();
    };
    let before = verified();
    // A holds the lease: B does nothing.
    let mut a = open();
    due(&mut *a);
    let held = a.acquire_lease(&opsgraph_runtime::lease_key(CLUSTER), "replica-a", 60_000).unwrap();
    let mut b = opsgraph_runtime::Runtime::new(open(), packs.clone(), vec![], data.clone());
    assert_eq!(b.verify_leased(CLUSTER, "replica-b", 60_000).unwrap(), None);
    assert_eq!(verified(), before);
    a.release_lease(&held).unwrap();
    // Both at once, several rounds: one verification a round.
    for round in 1..=3 {
        due(&mut *open());
        let results: Vec<bool> = std::thread::scope(|s| {
            let racers: Vec<_> = ["replica-a", "replica-b"]
                .map(|holder| {
                    let (packs, data) = (packs.clone(), data.clone());
                    s.spawn(move || {
                        let mut rt = opsgraph_runtime::Runtime::new(open(), packs, vec![], data);
                        rt.verify_leased(CLUSTER, holder, 60_000).unwrap().is_some()
                    })
                })
                .into_iter()
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert_eq!(results.iter().filter(|v| **v).count(), 1, "round {round}: {results:?}");
        assert_eq!(verified(), before + round);
    }
}

/// Drift -> repair ([I] 3): with `repair: propose` for its environment, a verification that finds
/// the cluster degraded diagnoses it and creates the pack's `repair` operation behind an approval
/// gate; approved by a person, it restarts the apiserver and the cluster is running again. With
/// `repair: off` (the default) the drift is only recorded.
#[test]
fn drift_is_diagnosed_and_a_repair_is_proposed_then_approved() {
    let lab = Lab::new();
    lab.create_cluster();
    let inventory = path("examples/lab/inventory");
    let policy = lab.dir.join("policy.yaml");
    let write_policy = |mode: &str| {
        std::fs::write(&policy, format!("operations_policy:\n  lab: {{repair: {mode}}}\n")).unwrap();
    };
    let verify = |as_user: &str| {
        let policy = policy.display().to_string();
        lab.run(&["verify", CLUSTER, "--inventory", &inventory, "--inventory", &policy, "--as", as_user])
    };
    // Off: recorded, nothing planned.
    write_policy("off");
    lab.kill_apiserver();
    let off = verify("alice");
    assert_eq!(off.code, 1, "{}", off.render());
    assert!(
        off.out.contains("repair: none (the operations policy says `repair: off` for its environment)"),
        "{}",
        off.out
    );
    lab.start_apiserver();
    assert_eq!(verify("alice").code, 0);

    // Propose: a repair operation waits for a person.
    write_policy("propose");
    lab.kill_apiserver();
    let proposed = verify("alice");
    assert_eq!(proposed.code, 1, "{}", proposed.render());
    let line = proposed
        .out
        .lines()
        .find(|l| l.starts_with("repair: operation "))
        .unwrap_or_else(|| panic!("{}", proposed.out));
    assert!(line.ends_with("created (waiting_for_approval)"), "{line}");
    let op = line["repair: operation ".len()..].split(' ').next().unwrap().to_string();
    let r = lab.resource();
    assert_eq!(r["resource"]["status"], "degraded", "{r:#}");
    assert_eq!(r["last_operation"], op.as_str(), "{r:#}");
    let last = r["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["kind"].as_str(), last["operation"].as_str()), (Some("repair"), Some(op.as_str())), "{last:#}");
    // Nothing ran: the apiserver is still dead, and the resource is not verified while its
    // repair waits (the operation owns it).
    let busy = verify("alice");
    assert!(busy.err.contains(&format!("is being changed by operation `{op}`")), "{}", busy.render());
    let approved =
        lab.run(&["gate", "answer", "approve-repair", "--operation", &op, "--option", "approve", "--as", "bob"]);
    assert_eq!(approved.code, 0, "{}", approved.render());
    assert!(approved.out.contains("completed"), "{}", approved.render());
    // Completed, then verified at once: running.
    let r = lab.resource();
    assert_eq!(r["resource"]["status"], "running", "{r:#}");
    let kinds = lab.history_kinds();
    assert_eq!(
        kinds[kinds.len() - 3..].iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        ["repair", "operation.completed", "verified"]
    );

    // Apply safe: the repair starts at once (its plan has no gate of its own) and runs.
    write_policy("apply_safe");
    lab.kill_apiserver();
    let applied = verify("alice");
    assert!(applied.out.contains("created (running)"), "{}", applied.render());
    assert!(applied.out.contains(": completed"), "{}", applied.render());
    assert_eq!(lab.resource()["resource"]["status"], "running");
}
