//! The intent form in headless Chromium (issue [M] 5): targets picked from the inventory with
//! their health, derived scopes hidden, constraints and desired_result, and the plan's errors
//! shown beside the field they are about — with the keyboard and labels; and a picker over a fleet
//! of 60 nodes, filtered by words and selected by what the filter shows.

use serde_json::{json, Value};

use crate::browser::{screenshots, Browser};
use crate::serve::Server;
use crate::server::{http, Api};

/// A cluster pack: `join` reads `members` (2..5 nodes) and `joining` (exactly 1); `verifiers`
/// is derived from `targets.members`. `peers` is a list parameter. The cluster needs a
/// `kv.store` in the workload's region (`same-as-workload`). A world of four nodes of different
/// health, a database that is not a node, and two stores in two regions.
const CLUSTER: &[(&str, &str)] = &[
    (
        "cluster/pack.yaml",
        "scenario_pack:\n  id: cluster\n  version: 1.0.0\n  title: Cluster\n  resource_types: [cluster.app]\n  actions: [join]\n  plan_templates: [{id: cluster.join}]\n",
    ),
    (
        "cluster/templates.yaml",
        r#"plan_template:
  id: cluster.join
  action: join
  parameters:
    peers: {type: list, default: [], description: extra peer addresses}
  scopes:
    members: {resource_type: node, from: targets.members, min: 2, max: 5}
    joining: {resource_type: node, from: targets.joining, min: 1, max: 1}
    verifiers: {resource_type: node, from: targets.members, min: 2}
  requires:
    - {capability: linux.host, scope: members}
    - {capability: kv.store, constraints: {region: same-as-workload}}
  stages:
    - {id: all, name: All, jobs: [join-node]}
  jobs: [join-node]
"#,
    ),
    (
        "cluster/jobs.yaml",
        "job:\n  id: join-node\n  scope: {resources: [node], target: joining}\n  run: {command: \"echo joining\"}\n",
    ),
    (
        "world/nodes.yaml",
        "resource: {type: node, name: n1, environment: dev, health: healthy, status: running, access: {local: true}, provides: [linux.host]}\n---\nresource: {type: node, name: n2, environment: dev, health: degraded, status: running, access: {local: true}, provides: [linux.host]}\n---\nresource: {type: node, name: n3, environment: dev, health: healthy, status: running, access: {local: true}, provides: [linux.host]}\n---\nresource: {type: node, name: n4, environment: dev, access: {local: true}, provides: [linux.host]}\n---\nresource: {type: db, name: d1, environment: dev, health: healthy, status: running}\n---\nresource: {type: kv, name: eu, environment: dev, health: healthy, status: running, attributes: {region: eu-west-1}, provides: [{capability: kv.store, attributes: {region: eu-west-1}}]}\n---\nresource: {type: kv, name: us, environment: dev, health: healthy, status: running, attributes: {region: us-east-1}, provides: [{capability: kv.store, attributes: {region: us-east-1}}]}\n",
    ),
];

/// Checks (by the keyboard: Space on a focused checkbox) the target `resource` of `target`.
fn pick(browser: &Browser, target: &str, resource: &str) {
    let id = format!(
        "target-{target}-{}",
        resource.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_', "_")
    );
    browser.js(&format!("document.getElementById('{id}').focus(); return null"));
    browser.press("\u{E00D}"); // Space
    assert_eq!(browser.js(&format!("return document.getElementById('{id}').checked")), json!(true), "{id}");
}

/// The field errors on the page: (field, text).
fn field_errors(browser: &Browser) -> Value {
    browser.js("return [...document.querySelectorAll('[data-testid=field-error]')].map(e => [e.closest('[data-testid=target], [data-testid=param], .field') ? (e.closest('[data-testid=target], [data-testid=param], .field').dataset.target || e.closest('[data-testid=target], [data-testid=param], .field').dataset.param || 'other') : 'none', e.dataset.field, e.textContent])")
}

