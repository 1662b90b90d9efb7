//! Runtime benchmarks (docs/benchmarks.md):
//!
//!     cargo run --release -p opsgraph-runtime --example bench [-- MODE [N] [concurrency=C]]
//!
//! MODE is `chain` (the default; a bare number means `chain N`), `wide`, `noop`, `commit`, `scale` or `all`. Every
//! mode measures its floor and the thing measured interleaved in one run, and prints medians.
//! `drive N` only creates and drives the chain of N once (for instruction counts: `valgrind
//! --tool=callgrind bench drive 400` against `drive 1`, beside `opsgraph apply` of the same chain);
//! `drive N shape=wide` the N independent jobs of `wide`, and `ceiling N` only `wide`'s spawn
//! ceiling, once each (for `perf stat`, `strace -f -c` of one side).
//!
//! - `chain` (N = 200): the spawn floor (N x `/bin/true` exec'd and waited for), the executor
//!   floor (the same through `LocalExecutor`), the commit floor (N single-row WAL FULL
//!   transactions through the store), and a chain of N no-op jobs (`command: [/bin/true]`, no
//!   evidence) driven durably by the runtime. Orchestration overhead per job is
//!   (chain - spawn floor) / N.
//! - `wide` (N = 2,000): N independent no-op jobs driven by the runtime with C jobs at once
//!   (default 8), against the parallel spawn ceiling: N x `/bin/true` from C plain threads.
//! - `noop` (N = 10,000): N independent jobs with nothing to run (no `run:`), driven durably: the
//!   in-process no-op job, against the goal of 10,000 durable jobs per second.
//! - `commit` (N = 200): the store's commit of one transition (operation row update + timeline
//!   row) against the same rows committed by rusqlite directly, same schema and pragmas.
//! - `scale` (N = 500 jobs per operation, `ops=4`): SQLite against PostgreSQL
//!   (`OPSGRAPH_TEST_PG`, a database created per run), one replica against two: transitions per
//!   second (one writer), then `ops` operations of N in-process no-op jobs driven under leases by
//!   one or two replicas (each replica a keeper, a holder id and a thread per operation it wins;
//!   in one process, so on one machine it measures coordination, not added capacity). With
//!   `jobs=process` the jobs run `/bin/true` instead; with `only=postgres` (or `only=sqlite`)
//!   one backend alone (for profiles and counts of that backend's process).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use opsgraph_core::model::*;
use opsgraph_core::pack::Pack;
use opsgraph_core::plan::{Input, Inventory};
use opsgraph_runtime::Runtime;
use opsgraph_store_sqlite::{Durability, SqliteStore};

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    // Zero when nothing was measured (a backend left out by `only=`).
    xs.get(xs.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn chain_pack(n: usize, chained: bool) -> Pack {
    let jobs: Vec<Job> = (0..n)
        .map(|k| Job {
            id: format!("j{k}"),
            title: None,
            description: None,
            type_: JobType::Noop,
            scope: None,
            inputs: Inputs {
                parameters: Attributes::new(),
                requires: Requires {
                    capabilities: vec![],
                    artifacts: if k == 0 { vec![] } else { vec![format!("a{}", k - 1)] },
                },
            },
            outputs: Outputs { provides: Provides::default(), artifacts: vec![], evidence: vec![] },
            controls: Controls::default(),
            run: Some(Run::local(vec!["/bin/true".into()])),
            after: if k == 0 || !chained { vec![] } else { vec![format!("j{}", k - 1)] },
            cost: None,
        })
        .map(|mut j| {
            j.inputs.requires.artifacts.clear();
            j
        })
        .collect();
    Pack::one_stage("/nonexistent", "chain", "chain.thing", BTreeMap::new(), jobs)
}

fn spawn_floor(n: usize) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        std::process::Command::new("/bin/true").output().unwrap();
    }
    start.elapsed()
}

fn commit_floor(n: usize, dir: &std::path::Path) -> Duration {
    let conn = rusqlite_free_floor(dir);
    let start = Instant::now();
    for i in 0..n {
        conn(i);
    }
    let took = start.elapsed();
    drop(conn);
    remove_db(&floor_path(dir));
    took
}

/// The commit floor's database: one per process, so that two benches at once on a shared machine
/// do not remove (and corrupt) each other's.
fn floor_path(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join(format!("floor-{}.db", std::process::id()))
}

