//! Plan patches on the bundled lab cluster's plan: the seed's §14 patch applies and shows its
//! diff; changes outside the rules are refused with findings, and nothing changes.

use expect_test::{expect, Expect};
use opsgraph_core::model::PlanPatch;
use opsgraph_core::plan::patch::{apply_patch, Finding};

use crate::support::path;

fn lab_plan() -> (opsgraph_core::plan::Plan, opsgraph_core::pack::Pack) {
    use opsgraph::load::Source;
    let intent = Source::parse(&path("examples/lab/intents/lab-create-cluster.yaml"));
    let inventory = Source::parse(&path("examples/lab/inventory"));
    let packs = opsgraph::load::packs(&[Source::parse(&path("packs/lab-cluster"))]);
    let loaded = opsgraph::plan_cmd::load_inputs(&intent, packs, &[inventory]);
    let plan = opsgraph::plan_cmd::build(&loaded).unwrap();
    let pack = loaded.packs.into_iter().find(|p| p.manifest.id == "lab-cluster").unwrap();
    (plan, pack)
}

fn patch(yaml: &str) -> PlanPatch {
    let parsed = opsgraph_core::pack::parse_file("patch.yaml", yaml);
    assert!(parsed.diagnostics.is_empty(), "{:?}", parsed.diagnostics);
    match parsed.docs.into_iter().next().unwrap().doc {
        opsgraph_core::model::Document::PlanPatch(p) => p,
        other => panic!("not a patch: {other:?}"),
    }
}

fn refused(findings: &[Finding]) -> String {
    findings.iter().map(|f| format!("{:?} {} (change {:?}): {}\n", f.severity, f.code, f.change, f.message)).collect()
}

fn check(yaml: &str, expect: Expect) {
    check_patch(&patch(yaml), expect)
}

fn check_patch(patch: &PlanPatch, expect: Expect) {
    let (plan, pack) = lab_plan();
    let text = match apply_patch(&plan, &pack, patch) {
        Ok(p) => {
            assert_eq!(p.plan.revision.number, plan.revision.number + 1);
            assert_ne!(p.plan.revision.hash, plan.revision.hash);
            format!("{}{}", p.diff.text(), refused(&p.findings))
        }
        Err(findings) => format!("refused\n{}", refused(&findings)),
    };
    expect.assert_eq(&text);
}

