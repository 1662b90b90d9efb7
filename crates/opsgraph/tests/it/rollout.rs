//! Fleet rollouts ([P]) at scale on the real runtime: 200 local hosts upgraded in waves
//! `[1, 5%, 25%, 100%]` (1 + 10 + 50 + 139) behind a canary gate, three hosts of wave 2 made to
//! fail (a marker file per host), a budget of 2 crossed: the operation pauses with exactly the
//! hosts of waves 1 and 2 done or failed and the rest untouched; one failed host skipped by a
//! patch, the rollout goes on within its budget to the end, and the two hosts left failed are
//! retried. Checks between waves: a host that passed its job but not the resource's check
//! pauses the rollout after its wave, on the hosts done or on the whole resource.

use expect_test::expect;
use opsgraph_core::model::OperationState;
use opsgraph_runtime::{Error, GateAnswer, Runtime};
use opsgraph_store_sqlite::{Durability, SqliteStore};

use crate::support::{temp_dir, TempDir};

const HOSTS: usize = 200;

fn files() -> Vec<(String, String)> {
    files_for(HOSTS, "{waves: [1, 5%, 25%, 100%], max_failures: 2, canary_gate: true, verify_between_waves: none}")
}

/// The fleet pack over `hosts` hosts with `rollout` as its upgrade's: its job proves each host
/// `upgraded`, and the pack's verification of a `fleet.group` is `healthy` on every host (no
/// `sick/<host>` marker): what the checks between waves run.
fn files_for(hosts: usize, rollout: &str) -> Vec<(String, String)> {
    let mut world = String::new();
    let mut targets = Vec::new();
    for i in 1..=hosts {
        world.push_str(&format!(
            "---\nresource: {{type: compute_node, name: n{i:03}, access: {{local: true}}, provides: [linux.host]}}\n"
        ));
        targets.push(format!("compute_node/n{i:03}"));
    }
    vec![
        (
            "fleet/pack.yaml".into(),
            "scenario_pack:\n  id: fleet\n  version: 1.0.0\n  title: Fleet\n  resource_types: [fleet.group]\n  actions: [upgrade]\n  plan_templates: [{id: fleet.upgrade}]\n  resources:\n    - {type: fleet.group, on: [upgrade], interval: 1m, verify: [healthy]}\n".into(),
        ),
        (
            "fleet/evidence.yaml".into(),
            r#"evidence:
  - {id: upgraded, source: command, command: 'test -e "$OPSGRAPH_LAB_DIR/done/$OPSGRAPH_TARGET_NAME"', expected_exit_code: 0}
  - {id: healthy, source: command, command: 'test ! -e "$OPSGRAPH_LAB_DIR/sick/$OPSGRAPH_TARGET_NAME"', expected_exit_code: 0}
"#
            .into(),
        ),
        (
            "fleet/templates.yaml".into(),
            "plan_template:\n  id: fleet.upgrade\n  action: upgrade\n  scopes:\n    nodes: {resource_type: compute_node, from: targets.nodes}\n  stages:\n    - {id: upgrade, name: Upgrade, jobs: [upgrade, report]}\n  jobs: [upgrade, report]\n".into(),
        ),
        (
            "fleet/jobs.yaml".into(),
            r#"job:
  id: upgrade
  scope: {resources: [compute_node]}
  inputs:
    requires:
      capabilities: [{key: linux.host, scope: nodes}]
  outputs: {evidence: [upgraded]}
  controls:
    rollout: ROLLOUT
  run: {script: scripts/upgrade.sh}
---
job:
  id: report
  after: [upgrade]
  run: {command: [true]}
"#
            .replace("ROLLOUT", rollout),
        ),
        (
            "fleet/scripts/upgrade.sh".into(),
            "if [ -e \"$OPSGRAPH_LAB_DIR/fail/$OPSGRAPH_TARGET_NAME\" ]; then sleep 1; echo \"upgrade failed on $OPSGRAPH_TARGET_NAME\" >&2; exit 1; fi\nmkdir -p \"$OPSGRAPH_LAB_DIR/done\"\ntouch \"$OPSGRAPH_LAB_DIR/done/$OPSGRAPH_TARGET_NAME\"\n".into(),
        ),
        ("world.yaml".into(), world),
        (
            "intent.yaml".into(),
            format!(
                "intent:\n  target_resource_type: fleet.group\n  action: upgrade\n  name: workers\n  environment: prod\n  targets: {{nodes: [{}]}}\n",
                targets.join(", ")
            ),
        ),
    ]
}

