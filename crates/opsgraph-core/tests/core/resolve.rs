//! Capability resolution on domain fixtures: every constraint form, every policy rule, every
//! outcome, and the reason each rejected candidate was rejected.

use expect_test::{expect, Expect};
use opsgraph_core::model::{CapabilityPolicy, EnvironmentPolicy, Health, Intent, Provider, Requirement, Resource};
use opsgraph_core::plan::resolve::{resolve, Context};
use opsgraph_core::plan::{Inventory, Resolution};
use serde_json::json;

use crate::builders::*;

struct Case {
    resources: Vec<Resource>,
    providers: Vec<Provider>,
    policy: CapabilityPolicy,
    intent: Intent,
}

fn case(env: &str) -> Case {
    let mut intent = intent("tempo.instance", env);
    intent.constraints.insert("region".into(), json!("eu-west-1"));
    Case { resources: Vec::new(), providers: Vec::new(), policy: CapabilityPolicy::default(), intent }
}

/// `req` resolved for Tempo's jobs `jobs` in the world of `c`.
fn resolved(c: &Case, req: &Requirement, jobs: Vec<String>) -> Resolution {
    let inventory = Inventory::new(&c.resources);
    let cx = Context {
        inventory: &inventory,
        providers: &c.providers,
        policy: &c.policy,
        intent: &c.intent,
        requester: "Tempo",
        roles: &[],
    };
    resolve(&cx, req, jobs)
}

/// Resolves `req` and shows the outcome and each rejection.
fn check(c: &Case, req: Requirement, expect: Expect) {
    let r = resolved(c, &req, vec!["install-tempo".into()]);
    let mut s = serde_json::to_string(&r.outcome).unwrap();
    s.push('\n');
    for rej in &r.rejected {
        s.push_str(&format!("  rejected {}: {}\n", rej.candidate, rej.reason));
    }
    expect.assert_eq(&s);
}

fn s3(name: &str, env: &str, provider: &str, attributes: &[(&str, serde_json::Value)]) -> Resource {
    resource("object_storage", name)
        .env(env)
        .provider(provider)
        .provides("object_storage.s3", attrs(attributes))
        .attr("region", json!("eu-west-1"))
        .0
}

