//! Secrets through the API, against the real binary: canary secrets that no API response to a
//! viewer or operator, no log line of the real `opsgraph serve` and no file of its data directory
//! holds, and audited reveals of secret artifacts.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::serve::{wait_for, Process};
use crate::server_stream::{http, ids, read_until, stream};
use crate::support::{files_under, holds, temp_dir};

const VAULT: &[(&str, &str)] = &[
    ("packs/vault/pack.yaml", crate::secrets::VAULT_PACK),
    ("packs/vault/templates.yaml", crate::secrets::VAULT_TEMPLATES),
    (
        "packs/vault/jobs.yaml",
        crate::secrets::vault_jobs!(
            "token, notes",
            r#"      printf 'ART%s' "${OPSGRAPH_PARAM_DB_PASSWORD#PW}" > "$OPSGRAPH_OUT/token"
      printf 'notes of %s' "$OPSGRAPH_INTENT_NAME" > "$OPSGRAPH_OUT/notes"
"#,
            r#"      echo "key: $OPSGRAPH_PARAM_API_KEY" >&2
"#
        ),
    ),
    ("packs/vault/evidence.yaml", crate::secrets::VAULT_EVIDENCE),
    (
        "packs/vault/artifacts.yaml",
        "artifact: {id: token, type: token, sensitivity: secret, visible_to_roles: [platform_admin, sre]}\n---\nartifact: {id: notes, type: notes, sensitivity: internal}\n",
    ),
    ("data/config.yaml", "roles:\n  revealer: [read, reveal_secrets]\n"),
];

/// `opsgraph serve` as a process of its own, with JSON logs on standard error (kept in `log`).
fn serve(data: &std::path::Path, packs: &std::path::Path, log: &std::path::Path) -> Process {
    Process::start(
        std::process::Command::new(env!("CARGO_BIN_EXE_opsgraph"))
            .args(["--data-dir", &data.display().to_string(), "serve", "--listen", "127.0.0.1:0"])
            .args(["--packs", &packs.display().to_string()])
            .env("OPSGRAPH_LOG", "json")
            .env_remove("OPSGRAPH_MASTER_KEY")
            .env_remove("OPSGRAPH_ADMIN_TOKEN_FILE"),
        log,
    )
}

