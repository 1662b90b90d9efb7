//! The REST API: the authorization matrix generated from the permission table, gates enforced by
//! the server, audit rows in the transaction of each change, idempotency keys, limits, the
//! OpenAPI document held against the routes, and one run over a real socket.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use expect_test::expect;
use opsgraph_server::{auth, router, Access, AppState, ROUTES};
use serde_json::{json, Value};
use tower::ServiceExt as _;

use crate::serve::{wait_for, Server};
use crate::support::{temp_dir, TempDir};

/// A pack of one shell job behind an approval gate that only an SRE may answer.
pub(crate) const PACK: &[(&str, &str)] = &[
    (
        "hello/pack.yaml",
        "scenario_pack:\n  id: hello\n  version: 1.0.0\n  title: Hello\n  resource_types: [hello.app]\n  actions: [install]\n  provides: [hello.greeting]\n  plan_templates: [{id: hello.install}]\n",
    ),
    (
        "hello/templates.yaml",
        r#"plan_template:
  id: hello.install
  action: install
  parameters:
    word: {type: string, default: hello}
  stages:
    - {id: greet, name: Greet, jobs: [say-hello]}
  jobs: [say-hello]
  gates:
    - {id: approve-hello, type: approval, reason: someone checks the greeting, options: [approve, cancel operation], required_roles: [sre], before: [say-hello]}
"#,
    ),
    (
        "hello/jobs.yaml",
        r#"job:
  id: say-hello
  outputs:
    provides: {capabilities: [hello.greeting]}
    evidence: [greeting_written]
  run: {command: "printf '%s' \"$OPSGRAPH_PARAM_WORD\" > \"$OPSGRAPH_LAB_DIR/greeting-$OPSGRAPH_INTENT_NAME\""}
"#,
    ),
    (
        "hello/evidence.yaml",
        r#"evidence:
  - id: greeting_written
    source: command
    command: cat "$OPSGRAPH_LAB_DIR/greeting-$OPSGRAPH_INTENT_NAME"
    expected: "hello"
"#,
    ),
];

pub(crate) fn intent(name: &str) -> String {
    format!("intent:\n  target_resource_type: hello.app\n  action: install\n  name: {name}\n  environment: dev\n")
}

pub(crate) struct Api {
    pub(crate) dir: TempDir,
    pub(crate) state: AppState,
    pub(crate) rt: tokio::runtime::Runtime,
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) body: Value,
    pub(crate) headers: axum::http::HeaderMap,
}

impl Reply {
    pub(crate) fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

/// A server over the files of a temporary directory, as `opsgraph serve` would start it:
/// `Api::over(temp_dir(FILES)).packs(&["hello"]).world(&["world"]).build()`. Its data directory
/// is `data` inside it unless `data` names another; paths are relative to the directory (an
/// absolute one stands as it is).
pub(crate) struct ApiB {
    dir: TempDir,
    data: Option<std::path::PathBuf>,
    config: Option<String>,
    packs: Vec<String>,
    world: Vec<String>,
    limits: Option<opsgraph_server::Limits>,
    database: Option<String>,
}

impl ApiB {
    /// The store's URL (`--database`); the data directory's SQLite file when not given.
    pub(crate) fn database(mut self, url: &str) -> Self {
        self.database = Some(url.to_owned());
        self
    }
    /// The data directory's `config.yaml` (users, rules).
    pub(crate) fn config(mut self, yaml: &str) -> Self {
        self.config = Some(yaml.to_owned());
        self
    }
    pub(crate) fn data(mut self, dir: &std::path::Path) -> Self {
        self.data = Some(dir.to_owned());
        self
    }
    pub(crate) fn packs(mut self, paths: &[&str]) -> Self {
        self.packs = paths.iter().map(|p| self.dir.join(p).display().to_string()).collect();
        self
    }
    pub(crate) fn world(mut self, paths: &[&str]) -> Self {
        self.world = paths.iter().map(|p| self.dir.join(p).display().to_string()).collect();
        self
    }
    pub(crate) fn limits(mut self, limits: opsgraph_server::Limits) -> Self {
        self.limits = Some(limits);
        self
    }
    pub(crate) fn build(self) -> Api {
        let data = self.data.unwrap_or_else(|| self.dir.join("data"));
        std::fs::create_dir_all(&data).unwrap();
        if let Some(config) = &self.config {
            std::fs::write(data.join("config.yaml"), config).unwrap();
        }
        opsgraph::storage::use_database(&data, self.database);
        let mut state = opsgraph::serve_cmd::state(&data, &self.packs, &self.world).expect("server state");
        if let Some(limits) = self.limits {
            state = state.with_limits(limits);
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        Api { dir: self.dir, state, rt }
    }
}

impl Api {
    pub(crate) fn new(config: &str) -> Api {
        Api::with_files(config, &[])
    }

    /// A server whose pack holds more files (remedies).
    pub(crate) fn with_files(config: &str, extra: &[(&str, &str)]) -> Api {
        let files: Vec<(&str, &str)> = PACK.iter().chain(extra).copied().collect();
        Api::over(temp_dir(&files)).config(config).packs(&["hello"]).build()
    }

    /// `new("")` under these limits.
    pub(crate) fn with_limits(limits: opsgraph_server::Limits) -> Api {
        Api::over(temp_dir(PACK)).config("").packs(&["hello"]).limits(limits).build()
    }

    pub(crate) fn over(dir: TempDir) -> ApiB {
        ApiB { dir, data: None, config: None, packs: Vec::new(), world: Vec::new(), limits: None, database: None }
    }

    /// Tokens for several people at once, each `(name, role)`.
    pub(crate) fn tokens<const N: usize>(&self, people: [(&str, &str); N]) -> [String; N] {
        people.map(|(name, role)| self.token(name, &[role]))
    }

    /// A token for a person with these roles (minted locally, as `opsgraph token create` does).
    pub(crate) fn token(&self, name: &str, roles: &[&str]) -> String {
        let mut store = self.state.store().unwrap();
        let roles: Vec<String> = roles.iter().map(|r| r.to_string()).collect();
        auth::create_token(&mut *store, self.state.config(), name, &roles, "test", None, None).unwrap().1
    }

    pub(crate) fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        self.call_bytes(method, path, token, body.as_bytes().to_vec(), headers)
    }

    /// A request with a body of bytes (pack archives).
    pub(crate) fn call_bytes(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Body::from(body)).unwrap();
        let response = self.rt.block_on(router(self.state.clone()).oneshot(req)).unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        if headers.get("content-type").is_some_and(|t| t == "text/event-stream") {
            // A stream may not end: its body is dropped unread (tests of streams use a socket).
            return Reply { status, body: Value::Null, headers };
        }
        let bytes = self.rt.block_on(axum::body::to_bytes(response.into_body(), usize::MAX)).unwrap();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply { status, body, headers }
    }

