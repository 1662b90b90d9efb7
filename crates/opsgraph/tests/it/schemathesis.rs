//! Schemathesis (a property-based API tester, from PyPI) against a real `opsgraph serve` on a
//! loopback port: it reads the served OpenAPI document, sends requests it generates from the
//! schemas — valid ones, which must be accepted, and invalid ones, which must be refused — and
//! checks every answer against the document. A bounded run (a few examples per operation, a time
//! limit) with 0 failures. Needs `OPSGRAPH_SCHEMATHESIS`, the path of its `st` command (`.ci/run`
//! installs it into a virtualenv under ~/.cache/opsgraph and sets it); otherwise says it skipped.
//!
//! What "accepted" means is written in `schemathesis.toml` beside this file, with the reasons.

use std::process::Command;

use crate::serve::Process;
use crate::server::{http, intent, PACK};
use crate::support::{root, temp_dir};

#[test]
fn schemathesis_finds_no_failure_against_a_real_server() {
    let Ok(st) = std::env::var("OPSGRAPH_SCHEMATHESIS") else {
        eprintln!("skipped: set OPSGRAPH_SCHEMATHESIS to schemathesis's `st` command (.ci/run installs it)");
        return;
    };
    let dir = temp_dir(PACK);
    let data = dir.join("data");
    let token = format!("og_{}", "s".repeat(43));
    let token_file = dir.join("admin.token");
    std::fs::write(&token_file, &token).unwrap();
    // The pack is installed, not given with --packs: a server with --packs refuses to install or
    // remove packs, and those routes are to be exercised too.
    let installed = crate::support::opsgraph(&[
        "--data-dir",
        &data.display().to_string(),
        "pack",
        "install",
        &dir.join("hello").display().to_string(),
    ]);
    assert_eq!(installed.code, 0, "{}", installed.render());
    let server = Process::start(
        Command::new(env!("CARGO_BIN_EXE_opsgraph"))
            .args(["--data-dir", &data.display().to_string(), "serve", "--listen", "127.0.0.1:0"])
            .env("OPSGRAPH_ADMIN_TOKEN_FILE", &token_file)
            .env_remove("OPSGRAPH_MASTER_KEY"),
        &dir.join("server.log"),
    );
    // Something real for the routes with ids to reach: an operation waiting at its gate, a stored
    // resource, a token (schemathesis sends these ids beside the ones it makes up).
    let (status, created) = http(server.addr, "POST", "/api/v1/operations", &token, &intent("st"));
    assert_eq!(status, 201, "{created}");
    let resource = "resource:\n  type: hello.app\n  name: stored\n  environment: dev\n  status: running\n";
    let (status, stored) = http(server.addr, "POST", "/api/v1/resources", &token, resource);
    assert_eq!(status, 201, "{stored}");
    let (status, minted) =
        http(server.addr, "POST", "/api/v1/tokens", &token, r#"{"name": "st-viewer", "roles": ["viewer"]}"#);
    assert_eq!(status, 201, "{minted}");
    let config = root().join("crates/opsgraph/tests/it/schemathesis.toml");
    let report = dir.join("report");
    let out = Command::new(&st)
        .current_dir(dir.path())
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(format!("http://{}/api/v1/openapi.json", server.addr))
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .arg("--report-dir")
        .arg(&report)
        .env("NO_COLOR", "1")
        .env("OPSGRAPH_ST_OPERATION", created["id"].as_str().unwrap())
        .env("OPSGRAPH_ST_RESOURCE", stored["id"].as_str().unwrap())
        .env("OPSGRAPH_ST_TOKEN", minted["id"].as_str().unwrap())
        .env("SCHEMATHESIS_HOOKS", root().join("crates/opsgraph/tests/it/schemathesis_hooks.py"))
        .output()
        .expect("schemathesis runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{text}\n--- server log (last 4000 bytes) ---\n{}",
        &log[log.len().saturating_sub(4000)..]
    );
    // It ran, and tested the operations it was given.
    assert!(text.contains("passed") || text.contains("Passed"), "{text}");
    eprintln!("{}", text.lines().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n"));
}
