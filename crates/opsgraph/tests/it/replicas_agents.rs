//! Remote agents over server replicas: two `opsgraph serve` replicas on one PostgreSQL database,
//! an operation of 200 agent-served jobs driven by one of them, and four `opsgraph agent`s that
//! reach only the other. Every claim, log line and report goes through the replica that does not
//! drive: the driver learns of each report from the store. Every job runs once (a ledger outside
//! the database), every task is claimed once and reported, and the operation completes. Skipped
//! with a `SKIPPED` line when PostgreSQL is unreachable, except under `CI=true`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use opsgraph_store::Store;

use crate::agent::{intent, ledger, nodes, pack, STEP};
use crate::serve::Process;
use crate::support::temp_dir;

const NODES: [&str; 4] = ["r0", "r1", "r2", "r3"];
const PER_NODE: usize = 50;

/// Agent processes, killed on drop.
struct Agents(Vec<Child>);

impl Drop for Agents {
    fn drop(&mut self) {
        for a in &mut self.0 {
            let _ = a.kill();
            let _ = a.wait();
        }
    }
}

#[test]
fn agents_reaching_only_the_replica_that_does_not_drive_complete_its_operation() {
    let Some(db) = opsgraph_store_pg::test_db(
        "replicas_agents::agents_reaching_only_the_replica_that_does_not_drive_complete_its_operation",
    ) else {
        return;
    };
    let mut files = pack(PER_NODE, STEP, "");
    files.push(("inventory/nodes.yaml".into(), nodes(&NODES, "pool")));
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let dir = temp_dir(&refs);
    let (admin, agent_token) = crate::support::admin_and_agent_tokens(&mut *db.store(), "pool");
    let token_file = dir.join("agent.token");
    std::fs::write(&token_file, &agent_token).unwrap();
    let replica = |id: &str| {
        Process::start(
            Command::new(env!("CARGO_BIN_EXE_opsgraph"))
                .args(["--data-dir", &dir.join(&format!("data-{id}")).display().to_string()])
                .args(["--database", db.url(), "--concurrency", "16", "serve", "--listen", "127.0.0.1:0"])
                .args(["--packs", &dir.join("packs").display().to_string()])
                .args(["--inventory", &dir.join("inventory").display().to_string()])
                .args(["--agent-lease", "10s", "--agent-claim-timeout", "60s"])
                .env("OPSGRAPH_REPLICA_ID", id)
                .env("OPSGRAPH_MASTER_KEY", "b".repeat(64)),
            &dir.join(&format!("{id}.log")),
        )
    };
    let replicas = [("agents-a", replica("agents-a")), ("agents-b", replica("agents-b"))];

    // Created on one replica; the agents start once it is known which one drives.
    let ledger_path = dir.join("ledger");
    let (status, created) =
        crate::server::http(replicas[0].1.addr, "POST", "/api/v1/operations", &admin, &intent(&NODES, &ledger_path));
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let store = db.store();
    let started = Instant::now();
    let driver = loop {
        if let Some(lease) = store.lease(&id).unwrap() {
            break lease.holder;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "nobody drives {id}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let (other, via) = replicas.iter().find(|(name, _)| *name != driver).expect("two replicas");
    let url = format!("http://{}", via.addr);
    let _agents = Agents(
        (0..4)
            .map(|n| {
                let log = std::fs::File::create(dir.join(&format!("agent-{n}.log"))).unwrap();
                Command::new(env!("CARGO_BIN_EXE_opsgraph"))
                    .args(["--server", &url, "--token-file", &token_file.display().to_string()])
                    .args(["agent", "--work-dir", &dir.join(&format!("agent-{n}")).display().to_string()])
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );

    let (state, detail) =
        crate::serve::wait_terminal(&*store, &id, Duration::from_secs(240), Duration::from_millis(100));
    let logs = || {
        ["agents-a.log", "agents-b.log", "agent-0.log"]
            .map(|f| format!("{f}:\n{}", std::fs::read_to_string(dir.join(f)).unwrap_or_default()))
            .join("\n---\n")
    };
    assert_eq!(state, "completed", "{detail}\n{}", logs());
    // Driven all along by the replica the agents never reached.
    let timeline = store.timeline(&id).unwrap();
    assert!(!timeline.iter().any(|e| e.event == "lease_adopted"), "the operation changed hands: {}", logs());
    assert_ne!(driver, *other);

    // Every job ran once; every task was claimed once and reported.
    let jobs = NODES.len() * PER_NODE;
    let runs = ledger(&ledger_path);
    assert_eq!(runs.len(), jobs);
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "run more than once: {twice:?}");
    let tasks = store.agent_tasks(&id).unwrap();
    assert_eq!(tasks.len(), jobs);
    assert!(tasks.iter().all(|t| t.claims == 1 && t.state == opsgraph_store::AgentTaskState::Reported), "{tasks:?}");
    eprintln!("{jobs} agent jobs driven by {driver}, claimed and reported through {other}: {:?}", started.elapsed());
}
