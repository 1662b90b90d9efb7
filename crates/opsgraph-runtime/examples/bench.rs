//! Runtime benchmarks (docs/benchmarks.md):
//!
//!     cargo run --release -p opsgraph-runtime --example bench [-- N]
//!
//! In one run, on this machine: the spawn floor (N x `/bin/true` exec'd and waited for), the
//! store's raw commit floor (N single-row WAL FULL transactions through rusqlite), and a chain of
//! N no-op jobs (`command: [/bin/true]`, no evidence) driven durably by the runtime. The
//! orchestration overhead per job is (chain - N x spawn) / N.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use opsgraph_model::*;
use opsgraph_pack::Pack;
use opsgraph_plan::{Input, Inventory};
use opsgraph_runtime::Runtime;
use opsgraph_store::{Durability, SqliteStore};

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn chain_pack(n: usize) -> Pack {
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
            run: Some(Run {
                executor: Some(ExecutorKind::Local),
                command: Some(Command::Argv(vec!["/bin/true".into()])),
                script: None,
                timeout: None,
                env: BTreeMap::new(),
                workdir: None,
                method: None,
                url: None,
            }),
            after: if k == 0 { vec![] } else { vec![format!("j{}", k - 1)] },
            cost: None,
        })
        .map(|mut j| {
            j.inputs.requires.artifacts.clear();
            j
        })
        .collect();
    let template = PlanTemplate {
        id: "chain.run".into(),
        action: "run".into(),
        title: None,
        description: None,
        parameters: BTreeMap::new(),
        scopes: BTreeMap::new(),
        stages: vec![StageSpec {
            id: "all".into(),
            name: "All".into(),
            jobs: jobs.iter().map(|j| j.id.clone()).collect(),
        }],
        jobs: jobs.iter().map(|j| JobEntry::Ref(j.id.clone())).collect(),
        gates: vec![],
        requires: None,
        risk: None,
        provides: vec![],
    };
    Pack {
        root: "/nonexistent".into(),
        manifest: ScenarioPack {
            id: "chain".into(),
            version: "1.0.0".into(),
            title: None,
            description: None,
            resource_types: vec!["chain.thing".into()],
            actions: vec!["run".into()],
            requires: vec![],
            provides: vec![],
            plan_templates: vec![],
            editable: Editable::default(),
            risk: opsgraph_model::Risk::default(),
        },
        templates: vec![template],
        jobs: jobs.into_iter().map(|j| (j.id.clone(), j)).collect(),
        evidence: BTreeMap::new(),
        artifacts: BTreeMap::new(),
        remedies: vec![],
        providers: vec![],
    }
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
    start.elapsed()
}

/// One `UPDATE` + one `INSERT` per transaction, as a transition costs, through the store itself.
fn rusqlite_free_floor(dir: &std::path::Path) -> impl Fn(usize) {
    use opsgraph_store::{Store, Write};
    let path = dir.join("floor.db");
    let _ = std::fs::remove_file(&path);
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

fn chain(n: usize, dir: &std::path::Path) -> Duration {
    let pack = chain_pack(n);
    let intent = Intent {
        id: None,
        target_resource_type: "chain.thing".into(),
        action: "run".into(),
        pack: None,
        name: None,
        environment: None,
        desired_result: None,
        parameters: Attributes::new(),
        constraints: Attributes::new(),
        targets: BTreeMap::new(),
        requires: vec![],
    };
    let packs = [pack];
    let inventory = Inventory::new(&[]);
    let plan = opsgraph_plan::build(&Input {
        intent: &intent,
        packs: &packs,
        inventory: &inventory,
        providers: &[],
        policy: &CapabilityPolicy::default(),
        operations: &Default::default(),
    })
    .expect("chain plan");
    let data = dir.join(format!("chain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).unwrap();
    let store = SqliteStore::open(&data.join("opsgraph.db"), Durability::Full).unwrap();
    let mut rt = Runtime::new(Box::new(store), packs.to_vec(), vec![], data.clone());
    let start = Instant::now();
    let id = rt.create(&plan, "bench", &mut |_| {}).unwrap();
    let state = rt.drive(&id, &mut |_| {}).unwrap();
    let took = start.elapsed();
    assert_eq!(state, OperationState::Completed);
    let _ = std::fs::remove_dir_all(&data);
    took
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let dir = std::env::temp_dir().join("opsgraph-runtime-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let runs = 5;
    let (mut spawn, mut commit, mut run) = (vec![], vec![], vec![]);
    for _ in 0..runs {
        spawn.push(spawn_floor(n));
        commit.push(commit_floor(n, &dir));
        run.push(chain(n, &dir));
    }
    let (spawn, commit, run) = (median(spawn), median(commit), median(run));
    let per = |d: Duration| ms(d) / n as f64;
    println!(
        "machine: {} cores; chain of {n} no-op jobs, medians of {runs} interleaved runs",
        std::thread::available_parallelism().map(|c| c.get()).unwrap_or(0)
    );
    println!();
    println!("| measure | total | per job |");
    println!("|---|---|---|");
    println!("| spawn floor: `/bin/true` exec'd and waited for | {:.1} ms | {:.3} ms |", ms(spawn), per(spawn));
    println!(
        "| commit floor: one timeline row per WAL FULL transaction | {:.1} ms | {:.3} ms |",
        ms(commit),
        per(commit)
    );
    println!("| chain driven by the runtime (durable) | {:.1} ms | {:.3} ms |", ms(run), per(run));
    println!("| orchestration overhead = (chain - spawns) / N | | {:.3} ms |", per(run.saturating_sub(spawn)));
    println!("| overhead in commits | | {:.1} x commit floor |", per(run.saturating_sub(spawn)) / per(commit));
}