    pub(crate) fn get(&self, path: &str, token: &str) -> Reply {
        self.call("GET", path, Some(token), "", &[])
    }

    pub(crate) fn post(&self, path: &str, token: &str, body: &str) -> Reply {
        self.call("POST", path, Some(token), body, &[])
    }

    pub(crate) fn idle(&self) {
        assert!(self.state.wait_idle(Duration::from_secs(30)), "operations still being driven");
    }

    /// (actor, action, target) of every audit row not written by the test's own token minting.
    pub(crate) fn audit(&self) -> Vec<String> {
        let store = self.state.store().unwrap();
        store
            .audit(&Default::default())
            .unwrap()
            .iter()
            .filter(|a| a.actor != "test")
            .map(|a| format!("{} {} {}", a.actor, a.action, a.target.replace(&self.ops_prefix(), "OP")))
            .collect()
    }

    fn ops_prefix(&self) -> String {
        // Operation ids differ per run: the audit view names the first one OP.
        self.state
            .store()
            .unwrap()
            .operations(&Default::default())
            .unwrap()
            .first()
            .map(|o| o.id.clone())
            .unwrap_or_else(|| "-".into())
    }
}

/// A path of the route table with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{id}", "op-none")
        .replace("{gate}", "no-gate")
        .replace("{artifact}", "no-artifact")
        .replace("{*id}", "compute_node/none")
        .replace("{file}", "app.js")
}