fn remove_db(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// One `UPDATE` + one `INSERT` per transaction, as a transition costs, through the store itself.
fn rusqlite_free_floor(dir: &std::path::Path) -> impl Fn(usize) {
    use opsgraph_store::{Store, Write};
    let path = floor_path(dir);
    remove_db(&path);
    let store = std::cell::RefCell::new(SqliteStore::open(&path, Durability::Full).unwrap());
    move |i| {
        let entry = opsgraph_store::TimelineEntry {
            seq: 0,
            operation: "op".into(),
            at: opsgraph_store::now(),
            actor: "bench".into(),
            event: "e".into(),
            from: None,
            to: None,
            reason: format!("{i}"),
            data: serde_json::Value::Null,
        };
        store.borrow_mut().commit(&[Write::Timeline(entry)]).unwrap();
    }
}

/// N x `LocalExecutor` running `/bin/true` the way the runtime runs it (process group, pipes).
fn executor_floor(n: usize) -> Duration {
    use opsgraph_exec::{Cancel, Executor, LocalExecutor, Spec};
    let spec = Spec::argv(["/bin/true"]);
    let cancel = Cancel::new();
    let start = Instant::now();
    for _ in 0..n {
        assert!(LocalExecutor.run(&spec, &cancel).outcome.is_success());
    }
    start.elapsed()
}

/// N x `/bin/true` from `threads` plain threads: the machine's parallel spawn ceiling.
fn spawn_ceiling(n: usize, threads: usize) -> Duration {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    std::process::Command::new("/bin/true").output().unwrap();
                }
            });
        }
    });
    start.elapsed()
}

/// Creates and drives an operation of N no-op jobs, chained or independent.
fn drive(n: usize, chained: bool, concurrency: usize, dir: &std::path::Path) -> Duration {
    drive_pack(chain_pack(n, chained), concurrency, dir)
}

/// N independent jobs with nothing to run: the runtime records each attempt and its result
/// durably, and no process starts (the in-process no-op job).
fn noop_pack(n: usize) -> Pack {
    let mut pack = chain_pack(n, false);
    for job in pack.jobs.values_mut() {
        job.run = None;
    }
    pack
}

/// The plan of `pack`'s one template (`chain.thing`, `run`), on an empty inventory.
fn chain_plan(pack: &Pack) -> opsgraph_core::plan::Plan {
    let intent = Intent { target_resource_type: "chain.thing".into(), action: "run".into(), ..Default::default() };
    let inventory = Inventory::new(&[]);
    opsgraph_core::plan::build(&Input {
        intent: &intent,
        packs: std::slice::from_ref(pack),
        inventory: &inventory,
        providers: &[],
        policy: &CapabilityPolicy::default(),
        operations: &Default::default(),
        recorded: None,
        roles: &[],
    })
    .expect("chain plan")
}

