//! Refusals ([I]): a template's `refuse:` rules, checked when the pack is loaded (each problem at
//! its line and column) and evaluated when a plan is built — against the plan's parameters after
//! inheritance, its targets and the recorded resource — refusing the plan with `P012`.

use std::collections::{BTreeMap, BTreeSet};

use expect_test::{expect, Expect};
use opsgraph_core::model::{Intent, ResourceStatus};
use opsgraph_core::pack::{check_pack, Pack, PackFile};
use opsgraph_core::plan::Recorded;
use serde_json::{json, Value};

use crate::builders::*;
use crate::plan::world;

const MANIFEST: &str = "scenario_pack:
  id: ring
  version: 1.0.0
  resource_types: [ring.cluster]
  actions: [create, scale, remove_node]
  plan_templates: [{id: ring.create}, {id: ring.scale}, {id: ring.remove_node}]
";

const JOBS: &str = "job:
  id: converge
  scope: {resources: [compute_node]}
  run: {command: [\"true\"]}
";

/// Scale refuses an even member count without `force`; remove_node refuses removing every
/// control-plane node the record names.
const TEMPLATES: &str = "plan_template:
  id: ring.create
  action: create
  parameters:
    members: {type: string, default: n1}
  scopes:
    control_plane: {resource_type: compute_node, from: targets.control_plane}
    nodes: {resource_type: compute_node, from: [targets.control_plane, targets.workers]}
  stages: [{id: all, name: All, jobs: [converge]}]
  jobs: [converge]
---
plan_template:
  id: ring.scale
  action: scale
  parameters:
    members: {type: string}
    force: {type: boolean, default: false}
    size: {type: integer, default: 3}
  scopes:
    nodes: {resource_type: compute_node, from: targets.control_plane}
  refuse:
    - when:
        - {count_of: params.members, parity: even}
        - {of: params.force, not_equals: true}
      message: an even member count tolerates no more failures than one fewer; give force true to scale anyway
    - when: [{of: params.size, below: 1}]
      message: a ring needs a member
    - when: [{count_of: params.members, below: 1}]
      message: a ring needs a member
  stages: [{id: all, name: All, jobs: [converge]}]
  jobs: [converge]
---
plan_template:
  id: ring.remove_node
  action: remove_node
  scopes:
    nodes: {resource_type: compute_node, from: targets.remove, min: 1}
  refuse:
    - when: [{of: targets.remove, includes_all: recorded.targets.control_plane}]
      message: it would remove the last control-plane node
    - when: [{of: observed.version, equals: \"0.9\"}]
      message: nodes of version 0.9 cannot leave a ring
  stages: [{id: all, name: All, jobs: [converge]}]
  jobs: [converge]
";

fn load(templates: &str) -> Result<Pack, String> {
    let files = [("pack.yaml", MANIFEST), ("templates.yaml", templates), ("jobs.yaml", JOBS)];
    let files: Vec<PackFile> =
        files.iter().map(|(p, t)| PackFile { path: p.to_string(), text: t.to_string() }).collect();
    let paths: BTreeSet<String> = files.iter().map(|f| f.path.clone()).collect();
    let (pack, diags) = check_pack("ring", &files, &paths);
    let errors: Vec<String> = diags.iter().filter(|d| d.is_error()).map(ToString::to_string).collect();
    match pack {
        Some(p) if errors.is_empty() => Ok(p),
        _ => Err(errors.join("\n") + "\n"),
    }
}

/// `ring.cluster/r1` as recorded: created on n1 (control plane) and n2, members n1,n2,n3.
fn recorded(observed_version: &str) -> Recorded {
    let mut resource = resource("ring.cluster", "r1").0;
    resource.status = Some(ResourceStatus::Running);
    resource.observed.insert("version".into(), observed_version.into());
    let ids = |ns: &[&str]| ns.iter().map(|n| format!("compute_node/{n}")).collect::<Vec<_>>();
    Recorded {
        resource,
        created_by: "create".into(),
        operation: "op-1".into(),
        parameters: attrs(&[("members", json!("n1,n2,n3"))]),
        targets: BTreeMap::from([("control_plane".to_string(), ids(&["n1"])), ("workers".to_string(), ids(&["n2"]))]),
    }
}

fn ring(action: &str, parameters: &[(&str, Value)], targets: &[(&str, &[&str])]) -> Intent {
    let mut i = intent("ring.cluster", "dev");
    i.action = action.into();
    i.name = Some("r1".into());
    i.parameters = attrs(parameters);
    for (k, ns) in targets {
        i.targets.insert(k.to_string(), ns.iter().map(|n| format!("compute_node/{n}")).collect());
    }
    i
}

/// Plans each case's intent against its record: per case, `label: ` and the plan's jobs or its
/// errors.
fn check(cases: Vec<(&str, Intent, Option<Recorded>)>, expect: Expect) {
    let mut text = String::new();
    for (label, intent, recorded) in cases {
        let w = world(load(TEMPLATES).unwrap(), intent).on_nodes(&["n1", "n2", "n3"]).recorded(recorded);
        text.push_str(&match w.build() {
            Ok(plan) => {
                format!("{label}: planned {}\n", plan.jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>().join(", "))
            }
            Err(errors) => errors.iter().map(|e| format!("{label}: error[{}]: {e}\n", e.code())).collect(),
        });
    }
    expect.assert_eq(&text);
}

#[test]
fn an_even_member_count_is_refused_unless_forced() {
    check(
        vec![
            ("four members", ring("scale", &[("members", json!("n1,n2,n3,n4"))], &[]), Some(recorded("1.0"))),
            (
                "four members, forced",
                ring("scale", &[("members", json!("n1, n2, n3,n4")), ("force", json!(true))], &[]),
                Some(recorded("1.0")),
            ),
            ("two members", ring("scale", &[("members", json!("n1,n2"))], &[]), Some(recorded("1.0"))),
            ("five members", ring("scale", &[("members", json!("n1,n2,n3,n4,n5"))], &[]), Some(recorded("1.0"))),
        ],
        expect![[r#"
            four members: error[P012]: refused by template `ring.scale`: an even member count tolerates no more failures than one fewer; give force true to scale anyway (the count of params.members is 4, even; params.force is false, not true)
            four members, forced: planned converge@n1
            two members: error[P012]: refused by template `ring.scale`: an even member count tolerates no more failures than one fewer; give force true to scale anyway (the count of params.members is 2, even; params.force is false, not true)
            five members: planned converge@n1
        "#]],
    );
}

#[test]
fn a_refusal_reads_inherited_and_defaulted_parameters() {
    check(
        vec![
            // members comes from the record (three: odd); size is given below one.
            ("size 0", ring("scale", &[("size", json!(0))], &[]), Some(recorded("1.0"))),
            // No record: no members at all, counted as none.
            ("no record", ring("scale", &[], &[("control_plane", &["n1"])]), None),
        ],
        expect![[r#"
            size 0: error[P012]: refused by template `ring.scale`: a ring needs a member (params.size is 0, below 1)
            no record: error[P012]: refused by template `ring.scale`: an even member count tolerates no more failures than one fewer; give force true to scale anyway (the count of params.members is 0, even; params.force is false, not true)
        "#]],
    );
}

#[test]
fn removing_every_recorded_control_plane_node_is_refused() {
    check(
        vec![
            ("remove n1 and n2", ring("remove_node", &[], &[("remove", &["n1", "n2"])]), Some(recorded("1.0"))),
            ("remove n2", ring("remove_node", &[], &[("remove", &["n2"])]), Some(recorded("1.0"))),
            // Without a record there is no control plane to lose; observed values count when recorded.
            ("remove n1, no record", ring("remove_node", &[], &[("remove", &["n1"])]), None),
            ("remove n2 of version 0.9", ring("remove_node", &[], &[("remove", &["n2"])]), Some(recorded("0.9"))),
        ],
        expect![[r#"
            remove n1 and n2: error[P012]: refused by template `ring.remove_node`: it would remove the last control-plane node (targets.remove (compute_node/n1, compute_node/n2) includes all of recorded.targets.control_plane (compute_node/n1))
            remove n2: planned converge@n2
            remove n1, no record: planned converge@n1
            remove n2 of version 0.9: error[P012]: refused by template `ring.remove_node`: nodes of version 0.9 cannot leave a ring (observed.version is 0.9, equal to 0.9)
        "#]],
    );
}

/// Bad rules are refused when the pack loads, each at its line and column.
#[test]
fn bad_rules_are_reported_where_they_are_written() {
    let bad = "plan_template:
  id: ring.create
  action: create
  parameters:
    members: {type: string}
    force: {type: boolean}
    password: {type: string, secret: true}
  scopes:
    nodes: {resource_type: compute_node, from: targets.nodes}
  refuse:
    - when: [{of: params.member, parity: even}]
      message: typo
    - when: [{of: params.members, below: 3}]
      message: a string is not a number
    - when: [{of: params.force, equals: \"yes\"}]
      message: a boolean is not a string
    - when: [{count_of: targets.node, above: 1}]
      message: typo
    - when: [{of: targets.nodes, equals: 1}]
      message: a list is not one value
    - when: [{of: param.members, equals: 1}]
      message: bad reference
    - when: [{of: params.password, equals: x}]
      message: secret
    - when: [{count_of: params.members, includes_all: targets.nodes}]
      message: counted list
    - when: [{of: params.members}]
      message: no test
    - when: [{of: params.members, count_of: params.members, equals: 1}]
      message: two subjects
    - when: []
      message: no condition
  stages: [{id: all, name: All, jobs: [converge]}]
  jobs: [converge]
---
plan_template:
  id: ring.scale
  action: scale
  stages: [{id: all, name: All, jobs: [converge]}]
  jobs: [converge]
---
plan_template:
  id: ring.remove_node
  action: remove_node
  stages: [{id: all, name: All, jobs: [converge]}]
  jobs: [converge]
";
    expect![[r#"
        ring/pack.yaml:6:25: error[E009]: unknown plan template `ring.create`
          = expected: one of ring.scale, ring.remove_node
        ring/templates.yaml:11:19: error[E009]: unknown parameter `member`
          = hint: did you mean `members`?
        ring/templates.yaml:13:42: error[E006]: `below` tests a number, and `params.members` is not one (count a list's items with `count_of`)
        ring/templates.yaml:15:41: error[E006]: `params.force` is a boolean; `equals: yes` can never match it
        ring/templates.yaml:17:25: error[E009]: unknown target `node`
          = hint: did you mean `nodes`?
        ring/templates.yaml:19:42: error[E006]: `equals` compares one value, and `targets.nodes` is a list (use `count_of` or `includes_all`)
        ring/templates.yaml:21:19: error[E006]: unknown reference `param.members`
          = expected: `params.NAME`, `targets.NAME`, `recorded.NAME`, `recorded.targets.NAME` or `observed.NAME`
        ring/templates.yaml:23:19: error[E006]: parameter `password` is secret: a refusal does not read secret values
        ring/templates.yaml:25:55: error[E006]: `includes_all` tests a list: use `of`, not `count_of`
        ring/templates.yaml:27:14: error[E004]: refusal condition needs one of `equals`, `not_equals`, `below`, `above`, `parity`, `includes_all`
          = expected: exactly one of `equals`, `not_equals`, `below`, `above`, `parity`, `includes_all`
        ring/templates.yaml:29:45: error[E006]: a refusal condition takes only one of `of`, `count_of`
          = expected: `of` (the value) or `count_of` (the number of its items)
        ring/templates.yaml:31:13: error[E006]: a refusal without conditions refuses every plan
          = expected: at least one condition
    "#]].assert_eq(&load(bad).unwrap_err());
}
