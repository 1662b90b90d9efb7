//! The AI analyzer through the server (`POST …/diagnosis?analyzer=ai`, `POST …/patches?analyzer=ai`)
//! against the CLI's local stand-in for the chat-completions wire format: the answer is checked,
//! recorded and audited; its patch passes the same reviewer (a prompt injection that inserts a job
//! is refused) and waits for a person; secret values never leave; without an endpoint, or with
//! one that does not answer, it is refused with a stable code.

use serde_json::{json, Value};

use crate::ai::{StandIn, GREET};
use crate::server::Api;
use crate::support::temp_dir;

const SECRET: &str = "s3cr3t-Pa55-w0rd";

/// A server over the greet pack with `config`; an operation of bob's that failed.
fn failed_operation(config: &str) -> (Api, String) {
    failed_under(config, opsgraph_server::Limits::default())
}

/// [`failed_operation`] under `limits`.
fn failed_under(config: &str, limits: opsgraph_server::Limits) -> (Api, String) {
    let api = Api::over(temp_dir(GREET)).config(config).packs(&["greet"]).limits(limits).build();
    let bob = api.token("bob", &["sre"]);
    let intent = format!(
        "intent:\n  target_resource_type: greet.app\n  action: run\n  name: g-1\n  environment: dev\n  parameters: {{word: bye, password: {SECRET}}}\n"
    );
    let created = api.post("/api/v1/operations", &bob, &intent);
    assert_eq!(created.status, 201, "{}", created.body);
    api.idle();
    let id = created.body["id"].as_str().unwrap().to_string();
    assert_eq!(api.get(&format!("/api/v1/operations/{id}"), &bob).body["state"], "failed");
    (api, id)
}

fn events(api: &Api, id: &str, token: &str) -> Vec<String> {
    let timeline = api.get(&format!("/api/v1/operations/{id}/timeline"), token).body;
    let list = timeline["timeline"].as_array().cloned().unwrap_or_default();
    list.iter().filter_map(|e| e["event"].as_str().map(str::to_string)).filter(|e| e.starts_with("ai_")).collect()
}

const GOOD: &str = r#"{"summary": "the greeting word is wrong", "cause": "parameter word is bye; evidence expects hello",
    "confidence": 0.8, "evidence": ["evidence:said_hello observed bye"], "remedy": "wrong-word",
    "plan_patch": {"reason": "say hello", "changes": [{"set_parameters": {"parameters": {"word": "hello"}}}, {"retry": {"job": "say"}}]}}"#;

/// The log's instructions, followed: a job that is not in the pack's library inserted before a retry.
const INJECTED: &str = r#"{"summary": "cleanup needed", "cause": "the log says so", "confidence": 0.9, "evidence": [], "remedy": null,
    "plan_patch": {"reason": "as instructed", "changes": [{"insert_before": "say", "jobs": ["rm-rf-root"]}, {"retry": {"job": "say"}}]}}"#;

