//! Managing packs and resources through the API (`manage_packs`, `manage_resources`): installs
//! checked as the CLI checks them and seen by the next plan without a restart, removals and
//! replacements refused while an operation runs the pack, resources stored with their audit
//! rows and refused while an operation changes them, and the CLI doing all of it through a
//! server.

use serde_json::Value;

use crate::packs::{hello, tar_gz};
use crate::serve::Server;
use crate::server::{Api, Reply};
use crate::support::temp_dir;

/// A server over a data directory that uses the registry (no `--packs`): bundled + installed.
pub(crate) fn api() -> Api {
    Api::over(temp_dir(&[])).build()
}

fn install(api: &Api, token: &str, archive: Vec<u8>, query: &str) -> Reply {
    api.call_bytes(
        "POST",
        &format!("/api/v1/packs{query}"),
        Some(token),
        archive,
        &[("content-type", "application/gzip")],
    )
}

fn hello_intent(name: &str) -> String {
    format!("intent:\n  target_resource_type: hello.app\n  action: install\n  name: {name}\n  environment: dev\n")
}

/// The files under `data/packs/hello` (none when it does not exist).
fn hello_files(api: &Api) -> Vec<String> {
    let root = api.dir.join("data/packs/hello");
    let mut out = Vec::new();
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p.display().to_string());
            }
        }
    }
    walk(&root, &mut out);
    out
}

