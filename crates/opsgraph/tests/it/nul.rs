//! No text with a NUL reaches a store. PostgreSQL's text cannot hold one (a cancel reason with a
//! NUL failed the commit there: 500), so the API refuses it on every backend, with a stable code,
//! before anything is read or written: a JSON string (400 `invalid_json`), a document's scalar
//! (422 `invalid_document`, at its line and column), a path or query parameter (400
//! `invalid_parameter`). The OpenAPI document says so (tests/it/schemathesis.rs holds the server to
//! it); the agent protocol screens what a host printed instead (tests/it/printable.rs).

use opsgraph_store::testing::Backend;

use crate::server::{intent, Api, PACK};
use crate::support::temp_dir;

fn check(backend: Backend) {
    let db = match backend {
        Backend::Sqlite => opsgraph_store_sqlite::test_db(),
        Backend::Postgres => {
            let Some(db) = opsgraph_store_pg::test_db(&format!("nul::check ({backend:?})")) else { return };
            db
        }
    };
    let api = Api::over(temp_dir(PACK)).config("").packs(&["hello"]).database(db.url()).build();
    let [sam] = api.tokens([("sam", "platform_admin")]);
    let created = api.post("/api/v1/operations", &sam, &intent("h1"));
    assert_eq!(created.status, 201, "{backend:?}: {}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    api.idle();
    let op = api.get(&format!("/api/v1/operations/{id}"), &sam);
    assert_eq!(op.body["state"], "paused", "{backend:?}: at its gate: {}", op.body);
    let (audit, operations) = (api.audit(), api.get("/api/v1/operations", &sam).body);
    let revision = op.body["plan_revision"].as_str().unwrap().to_string();

    let cancel = format!("/api/v1/operations/{id}/cancel");
    let answer = format!("/api/v1/operations/{id}/gates/approve-hello/answer");
    let cases: Vec<(&str, String, String, u16, &str)> = vec![
        ("POST", cancel.clone(), r#"{"reason": "a\u0000b"}"#.into(), 400, "invalid_json"),
        (
            "POST",
            answer.clone(),
            format!(r#"{{"option": "approve", "value": {{"k": ["\u0000"]}}, "revision": "{revision}"}}"#),
            400,
            "invalid_json",
        ),
        ("POST", "/api/v1/tokens".into(), r#"{"name": "x\u0000", "roles": ["viewer"]}"#.into(), 400, "invalid_json"),
        (
            "POST",
            "/api/v1/operations".into(),
            format!("{}  parameters: {{word: \"a\\0b\"}}\n", intent("h2")),
            422,
            "invalid_document",
        ),
        ("GET", "/api/v1/operations?environment=%00".into(), String::new(), 400, "invalid_parameter"),
        ("GET", "/api/v1/operations/op%00x".into(), String::new(), 400, "invalid_parameter"),
        ("GET", format!("/api/v1/operations/{id}/jobs/x%00/log"), String::new(), 400, "invalid_parameter"),
    ];
    for (method, path, body, status, code) in cases {
        let r = api.call(method, &path, Some(&sam), &body, &[]);
        assert_eq!((r.status, r.code()), (status, code), "{backend:?} {method} {path} {body}: {}", r.body);
    }
    let document =
        api.post("/api/v1/operations", &sam, &format!("{}  parameters: {{word: \"a\\0b\"}}\n", intent("h2")));
    let problems = document.body["error"]["details"].to_string();
    assert!(problems.contains("6:") && problems.contains("NUL"), "{backend:?}: where and what: {problems}");

    // Nothing changed: no audit row, no operation, the first one still at its gate.
    assert_eq!(api.audit(), audit, "{backend:?}: a refused request is not audited as a change");
    assert_eq!(api.get("/api/v1/operations", &sam).body, operations, "{backend:?}");
    let r = api.post(&cancel, &sam, r#"{"reason": "a\\u0000b is text"}"#);
    assert_eq!((r.status, r.body["state"].as_str()), (200, Some("cancelled")), "{backend:?}: {}", r.body);
}

#[test]
fn a_nul_is_refused_before_it_reaches_sqlite() {
    check(Backend::Sqlite);
}

#[test]
fn a_nul_is_refused_before_it_reaches_postgresql() {
    check(Backend::Postgres);
}