struct Fleet {
    dir: TempDir,
}

impl Fleet {
    fn new() -> Fleet {
        Fleet::with(files())
    }

    fn with(files: Vec<(String, String)>) -> Fleet {
        let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        Fleet { dir: temp_dir(&refs) }
    }

    fn loaded(&self) -> opsgraph::plan_cmd::Loaded {
        use opsgraph::load::Source;
        let p = |rel: &str| self.dir.join(rel).display().to_string();
        opsgraph::plan_cmd::load_inputs(
            &Source::parse(&p("intent.yaml")),
            opsgraph::load::packs(&[Source::parse(&p("fleet"))]),
            &[Source::parse(&p("world.yaml"))],
        )
    }

    fn runtime(&self) -> Runtime {
        let loaded = self.loaded();
        assert!(loaded.diagnostics.is_empty(), "{:?}", loaded.diagnostics);
        let data = self.dir.join("data");
        std::fs::create_dir_all(data.join("lab/fail")).unwrap();
        let store = SqliteStore::open(&data.join("opsgraph.db"), Durability::Full).unwrap();
        let mut rt = Runtime::new(Box::new(store), loaded.packs, loaded.world.resources, data);
        // Every instance of wave 2 at once, so what has run when the budget is spent is exact.
        rt.concurrency = 16;
        rt
    }

    fn fail(&self, hosts: &[&str]) {
        for h in hosts {
            std::fs::write(self.dir.join(&format!("data/lab/fail/{h}")), "").unwrap();
        }
    }

    fn heal(&self) {
        std::fs::remove_dir_all(self.dir.join("data/lab/fail")).unwrap();
    }

    /// Hosts whose job passes and whose `healthy` check fails.
    fn sicken(&self, hosts: &[&str]) {
        std::fs::create_dir_all(self.dir.join("data/lab/sick")).unwrap();
        for h in hosts {
            std::fs::write(self.dir.join(&format!("data/lab/sick/{h}")), "").unwrap();
        }
    }

    fn cure(&self) {
        std::fs::remove_dir_all(self.dir.join("data/lab/sick")).unwrap();
    }
}

fn answer(actor: &str) -> GateAnswer {
    GateAnswer { option: "continue rollout".into(), actor: actor.into(), role: "sre".into(), value: None }
}

/// The upgrade's hosts by state: `succeeded 8: n001, …`.
fn hosts_by_state(rt: &Runtime, op: &str) -> String {
    let mut by: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for j in rt.store().jobs(op).unwrap() {
        if let Some(host) = j.id.strip_prefix("upgrade@") {
            by.entry(j.state.as_str()).or_default().push(host.to_string());
        }
    }
    by.iter()
        .map(|(state, hosts)| {
            let shown = if hosts.len() > 12 { format!("{}, …", hosts[..3].join(", ")) } else { hosts.join(", ") };
            format!("{state} {}: {shown}\n", hosts.len())
        })
        .collect()
}

/// The rollout's own timeline entries, and the operation's pauses and resumptions.
fn rollout_timeline(rt: &Runtime, op: &str) -> String {
    rt.store()
        .timeline(op)
        .unwrap()
        .iter()
        .filter(|e| e.event.starts_with("wave_") || e.event == "rollout_paused" || e.to.is_some())
        .map(|e| format!("{} {}\n", e.event, e.reason))
        .collect()
}

/// A patch that skips `job`, giving `reason` for the patch and the skip alike.
fn skip_patch(job: &str, reason: &str) -> opsgraph_core::model::PlanPatch {
    opsgraph_core::model::PlanPatch {
        id: None,
        operation: None,
        author: None,
        reason: Some(reason.into()),
        changes: vec![opsgraph_core::model::PatchChange::Skip { job: job.into(), reason: reason.into() }],
        approval: None,
    }
}

