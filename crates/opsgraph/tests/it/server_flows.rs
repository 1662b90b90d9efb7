//! The server end to end: an operation over a real socket with a second identity at its gate,
//! the CLI as the server's client, the repair loop by patch and approval, what the web UI draws
//! an operation from, the requester's roles in planning, and the operations list's filters.

use expect_test::expect;
use serde_json::json;

use crate::serve::{wait_for, Server};
use crate::server::{http, intent, Api, PACK};
use crate::support::temp_dir;

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