#[test]
fn every_constraint_form() {
    let mut c = case("prod");
    // name, environment, encryption, capacity_gb, access_mode
    let rows = [
        ("big", "prod", true, 1000, "dedicated"),
        ("small", "prod", true, 100, "dedicated"),
        ("plain", "prod", false, 1000, "dedicated"),
        ("shared", "prod", true, 1000, "shared"),
        ("huge", "prod", true, 90000, "dedicated"),
        ("devbox", "dev", true, 1000, "dedicated"),
        ("broken", "prod", true, 1000, "dedicated"),
    ];
    c.resources = rows
        .iter()
        .map(|(name, env, encryption, capacity, mode)| {
            let a = [("encryption", json!(encryption)), ("capacity_gb", json!(capacity)), ("access_mode", json!(mode))];
            s3(name, env, "p", &a)
        })
        .collect();
    // In another region: after `shared`, where it was listed.
    c.resources.insert(
        4,
        resource("object_storage", "far")
            .env("prod")
            .provider("p")
            .attr("region", json!("us-east-1"))
            .provides(
                "object_storage.s3",
                attrs(&[
                    ("encryption", json!(true)),
                    ("capacity_gb", json!(1000)),
                    ("access_mode", json!("dedicated")),
                ]),
            )
            .0,
    );
    c.resources.last_mut().unwrap().health = Health::Error;
    // The seed's §5 requirement, plus a max_ bound and a list.
    let r = req("object_storage.s3")
        .constraint("environment", json!("prod"))
        .constraint("region", json!("same-as-workload"))
        .constraint("encryption", json!("required"))
        .constraint("min_capacity_gb", json!(500))
        .constraint("max_capacity_gb", json!(50000))
        .constraint("access_mode", json!(["dedicated", "exclusive"]));
    check(
        &c,
        r,
        expect![[r#"
            {"outcome":"bind","resource":"object_storage/big","provider":"p","because":"the only candidate that satisfies every rule"}
              rejected object_storage/small: constraint min_capacity_gb: 500 is not met (capacity_gb is 100)
              rejected object_storage/plain: constraint encryption: required is not met (encryption is false)
              rejected object_storage/shared: constraint access_mode: one of [dedicated, exclusive] is not met (access_mode is shared)
              rejected object_storage/far: constraint region: same-as-workload (eu-west-1) is not met (region is us-east-1)
              rejected object_storage/huge: constraint max_capacity_gb: 50000 is not met (capacity_gb is 90000)
              rejected object_storage/devbox: constraint environment: prod is not met (environment is dev)
              rejected object_storage/broken: its health is error
        "#]],
    );
}

#[test]
fn policy_allowed_default_and_encryption() {
    let mut c = case("stage");
    c.resources = vec![
        s3("shared-stage", "stage", "shared_minio", &[("encryption", json!(true))]),
        s3("dedicated-stage", "stage", "dedicated_minio", &[("encryption", json!(true))]),
        s3("legacy-stage", "stage", "legacy", &[("encryption", json!(true))]),
        s3("shared-dev", "dev", "shared_minio", &[("encryption", json!(true))]),
    ];
    c.policy = policy(
        "object_storage.s3",
        &[(
            "stage",
            EnvironmentPolicy {
                default_provider: Some("shared_minio".into()),
                ..allow(&["shared_minio", "dedicated_minio"])
            },
        )],
    );
    check(
        &c,
        req("object_storage.s3"),
        expect![[r#"
            {"outcome":"bind","resource":"object_storage/shared-stage","provider":"shared_minio","because":"the policy's default provider in stage (shared_minio)"}
              rejected object_storage/legacy-stage: provider legacy is not allowed in stage
              rejected object_storage/shared-dev: it is in environment dev, the intent is for stage
        "#]],
    );
    // Without a default, two equal matches go to a person.
    c.policy = policy("object_storage.s3", &[("stage", allow(&["shared_minio", "dedicated_minio"]))]);
    check(
        &c,
        req("object_storage.s3"),
        expect![[r#"
            {"outcome":"gate","gate":{"id":"select-object-storage-s3","type":"provider_selection","reason":"Tempo requires object_storage.s3, and 2 candidates match equally in stage.","options":[{"kind":"bind","label":"bind object_storage/shared-stage","resource":"object_storage/shared-stage"},{"kind":"bind","label":"bind object_storage/dedicated-stage","resource":"object_storage/dedicated-stage"},{"kind":"cancel","label":"cancel operation"}],"required_roles":["sre","platform_admin"]}}
              rejected object_storage/legacy-stage: provider legacy is not allowed in stage
              rejected object_storage/shared-dev: it is in environment dev, the intent is for stage
        "#]],
    );
    // An environment the policy does not name: nothing is allowed there.
    let mut qa = case("qa");
    qa.resources = vec![s3("qa1", "qa", "shared_minio", &[])];
    qa.policy = c.policy.clone();
    check(
        &qa,
        req("object_storage.s3"),
        expect![[r#"
            {"outcome":"unsatisfiable","reason":"none of 1 candidates for object_storage.s3 is acceptable in qa"}
              rejected object_storage/qa1: the capability policy for object_storage.s3 has no rule for environment qa
        "#]],
    );
}

#[test]
fn create_when_nothing_matches_and_one_provider_can() {
    let mut c = case("dev");
    c.providers =
        vec![creatable("dedicated_minio", "object_storage.s3", "minio", attrs(&[("encryption", json!(true))]))];
    check(
        &c,
        req("object_storage.s3").constraint("encryption", json!("required")),
        expect![[r#"
            {"outcome":"create","provider":"dedicated_minio","pack":"minio","action":"run","parameters":{}}
        "#]],
    );
}

#[test]
fn require_approval_gates_with_roles() {
    let mut c = case("prod");
    c.resources = vec![s3("legacy", "prod", "shared_minio", &[("encryption", json!(false))])];
    c.providers = vec![
        creatable("dedicated_minio", "object_storage.s3", "minio", attrs(&[("encryption", json!(true))])),
        Provider {
            bind: Some(opsgraph_core::model::BindMode::External),
            create: None,
            title: Some("bind external S3".into()),
            ..creatable("aws_s3", "object_storage.s3", "x", attrs(&[("encryption", json!(true))]))
        },
        creatable("cheap_minio", "object_storage.s3", "minio", attrs(&[("encryption", json!(false))])),
    ];
    c.policy = policy(
        "object_storage.s3",
        &[(
            "prod",
            EnvironmentPolicy {
                require_encryption: true,
                require_approval: true,
                approval_roles: vec!["sre".into(), "platform_admin".into()],
                ..allow(&["aws_s3", "dedicated_minio", "cheap_minio"])
            },
        )],
    );
    check(
        &c,
        req("object_storage.s3"),
        expect![[r#"
            {"outcome":"gate","gate":{"id":"approve-dedicated-minio","type":"approval","reason":"Tempo requires object_storage.s3 and no existing prod provider matches.","options":[{"kind":"create","label":"create dedicated_minio","provider":"dedicated_minio","pack":"minio","action":"run","parameters":{}},{"kind":"bind_external","label":"bind external S3","provider":"aws_s3"},{"kind":"cancel","label":"cancel operation"}],"required_roles":["sre","platform_admin"]}}
              rejected object_storage/legacy: provider shared_minio is not allowed in prod
              rejected provider cheap_minio: prod requires encryption, and it has encryption: false
        "#]],
    );
}

#[test]
fn unsatisfiable_lists_every_candidate() {
    let mut c = case("dev");
    c.resources =
        vec![s3("a", "dev", "p", &[("capacity_gb", json!(10))]), s3("b", "prod", "p", &[("capacity_gb", json!(900))])];
    check(
        &c,
        req("object_storage.s3").constraint("min_capacity_gb", json!(500)),
        expect![[r#"
            {"outcome":"unsatisfiable","reason":"none of 2 candidates for object_storage.s3 is acceptable in dev"}
              rejected object_storage/a: constraint min_capacity_gb: 500 is not met (capacity_gb is 10)
              rejected object_storage/b: it is in environment prod, the intent is for dev
        "#]],
    );
    check(
        &c,
        req("message.queue"),
        expect![[r#"
            {"outcome":"unsatisfiable","reason":"nothing provides message.queue: no resource in the inventory and no provider that can create it"}
        "#]],
    );
}

#[test]
fn large_inventories_list_a_sample_and_count_the_rest() {
    let mut c = case("dev");
    c.resources = (0..500).map(|i| s3(&format!("r{i}"), "prod", "p", &[])).collect();
    let r = resolved(&c, &req("object_storage.s3"), vec![]);
    assert_eq!(r.rejected.len(), opsgraph_core::plan::resolve::REJECTION_LIMIT);
    assert_eq!(r.rejected_by_rule.get("environment"), Some(&500));
    assert_eq!(r.considered, 500);
}
