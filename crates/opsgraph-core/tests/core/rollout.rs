//! Fleet rollouts ([P]): wave sizes from counts and percentages, budgets, the waves and canary
//! gate of a plan, and the shape of `controls.rollout` with its errors at file:line:column.

use expect_test::{expect, Expect};
use opsgraph_core::model::{Amount, Rollout, VerifyBetween};
use opsgraph_core::plan::rollout::{plan_rollout, wave_sizes};

use crate::builders::*;
use crate::plan::{nodes, targets, world};
use crate::preview_text::section;

fn amounts(text: &str) -> Vec<Amount> {
    text.split_whitespace()
        .map(|w| match w.strip_suffix('%') {
            Some(p) => Amount::Percent(p.parse().unwrap()),
            None => Amount::Count(w.parse().unwrap()),
        })
        .collect()
}

/// `waves of n -> sizes`, one case a line.
fn check_waves(cases: &[(&str, usize)], expect: Expect) {
    let mut out = String::new();
    for (waves, n) in cases {
        let sizes = wave_sizes(&amounts(waves), *n);
        let sum: usize = sizes.iter().sum();
        assert_eq!(sum, *n, "every instance has exactly one wave");
        let sizes: Vec<String> = sizes.iter().map(ToString::to_string).collect();
        out.push_str(&format!("[{waves}] of {n}: {}\n", sizes.join(" + ")));
    }
    expect.assert_eq(&out);
}

