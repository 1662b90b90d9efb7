//! Policy rules ([O]): CEL expressions over organization, environment, criticality, compliance,
//! the requester's roles and each candidate; rejections name the rule and the expression; an
//! external binding is offered with what it must meet, and checked against what a person brings.

use expect_test::{expect, Expect};
use opsgraph_core::model::{BindMode, CapabilityPolicy, EnvironmentPolicy, Intent, PolicyRule, Provider, Resource};
use opsgraph_core::plan::resolve::{meets_constraints, resolve, Context};
use opsgraph_core::plan::{Inventory, Resolution};
use serde_json::json;

use crate::builders::*;

fn world(rules: Vec<PolicyRule>, roles: &[&str], intent: &Intent, resources: &[Resource]) -> Resolution {
    let providers = vec![
        creatable("dedicated_minio", "object_storage.s3", "minio", attrs(&[("encryption", json!(true))])),
        // An external provider that declares nothing up front: the person brings the bucket.
        Provider {
            bind: Some(BindMode::External),
            create: None,
            title: Some("bind external S3".into()),
            ..creatable("aws_s3", "object_storage.s3", "x", attrs(&[]))
        },
    ];
    let policy: CapabilityPolicy = policy(
        "object_storage.s3",
        &[(
            "prod",
            EnvironmentPolicy {
                require_encryption: true,
                rules,
                ..allow(&["aws_s3", "dedicated_minio", "shared_minio"])
            },
        )],
    );
    let inventory = Inventory::new(resources);
    let roles: Vec<String> = roles.iter().map(|r| r.to_string()).collect();
    let cx = Context {
        inventory: &inventory,
        providers: &providers,
        policy: &policy,
        intent,
        requester: "Tempo",
        roles: &roles,
    };
    let mut req = req("object_storage.s3");
    req.constraints.insert("region".into(), json!("same-as-workload"));
    resolve(&cx, &req, vec!["install-tempo".into()])
}

fn show(r: &Resolution, expect: Expect) {
    let mut s = serde_json::to_string_pretty(&r.outcome).unwrap();
    s.push('\n');
    for rej in &r.rejected {
        s.push_str(&format!("rejected {}: {}\n", rej.candidate, rej.reason));
    }
    expect.assert_eq(&s);
}

fn rule(name: &str, when: Option<&str>, require: Option<&str>) -> PolicyRule {
    PolicyRule { name: name.into(), when: when.map(Into::into), require: require.map(Into::into), ..Default::default() }
}

fn prod_intent() -> Intent {
    let mut i = intent("tempo.instance", "prod");
    i.constraints.insert("region".into(), json!("eu-west-1"));
    i.organization = Some("payments".into());
    i.criticality = Some("high".into());
    i.compliance = vec!["pci".into()];
    i
}

fn bucket(name: &str, org: &str, compliance: &[&str]) -> Resource {
    let mut r = resource("object_storage", name)
        .env("prod")
        .provider("shared_minio")
        .provides("object_storage.s3", attrs(&[("encryption", json!(true))]))
        .attr("region", json!("eu-west-1"))
        .0;
    r.organization = Some(org.into());
    r.compliance = compliance.iter().map(|c| c.to_string()).collect();
    r
}

