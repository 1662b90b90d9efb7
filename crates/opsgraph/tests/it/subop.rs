//! Sub-operations: a provider the resolution creates runs first as a child operation, and the
//! jobs that need it wait for it — chosen by the resolution itself, or by a person at a gate.

use opsgraph_core::model::OperationState;
use opsgraph_runtime::{GateAnswer, Runtime};
use opsgraph_store_sqlite::{Durability, SqliteStore};

use crate::support::{temp_dir, TempDir};

pub(crate) const WORLD: &[(&str, &str)] = &[
    (
        "packs/app/pack.yaml",
        "scenario_pack:\n  id: app\n  version: 1.0.0\n  title: App\n  resource_types: [app.thing]\n  actions: [run]\n  plan_templates: [{id: app.run}]\n",
    ),
    (
        "packs/app/templates.yaml",
        "plan_template:\n  id: app.run\n  action: run\n  stages: [{id: all, name: All, jobs: [prepare, use-bucket]}]\n  jobs: [prepare, use-bucket]\n",
    ),
    (
        "packs/app/jobs.yaml",
        "job: {id: prepare, outputs: {provides: {capabilities: [app.prepared]}, evidence: [prepared]}, run: {command: 'touch \"$OPSGRAPH_LAB_DIR/prepared\"'}}\n---\n\
         job:\n  id: use-bucket\n  inputs: {requires: {capabilities: [app.prepared, store.bucket]}}\n  outputs: {provides: {capabilities: [app.running]}, evidence: [used]}\n  run: {command: 'test -f \"$OPSGRAPH_LAB_DIR/bucket.made\" && printf %s \"$OPSGRAPH_BINDING_STORE_BUCKET_RESOURCE\" > \"$OPSGRAPH_LAB_DIR/bound-to\" && touch \"$OPSGRAPH_LAB_DIR/used\"'}\n",
    ),
    (
        "packs/app/evidence.yaml",
        "evidence:\n  - {id: prepared, source: command, command: 'test -f \"$OPSGRAPH_LAB_DIR/prepared\"'}\n  - {id: used, source: command, command: 'test -f \"$OPSGRAPH_LAB_DIR/used\"'}\n",
    ),
    (
        "packs/bucket/pack.yaml",
        "scenario_pack:\n  id: bucket\n  version: 1.0.0\n  resource_types: [bucket.thing]\n  actions: [make]\n  provides: [store.bucket]\n  plan_templates: [{id: bucket.make}]\n",
    ),
    (
        "packs/bucket/templates.yaml",
        "plan_template:\n  id: bucket.make\n  action: make\n  stages: [{id: all, name: All, jobs: [make-bucket]}]\n  jobs: [make-bucket]\n",
    ),
    (
        "packs/bucket/jobs.yaml",
        "job: {id: make-bucket, outputs: {provides: {capabilities: [store.bucket]}, evidence: [made]}, run: {command: 'touch \"$OPSGRAPH_LAB_DIR/bucket.made\"'}}\n",
    ),
    ("packs/bucket/evidence.yaml", "evidence:\n  - {id: made, source: command, command: 'test -f \"$OPSGRAPH_LAB_DIR/bucket.made\"'}\n"),
    ("world/providers.yaml", "provider: {id: bucket_maker, capability: store.bucket, title: make a bucket, create: {pack: bucket, action: make}}\n"),
    ("intent.yaml", "intent: {target_resource_type: app.thing, action: run, name: app-1, environment: dev}\n"),
];

pub(crate) struct World {
    pub(crate) dir: TempDir,
}

impl World {
    pub(crate) fn new(extra: &[(&str, &str)]) -> World {
        let mut files = WORLD.to_vec();
        files.extend_from_slice(extra);
        World { dir: temp_dir(&files) }
    }

    /// A world of exactly `files` (none of the default ones).
    pub(crate) fn replacing(files: &[(&str, &str)]) -> World {
        World { dir: temp_dir(files) }
    }

