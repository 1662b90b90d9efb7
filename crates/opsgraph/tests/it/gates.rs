//! The gates a plan places from policy: a soft rule broken (policy exception, answered only by a
//! higher role), a cost estimate above the environment's threshold (cost confirmation) — and a
//! parent that waits for a child operation's gate.

use expect_test::expect;
use opsgraph_core::model::OperationState;
use opsgraph_runtime::{Error, GateAnswer, Runtime};

use crate::subop::{events, World};

fn answer(option: &str, role: &str) -> GateAnswer {
    GateAnswer { option: option.into(), actor: format!("user:{role}-person"), role: role.into(), value: None }
}

fn state(rt: &Runtime, id: &str) -> OperationState {
    rt.store().operation(id).unwrap().unwrap().state
}

fn children(rt: &Runtime, id: &str) -> usize {
    rt.store().operations(&Default::default()).unwrap().iter().filter(|o| o.parent.as_deref() == Some(id)).count()
}

const SOFT: &str = "capability_policy:
  store.bucket:
    dev:
      allowed_providers: [bucket_maker]
      soft: {allowed_providers: [bucket_deluxe], reason: plain buckets are being retired}
";

#[test]
fn a_broken_soft_rule_needs_an_exception_from_a_higher_role() {
    let w = World::new(&[("world/policy.yaml", SOFT)]);
    let plan = opsgraph::plan_cmd::build(&w.loaded()).unwrap();
    let gate = plan.gates.iter().find(|g| g.type_ == opsgraph_core::model::GateType::PolicyException).unwrap();
    expect![[r#"
        exception-store-bucket answered by platform_admin, blocks use-bucket
        no candidate for store.bucket keeps the soft policy in dev (plain buckets are being retired): provider bucket_maker: provider bucket_maker is not among the preferred providers in dev (bucket_deluxe)"#]]
    .assert_eq(&format!(
        "{} answered by {}, blocks {}\n{}",
        gate.id,
        gate.required_roles.join(", "),
        gate.before.join(", "),
        gate.reason
    ));
    let mut rt = w.runtime();
    let id = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();
    assert!(matches!(state(&rt, &id), OperationState::WaitingForApproval { .. }));
    // Nothing is created before the exception is granted.
    assert_eq!(children(&rt, &id), 0);
    let err = rt.answer_gate(&id, "exception-store-bucket", &answer("grant exception", "sre"));
    assert!(matches!(err, Err(Error::Forbidden { .. })), "{err:?}");
    rt.answer_gate(&id, "exception-store-bucket", &answer("grant exception", "platform_admin")).unwrap();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed, "{:#?}", events(&rt, &id));
    assert_eq!(children(&rt, &id), 1);
}

#[test]
fn a_candidate_that_keeps_the_soft_rule_is_preferred_without_a_gate() {
    let providers = "provider: {id: bucket_maker, capability: store.bucket, title: make a bucket, create: {pack: bucket, action: make}}
---
provider: {id: bucket_deluxe, capability: store.bucket, title: make a deluxe bucket, create: {pack: bucket, action: make}}
";
    let policy = SOFT.replace("[bucket_maker]", "[bucket_maker, bucket_deluxe]");
    let w = World::new(&[("world/providers.yaml", providers), ("world/policy.yaml", &policy)]);
    let plan = opsgraph::plan_cmd::build(&w.loaded()).unwrap();
    assert!(plan.gates.is_empty(), "{:?}", plan.gates);
    assert!(
        matches!(&plan.resolution[0].outcome, opsgraph_core::plan::Outcome::Create { provider, .. } if provider == "bucket_deluxe"),
        "{:?}",
        plan.resolution[0].outcome
    );
}

#[test]
fn a_plan_above_the_cost_threshold_waits_for_confirmation_before_anything_runs() {
    let providers = "provider: {id: bucket_maker, capability: store.bucket, title: make a bucket, cost: 300, create: {pack: bucket, action: make}}\n";
    let ops =
        "operations_policy:\n  dev: {confirm_cost_above: 250, cost_unit: USD/month, cost_roles: [platform_admin]}\n";
    let w = World::new(&[("world/providers.yaml", providers), ("world/ops.yaml", ops)]);
    let plan = opsgraph::plan_cmd::build(&w.loaded()).unwrap();
    let text = opsgraph_core::plan::render::text(&plan);
    let lines: Vec<&str> =
        text.lines().filter(|l| l.contains("Cost") || l.contains("confirm-cost") || l.contains("estimated")).collect();
    expect![[r#"
        Cost estimate: 300 USD/month (provider bucket_maker 300)
          confirm-cost (cost_confirmation), answered by platform_admin
            the plan is estimated at 300 USD/month, above the 250 USD/month that dev allows without confirmation (provider bucket_maker: 300)"#]]
    .assert_eq(&lines.join("\n"));

    let mut rt = w.runtime();
    let id = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();
    assert!(matches!(state(&rt, &id), OperationState::WaitingForApproval { .. }));
    assert_eq!(children(&rt, &id), 0, "the provider is not created before the cost is confirmed");
    rt.answer_gate(&id, "confirm-cost", &answer("confirm cost", "platform_admin")).unwrap();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed, "{:#?}", events(&rt, &id));

    // Under the threshold: no gate.
    let ops = "operations_policy:\n  default: {confirm_cost_above: 1000}\n";
    let w = World::new(&[("world/providers.yaml", providers), ("world/ops.yaml", ops)]);
    let plan = opsgraph::plan_cmd::build(&w.loaded()).unwrap();
    assert!(plan.gates.is_empty(), "{:?}", plan.gates);
    assert_eq!(plan.cost.as_ref().map(|c| c.total), Some(300.0));
}

#[test]
fn a_parent_waiting_on_a_childs_gate_goes_on_when_it_is_answered() {
    let risky = "scenario_pack:\n  id: bucket\n  version: 1.0.0\n  resource_types: [bucket.thing]\n  actions: [make]\n  provides: [store.bucket]\n  plan_templates: [{id: bucket.make}]\n  risk: {default_level: high}\n";
    let w = World::new(&[("packs/bucket/pack.yaml", risky)]);
    let (mut rt, _, id) = w.created();
    let stopped = rt.drive(&id, &mut |_| {}).unwrap();
    assert!(
        matches!(&stopped, OperationState::Paused { reason } if reason.starts_with("waiting for sub-operation")),
        "{stopped:?}"
    );
    let child = rt.store().operations(&Default::default()).unwrap().into_iter().find(|o| o.parent.is_some()).unwrap();
    assert!(matches!(child.state, OperationState::WaitingForApproval { .. }), "{:?}", child.state);
    rt.answer_gate(&child.id, "approve-plan", &answer("approve", "sre")).unwrap();
    // The parent is running again, and driving it (the root) finishes both.
    assert_eq!(state(&rt, &id), OperationState::Running);
    assert_eq!(rt.root_of(&child.id).unwrap(), id);
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed, "{:#?}", events(&rt, &id));
    assert_eq!(state(&rt, &child.id), OperationState::Completed);
}

/// The app's pack with a day-2 verification: `creds_readable` where `use-bucket` ran.
const APP_VERIFIED: &str = "scenario_pack:\n  id: app\n  version: 1.0.0\n  title: App\n  resource_types: [app.thing]\n  actions: [run]\n  plan_templates: [{id: app.run}]\n  resources:\n    - {type: app.thing, on: use-bucket, interval: 1h, verify: [creds_readable]}\n";

/// The app's job writes what it was told about its bucket.
const TELL: &str = "job: {id: prepare, outputs: {provides: {capabilities: [app.prepared]}}, run: {command: [true]}}
---
job:
  id: use-bucket
  inputs: {requires: {capabilities: [app.prepared, store.bucket]}}
  outputs: {provides: {capabilities: [app.running]}}
  run: {command: 'env | grep ^OPSGRAPH_BINDING_ | sort > \"$OPSGRAPH_LAB_DIR/told\"; cat \"$OPSGRAPH_BINDING_STORE_BUCKET_CREDENTIALS\" > \"$OPSGRAPH_LAB_DIR/creds-seen\"'}
";

/// An app whose bucket a person binds at the gate, from outside the inventory: the provider
/// `bucket_ext` under `policy`, the intent `intent`, `extra` files. The plan's gate offers the
/// binding; the operation is created and waits there.
struct Binding {
    w: World,
    rt: Runtime,
    id: String,
    gate: String,
}

impl Binding {
    fn new(policy: &str, intent: &str, extra: &[(&str, &str)]) -> Binding {
        let providers =
            "provider: {id: bucket_ext, capability: store.bucket, title: bind external bucket, bind: external}\n";
        let files = [
            ("world/providers.yaml", providers),
            ("world/policy.yaml", policy),
            ("intent.yaml", intent),
            ("packs/app/jobs.yaml", TELL),
        ];
        let w = World::new(&[&files[..], extra].concat());
        let plan = opsgraph::plan_cmd::build(&w.loaded()).unwrap();
        let gate = plan.gates[0].id.clone();
        assert_eq!(plan.gates[0].options, ["bind external bucket", "cancel operation"]);
        let mut rt = w.runtime();
        let id = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();
        Binding { w, rt, id, gate }
    }

    /// An SRE binds the resource `value` describes: accepted, or why not.
    fn answer(&mut self, value: serde_json::Value) -> Result<(), String> {
        let a = GateAnswer { value: Some(value), ..answer("bind external bucket", "sre") };
        self.rt.answer_gate(&self.id, &self.gate, &a).map(|_| ()).map_err(|e| e.to_string())
    }
}

#[test]
fn a_person_binds_an_external_resource_at_the_gate() {
    let policy = "capability_policy:\n  store.bucket:\n    dev: {allowed_providers: [bucket_ext]}\n";
    let intent = "intent:\n  target_resource_type: app.thing\n  action: run\n  name: app-1\n  environment: dev\n  requires: [{capability: store.bucket, constraints: {encryption: required}}]\n";
    let mut b = Binding::new(policy, intent, &[("secrets/ext.creds", "ACCESS_KEY=AKIA-test\n")]);
    let creds = b.w.dir.join("secrets/ext.creds").display().to_string();
    let refused: Vec<String> = [
        serde_json::json!("just a string"),
        serde_json::json!({"name": "../etc", "attributes": {}}),
        serde_json::json!({"name": "ext-1", "attributes": {"encryption": false}}),
        serde_json::json!({"name": "ext-1", "attributes": {"encryption": true}, "credentials": "relative/path"}),
        serde_json::json!({"name": "ext-1", "region": "eu"}),
    ]
    .into_iter()
    .map(|v| b.answer(v).unwrap_err())
    .collect();
    expect![[r#"
        `bind external bucket` binds a resource outside the inventory: describe it with --value '{"name": "...", "attributes": {...}, "credentials": "/absolute/path"}'
        `name` must be 1 to 63 letters, digits, `-`, `_` or `.`, starting with a letter or digit; `bind external bucket` binds a resource outside the inventory: describe it with --value '{"name": "...", "attributes": {...}, "credentials": "/absolute/path"}'
        store/ext-1 does not meet the requirement: constraint encryption: required is not met (encryption is false)
        `credentials` must be an absolute path; `bind external bucket` binds a resource outside the inventory: describe it with --value '{"name": "...", "attributes": {...}, "credentials": "/absolute/path"}'
        unknown field `region`; `bind external bucket` binds a resource outside the inventory: describe it with --value '{"name": "...", "attributes": {...}, "credentials": "/absolute/path"}'"#]]
    .assert_eq(&refused.join("\n"));
    // Refused answers change nothing: the gate is still open.
    b.answer(serde_json::json!({"name": "ext-1", "attributes": {"encryption": true, "endpoint": "https://s3.example"}, "credentials": creds})).unwrap();
    let Binding { w, mut rt, id, .. } = b;
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed, "{:#?}", events(&rt, &id));
    let told = std::fs::read_to_string(w.dir.join("data/lab/told")).unwrap();
    let told = told.replace(&creds, "$CREDS");
    expect![[r#"
        OPSGRAPH_BINDING_STORE_BUCKET_CREDENTIALS=$CREDS
        OPSGRAPH_BINDING_STORE_BUCKET_ENCRYPTION=true
        OPSGRAPH_BINDING_STORE_BUCKET_ENDPOINT=https://s3.example
        OPSGRAPH_BINDING_STORE_BUCKET_RESOURCE=store/ext-1
    "#]]
    .assert_eq(&told);
    assert_eq!(std::fs::read_to_string(w.dir.join("data/lab/creds-seen")).unwrap(), "ACCESS_KEY=AKIA-test\n");
    assert!(rt.store().resource("store/ext-1").unwrap().is_some());
}

#[test]
fn a_created_provider_hands_its_credentials_artifact_to_the_jobs_bound_to_it() {
    let manifest = "scenario_pack:\n  id: bucket\n  version: 1.0.0\n  resource_types: [bucket.thing]\n  actions: [make]\n  provides: [{capability: store.bucket, credentials: bucket_key}]\n  plan_templates: [{id: bucket.make}]\n";
    let jobs = "job: {id: make-bucket, outputs: {provides: {capabilities: [store.bucket]}, artifacts: [bucket_key], evidence: [made]}, run: {command: 'touch \"$OPSGRAPH_LAB_DIR/bucket.made\"; printf \"SECRET_KEY=s3cr3t\\n\" > \"$OPSGRAPH_OUT/bucket_key\"'}}\n";
    let artifact = "artifact: {id: bucket_key, type: s3.credentials, sensitivity: secret}\n";
    let w = World::new(&[
        ("packs/bucket/pack.yaml", manifest),
        ("packs/bucket/jobs.yaml", jobs),
        ("packs/bucket/artifacts.yaml", artifact),
        ("packs/app/jobs.yaml", TELL),
        ("packs/app/pack.yaml", APP_VERIFIED),
        ("packs/app/evidence.yaml", "evidence:\n  - {id: creds_readable, source: command, command: 'grep -qx SECRET_KEY=s3cr3t \"$OPSGRAPH_BINDING_STORE_BUCKET_CREDENTIALS\"'}\n"),
    ]);
    let (mut rt, _, id) = w.created();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed, "{:#?}", events(&rt, &id));
    assert_eq!(std::fs::read_to_string(w.dir.join("data/lab/creds-seen")).unwrap(), "SECRET_KEY=s3cr3t\n");
    // What two verifications killed mid-way left (a pid that cannot exist, above the kernel's
    // `pid_max` limit) and what one still running in another process holds (pid 1).
    let secrets = w.dir.join("data/runs").join(&id).join("secrets");
    let (orphan, running) = (secrets.join("verify-4194305-0-1"), secrets.join("verify-1-0-1"));
    for dir in [&orphan, &running] {
        std::fs::create_dir_all(dir.join("j")).unwrap();
        std::fs::write(dir.join("j/creds"), "SECRET_KEY=s3cr3t\n").unwrap();
    }
    // Day 2: the app's verification reads the credentials as its job did, from a plaintext copy
    // that lives only while its checks run; the orphan's copy is swept, the running one's kept.
    let verified = rt.verify("app.thing/app-1", "user:alice").unwrap();
    assert!(verified.checks.iter().all(|c| c.passed) && !verified.checks.is_empty(), "{verified:#?}");
    let mut files = Vec::new();
    crate::support::files_under(&w.dir.join("data/runs"), &mut files);
    let left: Vec<_> =
        files.into_iter().map(|(p, _)| p).filter(|p| p.to_string_lossy().contains("/secrets/")).collect();
    assert_eq!(left, [running.join("j/creds")], "plaintext copies left after the verification");
    // The resource keeps a reference to the artifact, never its content.
    let r = rt.store().resource("bucket.thing/bucket-maker-app-1").unwrap().unwrap();
    let reference = r.doc["credentials"]["store.bucket"].as_str().unwrap();
    assert!(reference.starts_with("artifact:op-") && reference.ends_with("/bucket_key"), "{reference}");
    assert!(!r.doc.to_string().contains("s3cr3t"));
}

/// External binding with constraints ([O]): the provider declares nothing up front, prod's
/// policy requires encryption and a rule requires versioning for PCI; the gate still offers the
/// external binding, and what the person brings is checked at the answer, each refusal naming
/// the rule; nothing is recorded until an answer meets them all.
#[test]
fn an_external_binding_is_checked_against_the_policy_when_the_person_brings_it() {
    let policy = "capability_policy:\n  store.bucket:\n    prod:\n      allowed_providers: [bucket_ext]\n      require_encryption: true\n      rules:\n        - {name: pci-versioned, when: \"'pci' in intent.compliance\", require: 'candidate.attributes.versioning == true'}\n";
    let intent = "intent:\n  target_resource_type: app.thing\n  action: run\n  name: app-1\n  environment: prod\n  compliance: [pci]\n  requires: [{capability: store.bucket}]\n";
    let mut b = Binding::new(policy, intent, &[]);
    let verdicts: Vec<String> = [
        serde_json::json!({"name": "ext-1", "attributes": {}}),
        serde_json::json!({"name": "ext-1", "attributes": {"encryption": true}}),
        serde_json::json!({"name": "ext-1", "attributes": {"encryption": true, "versioning": false}}),
        serde_json::json!({"name": "ext-1", "attributes": {"encryption": true, "versioning": true}}),
    ]
    .into_iter()
    .map(|v| b.answer(v).map(|_| "accepted".to_string()).unwrap_or_else(|e| e))
    .collect();
    expect![[r#"
        store/ext-1 does not meet the requirement: prod requires encryption, and it declares no encryption attribute
        store/ext-1 does not meet the requirement: policy rule pci-versioned (when `'pci' in intent.compliance`): `candidate.attributes.versioning == true` cannot be decided: it has no versioning
        store/ext-1 does not meet the requirement: policy rule pci-versioned (when `'pci' in intent.compliance`): `candidate.attributes.versioning == true` is false
        accepted"#]].assert_eq(&verdicts.join("\n"));
    assert!(b.rt.store().resource("store/ext-1").unwrap().is_some());
}