#[test]
fn the_ai_analyzer_answers_through_the_server_reviewed_audited_and_masked() {
    let stand_in = StandIn::start();
    let (api, id) = failed_operation(&stand_in.config());
    let [vera, planner, ada] = api.tokens([("vera", "viewer"), ("planner", "ai_agent"), ("ada", "sre")]);
    let diagnosis = format!("/api/v1/operations/{id}/diagnosis");
    let patches = format!("/api/v1/operations/{id}/patches");
    // Output is masked when it is captured; a line that got past that (written to the log
    // afterwards) is masked again before the context leaves.
    let log = api.dir.join("data").join("runs").join(&id).join("say.1.log");
    assert!(log.is_file(), "{}", log.display());
    let mut text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("said bye as") && !text.contains(SECRET), "{text}");
    text.push_str(&format!("leaked: {SECRET}\n"));
    std::fs::write(&log, text).unwrap();

    // The rules analyzer by default, as GET says: the library's guard against a log that quotes
    // instructions wins over the pack's remedy, proposes nothing, and says where it comes from.
    let rules = api.post(&diagnosis, &vera, "");
    assert_eq!(rules.status, 200, "{}", rules.body);
    assert_eq!(rules.body, api.get(&diagnosis, &vera).body);
    let d = &rules.body["diagnosis"][0];
    assert_eq!(
        (&d["remedy"], &d["source"], &d["analyzer"], &d["patch"]),
        (&json!("log-quotes-instructions"), &json!("library"), &json!("rules"), &Value::Null),
        "{d}"
    );
    let r = api.post(&format!("{diagnosis}?analyzer=gpt"), &vera, "");
    assert_eq!((r.status, r.code()), (400, "unknown_analyzer"), "{}", r.body);

    // A viewer reads diagnoses but does not ask the AI (its question leaves the machine and is
    // recorded): refused before anything is sent, and the denial audited.
    let r = api.post(&format!("{diagnosis}?analyzer=ai"), &vera, "");
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    assert!(stand_in.requests.lock().unwrap().is_empty(), "a viewer's question left the machine");
    assert!(api.audit().iter().any(|a| a.starts_with("user:vera request.denied")), "{:?}", api.audit());

    // Refused answers: malformed, or naming a remedy nobody listed. Nothing proposed.
    stand_in.answers("I think the greeting is wrong.");
    let r = api.post(&format!("{diagnosis}?analyzer=ai"), &ada, "");
    assert_eq!((r.status, r.code()), (422, "ai_answer_refused"), "{}", r.body);
    assert!(r.body["error"]["message"].as_str().unwrap().contains("the answer is not a JSON object"), "{}", r.body);
    stand_in.answers(&GOOD.replace("wrong-word", "no-such-remedy"));
    let r = api.post(&format!("{diagnosis}?analyzer=ai"), &ada, "");
    assert_eq!((r.status, r.code()), (422, "ai_answer_refused"), "{}", r.body);

    // A prompt injection: the reviewer refuses the patch; the diagnosis offers none, and a
    // proposal is 422 patch_refused with the finding. No patch exists afterwards.
    stand_in.answers(INJECTED);
    let r = api.post(&format!("{diagnosis}?analyzer=ai"), &ada, "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!((&r.body["diagnosis"][0]["patch"], &r.body["review"]["state"]), (&Value::Null, &json!("refused")));
    assert!(r.body["review"]["findings"].to_string().contains("rm-rf-root"), "{}", r.body);
    let r = api.post(&format!("{patches}?analyzer=ai"), &planner, "");
    assert_eq!((r.status, r.code()), (422, "patch_refused"), "{}", r.body);
    assert!(r.body["error"]["message"].as_str().unwrap().contains("rm-rf-root"), "{}", r.body);
    assert_eq!(api.get(&patches, &vera).body, json!({"patches": []}));

    // A good answer: reviewed and offered; proposed by ai-agent:planner, it waits for a person.
    stand_in.answers(GOOD);
    let r = api.post(&format!("{diagnosis}?analyzer=ai"), &ada, "");
    assert_eq!(r.status, 200, "{}", r.body);
    let d = &r.body["diagnosis"][0];
    assert_eq!(
        (&d["analyzer"], &d["job"], &d["remedy"], &d["source"], &r.body["review"]["state"]),
        (&json!("ai"), &json!("say"), &json!("wrong-word"), &json!("pack"), &json!("passed")),
        "{}",
        r.body
    );
    assert_eq!(d["patch"]["changes"][1], json!({"retry": {"job": "say", "with_descendants": false}}), "{d}");
    let r = api.post(&format!("{patches}?analyzer=ai"), &vera, "");
    assert_eq!((r.status, r.code()), (403, "forbidden"), "proposing needs `patch`: {}", r.body);
    let r = api.post(&format!("{patches}?analyzer=ai"), &planner, "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        (&r.body["gate"], &r.body["approval"][0]["rule"]),
        (&json!("patch-p1"), &json!("ai_author")),
        "{}",
        r.body
    );
    assert_eq!(r.body["diagnosis"]["analyzer"], "ai", "{}", r.body);
    let p = &api.get(&patches, &vera).body["patches"][0];
    assert_eq!((&p["author"], &p["state"]), (&json!("ai-agent:planner"), &json!("waiting_for_approval")), "{p}");

    // Everything is on the timeline, and who asked is audited.
    let seen = events(&api, &id, &vera);
    let count = |e: &str| seen.iter().filter(|s| *s == e).count();
    assert_eq!((count("ai_answer_refused"), count("ai_patch_refused"), count("ai_diagnosis")), (2, 2, 4), "{seen:?}");
    let audit = api.audit();
    assert!(audit.contains(&"user:ada operation.diagnose OP".to_string()), "{audit:?}");
    assert!(audit.contains(&"ai-agent:planner operation.patch OP".to_string()), "{audit:?}");

    // What left the machine: the failure's context, its secret masked.
    let sent = stand_in.requests.lock().unwrap().clone();
    assert_eq!(sent.len(), 6, "one question per ask");
    let question: Value = serde_json::from_str(&sent[0]).unwrap();
    assert_eq!(question["model"], "test-model");
    let context = question["messages"][1]["content"].as_str().unwrap();
    assert!(context.contains("said bye as") && context.contains("\"failed_jobs\""), "{context}");
    assert!(context.contains("leaked: "), "{context}");
    for body in &sent {
        assert!(!body.contains(SECRET), "a secret left the machine: {body}");
    }

    // A person approves; the run completes.
    let op = api.get(&format!("/api/v1/operations/{id}"), &vera).body;
    let approve = json!({"option": "approve patch", "revision": op["plan_revision"]}).to_string();
    let r = api.post(&format!("/api/v1/operations/{id}/gates/patch-p1/answer"), &ada, &approve);
    assert_eq!(r.status, 200, "{}", r.body);
    api.idle();
    assert_eq!(api.get(&format!("/api/v1/operations/{id}"), &vera).body["state"], "completed");
}