    pub(crate) fn loaded(&self) -> opsgraph::plan_cmd::Loaded {
        use opsgraph::load::Source;
        let p = |r: &str| Source::parse(&self.dir.join(r).display().to_string());
        let loaded =
            opsgraph::plan_cmd::load_inputs(&p("intent.yaml"), opsgraph::load::packs(&[p("packs")]), &[p("world")]);
        assert!(!loaded.diagnostics.iter().any(|d| d.is_error()), "{:?}", loaded.diagnostics);
        loaded
    }

    pub(crate) fn runtime(&self) -> Runtime {
        let loaded = self.loaded();
        let data = self.dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let store = SqliteStore::open(&data.join("opsgraph.db"), Durability::Full).unwrap();
        Runtime::new(Box::new(store), loaded.packs, loaded.world.resources, data)
    }

    /// The world's intent planned and created by `user:alice` (not yet driven): the runtime, the
    /// plan and the operation's id.
    pub(crate) fn created(&self) -> (Runtime, opsgraph_core::plan::Plan, String) {
        let plan = opsgraph::plan_cmd::build(&self.loaded()).unwrap();
        let mut rt = self.runtime();
        let id = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();
        (rt, plan, id)
    }
}

pub(crate) fn events(rt: &Runtime, id: &str) -> Vec<String> {
    rt.store().timeline(id).unwrap().into_iter().map(|e| format!("{} {}", e.event, e.reason)).collect()
}

#[test]
fn a_created_provider_runs_first_and_its_users_wait_for_it() {
    let w = World::new(&[]);
    let plan = opsgraph::plan_cmd::build(&w.loaded()).unwrap();
    assert!(matches!(plan.resolution[0].outcome, opsgraph_core::plan::Outcome::Create { .. }), "{:?}", plan.resolution);
    let mut rt = w.runtime();
    let id = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();
    let state = rt.drive(&id, &mut |_| {}).unwrap();
    assert_eq!(state, OperationState::Completed, "{:#?}", events(&rt, &id));
    let ops = rt.store().operations(&Default::default()).unwrap();
    let child = ops.iter().find(|o| o.parent.as_deref() == Some(id.as_str())).expect("a child operation");
    assert_eq!(child.state, OperationState::Completed);
    assert_eq!(child.resource.as_deref(), Some("bucket.thing/bucket-maker-app-1"));
    let ev = events(&rt, &id);
    let created = ev.iter().position(|e| e.starts_with("sub_operation_created")).unwrap();
    let bound = ev.iter().position(|e| e.starts_with("sub_operation_bound")).unwrap();
    let used = ev.iter().position(|e| e.starts_with("job_started use-bucket")).unwrap();
    assert!(created < bound && bound < used, "{ev:#?}");
    // The job that needed the bucket was told which resource it is bound to.
    let bound_to = std::fs::read_to_string(w.dir.join("data/lab/bound-to")).unwrap();
    assert_eq!(bound_to, "bucket.thing/bucket-maker-app-1");
}

#[test]
fn a_person_chooses_to_create_the_provider_at_the_gate() {
    let policy = "capability_policy:\n  store.bucket:\n    dev: {allowed_providers: [bucket_maker], require_approval: true, approval_roles: [sre]}\n";
    let w = World::new(&[("world/policy.yaml", policy)]);
    let (mut rt, plan, id) = w.created();
    assert!(matches!(rt.store().operation(&id).unwrap().unwrap().state, OperationState::WaitingForApproval { .. }));
    let gate = plan.gates[0].id.clone();
    let answer =
        GateAnswer { option: "make a bucket".into(), actor: "user:bob".into(), role: "sre".into(), value: None };
    rt.answer_gate(&id, &gate, &answer).unwrap();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed, "{:#?}", events(&rt, &id));
    assert!(events(&rt, &id).iter().any(|e| e.starts_with("sub_operation_bound store.bucket: bound to bucket.thing/")));
}
