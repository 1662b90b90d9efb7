//! The web UI as a run console, in headless Chromium (the helpers of `browser.rs`): each bug
//! issue [M] found has its browser test here, and so has the run console (a header with state,
//! progress, timings and the failing step; the DAG laid out by dagre; a side panel per node).
//! Screenshots go where `ui.rs` writes its own.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::browser::{all_of, screenshots, Browser};
use crate::serve::Server;
use crate::server::{http, Api};

/// A pack that fans out: `prepare`, then `install-runtime` on each node of the `nodes` scope
/// (each waits until the test creates `go-<name>` in the lab directory, printing a line before
/// and after), then `check`, whose evidence wants `mode` to be `careful` (so `mode: fast` fails
/// the run). `fleet.pick` needs a `kv.store`, which two resources of the world provide: the
/// plan waits at a gate to choose. A world of three nodes and the two stores.
const FLEET: &[(&str, &str)] = &[
    (
        "fleet/pack.yaml",
        "scenario_pack:\n  id: fleet\n  version: 1.0.0\n  title: Fleet\n  resource_types: [fleet.app]\n  actions: [roll, pick, leak]\n  plan_templates: [{id: fleet.roll}, {id: fleet.pick}, {id: fleet.leak}]\n",
    ),
    (
        "fleet/templates.yaml",
        r#"plan_template:
  id: fleet.roll
  action: roll
  parameters:
    mode: {type: string, enum: [fast, careful, broken], default: careful, description: how to roll}
  scopes:
    nodes: {resource_type: node, from: targets.nodes, min: 1}
  requires:
    - {capability: linux.host, scope: nodes}
  stages:
    - {id: prep, name: Prepare, jobs: [prepare]}
    - {id: roll, name: Roll out, jobs: [install-runtime, check-the-configuration-of-the-runtime]}
  jobs: [prepare, install-runtime, check-the-configuration-of-the-runtime]
---
plan_template:
  id: fleet.pick
  action: pick
  requires:
    - {capability: kv.store}
  stages:
    - {id: all, name: All, jobs: [prepare]}
  jobs: [prepare]
---
plan_template:
  id: fleet.leak
  action: leak
  parameters:
    token: {type: string, secret: true, description: a token the job echoes}
  stages:
    - {id: all, name: All, jobs: [leak]}
  jobs: [leak]
"#,
    ),
    (
        "fleet/jobs.yaml",
        r#"job:
  id: prepare
  run: {command: "echo preparing the fleet"}
---
job:
  id: install-runtime
  after: [prepare]
  scope: {resources: [node], target: nodes}
  inputs: {requires: {capabilities: [{key: linux.host, scope: nodes}]}}
  run: {command: "if [ \"$OPSGRAPH_PARAM_MODE\" = broken ]; then echo 'ERROR: runtime mirror unreachable' >&2; exit 1; fi; echo installing the runtime; i=0; while [ ! -e \"$OPSGRAPH_LAB_DIR/go-$OPSGRAPH_INTENT_NAME\" ]; do i=$((i+1)); [ $i -lt 900 ] || exit 1; sleep 0.1; done; echo runtime installed"}
---
job:
  id: check-the-configuration-of-the-runtime
  after: [install-runtime]
  outputs: {evidence: [mode_careful]}
  run: {command: "echo checking"}
---
job:
  id: leak
  run: {command: "echo \"the token is $OPSGRAPH_PARAM_TOKEN\"; seq 1 3000; i=0; while [ ! -e \"$OPSGRAPH_LAB_DIR/go-$OPSGRAPH_INTENT_NAME\" ]; do i=$((i+1)); [ $i -lt 900 ] || exit 1; sleep 0.1; done; echo done"}
"#,
    ),
    (
        "fleet/evidence.yaml",
        "evidence:\n  - {id: mode_careful, source: command, command: 'printf %s \"$OPSGRAPH_PARAM_MODE\"', expected: careful}\n",
    ),
    (
        "fleet/remedies.yaml",
        r#"remedy:
  id: fleet-mirror-down
  applies_to: [install-runtime]
  signature:
    output_matches: ["runtime mirror unreachable"]
  diagnosis: "The runtime mirror cannot be reached from the node; retry once it is back."
  plan_patch:
    reason: "retry the install once the mirror is back"
    changes:
      - retry: {job: install-runtime}
  examples:
    matches: ["ERROR: runtime mirror unreachable"]
    does_not_match: ["runtime installed"]
"#,
    ),
    (
        "world/nodes.yaml",
        "resource: {type: node, name: n1, environment: dev, health: healthy, status: running, access: {local: true}, provides: [linux.host]}\n---\nresource: {type: node, name: n2, environment: dev, health: healthy, status: running, access: {local: true}, provides: [linux.host]}\n---\nresource: {type: node, name: n3, environment: dev, health: healthy, status: running, access: {local: true}, provides: [linux.host]}\n---\nresource: {type: kv, name: a, environment: dev, health: healthy, status: running, provides: [kv.store]}\n---\nresource: {type: kv, name: b, environment: dev, health: healthy, status: running, provides: [kv.store]}\n",
    ),
];

