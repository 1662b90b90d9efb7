//! The OpenAPI document describes what the server really answers: a story through the real
//! router (create an operation, list, read, answer its gate, resources, tokens, audit, packs,
//! agents, errors), every JSON body validated against the schema its route documents for that
//! status, by a JSON Schema validator that is not the generator. And the validator can fail.

use std::collections::BTreeSet;

use expect_test::expect;
use serde_json::{json, Value};

use crate::server::{intent, Api, Reply};

/// The document, and the validator of each (method, path, status) met so far.
struct Spec {
    doc: Value,
    /// (method, documented path, status) of every body checked.
    checked: BTreeSet<(String, String, u16)>,
}

impl Spec {
    fn new() -> Spec {
        Spec { doc: opsgraph_server::openapi(), checked: BTreeSet::new() }
    }

    /// The schema of `method path`'s `status` answer (the `default` one when that status is not
    /// documented), with the document's components beside it so that its `$ref`s resolve.
    fn schema(&self, method: &str, path: &str, status: u16) -> Value {
        let op = &self.doc["paths"][path][method.to_lowercase()];
        assert!(op.is_object(), "{method} {path} is not documented");
        let responses = &op["responses"];
        let response = responses.get(status.to_string()).unwrap_or(&responses["default"]);
        let schema = &response["content"]["application/json"]["schema"];
        assert!(!schema.is_null(), "{method} {path} documents no JSON body for {status}");
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "components": self.doc["components"],
            "allOf": [schema],
        })
    }

    /// Why `body` does not fit `method path`'s `status` answer: every error, or none.
    fn errors(&self, method: &str, path: &str, status: u16, body: &Value) -> Vec<String> {
        let schema = self.schema(method, path, status);
        let validator = jsonschema::draft202012::new(&schema).expect("the document's schemas compile");
        validator.iter_errors(body).map(|e| format!("{} at {}", e, e.instance_path())).collect()
    }

    /// `reply` (to `method concrete`, documented as `path`) fits the document.
    fn check(&mut self, method: &str, path: &str, reply: Reply) -> Reply {
        let errors = self.errors(method, path, reply.status, &reply.body);
        assert!(
            errors.is_empty(),
            "{method} {path} answered {} that does not fit: {errors:#?}\n{:#}",
            reply.status,
            reply.body
        );
        self.checked.insert((method.to_string(), path.to_string(), reply.status));
        reply
    }
}

const RESOURCE: &str = "resource:\n  type: hello.app\n  name: h1\n  environment: dev\n  status: running\n";

