//! Jobs on a remote host through the runtime, against a real sshd (when root and
//! /usr/sbin/sshd are here): required artifacts and credentials are copied there first, produced
//! ones come back, and the job runs in a private directory of the remote host — not in the control
//! host's run directory. A job that times out leaves no process on the host.

use opsgraph_core::model::OperationState;
use opsgraph_exec::testing::Sshd;

use crate::serve::Server;
use crate::subop::{events, World};

const PACK: &[(&str, &str)] = &[
    (
        "packs/app/pack.yaml",
        "scenario_pack:\n  id: app\n  version: 1.0.0\n  resource_types: [app.thing]\n  actions: [run]\n  plan_templates: [{id: app.run}]\n  libraries: [scripts/lib/report.sh]\n",
    ),
    // The pack's library goes to the remote host beside the script.
    ("packs/app/scripts/lib/report.sh", "report() { printf 'cwd=%s\\nout=%s\\nlib=%s\\n' \"$PWD\" \"$OPSGRAPH_OUT\" \"$OPSGRAPH_LIB\"; }\n"),
    ("packs/app/scripts/write-report.sh", ". \"$OPSGRAPH_LIB/report.sh\"\nreport > \"$OPSGRAPH_OUT/report\"\n"),
    (
        "packs/app/templates.yaml",
        "plan_template:\n  id: app.run\n  action: run\n  scopes: {hosts: {resource_type: host, from: targets.hosts}}\n  stages: [{id: all, name: All, jobs: [write-report, copy-report]}]\n  jobs: [write-report, copy-report]\n",
    ),
    (
        "packs/app/jobs.yaml",
        r#"job:
  id: write-report
  scope: {target: hosts}
  outputs: {artifacts: [report]}
  run: {executor: ssh, script: scripts/write-report.sh}
---
job:
  id: copy-report
  scope: {target: hosts}
  inputs: {requires: {artifacts: [report]}}
  outputs: {artifacts: [copy]}
  run: {executor: ssh, command: '{ cat "$OPSGRAPH_ARTIFACT_REPORT"; printf "from=%s\n" "$OPSGRAPH_ARTIFACT_REPORT"; } > "$OPSGRAPH_OUT/copy"'}
"#,
    ),
    ("packs/app/artifacts.yaml", "artifact: {id: report, type: text, sensitivity: internal}\n---\nartifact: {id: copy, type: text, sensitivity: internal}\n"),
    ("packs/bucket/pack.yaml", "scenario_pack:\n  id: bucket\n  version: 1.0.0\n  resource_types: [bucket.thing]\n  actions: [make]\n  plan_templates: []\n"),
    ("intent.yaml", "intent: {target_resource_type: app.thing, action: run, name: app-1, environment: dev, targets: {hosts: [host/h1]}}\n"),
];

/// The inventory document of `host/h1`, reached over SSH at `sshd`.
fn host_h1(sshd: &Sshd) -> String {
    format!(
        "resource:\n  type: host\n  name: h1\n  environment: dev\n  access:\n    ssh: {{host: 127.0.0.1, port: {}, user: {}, key: {}, known_hosts: {}}}\n",
        sshd.port,
        sshd.user,
        sshd.key.display(),
        sshd.known_hosts.display()
    )
}

#[test]
fn ssh_jobs_receive_and_produce_artifacts_on_the_remote_host() {
    let Some(sshd) = Sshd::start_or_skip("ssh_jobs_receive_and_produce_artifacts_on_the_remote_host") else { return };
    let host = host_h1(&sshd);
    let mut files: Vec<(&str, &str)> = PACK.to_vec();
    files.push(("world/host.yaml", &host));
    let w = World::replacing(&files);
    let (mut rt, _, id) = w.created();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed, "{:#?}", events(&rt, &id));
    let data = w.dir.join("data");
    let artifacts = rt.store().artifacts(&id).unwrap();
    let copy = artifacts.iter().find(|a| a.id == "copy").expect("the copy came back");
    let text = std::fs::read_to_string(data.join(&copy.location)).unwrap();
    let line = |key: &str| text.lines().find_map(|l| l.strip_prefix(&format!("{key}="))).unwrap_or("").to_string();
    // The first job ran in a private remote directory and wrote its report there.
    let cwd = line("cwd");
    assert!(cwd.contains("/opsgraph."), "{text}");
    assert_eq!(line("out"), format!("{cwd}/out"), "{text}");
    assert_eq!(line("lib"), format!("{cwd}/lib"), "{text}");
    assert!(!cwd.starts_with(&data.display().to_string()), "ran in the control host's directory: {text}");
    // The second job read the report from its own remote copy.
    assert!(line("from").contains("/opsgraph.") && line("from").contains("/in/"), "{text}");
    // Remote directories are removed afterwards.
    assert!(!std::path::Path::new(&cwd).exists(), "{cwd} is left behind");
}