/// Creates and drives an operation of `pack`'s one template.
fn drive_pack(pack: Pack, concurrency: usize, dir: &std::path::Path) -> Duration {
    let plan = chain_plan(&pack);
    let packs = [pack];
    let data = dir.join(format!("chain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).unwrap();
    let store = SqliteStore::open(&data.join("opsgraph.db"), Durability::Full).unwrap();
    let mut rt = Runtime::new(Box::new(store), packs.to_vec(), vec![], data.clone());
    rt.concurrency = concurrency;
    let start = Instant::now();
    let id = rt.create(&plan, "bench", &mut |_| {}).unwrap();
    let state = rt.drive(&id, &mut |_| {}).unwrap();
    let took = start.elapsed();
    assert_eq!(state, OperationState::Completed);
    let _ = std::fs::remove_dir_all(&data);
    took
}

fn bench_chain(n: usize, dir: &std::path::Path) {
    let runs = 5;
    let (mut spawn, mut exec, mut commit, mut run) = (vec![], vec![], vec![], vec![]);
    for _ in 0..runs {
        spawn.push(spawn_floor(n));
        exec.push(executor_floor(n));
        commit.push(commit_floor(n, dir));
        run.push(drive(n, true, 8, dir));
    }
    let (spawn, exec, commit, run) = (median(spawn), median(exec), median(commit), median(run));
    let per = |d: Duration| ms(d) / n as f64;
    println!("chain of {n} no-op jobs, medians of {runs} interleaved runs");
    println!();
    println!("| measure | total | per job |");
    println!("|---|---|---|");
    println!("| spawn floor: `/bin/true` exec'd and waited for | {:.1} ms | {:.3} ms |", ms(spawn), per(spawn));
    println!("| executor floor: the same through `LocalExecutor` | {:.1} ms | {:.3} ms |", ms(exec), per(exec));
    println!(
        "| commit floor: one timeline row per WAL FULL transaction | {:.1} ms | {:.3} ms |",
        ms(commit),
        per(commit)
    );
    println!("| chain driven by the runtime (durable) | {:.1} ms | {:.3} ms |", ms(run), per(run));
    let overhead = per(run.saturating_sub(spawn));
    let goal = 2.0 * per(commit) + 0.25;
    println!("| orchestration overhead = (chain - spawns) / N | | {overhead:.3} ms |");
    println!("| goal: two commits + 0.25 ms | | {goal:.3} ms |");
    println!("| overhead / goal | | {:.2} |", overhead / goal);
    let goal5 = per(commit) + 0.1;
    println!("| goal of issue [N] 5: one commit + 0.1 ms | | {goal5:.3} ms |");
    println!("| overhead / goal of issue [N] 5 | | {:.2} |", overhead / goal5);
    println!("| overhead in commits | | {:.1} x commit floor |", overhead / per(commit));
}

fn bench_wide(n: usize, concurrency: usize, dir: &std::path::Path) {
    let runs = 5;
    let (mut ceiling, mut run) = (vec![], vec![]);
    for _ in 0..runs {
        ceiling.push(spawn_ceiling(n, concurrency));
        run.push(drive(n, false, concurrency, dir));
    }
    let (ceiling, run) = (median(ceiling), median(run));
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!("{n} independent no-op jobs, {concurrency} at once, medians of {runs} interleaved runs");
    println!();
    println!("| measure | total | jobs/s |");
    println!("|---|---|---|");
    println!(
        "| spawn ceiling: `/bin/true` from {concurrency} plain threads | {:.1} ms | {:.0} |",
        ms(ceiling),
        rate(ceiling)
    );
    println!("| wide DAG driven by the runtime (durable) | {:.1} ms | {:.0} |", ms(run), rate(run));
    println!("| runtime / ceiling (goal >= 70%; issue [N] 5: >= 90%) | | {:.0}% |", 100.0 * rate(run) / rate(ceiling));
}

fn bench_noop(n: usize, concurrency: usize, dir: &std::path::Path) {
    let runs = 5;
    let run = median((0..runs).map(|_| drive_pack(noop_pack(n), concurrency, dir)).collect());
    let rate = n as f64 / run.as_secs_f64();
    println!("{n} independent in-process no-op jobs (no process), {concurrency} at once, median of {runs} runs");
    println!();
    println!("| measure | total | jobs/s |");
    println!("|---|---|---|");
    println!("| durable no-op jobs driven by the runtime | {:.1} ms | {rate:.0} |", ms(run));
    println!("| against the goal of 10,000 jobs/s | | {:.2}x |", rate / 10_000.0);
    println!("| against issue [N] 5's goal of 30,000 jobs/s | | {:.2}x |", rate / 30_000.0);
}

/// The timeline row of the `i`th transition the commit benchmarks write (a pause of `op-bench`).
fn pause_entry(i: usize) -> opsgraph_store::TimelineEntry {
    opsgraph_store::TimelineEntry {
        seq: 0,
        operation: "op-bench".into(),
        at: opsgraph_store::now(),
        actor: "opsgraph".into(),
        event: "pause".into(),
        from: Some("running".into()),
        to: Some("paused".into()),
        reason: format!("no job can start ({i})"),
        data: serde_json::json!({"pause": {"reason": "no job can start"}}),
    }
}

/// The running operation the commit benchmarks change, made before they time anything.
fn bench_record(id: &str) -> opsgraph_store::OperationRecord {
    opsgraph_store::OperationRecord {
        id: id.into(),
        parent: None,
        intent: serde_json::json!({"target_resource_type": "chain.thing", "action": "run"}),
        resource: None,
        state: OperationState::Running,
        plan_revision: "sha256:bench".into(),
        intent_id: None,
        plan_id: "sha256:bench".into(),
        actor: "bench".into(),
        created_at: opsgraph_store::now(),
        updated_at: opsgraph_store::now(),
        version: 0,
    }
}

/// One transition (operation row update + timeline row) per transaction: through the store, and
/// through rusqlite directly with the same schema, rows and pragmas. Blocks of N alternate.
fn bench_commit(n: usize, dir: &std::path::Path) {
    use opsgraph_store::{Store, Write};
    let rounds = 9;
    let (entry, record) = (pause_entry, bench_record);
    let store_path = dir.join("commit-store.db");
    let raw_path = dir.join("commit-raw.db");
    for p in [&store_path, &raw_path] {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", p.display()));
        }
    }
    let mut store = SqliteStore::open(&store_path, Durability::Full).unwrap();
    store
        .commit(&[Write::CreateOperation { op: record("op-bench"), plan: serde_json::json!({}).to_string() }])
        .unwrap();
    // The raw database gets the same schema from the store, then is written by rusqlite alone.
    {
        let mut s = SqliteStore::open(&raw_path, Durability::Full).unwrap();
        s.commit(&[Write::CreateOperation { op: record("op-bench"), plan: serde_json::json!({}).to_string() }])
            .unwrap();
    }
    let mut raw = rusqlite::Connection::open(&raw_path).unwrap();
    raw.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA busy_timeout=5000;",
    )
    .unwrap();
    let states = [OperationState::Paused { reason: "no job can start".into() }, OperationState::Running];
    let state_json: Vec<String> = states.iter().map(|s| serde_json::to_string(s).unwrap()).collect();
    let kinds = ["paused", "running"];
    let (mut store_version, mut raw_version) = (0i64, 0i64);
    let (mut through_store, mut direct) = (vec![], vec![]);
    for _ in 0..rounds {
        let start = Instant::now();
        for i in 0..n {
            let write = Write::Transition {
                operation: "op-bench".into(),
                expect_version: store_version,
                state: states[i % 2].clone(),
                entry: entry(i),
            };
            store.commit(&[write]).unwrap();
            store_version += 1;
        }
        through_store.push(start.elapsed());
        let start = Instant::now();
        for i in 0..n {
            let e = entry(i);
            let data = serde_json::to_string(&e.data).unwrap();
            let tx = raw.transaction().unwrap();
            let changed = tx
                .prepare_cached(
                    "UPDATE operations SET state = ?2, state_kind = ?3, updated_at = ?4, version = version + 1
                     WHERE id = ?1 AND version = ?5",
                )
                .unwrap()
                .execute(rusqlite::params!["op-bench", state_json[i % 2], kinds[i % 2], e.at, raw_version])
                .unwrap();
            assert_eq!(changed, 1);
            tx.prepare_cached(
                "INSERT INTO timeline (operation, at, actor, event, from_state, to_state, reason, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .unwrap()
            .execute(rusqlite::params![e.operation, e.at, e.actor, e.event, e.from, e.to, e.reason, data])
            .unwrap();
            tx.commit().unwrap();
            raw_version += 1;
        }
        direct.push(start.elapsed());
    }
    let (through_store, direct) = (median(through_store), median(direct));
    let per = |d: Duration| ms(d) / n as f64;
    println!("{n} transitions per block, blocks alternated, medians of {rounds}");
    println!();
    println!("| measure | per commit |");
    println!("|---|---|");
    println!("| rusqlite directly (WAL, synchronous=FULL) | {:.3} ms |", per(direct));
    println!("| `SqliteStore::commit(&[Write::Transition])` | {:.3} ms |", per(through_store));
    println!("| store / raw (goal <= 1.3) | {:.2} |", per(through_store) / per(direct));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let concurrency =
        args.iter().find_map(|a| a.strip_prefix("concurrency=")).and_then(|c| c.parse().ok()).unwrap_or(8);
    let positional: Vec<&String> = args.iter().filter(|a| !a.contains('=')).collect();
    let (mode, n) = match positional.first().map(|s| s.as_str()) {
        Some(m @ ("chain" | "wide" | "noop" | "commit" | "scale" | "all" | "drive" | "ceiling")) => {
            (m, positional.get(1).and_then(|n| n.parse().ok()))
        }
        Some(n) => ("chain", n.parse().ok()),
        None => ("chain", None),
    };
    let dir = std::env::temp_dir().join("opsgraph-runtime-bench");
    std::fs::create_dir_all(&dir).unwrap();
    println!("machine: {} cores", std::thread::available_parallelism().map(|c| c.get()).unwrap_or(0));
    println!();
    if mode == "drive" {
        let n = n.unwrap_or(200);
        let wide = args.iter().any(|a| a == "shape=wide");
        let what = if wide { "independent" } else { "chain of" };
        println!("{what} {n} no-op jobs driven once: {:.1} ms", ms(drive(n, !wide, concurrency, &dir)));
        return;
    }
    if mode == "ceiling" {
        let n = n.unwrap_or(2000);
        println!(
            "{n} x `/bin/true` from {concurrency} plain threads once: {:.1} ms",
            ms(spawn_ceiling(n, concurrency))
        );
        return;
    }
    if matches!(mode, "chain" | "all") {
        bench_chain(n.unwrap_or(200), &dir);
        println!();
    }
    if matches!(mode, "wide" | "all") {
        bench_wide(n.filter(|_| mode == "wide").unwrap_or(2000), concurrency, &dir);
        println!();
    }
    if matches!(mode, "noop" | "all") {
        bench_noop(n.filter(|_| mode == "noop").unwrap_or(10_000), concurrency, &dir);
        println!();
    }
    if matches!(mode, "commit" | "all") {
        bench_commit(n.filter(|_| mode == "commit").unwrap_or(200), &dir);
    }
    if mode == "scale" {
        let ops = args.iter().find_map(|a| a.strip_prefix("ops=")).and_then(|c| c.parse().ok()).unwrap_or(4);
        let process = args.iter().any(|a| a == "jobs=process");
        let only = args.iter().find_map(|a| a.strip_prefix("only="));
        scale::bench_scale(n.unwrap_or(500), ops, concurrency, process, only);
    }
}

/// SQLite against PostgreSQL, one replica against two.
mod scale {
    use std::time::{Duration, Instant};

    use opsgraph_core::model::OperationState;
    use opsgraph_core::pack::Pack;
    use opsgraph_runtime::lease::{Keeper, LeaseConfig};
    use opsgraph_runtime::Runtime;
    use opsgraph_store::testing::TestDb;
    use opsgraph_store::{Store, Write};

    use super::{median, ms};

    #[derive(Clone, Copy)]
    enum Backend {
        Sqlite,
        Postgres,
    }

    fn db(backend: Backend) -> Option<TestDb> {
        match backend {
            Backend::Sqlite => Some(opsgraph_store_sqlite::test_db()),
            Backend::Postgres => opsgraph_store_pg::test_db("bench scale"),
        }
    }

    /// N single-transition commits (operation row update + timeline row) on one connection.
    fn transitions(db: &TestDb, n: usize) -> Duration {
        let mut store = db.store();
        let record = super::bench_record("op-bench");
        store.commit(&[Write::CreateOperation { op: record, plan: serde_json::json!({}).to_string() }]).unwrap();
        let states = [OperationState::Paused { reason: "no job can start".into() }, OperationState::Running];
        let start = Instant::now();
        for i in 0..n {
            let entry = super::pause_entry(i);
            let w = Write::Transition {
                operation: "op-bench".into(),
                expect_version: i as i64,
                state: states[i % 2].clone(),
                entry,
            };
            store.commit(&[w]).unwrap();
        }
        start.elapsed()
    }

    /// `ops` operations of `pack` created, then driven under leases by `replicas` replicas: each
    /// replica starts a thread per operation and drives those whose lease it wins. Returns the
    /// wall time from the first drive to the last completion and the timeline rows written.
    fn drive(db: &TestDb, pack: &Pack, ops: usize, replicas: usize, concurrency: usize) -> (Duration, usize) {
        let plan = super::chain_plan(pack);
        let packs = vec![pack.clone()];
        let data = std::env::temp_dir().join(format!("opsgraph-bench-scale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data).unwrap();
        let mut rt = Runtime::new(db.store(), packs.clone(), vec![], data.clone());
        let ids: Vec<String> = (0..ops).map(|_| rt.create(&plan, "bench", &mut |_| {}).unwrap()).collect();
        drop(rt);
        let url = db.url().to_string();
        let open = db.opener();
        let start = Instant::now();
        std::thread::scope(|s| {
            for r in 0..replicas {
                let url = url.clone();
                let keeper = std::sync::Arc::new(Keeper::new(
                    LeaseConfig { holder: format!("bench-replica-{r}"), ttl: Duration::from_secs(10) },
                    Box::new(move || open(&url)),
                ));
                for k in 0..ops {
                    // Each replica tries the operations in its own order, as scanners find them.
                    let id = ids[(k + r * ops / replicas.max(1)) % ops].clone();
                    let (keeper, packs, data) = (std::sync::Arc::clone(&keeper), packs.clone(), data.clone());
                    s.spawn(move || {
                        let mut rt = Runtime::new(db.store(), packs, vec![], data);
                        rt.set_concurrency(concurrency);
                        match rt.drive_leased(&id, &keeper, &mut |_| {}) {
                            Ok(state) => assert_eq!(state, OperationState::Completed),
                            Err(opsgraph_runtime::Error::Store(opsgraph_store::Error::LeaseHeld { .. })) => {}
                            Err(e) => panic!("{id}: {e}"),
                        }
                    });
                }
            }
        });
        let took = start.elapsed();
        let store = db.store();
        let mut rows = 0;
        for id in &ids {
            assert_eq!(store.operation(id).unwrap().unwrap().state, OperationState::Completed);
            rows += store.timeline(id).unwrap().len();
        }
        let _ = std::fs::remove_dir_all(&data);
        (took, rows)
    }

    pub(super) fn bench_scale(n: usize, ops: usize, concurrency: usize, process: bool, only: Option<&str>) {
        let runs = 5;
        let (pack, kind) = if process {
            (super::chain_pack(n, false), "`/bin/true` jobs")
        } else {
            (super::noop_pack(n), "in-process no-op jobs")
        };
        let configs: [(&str, Backend, usize); 4] = [
            ("SQLite, 1 replica", Backend::Sqlite, 1),
            ("SQLite, 2 replicas", Backend::Sqlite, 2),
            ("PostgreSQL, 1 replica", Backend::Postgres, 1),
            ("PostgreSQL, 2 replicas", Backend::Postgres, 2),
        ];
        let wanted = |b: Backend| {
            matches!((only, b), (None, _) | (Some("sqlite"), Backend::Sqlite) | (Some("postgres"), Backend::Postgres))
        };
        let commits = 200;
        let mut commit_times: Vec<Vec<Duration>> = vec![vec![], vec![]];
        let mut drive_times: Vec<Vec<Duration>> = vec![vec![]; configs.len()];
        let mut rows = vec![0usize; configs.len()];
        for _ in 0..runs {
            for (b, backend) in [Backend::Sqlite, Backend::Postgres].into_iter().enumerate() {
                if !wanted(backend) {
                    continue;
                }
                let Some(db) = db(backend) else { return };
                commit_times[b].push(transitions(&db, commits));
            }
            for (c, (_, backend, replicas)) in configs.iter().enumerate() {
                if !wanted(*backend) {
                    continue;
                }
                let Some(db) = db(*backend) else { return };
                let (took, r) = drive(&db, &pack, ops, *replicas, concurrency);
                drive_times[c].push(took);
                rows[c] = r;
            }
        }
        let rate = |count: usize, d: Duration| count as f64 / d.as_secs_f64();
        println!(
            "transitions: {commits} single-transition commits on one connection, medians of {runs} interleaved runs"
        );
        println!();
        println!("| backend | per commit | transitions/s |");
        println!("|---|---|---|");
        let mut per_backend = vec![];
        for (b, name) in ["SQLite (WAL, synchronous=FULL)", "PostgreSQL 15 (loopback, fsync on)"].iter().enumerate() {
            let d = median(commit_times[b].clone());
            per_backend.push(rate(commits, d));
            println!("| {name} | {:.3} ms | {:.0} |", ms(d) / commits as f64, rate(commits, d));
        }
        println!("| PostgreSQL / SQLite | | {:.2} |", per_backend[1] / per_backend[0]);
        println!();
        println!(
            "{ops} operations x {n} {kind} ({concurrency} at once each), driven under leases, medians of {runs} interleaved runs"
        );
        println!();
        println!("| configuration | wall time | jobs/s | timeline rows/s |");
        println!("|---|---|---|---|");
        let mut jobs_rate = vec![];
        for (c, (name, _, _)) in configs.iter().enumerate() {
            let d = median(drive_times[c].clone());
            jobs_rate.push(rate(ops * n, d));
            println!("| {name} | {:.0} ms | {:.0} | {:.0} |", ms(d), rate(ops * n, d), rate(rows[c], d));
        }
        println!("| PostgreSQL / SQLite, 1 replica (issue [N] 5: >= 0.8) | | {:.2} | |", jobs_rate[2] / jobs_rate[0]);
        println!("| 2 replicas / 1 replica, SQLite | | {:.2} | |", jobs_rate[1] / jobs_rate[0]);
        println!("| 2 replicas / 1 replica, PostgreSQL | | {:.2} | |", jobs_rate[3] / jobs_rate[2]);
    }
}