fn loaded(api: &Api, token: &str) -> Vec<String> {
    let r = api.get("/api/v1/packs", token);
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["packs"].as_array().unwrap().iter().map(|p| p["reference"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_pack_archive_is_installed_checked_and_planned_with_at_once() {
    let api = api();
    let admin = api.token("admin", &["platform_admin"]);
    let sre = api.token("bob", &["sre"]);
    assert!(!loaded(&api, &admin).contains(&"hello@1.0.0".to_string()));

    // Only manage_packs may install; the route's permission is checked before the body is read.
    let r = install(&api, &sre, tar_gz(&hello("1.0.0", false), None), "");
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    // The media type is named.
    let r = api.call_bytes("POST", "/api/v1/packs", Some(&admin), tar_gz(&hello("1.0.0", false), None), &[]);
    assert_eq!((r.status, r.code()), (415, "unsupported_media_type"), "{}", r.body);

    // A hostile archive is refused naming the entry and the rule, and nothing is written.
    let mut hostile = hello("1.0.0", false);
    hostile.push(("../escape.sh".into(), "echo out\n".into()));
    let r = install(&api, &admin, tar_gz_raw(&hostile), "");
    assert_eq!((r.status, r.code()), (422, "pack_refused"), "{}", r.body);
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("entry `../escape.sh`") && message.contains("`..`"), "{message}");
    assert!(hello_files(&api).is_empty(), "{:?}", hello_files(&api));
    assert!(!api.dir.join("escape.sh").exists() && !api.dir.join("data/escape.sh").exists());

    // A good one: 201, audited, loaded, and the next plan uses it without a restart.
    let r = install(&api, &admin, tar_gz(&hello("1.0.0", false), Some("hello")), "");
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["result"], "installed");
    assert_eq!(r.body["reference"], "hello@1.0.0");
    let digest = r.body["digest"].as_str().unwrap().to_string();
    assert!(loaded(&api, &admin).contains(&"hello@1.0.0".to_string()));
    let plan = api.post("/api/v1/plans", &sre, &hello_intent("h1"));
    assert_eq!(plan.status, 200, "{}", plan.body);
    assert_eq!(plan.body["pack"], "hello@1.0.0", "{}", plan.body);
    // `pack list` rows come with it.
    let rows = api.get("/api/v1/packs", &admin).body["registry"]["rows"].clone();
    assert!(rows.as_array().unwrap().iter().any(|r| r["id"] == "hello" && r["status"] == "installed"), "{rows}");

    // The same content again: nothing to do, no row.
    let r = install(&api, &admin, tar_gz(&hello("1.0.0", false), None), "");
    assert_eq!((r.status, r.body["result"].as_str()), (200, Some("unchanged")), "{}", r.body);

    // Other content under the same version: 409 unless replace=true.
    let mut changed = hello("1.0.0", false);
    changed[5].1 = "echo changed\n".into();
    let r = install(&api, &admin, tar_gz(&changed, None), "");
    assert_eq!((r.status, r.code()), (409, "pack_conflict"), "{}", r.body);
    assert!(r.body["error"]["message"].as_str().unwrap().contains(&digest), "{}", r.body);
    let r = install(&api, &admin, tar_gz(&changed, None), "?replace=true");
    assert_eq!((r.status, r.body["result"].as_str()), (201, Some("replaced")), "{}", r.body);
    assert_eq!(r.body["previous"].as_str(), Some(digest.as_str()));
    let now = api.get("/api/v1/packs/hello@1.0.0", &admin).body["versions"][0]["digest"].clone();
    assert_eq!(now, r.body["digest"]);

    // Bodies over limits.archive_bytes are 413 naming that limit.
    let big = vec![0u8; 16 * 1024 * 1024 + 1];
    let r = install(&api, &admin, big, "");
    assert_eq!((r.status, r.code()), (413, "body_too_large"), "{}", r.body);
    assert_eq!(r.body["error"]["details"]["limit"], "archive_bytes");

    // A bundled pack is not removable; an unknown one is 404; a version is needed.
    let r = api.call("DELETE", "/api/v1/packs/tempo@1.0.0", Some(&admin), "", &[]);
    assert_eq!((r.status, r.code()), (409, "pack_bundled"), "{}", r.body);
    let r = api.call("DELETE", "/api/v1/packs/nope@1.0.0", Some(&admin), "", &[]);
    assert_eq!((r.status, r.code()), (404, "no_pack"), "{}", r.body);
    let r = api.call("DELETE", "/api/v1/packs/hello", Some(&admin), "", &[]);
    assert_eq!((r.status, r.code()), (400, "invalid_parameter"), "{}", r.body);

    assert_eq!(
        api.audit(),
        vec![
            "user:bob request.denied /api/v1/packs",
            "user:admin request.refused /api/v1/packs",
            "user:admin pack.install hello@1.0.0",
            "user:admin pack.install hello@1.0.0"
        ],
        "one row per change and per denial or refusal by a rule; bad input, unknown packs and the identical install leave none"
    );
}

/// A tar.gz whose entry names are written as given (the `tar` builder refuses `..`).
fn tar_gz_raw(files: &[(String, String)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    for (p, text) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        let name = h.as_old_mut().name.as_mut();
        name[..p.len()].copy_from_slice(p.as_bytes());
        h.set_cksum();
        b.append(&h, text.as_bytes()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

#[test]
fn a_pack_an_operation_runs_is_neither_removed_nor_replaced_and_the_runtime_refuses_other_files() {
    let api = api();
    let admin = api.token("admin", &["platform_admin"]);
    let r = install(&api, &admin, tar_gz(&hello("1.0.0", true), None), "");
    assert_eq!(r.status, 201, "{}", r.body);
    let planned = r.body["digest"].as_str().unwrap().to_string();
    let r = api.post("/api/v1/operations", &admin, &hello_intent("h1"));
    assert_eq!(r.status, 201, "{}", r.body);
    let op = r.body["id"].as_str().unwrap().to_string();
    api.idle();

    // The operation waits at its gate: not terminal, so its pack stays.
    let r = api.call("DELETE", "/api/v1/packs/hello@1.0.0", Some(&admin), "", &[]);
    assert_eq!((r.status, r.code()), (409, "pack_in_use"), "{}", r.body);
    assert_eq!(r.body["error"]["details"]["operation"], op.as_str());
    let mut changed = hello("1.0.0", true);
    changed[5].1 = "echo changed\n".into();
    let r = install(&api, &admin, tar_gz(&changed, None), "?replace=true");
    assert_eq!((r.status, r.code()), (409, "pack_in_use"), "{}", r.body);
    assert!(!hello_files(&api).is_empty());

    // Had other files been loaded under the same id@version, the runtime would refuse them.
    let other_dir = temp_dir(&[]);
    for (p, text) in &changed {
        let path = other_dir.join(&format!("hello/{p}"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let (packs, _) = opsgraph::load::packs(&[opsgraph::load::Source::Disk(other_dir.join("hello"))]);
    assert_ne!(packs[0].digest, planned);
    let store = api.state.store().unwrap();
    let mut rt = opsgraph_runtime::Runtime::new(store, packs, vec![], api.dir.join("data"));
    let answer = opsgraph_runtime::GateAnswer {
        option: "proceed".into(),
        actor: "user:bob".into(),
        role: "sre".into(),
        value: None,
    };
    let result = rt.answer_gate(&op, "confirm", &answer).and_then(|_| rt.drive(&op, &mut |_| {}));
    match result {
        Err(opsgraph_runtime::Error::PackChanged { planned: p, .. }) => assert_eq!(p, planned),
        other => panic!("expected PackChanged, got {other:?}"),
    }

    // Once the operation is cancelled, the pack can go; the server plans without it at once.
    let r = api.post(&format!("/api/v1/operations/{op}/cancel"), &admin, "");
    assert_eq!(r.status, 200, "{}", r.body);
    api.idle();
    let r = api.call("DELETE", "/api/v1/packs/hello@1.0.0", Some(&admin), "", &[]);
    assert_eq!((r.status, r.body["result"].as_str()), (200, Some("removed")), "{}", r.body);
    assert!(hello_files(&api).is_empty());
    assert!(!loaded(&api, &admin).contains(&"hello@1.0.0".to_string()));
    let plan = api.post("/api/v1/plans", &admin, &hello_intent("h2"));
    assert_eq!(plan.status, 422, "{}", plan.body);
    let audit = api.audit();
    assert_eq!(audit.first().map(String::as_str), Some("user:admin pack.install hello@1.0.0"));
    assert_eq!(audit.last().map(String::as_str), Some("user:admin pack.remove hello@1.0.0"));
}

const RESOURCE: &str = "resource:\n  type: hello.app\n  name: h1\n  environment: dev\n  status: running\n";

#[test]
fn resources_are_stored_and_deleted_with_their_audit_rows_and_not_under_a_running_operation() {
    let api = api();
    let admin = api.token("admin", &["platform_admin"]);
    let sre = api.token("bob", &["sre"]);
    let post = |token: &str, body: &str| api.post("/api/v1/resources", token, body);

    let r = post(&sre, RESOURCE);
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    // Bad documents: every diagnostic, with its position.
    let r = post(&admin, "resource:\n  type: hello.app\n  nmae: h1\n");
    assert_eq!((r.status, r.code()), (422, "invalid_document"), "{}", r.body);
    let diags = r.body["error"]["details"]["diagnostics"].to_string();
    assert!(diags.contains("request:3:") && diags.contains("nmae"), "{diags}");
    let r = post(&admin, &hello_intent("h1"));
    assert_eq!((r.status, r.code()), (422, "expected_one_document"), "{}", r.body);

    let r = post(&admin, RESOURCE);
    assert_eq!((r.status, r.body["result"].as_str()), (201, Some("created")), "{}", r.body);
    assert_eq!(r.body["id"], "hello.app/h1");
    let r = post(&admin, RESOURCE);
    assert_eq!((r.status, r.body["result"].as_str()), (200, Some("unchanged")), "{}", r.body);
    let r = post(&admin, &RESOURCE.replace("running", "degraded"));
    assert_eq!((r.status, r.body["result"].as_str()), (200, Some("updated")), "{}", r.body);
    let r = api.get("/api/v1/resources/hello.app/h1", &sre);
    assert_eq!(r.body["resource"]["status"], "degraded", "{}", r.body);

    // An operation that changes it holds it: no upsert, no delete, naming the operation.
    let r = install(&api, &admin, tar_gz(&hello("1.0.0", true), None), "");
    assert_eq!(r.status, 201, "{}", r.body);
    let r = api.post("/api/v1/operations", &admin, &hello_intent("h1"));
    assert_eq!(r.status, 201, "{}", r.body);
    let op = r.body["id"].as_str().unwrap().to_string();
    api.idle();
    let r = post(&admin, RESOURCE);
    assert_eq!((r.status, r.code()), (409, "resource_busy"), "{}", r.body);
    assert!(r.body["error"]["message"].as_str().unwrap().contains(&op), "{}", r.body);
    let r = api.call("DELETE", "/api/v1/resources/hello.app/h1", Some(&admin), "", &[]);
    assert_eq!((r.status, r.code()), (409, "resource_busy"), "{}", r.body);
    let r = api.post(&format!("/api/v1/operations/{op}/cancel"), &admin, "");
    assert_eq!(r.status, 200, "{}", r.body);
    api.idle();

    let r = api.call("DELETE", "/api/v1/resources/hello.app%2Fh1", Some(&admin), "", &[]);
    assert_eq!((r.status, r.body["result"].as_str()), (200, Some("deleted")), "{}", r.body);
    let r = api.call("DELETE", "/api/v1/resources/hello.app/h1", Some(&admin), "", &[]);
    assert_eq!((r.status, r.code()), (404, "no_resource"), "{}", r.body);

    let rows: Vec<String> = api.audit().into_iter().filter(|a| a.contains("resource.")).collect();
    assert_eq!(
        rows,
        vec![
            "user:admin resource.apply hello.app/h1",
            "user:admin resource.apply hello.app/h1",
            "user:admin resource.delete hello.app/h1",
        ]
    );
    // The audit row names the resource, so it is found by resource.
    let store = api.state.store().unwrap();
    let filter = opsgraph_store::AuditFilter { resource: Some("hello.app/h1".into()), ..Default::default() };
    assert!(store.audit(&filter).unwrap().iter().any(|a| a.action == "resource.delete"));
}

#[test]
fn the_cli_installs_packs_and_applies_resources_through_the_server_as_it_does_locally() {
    let api = api();
    let files = temp_dir(&[("admin.token", &api.token("admin", &["platform_admin"])), ("r.yaml", RESOURCE)]);
    let archive = files.join("hello.tar.gz");
    std::fs::write(&archive, tar_gz(&hello("1.0.0", false), None)).unwrap();
    for (p, text) in hello("2.0.0", false) {
        let path = files.join(&format!("hello-2/{p}"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let server = Server::start(&api);
    let token = files.join("admin.token");
    let remote = |args: &[&str]| server.opsgraph(&token, args);
    let local_data = files.join("local").display().to_string();
    let local = |args: &[&str]| crate::support::opsgraph(&[&["--data-dir", local_data.as_str()], args].concat());
    let path = |rel: &str| files.join(rel).display().to_string();

    let r = remote(&["pack", "install", &path("hello.tar.gz")]);
    assert_eq!(r.code, 0, "{}", r.render());
    assert!(r.out.starts_with("installed pack hello@1.0.0 sha256:"), "{}", r.out);
    assert!(r.out.trim_end().ends_with("from api upload by user:admin"), "{}", r.out);
    let again = remote(&["pack", "install", &path("hello.tar.gz")]);
    let again_local = {
        assert_eq!(local(&["pack", "install", &path("hello.tar.gz")]).code, 0);
        local(&["pack", "install", &path("hello.tar.gz")])
    };
    assert_eq!(again.out, again_local.out, "the same line locally and remotely");
    // A directory is packed in memory and sent.
    let r = remote(&["pack", "install", &path("hello-2")]);
    assert_eq!(r.code, 0, "{}", r.render());
    assert!(r.out.starts_with("installed pack hello@2.0.0"), "{}", r.out);
    let listed = remote(&["pack", "list"]);
    assert!(listed.out.contains("hello") && listed.out.contains("2.0.0"), "{}", listed.render());
    let rows: Value = serde_json::from_str(&remote(&["pack", "list", "-o", "json"]).out).unwrap();
    assert!(rows.as_array().unwrap().iter().any(|r| r["version"] == "2.0.0" && r["status"] == "installed"));
    let r = remote(&["pack", "remove", "hello@2.0.0"]);
    assert_eq!((r.code, r.out.as_str()), (0, "removed pack hello@2.0.0\n"), "{}", r.render());
    let r = remote(&["pack", "remove", "tempo@1.0.0"]);
    r.assert_refused("409 pack_bundled");

    let r = remote(&["resource", "apply", "-f", &path("r.yaml")]);
    assert_eq!((r.code, r.out.as_str()), (0, "resource hello.app/h1 created\n"), "{}", r.render());
    let l = local(&["resource", "apply", "-f", &path("r.yaml")]);
    assert_eq!(l.out, r.out, "the same line locally and remotely");
    let r = remote(&["resource", "apply", "-f", &path("r.yaml")]);
    assert_eq!(r.out, "resource hello.app/h1 unchanged; nothing to do\n");
    let r = remote(&["resource", "delete", "hello.app/h1"]);
    assert_eq!((r.code, r.out.as_str()), (0, "resource hello.app/h1 deleted\n"), "{}", r.render());
    let l = local(&["resource", "delete", "hello.app/h1"]);
    assert_eq!(l.out, r.out);

    let rows: Vec<String> = api.audit().into_iter().filter(|a| a.starts_with("user:admin")).collect();
    assert_eq!(
        rows,
        vec![
            "user:admin pack.install hello@1.0.0",
            "user:admin pack.install hello@2.0.0",
            "user:admin pack.remove hello@2.0.0",
            "user:admin resource.apply hello.app/h1",
            "user:admin resource.delete hello.app/h1",
        ]
    );
    drop(server);
}