#[test]
fn canaries_never_reach_viewers_operators_logs_or_files_and_a_reveal_is_audited() {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let nonce = format!("{:x}{nanos:x}", std::process::id());
    let password = format!("PW-CANARY-{nonce}");
    let artifact = format!("ART-CANARY-{nonce}"); // what make-token makes of the password
    let key = format!("KEY-CANARY-{nonce}");
    let canaries = [password.as_str(), artifact.as_str(), key.as_str()];

    let dir = temp_dir(VAULT);
    let data = dir.join("data");
    let log = dir.join("server.log");
    let server = serve(&data, &dir.join("packs/vault"), &log);
    let addr = server.addr;
    let admin = server.admin.clone().expect("the server printed its admin token");
    let mint = |name: &str, role: &str| {
        let out = crate::support::opsgraph(&[
            "--data-dir",
            &data.display().to_string(),
            "token",
            "create",
            "--name",
            name,
            "--role",
            role,
        ]);
        assert_eq!(out.code, 0, "{}", out.render());
        out.out.lines().nth(1).unwrap().to_string()
    };
    let operator = mint("olga", "operator");
    let viewer = mint("vera", "viewer");
    let sre = mint("sven", "sre");
    let revealer = mint("rita", "revealer");

    // What a viewer or operator is answered, all of it.
    let mut seen: Vec<(String, String)> = Vec::new();
    let intent = json!({"intent": {"target_resource_type": "vault.thing", "action": "run", "name": "v-1", "environment": "dev",
        "parameters": {"db_password": password, "api_key": key}}});
    let created = http(addr, "POST", "/api/v1/operations", &operator, &[], &intent.to_string());
    assert_eq!(created.status, 201, "{}", created.body);
    seen.push(("POST /operations".into(), created.body.clone()));
    let id = created.json()["id"].as_str().unwrap().to_string();
    let op = wait_for(addr, &id, &operator, "completed");
    assert_eq!(op["jobs"].as_array().unwrap().len(), 2, "{op}");

    let reads = [
        format!("/api/v1/operations/{id}"),
        format!("/api/v1/operations/{id}/jobs"),
        format!("/api/v1/operations/{id}/timeline"),
        format!("/api/v1/operations/{id}/evidence"),
        format!("/api/v1/operations/{id}/artifacts"),
        format!("/api/v1/operations/{id}/gates"),
        format!("/api/v1/operations/{id}/events"),
        format!("/api/v1/operations/{id}/artifacts/notes"),
        format!("/api/v1/operations/{id}/artifacts/token"),
        "/api/v1/operations".into(),
        "/api/v1/resources".into(),
        "/api/v1/audit".into(),
        "/api/v1/packs/vault".into(),
    ];
    for token in [&viewer, &operator] {
        for path in &reads {
            let r = http(addr, "GET", path, token, &[], "");
            seen.push((format!("GET {path}"), format!("{} {:?} {}", r.status, r.headers, r.body)));
        }
        let last = ids(&stream(addr, &format!("/api/v1/operations/{id}/events"), token, &[]).1).pop().unwrap();
        let all = read_until(addr, "/api/v1/events", token, |e| e.iter().any(|e| e.id == Some(last)));
        seen.push(("GET /api/v1/events".into(), format!("{all:?}")));
        // Neither may reveal.
        let r = http(addr, "POST", &format!("/api/v1/operations/{id}/artifacts/token/reveal"), token, &[], "");
        assert_eq!((r.status, r.json()["error"]["code"].as_str()), (403, Some("role_not_allowed")), "{}", r.body);
        seen.push(("POST reveal".into(), r.body));
    }
    let artifacts = http(addr, "GET", &format!("/api/v1/operations/{id}/artifacts"), &viewer, &[], "").json();
    let token_ref = artifacts["artifacts"].as_array().unwrap().iter().find(|a| a["id"] == "token").unwrap().clone();
    assert_eq!(token_ref["reference"], format!("artifact:{id}/make-token/token"));
    assert!(token_ref.get("location").is_none(), "{token_ref}");
    let notes = http(addr, "GET", &format!("/api/v1/operations/{id}/artifacts/notes"), &viewer, &[], "");
    assert_eq!((notes.status, notes.body.as_str()), (200, "notes of v-1"));
    assert_eq!(notes.header("content-type"), Some("application/octet-stream"));
    let secret = http(addr, "GET", &format!("/api/v1/operations/{id}/artifacts/token"), &viewer, &[], "");
    assert_eq!((secret.status, secret.json()["error"]["code"].as_str()), (403, Some("secret_artifact")));

    // A role with the permission but outside `visible_to_roles` is refused. No reveal, no audit row.
    let reveal = format!("/api/v1/operations/{id}/artifacts/token/reveal");
    let r = http(addr, "POST", &reveal, &revealer, &[], "");
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (403, Some("role_not_allowed")), "{}", r.body);
    assert_eq!(
        r.json()["error"]["message"],
        "artifact `token` is visible to platform_admin, sre; your roles: revealer"
    );
    let audit =
        |token: &str| http(addr, "GET", "/api/v1/audit", token, &[], "").json()["audit"].as_array().unwrap().clone();
    assert!(audit(&viewer).iter().all(|a| a["action"] != "artifact.reveal"));
    let r = http(addr, "POST", &format!("/api/v1/operations/{id}/artifacts/nothing/reveal"), &admin, &[], "");
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (404, Some("no_artifact")));

    // The platform admin reveals it: the value, not cached, and one audit row without it.
    let r = http(addr, "POST", &reveal, &admin, &[], &json!({"reason": "rotate the db user"}).to_string());
    assert_eq!((r.status, r.body.as_str()), (200, artifact.as_str()));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    let rows: Vec<Value> = audit(&viewer).into_iter().filter(|a| a["action"] == "artifact.reveal").collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(
        (row["actor"].as_str(), row["target"].as_str()),
        (Some("user:admin"), Some(format!("{id}/make-token/token").as_str()))
    );
    assert_eq!(row["operation"], json!(id));
    assert_eq!(
        row["detail"],
        json!({"job": "make-token", "artifact": "token", "sensitivity": "secret", "size": artifact.len(), "role": "platform_admin", "reason": "rotate the db user"})
    );
    seen.push(("GET /api/v1/audit after the reveal".into(), format!("{rows:?}")));
    // `visible_to_roles` means what the seed says ([K] 11): an SRE, named there, reveals it
    // without the reveal_secrets permission, audited like any reveal.
    let r = http(addr, "POST", &reveal, &sre, &[], "");
    assert_eq!((r.status, r.body.as_str()), (200, artifact.as_str()));
    let rows: Vec<Value> = audit(&viewer).into_iter().filter(|a| a["action"] == "artifact.reveal").collect();
    assert_eq!(rows.iter().filter(|a| a["detail"]["role"] == "sre").count(), 1, "{rows:?}");
    let r = http(addr, "POST", &reveal, &admin, &[], "{\"why\": 1}");
    assert_eq!(r.json()["error"]["code"], "invalid_json");

    // Every GET route of the API, as the administrator (who may read everything there is to
    // read; only the audited reveal above shows a secret, on purpose), streams included.
    let mut routes = 0;
    for route in opsgraph_server::ROUTES.iter().filter(|r| r.method == "GET") {
        let paths: Vec<String> = if route.path.contains("{artifact}") {
            ["token", "notes"].iter().map(|a| route.path.replace("{id}", &id).replace("{artifact}", a)).collect()
        } else {
            vec![route
                .path
                .replace("{file}", "app.js")
                .replace("{*id}", "vault.thing/v-1")
                .replace("/packs/{id}", "/packs/vault")
                .replace("{id}", &id)]
        };
        for path in paths {
            routes += 1;
            let text = if route.produces == opsgraph_server::media::EVENT_STREAM {
                // The operation's stream ends (it is terminal); the server's goes on: read it up
                // to the operation's last event.
                let (_, own) = stream(addr, &format!("/api/v1/operations/{id}/events"), &admin, &[]);
                let last = ids(&own).pop().unwrap();
                let all = if path.ends_with(&format!("{id}/events")) {
                    own
                } else {
                    read_until(addr, &path, &admin, |e| e.iter().any(|e| e.id == Some(last)))
                };
                format!("{all:?}")
            } else {
                let r = http(addr, "GET", &path, &admin, &[], "");
                assert!(r.status < 500, "GET {path}: {} {}", r.status, r.body);
                format!("{} {:?} {}", r.status, r.headers, r.body)
            };
            seen.push((format!("API GET {path}"), text));
        }
    }
    assert!(routes >= 25, "only {routes} GET routes");

    // What the command line prints about it (on the same data directory).
    let data_dir = data.display().to_string();
    for args in [
        vec!["describe", "operation", id.as_str(), "-o", "json"],
        vec!["describe", "operation", id.as_str()],
        vec!["get", "operations", "-o", "json"],
        vec!["logs", id.as_str()],
        vec!["audit"],
    ] {
        let out = crate::support::opsgraph(&[&["--data-dir", data_dir.as_str()][..], &args].concat());
        assert_eq!(out.code, 0, "{}", out.render());
        seen.push((format!("CLI {}", args.join(" ")), format!("{}{}", out.out, out.err)));
    }

    // The web UI as a browser renders it: the operation in both modes, its artifacts, resources.
    if std::path::Path::new(crate::ui::CHROMIUM).exists() && std::path::Path::new(crate::ui::CHROMEDRIVER).exists() {
        let browser = crate::ui::Browser::start();
        let base = format!("http://{addr}");
        browser.go(&format!("{base}/"));
        browser.sign_in(&admin, "admin");
        browser.go(&format!("{base}/#/operations/{id}"));
        browser.wait("[data-testid=op-state]", |t| t == "completed");
        seen.push((
            "UI HTML operation (simple)".into(),
            browser.js("return document.documentElement.outerHTML").to_string(),
        ));
        browser.click_when("#mode-toggle", |t| t == "Advanced view");
        browser.wait("tr[data-job='use-token']", |t| t.contains("succeeded"));
        seen.push((
            "UI HTML operation (advanced)".into(),
            browser.js("return document.documentElement.outerHTML").to_string(),
        ));
        for page in ["#/operations", "#/resources"] {
            browser.go(&format!("{base}/{page}"));
            std::thread::sleep(Duration::from_millis(500));
            seen.push((format!("UI HTML {page}"), browser.js("return document.documentElement.outerHTML").to_string()));
        }
    } else {
        eprintln!("SKIPPED the UI sink of the canary sweep: chromium/chromedriver not installed");
    }

    // The write-ahead log while the server still holds it open (it is checkpointed at exit).
    for name in ["opsgraph.db-wal", "opsgraph.db"] {
        let bytes = std::fs::read(data.join(name)).unwrap_or_default();
        seen.push((format!("file data/{name} (while serving)"), String::from_utf8_lossy(&bytes).into_owned()));
    }

    drop(server);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut table = Vec::new();
    for (what, text) in &seen {
        let hits: usize = canaries.iter().map(|c| text.matches(c).count() + text.matches(&b64(c)).count()).sum();
        table.push(format!("{hits:>4}  {:>8} B  {what}", text.len()));
    }
    for (what, text) in &seen {
        for c in canaries {
            assert!(!text.contains(c) && !text.contains(&b64(c)), "{c} in the answer to {what}: {text}");
        }
    }
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.lines().count() > 10, "{log_text}");
    for line in log_text.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|_| panic!("not a JSON log line: {line}"));
        assert!(v.get("timestamp").is_some(), "{line}");
    }
    assert!(log_text.contains("/reveal"), "the reveal requests are logged");
    let mut all = vec![(log.clone(), log_text.into_bytes())];
    files_under(&data, &mut all);
    assert!(all.iter().any(|(p, _)| p.ends_with("opsgraph.db")), "no database file scanned");
    for (path, bytes) in &all {
        let hits: usize =
            canaries.iter().map(|c| usize::from(holds(bytes, c)) + usize::from(holds(bytes, &b64(c)))).sum();
        let rel = path.strip_prefix(dir.path()).unwrap_or(path);
        table.push(format!("{hits:>4}  {:>8} B  file {}", bytes.len(), rel.display()));
        for c in canaries {
            assert!(!holds(bytes, c) && !holds(bytes, &b64(c)), "{c} in {}", path.display());
        }
    }
    println!("canary sweep: {} sinks, 0 hits (hits, bytes scanned, sink)\n{}", table.len(), table.join("\n"));
}