/// An SRE's request for the AI analyzer's diagnosis of an operation that failed under `config`:
/// refused with `status` and `code`, its message holding each of `says`. The server, the
/// operation and the SRE's token, for what the caller checks next.
fn refused(config: &str, status: u16, code: &str, says: &[&str]) -> (Api, String, String) {
    let (api, id) = failed_operation(config);
    let ada = api.token("ada", &["sre"]);
    let r = api.post(&format!("/api/v1/operations/{id}/diagnosis?analyzer=ai"), &ada, "");
    assert_eq!((r.status, r.code()), (status, code), "{}", r.body);
    let message = r.body["error"]["message"].as_str().unwrap_or_default();
    for part in says {
        assert!(message.contains(part), "{}", r.body);
    }
    (api, id, ada)
}

#[test]
fn the_ai_analyzer_is_refused_without_an_endpoint_or_an_answer() {
    refused("", 409, "ai_not_configured", &[]);
    let nobody = opsgraph_exec::testing::closed_port();
    refused(&format!("ai:\n  url: http://127.0.0.1:{}/v1\n  model: m\n", nobody.port), 502, "ai_unavailable", &[]);
    // An environment ai_policy does not name: refused before anything is sent, through the server
    // and the CLI alike (one runtime check).
    let stand_in = StandIn::start();
    stand_in.answers(GOOD);
    let config = format!("{}ai_policy:\n  environments: [staging]\n", stand_in.config());
    let (api, id, _) = refused(&config, 403, "ai_policy_forbids", &["environment `dev`"]);
    let data = api.dir.join("data").display().to_string();
    let packs = api.dir.join("greet").display().to_string();
    let cli = crate::support::opsgraph(&["--data-dir", &data, "diagnose", &id, "--ai", "openai", "--packs", &packs]);
    assert!(cli.code != 0 && cli.render().contains("does not allow the AI analyzer"), "{}", cli.render());
    // A key named but not set: the endpoint would refuse a question without it, after the
    // context had left; nothing is sent.
    let config = format!("{}  api_key_env: OPSGRAPH_TEST_KEY_NEVER_SET\n", stand_in.config());
    let (api, id, ada) = refused(&config, 409, "ai_key_missing", &["$OPSGRAPH_TEST_KEY_NEVER_SET"]);
    assert!(stand_in.requests.lock().unwrap().is_empty(), "a question left the machine");
    assert!(events(&api, &id, &ada).is_empty(), "nothing is recorded");
    // A configuration the server cannot use stops it at start, saying why.
    let dir = temp_dir(&[("config.yaml", "ai:\n  url: ftp://x\n  model: m\n")]);
    let e = opsgraph_server::Config::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("`ai.url` must be an http:// or https:// URL"), "{e}");
}

