//! The bundled packs and the example world, through the real CLI: the scenarios of the seed.

use std::collections::BTreeSet;

use expect_test::expect;
use serde_json::{json, Value};

use crate::preview_text::section;
use crate::support::{opsgraph, path, temp_dir};

const WORLD: [&str; 6] = [
    "--inventory",
    "{root}/examples/inventory",
    "--policy",
    "{root}/examples/policy.yaml",
    "--policy",
    "{root}/examples/providers.yaml",
];

fn plan(intent: &str, output: &str) -> crate::support::Run {
    let intent = format!("{{root}}/examples/intents/{intent}");
    let mut args = vec!["plan", "-f", &intent, "--packs", "{root}/packs", "-o", output];
    args.extend(WORLD);
    opsgraph(&args)
}

fn plan_json(intent: &str) -> Value {
    let run = plan(intent, "json");
    serde_json::from_str(&run.out).unwrap_or_else(|e| panic!("{e}: {}", run.render()))
}

/// One requirement's resolution, as `outcome provider/resource` and its rejections.
fn resolution(intent: &str, capability: &str) -> String {
    let p = plan_json(intent);
    let r = p["resolution"].as_array().unwrap().iter().find(|r| r["requirement"] == capability).expect("resolved");
    let mut s = format!(
        "{} {}\n",
        r["outcome"].as_str().unwrap(),
        r.get("resource").or(r.get("gate")).and_then(Value::as_str).unwrap_or("-")
    );
    for rej in r["rejected"].as_array().unwrap() {
        s.push_str(&format!(
            "  rejected {}: {}\n",
            rej["candidate"].as_str().unwrap(),
            rej["reason"].as_str().unwrap()
        ));
    }
    s
}

#[test]
fn bundled_packs_and_examples_are_valid() {
    let run = opsgraph(&["pack", "validate", &path("packs")]);
    assert_eq!(run.code, 0, "{}", run.render());
    // No errors and no warnings: every bundled evidence check can fail (docs/pack-authoring.md).
    let others: Vec<&str> = run.err.lines().filter(|l| l.contains(": warning[") || l.contains(": error[")).collect();
    assert!(others.is_empty(), "no errors and no warnings: {}", others.join("\n"));
    let packs: Vec<&str> = run
        .out
        .lines()
        .map(|l| l.strip_prefix("ok: pack ").and_then(|l| l.split('@').next()).expect("ok line"))
        .collect();
    for wanted in ["kubernetes", "postgresql", "minio", "tempo", "lab-cluster"] {
        assert!(packs.contains(&wanted), "{wanted} missing from {packs:?}");
    }
    let run = opsgraph(&["validate", &path("examples")]);
    assert_eq!(run.code, 0, "{}", run.render());
    assert!(run.err.is_empty(), "{}", run.err);
}

