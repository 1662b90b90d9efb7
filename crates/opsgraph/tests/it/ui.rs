//! The web UI in headless Chromium, driven over WebDriver (plain JSON over HTTP): a person
//! signs in with a token, watches an operation, answers its gate and sees it complete; a viewer
//! sees no answer button and a forged answer is refused. Screenshots of the main pages are
//! written out. Skipped when Debian's `chromium` and `chromium-driver` are not installed.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::browser::{all_of, screenshots, ELEMENT};
pub(crate) use crate::browser::{Browser, CHROMEDRIVER, CHROMIUM};
use crate::serve::Server;
use crate::server::{http, intent, Api};

#[test]
fn a_person_answers_a_gate_in_the_browser_and_a_viewer_cannot() {
    let Some(shots) = screenshots() else { return };
    let api = Api::new("");
    let sam = api.token("sam", &["operator"]); // creates the operations
    let bob = api.token("bob", &["sre"]); // answers the gate in the browser
    let vera = api.token("vera", &["viewer"]);
    let server = Server::start(&api);
    let (addr, base) = (server.addr, server.url());

    let create = |name: &str| {
        let (status, created) = http(addr, "POST", "/api/v1/operations", &sam, &intent(name));
        assert_eq!(status, 201, "{created}");
        created["id"].as_str().unwrap().to_string()
    };
    let watched = create("ui1");
    let other = create("ui2");

    let browser = Browser::start();
    browser.go(&format!("{base}/"));
    // Sign in: a labelled password input.
    assert!(browser.find("label[for=token]").is_some(), "the token input has a label");
    let input = browser.wait("input#token[type=password]", |_| true);
    browser.type_in(&input, &bob);
    browser.click(&browser.find("#signin-submit").unwrap());
    browser.wait("[data-testid=whoami]", all_of(&["bob", "sre"]));
    browser.wait(&format!("tr[data-id='{watched}']"), |t| t.contains("paused"));
    browser.screenshot(&shots, "operations");

    // The operation page: stages, the gate with its options, live updates.
    browser.click_when(&format!("tr[data-id='{watched}'] a"), |_| true);
    browser.wait("[data-testid=stage][data-stage=greet]", |t| t.contains("0 of 1 jobs done"));
    browser.wait("button[data-gate=approve-hello][data-option=approve]", |t| t == "approve");
    assert!(browser.find("button[data-option='cancel operation']").is_some());
    browser.screenshot(&shots, "operation-gate");
    browser.click_when("button[data-gate=approve-hello][data-option=approve]", |t| t == "approve");
    browser.wait("[data-testid=op-state]", |t| t == "completed");
    browser.wait("[data-testid=stage][data-stage=greet]", |t| t.contains("1 of 1 jobs done"));
    assert!(browser.find("button[data-testid=gate-option]").is_none(), "no open gate is left");
    browser.wait("[data-testid=timeline]", |t| t.contains("user:bob"));
    // Advanced mode: jobs with their contracts, attempts, outcome and evidence.
    browser.click_when("#mode-toggle", |t| t == "Advanced view");
    browser.wait("tr[data-job=say-hello]", all_of(&["succeeded", "greeting_written: passed", "hello.greeting"]));
    browser.screenshot(&shots, "operation-advanced");
    let (_, op) = http(addr, "GET", &format!("/api/v1/operations/{watched}"), &sam, "");
    assert_eq!(op["state"], "completed", "{op}");

    // A viewer: signed in with the keyboard (Enter), sees the other gate but no button for it.
    browser.click_when("#signout", |_| true);
    let input = browser.wait("input#token", |_| true);
    browser.type_in(&input, &format!("{vera}\u{E007}"));
    browser.wait("[data-testid=whoami]", all_of(&["vera", "viewer"]));
    browser.go(&format!("{base}/#/operations/{other}"));
    browser.wait("[data-testid=op-id]", |t| t == other);
    browser.wait("[data-testid=gate][data-gate=approve-hello]", |t| t.contains("Needs one of the roles sre"));
    assert!(browser.find("button[data-testid=gate-option]").is_none(), "a viewer sees no answer button");
    browser.screenshot(&shots, "operation-viewer");
    let (_, op) = http(addr, "GET", &format!("/api/v1/operations/{other}"), &sam, "");
    let forged = json!({"option": "approve", "revision": op["plan_revision"]}).to_string();
    let (status, body) =
        http(addr, "POST", &format!("/api/v1/operations/{other}/gates/approve-hello/answer"), &vera, &forged);
    assert_eq!(status, 403, "{body}");

    // The files are served with a content security policy and no inline script.
    let page = browser.agent.get(&format!("{base}/")).call().unwrap();
    assert_eq!(
        page.headers()["content-security-policy"].to_str().unwrap().split(';').next(),
        Some("default-src 'self'")
    );
    drop(browser);
    drop(server);
}