#[test]
fn the_intent_form_picks_targets_by_health_takes_constraints_and_shows_errors_by_field() {
    let Some(shots) = screenshots() else { return };
    let api = Api::over(crate::support::temp_dir(CLUSTER)).packs(&["cluster"]).world(&["world"]).build();
    let sam = api.token("sam", &["operator"]);
    let server = Server::start(&api);
    let browser = Browser::start();
    browser.go(&format!("{}/#/new", server.url()));
    browser.sign_in(&sam, "sam");

    // One picker per target the scopes read; `verifiers` (derived from targets.members) has none.
    browser.wait("[data-testid=target][data-target=joining]", |t| t.contains("n4"));
    let pickers =
        browser.js("return [...document.querySelectorAll('[data-testid=target]')].map(e => e.dataset.target)");
    assert_eq!(pickers, json!(["joining", "members"]), "no picker for the derived scope");
    let legend = browser.text(&browser.find("[data-testid=target][data-target=members] legend").unwrap());
    assert_eq!(legend, "Targets: members (node, at least 2, at most 5)");
    // The inventory's nodes (not the database), each with its health.
    let options = browser.js(
        "return [...document.querySelectorAll('[data-target=members][data-testid=target-option]')].map(e => [e.dataset.resource, e.querySelector('[data-testid=target-health]').textContent])",
    );
    assert_eq!(
        options,
        json!([["node/n1", "healthy"], ["node/n2", "degraded"], ["node/n3", "healthy"], ["node/n4", "unknown"]])
    );
    assert_eq!(
        browser.js("return getComputedStyle(document.querySelector('[data-resource=\"node/n2\"] [data-testid=target-health]')).color"),
        browser.js("const p = document.createElement('span'); p.className = 'fail'; document.body.append(p); const c = getComputedStyle(p).color; p.remove(); return c"),
        "degraded is drawn in the failure colour"
    );

    // A wrong parameter, one member only: the plan's errors are shown beside their fields.
    browser.fill("#new-name", "c1");
    browser.fill("#new-desired", "a three-node cluster in the EU");
    browser.fill("#param-peers", "{\"not\": \"a list\"}");
    pick(&browser, "members", "node/n1");
    pick(&browser, "joining", "node/n4");
    browser.click_when("#preview-btn", |_| true);
    browser.wait("[data-testid=field-error]", |t| t.starts_with('P'));
    let errors = field_errors(&browser);
    let errors = errors.as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e[0] == "peers" && e[1] == "parameters.peers" && e[2].as_str().unwrap().starts_with("P003")),
        "{errors:?}"
    );
    assert_eq!(
        browser.js("return document.getElementById('param-peers').getAttribute('aria-invalid')"),
        "true",
        "the field is marked invalid"
    );
    let described = browser.js("return document.getElementById('param-peers').getAttribute('aria-describedby')");
    assert!(described.as_str().unwrap().contains("ferr-"), "and described by its error: {described}");
    assert_eq!(
        browser.js("return document.activeElement.id"),
        "param-peers",
        "the focus goes to the first invalid field"
    );
    browser.shot_of(&shots, "#new-form", "intent-parameter-error");

    // The parameter fixed: the scope errors (members, and verifiers read from it) are shown at
    // the members picker; the earlier error is gone.
    browser.fill("#param-peers", "[\"10.0.0.9\"]");
    browser.click_when("#preview-btn", |_| true);
    browser.wait("[data-testid=field-error]", |t| t.contains("scope"));
    let errors = field_errors(&browser);
    let errors = errors.as_array().unwrap();
    let fields: Vec<&str> = errors.iter().map(|e| e[1].as_str().unwrap()).collect();
    assert!(errors.iter().all(|e| e[0] == "members"), "{errors:?}");
    assert!(fields.contains(&"scopes.members") && fields.contains(&"scopes.verifiers"), "{fields:?}");
    assert!(errors[0][2].as_str().unwrap().contains("at least 2 needed"), "{errors:?}");
    let derived = errors.iter().find(|e| e[1] == "scopes.verifiers").unwrap()[2].as_str().unwrap();
    assert!(
        derived.ends_with("(scope verifiers is filled from the targets members)"),
        "the hidden scope is explained: {derived}"
    );
    assert_eq!(browser.js("return document.getElementById('param-peers').getAttribute('aria-invalid')"), Value::Null);
    browser.shot_of(&shots, "[data-testid=target][data-target=members]", "intent-scope-error");

    // A second member, a constraint added with the keyboard: the plan binds the EU store.
    pick(&browser, "members", "node/n3");
    browser.tab_to_and_press("add-constraint");
    assert_eq!(browser.js("return document.activeElement.id"), "constraint-1-name", "the new row has the focus");
    browser.fill("#constraint-1-name", "region");
    browser.fill("#constraint-1-value", "eu-west-1");
    browser.click_when("#preview-btn", |_| true);
    let text = browser.wait_text("[data-testid=preview-text]", |t| t.contains("cluster.join"));
    assert!(text.contains("kv/eu"), "{text}");
    let after = browser.js("return document.getElementById('apply').nextSibling ? document.getElementById('apply').nextSibling.textContent : ''");
    assert_eq!(after, "", "nothing stray after Apply (a ready plan's missing reason once read `null`)");
    assert!(browser.find("[data-testid=field-error]").is_none(), "no error left");
    assert_eq!(browser.js("return document.getElementById('apply').disabled"), false);
    let unlabelled = browser.unlabelled();
    assert_eq!(unlabelled, json!([]), "every control has a name");
    browser.shot_of(&shots, "#new-form", "intent-form");
    browser.shot_of(&shots, "#preview", "intent-preview");

    // Applied: the operation's intent holds what the form said, the derived scope not as a target.
    browser.tab_to_and_press("apply");
    browser.wait("[data-testid=op-state]", |t| !t.is_empty());
    let (_, list) = http(server.addr, "GET", "/api/v1/operations", &sam, "");
    let id = list["operations"][0]["id"].as_str().unwrap().to_string();
    let (_, plan) = http(server.addr, "GET", &format!("/api/v1/operations/{id}/plan"), &sam, "");
    let intent = &plan["intent"];
    assert_eq!(
        (&intent["desired_result"], &intent["constraints"], &intent["targets"], &intent["parameters"]),
        (
            &json!("a three-node cluster in the EU"),
            &json!({"region": "eu-west-1"}),
            &json!({"joining": ["node/n4"], "members": ["node/n1", "node/n3"]}),
            &json!({"peers": ["10.0.0.9"]})
        ),
        "{plan}"
    );
}

