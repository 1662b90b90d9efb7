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