/// One client for the CLI: the same read commands against `opsgraph serve` and against its data
/// directory print the same bytes (both print the API's documents through one renderer), for
/// every output format and for a refusal of the command itself; `diagnose` too.
#[test]
fn read_commands_print_the_same_bytes_locally_and_through_the_server() {
    let api = crate::server::Api::new("");
    let files = crate::support::temp_dir(&[
        ("sam.token", &api.token("sam", &["operator"])),
        ("bob.token", &api.token("bob", &["sre"])),
        ("ada.token", &api.token("ada", &["platform_admin"])),
        ("intent.yaml", &crate::server::intent("h11")),
        (
            "failing.yaml",
            "intent:\n  target_resource_type: hello.app\n  action: install\n  name: h12\n  environment: dev\n  parameters: {word: bye}\n",
        ),
    ]);
    let server = Server::start(&api);
    let remote = |who: &str, args: &[&str]| server.opsgraph(&files.join(&format!("{who}.token")), args);
    let data = api.dir.join("data").display().to_string();
    let local = |args: &[&str]| crate::support::opsgraph(&[&["--data-dir", &data], args].concat());

    // An operation that waited at a gate, was answered by another person and completed.
    let intent = files.join("intent.yaml").display().to_string();
    let applied = remote("sam", &["apply", "-f", &intent, "--yes"]);
    assert_eq!(applied.code, 0, "{}", applied.render());
    let id = applied.operation_id();
    let answered = remote("bob", &["gate", "answer", "approve-hello", "--option", "approve", "--as", "bob"]);
    assert!(answered.out.contains(&format!("Operation {id}: completed")), "{}", answered.render());

    // And one that failed: the analyzer's findings read the same both ways.
    let failing = files.join("failing.yaml").display().to_string();
    let applied = remote("sam", &["apply", "-f", &failing, "--yes"]);
    let failed = applied.operation_id();
    let answered = remote(
        "bob",
        &["gate", "answer", "approve-hello", "--operation", &failed, "--option", "approve", "--as", "bob"],
    );
    assert!(answered.out.contains(&format!("Operation {failed}: failed")), "{}", answered.render());
    let packs = api.dir.join("hello").display().to_string();

    let commands: Vec<Vec<&str>> = vec![
        vec!["diagnose", &failed, "--packs", &packs],
        vec!["diagnose", &failed, "--packs", &packs, "-o", "json"],
        vec!["diagnose", &failed, "--packs", &packs, "-o", "yaml"],
        vec!["diagnose", &id, "--packs", &packs],
        vec!["describe", "operation", &failed, "-o", "yaml"],
        vec!["logs", &failed],
        vec!["get", "operations"],
        vec!["get", "operations", "-o", "json"],
        vec!["get", "operations", "--state", "failed"],
        vec!["get", "operations", "--state", "completed", "--pack", "hello", "-o", "json"],
        vec!["get", "operations", "--environment", "dev", "--pack", "nosuch"],
        vec!["get", "operations", "--pack", "Not A Pack"],
        vec!["get", "operations", "--environment", ""],
        vec!["get", "resources", "--state", "failed"],
        vec!["get", "resources"],
        vec!["get", "resources", "-o", "yaml"],
        vec!["get", "jobs", &id],
        vec!["get", "jobs", &id, "-o", "json"],
        vec!["get", "jobs"],
        vec!["get", "nothing"],
        vec!["describe", "operation", &id],
        vec!["describe", "operation", &id, "-o", "json"],
        vec!["describe", "thing", &id],
        vec!["logs", &id],
        vec!["logs", &id, "say-hello"],
        vec!["logs", &id, "-o", "json"],
        vec!["logs", &id, "-o", "yaml"],
        vec!["audit"],
        vec!["audit", "--operation", &id, "-o", "json"],
        vec!["audit", "--actor", "token:nobody"],
    ];
    for args in &commands {
        let (here, there) = (local(args), remote("sam", args));
        assert_eq!(
            (here.code, &here.out, &here.err),
            (there.code, &there.out, &there.err),
            "`opsgraph {}` differs:\n--- local\n{}\n--- remote\n{}",
            args.join(" "),
            here.render(),
            there.render()
        );
        assert!(!here.out.is_empty() || here.code != 0, "`{}` printed nothing", args.join(" "));
    }

    // The narrowed list names what it was asked for, and only that.
    let listed = |args: &[&str]| -> Vec<String> {
        let run = local(&[&["get", "operations", "-o", "json"], args].concat());
        assert_eq!(run.code, 0, "{}", run.render());
        let list: Vec<serde_json::Value> = serde_json::from_str(&run.out).unwrap();
        list.iter().map(|o| o["id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(listed(&["--state", "failed"]), vec![failed.clone()]);
    assert_eq!(listed(&["--state", "completed"]), vec![id.clone()]);
    assert_eq!(listed(&["--state", "failed", "--environment", "dev"]), vec![failed.clone()]);
    assert_eq!(listed(&["--pack", "hello"]).len(), 2);
    assert!(listed(&["--pack", "nosuch"]).is_empty());
    assert!(listed(&["--environment", "prod"]).is_empty());
    let refused = local(&["get", "operations", "--pack", "Not A Pack"]);
    assert!(refused.code != 0 && refused.err.contains("--pack: `pack` is a pack's"), "{}", refused.render());

    // Tokens (the admin's view of the same store): one renderer for both.
    let (here, there) = (local(&["token", "list"]), remote("ada", &["token", "list"]));
    assert_eq!((here.code, &here.out), (there.code, &there.out), "{}\n{}", here.render(), there.render());
    assert!(here.out.contains("ada") && here.out.contains("platform_admin"), "{}", here.out);

    drop(server);
}

/// A run's output with what differs between two runs of it made alike: operation ids, times,
/// plan hashes and the two resources' names.
fn normal(text: &str, names: [&str; 2]) -> String {
    let text = regex::Regex::new(r"op-[0-9a-z]+").unwrap().replace_all(text, "OP");
    let text = regex::Regex::new(r"\d\d:\d\d:\d\d").unwrap().replace_all(&text, "TIME");
    let text = regex::Regex::new(r"sha256:[0-9a-f]+").unwrap().replace_all(&text, "HASH");
    text.replace(names[0], "NAME").replace(names[1], "NAME")
}

/// `apply --yes` prints the same preview, live view and ending whether this process drives the
/// run or a server does (ids, times, plan hashes and the operation's name normalised).
#[test]
fn apply_prints_the_same_run_locally_and_through_the_server() {
    let api = crate::server::Api::new("");
    let files = crate::support::temp_dir(&[
        ("sam.token", &api.token("sam", &["operator"])),
        ("ada.token", &api.token("ada", &["platform_admin"])),
        ("here.yaml", &crate::server::intent("h31")),
        ("there.yaml", &crate::server::intent("h32")),
    ]);
    let server = Server::start(&api);
    let (here, there) = (files.join("here.yaml").display().to_string(), files.join("there.yaml").display().to_string());
    let data = api.dir.join("data").display().to_string();
    let packs = api.dir.join("hello").display().to_string();
    let local = crate::support::opsgraph(&["--data-dir", &data, "apply", "-f", &here, "--yes", "--packs", &packs]);
    let remote = server.opsgraph(&files.join("sam.token"), &["apply", "-f", &there, "--yes"]);
    let normal = |text: &str| normal(text, ["h31", "h32"]);
    assert_eq!(local.code, 0, "{}", local.render());
    assert!(local.out.contains("waiting for gate approve-hello"), "{}", local.render());
    assert_eq!(
        (remote.code, normal(&remote.out), normal(&remote.err)),
        (local.code, normal(&local.out), normal(&local.err))
    );
    // The remote run was followed by its event stream, not by reading the timeline again and again.
    let admin = std::fs::read_to_string(files.join("ada.token")).unwrap();
    let metrics = crate::server_stream::http(server.addr, "GET", "/metrics", admin.trim(), &[], "").body;
    let route = |r: &str| format!("opsgraph_http_requests_total{{method=\"GET\",route=\"{r}\"");
    assert!(metrics.contains(&format!("{},status=\"200\"}} 1\n", route("/api/v1/events"))), "{metrics}");
    assert!(!metrics.contains(&route("/api/v1/operations/{id}/timeline")), "{metrics}");

    drop(server);
}

/// Following a run through the server shows its sub-operations' entries as following it locally
/// does: the provider the resolution creates runs as a child operation, met on the event stream.
#[test]
fn a_run_with_a_sub_operation_is_followed_the_same_locally_and_through_the_server() {
    follow_a_sub_operation(None);
    // Without a stream slot the follower reads every 200 ms: a child met between two reads is
    // read from where the follower started, its first entries included. Every entry is shown
    // once; the order across the parent and the child is commit order only as far as two reads
    // of two timelines can tell (the stream's is exact), so the lines are compared as a set.
    let limits = opsgraph_server::Limits { event_streams_per_identity: 0, ..Default::default() };
    follow_a_sub_operation(Some(limits));
}

fn follow_a_sub_operation(limits: Option<opsgraph_server::Limits>) {
    let polled = limits.is_some();
    let mut files: Vec<(&str, &str)> = crate::subop::WORLD.to_vec();
    files.push((
        "there.yaml",
        "intent: {target_resource_type: app.thing, action: run, name: app-2, environment: dev}\n",
    ));
    let mut api = crate::server::Api::over(crate::support::temp_dir(&files))
        .config("")
        .packs(&["packs/app", "packs/bucket"])
        .world(&["world"]);
    if let Some(limits) = limits {
        api = api.limits(limits);
    }
    let api = api.build();
    let token = crate::support::temp_dir(&[("sam.token", &api.token("sam", &["operator"]))]);
    let server = Server::start(&api);
    let path = |p: &str| api.dir.join(p).display().to_string();
    // Its own data directory: a bucket one run made would be bound by the other.
    let data = path("data-local");
    let (app, bucket, world) = (path("packs/app"), path("packs/bucket"), path("world"));
    let local = crate::support::opsgraph(&[
        "--data-dir",
        &data,
        "apply",
        "-f",
        &path("intent.yaml"),
        "--yes",
        "--packs",
        &app,
        "--packs",
        &bucket,
        "--inventory",
        &world,
    ]);
    let remote = server.opsgraph(&token.join("sam.token"), &["apply", "-f", &path("there.yaml"), "--yes"]);
    let normal = |text: &str| {
        let text = normal(text, ["app-1", "app-2"]);
        if !polled {
            return text;
        }
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort_unstable();
        lines.join("\n")
    };
    assert_eq!(local.code, 0, "{}", local.render());
    assert!(local.out.contains("make-bucket"), "the child's job is shown: {}", local.render());
    assert_eq!(
        (remote.code, normal(&remote.out), normal(&remote.err)),
        (local.code, normal(&local.out), normal(&local.err))
    );
    drop(server);
}

/// The remedy of a greeting that is not `hello`: run the job again.
const REMEDY: &str = "remedy:
  id: greet-again
  applies_to: [say-hello]
  signature: {failed_evidence: [greeting_written]}
  diagnosis: the greeting written is not hello
  plan_patch:
    reason: say it again
    changes:
      - retry: {job: say-hello}
";

/// One implementation of each command that changes an operation: two operations in the same
/// state, one changed by this process on the data directory and one through `opsgraph serve`,
/// print the same bytes and exit alike (operation ids, times and names normalised) for `gate
/// answer` (the run followed to its end), `diagnose --propose`, the patch's approval, `patch
/// --remedy`, `retry`, `intervene`, `pause` and `cancel`; and `describe resource`, `get jobs` and
/// `logs` of an unknown operation give the same document or error.
#[test]
fn control_commands_print_the_same_bytes_locally_and_through_the_server() {
    let api =
        crate::server::Api::with_files("users: {bob: [sre], sam: [operator]}\n", &[("hello/remedies.yaml", REMEDY)]);
    let bye = |name: &str| format!("{}  parameters: {{word: bye}}\n", crate::server::intent(name));
    let files = crate::support::temp_dir(&[
        ("sam.token", &api.token("sam", &["operator"])),
        ("bob.token", &api.token("bob", &["sre"])),
        ("here.yaml", &bye("h41")),
        ("there.yaml", &bye("h42")),
    ]);
    let server = Server::start(&api);
    let remote = |who: &str, args: &[&str]| server.opsgraph(&files.join(&format!("{who}.token")), args);
    let data = api.dir.join("data").display().to_string();
    let packs = api.dir.join("hello").display().to_string();
    let local = |args: &[&str]| {
        // The commands that change operations load the packs here (a server has its own).
        let world: &[&str] =
            if ["describe", "get", "logs", "cancel", "pause"].contains(&args[0]) { &[] } else { &["--packs", &packs] };
        crate::support::opsgraph(&[&["--data-dir", &data], args, world].concat())
    };
    let (here, there) = (files.join("here.yaml").display().to_string(), files.join("there.yaml").display().to_string());
    let created = |file: &str| {
        let applied = remote("sam", &["apply", "-f", file, "--yes"]);
        assert_eq!(applied.code, 0, "{}", applied.render());
        applied.operation_id()
    };
    // Two operations waiting at the same gate.
    let (a, b) = (created(&here), created(&there));
    let normal = |text: &str| {
        let text = regex::Regex::new(r"op-[0-9a-z]+").unwrap().replace_all(text, "OP");
        let text = regex::Regex::new(r"\d\d:\d\d:\d\d").unwrap().replace_all(&text, "TIME");
        let text = regex::Regex::new(r"\d{4}-\d\d-\d\dTTIME\.\d+Z").unwrap().replace_all(&text, "AT");
        let text = regex::Regex::new(r"sha256:[0-9a-f]+").unwrap().replace_all(&text, "HASH");
        // Both resources' histories share the store's one sequence.
        let text = regex::Regex::new(r#"("?seq"?:) \d+"#).unwrap().replace_all(&text, "$1 N");
        text.replace("h41", "NAME").replace("h42", "NAME")
    };
    // `{op}` is the operation each side acts on, `{name}` its name.
    let same = |who: &str, args: &[&str]| {
        let with = |id: &str, name: &str| {
            args.iter().map(|x| x.replace("{op}", id).replace("{name}", name)).collect::<Vec<_>>()
        };
        let (mine, theirs) = (with(&a, "h41"), with(&b, "h42"));
        let here = local(&mine.iter().map(String::as_str).collect::<Vec<_>>());
        let there = remote(who, &theirs.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            (here.code, normal(&here.out), normal(&here.err)),
            (there.code, normal(&there.out), normal(&there.err)),
            "`opsgraph {}` differs:\n--- local\n{}\n--- remote\n{}",
            args.join(" "),
            here.render(),
            there.render()
        );
        here
    };

    // The answer, then the run followed to its end: it fails its evidence.
    let answered =
        same("bob", &["gate", "answer", "approve-hello", "--operation", "{op}", "--option", "approve", "--as", "bob"]);
    assert_eq!(answered.code, 1, "{}", answered.render());
    assert!(
        answered.out.contains("gate approve-hello of op-") && answered.out.contains("(by user:bob)"),
        "{}",
        answered.out
    );
    assert!(answered.out.contains("Greet              FAILED    say-hello"), "{}", answered.out);
    assert!(answered.out.contains(": failed"), "{}", answered.out);
    // The analyzer's patch, proposed by the analyzer: it waits for a person.
    let proposed = same("bob", &["diagnose", "{op}", "--propose"]);
    assert!(proposed.out.contains("remedy: greet-again"), "{}", proposed.out);
    assert!(proposed.out.contains("waiting for approval at patch-p1"), "{}", proposed.out);
    // (Documents hold seqs and durations of their own: read from one side.)
    let gates = remote("bob", &["describe", "operation", &b, "-o", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&gates.out).unwrap();
    let review = doc["gates"].as_array().unwrap().iter().find(|g| g["id"] == "patch-p1").unwrap().clone();
    assert_eq!((&review["kind"], &review["patch"]), (&serde_json::json!("patch_review"), &serde_json::json!("p1")));
    assert_eq!(doc["waiting_at"], serde_json::Value::Null, "a failed operation waits at no gate: {doc}");
    // Approved by a person: applied, and the run followed again.
    let approved =
        same("bob", &["gate", "answer", "patch-p1", "--operation", "{op}", "--option", "approve patch", "--as", "bob"]);
    assert!(approved.out.contains("patch p1 applied: plan revision 2"), "{}", approved.out);
    // A person's patch of the pack's remedy, a retry, a manual fix that its evidence refutes.
    same("bob", &["patch", "{op}", "--remedy", "greet-again", "--as", "bob"]);
    same("bob", &["gate", "answer", "patch-p2", "--operation", "{op}", "--option", "reject patch", "--as", "bob"]);
    let retried = same("bob", &["retry", "{op}"]);
    assert_eq!(retried.code, 1, "{}", retried.render());
    let fixed = same(
        "bob",
        &[
            "intervene",
            "{op}",
            "--job",
            "say-hello",
            "--note",
            "wrote it",
            "--verify",
            "greeting_written",
            "--as",
            "bob",
        ],
    );
    assert!(fixed.out.contains("still failed"), "{}", fixed.render());
    for args in [
        vec!["describe", "resource", "hello.app/{name}"],
        vec!["get", "jobs", "op-nothing"],
        vec!["logs", "op-nothing"],
        vec!["describe", "operation", "op-nothing"],
        vec!["describe", "resource", "nothing/here"],
        vec!["cancel", "{op}"],
        vec!["get", "jobs", "{op}"],
    ] {
        same("bob", &args);
    }
    let unknown = same("bob", &["get", "jobs", "op-nothing"]);
    assert_eq!((unknown.code, unknown.err.as_str()), (1, "error: no operation `op-nothing`\n"));
    let resource = same("bob", &["describe", "resource", "hello.app/{name}"]);
    assert!(resource.out.starts_with("id: hello.app/") && resource.out.contains("operations:"), "{}", resource.out);
    let events: Vec<String> = {
        let described = remote("bob", &["describe", "operation", &b, "-o", "json"]);
        let doc: serde_json::Value = serde_json::from_str(&described.out).unwrap();
        doc["timeline"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap().to_string()).collect()
    };
    assert!(events.contains(&"patch_rejected".to_string()) || events.iter().any(|e| e == "reject_patch"), "{events:?}");

    drop(server);
}

/// The app pack with one job, `hang`, on `host/h1` over SSH: it writes its shell's pid to
/// `job.pid` in the sshd's directory, then runs `rest` (the rest of its `run:` after the command's
/// first part, closing quote included).
fn hang_world(sshd: &Sshd, rest: &str) -> World {
    let jobs = format!(
        "job:\n  id: hang\n  scope: {{target: hosts}}\n  run: {{executor: ssh, command: 'echo $$ > {}; {rest}}}\n",
        sshd.dir().join("job.pid").display()
    );
    let templates = "plan_template:\n  id: app.run\n  action: run\n  scopes: {hosts: {resource_type: host, from: targets.hosts}}\n  stages: [{id: all, name: All, jobs: [hang]}]\n  jobs: [hang]\n";
    let mut files: Vec<(&str, &str)> =
        PACK.iter().filter(|(p, _)| !p.ends_with("jobs.yaml") && !p.ends_with("templates.yaml")).copied().collect();
    files.extend([("packs/app/jobs.yaml", jobs.as_str()), ("packs/app/templates.yaml", templates)]);
    let host = host_h1(sshd);
    files.push(("world/host.yaml", &host));
    World::replacing(&files)
}
/// A job over SSH that times out leaves nothing running on the host, and its failure says the
/// remote process group was stopped (the fleet's hung `apt-get update` kept its lock otherwise).
#[test]
fn an_ssh_job_that_times_out_leaves_no_process_on_the_host() {
    let Some(sshd) = Sshd::start_or_skip("an_ssh_job_that_times_out_leaves_no_process_on_the_host") else { return };
    let pid_file = sshd.dir().join("job.pid");
    let w = hang_world(&sshd, "exec sleep 600', timeout: 2s");
    let (mut rt, _, id) = w.created();
    let state = rt.drive(&id, &mut |_| {}).unwrap();
    assert!(matches!(state, OperationState::Failed { .. }), "{state:?}\n{:#?}", events(&rt, &id));
    let failed = events(&rt, &id).into_iter().find(|e| e.starts_with("job_failed")).expect("a job_failed event");
    let failed = regex::Regex::new(r"group \d+").unwrap().replace(&failed, "group N").into_owned();
    assert_eq!(
        failed,
        "job_failed hang@h1: timed out after 2s (the remote process group N on 127.0.0.1 was terminated (SIGTERM))"
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])))
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while alive() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!alive(), "the job's `sleep 600` (pid {pid}) still runs on the host");
}

/// A driver killed while its job runs over SSH leaves the remote command running (`sshd` only
/// closes the session's pipes when the client dies). The driver that takes over stops it on the
/// host before it checks the job's evidence, found by the mark recorded with the attempt: it never
/// checks, nor runs again, beside a job that is still running.
#[test]
fn a_driver_that_takes_over_stops_what_a_dead_one_left_running_on_the_host() {
    let Some(sshd) = Sshd::start_or_skip("a_driver_that_takes_over_stops_what_a_dead_one_left_running_on_the_host")
    else {
        return;
    };
    let pid_file = sshd.dir().join("job.pid");
    // The host is this machine: without the job's variables the `sleep` is invisible to the local
    // stop of leftovers (which finds them by `OPSGRAPH_OPERATION_ID`), as on a remote host.
    let w = hang_world(&sshd, "exec env -u OPSGRAPH_OPERATION_ID -u OPSGRAPH_JOB_ID sleep 600'");
    let (rt, _, id) = w.created();
    drop(rt);
    let [data, packs, world] =
        [w.dir.join("data"), w.dir.join("packs"), w.dir.join("world")].map(|p| p.display().to_string());
    let args = ["--data-dir", &data, "resume", &id, "--packs", &packs, "--inventory", &world];
    let mut driver = std::process::Command::new(env!("CARGO_BIN_EXE_opsgraph"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file).ok().filter(|p| p.ends_with('\n')) {
            break pid.trim().to_owned();
        }
        assert!(std::time::Instant::now() < until, "the job never started on the host\n{}", sshd.log());
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    driver.kill().unwrap(); // SIGKILL: no cancel, no remote stop
    driver.wait().unwrap();
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])))
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(alive(), "the premise: the remote `sleep 600` outlives its dead driver's client");

    let resumed = crate::support::opsgraph(&args);
    let timeline = events(&w.runtime(), &id);
    let stopped: Vec<String> = timeline
        .iter()
        .filter(|e| e.starts_with("job_remote_leftovers"))
        .map(|e| regex::Regex::new(r"group \d+").unwrap().replace(e, "group N").into_owned())
        .collect();
    assert_eq!(
        stopped,
        ["job_remote_leftovers hang@h1: the remote process group N on 127.0.0.1 was terminated (SIGTERM)"],
        "{}\n{timeline:#?}",
        resumed.render()
    );
    assert!(!alive(), "the job's `sleep 600` (pid {pid}) still runs on the host");
    // Then its outcome is decided as after any crash: no evidence, no key: a person decides.
    assert!(
        timeline.iter().any(|e| e.contains("hang@h1: outcome unknown after a restart and it declares no evidence")),
        "{timeline:#?}"
    );
    assert!(!timeline.iter().any(|e| e.starts_with("job_leftovers_stopped")), "{timeline:#?}");
    // The stop is recorded before the job's check (the operation's own transition, which names
    // the same reason, comes first in its commit).
    let stop_at = timeline.iter().position(|e| e.starts_with("job_remote_leftovers")).unwrap();
    let check_at = timeline.iter().position(|e| e.starts_with("job_outcome_unknown hang@h1")).unwrap();
    assert!(stop_at < check_at, "{timeline:#?}");
}