#[test]
fn the_registry_remedy_patch_applies_with_its_diff() {
    let (_, pack) = lab_plan();
    let remedy = pack.remedies.iter().find(|r| r.id == "registry-unreachable").unwrap();
    check_patch(
        remedy.plan_patch.as_ref().unwrap(),
        expect![[r#"
            + job configure-containerd-registry-mirror@lab-1 (after install-runtime@lab-1)
            + job restart-containerd@lab-1 (after configure-containerd-registry-mirror@lab-1)
            + job pre-pull-kubernetes-images@lab-1 (after restart-containerd@lab-1)
            + job configure-containerd-registry-mirror@lab-2 (after install-runtime@lab-2)
            + job restart-containerd@lab-2 (after configure-containerd-registry-mirror@lab-2)
            + job pre-pull-kubernetes-images@lab-2 (after restart-containerd@lab-2)
            + job configure-containerd-registry-mirror@lab-3 (after install-runtime@lab-3)
            + job restart-containerd@lab-3 (after configure-containerd-registry-mirror@lab-3)
            + job pre-pull-kubernetes-images@lab-3 (after restart-containerd@lab-3)
            ~ init-control-plane@lab-1 now also waits for pre-pull-kubernetes-images@lab-1
            ~ init-control-plane@lab-1 now also waits for pre-pull-kubernetes-images@lab-2
            ~ init-control-plane@lab-1 now also waits for pre-pull-kubernetes-images@lab-3
            ↻ retry init-control-plane@lab-1
        "#]],
    );
}

#[test]
fn changes_outside_the_rules_are_refused() {
    check(
        "plan_patch:\n  changes:\n    - skip: {job: init-control-plane, reason: not needed}\n",
        expect![[r#"
            refused
            Error skip-required (change Some(0)): skip init-control-plane: what it provides is required: install-cni@lab-1 requires capability lab.kubernetes.control_plane from init-control-plane@lab-1; join-workers@lab-2 requires artifact join_token from init-control-plane@lab-1; join-workers@lab-3 requires artifact join_token from init-control-plane@lab-1
        "#]],
    );
    check(
        "plan_patch:\n  changes:\n    - insert_after: install-runtime\n      jobs: [no-such-job]\n",
        expect![[r#"
            refused
            Error unknown-job (change Some(0)): job `no-such-job` is not in pack lab-cluster's job library
        "#]],
    );
    check(
        "plan_patch:\n  changes:\n    - set_parameters: {parameters: {node_count: many, kubernetes_version: [1, 30]}}\n",
        expect![[r#"
            refused
            Error parameter (change Some(0)): parameter `kubernetes_version` must be a string, found [1,30]
            Error parameter (change Some(0)): the template has no parameter `node_count`
        "#]],
    );
    // The intent's own check: a value past the size limit is refused like an intent's (P010).
    check(
        &format!(
            "plan_patch:\n  changes:\n    - set_parameters: {{parameters: {{kubernetes_version: \"{}\"}}}}\n",
            "9".repeat(70 * 1024)
        ),
        expect![[r#"
            refused
            Error parameter (change Some(0)): bytes of one parameter value: 71682, above the limit of 65536
        "#]],
    );
    check(
        "plan_patch:\n  changes:\n    - retry: {job: verify, with_descendants: true}\n    - add_gate: {id: look, reason: an SRE looks first, before: [verify]}\n",
        expect![[r#"
            + gate look
            ↻ retry verify@lab-1
        "#]],
    );
}

#[test]
fn parameters_and_inserts_before_change_the_plan() {
    check(
        "plan_patch:\n  changes:\n    - set_parameters: {parameters: {kubernetes_version: '1.31'}}\n    - insert_before: init-control-plane\n      jobs: [configure-containerd-registry-mirror, restart-containerd, pre-pull-kubernetes-images]\n",
        expect![[r#"
            + job configure-containerd-registry-mirror@lab-1 (after install-runtime@lab-1, install-runtime@lab-2, install-runtime@lab-3)
            + job restart-containerd@lab-1 (after configure-containerd-registry-mirror@lab-1)
            + job pre-pull-kubernetes-images@lab-1 (after restart-containerd@lab-1)
            ~ init-control-plane@lab-1 now also waits for pre-pull-kubernetes-images@lab-1
            ~ parameter kubernetes_version: "1.30" -> "1.31"
        "#]],
    );
    // Alone, the last job's contract is not met: what it requires nothing provides.
    check(
        "plan_patch:\n  changes:\n    - insert_before: init-control-plane\n      jobs: [pre-pull-kubernetes-images]\n",
        expect![[r#"
            refused
            Error contract (change Some(0)): pre-pull-kubernetes-images requires capability lab.container.runtime.registry_mirror, which nothing in the plan provides
        "#]],
    );
}

#[test]
fn a_patch_customises_the_preview_before_anything_runs() {
    use crate::support::{opsgraph, temp_dir};
    let dir = temp_dir(&[
        ("gate.yaml", "plan_patch:\n  reason: look before verifying\n  changes:\n    - add_gate: {id: look, reason: an SRE looks at the nodes, before: [verify]}\n"),
        ("skip.yaml", "plan_patch:\n  changes:\n    - skip: {job: init-control-plane, reason: not needed}\n"),
    ]);
    let intent = path("examples/lab/intents/lab-create-cluster.yaml");
    let inventory = path("examples/lab/inventory");
    let plan = |patch: &str| {
        let p = dir.join(patch).display().to_string();
        opsgraph(&["plan", "-f", &intent, "--inventory", &inventory, "--patch", &p])
    };
    let gated = plan("gate.yaml");
    assert_eq!(gated.code, 0, "{}", gated.render());
    assert!(gated.out.starts_with("Patched before the run:\n+ gate look\n"), "{}", gated.out);
    assert!(
        gated.out.contains("Revision 2 ") && gated.out.contains("  look (approval), answered by sre or platform_admin"),
        "{}",
        gated.out
    );
    let refused = plan("skip.yaml");
    assert_eq!(refused.code, 1, "{}", refused.render());
    assert!(
        refused.err.contains("skip-required") && refused.err.contains("the patch is refused"),
        "{}",
        refused.render()
    );
}

/// Every change kind the document shape allows has a rule in the reviewer, proven by an example
/// here: a kind added to the shape without one fails this test.
#[test]
fn every_change_kind_of_the_shape_has_a_reviewed_rule() {
    let examples: &[(&str, &str)] = &[
        ("insert_after", "- insert_after: install-runtime\n  jobs: [no-such-job]\n"),
        ("insert_before", "- insert_before: verify\n  jobs: [no-such-job]\n"),
        ("retry", "- retry: {job: no-such-job}\n"),
        ("skip", "- skip: {job: no-such-job, reason: r}\n"),
        ("set_parameters", "- set_parameters: {parameters: {no_such_parameter: 1}}\n"),
        ("add_gate", "- add_gate: {id: g, reason: r, before: [no-such-job]}\n"),
    ];
    let mut shape: Vec<&str> = opsgraph_core::pack::patch_change_kinds().to_vec();
    let mut covered: Vec<&str> = examples.iter().map(|(k, _)| *k).collect();
    shape.sort();
    covered.sort();
    assert_eq!(shape, covered, "a change kind without a reviewed example");
    let (plan, pack) = lab_plan();
    for (kind, change) in examples {
        let yaml =
            format!("plan_patch:\n  changes:\n{}", change.lines().map(|l| format!("    {l}\n")).collect::<String>());
        let findings = apply_patch(&plan, &pack, &patch(&yaml)).expect_err(kind);
        assert!(
            findings.iter().any(|f| f.change == Some(0) && f.severity == opsgraph_core::plan::patch::Severity::Error),
            "{kind}: {findings:?}"
        );
    }
}

/// Every bundled remedy's patch applies to a plan of its pack that runs the jobs it is about.
#[test]
fn bundled_remedy_patches_apply_to_their_packs_plans() {
    use opsgraph::load::Source;
    let intents = [
        "examples/intents/k8s-create-cluster.yaml",
        "examples/intents/k8s-add-node.yaml",
        "examples/intents/postgresql-install.yaml",
        "examples/intents/tempo-dev.yaml",
        "examples/intents/minio-install.yaml",
        "examples/lab/intents/lab-create-cluster.yaml",
    ];
    let mut report = String::new();
    let mut tried = 0;
    for intent in intents {
        let world = if intent.contains("/lab/") {
            vec![Source::parse(&path("examples/lab/inventory"))]
        } else {
            vec![
                Source::parse(&path("examples/inventory")),
                Source::parse(&path("examples/policy.yaml")),
                Source::parse(&path("examples/providers.yaml")),
            ]
        };
        let packs = opsgraph::load::packs(&[Source::parse(&path("packs"))]);
        let loaded = opsgraph::plan_cmd::load_inputs(&Source::parse(&path(intent)), packs, &world);
        let Ok(plan) = opsgraph::plan_cmd::build(&loaded) else { continue };
        let pack = loaded.packs.iter().find(|p| p.reference() == plan.pack).unwrap();
        // Each remedy with a patch, for each job it names that the plan has: the patch made for
        // that job (`$job` filled in) applies.
        for r in &pack.remedies {
            let Some(patch) = &r.plan_patch else { continue };
            for job in r.applies_to.job_ids().filter(|j| plan.jobs.iter().any(|i| i.job == *j)) {
                tried += 1;
                let patch = opsgraph_core::pack::remedy::instantiate(patch, job);
                if let Err(findings) = apply_patch(&plan, pack, &patch) {
                    report.push_str(&format!(
                        "{} {} for {job} on {intent}:\n{}",
                        pack.manifest.id,
                        r.id,
                        refused(&findings)
                    ));
                }
            }
        }
    }
    assert!(tried >= 10, "only {tried} remedies tried");
    assert!(report.is_empty(), "{report}");
}

#[test]
fn parameters_can_be_set_for_one_job() {
    check(
        "plan_patch:\n  changes:\n    - set_parameters: {job: init-control-plane, parameters: {kubernetes_version: '1.31'}}\n",
        expect![[r#"
            ~ parameter kubernetes_version of init-control-plane: "1.30" -> "1.31"
        "#]],
    );
    check(
        "plan_patch:\n  changes:\n    - set_parameters: {job: init-control-plane, parameters: {nope: 1}}\n",
        expect![[r#"
            refused
            Error parameter (change Some(0)): job `init-control-plane` has no parameter `nope`
        "#]],
    );
    let (plan, pack) = lab_plan();
    let p = apply_patch(
        &plan,
        &pack,
        &patch("plan_patch:\n  changes:\n    - set_parameters: {job: init-control-plane, parameters: {kubernetes_version: '1.31'}}\n"),
    )
    .unwrap();
    let init = p.plan.jobs.iter().find(|j| j.job == "init-control-plane").unwrap();
    assert_eq!(init.parameters["kubernetes_version"], "1.31");
    assert!(p.plan.jobs.iter().filter(|j| j.job != "init-control-plane").all(|j| j.parameters.is_empty()));
}

/// A patched plan keeps each patch as a customization (id, author, reason, revision, diff),
/// outside its hash; a pack that says `editable.advanced_mode: false` allows only retries ([O]).
#[test]
fn a_patch_is_recorded_as_a_customization_and_advanced_mode_false_allows_only_retries() {
    let (plan, mut pack) = lab_plan();
    let gate = patch(
        "plan_patch:\n  id: p1\n  author: user:alice\n  reason: look first\n  changes:\n    - add_gate: {id: look, reason: an SRE looks, before: [verify]}\n",
    );
    let patched = apply_patch(&plan, &pack, &gate).unwrap().plan;
    expect![[r#"
        [
          {
            "patch": "p1",
            "author": "user:alice",
            "reason": "look first",
            "revision": 2,
            "diff": [
              "+ gate look"
            ]
          }
        ]"#]]
    .assert_eq(&serde_json::to_string_pretty(&patched.customizations).unwrap());
    // Stored plans name the bindings as the protocol does, and older ones still read.
    let stored = serde_json::to_value(&patched).unwrap();
    assert!(stored["capability_bindings"].is_array() && stored.get("resolution").is_none(), "{stored}");
    let mut old = stored.clone();
    let bindings = old.as_object_mut().unwrap().remove("capability_bindings").unwrap();
    old["resolution"] = bindings;
    let read: opsgraph_core::plan::Plan = serde_json::from_value(old).unwrap();
    assert_eq!(read, patched);

    pack.manifest.editable.advanced_mode = Some(false);
    let text = match apply_patch(&plan, &pack, &gate) {
        Ok(_) => "applied".to_string(),
        Err(findings) => refused(&findings),
    };
    expect![[r#"
        Error advanced-mode (change Some(0)): pack lab-cluster does not allow advanced edits (editable.advanced_mode: false): a patch may only retry jobs
    "#]]
    .assert_eq(&text);
    let retry = patch("plan_patch:\n  changes:\n    - retry: {job: verify}\n");
    assert!(apply_patch(&plan, &pack, &retry).is_ok());
}