#[test]
fn waves_round_percentages_up_and_repeat_the_last() {
    check_waves(
        &[
            ("1 5% 25% 100%", 200),
            ("1 5% 25% 100%", 3),
            ("1 5% 25%", 20),
            ("1", 4),
            ("", 5),
            ("50%", 5),
            ("1%", 3),
            ("10 100%", 4),
            ("1 2", 0),
        ],
        expect![[r#"
            [1 5% 25% 100%] of 200: 1 + 10 + 50 + 139
            [1 5% 25% 100%] of 3: 1 + 1 + 1
            [1 5% 25%] of 20: 1 + 1 + 5 + 5 + 5 + 3
            [1] of 4: 1 + 1 + 1 + 1
            [] of 5: 5
            [50%] of 5: 3 + 2
            [1%] of 3: 1 + 1 + 1
            [10 100%] of 4: 4
            [1 2] of 0: 
        "#]],
    );
}

#[test]
fn budgets_round_percentages_down_per_wave_and_overall() {
    let policy = Rollout {
        waves: amounts("1 5% 25% 100%"),
        max_failures: Some(Amount::Percent(2)),
        max_failures_per_wave: Some(Amount::Percent(10)),
        max_in_flight: Some(Amount::Percent(5)),
        pause_between: Some("1m".into()),
        canary_gate: true,
        ..Rollout::default()
    };
    let r = plan_rollout("upgrade", &policy, 200, "the pack".into(), &[], &[]).unwrap();
    expect!["4 waves: 1 + 10 + 50 + 139 of 200 (budget 4, per wave 0/1/5/13, 10 at once, 1m between waves, gate canary-upgrade after wave 1, from the pack)"]
        .assert_eq(&r.summary());
    // Only an order: nothing to enforce beyond the edges.
    assert_eq!(plan_rollout("upgrade", &Rollout::default(), 200, "the pack".into(), &[], &[]), None);
    // A fleet rollout with no budget given tolerates no failure; one wave has no canary.
    let one = plan_rollout(
        "upgrade",
        &Rollout { max_in_flight: Some(Amount::Count(2)), canary_gate: true, ..Rollout::default() },
        7,
        "the pack".into(),
        &[],
        &[],
    )
    .unwrap();
    expect!["1 waves: 7 of 7 (budget 0, 2 at once, from the pack)"].assert_eq(&one.summary());
}

#[test]
fn a_plan_puts_instances_in_waves_and_a_canary_gate_after_the_first() {
    let policy = Rollout {
        waves: amounts("1 50%"),
        max_failures: Some(Amount::Count(1)),
        canary_gate: true,
        ..Rollout::default()
    };
    let p = pack(
        "r",
        "cluster",
        vec![
            job("drain").on("nodes").provides("drained", Some("nodes")),
            job("upgrade").on("nodes").requires(req("drained").scoped("nodes")).rollout(policy),
            job("verify").requires(req("drained")).after("upgrade"),
        ],
    );
    let mut i = intent("cluster", "prod");
    targets(&mut i, 5);
    let mut w = world(p, i);
    w.resources = nodes(5);
    let plan = w.build().unwrap();
    let mut out = String::new();
    for j in &plan.jobs {
        let wave = j.wave.map(|w| format!(" (wave {w})")).unwrap_or_default();
        out.push_str(&format!("{}{wave} <- [{}]\n", j.id, j.depends_on.join(", ")));
    }
    for g in &plan.gates {
        out.push_str(&format!(
            "gate {} ({}) before [{}] opens after [{}]\n",
            g.id,
            g.type_,
            g.before.join(", "),
            g.opens_after.join(", ")
        ));
    }
    expect![[r#"
        drain@n1 <- []
        drain@n2 <- []
        drain@n3 <- []
        drain@n4 <- []
        drain@n5 <- []
        upgrade@n1 (wave 1) <- [drain@n1]
        upgrade@n2 (wave 2) <- [drain@n2, canary-upgrade]
        upgrade@n3 (wave 2) <- [drain@n3, canary-upgrade]
        upgrade@n4 (wave 2) <- [drain@n4, canary-upgrade]
        upgrade@n5 (wave 3) <- [drain@n5, canary-upgrade]
        verify <- [drain@n1, drain@n2, drain@n3, drain@n4, drain@n5, upgrade@n1, upgrade@n2, upgrade@n3, upgrade@n4, upgrade@n5]
        gate canary-upgrade (approval) before [upgrade@n2, upgrade@n3, upgrade@n4, upgrade@n5] opens after [upgrade@n1]
    "#]]
    .assert_eq(&out);
    // The job-level graph stays a DAG: waves are an index the runtime respects, not edges.
    assert_eq!(
        opsgraph_core::plan::job_edges(&plan).into_iter().collect::<Vec<_>>(),
        [("drain", "upgrade"), ("drain", "verify"), ("upgrade", "verify")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
    let text = opsgraph_core::plan::render::text(&plan);
    expect![[r#"
        Rollouts
          upgrade: 3 waves: 1 + 3 + 1 of 5 (budget 1, gate canary-upgrade after wave 1, from the pack)
            wave 1: n1
            wave 2: n2, n3, n4
            wave 3: n5
    "#]]
    .assert_eq(&section(&text, "Rollouts"));
    expect![[r#"
        Gates
          canary-upgrade (approval), answered by operator or sre or platform_admin
            canary: wave 1 of upgrade (compute_node/n1) runs first; look at it before the other 4 instance(s) run
            options: continue rollout | cancel operation
            blocks: upgrade@n2, upgrade@n3, upgrade@n4, upgrade@n5
            opens once finished: upgrade@n1
    "#]]
    .assert_eq(&section(&text, "Gates"));
    let json = opsgraph_core::plan::render::json(&plan, &w.packs);
    assert_eq!(json["rollouts"][0]["waves"][1], serde_json::json!({"size": 3}));
    assert_eq!(json["jobs"][6]["wave"], 2);
    assert!(json["jobs"][0].get("wave").is_none(), "a job outside a rollout has no wave");
}

#[test]
fn checks_between_waves_are_instances_after_each_wave_but_the_last_and_the_canary_waits_for_them() {
    let policy = Rollout { waves: amounts("1 50%"), canary_gate: true, ..Rollout::default() };
    let mut p = pack(
        "r",
        "cluster",
        vec![
            job("upgrade").on("nodes").evidence("upgraded").rollout(policy.clone()),
            job("other").on("nodes").rollout(Rollout { waves: amounts("1 50%"), ..Rollout::default() }),
        ],
    );
    // The resource type's verification joins the job's evidence (`other` has none of its own: the
    // resource's checks alone).
    p.manifest.resources.push(opsgraph_core::model::ResourceSpec {
        type_: "cluster".into(),
        on: vec!["upgrade".into()],
        interval: "1m".into(),
        verify: vec!["healthy".into()],
        observe: vec![],
    });
    let mut i = intent("cluster", "prod");
    targets(&mut i, 5);
    let mut w = world(p, i);
    w.resources = nodes(5);
    let plan = w.build().unwrap();
    let checks: Vec<String> = plan
        .jobs
        .iter()
        .filter_map(|j| {
            j.verifies.as_ref().map(|v| format!("{} after wave {} of {}: {:?}", j.id, v.wave, v.job, j.title))
        })
        .collect();
    expect![[r#"
        verify-upgrade-wave-1 after wave 1 of upgrade: Some("checks after wave 1 of upgrade: upgraded; resource: healthy")
        verify-upgrade-wave-2 after wave 2 of upgrade: Some("checks after wave 2 of upgrade: upgraded; resource: healthy")
        verify-other-wave-1 after wave 1 of other: Some("checks after wave 1 of other: resource: healthy")
        verify-other-wave-2 after wave 2 of other: Some("checks after wave 2 of other: resource: healthy")"#]]
    .assert_eq(&checks.join("\n"));
    // Each runs after the hosts it checks: those of its wave and the waves before.
    let second = plan.jobs.iter().find(|j| j.id == "verify-upgrade-wave-2").unwrap();
    assert_eq!(second.depends_on, ["upgrade@n1", "upgrade@n2", "upgrade@n3", "upgrade@n4"]);
    let canary = plan.gates.iter().find(|g| g.id == "canary-upgrade").unwrap();
    assert_eq!(canary.opens_after, ["upgrade@n1", "verify-upgrade-wave-1"], "a person looks once the checks ran");
    let text = opsgraph_core::plan::render::text(&plan);
    expect![[r#"
        Rollouts
          upgrade: 3 waves: 1 + 3 + 1 of 5 (budget 0, gate canary-upgrade after wave 1, checks between waves on the hosts done, from the pack)
            wave 1: n1
            then verify-upgrade-wave-1: upgraded; resource: healthy on the hosts done
            wave 2: n2, n3, n4
            then verify-upgrade-wave-2: upgraded; resource: healthy on the hosts done
            wave 3: n5
          other: 3 waves: 1 + 3 + 1 of 5 (budget 0, checks between waves on the hosts done, from the pack)
            wave 1: n1
            then verify-other-wave-1: resource: healthy on the hosts done
            wave 2: n2, n3, n4
            then verify-other-wave-2: resource: healthy on the hosts done
            wave 3: n5
    "#]]
    .assert_eq(&section(&text, "Rollouts"));
    let json = opsgraph_core::plan::render::json(&plan, &w.packs);
    let v = json["jobs"].as_array().unwrap().iter().find(|j| j["id"] == "verify-upgrade-wave-2").unwrap();
    assert_eq!(v["verifies"], serde_json::json!({"job": "upgrade", "wave": 2}));
    // `none` turns them off; `resource` says where they run.
    for (on, expected) in [(VerifyBetween::None, 0), (VerifyBetween::Resource, 2)] {
        let mut w2 = world(w.packs[0].clone(), w.intent.clone());
        w2.resources = nodes(5);
        w2.intent.rollouts.insert("upgrade".into(), Rollout { verify_between_waves: Some(on), ..policy.clone() });
        let plan = w2.build().unwrap();
        let mine = plan.jobs.iter().filter(|j| j.verifies.as_ref().is_some_and(|v| v.job == "upgrade")).count();
        assert_eq!(mine, expected, "{on:?}");
        let r = plan.rollouts.iter().find(|r| r.job == "upgrade").unwrap();
        assert_eq!(r.checks.as_ref().map(|c| c.on), (expected > 0).then_some(on));
    }
}

/// The `controls.rollout` of a job file: the normalised model, or the diagnostics.
fn check_shape(rollout: &str, expect: Expect) {
    let text = format!("job:\n  id: upgrade\n  controls:\n    rollout: {rollout}\n");
    let parsed = opsgraph_core::pack::parse_file("jobs.yaml", &text);
    let out = if parsed.diagnostics.is_empty() {
        match &parsed.docs[0].doc {
            opsgraph_core::model::Document::Job(j) => format!("{:?}\n", j.controls.rollout),
            other => format!("{other:?}\n"),
        }
    } else {
        parsed.diagnostics.iter().map(|d| format!("{d}\n")).collect()
    };
    expect.assert_eq(&out);
}

#[test]
fn the_rollout_shape_takes_short_forms_and_refuses_bad_values_where_they_are() {
    check_shape(
        "one_at_a_time",
        expect![[r#"
            Rollout { order: OneAtATime, waves: [], max_in_flight: None, max_failures: None, max_failures_per_wave: None, pause_between: None, canary_gate: false, verify_between_waves: None }
        "#]],
    );
    check_shape("{waves: [1, 5%, 100%], max_failures: 0, max_failures_per_wave: 10%, max_in_flight: 3, pause_between: 2m, canary_gate: true, verify_between_waves: resource}", expect![[r#"
        Rollout { order: Parallel, waves: [Count(1), Percent(5), Percent(100)], max_in_flight: Some(Count(3)), max_failures: Some(Count(0)), max_failures_per_wave: Some(Percent(10)), pause_between: Some("2m"), canary_gate: true, verify_between_waves: Some(Resource) }
    "#]]);
    check_shape(
        "one_at_once",
        expect![[r#"
        jobs.yaml:4:14: error[E006]: unknown value `one_at_once`
          = expected: one of `parallel`, `one_at_a_time`
    "#]],
    );
    check_shape(
        "{waves: [0, 150%, x], max_in_flight: 0%, max_failures: -1, pause_between: 5, canary: true}",
        expect![[r#"
            jobs.yaml:4:23: error[E006]: 0 is out of range
              = expected: a count >= 1, or a percentage such as `25%`
            jobs.yaml:4:26: error[E006]: `150%` is not a percentage from 1% to 100%
              = expected: a count >= 1, or a percentage such as `25%`
            jobs.yaml:4:32: error[E005]: found a string
              = expected: a count >= 1, or a percentage such as `25%`
            jobs.yaml:4:51: error[E006]: `0%` is not a percentage from 1% to 100%
              = expected: a count >= 1, or a percentage such as `25%`
            jobs.yaml:4:69: error[E006]: -1 is out of range
              = expected: a count >= 0, or a percentage such as `25%`
            jobs.yaml:4:88: error[E006]: `5` has no unit
              = expected: a duration such as `30s`, `10m`, `1h`
              = hint: write `5s` for seconds
            jobs.yaml:4:91: error[E003]: unknown key `canary` in rollout
              = expected: one of `waves`, `max_in_flight`, `max_failures`, `max_failures_per_wave`, `pause_between`, `canary_gate`, `verify_between_waves`
              = hint: did you mean `canary_gate`?
        "#]],
    );
}

#[test]
fn the_intent_overrides_the_packs_rollout_and_the_environments_operations_policy_both() {
    let pack_policy = Rollout { waves: amounts("1 100%"), ..Rollout::default() };
    let p = pack("r", "cluster", vec![job("upgrade").on("nodes").rollout(pack_policy)]);
    let mut i = intent("cluster", "prod");
    targets(&mut i, 10);
    let mut w = world(p, i);
    w.resources = nodes(10);
    let summary = |w: &crate::plan::World| {
        let plan = w.build().unwrap();
        plan.rollouts.iter().map(|r| format!("{}: {}\n", r.job, r.summary())).collect::<String>()
    };
    let mut out = summary(&w);
    w.intent.rollouts.insert(
        "upgrade".into(),
        Rollout { waves: amounts("2 50%"), max_failures: Some(Amount::Count(1)), ..Rollout::default() },
    );
    out.push_str(&summary(&w));
    let prod = opsgraph_core::model::EnvironmentOperations {
        rollouts: [(
            "upgrade".to_string(),
            Rollout { waves: amounts("1 10%"), canary_gate: true, ..Rollout::default() },
        )]
        .into(),
        ..Default::default()
    };
    w.operations.environments.insert("prod".into(), prod);
    out.push_str(&summary(&w));
    // Another environment's rule does not apply.
    w.intent.environment = Some("dev".into());
    out.push_str(&summary(&w));
    // The intent names a job the template does not have.
    w.intent.rollouts.insert("upgrde".into(), Rollout::default());
    out.extend(w.build().unwrap_err().iter().map(|e| format!("error[{}]: {e}\n", e.code())));
    expect![[r#"
        upgrade: 2 waves: 1 + 9 of 10 (budget 0, from the pack)
        upgrade: 3 waves: 2 + 5 + 3 of 10 (budget 1, from the intent)
        upgrade: 10 waves: 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 of 10 (budget 0, gate canary-upgrade after wave 1, from the operations policy of prod)
        upgrade: 3 waves: 2 + 5 + 3 of 10 (budget 1, from the intent)
        error[P006]: unknown job `upgrde` (named by the intent's rollouts)
    "#]]
    .assert_eq(&out);
}

#[test]
fn a_destructive_gate_opens_once_what_its_job_waits_for_has_run() {
    let p = pack(
        "h",
        "thing",
        vec![
            job("check").on("nodes").provides("checked", Some("nodes")),
            job("backup").produces("dump"),
            job("wipe")
                .on("nodes")
                .requires(req("checked").scoped("nodes"))
                .needs("dump")
                .destructive()
                .one_at_a_time(),
        ],
    );
    let mut i = intent("thing", "dev");
    targets(&mut i, 2);
    let mut w = world(p, i);
    w.resources = nodes(2);
    let plan = w.build().unwrap();
    let g = plan.gates.iter().find(|g| g.id == "confirm-wipe").unwrap();
    expect![[r#"before [wipe@n1, wipe@n2] opens after [check@n1, check@n2, backup]"#]].assert_eq(&format!(
        "before [{}] opens after [{}]",
        g.before.join(", "),
        g.opens_after.join(", ")
    ));
}
