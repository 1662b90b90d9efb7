//! Two `opsgraph serve` replicas on one PostgreSQL database (created for the test, dropped after):
//! a 200-job operation, `kill -9` of the replica driving it in the middle of the run; the other
//! adopts it once the lease expires and completes it. A ledger outside the database (each job
//! appends a line) shows that no non-idempotent job ran twice. Skipped with a `SKIPPED` line when
//! PostgreSQL is unreachable, except under `CI=true`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opsgraph_core::model::OperationState;
use opsgraph_store::testing::TestDb;

use crate::serve::Process;
use crate::support::temp_dir;

const JOBS: usize = 200;
const TTL_MS: u64 = 2_000;

/// A pack of `JOBS` independent jobs; the even ones are idempotent (a key, retried), the odd ones
/// are not: after a crash those may only be recovered by their evidence.
fn pack() -> Vec<(String, String)> {
    let ids: Vec<String> = (0..JOBS).map(|i| format!("j{i:03}")).collect();
    let mut jobs = String::new();
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            jobs.push_str("---\n");
        }
        let controls = if i % 2 == 0 {
            format!(", controls: {{idempotency: {{key: '{id}:{{operation_id}}'}}, retry_policy: {{max_attempts: 3}}}}")
        } else {
            String::new()
        };
        jobs.push_str(&format!(
            "job: {{id: {id}, outputs: {{evidence: [done]}}, run: {{script: scripts/step.sh}}{controls}}}\n"
        ));
    }
    vec![
        (
            "many/pack.yaml".into(),
            "scenario_pack:\n  id: many\n  version: 1.0.0\n  resource_types: [many.thing]\n  actions: [run]\n  plan_templates: [{id: many.run}]\n".into(),
        ),
        (
            "many/templates.yaml".into(),
            format!(
                "plan_template:\n  id: many.run\n  action: run\n  parameters:\n    ledger: {{type: string, required: true}}\n    marks: {{type: string, required: true}}\n  stages:\n    - {{id: all, name: All, jobs: [{0}]}}\n  jobs: [{0}]\n",
                ids.join(", ")
            ),
        ),
        ("many/jobs.yaml".into(), jobs),
        (
            "many/evidence.yaml".into(),
            "evidence:\n  - {id: done, source: command, command: 'test -f \"$OPSGRAPH_PARAM_MARKS/$OPSGRAPH_OPERATION_ID.$OPSGRAPH_JOB_ID\"'}\n".into(),
        ),
        (
            "many/scripts/step.sh".into(),
            "printf '%s %s\\n' \"$OPSGRAPH_OPERATION_ID\" \"$OPSGRAPH_JOB_ID\" >> \"$OPSGRAPH_PARAM_LEDGER\"\nsleep 0.05\ntouch \"$OPSGRAPH_PARAM_MARKS/$OPSGRAPH_OPERATION_ID.$OPSGRAPH_JOB_ID\"\n".into(),
        ),
    ]
}

/// One replica: `opsgraph serve` as a process of its own on the shared database.
pub(crate) fn replica(id: &str, data: &Path, database: &str, pack: &Path, token_file: &Path, log: &Path) -> Process {
    Process::start(
        std::process::Command::new(env!("CARGO_BIN_EXE_opsgraph"))
            .args(["--data-dir", &data.display().to_string(), "--database", database])
            .args(["serve", "--listen", "127.0.0.1:0", "--packs", &pack.display().to_string()])
            .env("OPSGRAPH_REPLICA_ID", id)
            .env("OPSGRAPH_LEASE_TTL_MS", TTL_MS.to_string())
            .env("OPSGRAPH_ADMIN_TOKEN_FILE", token_file)
            .env("OPSGRAPH_MASTER_KEY", "a".repeat(64))
            .env("OPSGRAPH_LOG", "json"),
        log,
    )
}

