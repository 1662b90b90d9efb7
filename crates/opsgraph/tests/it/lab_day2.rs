//! The lab cluster's day-2 actions on lab nodes ([I] 4–6): upgrade (and its rollback to the
//! recorded version), scale (refused at an even replica count without force), remove_node
//! (refused for the last control-plane node) and uninstall, each through the real CLI.

use serde_json::Value;

use crate::lab::LabDir;
use crate::support::{opsgraph, path, temp_dir, Run};

const CLUSTER: &str = "lab.cluster/lab-k8s";

fn intent(action: &str, rest: &str) -> String {
    format!(
        "intent:\n  target_resource_type: lab.cluster\n  action: {action}\n  name: lab-k8s\n  environment: lab\n{rest}"
    )
}

struct Lab {
    dir: LabDir,
}

impl Lab {
    /// Asserts that the cluster is recorded running, having observed `key` = `value`.
    fn assert_running(&self, key: &str, value: &str) {
        let r = self.resource().unwrap();
        assert_eq!(r["resource"]["status"], "running", "{r:#}");
        assert_eq!(r["resource"]["observed"][key], value, "{r:#}");
    }

    fn new() -> Lab {
        let files = [
            ("data/config.yaml", "users:\n  alice: [sre]\n  bob: [sre]\n".to_string()),
            ("upgrade.yaml", intent("upgrade", "  parameters: {kubernetes_version: \"1.31\"}\n")),
            ("upgrade-same.yaml", intent("upgrade", "")),
            ("scale-even.yaml", intent("scale", "  parameters: {apiserver_replicas: 2}\n")),
            ("scale-3.yaml", intent("scale", "  parameters: {apiserver_replicas: 3}\n")),
            ("remove-cp.yaml", intent("remove_node", "  targets: {remove_nodes: [compute_node/lab-1]}\n")),
            ("remove-3.yaml", intent("remove_node", "  targets: {remove_nodes: [compute_node/lab-3]}\n")),
            ("uninstall.yaml", intent("uninstall", "")),
        ];
        let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
        Lab { dir: LabDir(temp_dir(&files)) }
    }

    fn run(&self, args: &[&str]) -> Run {
        let data = self.dir.join("data").display().to_string();
        opsgraph(&[&["--data-dir", data.as_str()], args].concat())
    }

    fn intent_args(&self, command: &str, file: &str) -> Run {
        let intent = match file {
            "create" => path("examples/lab/intents/lab-create-cluster.yaml"),
            f => self.dir.join(f).display().to_string(),
        };
        let inventory = path("examples/lab/inventory");
        let mut args = vec![command, "-f", &intent, "--inventory", &inventory];
        if command == "apply" {
            args.push("--yes");
        }
        self.run(&args)
    }

    /// Applies the intent and answers its gates in order (approval, destructive confirmations)
    /// as bob, who did not create it; the run must complete.
    fn apply(&self, file: &str) -> Run {
        let run = self.intent_args("apply", file);
        self.through_gates(run)
    }

    fn through_gates(&self, mut run: Run) -> Run {
        let op = run.operation_id();
        for _ in 0..4 {
            if run.out.contains(&format!("Operation {op}: completed")) {
                return run;
            }
            let waiting = run.out.lines().rev().find_map(|l| {
                let at = l.find("waiting for approval at ").map(|i| i + "waiting for approval at ".len());
                let at = at.or_else(|| l.find("waiting for gate ").map(|i| i + "waiting for gate ".len()))?;
                Some(l[at..].split([' ', ',', ':', ')']).next().unwrap().to_string())
            });
            let gate = waiting.unwrap_or_else(|| panic!("neither completed nor at a gate: {}", run.render()));
            let option = if gate.starts_with("confirm-") { "proceed" } else { "approve" };
            run = self.run(&["gate", "answer", &gate, "--operation", &op, "--option", option, "--as", "bob"]);
            assert_eq!(run.code, 0, "{}", run.render());
        }
        panic!("still not completed: {}", run.render());
    }

    fn resource(&self) -> Option<Value> {
        let described = self.run(&["describe", "resource", CLUSTER, "-o", "json"]);
        (described.code == 0).then(|| serde_json::from_str(&described.out).unwrap())
    }

    fn operations(&self) -> usize {
        let listed = self.run(&["get", "operations", "-o", "json"]);
        serde_json::from_str::<Value>(&listed.out).unwrap().as_array().map_or(0, Vec::len)
    }

    fn node(&self, name: &str) -> std::path::PathBuf {
        self.dir.join("data/lab").join(name)
    }

    /// The version each node reports (its version.env).
    fn versions(&self) -> Vec<String> {
        ["lab-1", "lab-2", "lab-3"]
            .iter()
            .map(|n| {
                let env = std::fs::read_to_string(self.node(n).join("kubernetes/version.env")).unwrap_or_default();
                format!("{n}={}", env.trim().trim_start_matches("KUBERNETES_VERSION="))
            })
            .collect()
    }