#[test]
fn a_rollout_over_200_hosts_pauses_when_wave_2_spends_its_budget_and_goes_on_after_a_skip_and_a_retry() {
    let fleet = Fleet::new();
    let mut rt = fleet.runtime();
    let plan = opsgraph::plan_cmd::build(&fleet.loaded()).unwrap();
    expect![[r#"
        Rollouts
          upgrade: 4 waves: 1 + 10 + 50 + 139 of 200 (budget 2, gate canary-upgrade after wave 1, from the pack)
            wave 1: n001
            wave 2: n002, n003, n004, n005, ... (10 in all)
            wave 3: n012, n013, n014, n015, ... (50 in all)
            wave 4: n062, n063, n064, n065, ... (139 in all)
    "#]]
    .assert_eq(&crate::preview_text::section(&opsgraph_core::plan::render::text(&plan), "Rollouts"));
    fleet.fail(&["n005", "n007", "n009"]);
    let op = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();

    // The canary gate opens once wave 1 ran: not before.
    let early = rt.answer_gate(&op, "canary-upgrade", &answer("user:bob")).unwrap_err();
    assert!(matches!(early, Error::GateNotOpen { .. }), "{early}");
    expect!["gate `canary-upgrade` opens once upgrade@n001 finished; it cannot be answered before (only cancelled)"]
        .assert_eq(&early.to_string());
    let state = rt.drive(&op, &mut |_| {}).unwrap();
    assert_eq!(state, OperationState::Paused { reason: "waiting for gate canary-upgrade".into() });
    expect![[r#"
        pending 199: n002, n003, n004, …
        succeeded 1: n001
    "#]]
    .assert_eq(&hosts_by_state(&rt, &op));
    // Four eyes: whoever created the rollout does not wave its canary through.
    let own = rt.answer_gate(&op, "canary-upgrade", &answer("user:alice")).unwrap_err();
    assert!(matches!(own, Error::SelfApproval { .. }), "{own}");
    assert_eq!(rt.answer_gate(&op, "canary-upgrade", &answer("user:bob")).unwrap(), OperationState::Running);

    // Wave 2: three of its ten hosts fail, one more than the budget of 2: the operation pauses
    // (it does not fail) with waves 1 and 2 run and nothing of waves 3 and 4 started.
    let state = rt.drive(&op, &mut |_| {}).unwrap();
    let OperationState::Paused { reason } = &state else { panic!("{state:?}") };
    expect!["rollout of upgrade paused in wave 2 of 4: 3 failed, over its budget of 2; failed: n005, n007, n009; 8 done, 0 running, 189 untouched; retry or skip the failed hosts, roll back, or cancel"]
        .assert_eq(reason);
    expect![[r#"
        failed 3: n005, n007, n009
        pending 189: n012, n013, n014, …
        succeeded 8: n001, n002, n003, n004, n006, n008, n010, n011
    "#]]
    .assert_eq(&hosts_by_state(&rt, &op));
    let paused = rt.store().timeline(&op).unwrap().into_iter().find(|e| e.event == "rollout_paused").unwrap();
    assert_eq!(paused.data["failed"], serde_json::json!(["n005", "n007", "n009"]));
    assert_eq!(paused.data["done"].as_array().unwrap().len(), 8);
    assert_eq!(paused.data["untouched"].as_array().unwrap().len(), 189);
    // Resumed as it is, the spent budget pauses it again at once, starting nothing.
    rt.resume(&op, "user:bob").unwrap();
    assert!(matches!(rt.drive(&op, &mut |_| {}).unwrap(), OperationState::Paused { .. }));
    assert!(hosts_by_state(&rt, &op).contains("pending 189"));

    // n009 is skipped by a reviewed patch: two failures are left, within the budget, and the
    // rollout goes on through waves 3 and 4 with n005 and n007 failed.
    let skip = skip_patch("upgrade@n009", "n009 is being replaced");
    // It changes what runs in a plan a person approved (the canary): a third person approves it.
    let proposal = rt.propose_patch(&op, &skip, "user:bob").unwrap();
    assert_eq!(proposal.gate.as_deref(), Some("patch-p1"), "{:?}", proposal.approval);
    assert!(matches!(proposal.state, OperationState::Paused { .. }), "{:?}", proposal.state);
    let approve = |actor: &str| GateAnswer {
        option: "approve patch".into(),
        actor: actor.into(),
        role: "sre".into(),
        value: None,
    };
    assert!(rt.answer_gate(&op, "patch-p1", &approve("user:bob")).is_err(), "not by its author");
    assert_eq!(rt.answer_gate(&op, "patch-p1", &approve("user:carol")).unwrap(), OperationState::Running);
    let state = rt.drive(&op, &mut |_| {}).unwrap();
    // The end: every other host done, the report (after every host) never ran: the operation
    // fails naming the first host still failed.
    let OperationState::Failed { reason } = &state else { panic!("{state:?}") };
    expect!["upgrade@n005: exited with code 1: upgrade failed on n005"].assert_eq(reason);
    expect![[r#"
        failed 2: n005, n007
        skipped 1: n009
        succeeded 197: n001, n002, n003, …
    "#]]
    .assert_eq(&hosts_by_state(&rt, &op));

    // The hosts repaired, their retry runs them again and the operation completes.
    fleet.heal();
    rt.retry(&op, &[], "user:bob").unwrap();
    assert_eq!(rt.drive(&op, &mut |_| {}).unwrap(), OperationState::Completed);
    expect![[r#"
        skipped 1: n009
        succeeded 199: n001, n002, n003, …
    "#]]
    .assert_eq(&hosts_by_state(&rt, &op));
    assert_eq!(std::fs::read_dir(fleet.dir.join("data/lab/done")).unwrap().count(), HOSTS - 1);
    expect![[r#"
        plan_built plan preview built
        resolve capabilities resolved
        start no approval needed
        wave_started upgrade wave 1 of 4: 1 instance(s) (n001)
        wave_finished upgrade wave 1 of 4 finished: 1 done, 0 failed; budget left 2 of 2
        pause waiting for gate canary-upgrade
        resume canary-upgrade answered
        wave_started upgrade wave 2 of 4: 10 instance(s) (n002, n003, n004, n005, n006, ... (10 in all))
        pause rollout of upgrade paused in wave 2 of 4: 3 failed, over its budget of 2; failed: n005, n007, n009; 8 done, 0 running, 189 untouched; retry or skip the failed hosts, roll back, or cancel
        wave_finished upgrade wave 2 of 4 finished: 7 done, 3 failed (n005, n007, n009); budget left 0 of 2
        rollout_paused rollout of upgrade paused in wave 2 of 4: 3 failed, over its budget of 2; failed: n005, n007, n009; 8 done, 0 running, 189 untouched; retry or skip the failed hosts, roll back, or cancel
        resume resumed
        pause rollout of upgrade paused in wave 2 of 4: 3 failed, over its budget of 2; failed: n005, n007, n009; 8 done, 0 running, 189 untouched; retry or skip the failed hosts, roll back, or cancel
        rollout_paused rollout of upgrade paused in wave 2 of 4: 3 failed, over its budget of 2; failed: n005, n007, n009; 8 done, 0 running, 189 untouched; retry or skip the failed hosts, roll back, or cancel
        resume patch p1 applied: plan revision 2
        wave_started upgrade wave 3 of 4: 50 instance(s) (n012, n013, n014, n015, n016, ... (50 in all))
        wave_finished upgrade wave 3 of 4 finished: 50 done, 0 failed; budget left 0 of 2
        wave_started upgrade wave 4 of 4: 139 instance(s) (n062, n063, n064, n065, n066, ... (139 in all))
        wave_finished upgrade wave 4 of 4 finished: 139 done, 0 failed; budget left 0 of 2
        job_failed upgrade@n005: exited with code 1: upgrade failed on n005
        retry retry upgrade@n005, upgrade@n007
        wave_finished upgrade wave 2 of 4 finished: 10 done, 0 failed; budget left 2 of 2
        complete every job's outputs are verified by evidence
    "#]]
    .assert_eq(&rollout_timeline(&rt, &op));
}

#[test]
fn an_intent_overrides_the_packs_rollout_and_the_preview_shows_whose_it_is() {
    let fleet = Fleet::new();
    let p = |rel: &str| fleet.dir.join(rel).display().to_string();
    let intent = std::fs::read_to_string(p("intent.yaml")).unwrap()
        + "  rollouts:\n    upgrade: {waves: [50%], max_failures: 10%, max_in_flight: 20}\n";
    std::fs::write(p("override.yaml"), intent).unwrap();
    let plan = crate::support::opsgraph(&[
        "plan",
        "-f",
        &p("override.yaml"),
        "--packs",
        &p("fleet"),
        "--inventory",
        &p("world.yaml"),
    ]);
    assert_eq!(plan.code, 0, "{}", plan.render());
    expect![[r#"
        Rollouts
          upgrade: 2 waves: 100 + 100 of 200 (budget 20, 20 at once, checks between waves on the hosts done, from the intent)
            wave 1: n001, n002, n003, n004, ... (100 in all)
            then verify-upgrade-wave-1: upgraded; resource: healthy on the hosts done
            wave 2: n101, n102, n103, n104, ... (100 in all)
    "#]]
    .assert_eq(&crate::preview_text::section(&plan.out, "Rollouts"));
    // A bad value in the intent is reported where it is, and nothing is planned.
    std::fs::write(p("bad.yaml"), std::fs::read_to_string(p("override.yaml")).unwrap().replace("50%", "0%")).unwrap();
    let bad = crate::support::opsgraph(&[
        "plan",
        "-f",
        &p("bad.yaml"),
        "--packs",
        &p("fleet"),
        "--inventory",
        &p("world.yaml"),
    ]);
    assert_ne!(bad.code, 0);
    let errors: Vec<&str> = bad.err.lines().filter(|l| l.contains("error[")).collect();
    expect!["DIR/bad.yaml:8:23: error[E006]: `0%` is not a percentage from 1% to 100%"]
        .assert_eq(&errors.join("\n").replace(&fleet.dir.display().to_string(), "DIR"));
}

#[test]
fn checks_between_waves_pause_the_rollout_at_a_host_that_passed_its_job_but_not_its_checks() {
    let fleet = Fleet::with(files_for(12, "{waves: [2, 4, 100%], max_failures: 1}"));
    let mut rt = fleet.runtime();
    let plan = opsgraph::plan_cmd::build(&fleet.loaded()).unwrap();
    // The preview shows the checks between the waves, and where they run.
    expect![[r#"
        Rollouts
          upgrade: 3 waves: 2 + 4 + 6 of 12 (budget 1, checks between waves on the hosts done, from the pack)
            wave 1: n001, n002
            then verify-upgrade-wave-1: upgraded; resource: healthy on the hosts done
            wave 2: n003, n004, n005, n006
            then verify-upgrade-wave-2: upgraded; resource: healthy on the hosts done
            wave 3: n007, n008, n009, n010, ... (6 in all)
    "#]]
    .assert_eq(&crate::preview_text::section(&opsgraph_core::plan::render::text(&plan), "Rollouts"));
    // n004 upgrades fine (its job and its evidence pass) but is not healthy afterwards.
    fleet.sicken(&["n004"]);
    let op = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();
    let mut live = Vec::new();
    let state = rt.drive(&op, &mut opsgraph::render::live(&mut live, opsgraph::render::stage_of(&plan))).unwrap();
    let OperationState::Paused { reason } = &state else { panic!("{state:?}") };
    expect!["rollout of upgrade paused after wave 2 of 3: verify-upgrade-wave-2 failed: check healthy@n004 failed: expected exit code 0, observed exit code 1; failed: none; 6 done, 0 running, 6 untouched; retry verify-upgrade-wave-2 once fixed, skip it by a patch, roll back, or cancel"]
        .assert_eq(reason);
    expect![[r#"
        pending 6: n007, n008, n009, n010, n011, n012
        succeeded 6: n001, n002, n003, n004, n005, n006
    "#]]
    .assert_eq(&hosts_by_state(&rt, &op));
    // The checks' results are evidence records of their instance, one per check and host.
    let evidence = rt.store().evidence(&op).unwrap();
    let checked: Vec<String> = evidence
        .iter()
        .filter(|e| e.job == "verify-upgrade-wave-2")
        .map(|e| format!("{}{}", e.check, if e.passed { "" } else { " FAILED" }))
        .collect();
    assert_eq!(checked.len(), 12, "{checked:?}");
    assert!(checked.contains(&"healthy@n004 FAILED".to_string()), "{checked:?}");
    let paused = rt.store().timeline(&op).unwrap().into_iter().find(|e| e.event == "rollout_paused").unwrap();
    assert_eq!(paused.data["check"], "verify-upgrade-wave-2");
    assert_eq!(paused.data["untouched"].as_array().unwrap().len(), 6);
    // The live view shows each wave's progress and the budget left as the hosts finish: a line
    // under each instance's (several finishing together show where their wave stands after all
    // of them), the wave's last one before its end.
    let live = String::from_utf8(live).unwrap();
    let lines: Vec<&str> =
        live.lines().filter(|l| l.contains("upgrade wave ")).map(|l| l.get(10..).unwrap_or(l).trim_end()).collect();
    assert_eq!(lines.iter().filter(|l| l.starts_with("Upgrade ")).count(), 6, "{live}");
    let shown: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(i, l)| !l.starts_with("Upgrade ") || lines.get(i + 1).is_some_and(|n| n.starts_with("wave_finished")))
        .map(|(_, l)| *l)
        .collect();
    expect![[r#"
        wave_started: upgrade wave 1 of 3: 2 instance(s) (n001, n002)
        Upgrade            upgrade wave 1/3: 2/2 done, 0 failed, budget 1 left
        wave_finished: upgrade wave 1 of 3 finished: 2 done, 0 failed; budget left 1 of 1; next: verify-upgrade-wave-1
        wave_started: upgrade wave 2 of 3: 4 instance(s) (n003, n004, n005, n006)
        Upgrade            upgrade wave 2/3: 4/4 done, 0 failed, budget 1 left
        wave_finished: upgrade wave 2 of 3 finished: 4 done, 0 failed; budget left 1 of 1; next: verify-upgrade-wave-2"#]]
    .assert_eq(&shown.join("\n"));

    // Resumed as it is, the failed checks pause it again; n004 cured, their retry passes and the
    // rollout runs to the end.
    rt.resume(&op, "user:bob").unwrap();
    assert!(matches!(rt.drive(&op, &mut |_| {}).unwrap(), OperationState::Paused { .. }));
    assert!(hosts_by_state(&rt, &op).contains("pending 6"));
    fleet.cure();
    rt.retry(&op, &[], "user:bob").unwrap();
    assert_eq!(rt.drive(&op, &mut |_| {}).unwrap(), OperationState::Completed);
    expect![[r#"
        plan_built plan preview built
        resolve capabilities resolved
        start no approval needed
        wave_started upgrade wave 1 of 3: 2 instance(s) (n001, n002)
        wave_finished upgrade wave 1 of 3 finished: 2 done, 0 failed; budget left 1 of 1; next: verify-upgrade-wave-1
        wave_started upgrade wave 2 of 3: 4 instance(s) (n003, n004, n005, n006)
        wave_finished upgrade wave 2 of 3 finished: 4 done, 0 failed; budget left 1 of 1; next: verify-upgrade-wave-2
        pause rollout of upgrade paused after wave 2 of 3: verify-upgrade-wave-2 failed: check healthy@n004 failed: expected exit code 0, observed exit code 1; failed: none; 6 done, 0 running, 6 untouched; retry verify-upgrade-wave-2 once fixed, skip it by a patch, roll back, or cancel
        rollout_paused rollout of upgrade paused after wave 2 of 3: verify-upgrade-wave-2 failed: check healthy@n004 failed: expected exit code 0, observed exit code 1; failed: none; 6 done, 0 running, 6 untouched; retry verify-upgrade-wave-2 once fixed, skip it by a patch, roll back, or cancel
        resume resumed
        pause rollout of upgrade paused after wave 2 of 3: verify-upgrade-wave-2 failed: check healthy@n004 failed: expected exit code 0, observed exit code 1; failed: none; 6 done, 0 running, 6 untouched; retry verify-upgrade-wave-2 once fixed, skip it by a patch, roll back, or cancel
        rollout_paused rollout of upgrade paused after wave 2 of 3: verify-upgrade-wave-2 failed: check healthy@n004 failed: expected exit code 0, observed exit code 1; failed: none; 6 done, 0 running, 6 untouched; retry verify-upgrade-wave-2 once fixed, skip it by a patch, roll back, or cancel
        retry retry verify-upgrade-wave-2
        wave_started upgrade wave 3 of 3: 6 instance(s) (n007, n008, n009, n010, n011, ... (6 in all))
        wave_finished upgrade wave 3 of 3 finished: 6 done, 0 failed; budget left 1 of 1
        complete every job's outputs are verified by evidence
    "#]]
    .assert_eq(&rollout_timeline(&rt, &op));
}

#[test]
fn checks_on_the_whole_resource_find_a_sick_host_the_rollout_has_not_reached() {
    let fleet = Fleet::with(files_for(6, "{waves: [1, 100%], verify_between_waves: resource}"));
    let mut rt = fleet.runtime();
    let plan = opsgraph::plan_cmd::build(&fleet.loaded()).unwrap();
    fleet.sicken(&["n005"]);
    let op = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();
    let state = rt.drive(&op, &mut |_| {}).unwrap();
    let OperationState::Paused { reason } = &state else { panic!("{state:?}") };
    expect!["rollout of upgrade paused after wave 1 of 2: verify-upgrade-wave-1 failed: check healthy@n005 failed: expected exit code 0, observed exit code 1; failed: none; 1 done, 0 running, 5 untouched; retry verify-upgrade-wave-1 once fixed, skip it by a patch, roll back, or cancel"]
        .assert_eq(reason);
    // Skipped by a reviewed patch (a person decides n005's health is another matter), the
    // rollout goes on.
    let skip = skip_patch("verify-upgrade-wave-1", "n005 is known sick, tracked elsewhere");
    let proposal = rt.propose_patch(&op, &skip, "user:bob").unwrap();
    if let Some(gate) = proposal.gate.as_deref() {
        let approve =
            GateAnswer { option: "approve patch".into(), actor: "user:carol".into(), role: "sre".into(), value: None };
        rt.answer_gate(&op, gate, &approve).unwrap();
    }
    assert_eq!(rt.drive(&op, &mut |_| {}).unwrap(), OperationState::Completed);
    expect![[r#"
        succeeded 6: n001, n002, n003, n004, n005, n006
    "#]]
    .assert_eq(&hosts_by_state(&rt, &op));
}

#[test]
fn the_pause_between_waves_holds_across_a_new_drive() {
    let fleet = Fleet::with(files_for(4, "{waves: [1, 100%], pause_between: 3s, verify_between_waves: none}"));
    let mut rt = fleet.runtime();
    let plan = opsgraph::plan_cmd::build(&fleet.loaded()).unwrap();
    let op = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();
    // Wave 1 ends; during the pause a person pauses the operation from another process (another
    // runtime on the same store), and this drive stops.
    let mut other = fleet.runtime();
    let op2 = op.clone();
    let mut pause = move |e: &opsgraph_store::TimelineEntry| {
        if e.event == "wave_finished" {
            other.pause(&op2, "user:bob", "looking at wave 1").unwrap();
        }
    };
    assert!(matches!(rt.drive(&op, &mut pause).unwrap(), OperationState::Paused { .. }));
    // Resumed at once, a new drive (nothing of the first in memory) still waits out the pause.
    rt.resume(&op, "user:bob").unwrap();
    assert_eq!(rt.drive(&op, &mut |_| {}).unwrap(), OperationState::Completed);
    let timeline = rt.store().timeline(&op).unwrap();
    let at = |event: &str, wave: u64| {
        let e = timeline.iter().find(|e| e.event == event && e.data["wave"] == wave).unwrap();
        opsgraph_store::parse_rfc3339(&e.at).unwrap()
    };
    let waited = at("wave_started", 2) - at("wave_finished", 1);
    assert!((3000..10_000).contains(&waited), "wave 2 started {waited} ms after wave 1 ended");
}

#[test]
fn checks_a_driver_died_running_run_again_after_a_restart() {
    use opsgraph_store::{JobRecord, JobState, Store, Write};
    let fleet = Fleet::with(files_for(4, "{waves: [1, 100%]}"));
    let mut rt = fleet.runtime();
    let plan = opsgraph::plan_cmd::build(&fleet.loaded()).unwrap();
    fleet.sicken(&["n001"]);
    let op = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();
    assert!(matches!(rt.drive(&op, &mut |_| {}).unwrap(), OperationState::Paused { .. }));
    // As if a driver had recorded the checks' attempt and died before their result: the record
    // says running, and nobody runs them.
    fleet.cure();
    let mut store = SqliteStore::open(&fleet.dir.join("data/opsgraph.db"), Durability::Full).unwrap();
    store
        .commit(&[Write::Job(JobRecord {
            operation: op.clone(),
            id: "verify-upgrade-wave-1".into(),
            state: JobState::Running,
            attempts: 2,
            outcome: serde_json::json!({}),
            updated_at: opsgraph_store::now(),
        })])
        .unwrap();
    rt.resume(&op, "user:bob").unwrap();
    assert_eq!(rt.drive(&op, &mut |_| {}).unwrap(), OperationState::Completed);
    let timeline = rt.store().timeline(&op).unwrap();
    let recovered =
        timeline.iter().find(|e| e.data["job"] == "verify-upgrade-wave-1" && e.event == "job_retry").unwrap();
    expect!["verify-upgrade-wave-1: checks between waves cut short by a restart; they change nothing and run again"]
        .assert_eq(&recovered.reason);
    assert!(hosts_by_state(&rt, &op).contains("succeeded 4"));
}