#[test]
fn the_ai_analyzer_is_asked_no_more_often_than_the_limits_allow() {
    let stand_in = StandIn::start();
    stand_in.answers(GOOD);
    let limits =
        opsgraph_server::Limits { ai_requests_per_hour: 2, ai_requests_per_identity_per_hour: 1, ..Default::default() };
    let (api, id) = failed_under(&stand_in.config(), limits);
    let [ada, cy, dee] = api.tokens([("ada", "sre"), ("cy", "sre"), ("dee", "sre")]);
    let ask = |token: &str| api.post(&format!("/api/v1/operations/{id}/diagnosis?analyzer=ai"), token, "");
    assert_eq!(ask(&ada).status, 200);
    // ada's share of the hour is used: refused before anything is sent, through either route.
    for r in [ask(&ada), api.post(&format!("/api/v1/operations/{id}/patches?analyzer=ai"), &ada, "")] {
        assert_eq!((r.status, r.code()), (429, "rate_limited"), "{}", r.body);
        assert_eq!(r.body["error"]["details"]["limit"], "ai_requests_per_identity_per_hour", "{}", r.body);
        assert!(r.body["error"]["message"].as_str().unwrap().contains("try again in"), "{}", r.body);
    }
    assert_eq!(ask(&cy).status, 200, "another identity has its own share");
    let r = ask(&dee);
    assert_eq!((r.status, r.code()), (429, "rate_limited"), "{}", r.body);
    assert_eq!(r.body["error"]["details"]["limit"], "ai_requests_per_hour", "{}", r.body);
    assert_eq!(stand_in.requests.lock().unwrap().len(), 2, "only the questions allowed left the machine");
    assert_eq!(events(&api, &id, &ada), ["ai_diagnosis", "ai_diagnosis"], "refusals record nothing");
}

/// `diagnose OP --ai openai [--propose]` with `--server`: the server's analyzer answers, and the
/// CLI prints what it found, the review, and the proposal.
#[test]
fn the_cli_asks_the_servers_ai_analyzer() {
    let stand_in = StandIn::start();
    let (api, id) = failed_operation(&stand_in.config());
    let files = temp_dir(&[
        ("vera.token", &api.token("vera", &["viewer"])),
        ("ada.token", &api.token("ada", &["sre"])),
        ("ai.token", &api.token("ai", &["ai_agent"])),
    ]);
    let server = crate::serve::Server::start(&api);
    let ask = |who: &str, args: &[&str]| server.opsgraph(&files.join(&format!("{who}.token")), args);

    stand_in.answers(INJECTED);
    let refused = ask("ada", &["diagnose", &id, "--ai", "openai"]);
    assert_eq!(refused.code, 1, "{}", refused.render());
    assert!(refused.out.contains("Its patch is refused by the review (out of policy):"), "{}", refused.render());
    assert!(refused.out.contains("rm-rf-root"), "{}", refused.out);

    stand_in.answers(GOOD);
    let found = ask("ada", &["diagnose", &id, "--ai", "openai"]);
    assert_eq!(found.code, 0, "{}", found.render());
    assert!(found.out.starts_with("Diagnosis of say (ai analyzer of the server, confidence 0.8)\n"), "{}", found.out);
    assert!(found.out.contains("  remedy: wrong-word (pack)\n"), "{}", found.out);
    assert!(found.out.contains("Its patch passes the review"), "{}", found.out);
    let denied = ask("vera", &["diagnose", &id, "--ai", "openai", "--propose"]);
    assert!(denied.code != 0 && denied.render().contains("403 forbidden"), "{}", denied.render());
    let proposed = ask("ai", &["diagnose", &id, "--ai", "openai", "--propose"]);
    assert_eq!(proposed.code, 0, "{}", proposed.render());
    assert!(proposed.out.contains("patch p1 proposed by ai-agent:planner:"), "{}", proposed.out);
    assert!(proposed.out.contains("waiting for approval at patch-p1"), "{}", proposed.out);
    drop(server);
}