    /// Asserts the intent is refused at plan time with `expected` and that nothing changed.
    fn refused(&self, file: &str, expected: &str) {
        let (ops, before) = (self.operations(), self.resource());
        let run = self.intent_args("apply", file);
        assert_eq!(run.code, 1, "{}", run.render());
        assert!(run.err.starts_with(expected), "{}", run.render());
        assert_eq!(self.operations(), ops, "a refused apply created an operation");
        assert_eq!(self.resource(), before, "a refused apply changed the resource");
    }
}

#[test]
fn lab_cluster_upgrade_and_its_rollback_to_the_recorded_version() {
    let lab = Lab::new();
    let create_op = lab.apply("create").operation_id();
    assert_eq!(lab.versions(), ["lab-1=1.30", "lab-2=1.30", "lab-3=1.30"]);

    // The upgrade names only the version: the nodes come from the record.
    let planned = lab.intent_args("plan", "upgrade.yaml");
    assert!(planned.out.contains("  ~ kubernetes_version  1.30 → 1.31\n"), "{}", planned.render());
    let upgraded = lab.apply("upgrade.yaml");
    let upgrade_op = upgraded.operation_id();
    assert_eq!(lab.versions(), ["lab-1=1.31", "lab-2=1.31", "lab-3=1.31"]);
    lab.assert_running("version", "1.31");
    // Each node's evidence reports its version.
    let evidence = lab.run(&["describe", "operation", &upgrade_op, "-o", "json"]);
    assert!(evidence.out.contains("version=1.31"), "{}", evidence.render());

    // The rollback returns every node to the version the record had before the upgrade.
    let inventory = path("examples/lab/inventory");
    let rb = lab.run(&["rollback", &upgrade_op, "--yes", "--inventory", &inventory]);
    assert_eq!(rb.code, 0, "{}", rb.render());
    assert!(rb.out.contains("  ~ kubernetes_version  1.31 → 1.30\n"), "{}", rb.out);
    assert!(rb.out.contains("revert-node-version @ lab-1, lab-2, lab-3"), "{}", rb.out);
    lab.through_gates(rb);
    assert_eq!(lab.versions(), ["lab-1=1.30", "lab-2=1.30", "lab-3=1.30"]);
    lab.assert_running("version", "1.30");
    // The record is the one before the upgrade: an upgrade naming no version keeps 1.30.
    let again = lab.intent_args("plan", "upgrade-same.yaml");
    assert!(again.out.contains("no parameter or target differs from the record"), "{}", again.render());
    assert!(again.out.contains("kubernetes_version=1.30"), "{}", again.render());

    // Rolling back what created the cluster still ends its life, day-2 actions or not: its nodes
    // reset, the resource rolled back, nothing left to inherit.
    let rb = lab.run(&["rollback", &create_op, "--yes", "--inventory", &inventory]);
    lab.through_gates(rb);
    assert!(!lab.node("lab-1").exists(), "the control plane was not reset");
    let r = lab.resource().unwrap();
    assert!(r["resource"]["observed_state"].as_str().unwrap().starts_with("rolled back by operation"), "{r:#}");
    assert!(r["resource"]["status"].is_null(), "{r:#}");
    let after = lab.intent_args("plan", "upgrade-same.yaml");
    assert!(!after.out.contains("Changes to"), "{}", after.render());
}

#[test]
fn lab_cluster_scale_remove_node_and_uninstall_with_their_refusals() {
    let lab = Lab::new();
    lab.apply("create");

    lab.refused(
        "scale-even.yaml",
        "error[P012]: refused by template `lab-cluster.scale`: an even replica count tolerates no more failures than one fewer; give force true to scale anyway (params.apiserver_replicas is 2, even; params.force is false, not true)\n",
    );
    let scaled = lab.apply("scale-3.yaml");
    let evidence = lab.run(&["describe", "operation", &scaled.operation_id(), "-o", "json"]);
    assert!(evidence.out.contains("replicas=3"), "{}", evidence.render());

    lab.refused(
        "remove-cp.yaml",
        "error[P012]: refused by template `lab-cluster.remove_node`: it would remove the cluster's last control-plane node; uninstall the cluster instead (targets.remove_nodes (compute_node/lab-1) includes all of recorded.targets.control_plane (compute_node/lab-1))\n",
    );
    assert!(lab.node("lab-1").exists());
    lab.apply("remove-3.yaml");
    assert!(!lab.node("lab-3").exists(), "lab-3 was not reset");
    assert!(lab.node("lab-2").exists() && lab.node("lab-1").exists());
    lab.assert_running("nodes", "2");
    // The removed node left the record: an upgrade now runs on the two nodes left.
    let planned = lab.intent_args("plan", "upgrade.yaml");
    assert!(planned.out.contains("upgrade-node @ lab-1, lab-2\n"), "{}", planned.render());
    assert!(planned.out.contains("targets.workers=compute_node/lab-2\n"), "{}", planned.render());

    // Uninstall names nothing but the cluster; every recorded node is reset, the record goes.
    lab.apply("uninstall.yaml");
    for n in ["lab-1", "lab-2", "lab-3"] {
        assert!(!lab.node(n).exists(), "{n} was not reset");
    }
    assert!(!lab.dir.join("data/lab/lab-k8s").exists(), "the cluster directory is left");
    assert!(lab.resource().is_none(), "uninstalled but still recorded");
}
