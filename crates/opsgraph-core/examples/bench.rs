//! Planning and resolution benchmarks (docs/benchmarks.md):
//!
//!     cargo run --release -p opsgraph-core --example bench
//!
//! (1) Plan building: N target nodes x 10 jobs, each job requiring the capabilities of the three
//!     jobs before it on the same node (~3 edges per instance), built and validated, for
//!     N = 100 and 1,000, so the 10x growth ratio is measured in the same run.
//! (2) Resolution: an inventory of R resources (R = 10,000 and 100,000) indexed, then one
//!     requirement with an equality, a `same-as-workload` and a `min_` constraint answered.
//! Each figure is the median of several runs; the machine is shared, so ratios matter most.
//! `bench plan` runs (1) only; `bench nodes=N` builds one size alone, for `/usr/bin/time -v`.

use std::time::{Duration, Instant};

use opsgraph_core::model::*;
use opsgraph_core::pack::Pack;
use opsgraph_core::plan::resolve::{resolve, Context};
use opsgraph_core::plan::{Input, Inventory};
use serde_json::json;

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn job(k: usize) -> Job {
    let requires = (k.saturating_sub(3)..k)
        .map(|p| Requirement {
            capability: format!("cap.j{p}"),
            constraints: Attributes::new(),
            scope: Some("nodes".into()),
        })
        .chain(std::iter::once(Requirement {
            capability: "linux.host".into(),
            constraints: Attributes::new(),
            scope: Some("nodes".into()),
        }))
        .collect();
    Job {
        id: format!("j{k}"),
        title: None,
        description: None,
        type_: JobType::Automation,
        scope: Some(JobScope { resources: vec!["compute_node".into()], target: Some("nodes".into()) }),
        inputs: Inputs {
            parameters: Attributes::new(),
            requires: Requires { capabilities: requires, artifacts: vec![] },
        },
        outputs: Outputs {
            provides: Provides {
                capabilities: vec![Provision {
                    capability: format!("cap.j{k}"),
                    scope: Some("nodes".into()),
                    provider: None,
                    attributes: Attributes::new(),
                    credentials: None,
                }],
            },
            artifacts: vec![],
            evidence: vec![],
        },
        controls: Controls::default(),
        run: None,
        after: vec![],
        cost: None,
    }
}

fn pack() -> Pack {
    let scopes = [("nodes".to_string(), ScopeSpec::targets("compute_node", "nodes"))].into();
    Pack::one_stage("bench", "bench", "bench.thing", scopes, (0..10).map(job).collect())
}

fn node(i: usize) -> Resource {
    Resource {
        id: format!("compute_node/n{i}"),
        type_: "compute_node".into(),
        name: format!("n{i}"),
        environment: Some("prod".into()),
        health: Health::Healthy,
        provides: vec![ProvidedCapability { capability: "linux.host".into(), attributes: Attributes::new() }],
        ..Default::default()
    }
}

fn intent(nodes: usize) -> Intent {
    Intent {
        target_resource_type: "bench.thing".into(),
        action: "run".into(),
        name: Some("bench".into()),
        environment: Some("prod".into()),
        constraints: [("region".to_string(), json!("region-3"))].into(),
        targets: [("nodes".to_string(), (0..nodes).map(|i| format!("compute_node/n{i}")).collect())].into(),
        ..Default::default()
    }
}

/// Builds plans for each size in turn, interleaved, so every size sees the same machine.
fn bench_plans(sizes: &[usize], runs: usize) -> Vec<(Duration, usize, usize)> {
    let pack = [pack()];
    let worlds: Vec<(Vec<Resource>, Intent)> = sizes.iter().map(|&n| ((0..n).map(node).collect(), intent(n))).collect();
    let policy = CapabilityPolicy::default();
    let mut times = vec![Vec::new(); sizes.len()];
    let mut shapes = vec![(0, 0); sizes.len()];
    for _ in 0..runs {
        for (k, (resources, intent)) in worlds.iter().enumerate() {
            let start = Instant::now();
            let inventory = Inventory::new(resources);
            let plan = opsgraph_core::plan::build(&Input {
                intent,
                packs: &pack,
                inventory: &inventory,
                providers: &[],
                policy: &policy,
                operations: &Default::default(),
                recorded: None,
                roles: &[],
            })
            .expect("the bench plan builds");
            times[k].push(start.elapsed());
            shapes[k] = (plan.jobs.len(), plan.jobs.iter().map(|j| j.depends_on.len()).sum());
        }
    }
    times.into_iter().zip(shapes).map(|(t, (j, e))| (median(t), j, e)).collect()
}