/// Without a browser: the UI's files, their content types and policy, and the stages the
/// operation page draws.
#[test]
fn the_ui_files_are_served_with_a_content_security_policy_and_no_inline_script() {
    let api = Api::new("");
    let raw = |path: &str| {
        let req = axum::http::Request::builder().uri(path).body(axum::body::Body::empty()).unwrap();
        let response =
            api.rt.block_on(tower::ServiceExt::oneshot(opsgraph_server::router(api.state.clone()), req)).unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = api.rt.block_on(axum::body::to_bytes(response.into_body(), usize::MAX)).unwrap();
        (status, headers, String::from_utf8(bytes.to_vec()).unwrap())
    };
    for (path, media) in [
        ("/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
        ("/ui/dagre.min.js", "text/javascript"),
    ] {
        let (status, headers, text) = raw(path);
        assert_eq!(status, 200, "{path}");
        assert!(headers["content-type"].to_str().unwrap().starts_with(media), "{path}");
        assert!(headers["content-security-policy"].to_str().unwrap().starts_with("default-src 'self'"), "{path}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert!(!text.is_empty());
        if path == "/" {
            // Every script is a file of this origin: nothing inline, no handlers in attributes.
            assert_eq!(text.matches("<script").count(), text.matches("<script src=\"/ui/").count());
            assert!(!text.contains(" onclick=") && !text.contains(" style="));
        }
    }
    let r = api.call("GET", "/ui/secret.txt", None, "", &[]);
    assert_eq!((r.status, r.code()), (404, "no_ui_file"));
    let r = api.call("GET", "/ui/../Cargo.toml", None, "", &[]);
    assert_eq!(r.status, 404);

    // The operation document carries the plan's stages with their job instances and status.
    let sam = api.token("sam", &["operator"]);
    let created = api.call("POST", "/api/v1/operations", Some(&sam), &intent("st1"), &[]);
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap();
    let op = api.call("GET", &format!("/api/v1/operations/{id}"), Some(&sam), "", &[]).body;
    assert_eq!(op["stages"], json!([{"id": "greet", "name": "Greet", "status": "pending", "jobs": ["say-hello"]}]));
    assert!(api.state.wait_idle(Duration::from_secs(30)));
}

/// The issue's story in the browser: an operator files an intent from the form generated from
/// the template's parameter schema, previews the plan and applies it; an SRE answers its gate and
/// watches the run fail; a second SRE proposes a patch; a viewer sees the patch but no approve
/// button, and the viewer's forged approval is refused; the first SRE reviews the diff and the
/// Reviewer's findings and approves with the keyboard; the operation completes; the resource it
/// made is on the resources page. Screenshots of every main page are written out.
#[test]
fn a_person_files_an_intent_answers_a_gate_and_approves_a_patch_in_the_browser() {
    let Some(shots) = screenshots() else { return };
    let api = Api::new("");
    let sam = api.token("sam", &["operator"]); // files the intent
    let bob = api.token("bob", &["sre"]); // answers the gate, approves the patch
    let ada = api.token("ada", &["sre"]); // proposes the patch
    let vera = api.token("vera", &["viewer"]);
    let server = Server::start(&api);
    let (addr, base) = (server.addr, server.url());

    let browser = Browser::start();
    browser.go(&format!("{base}/"));
    browser.sign_in(&sam, "sam");
    // The new operation form: pack, action, and the template's parameters with their defaults.
    browser.click_when("#nav-new", |_| true);
    browser.wait("#new-pack", |t| t.contains("hello@1.0.0"));
    browser.wait("[data-testid=param][data-param=word]", all_of(&["word", "string"]));
    let word = browser.wait("input#param-word", |_| true);
    assert_eq!(browser.js("return document.getElementById('param-word').value"), "hello", "the default is filled in");
    assert_eq!(browser.unlabelled(), json!([]), "every control of the form has a label");
    browser.fill("#new-name", "uistory");
    browser.cmd("POST", &format!("/element/{word}/clear"), json!({})).unwrap();
    browser.type_in(&word, "bye");
    browser.click_when("#preview-btn", |_| true);
    browser.wait("[data-testid=preview-text]", all_of(&["Plan hello.install", "approve-hello"]));
    browser.screenshot(&shots, "new-operation-preview");
    assert!(api.state.store().unwrap().operations(&Default::default()).unwrap().is_empty(), "a preview runs nothing");
    browser.click_when("[data-testid=apply]", |t| t.contains("Apply"));
    let id = browser.wait_text("[data-testid=op-id]", |t| t.starts_with("op-"));
    browser.wait("[data-testid=op-detail]", |t| t.contains("waiting for gate approve-hello"));
    // The operator may not answer this gate: no button, the reason why.
    browser.wait("[data-testid=gate][data-gate=approve-hello]", |t| t.contains("Needs one of the roles sre"));
    let (_, op) = http(addr, "GET", &format!("/api/v1/operations/{id}"), &sam, "");
    assert_eq!(op["intent"]["parameters"]["word"], "bye", "{op}");
    assert_eq!(op["actor"], "user:sam");

    // The SRE answers the gate and watches the run fail its evidence.
    browser.sign_in(&bob, "bob");
    browser.go(&format!("{base}/#/operations/{id}"));
    browser.wait("[data-testid=op-id]", |t| t == id);
    browser.click_when("button[data-gate=approve-hello][data-option=approve]", |t| t == "approve");
    browser.wait("[data-testid=op-state]", |t| t == "failed");
    browser.wait("[data-testid=stage][data-stage=greet]", all_of(&["0 of 1 jobs done", "failed"]));
    assert!(browser.find("#op-retry").is_some(), "an SRE may retry a failed run");
    browser.screenshot(&shots, "operation-simple");
    // The DAG with live states, and the capability graph.
    browser.wait("[data-testid=dag-node][data-node=say-hello][data-state=failed]", |_| true);
    browser.wait("[data-testid=dag-node][data-node=approve-hello][data-state=answered]", |_| true);
    browser.shot_of(&shots, "#sec-dag", "dag");
    browser.shot_of(&shots, "#sec-caps", "capability-graph");
    // Advanced mode: the job's contract, attempts, evidence and its log.
    browser.click_when("#mode-toggle", |t| t == "Advanced view");
    browser
        .wait("tr[data-job=say-hello]", all_of(&["failed", "greeting_written: failed", "provides", "hello.greeting"]));
    browser.click_when("#logs-say-hello", |_| true);
    browser.wait("tr[data-job=say-hello] [data-testid=logs]", |t| t.contains("attempt 1"));
    browser.screenshot(&shots, "operation-advanced");
    assert_eq!(browser.unlabelled(), json!([]), "every control of the operation page has a label");

    // A second SRE proposes the patch; everyone sees it live.
    let fix = "plan_patch:\n  reason: the greeting must be hello\n  changes:\n    - set_parameters: {parameters: {word: hello}}\n    - retry: {job: say-hello}\n  approval: {required: true, roles: [sre]}\n";
    let (status, proposed) = http(addr, "POST", &format!("/api/v1/operations/{id}/patches"), &ada, fix);
    assert_eq!(status, 200, "{proposed}");
    browser.wait("[data-testid=patch][data-patch=p1]", |t| t.contains("waiting_for_approval"));

    // A viewer sees the patch, its diff and findings, and no approve button; a forged approval
    // is refused.
    browser.sign_in(&vera, "vera");
    browser.go(&format!("{base}/#/operations/{id}"));
    browser.wait("[data-testid=op-id]", |t| t == id);
    browser.wait("[data-testid=patch][data-patch=p1] [data-testid=patch-diff]", |t| t.contains("parameter word"));
    browser.wait("[data-testid=patch-not-yours]", |t| t.contains("approve_patches"));
    assert!(browser.find("button[data-testid=gate-option]").is_none(), "a viewer sees no approve button");
    assert!(browser.find("#op-retry").is_none() && browser.find("#op-cancel").is_none(), "nor controls");
    browser.screenshot(&shots, "patch-review-viewer");
    let (_, op) = http(addr, "GET", &format!("/api/v1/operations/{id}"), &vera, "");
    let forged = json!({"option": "approve patch", "revision": op["plan_revision"]}).to_string();
    let (status, body) = http(addr, "POST", &format!("/api/v1/operations/{id}/gates/patch-p1/answer"), &vera, &forged);
    assert_eq!(status, 403, "{body}");

    // The author may not approve their own patch: no button for ada either.
    browser.sign_in(&ada, "ada");
    browser.go(&format!("{base}/#/operations/{id}"));
    browser.wait("[data-testid=op-id]", |t| t == id);
    browser.wait("[data-testid=patch-own]", |t| t.contains("another person must approve"));

    // The first SRE reviews the diff and findings and approves with the keyboard alone.
    browser.sign_in(&bob, "bob");
    browser.go(&format!("{base}/#/operations/{id}"));
    browser.wait("[data-testid=op-id]", |t| t == id);
    browser.wait(
        "[data-testid=patch][data-patch=p1] [data-testid=patch-diff]",
        all_of(&["~ parameter word: \"bye\" -> \"hello\"", "↻ retry say-hello"]),
    );
    browser.wait("[data-testid=patch][data-patch=p1] [data-testid=patch-findings]", |t| !t.is_empty());
    browser.wait("button[data-gate=patch-p1][data-option='approve patch']", |t| t == "approve patch");
    browser.shot_of(&shots, "#sec-patches", "patch-review");
    let focused = || browser.js("return document.activeElement && document.activeElement.dataset.option || ''");
    let mut tabs = 0;
    while focused() != "approve patch" {
        browser.press("\u{E004}"); // Tab
        tabs += 1;
        assert!(tabs < 80, "the approve button is not reachable with Tab");
    }
    browser.press("\u{E007}"); // Enter
    browser.wait("[data-testid=op-state]", |t| t == "completed");
    browser.wait("[data-testid=patch][data-patch=p1]", all_of(&["approved", "user:bob"]));
    browser.wait("[data-testid=dag-node][data-node=say-hello][data-state=succeeded]", |_| true);
    browser.screenshot(&shots, "operation-completed");
    let (_, op) = http(addr, "GET", &format!("/api/v1/operations/{id}"), &sam, "");
    assert_eq!(op["state"], "completed", "{op}");
    assert_eq!(std::fs::read_to_string(api.dir.join("data/lab/greeting-uistory")).unwrap(), "hello");

    // The resources page: the resource the operation made, and the operation that explains it.
    let resource = op["resource"].as_str().expect("the operation names its resource").to_string();
    browser.click_when("#nav-resources", |_| true);
    browser.wait(&format!("tr[data-testid=resource-row][data-id='{resource}']"), |t| t.contains(&id));
    browser.screenshot(&shots, "resources");
    browser.click_when(&format!("tr[data-id='{resource}'] a"), |_| true);
    browser.wait("[data-testid=resource-ops]", all_of(&[id.as_str(), "completed"]));
    browser.screenshot(&shots, "resource");

    drop(browser);
    drop(server);
}

/// A pack with secret parameters, a secret and an internal artifact, and a requirement the world
/// inventory answers: one candidate bound, two rejected with their reasons.
const VAULT: &[(&str, &str)] = &[
    (
        "vault/pack.yaml",
        "scenario_pack:\n  id: vault\n  version: 1.0.0\n  title: Vault\n  resource_types: [vault.thing]\n  actions: [run]\n  requires: [{capability: kv.store}]\n  plan_templates: [{id: vault.run}]\n",
    ),
    (
        "vault/templates.yaml",
        "plan_template:\n  id: vault.run\n  action: run\n  parameters:\n    db_password: {type: string, secret: true, required: true, description: the database password}\n    size: {type: integer, default: 3}\n    tier: {type: string, enum: [small, large], default: small}\n  stages: [{id: all, name: All, jobs: [make-token, use-token]}]\n  jobs: [make-token, use-token]\n",
    ),
    (
        "vault/jobs.yaml",
        r#"job:
  id: make-token
  outputs: {artifacts: [token, notes]}
  run:
    command: |
      printf 'ART%s' "${OPSGRAPH_PARAM_DB_PASSWORD#PW}" > "$OPSGRAPH_OUT/token"
      printf 'notes of %s, size %s, tier %s' "$OPSGRAPH_INTENT_NAME" "$OPSGRAPH_PARAM_SIZE" "$OPSGRAPH_PARAM_TIER" > "$OPSGRAPH_OUT/notes"
---
job:
  id: use-token
  inputs: {requires: {artifacts: [token]}}
  outputs: {provides: {capabilities: [vault.used]}, evidence: [token_readable]}
  run: {command: "true"}
"#,
    ),
    (
        "vault/evidence.yaml",
        "evidence:\n  - {id: token_readable, source: command, command: 'cat \"$OPSGRAPH_ARTIFACT_TOKEN\"', contains: CANARY}\n",
    ),
    (
        "vault/artifacts.yaml",
        "artifact: {id: token, type: token, sensitivity: secret, visible_to_roles: [platform_admin]}\n---\nartifact: {id: notes, type: notes, sensitivity: internal}\n",
    ),
    (
        "world/kv.yaml",
        "resource: {type: kv, name: good, environment: dev, health: healthy, status: running, provides: [kv.store]}\n---\nresource: {type: kv, name: broken, environment: dev, health: error, status: running, provides: [kv.store]}\n---\nresource: {type: kv, name: prodbox, environment: prod, health: healthy, status: running, provides: [kv.store]}\n",
    ),
];

/// Secret parameters are password inputs and never shown; the capability graph shows the binding
/// and each rejected candidate's reason; an internal artifact is shown to a viewer, a secret one
/// only revealed by an allowed role, and the reveal is audited.
#[test]
fn secrets_stay_hidden_unless_revealed_and_the_capability_graph_explains_the_binding() {
    let Some(shots) = screenshots() else { return };
    let api = Api::over(crate::support::temp_dir(VAULT)).packs(&["vault"]).world(&["world"]).build();
    let ada = api.token("ada", &["platform_admin"]);
    let vera = api.token("vera", &["viewer"]);
    let server = Server::start(&api);
    let (addr, base) = (server.addr, server.url());
    let password = "PW-CANARY-ui";
    let artifact = "ART-CANARY-ui";

    let browser = Browser::start();
    browser.go(&format!("{base}/#/new"));
    browser.sign_in(&ada, "ada");
    // The form from the schema: a secret is a password input, an integer a number, an enum a list.
    browser.wait("[data-testid=param][data-param=db_password]", |t| t.contains("required, secret"));
    assert!(browser.find("input#param-db_password[type=password][required]").is_some());
    assert!(browser.find("input#param-size[type=number]").is_some());
    assert!(browser.find("select#param-tier").is_some());
    assert_eq!(browser.unlabelled(), json!([]));
    browser.fill("#new-name", "v-ui");
    browser.fill("#param-db_password", password);
    browser.fill("#param-size", "5");
    // Without a required value the browser does not send the form; with it, the preview.
    browser.click_when("#preview-btn", |_| true);
    browser.wait("[data-testid=preview-text]", all_of(&["Plan vault.run", "kv.store"]));
    browser.click_when("[data-testid=apply]", |_| true);
    let id = browser.wait_text("[data-testid=op-id]", |t| t.starts_with("op-"));
    browser.wait("[data-testid=op-state]", |t| t == "completed");

    // The capability graph: bound to kv/good; the others rejected, each with its reason.
    browser.wait(
        "tr[data-testid=capability][data-capability='kv.store']",
        all_of(&["bind", "kv/good", "kv/broken", "health is error", "kv/prodbox"]),
    );
    browser.shot_of(&shots, "#sec-caps", "capability-graph-bound");
    // The notes are shown; the secret token only after a reveal, with a reason, audited.
    browser.wait("tr[data-artifact=token][data-sensitivity=secret]", |t| t.contains("Reveal"));
    browser.click_when("tr[data-artifact=notes] button", |t| t.contains("Show"));
    browser.wait("tr[data-artifact=notes] [data-testid=artifact-content]", |t| {
        t.contains("notes of v-ui, size 5, tier small")
    });
    let page = browser.js("return document.body.innerText").to_string();
    assert!(!page.contains(password) && !page.contains(artifact), "no secret on the page before a reveal");
    browser.fill("#reason-make-token-token", "rotate the db user");
    browser.click_when("#reveal-make-token-token", |_| true);
    browser.wait("tr[data-artifact=token] [data-testid=artifact-content]", all_of(&[artifact, "audit"]));
    browser.shot_of(&shots, "#sec-artifacts", "artifacts-revealed");
    let audit = api.audit();
    assert!(audit.iter().any(|a| a.starts_with("user:ada artifact.reveal")), "{audit:?}");

    // An intent without the required secret: its run waits at a missing-input gate, answered
    // with a value typed from the parameter's schema (a password input).
    let intent = json!({"intent": {"target_resource_type": "vault.thing", "action": "run", "name": "v-two", "environment": "dev"}});
    let (status, created) = http(addr, "POST", "/api/v1/operations", &ada, &intent.to_string());
    assert_eq!(status, 201, "{created}");
    let second = created["id"].as_str().unwrap().to_string();
    browser.go(&format!("{base}/#/operations/{second}"));
    browser.wait("[data-testid=op-id]", |t| t == second);
    browser.wait("[data-testid=gate][data-gate=input-db-password]", |t| t.contains("missing_input"));
    let value = "input#gate-value-input-db-password-db_password[type=password]";
    browser.fill(value, "PW-CANARY-two");
    browser.click_when("button[data-gate=input-db-password][data-option='provide a value']", |_| true);
    browser.wait("[data-testid=op-state]", |t| t == "completed");
    let (_, gates) = http(addr, "GET", &format!("/api/v1/operations/{second}/gates"), &ada, "");
    assert_eq!(gates["gates"][0]["value"], json!({"secret": "sealed"}), "{gates}");

    // A viewer: the operation's parameters and the token stay hidden, no reveal control.
    browser.sign_in(&vera, "vera");
    browser.go(&format!("{base}/#/operations/{id}"));
    browser.wait("[data-testid=op-id]", |t| t == id);
    browser.wait("tr[data-artifact=token] [data-testid=secret-hidden]", |t| t.contains("not shown"));
    assert!(browser.find("[data-testid=reveal]").is_none(), "a viewer has no reveal button");
    browser.click_when("#mode-toggle", |t| t == "Advanced view");
    browser.wait("tr[data-job='use-token']", all_of(&["succeeded", "token_readable: passed"]));
    let page = browser.js("return document.body.innerText").to_string();
    assert!(!page.contains(password) && !page.contains(artifact), "no secret on a viewer's page");
    browser.screenshot(&shots, "artifacts-viewer");
    let (status, _) = http(addr, "POST", &format!("/api/v1/operations/{id}/artifacts/token/reveal"), &vera, "{}");
    assert_eq!(status, 403, "a forged reveal is refused");

    drop(browser);
    drop(server);
}

/// A pack of two stages: `wait-for-go` runs until the test creates `go-<name>` in the lab
/// directory (so a run stays running as long as the test needs), then `say-hello` writes the
/// greeting its evidence expects to be `hello`. No gate: an operator's intent runs at once.
pub(crate) const STEPS: &[(&str, &str)] = &[
    (
        "steps/pack.yaml",
        "scenario_pack:\n  id: steps\n  version: 1.0.0\n  title: Steps\n  resource_types: [steps.app]\n  actions: [run]\n  provides: [steps.greeting]\n  plan_templates: [{id: steps.run}]\n",
    ),
    (
        "steps/templates.yaml",
        "plan_template:\n  id: steps.run\n  action: run\n  parameters:\n    word: {type: string, default: hello}\n  stages:\n    - {id: wait, name: Wait, jobs: [wait-for-go]}\n    - {id: greet, name: Greet, jobs: [say-hello]}\n  jobs: [wait-for-go, say-hello]\n",
    ),
    (
        "steps/jobs.yaml",
        r#"job:
  id: wait-for-go
  run: {command: "i=0; while [ ! -e \"$OPSGRAPH_LAB_DIR/go-$OPSGRAPH_INTENT_NAME\" ]; do i=$((i+1)); [ $i -lt 900 ] || exit 1; sleep 0.1; done"}
---
job:
  id: say-hello
  after: [wait-for-go]
  outputs:
    provides: {capabilities: [steps.greeting]}
    evidence: [greeting_written]
  run: {command: "printf '%s' \"$OPSGRAPH_PARAM_WORD\" > \"$OPSGRAPH_LAB_DIR/greeting-$OPSGRAPH_INTENT_NAME\""}
"#,
    ),
    (
        "steps/evidence.yaml",
        "evidence:\n  - id: greeting_written\n    source: command\n    command: cat \"$OPSGRAPH_LAB_DIR/greeting-$OPSGRAPH_INTENT_NAME\"\n    expected: \"hello\"\n",
    ),
];

/// The timeline of an operation as the API shows it: (seq, actor, event, to).
fn timeline(addr: std::net::SocketAddr, id: &str, token: &str) -> Vec<(i64, String, String, String)> {
    let (status, body) = http(addr, "GET", &format!("/api/v1/operations/{id}/timeline"), token, "");
    assert_eq!(status, 200, "{body}");
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    body["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["seq"].as_i64().unwrap(), s(&e["actor"]), s(&e["event"]), s(&e["to"])))
        .collect()
}

/// The operator's and the SRE's controls, with the keyboard where it matters: an operator pauses
/// and resumes a run with Tab and Enter, cancels another after the page asks, and has no repair
/// controls; an SRE records a manual fix that the evidence refutes (the page says why and keeps
/// what was typed), then one that verifies, and proposes a patch from the page that completes a
/// third run; a viewer sees none of these controls and each forged request is refused (403
/// `forbidden`). Each effect is checked on the page and through the API. Event streams last 1.5 s
/// here: the page resumes them with `Last-Event-ID`, sees updates after each forced end, and
/// receives every timeline entry once.
#[test]
fn an_operator_pauses_resumes_and_cancels_with_the_keyboard_and_an_sre_repairs_failed_runs() {
    let Some(shots) = screenshots() else { return };
    let dir = crate::support::temp_dir(STEPS);
    let lab = dir.join("data/lab");
    std::fs::create_dir_all(&lab).unwrap();
    let limits = opsgraph_server::Limits { event_stream_duration: Duration::from_millis(1500), ..Default::default() };
    let api = Api::over(dir).packs(&["steps"]).limits(limits).build();
    let sam = api.token("sam", &["operator"]);
    let bob = api.token("bob", &["sre"]);
    let vera = api.token("vera", &["viewer"]);
    let server = Server::start(&api);
    let (addr, base) = (server.addr, server.url());
    let go = |name: &str| std::fs::write(lab.join(format!("go-{name}")), "").unwrap();
    let create = |name: &str, word: &str| {
        let intent = format!(
            "intent:\n  target_resource_type: steps.app\n  action: run\n  name: {name}\n  environment: dev\n  parameters: {{word: {word}}}\n"
        );
        let (status, created) = http(addr, "POST", "/api/v1/operations", &sam, &intent);
        assert_eq!(status, 201, "{created}");
        created["id"].as_str().unwrap().to_string()
    };
    let get = |id: &str| http(addr, "GET", &format!("/api/v1/operations/{id}"), &sam, "").1;
    let wait_api = |id: &str, want: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let op = get(id);
            if op["state"] == want {
                return op;
            }
            assert!(Instant::now() < deadline, "{id} never became {want}: {op}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let job_state = |op: &Value, job: &str| {
        op["jobs"].as_array().unwrap().iter().find(|j| j["id"] == job).map(|j| j["state"].clone()).unwrap_or_default()
    };
    let wait_job = |id: &str, job: &str, want: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while job_state(&get(id), job) != want {
            assert!(Instant::now() < deadline, "{id}: {job} never became {want}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    // --- The operator pauses and resumes a running operation with Tab and Enter alone.
    let run = create("pr", "hello");
    wait_job(&run, "wait-for-go", "running");
    let browser = Browser::start();
    browser.go(&format!("{base}/#/operations/{run}"));
    browser.sign_in(&sam, "sam");
    browser.wait("[data-testid=op-id]", |t| t == run);
    browser.wait("[data-testid=stage][data-stage=wait]", |t| t.contains("running"));
    browser.wait("#op-pause", |t| t == "Pause");
    assert!(browser.find("[data-testid=intervention]").is_none(), "an operator may not intervene");
    assert_eq!(browser.unlabelled(), json!([]), "every control of the running operation has a name");
    browser.tab_to_and_press("op-pause");
    browser.wait("[data-testid=op-state]", |t| t == "paused");
    browser.wait("[data-testid=op-detail]", |t| t.contains("paused by a person"));
    assert_eq!(get(&run)["state"], "paused");
    // Focus moved from Pause (gone) to Resume, the control that took its place.
    browser.wait("#op-resume", |t| t == "Resume");
    assert_eq!(browser.js("return document.activeElement.id"), "op-resume", "focus follows the control");
    browser.screenshot(&shots, "operation-paused");
    // The stream of this page has been ended by the server (1.5 s) and resumed meanwhile.
    let deadline = Instant::now() + Duration::from_secs(10);
    while browser.js("return live.reconnects") == json!(0) {
        assert!(Instant::now() < deadline, "the page never resumed its stream");
        std::thread::sleep(Duration::from_millis(100));
    }
    browser.tab_to_and_press("op-resume");
    browser.wait("[data-testid=op-state]", |t| t == "running");
    assert_eq!(get(&run)["state"], "running");
    let entries = timeline(addr, &run, &sam);
    let controls: Vec<(&str, &str, &str)> = entries
        .iter()
        .filter(|e| ["pause", "resume"].contains(&e.2.as_str()))
        .map(|e| (e.1.as_str(), e.2.as_str(), e.3.as_str()))
        .collect();
    assert_eq!(controls, [("user:sam", "pause", "paused"), ("user:sam", "resume", "running")], "{entries:?}");
    // Updates keep coming after forced ends: the job's progress arrives only by the stream.
    let resumed = browser.js("return live.reconnects").as_i64().unwrap();
    while browser.js("return live.reconnects").as_i64().unwrap() == resumed {
        assert!(Instant::now() < deadline + Duration::from_secs(10), "the stream was not ended again");
        std::thread::sleep(Duration::from_millis(100));
    }
    go("pr");
    browser.wait("[data-testid=op-state]", |t| t == "completed");
    browser.wait("[data-testid=stage][data-stage=greet]", |t| t.contains("1 of 1 jobs done"));
    browser.wait("#live[data-state=ended]", |_| true);
    let received: Vec<i64> = serde_json::from_value(browser.js("return live.ids")).unwrap();
    let seqs: Vec<i64> = timeline(addr, &run, &sam).iter().map(|e| e.0).collect();
    assert_eq!(received, seqs, "every entry once, in order, over {} streams", browser.js("return live.reconnects"));
    assert!(browser.find("#op-pause, #op-resume, #op-cancel").is_none(), "no controls on a completed run");

    // --- Cancel, on another operation: the page asks first, with an optional reason.
    let doomed = create("cx", "hello");
    wait_job(&doomed, "wait-for-go", "running");
    browser.go(&format!("{base}/#/operations/{doomed}"));
    browser.wait("[data-testid=op-id]", |t| t == doomed);
    browser.wait("[data-testid=stage][data-stage=wait]", |t| t.contains("running"));
    browser.tab_to_and_press("op-cancel");
    browser.wait("[data-testid=cancel-confirm]", |t| t.contains("cannot be resumed"));
    assert_eq!(
        browser.js("return document.activeElement.id"),
        "op-cancel-no",
        "the question has the focus, on its safe answer"
    );
    assert_eq!(get(&doomed)["state"], "running", "asking cancels nothing");
    assert_eq!(browser.unlabelled(), json!([]));
    browser.screenshot(&shots, "operation-cancel-confirm");
    // No: nothing happens and focus is back on Cancel. Then yes, with a reason.
    browser.tab_to_and_press("op-cancel-no");
    browser.wait("#op-cancel", |_| true);
    assert!(browser.find("[data-testid=cancel-confirm]").is_none());
    assert_eq!(browser.js("return document.activeElement.id"), "op-cancel");
    browser.press("\u{E007}"); // Enter on Cancel again
    browser.wait("[data-testid=cancel-confirm]", |_| true);
    browser.fill("#cancel-reason", "not needed any");
    // Meanwhile someone else pauses it: the page redraws live, and the question, what was typed,
    // the focus and the caret are all still there.
    let (status, body) = http(addr, "POST", &format!("/api/v1/operations/{doomed}/pause"), &bob, "{}");
    assert_eq!(status, 200, "{body}");
    browser.wait("[data-testid=op-state]", |t| t == "paused");
    browser.wait("[data-testid=cancel-confirm]", |_| true);
    assert_eq!(browser.js("return document.activeElement.id"), "cancel-reason");
    let active = browser.cmd("GET", "/element/active", Value::Null).unwrap();
    browser.type_in(active[ELEMENT].as_str().unwrap(), " more");
    assert_eq!(browser.js("return document.getElementById('cancel-reason').value"), "not needed any more");
    browser.tab_to_and_press("op-cancel-yes");
    browser.wait("[data-testid=op-state]", |t| t == "cancelled");
    browser.wait("[data-testid=timeline]", all_of(&["user:sam", "not needed any more"]));
    browser.wait("[data-testid=stage][data-stage=wait]", |t| t.contains("cancelled"));
    assert!(browser.find("#op-pause, #op-resume, #op-cancel").is_none(), "no controls on a cancelled run");
    let op = get(&doomed);
    assert_eq!((&op["state"], job_state(&op, "wait-for-go")), (&json!("cancelled"), json!("cancelled")), "{op}");
    let entries = timeline(addr, &doomed, &sam);
    let controls: Vec<(&str, &str)> = entries
        .iter()
        .filter(|e| ["pause", "cancel"].contains(&e.2.as_str()))
        .map(|e| (e.1.as_str(), e.3.as_str()))
        .collect();
    assert_eq!(controls, [("user:bob", "paused"), ("user:sam", "cancelled")], "{entries:?}");
    assert!(api.audit().iter().any(|a| a == &format!("user:sam operation.cancel {doomed}")), "{:?}", api.audit());

    // --- A failed run: the operator gets no repair controls, and a forged repair is refused.
    let failed = create("fx", "bye");
    go("fx");
    wait_api(&failed, "failed");
    browser.go(&format!("{base}/#/operations/{failed}"));
    browser.wait("[data-testid=op-id]", |t| t == failed);
    browser.wait("[data-testid=op-state]", |t| t == "failed");
    assert!(browser.find("#op-cancel").is_some(), "an operator may cancel a failed run");
    assert!(browser.find("[data-testid=intervention]").is_none(), "an operator may not intervene");
    assert!(browser.find("[data-testid=propose-patch]").is_none() && browser.find("#op-retry").is_none());
    let fix = |note: &str| {
        json!({"intervention": {"type": "manually_fixed", "target_job": "say-hello", "note": note, "requires_verification": ["greeting_written"]}}).to_string()
    };
    let (status, body) =
        http(addr, "POST", &format!("/api/v1/operations/{failed}/interventions"), &sam, &fix("forged"));
    assert_eq!((status, &body["error"]["code"]), (403, &json!("forbidden")), "{body}");
    assert_eq!(body["error"]["details"]["needs"], "intervene", "{body}");

    // --- The SRE records a fix the evidence refutes: the page shows why, the run stays failed.
    browser.sign_in(&bob, "bob");
    browser.go(&format!("{base}/#/operations/{failed}"));
    browser.wait("[data-testid=op-id]", |t| t == failed);
    browser.click_when("[data-testid=intervention] summary", |_| true);
    browser.wait("#iv-job", |t| t.contains("say-hello"));
    assert_eq!(
        browser.js("return document.getElementById('iv-checks').value"),
        "greeting_written",
        "the job's evidence"
    );
    assert_eq!(browser.unlabelled(), json!([]), "every control of the intervention form has a name");
    browser.fill("#iv-note", "rewrote the greeting by hand");
    browser.click_when("#iv-submit", |_| true);
    browser.wait(
        "[data-testid=intervention-result][data-verified=false]",
        all_of(&["Not verified", "greeting_written: failed", "hello", "bye"]),
    );
    browser.wait("[data-testid=status]", |t| t.contains("the evidence refutes the fix"));
    browser.wait("[data-testid=op-state]", |t| t == "failed");
    browser.wait("[data-testid=timeline]", |t| t.contains("intervention_recorded"));
    // What was typed is still there after the live redraws, for the next try.
    assert_eq!(browser.js("return document.getElementById('iv-note').value"), "rewrote the greeting by hand");
    browser.shot_of(&shots, "#op-act", "intervention-refused");
    assert_eq!(get(&failed)["state"], "failed");
    let entries = timeline(addr, &failed, &sam);
    let recorded = |entries: &[(i64, String, String, String)]| {
        entries.iter().filter(|e| e.1 == "user:bob" && e.2 == "intervention_recorded").count()
    };
    assert_eq!(recorded(&entries), 1, "{entries:?}");
    let last = entries.last().unwrap();
    assert_eq!(
        (last.1.as_str(), last.2.as_str(), last.3.as_str()),
        ("user:bob", "still_broken", "failed"),
        "{entries:?}"
    );

    // --- The real fix, then the same form again: verified, and the run completes.
    std::fs::write(lab.join("greeting-fx"), "hello").unwrap();
    browser.fill("#iv-note", "wrote hello into the greeting");
    browser.click_when("#iv-submit", |_| true);
    browser.wait(
        "[data-testid=intervention-result][data-verified=true]",
        all_of(&["Verified", "greeting_written: passed"]),
    );
    browser.wait("[data-testid=op-state]", |t| t == "completed");
    browser.shot_of(&shots, "#op-act", "intervention-verified");
    let op = wait_api(&failed, "completed");
    assert_eq!(job_state(&op, "say-hello"), "manually_fixed", "{op}");
    let entries = timeline(addr, &failed, &sam);
    assert_eq!(recorded(&entries), 2, "{entries:?}");
    assert!(entries.iter().any(|e| e.1 == "user:bob" && e.2 == "verified" && e.3 == "running"), "{entries:?}");

    // --- A patch proposed from the page: the word corrected and the job retried.
    // The page is open before the run fails: the failure arrives live, and the form's draft
    // names the job that failed then.
    let patched = create("px", "bye");
    wait_job(&patched, "wait-for-go", "running");
    browser.go(&format!("{base}/#/operations/{patched}"));
    browser.wait("[data-testid=op-id]", |t| t == patched);
    browser.wait("[data-testid=op-state]", |t| t == "running");
    assert!(browser.find("[data-testid=propose-patch]").is_none(), "no patch form for a running run");
    go("px");
    browser.wait("[data-testid=op-state]", |t| t == "failed");
    browser.click_when("[data-testid=propose-patch] summary", |_| true);
    let draft = browser.js("return document.getElementById('patch-yaml').value");
    assert!(draft.as_str().unwrap().contains("retry: {job: say-hello}"), "the failed job is in the draft: {draft}");
    assert_eq!(browser.unlabelled(), json!([]), "every control of the patch form has a name");
    let doc = "plan_patch:\n  reason: the greeting must be hello\n  changes:\n    - set_parameters: {parameters: {word: hello}}\n    - retry: {job: say-hello}\n";
    browser.fill("#patch-yaml", "plan_patch:\n  changes: [{retry: {job: no-such-job}}]\n");
    browser.click_when("#patch-submit", |_| true);
    browser.wait("[data-testid=patch-result]", all_of(&["The patch was refused", "no-such-job"]));
    assert_eq!(get(&patched)["state"], "failed", "a refused patch changes nothing");
    browser.fill("#patch-yaml", doc);
    browser.shot_of(&shots, "#sec-patches", "patch-form");
    browser.click_when("#patch-submit", |_| true);
    browser.wait("[data-testid=patch-result]", |t| t.contains("Patch p1 proposed"));
    browser.wait(
        "[data-testid=patch][data-patch=p1] [data-testid=patch-diff]",
        all_of(&["parameter word", "retry say-hello"]),
    );
    browser.wait("[data-testid=op-state]", |t| t == "completed");
    let op = wait_api(&patched, "completed");
    assert_eq!(op["intent"]["parameters"]["word"], "bye", "the intent is kept; the plan changed: {op}");
    assert_eq!(std::fs::read_to_string(lab.join("greeting-px")).unwrap(), "hello");
    let (_, patches) = http(addr, "GET", &format!("/api/v1/operations/{patched}/patches"), &sam, "");
    assert_eq!(patches["patches"][0]["author"], "user:bob", "{patches}");
    let entries = timeline(addr, &patched, &sam);
    assert!(entries.iter().any(|e| e.1 == "user:bob" && e.2 == "patch_proposed"), "{entries:?}");

    // --- A viewer: none of these controls, and each forged request is refused.
    let running = create("vx", "hello");
    let broken = create("vf", "bye");
    go("vf");
    wait_job(&running, "wait-for-go", "running");
    wait_api(&broken, "failed");
    browser.sign_in(&vera, "vera");
    for id in [&running, &broken] {
        browser.go(&format!("{base}/#/operations/{id}"));
        browser.wait("[data-testid=op-id]", |t| t == id);
        browser.wait("[data-testid=timeline]", |t| t.contains("user:sam"));
        let controls =
            "#op-pause, #op-resume, #op-cancel, #op-retry, [data-testid=intervention], [data-testid=propose-patch]";
        assert!(browser.find(controls).is_none(), "a viewer sees no control on {id}");
        browser.wait("[data-testid=no-controls]", |t| t.contains("(viewer) allow no action"));
    }
    browser.screenshot(&shots, "operation-viewer-failed");
    let forged = [
        (&running, "pause", "{}".to_string(), "apply"),
        (&running, "cancel", "{}".to_string(), "apply"),
        (&running, "resume", "{}".to_string(), "apply"),
        (&broken, "retry", "{}".to_string(), "intervene"),
        (&broken, "interventions", fix("forged by a viewer"), "intervene"),
        (&broken, "patches", "plan_patch:\n  changes: [{retry: {job: say-hello}}]\n".to_string(), "patch"),
    ];
    for (id, what, body, needs) in forged {
        let (status, answer) = http(addr, "POST", &format!("/api/v1/operations/{id}/{what}"), &vera, &body);
        assert_eq!((status, &answer["error"]["code"]), (403, &json!("forbidden")), "{what}: {answer}");
        assert_eq!(answer["error"]["details"]["needs"], needs, "{what}: {answer}");
    }
    assert_eq!((get(&running)["state"].clone(), get(&broken)["state"].clone()), (json!("running"), json!("failed")));
    assert!(!timeline(addr, &running, &sam).iter().any(|e| e.1 == "user:vera"), "a refused request changes nothing");

    drop(browser);
    go("vx");
    wait_api(&running, "completed");
    assert!(api.state.wait_idle(Duration::from_secs(30)));
    drop(server);
}