/// A server on the FLEET pack and world, its people and a browser: what every test here starts
/// from.
struct Console {
    _api: Api,
    server: Server,
    lab: PathBuf,
    sam: String,
    bob: String,
    vera: String,
}

impl Console {
    fn start() -> Console {
        let dir = crate::support::temp_dir(FLEET);
        let lab = dir.join("data/lab");
        std::fs::create_dir_all(&lab).unwrap();
        let api = Api::over(dir).packs(&["fleet"]).world(&["world"]).build();
        let sam = api.token("sam", &["operator"]);
        let bob = api.token("bob", &["sre"]);
        let vera = api.token("vera", &["viewer"]);
        let server = Server::start(&api);
        Console { _api: api, server, lab, sam, bob, vera }
    }

    fn base(&self) -> String {
        self.server.url()
    }

    /// Files an operation in `dev` through the API as the operator; its id.
    fn create(&self, action: &str, name: &str, extra: &str) -> String {
        self.create_in(Some("dev"), action, name, extra)
    }

    /// [`Console::create`] in this environment, or naming none.
    fn create_in(&self, environment: Option<&str>, action: &str, name: &str, extra: &str) -> String {
        let environment = environment.map(|e| format!("  environment: {e}\n")).unwrap_or_default();
        let intent = format!(
            "intent:\n  target_resource_type: fleet.app\n  action: {action}\n  name: {name}\n{environment}{extra}"
        );
        let (status, created) = http(self.server.addr, "POST", "/api/v1/operations", &self.sam, &intent);
        assert_eq!(status, 201, "{created}");
        created["id"].as_str().unwrap().to_string()
    }

    fn roll(&self, name: &str, mode: &str) -> String {
        self.create(
            "roll",
            name,
            &format!("  parameters: {{mode: {mode}}}\n  targets: {{nodes: [node/n1, node/n2, node/n3]}}\n"),
        )
    }

    fn go(&self, name: &str) {
        std::fs::write(self.lab.join(format!("go-{name}")), "").unwrap();
    }

    fn get(&self, id: &str) -> Value {
        http(self.server.addr, "GET", &format!("/api/v1/operations/{id}"), &self.sam, "").1
    }

    /// Waits until the operation's document satisfies `ok`; the document.
    /// Waits until operation `id`'s job `job` runs.
    fn wait_running(&self, id: &str, job: &str) -> Value {
        self.wait_op(id, &format!("ran {job}"), |op| Console::job_state(op, job) == "running")
    }

    /// A roll `name` in mode fast (its `check` fails at the end), n1's install-runtime running, and a
    /// browser on its page signed in as bob: the operation's id and the browser.
    fn rolling_page(&self, name: &str) -> (String, Browser) {
        let id = self.roll(name, "fast");
        self.wait_running(&id, "install-runtime@n1");
        let browser = self.operation_page(&id);
        (id, browser)
    }

    /// A `leak` operation `name` given the token `secret`, its job `leak` running: its id.
    fn leaking(&self, name: &str, secret: &str) -> String {
        let id = self.create("leak", name, &format!("  parameters: {{token: {secret}}}\n"));
        self.wait_running(&id, "leak");
        id
    }

    /// A browser on operation `id`'s page, signed in as bob (sre).
    fn operation_page(&self, id: &str) -> Browser {
        let browser = Browser::start();
        browser.go(&format!("{}/#/operations/{id}", self.base()));
        browser.sign_in(&self.bob, "bob");
        browser
    }