/// Tempo's object storage by environment: dev binds the shared MinIO, stage the default
/// provider's, prod stops at the gate that seeds a dedicated one.
#[test]
fn tempo_binds_its_object_storage_by_environment() {
    let report: String = ["tempo-dev.yaml", "tempo-stage.yaml", "tempo-prod.yaml"]
        .map(|intent| format!("{intent}: {}", resolution(intent, "object_storage.s3")))
        .concat();
    expect![[r#"
        tempo-dev.yaml: bind object_storage/minio-shared-dev
          rejected object_storage/minio-shared-stage: it is in environment stage, the intent is for dev
          rejected object_storage/minio-dedicated-stage: it is in environment stage, the intent is for dev
          rejected object_storage/minio-legacy-prod: it is in environment prod, the intent is for dev
          rejected provider aws_s3: provider aws_s3 is not allowed in dev
          rejected provider dedicated_minio: provider dedicated_minio is not allowed in dev
        tempo-stage.yaml: bind object_storage/minio-shared-stage
          rejected object_storage/minio-shared-dev: it is in environment dev, the intent is for stage
          rejected object_storage/minio-legacy-prod: it is in environment prod, the intent is for stage
          rejected provider aws_s3: provider aws_s3 is not allowed in stage
        tempo-prod.yaml: gate approve-dedicated-minio
          rejected object_storage/minio-shared-dev: it is in environment dev, the intent is for prod
          rejected object_storage/minio-shared-stage: it is in environment stage, the intent is for prod
          rejected object_storage/minio-dedicated-stage: it is in environment stage, the intent is for prod
          rejected object_storage/minio-legacy-prod: provider shared_minio is not allowed in prod
    "#]]
    .assert_eq(&report);
}

#[test]
fn tempo_in_prod_stops_at_the_seed_gate() {
    let p = plan_json("tempo-prod.yaml");
    let gate = &p["gates"][0];
    expect![[r#"
        {
          "id": "approve-dedicated-minio",
          "type": "approval",
          "reason": "Tempo requires object_storage.s3 and no existing prod provider matches.",
          "options": [
            "create dedicated MinIO",
            "bind external S3",
            "cancel operation"
          ],
          "required_roles": [
            "sre",
            "platform_admin"
          ],
          "before": [
            "write-storage-credentials"
          ],
          "source": "resolution"
        }"#]]
    .assert_eq(&serde_json::to_string_pretty(gate).unwrap());
    // The option to create a dedicated MinIO comes with the plan of that sub-operation.
    let sub = &p["sub_operations"][0];
    assert_eq!(sub["provider"], "dedicated_minio");
    assert_eq!(sub["chosen"], false);
    assert_eq!(sub["plan"]["pack"], "minio@1.0.0");
    assert_eq!(p["status"], "waiting_for_gates");
}

#[test]
fn tempo_preview_reads_in_one_screen() {
    let run = plan("tempo-prod.yaml", "text");
    assert_eq!(run.code, 0);
    // The revision's hash covers every loaded pack's digest (preview = run): any bundled pack's
    // change moves it, so it is masked here; tests of the hash itself are in preview.rs.
    let text = match run.out.find("sha256:") {
        Some(at) => format!("{}sha256:HASH{}", &run.out[..at], &run.out[at + 19..]),
        None => run.out.clone(),
    };
    let lines = text.lines().count();
    assert!(lines <= 50, "{lines} lines:\n{text}");
    expect![[r#"
        Plan tempo.install (tempo@1.0.0) for: install tempo.instance tempo-prod in prod
        Revision 1 sha256:HASH   Risk: medium
        Cost estimate: 40 (job install-tempo 40)

        Capabilities
          kubernetes.cluster  bind           cluster/prod-k8s (the only candidate that satisfies every rule)
                                rejected cluster/stage-k8s: it is in environment stage, the intent is for prod
                                rejected cluster/dev-k8s: it is in environment dev, the intent is for prod
          object_storage.s3   gate           gate approve-dedicated-minio
                                rejected object_storage/minio-shared-dev: it is in environment dev, the intent is for prod
                                rejected object_storage/minio-shared-stage: it is in environment stage, the intent is for prod
                                rejected object_storage/minio-dedicated-stage: it is in environment stage, the intent is for prod
                                rejected object_storage/minio-legacy-prod: provider shared_minio is not allowed in prod
          secret.store        bind           cluster/prod-k8s (the only candidate that satisfies every rule)
                                rejected cluster/stage-k8s: it is in environment stage, the intent is for prod
                                rejected cluster/dev-k8s: it is in environment dev, the intent is for prod

        Gates
          approve-dedicated-minio (approval), answered by sre or platform_admin
            Tempo requires object_storage.s3 and no existing prod provider matches.
            options: create dedicated MinIO | bind external S3 | cancel operation
            bind external S3: checked when answered: encryption: true (the policy in prod); constraint encryption: required; constraint region: eu-west-1
            blocks: write-storage-credentials

        Stages
          1. Prepare            check-cluster-access; write-storage-credentials
          2. Trace storage      create-bucket
          3. Deploy Tempo       render-helm-values; install-tempo
          4. Verify             verify-tempo

        Sub-operations
          dedicated_minio for object_storage.s3 (if chosen at its gate): minio@1.0.0 install, 5 jobs in 4 stages, 0 gates
            kubernetes.cluster bind

        6 jobs, 1 gate. Nothing has run. Status: ready to apply; gates will wait for a person.
    "#]]
    .assert_eq(&text);
}

#[test]
fn an_unsatisfiable_requirement_lists_every_candidate() {
    // A qa environment: the policy has no rule for it, so nothing is allowed there.
    let dir = temp_dir(&[(
        "intent.yaml",
        "intent:\n  target_resource_type: tempo.instance\n  action: install\n  name: tempo-qa\n  environment: qa\n  constraints: {region: eu-west-1}\n",
    )]);
    let intent = dir.join("intent.yaml").display().to_string();
    let mut args = vec!["plan", "-f", &intent, "--packs", "{root}/packs"];
    args.extend(WORLD);
    let run = opsgraph(&args);
    assert_eq!(run.code, 1);
    expect![[r#"
        Capabilities
          kubernetes.cluster  unsatisfiable  none of 3 candidates for kubernetes.cluster is acceptable in qa
                                rejected cluster/prod-k8s: it is in environment prod, the intent is for qa
                                rejected cluster/stage-k8s: it is in environment stage, the intent is for qa
                                rejected cluster/dev-k8s: it is in environment dev, the intent is for qa
          object_storage.s3   unsatisfiable  none of 6 candidates for object_storage.s3 is acceptable in qa
                                rejected object_storage/minio-shared-dev: it is in environment dev, the intent is for qa
                                rejected object_storage/minio-shared-stage: it is in environment stage, the intent is for qa
                                rejected object_storage/minio-dedicated-stage: it is in environment stage, the intent is for qa
                                rejected object_storage/minio-legacy-prod: it is in environment prod, the intent is for qa
                                rejected provider aws_s3: the capability policy for object_storage.s3 has no rule for environment qa
                                rejected provider dedicated_minio: the capability policy for object_storage.s3 has no rule for environment qa
          secret.store        unsatisfiable  none of 3 candidates for secret.store is acceptable in qa
                                rejected cluster/prod-k8s: it is in environment prod, the intent is for qa
                                rejected cluster/stage-k8s: it is in environment stage, the intent is for qa
                                rejected cluster/dev-k8s: it is in environment dev, the intent is for qa
    "#]]
    .assert_eq(&section(&run.out, "Capabilities"));
}

/// Protocol §7, edge for edge (with the seed's install-runtime split in two, below).
#[test]
fn kubernetes_create_cluster_has_exactly_the_seed_dag() {
    let p = plan_json("k8s-create-cluster.yaml");
    let job_of: std::collections::HashMap<&str, &str> =
        p["jobs"].as_array().unwrap().iter().map(|j| (j["id"].as_str().unwrap(), j["job"].as_str().unwrap())).collect();
    let mut edges = BTreeSet::new();
    for j in p["jobs"].as_array().unwrap() {
        for d in j["depends_on"].as_array().unwrap() {
            if let Some(from) = job_of.get(d.as_str().unwrap()) {
                edges.insert(format!("{from} -> {}", j["job"].as_str().unwrap()));
            }
        }
    }
    let seed: BTreeSet<String> = [
        "validate-inputs -> validate-nodes",
        "validate-inputs -> validate-credentials",
        "validate-nodes -> prepare-network",
        "validate-credentials -> prepare-network",
        "prepare-network -> install-runtime",
        // The seed's install-runtime is two jobs ([H] 2): containerd (and runc) from the
        // distribution first, then kubelet/kubeadm/kubectl from pkgs.k8s.io, so a node that
        // cannot reach pkgs.k8s.io still gets its runtime and fails at the job that needs it.
        "install-runtime -> install-kubeadm",
        "install-kubeadm -> init-control-plane",
        "init-control-plane -> install-cni",
        "init-control-plane -> join-workers",
        "install-cni -> join-workers",
        "join-workers -> verify",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(edges, seed);
    // Per instance: a worker's network preparation waits only for its own validation.
    let prep = p["jobs"].as_array().unwrap().iter().find(|j| j["id"] == "prepare-network@worker-2").unwrap();
    expect![[r#"["validate-nodes@worker-2","validate-credentials"]"#]].assert_eq(&prep["depends_on"].to_string());
}

#[test]
fn dot_output_draws_stages_and_gates() {
    let run = plan("k8s-add-node.yaml", "dot");
    assert_eq!(run.code, 0);
    assert!(run.out.starts_with("digraph \"kubernetes.add_node\" {"), "{}", run.out);
    assert!(run.out.contains("\"approve-plan\" [shape=diamond"), "{}", run.out);
    assert!(run.out.contains("\"create-join-token@master-1\" -> \"join-node@worker-6\";"), "{}", run.out);
}

#[test]
fn every_example_intent_plans() {
    let mut summary = String::new();
    let mut names: Vec<_> =
        std::fs::read_dir(path("examples/intents")).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    for name in names {
        let name = name.to_string_lossy().to_string();
        let p = plan_json(&name);
        summary.push_str(&format!(
            "{name}: {} {} jobs, {} gates, {}\n",
            p["template"].as_str().unwrap(),
            p["jobs"].as_array().unwrap().len(),
            p["gates"].as_array().unwrap().len(),
            p["status"].as_str().unwrap()
        ));
    }
    expect![[r#"
        k8s-add-node.yaml: kubernetes.add_node 9 jobs, 1 gates, waiting_for_gates
        k8s-create-cluster.yaml: kubernetes.create 24 jobs, 1 gates, waiting_for_gates
        k8s-remove-node.yaml: kubernetes.remove_node 3 jobs, 2 gates, waiting_for_gates
        k8s-uninstall.yaml: kubernetes.uninstall 3 jobs, 3 gates, waiting_for_gates
        k8s-upgrade.yaml: kubernetes.upgrade 5 jobs, 1 gates, waiting_for_gates
        minio-install.yaml: minio.install 5 jobs, 0 gates, ready
        minio-scale.yaml: minio.scale 3 jobs, 0 gates, ready
        minio-uninstall.yaml: minio.uninstall 1 jobs, 1 gates, waiting_for_gates
        postgresql-add-replica.yaml: postgresql.add_replica 5 jobs, 1 gates, waiting_for_gates
        postgresql-backup.yaml: postgresql.backup 1 jobs, 0 gates, ready
        postgresql-install.yaml: postgresql.install 6 jobs, 1 gates, waiting_for_gates
        postgresql-remove-replica.yaml: postgresql.remove_replica 1 jobs, 1 gates, waiting_for_gates
        postgresql-restore.yaml: postgresql.restore 1 jobs, 1 gates, waiting_for_gates
        postgresql-uninstall.yaml: postgresql.uninstall 1 jobs, 1 gates, waiting_for_gates
        postgresql-upgrade.yaml: postgresql.upgrade 1 jobs, 0 gates, ready
        tempo-dev.yaml: tempo.install 6 jobs, 0 gates, ready
        tempo-prod.yaml: tempo.install 6 jobs, 1 gates, waiting_for_gates
        tempo-stage.yaml: tempo.install 6 jobs, 0 gates, ready
        tempo-upgrade.yaml: tempo.upgrade 6 jobs, 0 gates, ready
    "#]]
    .assert_eq(&summary);
}

/// MinIO grows by server pools: a standalone MinIO, or a scale to one pool, is refused at plan
/// time with the template's reason; fewer pools or other pods per pool than the release has are
/// refused by install-minio at run time, before helm changes anything.
#[test]
fn minio_scale_adds_pools_and_refuses_what_minio_cannot_do() {
    let example = std::fs::read_to_string(path("examples/intents/minio-scale.yaml")).unwrap();
    let standalone = example.replace("deployment_mode: distributed", "deployment_mode: standalone");
    let one_pool = example.replace("pools: 2", "pools: 1");
    let dir = temp_dir(&[("standalone.yaml", &standalone), ("one-pool.yaml", &one_pool)]);
    let mut refused = String::new();
    for name in ["standalone", "one-pool"] {
        let file = dir.join(&format!("{name}.yaml"));
        let mut args = vec!["plan", "-f", file.to_str().unwrap(), "--packs", "{root}/packs"];
        args.extend(WORLD);
        let run = opsgraph(&args);
        assert_eq!(run.code, 1, "{}", run.render());
        refused.push_str(&format!("{name}: {}", run.err));
    }
    expect![[r#"
        standalone: error[P012]: refused by template `minio.scale`: a standalone MinIO is one server with no pools; it cannot grow in place (install a distributed one and move the data) (params.deployment_mode is standalone, equal to standalone)
        the plan cannot be built: 1 error
        one-pool: error[P012]: refused by template `minio.scale`: scale adds server pools to the one install made; give pools 2 or more (a pool is removed only by decommissioning it, which this action does not do) (params.pools is 1, below 2)
        the plan cannot be built: 1 error
    "#]].assert_eq(&refused);
    let p = plan_json("minio-scale.yaml");
    let jobs: Vec<&str> = p["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(jobs, ["check-minio-prerequisites", "prepare-minio-secrets", "scale-minio"]);
    assert_eq!((&p["parameters"]["pools"], &p["parameters"]["replicas"]), (&json!(2), &json!(4)), "{p:#}");
}

/// The README's main command runs a whole operation on lab nodes: preview, gate, run, evidence.
#[test]
fn demo_runs_the_lab_scenario_end_to_end() {
    let dir = temp_dir(&[]);
    std::fs::create_dir_all(dir.join("")).unwrap();
    let data = dir.display().to_string();
    let run = opsgraph(&["demo", "--data-dir", &data]);
    // The demo stops the lab nodes' background processes itself ([H] 7): none is left.
    let left = std::process::Command::new("pgrep").args(["-f", &format!("{data}/")]).output().unwrap();
    // Should that fail, they still belong to this test: stop them.
    let _ = std::process::Command::new("pkill").args(["-f", &format!("{data}/")]).status();
    assert_eq!(run.code, 0, "{}", run.render());
    assert_eq!(String::from_utf8_lossy(&left.stdout), "", "lab processes left running after the demo");
    assert!(run.out.contains("Stopped the lab nodes' "), "{}", run.out);
    for needle in [
        "Plan lab-cluster.create",
        "demo answers `approve` as user:demo-sre (sre)",
        "operation running -> completed: every job's outputs are verified by evidence",
        "Resource lab.cluster/lab-k8s: status running, health healthy",
    ] {
        assert!(run.out.contains(needle), "missing {needle:?} in:\n{}", run.out);
    }
    assert!(!run.out.contains("FAIL"), "{}", run.out);
}

/// The HA control plane (`create_ha_cluster`): every control-plane node gets the endpoint's load
/// balancer before the first one initialises the cluster through it; the other control-plane
/// nodes then join one at a time (`controls.rollout`), and the whole is verified after them.
#[test]
fn kubernetes_ha_control_plane_joins_one_at_a_time_behind_the_endpoint() {
    let node = |name: &str, ip: &str| {
        format!(
            "resource:\n  type: compute_node\n  name: {name}\n  environment: dev\n  provides: [linux.host, ssh.access, package.manager.apt, network.registry_access]\n  access:\n    ssh: {{host: {ip}, port: 22, user: root}}\n"
        )
    };
    let nodes =
        [node("fleet-1", "10.213.0.11"), node("fleet-2", "10.213.0.12"), node("fleet-3", "10.213.0.13")].join("---\n");
    let dir = temp_dir(&[("inventory/fleet.yaml", &nodes)]);
    let inventory = dir.join("inventory").display().to_string();
    let run = opsgraph(&[
        "plan",
        "-f",
        "{root}/examples/kubernetes/fleet-ha-intent.yaml",
        "--packs",
        "{root}/packs",
        "--inventory",
        &inventory,
        "-o",
        "json",
    ]);
    let p: Value = serde_json::from_str(&run.out).unwrap_or_else(|e| panic!("{e}: {}", run.render()));
    let mut text = String::new();
    for j in p["jobs"].as_array().unwrap() {
        let deps: Vec<&str> = j["depends_on"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
        text.push_str(&format!("{} <- [{}]\n", j["id"].as_str().unwrap(), deps.join(", ")));
    }
    expect![[r#"
        validate-inputs <- [approve-plan]
        validate-nodes@fleet-1 <- [validate-inputs]
        validate-nodes@fleet-2 <- [validate-inputs]
        validate-nodes@fleet-3 <- [validate-inputs]
        validate-credentials <- [validate-inputs]
        prepare-network@fleet-1 <- [validate-nodes@fleet-1, validate-credentials]
        prepare-network@fleet-2 <- [validate-nodes@fleet-2, validate-credentials]
        prepare-network@fleet-3 <- [validate-nodes@fleet-3, validate-credentials]
        install-api-load-balancer@fleet-1 <- [prepare-network@fleet-1]
        install-api-load-balancer@fleet-2 <- [prepare-network@fleet-2]
        install-api-load-balancer@fleet-3 <- [prepare-network@fleet-3]
        install-runtime@fleet-1 <- [prepare-network@fleet-1]
        install-runtime@fleet-2 <- [prepare-network@fleet-2]
        install-runtime@fleet-3 <- [prepare-network@fleet-3]
        install-kubeadm@fleet-1 <- [install-runtime@fleet-1]
        install-kubeadm@fleet-2 <- [install-runtime@fleet-2]
        install-kubeadm@fleet-3 <- [install-runtime@fleet-3]
        init-ha-control-plane@fleet-1 <- [install-kubeadm@fleet-1, install-kubeadm@fleet-2, install-kubeadm@fleet-3, install-api-load-balancer@fleet-1, install-api-load-balancer@fleet-2, install-api-load-balancer@fleet-3]
        join-control-plane@fleet-2 <- [init-ha-control-plane@fleet-1]
        join-control-plane@fleet-3 <- [init-ha-control-plane@fleet-1, join-control-plane@fleet-2]
        install-cni@fleet-1 <- [init-ha-control-plane@fleet-1]
        verify-ha@fleet-1 <- [install-cni@fleet-1, join-control-plane@fleet-2, join-control-plane@fleet-3]
    "#]].assert_eq(&text);
}