#[test]
fn a_replica_killed_mid_run_is_replaced_within_the_ttl_and_nothing_runs_twice() {
    let Some(db) = opsgraph_store_pg::test_db(
        "replicas::a_replica_killed_mid_run_is_replaced_within_the_ttl_and_nothing_runs_twice",
    ) else {
        return;
    };
    let files = pack();
    let files: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let dir = temp_dir(&files);
    let ledger = dir.join("ledger");
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let token = format!("og_{}", "r".repeat(43));
    let token_file = dir.join("admin.token");
    std::fs::write(&token_file, &token).unwrap();
    let pack = dir.join("many");
    let mut replicas: BTreeMap<String, Process> = BTreeMap::new();
    for id in ["replica-a", "replica-b"] {
        let data = dir.join(&format!("data-{id}"));
        let r = replica(id, &data, db.url(), &pack, &token_file, &dir.join(&format!("{id}.log")));
        replicas.insert(id.to_string(), r);
    }

    let intent = format!(
        "intent:\n  target_resource_type: many.thing\n  action: run\n  name: m1\n  parameters: {{ledger: '{}', marks: '{}'}}\n",
        ledger.display(),
        marks.display()
    );
    let (status, created) =
        crate::server::http(replicas["replica-a"].addr, "POST", "/api/v1/operations", &token, &intent);
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();

    // Mid-run: a third of the jobs have run. Kill the replica that holds the lease.
    let store = db.store();
    let lines = || std::fs::read_to_string(&ledger).unwrap_or_default().lines().count();
    let started = Instant::now();
    while lines() < JOBS / 3 {
        assert!(started.elapsed() < Duration::from_secs(60), "the operation does not run: {:?}", store.jobs(&id));
        std::thread::sleep(Duration::from_millis(5));
    }
    let first = store.lease(&id).unwrap().expect("the driving replica holds a lease");
    let mut victim = replicas.remove(&first.holder).unwrap();
    victim.child.kill().unwrap(); // SIGKILL
    victim.child.wait().unwrap();
    let killed = Instant::now();
    let ran_before = lines();
    let survivor = if first.holder == "replica-a" { "replica-b" } else { "replica-a" };

    // The survivor adopts it within the TTL (plus the scanner's half-TTL period) and completes it.
    let takeover = loop {
        let l = store.lease(&id).unwrap().unwrap();
        if l.holder == survivor {
            assert!(l.token > first.token, "a takeover has a greater token: {l:?} after {first:?}");
            break killed.elapsed();
        }
        assert!(killed.elapsed() < Duration::from_secs(30), "nobody adopted the operation: {l:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let limit = Duration::from_millis(TTL_MS + TTL_MS / 2 + 1_500);
    assert!(takeover < limit, "takeover after {takeover:?}, more than {limit:?}");
    let wait_stop = || loop {
        let op = store.operation(&id).unwrap().unwrap();
        if !matches!(op.state, OperationState::Running) {
            break op.state;
        }
        assert!(killed.elapsed() < Duration::from_secs(60), "not done a minute after the kill");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut state = wait_stop();
    let mut unknown: Vec<String> = Vec::new();
    if let OperationState::Failed { reason } = &state {
        // The one end other than completion the protocol allows: a non-idempotent job whose
        // attempt the dead replica had recorded. Its process died with the replica (its
        // guardian), or never started; either way it never finished (no mark), so its evidence
        // fails, its outcome is unknown and a person decides. It ran at most once; a person's
        // retry (on the survivor) checks its evidence again, then runs it and completes the run.
        assert!(reason.contains("outcome unknown"), "{reason}");
        let failed: Vec<String> = store
            .jobs(&id)
            .unwrap()
            .into_iter()
            .filter(|j| j.state == opsgraph_store::JobState::Failed)
            .map(|j| j.id)
            .collect();
        let text = std::fs::read_to_string(&ledger).unwrap();
        for job in &failed {
            let ran = text.lines().filter(|l| l.ends_with(&format!(" {job}"))).count();
            assert!(ran <= 1, "{job} ran {ran} times before a person decided: {reason}");
            assert!(!marks.join(format!("{id}.{job}")).exists(), "{job} finished, yet its outcome is unknown");
        }
        let body = serde_json::json!({"jobs": failed}).to_string();
        let (status, answer) = crate::server::http(
            replicas[survivor].addr,
            "POST",
            &format!("/api/v1/operations/{id}/retry"),
            &token,
            &body,
        );
        assert_eq!(status, 200, "{answer}");
        unknown = failed;
        state = wait_stop();
    }
    let done = killed.elapsed();
    assert_eq!(
        state,
        OperationState::Completed,
        "{:#?}",
        store.timeline(&id).unwrap().iter().rev().take(5).collect::<Vec<_>>()
    );

    // Every job is done; the ledger holds no second run of a non-idempotent job.
    let jobs = store.jobs(&id).unwrap();
    assert_eq!(jobs.len(), JOBS);
    assert!(jobs.iter().all(|j| j.state.is_done()), "{jobs:?}");
    let text = std::fs::read_to_string(&ledger).unwrap();
    let mut runs: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        let (op, job) = line.split_once(' ').unwrap();
        assert_eq!(op, id);
        *runs.entry(job.to_string()).or_default() += 1;
    }
    // A job a person chose to run again after its outcome was unknown may show twice (its first
    // run stopped with the replica), never more.
    let twice: Vec<_> = runs
        .iter()
        .filter(|(job, n)| {
            let limit = if unknown.contains(job) { 2 } else { 1 };
            **n > limit && job[1..].parse::<usize>().unwrap() % 2 == 1
        })
        .collect();
    assert!(twice.is_empty(), "non-idempotent jobs ran twice: {twice:?}");
    let recovered = jobs.iter().filter(|j| j.state == opsgraph_store::JobState::Recovered).count();

    // The timeline says who took over; seqs only grow; no transition lost.
    let timeline = store.timeline(&id).unwrap();
    let adopted: Vec<_> = timeline.iter().filter(|e| e.event == "lease_adopted").collect();
    assert_eq!(adopted.len(), 1, "{adopted:#?}");
    assert!(adopted[0].reason.starts_with(&format!("{survivor} took the operation over from {}", first.holder)));
    assert!(timeline.windows(2).all(|w| w[0].seq < w[1].seq));
    let transitions: Vec<_> = timeline.iter().filter(|e| e.from.is_some()).collect();
    for pair in transitions.windows(2) {
        assert_eq!(pair[0].to, pair[1].from, "{:?} then {:?}", pair[0].event, pair[1].event);
    }
    println!(
        "replicas: {} killed after {ran_before} of {JOBS} job runs; {survivor} took over after {takeover:?} (TTL {TTL_MS} ms) \
         and completed after {done:?}{}; {recovered} recovered by evidence; ledger {} runs, 0 non-idempotent repeats nobody asked for",
        first.holder,
        if unknown.is_empty() {
            String::new()
        } else {
            format!(" (after a person's retry of {}, whose attempts died with the replica)", unknown.join(", "))
        },
        text.lines().count()
    );
}

/// In-process, on each backend: a driver whose lease another holder took over (it expired) is
/// refused at its next commit and stops; nothing it did after the takeover is in the store.
/// A test database on `backend`; `None` when it is PostgreSQL and that is skipped.
/// A runtime on `db` with `concurrency`, the operation it created (by `user:alice`) from `dir`'s
/// `intent.yaml` and its pack directory `pack` (the run directory `dir/data`), and the packs.
fn created(
    db: &TestDb,
    dir: &Path,
    pack: &str,
    concurrency: usize,
) -> (opsgraph_runtime::Runtime, String, Vec<opsgraph_core::pack::Pack>) {
    let loaded = opsgraph::plan_cmd::load_inputs(
        &opsgraph::load::Source::parse(&dir.join("intent.yaml").display().to_string()),
        opsgraph::load::packs(&[opsgraph::load::Source::parse(&dir.join(pack).display().to_string())]),
        &[],
    );
    let plan = opsgraph::plan_cmd::build(&loaded).unwrap();
    let mut rt = opsgraph_runtime::Runtime::new(db.store(), loaded.packs.clone(), vec![], dir.join("data"));
    rt.set_concurrency(concurrency);
    let id = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();
    (rt, id, loaded.packs)
}

fn test_db(backend: opsgraph_store::testing::Backend, name: &str) -> Option<TestDb> {
    match backend {
        opsgraph_store::testing::Backend::Sqlite => Some(opsgraph_store_sqlite::test_db()),
        opsgraph_store::testing::Backend::Postgres => opsgraph_store_pg::test_db(name),
    }
}

fn a_stale_holder_writes_nothing_after_a_takeover(backend: opsgraph_store::testing::Backend) {
    use opsgraph_runtime::lease::{Keeper, LeaseConfig};
    let Some(db) = test_db(backend, &format!("replicas::a_stale_holder_writes_nothing_after_a_takeover ({backend:?})"))
    else {
        return;
    };
    let files = pack();
    let files: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let dir = temp_dir(&files);
    let (ledger, marks) = (dir.join("ledger"), dir.join("marks"));
    std::fs::create_dir_all(&marks).unwrap();
    std::fs::write(
        dir.join("intent.yaml"),
        format!(
            "intent:\n  target_resource_type: many.thing\n  action: run\n  name: m2\n  parameters: {{ledger: '{}', marks: '{}'}}\n",
            ledger.display(),
            marks.display()
        ),
    )
    .unwrap();
    let (mut rt, id, _) = created(&db, dir.path(), "many", 2);
    let url = db.url().to_string();
    let keeper = Keeper::new(
        LeaseConfig { holder: "replica-a".into(), ttl: Duration::from_secs(60) },
        Box::new(move || opsgraph::storage::open(&url, opsgraph::storage::Durability::Full)),
    );
    let driver = {
        let id = id.clone();
        std::thread::spawn(move || rt.drive_leased(&id, &keeper, &mut |_| {}))
    };
    let mut store = db.store();
    let started = Instant::now();
    while store.jobs(&id).unwrap().iter().filter(|j| j.state.is_done()).count() < 6 {
        assert!(started.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    // replica-a stops renewing (its lease is made to expire now) and replica-b takes over.
    let a = store.lease(&id).unwrap().unwrap();
    assert_eq!(a.holder, "replica-a");
    store.renew_lease(&a, -1).unwrap();
    let b = store.acquire_lease(&id, "replica-b", 60_000).unwrap();
    assert!(b.token > a.token);
    let (jobs, timeline) = (store.jobs(&id).unwrap(), store.timeline(&id).unwrap());
    let result = driver.join().unwrap();
    assert!(
        matches!(
            &result,
            Err(opsgraph_runtime::Error::Store(opsgraph_store::Error::Fenced { .. }))
                | Err(opsgraph_runtime::Error::LeaseLost { .. })
        ),
        "{result:?}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(store.jobs(&id).unwrap(), jobs, "the stale holder changed jobs after the takeover");
    assert_eq!(store.timeline(&id).unwrap(), timeline, "the stale holder wrote to the timeline after the takeover");
    assert_eq!(store.lease(&id).unwrap().unwrap().holder, "replica-b", "its release changed nothing");
}

/// In-process, on each backend: a person pauses an operation from another connection while its
/// driver runs in-process no-op jobs (which never make it wait, so on PostgreSQL it never reads
/// the operation row again on its own: its commits that start attempts carry a version guard).
/// The driver stops paused, and no attempt is recorded as started after the pause. On SQLite the
/// pause may be committed by the driver's own connection in its group-commit turn, which `PRAGMA
/// data_version` does not count: the driver used to miss it and run every remaining job.
fn a_pause_from_another_connection_stops_a_driver_that_never_waits(backend: opsgraph_store::testing::Backend) {
    let name = format!("replicas::a_pause_from_another_connection_stops_a_driver_that_never_waits ({backend:?})");
    let Some(db) = test_db(backend, &name) else { return };
    const NOOPS: usize = 3000;
    let ids: Vec<String> = (0..NOOPS).map(|i| format!("n{i:04}")).collect();
    let jobs: Vec<String> = ids.iter().map(|id| format!("job: {{id: {id}, type: noop}}\n")).collect();
    let files = [
        (
            "noops/pack.yaml",
            "scenario_pack:\n  id: noops\n  version: 1.0.0\n  resource_types: [noops.thing]\n  actions: [run]\n  plan_templates: [{id: noops.run}]\n".to_string(),
        ),
        (
            "noops/templates.yaml",
            format!(
                "plan_template:\n  id: noops.run\n  action: run\n  stages:\n    - {{id: all, name: All, jobs: [{0}]}}\n  jobs: [{0}]\n",
                ids.join(", ")
            ),
        ),
        ("noops/jobs.yaml", jobs.join("---\n")),
        ("intent.yaml", "intent:\n  target_resource_type: noops.thing\n  action: run\n  name: n1\n".to_string()),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(a, b)| (*a, b.as_str())).collect();
    let dir = temp_dir(&files);
    let (mut rt, id, packs) = created(&db, dir.path(), "noops", 1);
    let seen = Arc::new(AtomicUsize::new(0));
    let driver = {
        let (id, seen) = (id.clone(), Arc::clone(&seen));
        std::thread::spawn(move || {
            rt.drive(&id, &mut |_| {
                seen.fetch_add(1, Ordering::SeqCst);
            })
        })
    };
    let started = Instant::now();
    while seen.load(Ordering::SeqCst) < 40 {
        assert!(started.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut person = opsgraph_runtime::Runtime::new(db.store(), packs, vec![], dir.join("data"));
    person.pause(&id, "user:bob", "hold on").unwrap();
    let state = driver.join().unwrap().unwrap();
    assert!(matches!(state, OperationState::Paused { .. }), "{state:?}");
    let store = db.store();
    let timeline = store.timeline(&id).unwrap();
    let pause = timeline.iter().position(|e| e.event == "pause").expect("the pause is on the timeline");
    let late: Vec<&str> =
        timeline[pause..].iter().filter(|e| e.event == "job_started").map(|e| e.reason.as_str()).collect();
    assert!(late.is_empty(), "attempts started after the pause: {late:?}");
    let jobs = store.jobs(&id).unwrap();
    assert!(jobs.iter().all(|j| j.state != opsgraph_store::JobState::Running), "an attempt left running");
    let done = jobs.iter().filter(|j| j.state.is_done()).count();
    assert!(done > 0 && done < NOOPS, "paused in the middle: {done} of {NOOPS} done");
}

/// `--database` routes every command to that store: an operation applied on PostgreSQL is listed
/// with the same `--database` and not in the data directory's SQLite file; `sqlite://PATH` is
/// that file.
#[test]
fn the_cli_uses_the_database_it_is_given() {
    use crate::support::opsgraph;
    let Some(db) = opsgraph_store_pg::test_db("replicas::the_cli_uses_the_database_it_is_given") else { return };
    let files = pack();
    let files: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let dir = temp_dir(&files);
    std::fs::create_dir_all(dir.join("marks")).unwrap();
    let intent = dir.join("intent.yaml");
    std::fs::write(
        &intent,
        format!(
            "intent:\n  target_resource_type: many.thing\n  action: run\n  name: cli\n  parameters: {{ledger: '{}', marks: '{}'}}\n",
            dir.join("ledger").display(),
            dir.join("marks").display()
        ),
    )
    .unwrap();
    let data = dir.join("data").display().to_string();
    let (intent, pack) = (intent.display().to_string(), dir.join("many").display().to_string());
    let applied = opsgraph(&[
        "--data-dir",
        &data,
        "--database",
        db.url(),
        "--concurrency",
        "16",
        "apply",
        "-f",
        &intent,
        "--packs",
        &pack,
        "--yes",
        "-o",
        "json",
    ]);
    assert_eq!(applied.code, 0, "{}", applied.render());
    let listed = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["--data-dir", data.as_str()];
        all.extend_from_slice(args);
        all.extend_from_slice(&["get", "operations", "-o", "json"]);
        let run = opsgraph(&all);
        assert_eq!(run.code, 0, "{}", run.render());
        serde_json::from_str(&run.out).unwrap()
    };
    let on_pg = listed(&["--database", db.url()]);
    assert_eq!(on_pg.as_array().unwrap().len(), 1, "{on_pg}");
    assert_eq!(on_pg[0]["state"], "completed");
    // The operation's lease was released when the command stopped driving it.
    let lease = db.store().lease(on_pg[0]["id"].as_str().unwrap()).unwrap().unwrap();
    assert!(lease.expires_in_ms <= 0, "{lease:?}");
    assert_eq!(listed(&[]), serde_json::json!([]), "the data directory's own SQLite store is untouched");
    let file = format!("sqlite://{}", dir.join("data/opsgraph.db").display());
    assert_eq!(listed(&["--database", &file]), serde_json::json!([]));
}

/// Every connection a command opens follows `--database`, the agents' too: a runtime's agent
/// connections see the operation in the store `--database` names, and no SQLite file appears in
/// the data directory (they used to open it whatever `--database` said).
fn local_agents_use_the_database_they_are_given(backend: opsgraph_store::testing::Backend) {
    let Some(db) = test_db(backend, &format!("replicas::local_agents_use_the_database_they_are_given ({backend:?})"))
    else {
        return;
    };
    let dir = temp_dir(&[]);
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let op = opsgraph_store::OperationRecord {
        id: "op-agents".into(),
        parent: None,
        intent: serde_json::json!({}),
        resource: None,
        state: OperationState::DraftIntent,
        plan_revision: "sha256:aa".into(),
        intent_id: None,
        plan_id: "sha256:aa".into(),
        actor: "user:alice".into(),
        created_at: opsgraph_store::now(),
        updated_at: opsgraph_store::now(),
        version: 0,
    };
    db.store()
        .commit(&[opsgraph_store::Write::CreateOperation { op, plan: serde_json::json!({}).to_string().to_string() }])
        .unwrap();
    opsgraph::ops_cmd::use_database(&data, Some(db.url().to_string()));
    let agents = opsgraph::agent_cmd::local_agents(&data);
    let seen = (agents.open)().map(|s| s.operation("op-agents").unwrap().map(|o| o.id));
    opsgraph::ops_cmd::use_database(&data, None);
    assert_eq!(seen.unwrap().as_deref(), Some("op-agents"));
    assert!(!data.join("opsgraph.db").exists(), "the agents opened the data directory's SQLite file");
}

// The lease keeper (`opsgraph_runtime::lease`), on SQLite: renewals come in time, and not at once.

/// A keeper holding as `holder` with `ttl` on `db`, counting the connections it opens.
fn keeper(db: &TestDb, holder: &str, ttl: Duration) -> (opsgraph_runtime::lease::Keeper, Arc<AtomicUsize>) {
    let (open, url, opened) = (db.opener(), db.url().to_string(), Arc::new(AtomicUsize::new(0)));
    let counted = Arc::clone(&opened);
    let config = opsgraph_runtime::lease::LeaseConfig { holder: holder.into(), ttl };
    let keeper = opsgraph_runtime::lease::Keeper::new(
        config,
        Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            open(&url)
        }),
    );
    (keeper, opened)
}

/// A held lease is renewed before it expires, for as long as it is held (three TTLs here):
/// the driver never sees it lost, and another holder is refused all along. The TTL leaves a
/// renewal (due a third of it in) two seconds for its commit: a machine at load 20 once took
/// longer than 600 ms.
#[test]
fn a_held_lease_is_renewed_before_it_expires() {
    let db = opsgraph_store_sqlite::test_db();
    let ttl = Duration::from_millis(3000);
    let (keeper, opened) = keeper(&db, "holder-a", ttl);
    let mut store = db.store();
    let (held, _) = keeper.acquire(&mut *store, "op-renewed").unwrap();
    let until = Instant::now() + ttl * 3;
    while Instant::now() < until {
        assert!(!held.is_lost(), "the lease was not renewed in time");
        let other = store.acquire_lease("op-renewed", "holder-b", 60_000);
        assert!(matches!(other, Err(opsgraph_store::Error::LeaseHeld { .. })), "{other:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let lease = store.lease("op-renewed").unwrap().unwrap();
    assert_eq!((lease.holder.as_str(), lease.token), ("holder-a", held.lease.token));
    assert!(opened.load(Ordering::SeqCst) >= 1, "renewed on a connection of its own");
    keeper.release(&mut *store, &held);
}

/// A lease is taken with its whole TTL: the keeper renews it first a third of the TTL later,
/// so a drive shorter than that opens no connection and commits nothing for its lease.
#[test]
fn the_first_renewal_waits_a_third_of_the_ttl() {
    let db = opsgraph_store_sqlite::test_db();
    let (keeper, opened) = keeper(&db, "holder-a", Duration::from_secs(60));
    let mut store = db.store();
    let (held, _) = keeper.acquire(&mut *store, "op-short").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(opened.load(Ordering::SeqCst), 0, "no renewal connection yet");
    assert!(!held.is_lost());
    keeper.release(&mut *store, &held);
}

/// One `#[test]` per backend for each `fn name(backend)` listed: `mod sqlite` and `mod postgres`
/// with the same test names, as `opsgraph_store::conformance!` does for the store's own tests.
macro_rules! on_each_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(opsgraph_store::testing::Backend::Sqlite);
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    super::$name(opsgraph_store::testing::Backend::Postgres);
                }
            )*
        }
    };
}

on_each_backend!(
    a_stale_holder_writes_nothing_after_a_takeover,
    local_agents_use_the_database_they_are_given,
    a_pause_from_another_connection_stops_a_driver_that_never_waits,
);