    fn wait_op(&self, id: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let op = self.get(id);
            if ok(&op) {
                return op;
            }
            assert!(Instant::now() < deadline, "{id} never {what}: {op}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn job_state(op: &Value, job: &str) -> String {
        op["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == job)
            .map(|j| j["state"].as_str().unwrap().to_string())
            .unwrap_or_default()
    }
}

/// The computed CSS `property` of the first element matching `css`.
fn style(browser: &Browser, css: &str, property: &str) -> String {
    let (css, property) = (serde_json::to_string(css).unwrap(), serde_json::to_string(property).unwrap());
    browser
        .js(&format!("return getComputedStyle(document.querySelector({css})).getPropertyValue({property})"))
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Bugs 1 and 2: the capability graph's Binding column names the resources a scope binds (the API
/// sends `resources[]`, the page read `resource`: "undefined via scope nodes"), and a gate's
/// options by their labels (not "[object Object]").
#[test]
fn the_capability_graph_names_a_scopes_resources_and_a_gates_options() {
    let Some(shots) = screenshots() else { return };
    let c = Console::start();
    let rolled = c.roll("caps", "careful");
    let picked = c.create("pick", "picky", "");
    let browser = c.operation_page(&rolled);
    browser.wait("[data-testid=op-id]", |t| t == rolled);
    let row = browser.wait_text("tr[data-testid=capability][data-capability='linux.host']", |t| t.contains("node/n1"));
    assert!(row.contains("node/n1, node/n2, node/n3 via scope nodes"), "{row}");
    assert!(!row.contains("undefined"), "{row}");
    browser.go(&format!("{}/#/operations/{picked}", c.base()));
    browser.wait("[data-testid=op-id]", |t| t == picked);
    let row = browser.wait_text("tr[data-testid=capability][data-capability='kv.store']", |t| t.contains("gate"));
    assert!(!row.contains("[object Object]"), "{row}");
    assert!(row.contains("kv/a") && row.contains("kv/b") && row.contains(" / "), "each option by its label: {row}");
    browser.shot_of(&shots, "#sec-caps", "console-capability-gate");
    c.go("caps");
}

/// Bugs 3, 4, 11 and 12 on the new operation form: an enum's values are shown as they are (no
/// JSON quotes); a plan that cannot be built says why, in the API's words (not only "the plan
/// cannot be built"); a blocked plan's Apply is disabled, looks it, and says why; a viewer is not
/// offered the form at all.
#[test]
fn the_new_operation_form_shows_plain_values_the_plans_reasons_and_a_disabled_apply() {
    let Some(shots) = screenshots() else { return };
    let c = Console::start();
    let browser = Browser::start();
    browser.go(&format!("{}/#/new", c.base()));
    browser.sign_in(&c.sam, "sam");
    browser.wait("[data-testid=param][data-param=mode]", |t| t.contains("mode"));
    let options = browser.js("return [...document.querySelectorAll('#param-mode option')].map(o => o.textContent)");
    assert_eq!(options, json!(["(default)", "fast", "careful", "broken"]), "enum values without JSON quotes");
    assert_eq!(browser.js("return document.querySelector('#param-mode option:checked').textContent"), "careful");

    // No target for the `nodes` scope (min 1): the plan cannot be built, and the page says why.
    browser.fill("#new-name", "noscope");
    browser.click_when("#preview-btn", |_| true);
    let error = browser.wait_text("[data-testid=preview-error]", |t| !t.is_empty());
    let (_, api_error) = http(
        c.server.addr,
        "POST",
        "/api/v1/plans",
        &c.sam,
        "intent:\n  target_resource_type: fleet.app\n  action: roll\n  name: noscope\n  environment: dev\n",
    );
    let reason =
        api_error["error"]["details"]["errors"][0]["message"].as_str().expect("the API gives a reason").to_string();
    assert!(error.contains(&reason), "the API's reason {reason:?} is on the page: {error:?}");
    assert!(browser.find("[data-testid=apply]").is_none(), "nothing to apply");
    browser.shot_of(&shots, "#preview", "console-plan-error");

    // A blocked plan (no kv.store in prod): Apply is disabled, looks disabled, says why.
    browser.go(&format!("{}/#/", c.base()));
    browser.wait("#view h2", |t| t == "Operations");
    browser.go(&format!("{}/#/new", c.base()));
    browser.wait("#new-template", |t| t.contains("fleet.pick"));
    browser.js("const s = document.getElementById('new-template'); s.value = 'fleet.pick'; s.dispatchEvent(new Event('change')); return null");
    browser.wait("[data-testid=params]", |t| t.contains("no parameters"));
    browser.fill("#new-name", "blocked");
    browser.fill("#new-env", "prod");
    browser.click_when("#preview-btn", |_| true);
    browser.wait("[data-testid=preview-text]", |t| t.contains("fleet.pick"));
    assert_eq!(browser.js("return document.getElementById('apply').disabled"), true);
    let why = browser.wait_text("[data-testid=apply-why]", |t| t.contains("blocked"));
    assert!(why.contains("kv.store"), "{why}");
    assert_eq!(browser.js("return document.getElementById('apply').getAttribute('aria-describedby')"), "apply-why");
    let disabled_bg = style(&browser, "#apply", "background-color");
    let preview_bg = style(&browser, "#preview-btn", "background-color");
    assert_ne!(disabled_bg, "rgb(5, 80, 174)", "a disabled Apply is not drawn in the accent colour");
    assert_eq!(style(&browser, "#apply", "cursor"), "not-allowed");
    assert_ne!(style(&browser, "#apply", "color"), "rgb(255, 255, 255)", "nor with white text ({preview_bg})");
    browser.shot_of(&shots, "#preview", "console-apply-disabled");

    // A viewer has no New operation link and no form.
    browser.sign_in(&c.vera, "vera");
    browser.go(&format!("{}/#/", c.base()));
    browser.wait("#view h2", |t| t == "Operations");
    assert_eq!(browser.js("return document.getElementById('nav-new').hidden"), true);
    assert!(browser.find("#new-op").is_none());
    browser.go(&format!("{}/#/new", c.base()));
    browser.wait("[data-testid=new-not-allowed]", |t| t.contains("apply permission"));
    assert!(browser.find("#new-form").is_none(), "no form for a viewer");
}

/// Bugs 5, 9 and 10: Pause is offered only where the lifecycle allows it (a running operation;
/// one waiting at a gate answers 409); `running` and `pending` have colours of their own and a
/// resource in `error` is drawn in the failure colour; the cancel question puts the focus on its
/// safe answer ("No, keep it"), so an Enter pressed once too often cancels nothing.
#[test]
fn pause_is_offered_only_when_legal_states_have_their_own_colours_and_cancel_focuses_no() {
    let Some(shots) = screenshots() else { return };
    let c = Console::start();
    let picked = c.create_in(None, "pick", "gated", "");
    c.wait_op(&picked, "waited at its gate", |op| op["state"] == "waiting_for_input");
    let (status, body) = http(c.server.addr, "POST", &format!("/api/v1/operations/{picked}/pause"), &c.sam, "{}");
    assert_eq!(status, 409, "the server refuses to pause an operation waiting at a gate: {body}");
    let browser = Browser::start();
    browser.go(&format!("{}/#/operations/{picked}", c.base()));
    browser.sign_in(&c.sam, "sam");
    browser.wait("[data-testid=op-detail]", |t| t.contains("waiting for input at select-kv-store"));
    browser.wait("#op-cancel", |_| true);
    assert!(browser.find("#op-pause").is_none(), "no Pause where the server would refuse it");

    // A running roll: Pause offered; running and pending jobs in different colours.
    let rolled = c.roll("colours", "careful");
    c.wait_running(&rolled, "install-runtime@n1");
    browser.go(&format!("{}/#/operations/{rolled}", c.base()));
    browser.wait("[data-testid=op-id]", |t| t == rolled);
    browser.wait("#op-pause", |t| t == "Pause");
    browser.wait("[data-testid=stage][data-stage=roll]", all_of(&["running", "pending"]));
    let running = style(&browser, "[data-stage=roll] .state-running", "color");
    let pending = style(&browser, "[data-stage=roll] .state-pending", "color");
    assert_ne!(running, pending, "running and pending share no colour");
    let node = |state: &str| style(&browser, &format!("[data-testid=dag-node][data-state={state}] rect"), "fill");
    assert_ne!(node("running"), node("pending"), "nor do their DAG nodes");

    // The cancel question focuses "No, keep it"; Enter there keeps the run.
    browser.tab_to_and_press("op-cancel");
    browser.wait("[data-testid=cancel-confirm]", |t| t.contains("cannot be resumed"));
    assert_eq!(browser.js("return document.activeElement.id"), "op-cancel-no");
    browser.shot_of(&shots, "#op-head", "console-cancel-question");
    browser.press("\u{E007}");
    browser.wait("#op-cancel", |_| true);
    assert_eq!(c.get(&rolled)["state"], "running", "an Enter on the question cancels nothing");

    // A failed run leaves its resource in `error`: drawn in the failure colour, not the text's.
    c.go("colours");
    c.wait_op(&rolled, "completed", |op| op["state"] == "completed");
    let failed = c.roll("broken", "fast");
    c.go("broken");
    let op = c.wait_op(&failed, "failed", |op| op["state"] == "failed");
    let resource = op["resource"].as_str().expect("a resource").to_string();
    browser.go(&format!("{}/#/resources", c.base()));
    browser.wait(&format!("tr[data-testid=resource-row][data-id='{resource}']"), |t| t.contains("error"));
    let error = style(&browser, &format!("tr[data-id='{resource}'] .state-error"), "color");
    assert_eq!(error, "rgb(207, 34, 46)", "error has the failure colour");
    browser.screenshot(&shots, "console-resources");
    // Its page: the history, newest first, with the status each change left and its operation.
    browser.click_when(&format!("tr[data-id='{resource}'] a"), |_| true);
    let history = browser.wait_text("[data-testid=resource-history]", |t| t.contains("error"));
    assert!(history.contains(&failed) && history.contains("operation.failed"), "{history}");
    browser.wait("[data-testid=resource-verified]", |t| t.contains("verified"));
    browser.screenshot(&shots, "console-resource");

    // The operations list: newest first, filtered by state, environment, pack and who, the filters
    // labelled (`picked` names no environment).
    browser.go(&format!("{}/#/", c.base()));
    browser.wait(&format!("tr[data-id='{failed}']"), |t| t.contains("failed"));
    let order = browser.js("return [...document.querySelectorAll('tr[data-testid=op-row]')].map(r => r.dataset.id)");
    assert_eq!(order, json!([failed, rolled, picked]), "newest first");
    assert_eq!(browser.unlabelled(), json!([]), "every filter has a label");
    browser.js("const s = document.getElementById('filter-state'); s.value = 'failed'; s.dispatchEvent(new Event('change')); return null");
    browser.wait("[data-testid=operations] caption", |t| t.starts_with("1 of 3"));
    let order = browser.js("return [...document.querySelectorAll('tr[data-testid=op-row]')].map(r => r.dataset.id)");
    assert_eq!(order, json!([failed]));
    browser.screenshot(&shots, "console-operations-filtered");
    let options =
        |id: &str| browser.js(&format!("return [...document.getElementById('{id}').options].map(o => o.value)"));
    browser.js("const s = document.getElementById('filter-state'); s.value = ''; s.dispatchEvent(new Event('change')); return null");
    browser.wait("[data-testid=operations] caption", |t| t.starts_with("3 operation(s)"));
    assert_eq!(options("filter-environment"), json!(["", "dev"]));
    let pack = c.get(&failed)["pack"].as_str().expect("the operation's pack").to_string();
    assert!(pack.starts_with("fleet@"), "{pack}");
    assert_eq!(options("filter-pack"), json!(["", pack]));
    // By keyboard: the environment chosen with the arrow key on its focused list.
    browser.js("document.getElementById('filter-environment').focus(); return null");
    browser.press("\u{E015}"); // ArrowDown
    browser.wait("[data-testid=operations] caption", |t| t.starts_with("2 of 3"));
    let order = browser.js("return [...document.querySelectorAll('tr[data-testid=op-row]')].map(r => r.dataset.id)");
    assert_eq!(order, json!([failed, rolled]), "the operation in no environment is not in `dev`");
    browser.wait(&format!("tr[data-id='{rolled}'] [data-testid=op-environment]"), |t| t == "dev");
    browser.wait(&format!("tr[data-id='{rolled}'] [data-testid=op-pack]"), |t| t == pack);
    browser.js(&format!("const s = document.getElementById('filter-pack'); s.value = '{pack}'; s.dispatchEvent(new Event('change')); return null"));
    browser.wait("[data-testid=operations] caption", |t| t.starts_with("2 of 3"));
    browser.fill("#filter-actor", "nobody");
    browser.wait("[data-testid=no-match]", |t| t.contains("None of the 3"));
}

/// Bugs 6, 7 and 8: a job's log panel stays open across live updates and shows the output as
/// the job writes it; the patch form's draft is valid as drafted (it had an empty `reason:`);
/// a missing operation or resource replaces the page that was on screen.
#[test]
fn logs_tail_live_the_patch_draft_is_valid_and_a_missing_page_replaces_the_last() {
    let Some(shots) = screenshots() else { return };
    let c = Console::start();
    let (failed, browser) = c.rolling_page("logs");
    browser.wait("[data-testid=op-id]", |t| t == failed);
    browser.click_when("#mode-toggle", |t| t == "Advanced view");
    browser.click_when("#logs-install-runtime_n1", |_| true);
    // Its first line while it still runs (it waits for `go-logs`): tailed from the live log.
    browser.wait(
        "[data-testid=logs][data-job='install-runtime@n1']",
        all_of(&["attempt 1 · live", "installing the runtime"]),
    );
    assert_eq!(Console::job_state(&c.get(&failed), "install-runtime@n1"), "running");
    browser.shot_of(&shots, "[data-testid=logs][data-job='install-runtime@n1']", "console-logs-live");
    // The job goes on: the panel stays open through the live updates (the other jobs finish, the
    // check fails) and shows the output when the server has it, without a click.
    c.go("logs");
    browser.wait(
        "[data-testid=logs][data-job='install-runtime@n1']",
        all_of(&["installing the runtime", "runtime installed"]),
    );
    c.wait_op(&failed, "failed", |op| op["state"] == "failed");
    browser.wait("[data-testid=op-state]", |t| t == "failed");
    browser.wait("[data-testid=logs][data-job='install-runtime@n1']", |t| t.contains("runtime installed"));
    browser.shot_of(&shots, "#sec-progress", "console-logs");

    // The draft proposed as it stands is accepted.
    browser.click_when("[data-testid=propose-patch] summary", |_| true);
    let draft = browser.js("return document.getElementById('patch-yaml').value");
    assert!(draft.as_str().unwrap().contains("reason: retry check-the-configuration-of-the-runtime"), "{draft}");
    browser.click_when("#patch-submit", |_| true);
    let result = browser.wait_text("[data-testid=patch-result]", |t| !t.is_empty());
    assert!(result.contains("Patch p1 proposed"), "the draft as drafted is a valid patch: {result}");

    // A missing operation, then a missing resource: the last page does not stay on screen.
    browser.go(&format!("{}/#/operations/op-nosuchthing", c.base()));
    let gone = browser.wait_text("[data-testid=not-found]", |t| t.contains("op-nosuchthing"));
    assert!(gone.contains("No operation op-nosuchthing"), "{gone}");
    assert!(browser.find("[data-testid=op-id]").is_none(), "nothing of the previous operation is left");
    browser.screenshot(&shots, "console-not-found");
    browser.go(&format!("{}/#/resources/fleet.app/nosuch", c.base()));
    browser.wait("[data-testid=not-found]", |t| t.contains("fleet.app/nosuch"));
    assert!(browser.find("[data-testid=op-id]").is_none());
}

/// The run console: the header gives state, progress in jobs, start, duration, who and the
/// failing step (a link opening its panel); the DAG is laid out by dagre with full labels, fits
/// the width, zooms and pans; a node (clicked, or Enter on it) opens a side panel with its
/// contract, attempts with start, end and duration, evidence expected and observed, and its log.
#[test]
fn the_run_console_shows_progress_the_dag_and_a_panel_per_node() {
    let Some(shots) = screenshots() else { return };
    let c = Console::start();
    let (id, browser) = c.rolling_page("console");
    browser.wait("[data-testid=run-progress]", |t| t.starts_with("1/5 jobs"));
    let header = browser.wait_text("[data-testid=run-header]", |t| t.contains("user:sam"));
    assert!(header.contains("running") && header.contains("so far"), "{header}");
    browser.shot_of(&shots, "#op-head", "console-header-running");
    let duration = || browser.js("return document.getElementById('run-duration-value').textContent");
    let first = duration();
    std::thread::sleep(Duration::from_millis(2100));
    assert_ne!(first, duration(), "the duration of a running operation ticks");

    // Full labels, no node over another, and the drawing fits the width.
    browser.wait("[data-testid=dag-node][data-node='check-the-configuration-of-the-runtime']", |_| true);
    let labels =
        browser.js("return [...document.querySelectorAll('[data-testid=dag-node] text.name')].map(t => t.textContent)");
    assert!(labels.as_array().unwrap().contains(&json!("check-the-configuration-of-the-runtime")), "{labels}");
    let overlaps = browser.js(
        "const r = [...document.querySelectorAll('[data-testid=dag-node] rect')].map(e => e.getBoundingClientRect());\
         let n = 0; for (let i = 0; i < r.length; i++) for (let j = i + 1; j < r.length; j++)\
           if (r[i].left < r[j].right && r[j].left < r[i].right && r[i].top < r[j].bottom && r[j].top < r[i].bottom) n++;\
         const label = [...document.querySelectorAll('[data-testid=dag-node]')].every(g => g.querySelector('text.name').getBBox().width <= g.querySelector('rect').getBBox().width);\
         const svg = document.querySelector('[data-testid=dag]').getBoundingClientRect();\
         const wrap = document.querySelector('.dag-wrap').getBoundingClientRect();\
         return [n, label, svg.width <= wrap.width + 1]",
    );
    assert_eq!(overlaps, json!([0, true, true]), "no overlapping nodes, every label inside its node, the DAG fits");
    let before = browser.js("return document.querySelector('.viewport').getAttribute('transform')");
    browser.click_when("#dag-zoom-in", |_| true);
    let after = browser.js("return document.querySelector('.viewport').getAttribute('transform')");
    assert_ne!(before, after, "zoom in changes the view");
    browser.click_when("#dag-fit", |_| true);
    assert_eq!(browser.js("return document.querySelector('.viewport').getAttribute('transform')"), before);
    browser.shot_of(&shots, "#sec-dag", "console-dag");

    // A node with the keyboard: its panel, with the contract and the running attempt.
    browser.js("document.getElementById('node-install-runtime_n2').focus(); return null");
    browser.press("\u{E007}");
    let panel = browser.wait_text("[data-testid=node-panel]", all_of(&["install-runtime@n2", "Attempts"]));
    assert!(panel.contains("linux.host @ nodes") && panel.contains("running"), "{panel}");
    assert_eq!(browser.js("return document.activeElement.id"), "panel-h", "the panel takes the focus");
    // Its log tails live: the first line while the job still waits for `go-console`.
    browser.wait("[data-testid=node-panel] [data-testid=logs]", |t| {
        t.contains("attempt 1 · live") && t.contains("installing the runtime") && !t.contains("runtime installed")
    });
    assert_eq!(Console::job_state(&c.get(&id), "install-runtime@n2"), "running");
    browser.shot_of(&shots, "#sec-panel", "console-panel-live-log");

    // The run fails at the check: the header links the failing step, which opens its panel with
    // the evidence's expected and observed values and the attempt's start, end and duration.
    c.go("console");
    browser.wait("[data-testid=op-state]", |t| t == "failed");
    browser.wait("[data-testid=run-progress]", |t| t.starts_with("4/5 jobs"));
    browser.click_when("[data-testid=run-failing] a", |t| t == "check-the-configuration-of-the-runtime");
    let panel = browser.wait_text("[data-testid=node-panel]", |t| t.contains("mode_careful: failed"));
    assert!(panel.contains("expected careful, observed fast"), "{panel}");
    let attempt = browser.wait_text("[data-testid=panel-attempts]", |t| t.contains("failed"));
    assert!(attempt.contains(" ms") || attempt.contains(" s"), "a duration: {attempt}");
    browser.wait("[data-testid=node-panel] [data-testid=logs]", |t| t.contains("checking"));
    assert_eq!(browser.unlabelled(), json!([]), "every control of the console has a name");
    browser.screenshot(&shots, "console-failed-panel");
    // The Gantt chart: a bar per attempt, the failed check's in red; a bar opens its panel.
    browser.wait("[data-testid=gantt-row][data-job='check-the-configuration-of-the-runtime']", |_| true);
    assert_eq!(browser.js("return document.querySelectorAll('[data-testid=gantt-row]').length"), 5);
    assert!(browser
        .find("[data-testid=gantt-row][data-job='check-the-configuration-of-the-runtime'].bar-failed")
        .is_some());
    browser.shot_of(&shots, "#sec-gantt", "console-gantt");
    // The fan-out collapses into one node and expands again, with the keyboard.
    browser.tab_to_and_press("dag-group-install-runtime");
    let group =
        browser.wait_text("[data-testid=dag-node][data-node='install-runtime ×3']", |t| t.contains("3 succeeded"));
    assert!(group.contains("install-runtime ×3"), "{group}");
    assert!(browser.find("[data-testid=dag-node][data-node='install-runtime@n1']").is_none());
    browser.shot_of(&shots, "#sec-dag", "console-dag-collapsed");
    browser.tab_to_and_press("dag-group-install-runtime");
    browser.wait("[data-testid=dag-node][data-node='install-runtime@n1']", |_| true);
    browser.click_when("#panel-close", |_| true);
    browser.wait("[data-testid=dag-node][data-node='check-the-configuration-of-the-runtime']", |_| true);
    assert!(browser.js("return document.getElementById('sec-panel').hidden") == json!(true));

    // The operations list: when each started and how long it ran.
    browser.go(&format!("{}/#/", c.base()));
    let row = browser.wait_text(&format!("tr[data-id='{id}']"), |t| t.contains("failed"));
    let ran = browser.wait_text(&format!("tr[data-id='{id}'] [data-testid=op-duration]"), |t| !t.is_empty());
    assert!(!ran.contains("so far") && (ran.ends_with(" s") || ran.ends_with(" ms")), "{row}");
    browser.screenshot(&shots, "console-operations");
}

/// A failed run shows its diagnosis — the analyzer's cause, its confidence, the log line that
/// matched — and "Propose this remedy" fills the patch form with the remedy's plan patch, which
/// a person sends.
#[test]
fn a_failed_run_shows_its_diagnosis_and_proposes_its_remedy() {
    let Some(shots) = screenshots() else { return };
    let c = Console::start();
    let id = c.roll("diag", "broken");
    c.wait_op(&id, "failed", |op| op["state"] == "failed");
    let browser = c.operation_page(&id);
    let found = browser.wait_text("[data-testid=diagnosis][data-job='install-runtime@n1']", |t| t.contains("mirror"));
    assert!(found.contains("Confidence") && found.contains("fleet-mirror-down (from the pack)"), "{found}");
    browser.wait("[data-testid=diagnosis][data-job='install-runtime@n1'] [data-testid=diagnosis-evidence]", |t| {
        t.contains("runtime mirror unreachable")
    });
    browser.shot_of(&shots, "#sec-diagnosis", "console-diagnosis");
    browser.click_when("#remedy-install-runtime_n1", |_| true);
    browser.wait("#patch-yaml", |_| true);
    assert_eq!(browser.js("return document.activeElement.id"), "patch-yaml", "the filled form has the focus");
    let draft = browser.js("return document.getElementById('patch-yaml').value");
    assert!(draft.as_str().unwrap().contains("\"install-runtime\""), "{draft}");
    browser.click_when("#patch-submit", |_| true);
    let result = browser.wait_text("[data-testid=patch-result]", |t| !t.is_empty());
    assert!(result.contains("Patch p1 proposed"), "the remedy as proposed is a valid patch: {result}");
    // Its review draws the plan after it, the retried instances marked.
    browser.wait("[data-testid=patch][data-patch=p1] [data-testid=patch-dag]", |_| true);
    let marked = browser.js("return [...document.querySelectorAll('[data-testid=patch-dag-node][data-mark=retried]')].map(n => n.dataset.node)");
    assert!(marked.as_array().is_some_and(|m| m.contains(&json!("install-runtime@n1"))), "{marked}");
    browser.shot_of(&shots, "[data-testid=patch-dag]", "console-patch-dag");
}

/// [P]: a fleet rollout's waves in the run header, as they happen: the wave under way, its
/// instances done and failed, and the failures the rollout still tolerates.
#[test]
fn the_run_header_shows_a_rollouts_wave_and_the_budget_left() {
    let Some(shots) = screenshots() else { return };
    let c = Console::start();
    let rollout = "  rollouts:\n    install-runtime: {waves: [1, 100%], max_failures: 1}\n";
    let id = c.create(
        "roll",
        "waves",
        &format!("  parameters: {{mode: careful}}\n  targets: {{nodes: [node/n1, node/n2, node/n3]}}\n{rollout}"),
    );
    c.wait_running(&id, "install-runtime@n1");
    let browser = c.operation_page(&id);
    let wave = browser.wait_text("[data-testid=run-wave]", |t| t.contains("wave 1/2"));
    assert_eq!(wave.trim(), "install-runtime: wave 1/2: 0/1 done, 0 failed, budget 1 left");
    browser.shot_of(&shots, "#op-head", "console-header-waves");
    c.go("waves");
    browser.wait("[data-testid=op-state]", |t| t == "completed");
    let wave = browser.wait_text("[data-testid=run-wave]", |t| t.contains("wave 2/2"));
    assert_eq!(wave.trim(), "install-runtime: wave 2/2: 2/2 done, 0 failed, budget 1 left");
}

/// The live log through the API: a running job's output from an offset on, a secret parameter it
/// echoes masked (never shown, live or final), and the final log once it ended.
#[test]
fn a_running_jobs_log_is_read_live_with_its_secrets_masked() {
    let c = Console::start();
    let secret = "s3cr3t-live-token";
    let id = c.leaking("leaky", secret);
    let path = format!("/api/v1/operations/{id}/jobs/leak/log");
    // The secret's line is written out once the mask knows it cannot be part of a secret: as
    // soon as enough output follows it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let (status, log) = http(c.server.addr, "GET", &path, &c.vera, "");
        assert_eq!(status, 200, "{log}");
        if log["text"].as_str().unwrap().contains("1000\n") {
            break log;
        }
        assert!(Instant::now() < deadline, "no live output: {log}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = first["text"].as_str().unwrap();
    assert!(text.starts_with("the token is ***\n1\n2\n"), "{}", &text[..40.min(text.len())]);
    assert!(!text.contains(secret) && !text.contains("s3cr3t"), "the secret never shows live");
    assert_eq!(
        (&first["running"], &first["final"], &first["attempt"], &first["from"]),
        (&json!(true), &json!(false), &json!(1), &json!(0))
    );
    // From where the reader was: only what came since.
    let next = first["next"].as_u64().unwrap();
    let (_, more) = http(c.server.addr, "GET", &format!("{path}?after={next}"), &c.vera, "");
    assert_eq!(more["from"], json!(next), "{more}");
    assert!(!more["text"].as_str().unwrap().contains("the token is"), "{more}");
    // Bad input: a clear error; an unknown job: 404.
    // Past the range the OpenAPI document declares (0..=2^63-1), as Schemathesis once sent.
    for after in ["-1", "10000000000000000001", "x"] {
        let (status, bad) = http(c.server.addr, "GET", &format!("{path}?after={after}"), &c.vera, "");
        assert_eq!((status, bad["error"]["code"].as_str()), (400, Some("invalid_parameter")), "{after}: {bad}");
    }
    let (status, none) = http(c.server.addr, "GET", &format!("/api/v1/operations/{id}/jobs/nosuch/log"), &c.vera, "");
    assert_eq!((status, none["error"]["code"].as_str()), (404, Some("no_job")), "{none}");
    // Once it ended: its final log, masked the same way.
    c.go("leaky");
    c.wait_op(&id, "completed", |op| op["state"] == "completed");
    let (_, done) = http(c.server.addr, "GET", &path, &c.vera, "");
    let text = done["text"].as_str().unwrap();
    assert_eq!((&done["running"], &done["final"]), (&json!(false), &json!(true)), "{done}");
    assert!(
        text.starts_with("the token is ***\n") && text.ends_with("3000\ndone\n") && !text.contains(secret),
        "{text}"
    );
}

/// Output shared with a thread that writes it (a command running there).
#[derive(Clone, Default)]
struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// `logs OP JOB --follow`, through the server and on the data directory alike: a running job's
/// output as it arrives (its secret masked), then what its final log adds, ending with the job.
#[test]
fn logs_follow_prints_a_running_jobs_output_as_it_arrives() {
    use clap::Parser as _;
    let c = Console::start();
    let secret = "s3cr3t-follow-token";
    let id = c.leaking("follow", secret);
    let token = c._api.dir.join("vera.token");
    std::fs::write(&token, &c.vera).unwrap();
    let (url, token, data) = (c.base(), token.display().to_string(), c._api.dir.join("data").display().to_string());
    let ways = [vec!["--server", url.as_str(), "--token-file", token.as_str()], vec!["--data-dir", data.as_str()]];
    let followers: Vec<_> = ways
        .iter()
        .map(|way| {
            let mut args = vec!["opsgraph".to_string()];
            args.extend(way.iter().chain(&["logs", id.as_str(), "leak", "--follow"]).map(|a| a.to_string()));
            let out = Shared::default();
            let mut writer = out.clone();
            let thread = std::thread::spawn(move || {
                let cli = opsgraph::cli::Cli::try_parse_from(&args).unwrap();
                let mut err = Vec::new();
                let code = opsgraph::cli::run(cli, &mut std::io::empty(), &mut writer, &mut err);
                (code.map_err(|e| format!("{e:#}")), String::from_utf8(err).unwrap())
            });
            (out, thread)
        })
        .collect();
    // Both print the job's lines while it still waits for `go-follow`.
    let deadline = Instant::now() + Duration::from_secs(30);
    for (out, _) in &followers {
        while !out.text().contains("\n1000\n") {
            assert!(Instant::now() < deadline, "nothing followed: {:?}", out.text());
            std::thread::sleep(Duration::from_millis(50));
        }
        let text = out.text();
        assert!(text.starts_with("==> leak attempt 1 <==\nthe token is ***\n1\n"), "{text}");
        assert!(!text.contains("done") && !text.contains(secret), "{text}");
    }
    assert_eq!(Console::job_state(&c.get(&id), "leak"), "running");
    c.go("follow");
    let mut printed = Vec::new();
    for (out, thread) in followers {
        let (code, err) = thread.join().unwrap();
        assert_eq!(code, Ok(0), "{err}");
        let text = out.text();
        // The final log continues what was printed: its rest, once, and no second copy.
        assert!(text.ends_with("\n2999\n3000\ndone\n"), "{text}");
        assert_eq!(text.matches("the token is").count(), 1, "{text}");
        assert!(!text.contains(secret) && !text.contains("final log"), "{text}");
        printed.push(text);
    }
    assert_eq!(printed[0], printed[1], "through the server and on the data directory alike");
}