/// A rollout pack whose one target (`nodes`, at least 1) is picked from a fleet of 60 nodes.
fn fleet_files() -> Vec<(String, String)> {
    let nodes: Vec<String> = (0..60)
        .map(|k| {
            let health = if k % 7 == 3 { "degraded" } else { "healthy" };
            let env = if k < 40 { "dev" } else { "staging" };
            format!("resource: {{type: node, name: n{k:02}, environment: {env}, health: {health}, status: running, access: {{local: true}}, provides: [linux.host]}}\n")
        })
        .collect();
    vec![
        (
            "fleet/pack.yaml".into(),
            "scenario_pack: {id: fleet, version: 1.0.0, title: Fleet, resource_types: [fleet.app], actions: [roll], plan_templates: [{id: fleet.roll}]}\n".into(),
        ),
        (
            "fleet/templates.yaml".into(),
            "plan_template: {id: fleet.roll, action: roll, scopes: {nodes: {resource_type: node, from: targets.nodes, min: 1}}, requires: [{capability: linux.host, scope: nodes}], stages: [{id: all, name: All, jobs: [roll-node]}], jobs: [roll-node]}\n".into(),
        ),
        ("fleet/jobs.yaml".into(), "job: {id: roll-node, scope: {resources: [node], target: nodes}, run: {command: \"echo rolling\"}}\n".into()),
        ("world/nodes.yaml".into(), nodes.join("---\n")),
    ]
}

/// The options of picker `target` the filter shows.
fn shown_options(browser: &Browser, target: &str) -> Value {
    browser.js(&format!(
        "return [...document.querySelectorAll('[data-target={target}][data-testid=target-option]')].filter(e => !e.hidden).map(e => e.dataset.resource)"
    ))
}

#[test]
fn a_target_picker_over_a_fleet_filters_and_selects_what_it_shows() {
    let Some(shots) = screenshots() else { return };
    let files = fleet_files();
    let files: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let api = Api::over(crate::support::temp_dir(&files)).packs(&["fleet"]).world(&["world"]).build();
    let sam = api.token("sam", &["operator"]);
    let server = Server::start(&api);
    let browser = Browser::start();
    browser.go(&format!("{}/#/new", server.url()));
    browser.sign_in(&sam, "sam");
    let count = "[data-testid=target][data-target=nodes] [data-testid=target-count]";
    browser.wait_text(count, |t| t == "60 of 60 shown, 0 chosen");

    // Every word must match: the degraded nodes of staging.
    browser.fill("#target-filter-nodes", "Degraded staging");
    browser.wait_text(count, |t| t == "3 of 60 shown, 0 chosen");
    assert_eq!(shown_options(&browser, "nodes"), json!(["node/n45", "node/n52", "node/n59"]));
    browser.tab_to_and_press("target-select-shown-nodes");
    browser.wait_text(count, |t| t == "3 of 60 shown, 3 chosen");

    // Chosen nodes stay chosen while hidden; one more picked by the keyboard among n00..n09.
    browser.fill("#target-filter-nodes", "n0");
    browser.wait_text(count, |t| t == "10 of 60 shown, 3 chosen");
    pick(&browser, "nodes", "node/n01");
    browser.wait_text(count, |t| t == "10 of 60 shown, 4 chosen");
    // "Clear all shown" clears only what is shown: n52 and n59, not n45 nor n01.
    browser.fill("#target-filter-nodes", "n5");
    browser.wait_text(count, |t| t == "10 of 60 shown, 4 chosen");
    browser.tab_to_and_press("target-clear-shown-nodes");
    browser.wait_text(count, |t| t == "10 of 60 shown, 2 chosen");
    assert_eq!(browser.unlabelled(), json!([]), "every control has a name");
    browser.shot_of(&shots, "[data-testid=target][data-target=nodes]", "intent-fleet-filter");

    browser.fill("#new-name", "roll1");
    browser.click_when("#preview-btn", |_| true);
    let text = browser.wait_text("[data-testid=preview-text]", |t| t.contains("fleet.roll"));
    assert!(text.contains("n01") && text.contains("n45") && !text.contains("n52"), "{text}");
    browser.tab_to_and_press("apply");
    browser.wait("[data-testid=op-state]", |t| !t.is_empty());
    let (_, list) = http(server.addr, "GET", "/api/v1/operations", &sam, "");
    let id = list["operations"][0]["id"].as_str().unwrap().to_string();
    let (_, plan) = http(server.addr, "GET", &format!("/api/v1/operations/{id}/plan"), &sam, "");
    assert_eq!(plan["intent"]["targets"], json!({"nodes": ["node/n01", "node/n45"]}), "{plan}");
}