fn storage(i: usize) -> Resource {
    let env = ["dev", "stage", "prod"][i % 3];
    Resource {
        id: format!("object_storage/s{i}"),
        type_: "object_storage".into(),
        name: format!("s{i}"),
        environment: Some(env.into()),
        provider: Some(["shared_minio", "dedicated_minio", "aws_s3", "ceph", "legacy"][i % 5].into()),
        attributes: [
            ("region".to_string(), json!(format!("region-{}", i % 10))),
            ("site".to_string(), json!(format!("site{:03}", i % 100))),
        ]
        .into(),
        health: Health::Healthy,
        provides: vec![ProvidedCapability {
            capability: "object_storage.s3".into(),
            attributes: [
                ("capacity_gb".to_string(), json!((i * 37) % 2000)),
                ("encryption".to_string(), json!(i % 2 == 0)),
            ]
            .into(),
        }],
        ..Default::default()
    }
}

fn bench_resolve(count: usize, runs: usize) -> (Duration, Duration, usize) {
    let resources: Vec<Resource> = (0..count).map(storage).collect();
    let intent = intent(0);
    let policy = CapabilityPolicy {
        rules: [(
            "object_storage.s3".to_string(),
            [(
                "prod".to_string(),
                EnvironmentPolicy {
                    allowed_providers: Some(vec!["aws_s3".into(), "dedicated_minio".into()]),
                    require_encryption: true,
                    ..Default::default()
                },
            )]
            .into(),
        )]
        .into(),
    };
    let req = Requirement {
        capability: "object_storage.s3".into(),
        constraints: [
            ("region".to_string(), json!("same-as-workload")),
            ("site".to_string(), json!("site007")),
            ("min_capacity_gb".to_string(), json!(500)),
        ]
        .into(),
        scope: None,
    };
    let mut index = Vec::new();
    let mut answer = Vec::new();
    let mut considered = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let inventory = Inventory::new(&resources);
        index.push(start.elapsed());
        let cx = Context {
            inventory: &inventory,
            providers: &[],
            policy: &policy,
            intent: &intent,
            requester: "Bench",
            roles: &[],
        };
        let start = Instant::now();
        let r = resolve(&cx, &req, vec![]);
        answer.push(start.elapsed());
        considered = r.considered;
    }
    (median(index), median(answer), considered)
}

fn main() {
    let only = std::env::args().nth(1).unwrap_or_default();
    if let Some(nodes) = only.strip_prefix("nodes=").and_then(|n| n.parse().ok()) {
        // One size alone, for peak memory: `/usr/bin/time -v bench nodes=1000`.
        let r = bench_plans(&[nodes], 3);
        println!("{:.1} ms", ms(r[0].0));
        return;
    }
    println!(
        "machine: {} cores; {}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        std::env::consts::ARCH
    );
    println!();
    println!("| plan build + validate | job instances | edges | median of 21 |");
    println!("|---|---|---|---|");
    let plans = bench_plans(&[100, 1000, 10_000], 21);
    for ((t, j, e), n) in plans.iter().zip(["100", "1,000", "10,000"]) {
        println!("| {n} nodes x 10 jobs | {j} | {e} | {:.1} ms |", ms(*t));
    }
    println!("| ratio 1,000 / 100 nodes | | | {:.1}x |", plans[1].0.as_secs_f64() / plans[0].0.as_secs_f64());
    println!("| ratio 10,000 / 1,000 nodes | | | {:.1}x |", plans[2].0.as_secs_f64() / plans[1].0.as_secs_f64());
    if only == "plan" {
        return;
    }
    println!();
    println!("| resolution | candidates | index (median) | answer one requirement (median) |");
    println!("|---|---|---|---|");
    let (i1, a1, c1) = bench_resolve(10_000, 11);
    println!("| 10,000 resources | {c1} | {:.1} ms | {:.2} ms |", ms(i1), ms(a1));
    let (i2, a2, c2) = bench_resolve(100_000, 7);
    println!("| 100,000 resources | {c2} | {:.1} ms | {:.2} ms |", ms(i2), ms(a2));
    println!(
        "| ratio for 10x input | | {:.1}x | {:.1}x |",
        i2.as_secs_f64() / i1.as_secs_f64(),
        a2.as_secs_f64() / a1.as_secs_f64()
    );
}