#[test]
fn a_rule_rejects_candidates_naming_itself_and_its_expression() {
    let rules = vec![
        rule("same-org", None, Some("candidate.kind != 'resource' || candidate.organization == intent.organization")),
        rule(
            "pci-buckets",
            Some("'pci' in intent.compliance"),
            Some("candidate.kind != 'resource' || 'pci' in candidate.compliance"),
        ),
    ];
    let resources =
        [bucket("theirs", "search", &["pci"]), bucket("plain", "payments", &[]), bucket("ours", "payments", &["pci"])];
    show(
        &world(rules, &[], &prod_intent(), &resources),
        expect![[r#"
            {
              "outcome": "bind",
              "resource": "object_storage/ours",
              "provider": "shared_minio",
              "because": "the only candidate that satisfies every rule"
            }
            rejected object_storage/theirs: policy rule same-org: `candidate.kind != 'resource' || candidate.organization == intent.organization` is false
            rejected object_storage/plain: policy rule pci-buckets (when `'pci' in intent.compliance`): `candidate.kind != 'resource' || 'pci' in candidate.compliance` is false
        "#]],
    );
}

#[test]
fn roles_and_criticality_ask_for_an_approval() {
    let mut r = rule("critical-needs-sre", Some("intent.criticality == 'high' && !('platform_admin' in roles)"), None);
    r.require_approval = true;
    r.approval_roles = vec!["platform_admin".into()];
    let resources = [bucket("ours", "payments", &["pci"])];
    // A developer: the rule holds, a platform admin approves.
    let gate = world(vec![r.clone()], &["developer"], &prod_intent(), &resources);
    show(
        &gate,
        expect![[r#"
            {
              "outcome": "gate",
              "gate": {
                "id": "approve-object-storage-s3",
                "type": "approval",
                "reason": "Tempo requires object_storage.s3, and the policy in prod requires approval to bind it (rule critical-needs-sre (when `intent.criticality == 'high' && !('platform_admin' in roles)`)).",
                "options": [
                  {
                    "kind": "bind",
                    "label": "bind object_storage/ours",
                    "resource": "object_storage/ours"
                  },
                  {
                    "kind": "cancel",
                    "label": "cancel operation"
                  }
                ],
                "required_roles": [
                  "platform_admin"
                ]
              }
            }
        "#]],
    );
    // A platform admin: it does not hold, the bucket is bound.
    let bound = world(vec![r], &["platform_admin"], &prod_intent(), &resources);
    assert_eq!(bound.outcome.name(), "bind");
}

#[test]
fn external_binding_is_offered_with_its_checks_and_checked_at_the_gate() {
    let rules =
        vec![rule("pci-external", Some("'pci' in intent.compliance"), Some("candidate.attributes.versioning == true"))];
    let mut intent = prod_intent();
    // No prod bucket: a person chooses between creating one and bringing one.
    let r = world(rules, &[], &intent, &[]);
    let options: Vec<String> = match &r.outcome {
        opsgraph_core::plan::Outcome::Gate { gate } => {
            gate.options.iter().map(|o| serde_json::to_string(o).unwrap()).collect()
        }
        other => panic!("{other:?}"),
    };
    expect![[r#"
        {"kind":"create","label":"create dedicated_minio","provider":"dedicated_minio","pack":"minio","action":"run","parameters":{}}
        {"kind":"bind_external","label":"bind external S3","provider":"aws_s3","checks":["encryption: true (the policy in prod)","constraint region: eu-west-1","policy rule pci-external: `candidate.attributes.versioning == true`"]}
        {"kind":"cancel","label":"cancel operation"}"#]]
    .assert_eq(&options.join("\n"));
    // What the person brings at the gate is checked against it, each refusal naming the rule.
    let brought = |a: &[(&str, serde_json::Value)]| {
        let mut b = resource("object_storage", "bucket")
            .env("prod")
            .provider("aws_s3")
            .provides("object_storage.s3", attrs(a))
            .0;
        b.provider = Some("aws_s3".into());
        b
    };
    let roles = ["sre".to_string()];
    let verdicts: Vec<String> = [
        brought(&[("region", json!("eu-west-1"))]),
        brought(&[("region", json!("eu-west-1")), ("encryption", json!(true))]),
        brought(&[("region", json!("us-east-1")), ("encryption", json!(true)), ("versioning", json!(true))]),
        brought(&[("region", json!("eu-west-1")), ("encryption", json!(true)), ("versioning", json!(true))]),
    ]
    .iter()
    .map(|b| match meets_constraints(&r, &intent, &roles, b) {
        Ok(()) => "accepted".to_string(),
        Err(why) => why,
    })
    .collect();
    expect![[r#"
        prod requires encryption, and it declares no encryption attribute
        policy rule pci-external (when `'pci' in intent.compliance`): `candidate.attributes.versioning == true` cannot be decided: it has no versioning
        constraint region: same-as-workload (eu-west-1) is not met (region is us-east-1)
        accepted"#]]
    .assert_eq(&verdicts.join("\n"));
    // Without pci, the rule does not apply.
    intent.compliance.clear();
    let ok = brought(&[("region", json!("eu-west-1")), ("encryption", json!(true))]);
    assert_eq!(meets_constraints(&r, &intent, &roles, &ok), Ok(()));
}

/// The operations policy's rules over a whole plan: a denial names the rule, an approval gate is
/// placed before the first jobs, and the cost threshold differs by criticality.
#[test]
fn operations_rules_deny_ask_for_approval_and_set_the_cost_threshold() {
    use opsgraph_core::model::{EnvironmentOperations, OperationsPolicy, OperationsRule};
    let mut backup = job("backup");
    backup.0.cost = Some(300.0);
    let pack = pack("h", "thing", vec![backup, job("migrate")]);
    let operations = OperationsPolicy {
        environments: [(
            "prod".to_string(),
            EnvironmentOperations {
                confirm_cost_above: Some(500.0),
                rules: vec![
                    OperationsRule {
                        name: "no-contractors-in-pci".into(),
                        when: Some("'contractor' in roles && 'pci' in intent.compliance".into()),
                        deny: Some("contractors do not change PCI systems".into()),
                        ..Default::default()
                    },
                    OperationsRule {
                        name: "critical-costs-less".into(),
                        when: Some("intent.criticality == 'critical'".into()),
                        confirm_cost_above: Some(100.0),
                        ..Default::default()
                    },
                    OperationsRule {
                        name: "payments-approve".into(),
                        when: Some("intent.organization == 'payments' && cost > 200.0".into()),
                        require_approval: true,
                        approval_roles: vec!["finance".into()],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
        )]
        .into(),
    };
    let plan = |criticality: &str, roles: &[&str]| {
        let mut intent = prod_intent();
        intent.target_resource_type = "thing".into();
        intent.criticality = Some(criticality.into());
        let mut w = crate::plan::world(pack.clone(), intent);
        w.operations = operations.clone();
        w.roles = roles.iter().map(|r| r.to_string()).collect();
        match w.build() {
            Ok(p) => {
                p.gates.iter().map(|g| format!("{} [{}]: {}\n", g.id, g.required_roles.join(", "), g.reason)).collect()
            }
            Err(errors) => errors.iter().map(|e| format!("error[{}]: {e}\n", e.code())).collect::<String>(),
        }
    };
    expect![[r#"
        approve-payments-approve [finance]: the operations policy asks for an approval: rule payments-approve (when `intent.organization == 'payments' && cost > 200.0`)
    "#]]
    .assert_eq(&plan("high", &["sre"]));
    expect![[r#"
        approve-payments-approve [finance]: the operations policy asks for an approval: rule payments-approve (when `intent.organization == 'payments' && cost > 200.0`)
        confirm-cost [sre, platform_admin]: the plan is estimated at 300, above the 100 that prod allows by rule critical-costs-less (when `intent.criticality == 'critical'`) without confirmation (job backup: 300)
    "#]]
    .assert_eq(&plan("critical", &["sre"]));
    expect![[r#"
        error[P013]: refused by operations policy rule no-contractors-in-pci (when `'contractor' in roles && 'pci' in intent.compliance`): contractors do not change PCI systems
    "#]]
    .assert_eq(&plan("high", &["contractor"]));
}