#[test]
fn the_authorization_matrix_follows_the_permission_table() {
    let api = Api::new("roles:\n  auditor: [read]\n  token_admin: [read, manage_tokens]\n  scraper: [metrics]\n");
    let mut roles: Vec<(String, BTreeSet<opsgraph_server::Permission>)> = api.state.config().table();
    roles.sort_by_key(|(r, _)| auth::BUILTIN_ROLES.iter().position(|(b, _)| b == r).unwrap_or(99));
    let tokens: BTreeMap<String, String> =
        roles.iter().map(|(role, _)| (role.clone(), api.token(&role.replace('_', "-"), &[role]))).collect();
    let mut unexpected = Vec::new();
    let mut table = String::new();
    table.push_str(&format!("{:<60}", "route"));
    for (role, _) in &roles {
        table.push_str(&format!(" {:<8}", &role[..role.len().min(8)]));
    }
    table.push('\n');
    for route in ROUTES {
        let path = concrete(route.path);
        table.push_str(&format!("{:<60}", format!("{} {}", route.method, route.path)));
        // Without a token: only public routes answer.
        let anonymous = api.call(route.method, &path, None, "", &[]);
        let public = route.access == Access::Public;
        if public == (anonymous.status == 401) {
            unexpected.push(format!("{} {} without a token: {}", route.method, path, anonymous.status));
        }
        for (role, perms) in &roles {
            let r = api.call(route.method, &path, Some(&tokens[role]), "", &[]);
            let allowed = match route.access {
                Access::Public | Access::Authenticated => true,
                Access::Need(p) => perms.contains(&p),
            };
            let denied = r.status == 403 && r.code() == "forbidden";
            if allowed == denied || r.status == 401 {
                unexpected.push(format!("{} {} as {role}: {} {}", route.method, path, r.status, r.body));
            }
            table.push_str(&format!(" {:<8}", if denied { "-" } else { "allow" }));
        }
        table = table.trim_end().to_string() + "\n";
    }
    assert!(unexpected.is_empty(), "unexpected answers:\n{}", unexpected.join("\n"));
    expect![[r#"
        route                                                        viewer   ai_agent operator sre      platform agent    auditor  scraper  token_ad
        GET /                                                        allow    allow    allow    allow    allow    allow    allow    allow    allow
        GET /ui/{file}                                               allow    allow    allow    allow    allow    allow    allow    allow    allow
        GET /api/v1/health                                           allow    allow    allow    allow    allow    allow    allow    allow    allow
        GET /api/v1/ready                                            allow    allow    allow    allow    allow    allow    allow    allow    allow
        GET /api/v1/openapi.json                                     allow    allow    allow    allow    allow    allow    allow    allow    allow
        GET /api/v1/me                                               allow    allow    allow    allow    allow    allow    allow    allow    allow
        GET /api/v1/roles                                            allow    allow    allow    allow    allow    -        allow    -        allow
        POST /api/v1/plans                                           allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations                                       allow    allow    allow    allow    allow    -        allow    -        allow
        POST /api/v1/operations                                      -        -        allow    allow    allow    -        -        -        -
        GET /api/v1/operations/{id}                                  allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations/{id}/jobs                             allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations/{id}/timeline                         allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations/{id}/evidence                         allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations/{id}/artifacts                        allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations/{id}/artifacts/{artifact}             allow    allow    allow    allow    allow    -        allow    -        allow
        POST /api/v1/operations/{id}/artifacts/{artifact}/reveal     allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations/{id}/events                           allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations/{id}/plan                             allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations/{id}/patches                          allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations/{id}/gates                            allow    allow    allow    allow    allow    -        allow    -        allow
        POST /api/v1/operations/{id}/gates/{gate}/answer             -        -        allow    allow    allow    -        -        -        -
        POST /api/v1/operations/{id}/pause                           -        -        allow    allow    allow    -        -        -        -
        POST /api/v1/operations/{id}/resume                          -        -        allow    allow    allow    -        -        -        -
        POST /api/v1/operations/{id}/cancel                          -        -        allow    allow    allow    -        -        -        -
        POST /api/v1/operations/{id}/patches                         -        allow    -        allow    allow    -        -        -        -
        POST /api/v1/operations/{id}/interventions                   -        -        -        allow    allow    -        -        -        -
        GET /api/v1/operations/{id}/diagnosis                        allow    allow    allow    allow    allow    -        allow    -        allow
        POST /api/v1/operations/{id}/diagnosis                       allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations/{id}/logs                             allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/operations/{id}/jobs/{job}/log                   allow    allow    allow    allow    allow    -        allow    -        allow
        POST /api/v1/operations/{id}/retry                           -        -        -        allow    allow    -        -        -        -
        GET /api/v1/events                                           allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/resources                                        allow    allow    allow    allow    allow    -        allow    -        allow
        POST /api/v1/resources                                       -        -        -        -        allow    -        -        -        -
        GET /api/v1/resources/{*id}                                  allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/inventory                                        allow    allow    allow    allow    allow    -        allow    -        allow
        POST /api/v1/verifications                                   -        -        allow    allow    allow    -        -        -        -
        DELETE /api/v1/resources/{*id}                               -        -        -        -        allow    -        -        -        -
        GET /api/v1/audit                                            allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/packs                                            allow    allow    allow    allow    allow    -        allow    -        allow
        POST /api/v1/packs                                           -        -        -        -        allow    -        -        -        -
        POST /api/v1/packs/catalogue                                 -        -        -        -        allow    -        -        -        -
        GET /api/v1/packs/{id}                                       allow    allow    allow    allow    allow    -        allow    -        allow
        DELETE /api/v1/packs/{id}                                    -        -        -        -        allow    -        -        -        -
        GET /api/v1/providers                                        allow    allow    allow    allow    allow    -        allow    -        allow
        GET /api/v1/policies                                         allow    allow    allow    allow    allow    -        allow    -        allow
        GET /metrics                                                 -        -        -        -        allow    -        -        allow    -
        GET /api/v1/tokens                                           -        -        -        -        allow    -        -        -        allow
        POST /api/v1/tokens                                          -        -        -        -        allow    -        -        -        allow
        POST /api/v1/agent/claim                                     -        -        -        -        allow    allow    -        -        -
        POST /api/v1/agent/heartbeat                                 -        -        -        -        allow    allow    -        -        -
        POST /api/v1/agent/log                                       -        -        -        -        allow    allow    -        -        -
        POST /api/v1/agent/report                                    -        -        -        -        allow    allow    -        -        -
        DELETE /api/v1/tokens/{id}                                   -        -        -        -        allow    -        -        -        allow
    "#]]
    .assert_eq(&table);
    // Nothing above changed anything; every denial is on the audit log, and nothing else is: each
    // `-` above, and the AI identity's reveal, which its handler refuses (`ai_identity`).
    let denials = 1 + table.lines().skip(1).map(|l| l.split_whitespace().filter(|c| *c == "-").count()).sum::<usize>();
    let audit = api.audit();
    assert_eq!(audit.len(), denials, "{audit:#?}");
    assert!(audit.iter().all(|a| a.split(' ').nth(1) == Some("request.denied")), "{audit:#?}");

    // A revoked token is refused everywhere a token is needed.
    let admin = &tokens["platform_admin"];
    let viewer_id = api.get("/api/v1/me", &tokens["viewer"]).body["token"].as_str().unwrap().to_string();
    let r = api.call("DELETE", &format!("/api/v1/tokens/{viewer_id}"), Some(admin), "", &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    for route in ROUTES.iter().filter(|r| r.access != Access::Public) {
        let r = api.call(route.method, &concrete(route.path), Some(&tokens["viewer"]), "", &[]);
        assert_eq!((r.status, r.code()), (401, "token_revoked"), "{} {}", route.method, route.path);
    }
    let r = api.get("/api/v1/me", "og_not-a-token");
    assert_eq!((r.status, r.code()), (401, "invalid_token"));
}

#[test]
fn gates_are_enforced_by_the_server_and_every_change_is_audited() {
    let api = Api::new("");
    // sam creates the operation.
    let [sam, bob, dave, carol] = api.tokens([("sam", "sre"), ("bob", "sre"), ("dave", "sre"), ("carol", "operator")]);

    let created = api.post("/api/v1/operations", &sam, &intent("h1"));
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    api.idle();
    let op = api.get(&format!("/api/v1/operations/{id}"), &carol).body;
    assert_eq!(op["detail"], "paused: waiting for gate approve-hello", "{op}");
    let revision = op["plan_revision"].as_str().unwrap().to_string();
    assert_eq!(revision, created.body["plan_revision"]);
    let answer = format!("/api/v1/operations/{id}/gates/approve-hello/answer");
    let body = |rev: &str| json!({"option": "approve", "revision": rev}).to_string();

    let mut seen = Vec::new();
    let mut try_answer = |who: &str, token: &str, body: String| {
        let r = api.post(&answer, token, &body);
        let line = format!("{who}: {} {} {}", r.status, r.code(), r.body["error"]["message"].as_str().unwrap_or(""));
        seen.push(line.trim_end().to_string());
        r
    };
    try_answer("carol (operator)", &carol, body(&revision));
    try_answer("sam (creator)", &sam, body(&revision));
    try_answer("bob, stale revision", &bob, body("sha256:0000"));
    try_answer("bob, no revision", &bob, json!({"option": "approve"}).to_string());
    try_answer("bob, unknown option", &bob, json!({"option": "sure", "revision": revision}).to_string());
    let ok = try_answer("bob", &bob, body(&revision));
    assert_eq!(ok.body["answered_by"], "user:bob");
    try_answer("dave, second answer", &dave, body(&revision));
    let seen = seen.join("\n").replace(&id, "OP").replace(&revision, "REV");
    let seen = regex_lite_at(&seen);
    expect![[r#"
        carol (operator): 403 role_not_allowed gate `approve-hello` is answered by sre; your roles: operator
        sam (creator): 403 self_approval user:sam created operation `OP` and may not approve gate `approve-hello`
        bob, stale revision: 409 stale_revision the operation now runs plan revision REV; read it and answer again
        bob, no revision: 422 revision_required an answer names the plan revision it approves: `"revision": "REV"`
        bob, unknown option: 422 no_such_option `sure` is not an option of gate `approve-hello`; options: approve, cancel operation
        bob: 200
        dave, second answer: 409 gate_answered gate `approve-hello` was already answered `approve` by user:bob at TIME"#]]
    .assert_eq(&seen);

    api.idle();
    let op = api.get(&format!("/api/v1/operations/{id}"), &carol).body;
    assert_eq!(op["state"], "completed", "{op}");
    assert_eq!(op["gates"][0]["answered_by"], "user:bob");
    let evidence = api.get(&format!("/api/v1/operations/{id}/evidence"), &carol).body;
    assert_eq!(evidence["evidence"][0]["passed"], true, "{evidence}");
    let timeline = api.get(&format!("/api/v1/operations/{id}/timeline"), &carol).body;
    let answered: Vec<&Value> =
        timeline["timeline"].as_array().unwrap().iter().filter(|e| e["event"] == "gate_answered").collect();
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0]["actor"], "user:bob");

    // The resource the operation changed, by an id with `/` (literal or percent-encoded).
    for path in ["/api/v1/resources/hello.app/h1", "/api/v1/resources/hello.app%2Fh1"] {
        let r = api.get(path, &carol);
        assert_eq!((r.status, r.body["id"].as_str()), (200, Some("hello.app/h1")), "{path}: {}", r.body);
    }

    // The changes that happened are in the audit log, and the refused answers as denials.
    expect![[r#"
        [
            "user:sam operation.create OP",
            "user:carol request.denied /api/v1/operations/OP/gates/approve-hello/answer",
            "user:sam request.denied /api/v1/operations/OP/gates/approve-hello/answer",
            "user:bob gate.answer OP/approve-hello",
        ]
    "#]]
    .assert_debug_eq(&api.audit());
    let by_bob = api.get("/api/v1/audit?actor=user:bob", &carol).body;
    assert_eq!(by_bob["audit"].as_array().unwrap().len(), 1);
    assert_eq!(by_bob["audit"][0]["detail"]["revision"], revision.as_str());
    let r = api.get(&format!("/api/v1/audit?operation={id}&since=2000-01-01T00:00:00Z"), &carol);
    assert_eq!(r.body["audit"].as_array().unwrap().len(), 4, "{}", r.body);
    assert_eq!(api.get("/api/v1/audit?since=yesterday", &carol).code(), "invalid_parameter");
}

/// Replaces the time at the end of "... at 2026-...Z" with TIME.
fn regex_lite_at(s: &str) -> String {
    s.lines()
        .map(|l| match l.rfind(" at ") {
            Some(i) if l[i + 4..].ends_with('Z') => format!("{} at TIME", &l[..i]),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_creator_may_approve_when_the_config_allows_it_and_control_requests_are_audited() {
    let api = Api::new("allow_self_approval: true\n");
    let sam = api.token("sam", &["sre"]);
    let id = api.post("/api/v1/operations", &sam, &intent("h1")).body["id"].as_str().unwrap().to_string();
    api.idle();
    let op = |path: &str| format!("/api/v1/operations/{id}{path}");
    assert_eq!(api.post(&op("/pause"), &sam, "").code(), "illegal_transition", "paused already, by its gate");
    let rev = api.get(&op(""), &sam).body["plan_revision"].as_str().unwrap().to_string();
    let r =
        api.post(&op("/gates/approve-hello/answer"), &sam, &json!({"option": "approve", "revision": rev}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    api.idle();
    assert_eq!(api.get(&op(""), &sam).body["state"], "completed");
    let r = api.post(&op("/cancel"), &sam, &json!({"reason": "too late"}).to_string());
    assert_eq!((r.status, r.code()), (409, "illegal_transition"));
    let r = api.post(&op("/retry"), &sam, "");
    assert_eq!((r.status, r.code()), (422, "unsupported"), "{}", r.body);
    assert_eq!(api.post(&op("/pause"), &sam, "{\"why\": 1}").code(), "invalid_json");

    // A second operation, cancelled while it waits for its gate.
    let id2 = api.post("/api/v1/operations", &sam, &intent("h2")).body["id"].as_str().unwrap().to_string();
    api.idle();
    let r = api.post(&format!("/api/v1/operations/{id2}/cancel"), &sam, "");
    assert_eq!((r.status, r.body["state"].as_str()), (200, Some("cancelled")), "{}", r.body);
    let actions: Vec<String> = api.audit().iter().map(|a| a.split(' ').take(2).collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(
        actions,
        ["user:sam operation.create", "user:sam gate.answer", "user:sam operation.create", "user:sam operation.cancel"]
    );
}

#[test]
fn an_idempotency_key_returns_the_first_result_and_refuses_another_body() {
    let api = Api::new("");
    let sam = api.token("sam", &["operator"]);
    let with_key =
        |key: &str, body: &str| api.call("POST", "/api/v1/operations", Some(&sam), body, &[("idempotency-key", key)]);
    let first = with_key("k-1", &intent("h1"));
    assert_eq!(first.status, 201, "{}", first.body);
    let again = with_key("k-1", &intent("h1"));
    assert_eq!((again.status, &again.body), (201, &first.body));
    assert_eq!(again.headers.get("idempotent-replayed").unwrap(), "true");
    let other = with_key("k-1", &intent("h2"));
    assert_eq!((other.status, other.code()), (422, "idempotency_key_reused"), "{}", other.body);
    // Keys belong to their caller: another person's k-1 is theirs.
    let ann = api.token("ann", &["operator"]);
    let r = api.call("POST", "/api/v1/operations", Some(&ann), &intent("h2"), &[("idempotency-key", "k-1")]);
    assert_eq!(r.status, 201, "{}", r.body);
    assert_ne!(r.body["id"], first.body["id"]);
    let long = "k".repeat(256);
    let r = with_key(&long, &intent("h3"));
    assert_eq!((r.status, r.code()), (422, "limit_exceeded"));
    assert!(r.body["error"]["message"].as_str().unwrap().contains("limits.idempotency_key_bytes (255 bytes)"));
    api.idle();
    let ops = api.get("/api/v1/operations", &sam).body;
    assert_eq!(ops["operations"].as_array().unwrap().len(), 2, "{ops}");
    assert_eq!(api.audit().len(), 2);
}

#[test]
fn bodies_over_the_limit_and_bad_documents_are_refused_and_change_nothing() {
    let api = Api::new("");
    let sam = api.token("sam", &["operator"]);
    let big = format!("{}{}", intent("h1"), "#".repeat(1 << 20));
    let r = api.post("/api/v1/operations", &sam, &big);
    assert_eq!((r.status, r.code()), (413, "body_too_large"));
    assert_eq!(r.body["error"]["message"], "the request body is larger than limits.body_bytes (1048576 bytes)");
    let r = api.post("/api/v1/operations", &sam, "intent:\n  target_resource_type: hello.app\n  acton: install\n");
    assert_eq!((r.status, r.code()), (422, "invalid_document"), "{}", r.body);
    let diagnostics = r.body["error"]["details"]["diagnostics"].to_string();
    assert!(diagnostics.contains("request:3:3: error[E003]: unknown key `acton`"), "{diagnostics}");
    let r = api.post("/api/v1/plans", &sam, "resource: {type: compute_node, name: n1}\n");
    assert_eq!((r.status, r.code()), (422, "expected_one_intent"));
    let r = api.post("/api/v1/operations", &sam, &intent("h1").replace("install", "remove"));
    assert_eq!((r.status, r.code()), (422, "plan_error"), "{}", r.body);
    assert!(api.state.store().unwrap().operations(&Default::default()).unwrap().is_empty());
    assert!(api.audit().is_empty());

    // A preview from JSON, as well as YAML.
    let json_intent = json!({"intent": {"target_resource_type": "hello.app", "action": "install", "name": "h1", "environment": "dev"}});
    let r = api.post("/api/v1/plans", &sam, &json_intent.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "waiting_for_gates");
    assert_eq!(r.body["gates"][0]["id"], "approve-hello");
}

#[test]
fn tokens_are_shown_once_and_nobody_grants_what_they_do_not_hold() {
    let api = Api::new("roles:\n  token_admin: [read, manage_tokens]\n");
    let [admin, lesser] = api.tokens([("admin", "platform_admin"), ("lesser", "token_admin")]);
    let r = api.post("/api/v1/tokens", &admin, &json!({"name": "ci", "roles": ["viewer"]}).to_string());
    assert_eq!(r.status, 201, "{}", r.body);
    let ci = r.body["token"].as_str().unwrap().to_string();
    assert!(ci.starts_with("og_") && ci.len() == 3 + 43, "{ci}");
    assert_eq!(api.get("/api/v1/me", &ci).body["roles"], json!(["viewer"]));
    let ci_id = r.body["id"].as_str().unwrap().to_string();

    let refusals: Vec<String> = [
        ("lesser grants sre", &lesser, json!({"name": "x", "roles": ["sre"]})),
        ("lesser grants a role nobody knows", &lesser, json!({"name": "x", "roles": ["root"]})),
        ("a name taken", &admin, json!({"name": "ci", "roles": ["viewer"]})),
        ("a bad name", &admin, json!({"name": "Bad Name", "roles": ["viewer"]})),
        ("no role", &admin, json!({"name": "x", "roles": []})),
    ]
    .iter()
    .map(|(what, token, body)| {
        let r = api.post("/api/v1/tokens", token, &body.to_string());
        format!("{what}: {} {} {}", r.status, r.code(), r.body["error"]["message"].as_str().unwrap_or(""))
    })
    .collect();
    expect![[r#"
        lesser grants sre: 403 grant_refused cannot grant role `sre`: it allows apply, answer_gates, patch, approve_patches, intervene, which you do not hold
        lesser grants a role nobody knows: 422 unknown_role unknown role `root`; roles: viewer, ai_agent, operator, sre, platform_admin, agent, token_admin
        a name taken: 409 token_name_taken an active token is already named `ci`; revoke it first
        a bad name: 422 invalid_token_request token name `Bad Name` is not valid: use 1 to 64 of a-z, 0-9, `.`, `_`, `-`, starting with a letter or digit
        no role: 422 invalid_token_request a token needs at least one role"#]]
    .assert_eq(&refusals.join("\n"));
    let r = api.post("/api/v1/tokens", &lesser, &json!({"name": "dash", "roles": ["viewer"]}).to_string());
    assert_eq!(r.status, 201, "{}", r.body);

    // Revoking a token that holds more than you is refused too.
    let admin_id = api.get("/api/v1/me", &admin).body["token"].as_str().unwrap().to_string();
    let r = api.call("DELETE", &format!("/api/v1/tokens/{admin_id}"), Some(&lesser), "", &[]);
    assert_eq!((r.status, r.code()), (403, "revoke_refused"));
    let r = api.call("DELETE", &format!("/api/v1/tokens/{ci_id}"), Some(&lesser), "", &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(api.get("/api/v1/me", &ci).code(), "token_revoked");
    let r = api.call("DELETE", &format!("/api/v1/tokens/{ci_id}"), Some(&admin), "", &[]);
    assert_eq!((r.status, r.code()), (409, "token_already_revoked"));

    // The list never holds a secret; the store holds hashes only.
    let list = api.get("/api/v1/tokens", &admin).body;
    let text = list.to_string();
    assert!(!text.contains("og_") && !text.contains("sha256:"), "{text}");
    let stored = api.state.store().unwrap().tokens().unwrap();
    assert!(stored.iter().all(|t| t.hash.starts_with("sha256:") && !t.hash.contains(&ci)));
    expect![[r#"
        [
            "user:admin token.create TOK",
            "user:lesser request.denied TOK",
            "user:lesser token.create TOK",
            "user:lesser request.denied TOK",
            "user:lesser token.revoke TOK",
        ]
    "#]]
    .assert_debug_eq(
        &api.audit().iter().map(|a| a.rsplit_once(' ').unwrap().0.to_string() + " TOK").collect::<Vec<_>>(),
    );
}

#[test]
fn the_openapi_document_and_the_routes_are_the_same_set() {
    let api = Api::new("");
    let admin = api.token("admin", &["platform_admin"]);
    let served = api.call("GET", "/api/v1/openapi.json", None, "", &[]).body;
    assert_eq!(served, opsgraph_server::openapi());
    assert_eq!(served["openapi"], "3.1.0");
    let documented: BTreeSet<(String, String)> = served["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| ops.as_object().unwrap().keys().map(move |m| (m.to_uppercase(), path.clone())))
        .collect();
    let routed: BTreeSet<(String, String)> =
        ROUTES.iter().map(|r| (r.method.to_string(), opsgraph_server::table::openapi_path(r.path))).collect();
    assert_eq!(documented, routed);
    // Every documented operation reaches a handler of the real router.
    for (method, path) in &documented {
        let concrete = path.replace("{id}", "op-none").replace("{gate}", "g").replace("{artifact}", "a");
        let r = api.call(method, &concrete, Some(&admin), "", &[]);
        assert!(!matches!(r.code(), "no_route" | "method_not_allowed"), "{method} {path}: {}", r.body);
    }
    // And nothing else is routed.
    for (method, path) in [("GET", "/api/v1/nothing"), ("GET", "/api/v2/operations"), ("PUT", "/api/v1/operations")] {
        let r = api.call(method, path, Some(&admin), "", &[]);
        assert!(matches!((r.status, r.code()), (404, "no_route") | (405, "method_not_allowed")), "{method} {path}");
    }
}

/// One HTTP/1.1 request over a real socket: its status and JSON body (null when it has none).
pub(crate) fn http(addr: std::net::SocketAddr, method: &str, path: &str, token: &str, body: &str) -> (u16, Value) {
    let raw = crate::server_stream::http(addr, method, path, token, &[], body);
    (raw.status, raw.json())
}

#[test]
fn an_operation_runs_end_to_end_over_a_socket_with_a_second_identity_at_its_gate() {
    let api = Api::new("");
    let [sam, bob] = api.tokens([("sam", "operator"), ("bob", "sre")]);
    let server = Server::start(&api);
    let addr = server.addr;

    let (status, created) = http(addr, "POST", "/api/v1/operations", &sam, &intent("h1"));
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let wait_for = |want: &str| wait_for(addr, id, &sam, want);
    let op = wait_for("paused: waiting for gate approve-hello");
    let answer = json!({"option": "approve", "revision": op["plan_revision"]}).to_string();
    let (status, body) =
        http(addr, "POST", &format!("/api/v1/operations/{id}/gates/approve-hello/answer"), &sam, &answer);
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("role_not_allowed")));
    let (status, body) =
        http(addr, "POST", &format!("/api/v1/operations/{id}/gates/approve-hello/answer"), &bob, &answer);
    assert_eq!(status, 200, "{body}");
    let op = wait_for("completed");
    assert_eq!(op["evidence"][0]["check"], "greeting_written");
    assert_eq!(op["evidence"][0]["passed"], true);
    let (_, jobs) = http(addr, "GET", &format!("/api/v1/operations/{id}/jobs"), &sam, "");
    assert_eq!(jobs["jobs"][0]["state"], "succeeded", "{jobs}");
    let greeting = std::fs::read_to_string(api.dir.join("data/lab/greeting-h1")).unwrap();
    assert_eq!(greeting, "hello");

    drop(server);
}

#[test]
fn token_commands_work_on_the_local_data_directory_and_are_audited() {
    let dir = temp_dir(&[]);
    let data = dir.display().to_string();
    let run = |args: &[&str]| crate::support::opsgraph(&[&["--data-dir", &data], args].concat());
    let created = run(&["token", "create", "--name", "ci", "--role", "viewer", "--role", "operator"]);
    assert_eq!(created.code, 0, "{}", created.render());
    let token = created.out.lines().nth(1).unwrap().to_string();
    assert!(token.starts_with("og_"));
    let id = created.out.split_whitespace().nth(1).unwrap().to_string();
    let refused = run(&["token", "create", "--name", "x", "--role", "root"]);
    assert_eq!(refused.code, 1);
    assert!(refused.err.contains("unknown role `root`"), "{}", refused.err);
    let listed = run(&["token", "list"]);
    assert!(listed.out.contains("ci") && listed.out.contains("viewer,operator") && listed.out.contains("active"));
    assert!(!listed.out.contains(&token));
    assert_eq!(run(&["token", "revoke", &id]).code, 0);
    assert!(run(&["token", "list"]).out.contains("revoked"));
    let again = run(&["token", "revoke", &id]);
    assert_eq!(again.code, 1);
    assert!(again.err.contains("already revoked"), "{}", again.err);
    let store = opsgraph::ops_cmd::open_store(std::path::Path::new(&data)).unwrap();
    use opsgraph_store::Store as _;
    let actions: Vec<String> = store.audit(&Default::default()).unwrap().iter().map(|a| a.action.clone()).collect();
    assert_eq!(actions, ["token.create", "token.revoke"]);
}

/// The CLI as the server's client: the same commands, the same output, over a real socket; a
/// second identity answers the gate the first one may not.
#[test]
fn the_cli_drives_an_operation_through_the_server_with_a_second_identity_at_its_gate() {
    let api = Api::new("");
    let files = temp_dir(&[
        ("sam.token", &api.token("sam", &["operator"])),
        ("bob.token", &api.token("bob", &["sre"])),
        ("intent.yaml", &intent("h7")),
    ]);
    let server = Server::start(&api);
    let as_ = |who: &str, args: &[&str]| server.opsgraph(&files.join(&format!("{who}.token")), args);
    let intent = files.join("intent.yaml").display().to_string();

    let preview = as_("sam", &["plan", "-f", &intent]);
    assert!(preview.out.starts_with("Plan hello.install"), "{}", preview.render());
    let applied = as_("sam", &["apply", "-f", &intent, "--yes"]);
    assert_eq!(applied.code, 0, "{}", applied.render());
    let id = applied.operation_id();
    assert!(
        applied.out.contains(&format!("Operation {id}: paused: waiting for gate approve-hello")),
        "{}",
        applied.out
    );
    // The operator may not answer; the SRE may, and the CLI follows the run to its end.
    let refused = as_("sam", &["gate", "answer", "approve-hello", "--option", "approve", "--as", "sam"]);
    refused.assert_refused("403 role_not_allowed");
    let answered = as_("bob", &["gate", "answer", "approve-hello", "--option", "approve", "--as", "bob"]);
    assert_eq!(answered.code, 0, "{}", answered.render());
    assert!(answered.out.contains("done      say-hello"), "{}", answered.out);
    assert!(answered.out.contains(&format!("Operation {id}: completed")), "{}", answered.out);
    assert!(answered.out.contains("Evidence: 1 of 1 checks passed"), "{}", answered.out);

    // Reads print what they print locally: the same document, the same rows.
    let remote = as_("sam", &["describe", "operation", &id, "-o", "json"]);
    let data = api.dir.join("data").display().to_string();
    let local = crate::support::opsgraph(&["--data-dir", &data, "describe", "operation", &id, "-o", "json"]);
    assert_eq!(remote.out, local.out);
    let rows = as_("sam", &["get", "jobs", &id]);
    assert_eq!(rows.out, crate::support::opsgraph(&["--data-dir", &data, "get", "jobs", &id]).out);
    let audit = as_("sam", &["audit", "--operation", &id]);
    assert!(audit.out.contains("user:bob") && audit.out.contains("gate"), "{}", audit.out);
    let no_token = server.opsgraph(std::path::Path::new("/nonexistent"), &["get", "operations"]);
    assert!(no_token.err.contains("cannot read the token file"), "{}", no_token.render());

    drop(server);
}

/// The repair loop through the server: a failed run is diagnosed (no remedy: said plainly), a
/// plan patch is proposed by one SRE, refused to its own author, approved by another person with
/// the approve_patches permission, and the run completes; logs come over the API too.
#[test]
fn a_failed_operation_is_repaired_through_the_server_by_patch_and_approval() {
    let api = Api::new("");
    let files = temp_dir(&[
        ("bob.token", &api.token("bob", &["sre"])),
        ("ada.token", &api.token("ada", &["sre", "platform_admin"])),
        ("planner.token", &api.token("planner", &["ai_agent"])),
        (
            "ai-fix.yaml",
            "plan_patch:\n  reason: the greeting must be hello\n  changes:\n    - set_parameters: {parameters: {word: hello}}\n    - retry: {job: say-hello}\n",
        ),
        ("intent.yaml", "intent:\n  target_resource_type: hello.app\n  action: install\n  name: h9\n  environment: dev\n  parameters: {word: bye}\n"),
        (
            "fix.yaml",
            "plan_patch:\n  reason: the greeting must be hello\n  changes:\n    - set_parameters: {parameters: {word: hello}}\n    - retry: {job: say-hello}\n  approval: {required: true, roles: [sre, platform_admin]}\n",
        ),
    ]);
    let server = Server::start(&api);
    let as_ = |who: &str, args: &[&str]| server.opsgraph(&files.join(&format!("{who}.token")), args);
    let intent = files.join("intent.yaml").display().to_string();
    let applied = as_("bob", &["apply", "-f", &intent, "--yes"]);
    let id = applied.operation_id();
    let failed =
        as_("bob", &["gate", "answer", "approve-hello", "--operation", &id, "--option", "approve", "--as", "bob"]);
    // bob created it: the server refuses his own approval of the plan gate; ada approves it.
    assert!(failed.err.contains("self_approval"), "{}", failed.render());
    let failed =
        as_("ada", &["gate", "answer", "approve-hello", "--operation", &id, "--option", "approve", "--as", "ada"]);
    assert!(failed.out.contains("failed: say-hello"), "{}", failed.render());
    let diagnosed = as_("bob", &["diagnose", &id]);
    assert!(diagnosed.out.contains("no remedy applies: nothing is proposed"), "{}", diagnosed.render());
    let logs = as_("bob", &["logs", &id, "-o", "json"]);
    assert!(logs.out.contains("\"attempt\": 1"), "{}", logs.render());

    // An AI agent may propose, never decide: its patch waits for a person, its answer is refused.
    let ai_fix = files.join("ai-fix.yaml").display().to_string();
    let by_ai = as_("planner", &["patch", &id, "-f", &ai_fix]);
    assert!(by_ai.out.contains("waiting for approval at patch-p1"), "{}", by_ai.render());
    let ai_answers = as_(
        "planner",
        &["gate", "answer", "patch-p1", "--operation", &id, "--option", "approve patch", "--as", "planner"],
    );
    assert!(ai_answers.err.contains("403"), "{}", ai_answers.render());
    let rejected =
        as_("ada", &["gate", "answer", "patch-p1", "--operation", &id, "--option", "reject patch", "--as", "ada"]);
    assert_eq!(rejected.code, 1, "{}", rejected.render());
    assert!(rejected.out.contains("patch p1 rejected"), "{}", rejected.out);

    let fix = files.join("fix.yaml").display().to_string();
    let proposed = as_("bob", &["patch", &id, "-f", &fix]);
    assert!(proposed.out.contains("~ parameter word: \"bye\" -> \"hello\""), "{}", proposed.render());
    assert!(proposed.out.contains("waiting for approval at patch-p2"), "{}", proposed.out);
    let own =
        as_("bob", &["gate", "answer", "patch-p2", "--operation", &id, "--option", "approve patch", "--as", "bob"]);
    assert!(own.err.contains("may not approve"), "{}", own.render());
    let approved =
        as_("ada", &["gate", "answer", "patch-p2", "--operation", &id, "--option", "approve patch", "--as", "ada"]);
    assert_eq!(approved.code, 0, "{}", approved.render());
    assert!(approved.out.contains(&format!("Operation {id}: completed")), "{}", approved.out);
    let greeting = std::fs::read_to_string(api.dir.join("data/lab/greeting-h9")).unwrap();
    assert_eq!(greeting, "hello");

    // Tokens through the API: shown once, listed without it, revoked; a grant beyond one's own
    // permissions is refused.
    let created = as_("ada", &["token", "create", "--name", "carol", "--role", "viewer"]);
    assert_eq!(created.code, 0, "{}", created.render());
    let carol = created.out.lines().nth(1).unwrap().to_string();
    assert!(carol.starts_with("og_"), "{}", created.out);
    let listed = as_("ada", &["token", "list"]);
    assert!(listed.out.contains("carol") && !listed.out.contains(&carol), "{}", listed.out);
    let carol_id = created.out.split_whitespace().nth(1).unwrap().to_string();
    assert_eq!(as_("ada", &["token", "revoke", &carol_id]).code, 0);
    let escalate = as_("bob", &["token", "create", "--name", "mallory", "--role", "platform_admin"]);
    assert!(escalate.err.contains("403"), "{}", escalate.render());

    drop(server);
}

/// What the web UI draws an operation from: its plan (jobs and what they wait for, the capability
/// resolution) and its patches (diff, findings, gate and answer); secret values stay sealed.
#[test]
fn the_plan_and_the_patches_of_an_operation_are_served() {
    let api = Api::new("");
    let [bob, ada, vera] = api.tokens([("bob", "sre"), ("ada", "sre"), ("vera", "viewer")]);
    let body = "intent:\n  target_resource_type: hello.app\n  action: install\n  name: pp\n  environment: dev\n  parameters: {word: bye}\n";
    let created = api.post("/api/v1/operations", &bob, body);
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    api.idle();

    let plan = api.get(&format!("/api/v1/operations/{id}/plan"), &vera);
    assert_eq!(plan.status, 200, "{}", plan.body);
    assert_eq!(plan.body["jobs"][0]["id"], "say-hello", "{}", plan.body);
    assert_eq!(plan.body["jobs"][0]["depends_on"], json!(["approve-hello"]), "a job waits for its gate");
    assert_eq!(plan.body["parameters"]["word"], "bye");
    assert!(plan.body["resolution"].is_array(), "{}", plan.body);
    assert_eq!(plan.body["gates"][0]["id"], "approve-hello");
    assert_eq!(api.get(&format!("/api/v1/operations/{id}/patches"), &vera).body, json!({"patches": []}));

    let op = api.get(&format!("/api/v1/operations/{id}"), &vera).body;
    let answer = json!({"option": "approve", "revision": op["plan_revision"]}).to_string();
    let r = api.post(&format!("/api/v1/operations/{id}/gates/approve-hello/answer"), &ada, &answer);
    assert_eq!(r.status, 200, "{}", r.body);
    api.idle();
    let fix = "plan_patch:\n  reason: the greeting must be hello\n  changes:\n    - set_parameters: {parameters: {word: hello}}\n    - retry: {job: say-hello}\n  approval: {required: true, roles: [sre]}\n";
    let r = api.post(&format!("/api/v1/operations/{id}/patches"), &bob, fix);
    assert_eq!(r.status, 200, "{}", r.body);
    let patches = api.get(&format!("/api/v1/operations/{id}/patches"), &vera).body;
    let p = &patches["patches"][0];
    assert_eq!(
        (&p["id"], &p["author"], &p["gate"], &p["state"]),
        (&json!("p1"), &json!("user:bob"), &json!("patch-p1"), &json!("waiting_for_approval")),
        "{patches}"
    );
    assert_eq!(p["diff_text"], "↻ retry say-hello\n~ parameter word: \"bye\" -> \"hello\"\n", "{patches}");
    assert!(p["findings"].is_array(), "{patches}");

    let op = api.get(&format!("/api/v1/operations/{id}"), &vera).body;
    let approve = json!({"option": "approve patch", "revision": op["plan_revision"]}).to_string();
    let r = api.post(&format!("/api/v1/operations/{id}/gates/patch-p1/answer"), &ada, &approve);
    assert_eq!(r.status, 200, "{}", r.body);
    api.idle();
    let p = api.get(&format!("/api/v1/operations/{id}/patches"), &vera).body["patches"][0].clone();
    assert_eq!((&p["state"], &p["answered_by"]), (&json!("approved"), &json!("user:ada")), "{p}");
    // The plan is now the patched revision.
    let plan = api.get(&format!("/api/v1/operations/{id}/plan"), &vera).body;
    assert_eq!(plan["parameters"]["word"], "hello", "{plan}");
    let op = api.get(&format!("/api/v1/operations/{id}"), &vera).body;
    assert_eq!(op["state"], "completed", "{op:#}");
    let r = api.get("/api/v1/operations/op-none/plan", &vera);
    assert_eq!((r.status, r.code()), (404, "no_operation"));
}

/// The requester's roles reach planning ([O]): an operations policy rule over `roles` refuses a
/// plan for one identity and lets another's through, naming the rule (P013).
#[test]
fn the_token_roles_reach_the_policy_rules() {
    let policy = "operations_policy:\n  dev:\n    rules:\n      - name: sre-only-in-dev\n        when: \"!('sre' in roles)\"\n        deny: only SREs plan here\n";
    let files: Vec<(&str, &str)> = PACK.iter().copied().chain([("world/ops.yaml", policy)]).collect();
    let api = Api::over(temp_dir(&files)).config("").packs(&["hello"]).world(&["world/ops.yaml"]).build();
    let (sam, sue) = (api.token("sam", &["operator"]), api.token("sue", &["operator", "sre"]));
    let r = api.post("/api/v1/plans", &sam, &intent("h1"));
    assert_eq!((r.status, r.code()), (422, "plan_error"), "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["errors"][0],
        json!({"code": "P013", "message": "refused by operations policy rule sre-only-in-dev (when `!('sre' in roles)`): only SREs plan here"})
    );
    let r = api.post("/api/v1/plans", &sue, &intent("h1"));
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Issue [M] item 5: each listed operation names the pack its plan records and its intent's
/// environment, and the list filters by them as by state; a value nothing has gives an empty
/// list, a malformed one a 400.
#[test]
fn the_operations_list_names_and_filters_by_pack_and_environment() {
    let bye: Vec<(String, String)> =
        PACK.iter().map(|(p, t)| (p.replace("hello", "bye"), t.replace("hello", "bye"))).collect();
    let files: Vec<(&str, &str)> =
        PACK.iter().copied().chain(bye.iter().map(|(p, t)| (p.as_str(), t.as_str()))).collect();
    let api = Api::over(temp_dir(&files)).packs(&["hello", "bye"]).build();
    let sam = api.token("sam", &["operator"]);
    let nowhere = intent("h3").replace("  environment: dev\n", "");
    for body in [intent("h1"), intent("h2").replace("dev", "prod"), nowhere, intent("b1").replace("hello", "bye")] {
        let r = api.post("/api/v1/operations", &sam, &body);
        assert_eq!(r.status, 201, "{}", r.body);
    }
    api.idle();
    // The operations a query lists, or its refusal.
    let list = |query: &str| {
        let r = api.get(&format!("/api/v1/operations{query}"), &sam);
        match r.status {
            200 => Ok(r.body["operations"].as_array().unwrap().clone()),
            _ => Err(format!("{} {}: {}", r.status, r.code(), r.body["error"]["message"].as_str().unwrap_or(""))),
        }
    };
    let all = list("").unwrap();
    let rows: String =
        all.iter().map(|o| format!("{} {} {} {}\n", o["resource"], o["state"], o["pack"], o["environment"])).collect();
    expect![[r#"
        "hello.app/h1" "paused" "hello@1.0.0" "dev"
        "hello.app/h2" "paused" "hello@1.0.0" "prod"
        "hello.app/h3" "paused" "hello@1.0.0" null
        "bye.app/b1" "paused" "bye@1.0.0" "dev"
    "#]]
    .assert_eq(&rows);
    // Each filter: the operations it keeps, each as the whole list shows it, or its refusal.
    let mut filtered = String::new();
    for query in [
        "?pack=hello",
        "?pack=hello@1.0.0",
        "?pack=bye&environment=dev",
        "?environment=prod",
        "?state=paused&pack=bye",
        "?state=completed&pack=bye",
        "?pack=hello@2.0.0",
        "?pack=nosuch",
        "?environment=staging",
        "?pack=Hello!",
        "?pack=hello@",
        "?environment=",
        "?team=a",
    ] {
        let kept = list(query).map(|ops| {
            assert!(ops.iter().all(|o| all.contains(o)), "{query}: {ops:?}");
            let names: Vec<&str> = ops.iter().map(|o| o["resource"].as_str().unwrap()).collect();
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(" ")
            }
        });
        filtered.push_str(&format!("{query}: {}\n", kept.unwrap_or_else(|e| e)));
    }
    expect![[r#"
        ?pack=hello: hello.app/h1 hello.app/h2 hello.app/h3
        ?pack=hello@1.0.0: hello.app/h1 hello.app/h2 hello.app/h3
        ?pack=bye&environment=dev: bye.app/b1
        ?environment=prod: hello.app/h2
        ?state=paused&pack=bye: bye.app/b1
        ?state=completed&pack=bye: none
        ?pack=hello@2.0.0: none
        ?pack=nosuch: none
        ?environment=staging: none
        ?pack=Hello!: 400 invalid_parameter: `pack` is a pack's `id` or `id@version` (`postgres@1.2.0`)
        ?pack=hello@: 400 invalid_parameter: `pack` is a pack's `id` or `id@version` (`postgres@1.2.0`)
        ?environment=: 400 invalid_parameter: `environment` is an environment's name (`prod`)
        ?team=a: 400 unknown_parameter: unknown query parameter `team`; this route takes: state, resource, pack, environment
    "#]]
    .assert_eq(&filtered);
    assert_eq!(api.audit().len(), 4, "the four creations, nothing for the lists");
}
