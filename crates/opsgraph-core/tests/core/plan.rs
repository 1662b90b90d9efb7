//! Plans built from domain fixtures: DAG edges from contracts, fan-out per resource, gates,
//! and every documented planning error.

use expect_test::{expect, Expect};
use opsgraph_core::model::{CapabilityPolicy, Intent, OperationsPolicy, Provider, Resource};
use opsgraph_core::pack::Pack;
use opsgraph_core::plan::{Error as PlanError, Input, Inventory, Plan, Recorded};

use crate::builders::*;
use crate::preview_text::section;

pub(crate) struct World {
    pub(crate) packs: Vec<Pack>,
    pub(crate) resources: Vec<Resource>,
    providers: Vec<Provider>,
    policy: CapabilityPolicy,
    pub(crate) operations: OperationsPolicy,
    pub(crate) intent: Intent,
    /// The resource a day-2 action acts on, as earlier operations recorded it.
    pub(crate) recorded: Option<Recorded>,
    /// The requester's roles.
    pub(crate) roles: Vec<String>,
}

pub(crate) fn world(pack: Pack, intent: Intent) -> World {
    World {
        packs: vec![pack],
        resources: Vec::new(),
        providers: Vec::new(),
        policy: CapabilityPolicy::default(),
        operations: OperationsPolicy::default(),
        intent,
        recorded: None,
        roles: Vec::new(),
    }
}

impl World {
    /// The inventory: plain compute nodes (no capabilities), by name.
    pub(crate) fn on_nodes(mut self, names: &[&str]) -> Self {
        self.resources = names.iter().map(|n| resource("compute_node", n).0).collect();
        self
    }

    pub(crate) fn recorded(mut self, recorded: Option<Recorded>) -> Self {
        self.recorded = recorded;
        self
    }

    /// The plan of this world's intent, or the planning errors.
    pub(crate) fn build(&self) -> Result<Plan, Vec<PlanError>> {
        let inventory = Inventory::new(&self.resources);
        let input = Input {
            intent: &self.intent,
            packs: &self.packs,
            inventory: &inventory,
            providers: &self.providers,
            policy: &self.policy,
            operations: &self.operations,
            recorded: self.recorded.as_ref(),
            roles: &self.roles,
        };
        opsgraph_core::plan::build(&input)
    }
}

pub(crate) fn nodes(n: usize) -> Vec<Resource> {
    (1..=n).map(|i| resource("compute_node", &format!("n{i}")).provides("linux.host", Default::default()).0).collect()
}

pub(crate) fn targets(intent: &mut Intent, n: usize) {
    intent.targets.insert("nodes".into(), (1..=n).map(|i| format!("compute_node/n{i}")).collect());
}

/// Builds the plan and shows its jobs with their dependencies, its gates — or its errors.
fn check(w: World, expect: Expect) {
    let text = match w.build() {
        Ok(plan) => {
            let mut s = String::new();
            for j in &plan.jobs {
                s.push_str(&format!("{} <- [{}]\n", j.id, j.depends_on.join(", ")));
            }
            for g in &plan.gates {
                s.push_str(&format!("gate {} ({}) before [{}]\n", g.id, g.type_, g.before.join(", ")));
            }
            s
        }
        Err(errors) => errors.iter().map(|e| format!("error[{}]: {e}\n", e.code())).collect(),
    };
    expect.assert_eq(&text);
}