#[test]
fn every_answer_of_a_story_fits_the_schema_its_route_documents() {
    let api = Api::new("");
    let [sam, bob, admin, agent] =
        api.tokens([("sam", "operator"), ("bob", "sre"), ("admin", "platform_admin"), ("workers", "agent")]);
    let mut spec = Spec::new();
    let mut call =
        |method: &str, path: &str, concrete: &str, token: Option<&str>, body: &str, headers: &[(&str, &str)]| {
            let reply = api.call(method, concrete, token, body, headers);
            spec.check(method, path, reply)
        };

    // Who and what.
    call("GET", "/api/v1/health", "/api/v1/health", None, "", &[]);
    call("GET", "/api/v1/ready", "/api/v1/ready", None, "", &[]);
    call("GET", "/api/v1/me", "/api/v1/me", Some(&sam), "", &[]);
    call("GET", "/api/v1/roles", "/api/v1/roles", Some(&sam), "", &[]);
    call("POST", "/api/v1/plans", "/api/v1/plans?format=text", Some(&sam), &intent("h1"), &[]);

    // An operation: created (and replayed by its key), listed, read whole and in parts.
    let key = [("idempotency-key", "story-1")];
    let created = call("POST", "/api/v1/operations", "/api/v1/operations", Some(&sam), &intent("h1"), &key);
    assert_eq!(created.status, 201, "{}", created.body);
    let again = call("POST", "/api/v1/operations", "/api/v1/operations", Some(&sam), &intent("h1"), &key);
    assert_eq!(again.body, created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    api.idle();
    let op = format!("/api/v1/operations/{id}");
    call("GET", "/api/v1/operations", "/api/v1/operations?state=paused", Some(&sam), "", &[]);
    let read = call("GET", "/api/v1/operations/{id}", &op, Some(&sam), "", &[]);
    assert_eq!(read.body["detail"], "paused: waiting for gate approve-hello", "{}", read.body);
    for part in ["jobs", "timeline", "evidence", "artifacts", "plan", "patches", "gates", "diagnosis", "logs"] {
        let r = call("GET", &format!("/api/v1/operations/{{id}}/{part}"), &format!("{op}/{part}"), Some(&sam), "", &[]);
        assert_eq!(r.status, 200, "{part}: {}", r.body);
    }
    // The rules analyzer asked by POST answers as GET does (nothing failed: an empty list).
    let r = call("POST", "/api/v1/operations/{id}/diagnosis", &format!("{op}/diagnosis"), Some(&sam), "", &[]);
    assert_eq!((r.status, &r.body["diagnosis"]), (200, &json!([])), "{}", r.body);

    // Its gate: refused to the operator (403), to a stale revision (409), answered by the SRE.
    let answer = "/api/v1/operations/{id}/gates/{gate}/answer";
    let at = format!("{op}/gates/approve-hello/answer");
    let body = |revision: &Value| json!({"option": "approve", "revision": revision}).to_string();
    let r = call("POST", answer, &at, Some(&sam), &body(&read.body["plan_revision"]), &[]);
    assert_eq!(r.status, 403, "{}", r.body);
    let r = call("POST", answer, &at, Some(&bob), &body(&json!("sha256:0")), &[]);
    assert_eq!(r.status, 409, "{}", r.body);
    let r = call("POST", answer, &at, Some(&bob), &body(&read.body["plan_revision"]), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    api.idle();
    let done = call("GET", "/api/v1/operations/{id}", &op, Some(&sam), "", &[]);
    assert_eq!(done.body["state"], "completed", "{}", done.body);
    call("GET", "/api/v1/operations/{id}/evidence", &format!("{op}/evidence"), Some(&sam), "", &[]);
    call("GET", "/api/v1/operations/{id}/logs", &format!("{op}/logs?job=say-hello"), Some(&sam), "", &[]);
    let log =
        call("GET", "/api/v1/operations/{id}/jobs/{job}/log", &format!("{op}/jobs/say-hello/log"), Some(&sam), "", &[]);
    assert_eq!((log.status, &log.body["final"]), (200, &json!(true)), "{}", log.body);
    // Control of a finished operation is refused, with the error's shape.
    for action in ["pause", "cancel", "retry", "resume"] {
        let path = format!("/api/v1/operations/{{id}}/{action}");
        call("POST", &path, &format!("{op}/{action}"), Some(&admin), "", &[]);
    }

    // Resources: recorded by the operation, stored, read, deleted.
    call("GET", "/api/v1/resources", "/api/v1/resources", Some(&sam), "", &[]);
    let other = RESOURCE.replace("h1", "h2");
    let r = call("POST", "/api/v1/resources", "/api/v1/resources", Some(&admin), &other, &[]);
    assert_eq!(r.status, 201, "{}", r.body);
    let r = call("POST", "/api/v1/resources", "/api/v1/resources", Some(&admin), &other, &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call("GET", "/api/v1/resources/{id}", "/api/v1/resources/hello.app/h2", Some(&sam), "", &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    call("POST", "/api/v1/verifications", "/api/v1/verifications", Some(&sam), r#"{"resource": "hello.app/h2"}"#, &[]);
    let r = call("DELETE", "/api/v1/resources/{id}", "/api/v1/resources/hello.app/h2", Some(&admin), "", &[]);
    assert_eq!(r.status, 200, "{}", r.body);

    // Audit (with a time), tokens, the catalog, an agent with nothing to do.
    // `since` is any RFC 3339 time, compared as a time: an hour ahead in UTC+02:00 is an hour ago.
    let mut rows = |since: &str| {
        let r = call("GET", "/api/v1/audit", &format!("/api/v1/audit?since={since}"), Some(&sam), "", &[]);
        r.body["audit"].as_array().unwrap().len()
    };
    let soon = opsgraph_store::parse_time(&opsgraph_store::now()).unwrap() / 1000 + 3600;
    let soon = opsgraph_store::rfc3339(soon, 0).replace(".000Z", "+02:00");
    assert!(rows("2000-01-01T00:00:00Z") > 0);
    assert!(rows(&soon.replace('+', "%2B")) > 0, "{soon}");
    assert_eq!(rows("2999-01-01t00:00:00.5z"), 0);
    call("GET", "/api/v1/tokens", "/api/v1/tokens", Some(&admin), "", &[]);
    let t =
        call("POST", "/api/v1/tokens", "/api/v1/tokens", Some(&admin), r#"{"name": "eve", "roles": ["viewer"]}"#, &[]);
    assert_eq!(t.status, 201, "{}", t.body);
    let revoke = format!("/api/v1/tokens/{}", t.body["id"].as_str().unwrap());
    call("DELETE", "/api/v1/tokens/{id}", &revoke, Some(&admin), "", &[]);
    for path in ["/api/v1/packs", "/api/v1/providers", "/api/v1/policies", "/api/v1/openapi.json"] {
        call("GET", path, path, Some(&sam), "", &[]);
    }
    let r = call("GET", "/api/v1/inventory", "/api/v1/inventory?type=hello.app", Some(&sam), "", &[]);
    assert_eq!(r.body["resources"][0]["id"], "hello.app/h1", "{}", r.body);
    call("GET", "/api/v1/packs/{id}", "/api/v1/packs/hello", Some(&sam), "", &[]);
    let r = call("POST", "/api/v1/agent/claim", "/api/v1/agent/claim", Some(&agent), "", &[]);
    assert_eq!(r.body, json!({"protocol": 3, "task": null}));

    // Errors: unauthenticated, forbidden, missing, bad bodies, bad parameters.
    let errors: &[(&str, &str, &str, Option<&str>, &str)] = &[
        ("GET", "/api/v1/operations", "/api/v1/operations", None, ""),
        ("GET", "/api/v1/tokens", "/api/v1/tokens", Some(&sam), ""),
        ("GET", "/api/v1/operations/{id}", "/api/v1/operations/op-none", Some(&sam), ""),
        ("GET", "/api/v1/resources/{id}", "/api/v1/resources/hello.app/none", Some(&sam), ""),
        ("POST", "/api/v1/operations", "/api/v1/operations", Some(&sam), "intent: {}\n"),
        ("POST", "/api/v1/tokens", "/api/v1/tokens", Some(&admin), "{\"name\": 1}"),
        ("GET", "/api/v1/audit", "/api/v1/audit?since=yesterday", Some(&sam), ""),
        ("GET", "/api/v1/operations", "/api/v1/operations?color=red", Some(&sam), ""),
    ];
    for (method, path, concrete, token, body) in errors {
        let r = call(method, path, concrete, *token, body, &[]);
        assert!(r.status >= 400, "{method} {concrete}: {}", r.body);
    }

    // The JSON answers the story met; the routes it did not reach are streams, bytes, or pack
    // and agent work that other tests drive.
    let met: BTreeSet<(String, String)> = spec.checked.iter().map(|(m, p, _)| (m.clone(), p.clone())).collect();
    let json_routes: BTreeSet<(String, String)> = opsgraph_server::ROUTES
        .iter()
        .filter(|r| r.response.is_some())
        .map(|r| (r.method.to_string(), opsgraph_server::table::openapi_path(r.path)))
        .collect();
    let missed: Vec<String> = json_routes.difference(&met).map(|(m, p)| format!("{m} {p}")).collect();
    expect![[r#"
        [
            "DELETE /api/v1/packs/{id}",
            "POST /api/v1/agent/heartbeat",
            "POST /api/v1/agent/log",
            "POST /api/v1/agent/report",
            "POST /api/v1/operations/{id}/interventions",
            "POST /api/v1/operations/{id}/patches",
            "POST /api/v1/packs",
            "POST /api/v1/packs/catalogue",
        ]
    "#]]
    .assert_debug_eq(&missed);
}

/// The check can fail: a real answer with one field of the wrong type, one missing, one unknown
/// value of an enumeration, is refused, each with the field it is about.
#[test]
fn an_answer_that_breaks_its_schema_is_refused() {
    let api = Api::new("");
    let sam = api.token("sam", &["operator"]);
    let spec = Spec::new();
    let created = api.call("POST", "/api/v1/operations", Some(&sam), &intent("h1"), &[]);
    api.idle();
    let list = api.get("/api/v1/operations", &sam).body;
    assert!(spec.errors("GET", "/api/v1/operations", 200, &list).is_empty(), "{list}");
    let broken = |f: &dyn Fn(&mut Value)| {
        let mut v = list.clone();
        f(&mut v);
        spec.errors("GET", "/api/v1/operations", 200, &v)
    };
    expect![[r#"
        [
            [
                "42 is not of type \"string\" at /operations/0/actor",
            ],
            [
                "\"created_at\" is a required property at /operations/0",
            ],
            [
                "\"sleeping\" is not one of \"draft_intent\", \"plan_preview\" or 11 other candidates at /operations/0/state",
            ],
            [
                "\"x\" is not of type \"array\" at /operations",
            ],
        ]
    "#]]
    .assert_debug_eq(&[
        broken(&|v| v["operations"][0]["actor"] = json!(42)),
        broken(&|v| {
            v["operations"][0].as_object_mut().unwrap().remove("created_at");
        }),
        broken(&|v| v["operations"][0]["state"] = json!("sleeping")),
        broken(&|v| v["operations"] = json!("x")),
    ]);
    // And a created operation is not an operation list.
    assert!(!spec.errors("GET", "/api/v1/operations", 200, &created.body).is_empty());
}

/// No success body is described as any JSON: each is the schema of the Rust type its handler
/// serializes (the OpenAPI document's own answer by the top of OpenAPI's shape).
#[test]
fn no_route_answers_untyped_json() {
    let doc = opsgraph_server::openapi();
    let mut untyped = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            for (status, response) in op["responses"].as_object().unwrap() {
                let schema = &response["content"]["application/json"]["schema"];
                if *schema == json!(true) || *schema == json!({}) {
                    untyped.push(format!("{} {path} {status}", method.to_uppercase()));
                }
            }
        }
    }
    expect![[r#"
        []
    "#]]
    .assert_debug_eq(&untyped);
}

/// The documents rendered from a whole world fit their schemas: every bundled pack's
/// declarations, the example providers and policies, the inventory, and the preview of every
/// example intent (gates with options, providers to create with their sub-operation plans,
/// scopes, day-2 refusals as errors) — values the small story does not reach.
#[test]
fn a_whole_worlds_catalogue_and_previews_fit_their_schemas() {
    let data = crate::support::temp_dir(&[]);
    let world: Vec<String> =
        ["examples/inventory", "examples/providers.yaml", "examples/policy.yaml", "examples/operations-policy.yaml"]
            .iter()
            .map(|p| crate::support::path(p))
            .collect();
    let state =
        opsgraph::serve_cmd::state(data.path(), &[crate::support::path("packs")], &world).expect("server state");
    let api = Api { dir: data, state, rt: tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap() };
    let sam = api.token("sam", &["operator"]);
    let spec = Spec::new();
    let fits = |method: &str, path: &str, concrete: &str, body: &str| {
        let r = api.call(method, concrete, Some(&sam), body, &[]);
        let errors = spec.errors(method, path, r.status, &r.body);
        assert!(errors.is_empty(), "{method} {concrete} answered {} that does not fit: {errors:#?}", r.status);
        r
    };
    let packs = fits("GET", "/api/v1/packs", "/api/v1/packs", "").body;
    let mut scripts = 0;
    for p in packs["packs"].as_array().unwrap() {
        let id = p["reference"].as_str().unwrap();
        let r = fits("GET", "/api/v1/packs/{id}", &format!("/api/v1/packs/{id}"), "");
        assert_eq!(r.status, 200, "{}", r.body);
        let jobs = r.body["versions"][0]["jobs"].as_object().unwrap().values();
        scripts += jobs.filter(|j| j["script_text"].is_string()).count();
    }
    assert!(scripts > 0, "a bundled pack's script text is part of what was checked");
    let providers = fits("GET", "/api/v1/providers", "/api/v1/providers", "").body;
    assert!(providers["providers"].as_array().unwrap().len() > 1, "{providers}");
    let policies = fits("GET", "/api/v1/policies", "/api/v1/policies", "").body;
    assert!(policies["capability_policy"].as_object().is_some_and(|p| !p.is_empty()), "{policies}");
    let inventory = fits("GET", "/api/v1/inventory", "/api/v1/inventory", "").body;
    assert!(inventory["resources"].as_array().unwrap().len() > 3, "{inventory}");

    let mut seen = BTreeSet::new();
    let mut intents: Vec<_> = std::fs::read_dir(crate::support::root().join("examples/intents"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    intents.sort();
    for file in intents {
        let text = std::fs::read_to_string(&file).unwrap();
        let r = fits("POST", "/api/v1/plans", "/api/v1/plans?format=text", &text);
        if r.status != 200 {
            seen.insert(format!("refused {}", r.body["error"]["code"].as_str().unwrap_or("?")));
            continue;
        }
        let p = &r.body;
        seen.insert(format!("status {}", p["status"].as_str().unwrap()));
        for res in p["resolution"].as_array().unwrap() {
            seen.insert(format!("outcome {}", res["outcome"].as_str().unwrap()));
        }
        if p["sub_operations"].as_array().unwrap().iter().any(|s| s["plan"].is_object()) {
            seen.insert("a sub-operation's plan".into());
        }
    }
    // What the previews held: each kind of value was validated at least once.
    expect![[r#"
        {
            "a sub-operation's plan",
            "outcome bind",
            "outcome gate",
            "status ready",
            "status waiting_for_gates",
        }
    "#]]
    .assert_debug_eq(&seen);
}