#[test]
fn edges_come_from_contracts_per_instance() {
    // prepare@n fans out; install@n needs prepare's capability on the same node only; init (one
    // node) needs the runtime on every node (fan-in); verify needs init's artifact.
    let p = pack(
        "k",
        "cluster",
        vec![
            job("validate").produces("spec"),
            job("prepare")
                .on("nodes")
                .needs("spec")
                .requires(req("linux.host").scoped("nodes"))
                .provides("net.ready", Some("nodes")),
            job("install").on("nodes").requires(req("net.ready").scoped("nodes")).provides("runtime", Some("nodes")),
            job("init").requires(req("runtime").scoped("nodes")).produces("kubeconfig"),
            job("verify").needs("kubeconfig").after("validate"),
        ],
    );
    let mut i = intent("cluster", "prod");
    targets(&mut i, 3);
    let mut w = world(p, i);
    w.resources = nodes(3);
    check(
        w,
        expect![[r#"
            validate <- []
            prepare@n1 <- [validate]
            prepare@n2 <- [validate]
            prepare@n3 <- [validate]
            install@n1 <- [prepare@n1]
            install@n2 <- [prepare@n2]
            install@n3 <- [prepare@n3]
            init <- [install@n1, install@n2, install@n3]
            verify <- [init, validate]
        "#]],
    );
}

#[test]
fn planning_errors_name_the_problem() {
    // A cycle, with its path.
    let p = pack(
        "c",
        "thing",
        vec![job("a").needs("y").produces("x"), job("b").needs("x").produces("y"), job("c").after("a")],
    );
    check(
        world(p, intent("thing", "dev")),
        expect![[r#"
            error[P009]: the plan has a cycle: a -> b -> a
        "#]],
    );
    // Two providers of one output; a requirement nobody provides; an unknown job.
    let p = pack(
        "d",
        "thing",
        vec![job("a").provides("k", None), job("b").provides("k", None).needs("ghost"), job("c").after("nope")],
    );
    check(
        world(p, intent("thing", "dev")),
        expect![[r#"
            error[P007]: capability k is provided by two jobs: a and b
            error[P008]: job `b` requires artifact ghost, and no job of the plan provides it
            error[P006]: unknown job `nope` (named by c)
        "#]],
    );
    // Targets that do not exist or have the wrong type; a target no scope reads.
    let p = pack("e", "thing", vec![job("a").on("nodes")]);
    let mut i = intent("thing", "dev");
    i.targets.insert("nodes".into(), vec!["compute_node/ghost".into(), "cluster/c1".into()]);
    i.targets.insert("workers".into(), vec![]);
    let mut w = world(p, i);
    w.resources = vec![resource("cluster", "c1").0];
    check(
        w,
        expect![[r#"
            error[P004]: target `compute_node/ghost` of scope `nodes` is not in the inventory
            error[P004]: target `cluster/c1` of scope `nodes` is a cluster, the scope takes compute_node
            error[P004]: the intent targets `workers`, which no scope of template `e.run` reads
        "#]],
    );
    // No pack for the type; no template for the action.
    let p = pack("f", "thing", vec![job("a")]);
    check(
        world(p.clone(), intent("other", "dev")),
        expect![[r#"
            error[P001]: no loaded pack manages resource type `other` (managed types: thing)
        "#]],
    );
    let mut i = intent("thing", "dev");
    i.action = "upgrade".into();
    check(
        world(p, i),
        expect![[r#"
            error[P002]: pack `f` has no plan template for action `upgrade` (actions with templates: run)
        "#]],
    );
}

#[test]
fn scoped_requirements_must_hold_on_every_target() {
    let p = pack("g", "thing", vec![job("a").on("nodes").requires(req("package.manager.apt").scoped("nodes"))]);
    let mut i = intent("thing", "dev");
    targets(&mut i, 2);
    let mut w = world(p, i);
    w.resources = vec![
        resource("compute_node", "n1").provides("package.manager.apt", Default::default()).0,
        resource("compute_node", "n2").provides("linux.host", Default::default()).0,
    ];
    let plan = w.build().unwrap();
    assert!(plan.is_blocked());
    expect![[r#"
        Capabilities
          package.manager.apt @ nodes  unsatisfiable  1 of 2 resources of scope nodes do not provide package.manager.apt as required
                                         rejected compute_node/n2: it does not provide package.manager.apt
    "#]]
    .assert_eq(&section(&opsgraph_core::plan::render::text(&plan), "Capabilities"));
}

#[test]
fn destructive_jobs_get_a_gate_before_them() {
    let p = pack("h", "thing", vec![job("backup").produces("dump"), job("drop").needs("dump").destructive()]);
    check(
        world(p, intent("thing", "dev")),
        expect![[r#"
            backup <- []
            drop <- [backup, confirm-drop]
            gate confirm-drop (destructive_action) before [drop]
        "#]],
    );
}

#[test]
fn a_rolling_job_runs_its_instances_one_at_a_time() {
    // drain@n is parallel (the default); upgrade@n waits for its own node's drain and for the
    // upgrade of the node before it, so one node at a time is out of service.
    let p = pack(
        "r",
        "cluster",
        vec![
            job("drain").on("nodes").provides("drained", Some("nodes")),
            job("upgrade").on("nodes").requires(req("drained").scoped("nodes")).one_at_a_time(),
        ],
    );
    let mut i = intent("cluster", "prod");
    targets(&mut i, 3);
    let mut w = world(p, i);
    w.resources = nodes(3);
    let plan = w.build().unwrap();
    assert_eq!(
        opsgraph_core::plan::job_edges(&plan).into_iter().collect::<Vec<_>>(),
        [("drain".to_string(), "upgrade".to_string())],
        "the job-level graph stays a DAG without a self-edge"
    );
    check(
        w,
        expect![[r#"
            drain@n1 <- []
            drain@n2 <- []
            drain@n3 <- []
            upgrade@n1 <- [drain@n1]
            upgrade@n2 <- [drain@n2, upgrade@n1]
            upgrade@n3 <- [drain@n3, upgrade@n2]
        "#]],
    );
}

#[test]
fn a_destructive_job_with_no_instance_gets_no_gate() {
    // `wipe` runs on every node of `nodes`; the intent names none, so nothing is wiped and
    // nobody is asked to confirm it.
    let p = pack("w", "thing", vec![job("backup"), job("wipe").on("nodes").destructive()]);
    let mut i = intent("thing", "dev");
    targets(&mut i, 0);
    check(
        world(p, i),
        expect![[r#"
            backup <- []
        "#]],
    );
}

#[test]
fn fan_out_scales_to_ten_thousand_instances() {
    // 1,000 nodes x 10 jobs: the shape of the performance goal, checked here for correctness only.
    let mut jobs =
        vec![job("j0").on("nodes").requires(req("linux.host").scoped("nodes")).provides("c0", Some("nodes"))];
    for k in 1..10 {
        jobs.push(
            job(&format!("j{k}"))
                .on("nodes")
                .requires(req(&format!("c{}", k - 1)).scoped("nodes"))
                .provides(&format!("c{k}"), Some("nodes")),
        );
    }
    let p = pack("big", "thing", jobs);
    let mut i = intent("thing", "dev");
    targets(&mut i, 1000);
    let mut w = world(p, i);
    w.resources = nodes(1000);
    let plan = w.build().unwrap();
    assert_eq!(plan.jobs.len(), 10_000);
    let j5 = plan.jobs.iter().find(|j| j.id == "j5@n500").unwrap();
    assert_eq!(j5.depends_on, vec!["j4@n500"]);
}

#[test]
fn limits_refuse_oversized_plans_before_building_them() {
    let p = pack("lim", "thing", vec![job("a").on("nodes").requires(req("linux.host").scoped("nodes"))]);
    let mut i = intent("thing", "dev");
    targets(&mut i, 10_001);
    check(
        world(p.clone(), i),
        expect![[r#"
            error[P010]: resources of one target list (fan-out): 10001, above the limit of 10000
        "#]],
    );
    let mut i = intent("thing", "dev");
    i.parameters.insert("blob".into(), serde_json::json!("x".repeat(70_000)));
    check(
        world(p.clone(), i),
        expect![[r#"
            error[P010]: bytes of one parameter value: 70002, above the limit of 65536
        "#]],
    );
    let mut i = intent("thing", "dev");
    for n in 0..300 {
        i.parameters.insert(format!("p{n}"), serde_json::json!(n));
    }
    check(
        world(p, i),
        expect![[r#"
            error[P010]: parameters of the intent: 300, above the limit of 256
        "#]],
    );
}

#[test]
fn the_reviewer_points_out_unproven_outputs_and_what_cannot_be_undone() {
    let mut p = pack("rv", "thing", vec![job("make").provides("rv.made", None), job("drop").destructive()]);
    p.manifest.risk.default_level = opsgraph_core::model::RiskLevel::High;
    let w = world(p, intent("thing", "dev"));
    let plan = w.build().unwrap();
    expect![[r#"
        Review
          warning[no-evidence]: make provides rv.made but no evidence proves it: its exit code alone decides
          warning[no-rollback]: make cannot be undone (rollback not declared) in a high-risk plan
          warning[no-rollback]: drop cannot be undone (rollback not declared) in a high-risk plan
    "#]]
    .assert_eq(&section(&opsgraph_core::plan::render::text(&plan), "Review"));
}
