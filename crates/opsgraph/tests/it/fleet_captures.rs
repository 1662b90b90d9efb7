//! Real failures for the measured corpus ([L] 4): the bundled `postgresql` pack applied for real on
//! fleet hosts (docs/fleet.md), each host prepared with one fault a machine meets in the field —
//! the port already taken, the package repository unreachable, a data directory that is not empty,
//! a binary that is missing, a full disk. Each run must fail, and `diagnose OP` must give the answer the
//! captured document in `fixtures/failures/` expects (`# expect:`), so a stored capture and the live
//! failure cannot drift apart.
//!
//! With `UPDATE_CORPUS=1` the failed job's real log, exit code and failed evidence are written
//! there as a `failure` document marked `# source: fleet`, with the command that produced it (the
//! `# expect:` line is kept from the document it replaces: what the right answer is, is a person's
//! call). Needs root and OPSGRAPH_FLEET=1, like every fleet test.

use std::path::Path;

use serde_json::Value;

use crate::fleet::{claim, machine, Fleet};
use crate::support::{dev_intent, opsgraph, path, root, temp_dir};

/// One fault, on its own host.
struct Fault {
    /// The corpus document it is captured as.
    file: &'static str,
    /// What is done on the host (as root, inside it) before the apply, in words and as a script.
    what: &'static str,
    setup: &'static str,
    port: u16,
}

const FAULTS: &[Fault] = &[
    Fault {
        file: "084-fleet-postgresql-port-taken.yaml",
        what: "another service listens on the port first",
        setup: "systemd-run --unit=squatter python3 -m http.server 5432 --bind 0.0.0.0 && sleep 2 && ss -Htln 'sport = :5432' | grep -q .",
        port: 5432,
    },
    Fault {
        file: "085-fleet-apt-repository-unreachable.yaml",
        what: "the host's apt source points at an address where nothing listens",
        setup: "rm -f /etc/apt/sources.list.d/*.list && printf 'deb http://10.213.0.1:9/debian bookworm main\\n' > /etc/apt/sources.list && rm -rf /var/lib/apt/lists/*",
        port: 5432,
    },
    Fault {
        file: "086-fleet-postgresql-data-directory-not-empty.yaml",
        what: "the cluster's data directory holds files from before",
        setup: "mkdir -p /var/lib/postgresql/15/main && echo 'from an earlier life' > /var/lib/postgresql/15/main/README.old",
        port: 5432,
    },
    Fault {
        file: "087-fleet-missing-binary.yaml",
        what: "pg_lsclusters is diverted away (dpkg-divert), so postgresql-common installs it elsewhere",
        setup: "dpkg-divert --local --rename --divert /usr/bin/pg_lsclusters.away --add /usr/bin/pg_lsclusters",
        port: 5432,
    },
    Fault {
        file: "088-fleet-postgresql-disk-full.yaml",
        what: "the file system under /var/lib/postgresql is 4 MiB",
        setup: "mkdir -p /var/lib/postgresql && mount -t tmpfs -o size=4m,mode=0755 tmpfs /var/lib/postgresql",
        port: 5432,
    },
];

fn intent(name: &str, node: &str, port: u16) -> String {
    let body = format!(
        "  parameters:
    source: debian
    postgresql_version: \"15\"
    database: orders
    owner: orders_app
    db_password: fleet-capture-pw-2c9e
    port: {port}
  targets:
    target_nodes: [compute_node/{node}]
"
    );
    dev_intent("postgresql.instance", "install", name, &body)
}

fn json(run: &crate::support::Run) -> Value {
    serde_json::from_str(&run.out).unwrap_or_else(|e| panic!("{e}: {}", run.render()))
}

/// The `failure` document of the failed job of `op`: its last attempt's log, exit code and
/// failed evidence, headed by `expect` and where it came from.
fn document(data: &str, op: &str, expect: &str, fault: &Fault, node: &str) -> String {
    let described = json(&opsgraph(&["--data-dir", data, "describe", "operation", op, "-o", "json"]));
    let jobs = described["jobs"].as_array().unwrap();
    let failed = jobs.iter().find(|j| j["state"] == "failed").unwrap_or_else(|| panic!("no failed job: {described}"));
    let job = failed["id"].as_str().unwrap();
    let outcome = failed["outcome"]["outcome"].as_str().unwrap_or_default();
    let exit = outcome.strip_prefix("exited with code ").map(str::to_string);
    let logs = json(&opsgraph(&["--data-dir", data, "logs", op, job, "-o", "json"]));
    let last = logs.as_array().unwrap().iter().rfind(|l| l["job"] == job).cloned().unwrap_or_default();
    let output = last["output"].as_str().unwrap_or_default().replace('\r', "");
    let mut doc = format!(
        "# expect: {expect}\n# source: fleet\n# command: opsgraph apply -f INTENT --packs packs --inventory FLEET/inventory --yes\n#   (postgresql.install, source debian, version 15, port {}, on {node}: a Debian 12 fleet host)\n#   after, on the host: {}\n#   ({}; tests/it/fleet_captures.rs)\nfailure:\n  pack: postgresql\n  job: {job}\n",
        fault.port, fault.setup, fault.what
    );
    if let Some(code) = exit {
        doc.push_str(&format!("  exit_code: {code}\n"));
    }
    doc.push_str("  output: |\n");
    for line in output.lines().map(str::trim_end) {
        if line.is_empty() {
            doc.push('\n');
        } else {
            doc.push_str(&format!("    {line}\n"));
        }
    }
    let evidence: Vec<&Value> = described["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["job"] == job && e["passed"] == false)
        .collect();
    if !evidence.is_empty() {
        doc.push_str("  evidence:\n");
        for e in evidence {
            let observed = serde_json::to_string(&e["observed"]).unwrap();
            doc.push_str(&format!(
                "    - {{check: {}, passed: false, observed: {observed}}}\n",
                e["check"].as_str().unwrap()
            ));
        }
    }
    doc
}

#[test]
fn real_failures_on_the_fleet_are_diagnosed_as_the_corpus_says() {
    let Some(_one) = claim("real_failures_on_the_fleet_are_diagnosed_as_the_corpus_says") else { return };
    let corpus = root().join("crates/opsgraph/tests/it/fixtures/failures");
    let update = std::env::var("UPDATE_CORPUS").as_deref() == Ok("1");
    let tmp = temp_dir(&[]);
    let dir = tmp.join("fleet");
    let before = machine();
    let fleet = Fleet::up(&dir, FAULTS.len());
    let (state, _) = opsgraph_fleet::status(&dir).unwrap().unwrap();
    let inventory = dir.join("inventory").display().to_string();
    let packs = path("packs");
    let runs: Vec<_> = FAULTS
        .iter()
        .enumerate()
        .map(|(i, fault)| {
            let node = format!("fleet-{}", i + 1);
            let set = opsgraph_fleet::exec(&state.hosts[i], &["sh", "-c", fault.setup]).output().unwrap();
            assert!(set.status.success(), "{}: {}", fault.setup, String::from_utf8_lossy(&set.stderr));
            let file = tmp.join(&format!("intent-{}.yaml", i + 1));
            std::fs::write(&file, intent(&format!("capture-{}", i + 1), &node, fault.port)).unwrap();
            let data = tmp.join(&format!("data-{}", i + 1)).display().to_string();
            let (f, inv, p) = (file.display().to_string(), inventory.clone(), packs.clone());
            let d = data.clone();
            let run = std::thread::spawn(move || {
                opsgraph(&["--data-dir", &d, "apply", "-f", &f, "--packs", &p, "--inventory", &inv, "--yes"])
            });
            (fault, node, data, run)
        })
        .collect();
    let mut wrong = Vec::new();
    for (fault, node, data, run) in runs {
        let run = run.join().unwrap();
        assert_eq!(run.code, 1, "{}: the apply must fail: {}", fault.file, run.render());
        let op = run.operation_id();
        let stored = std::fs::read_to_string(corpus.join(fault.file)).unwrap_or_default();
        let expect = stored.lines().next().and_then(|l| l.strip_prefix("# expect: ")).unwrap_or("none none");
        let found = json(&opsgraph(&["--data-dir", &data, "diagnose", &op, "--packs", &packs, "-o", "json"]));
        let failed = found.as_array().unwrap().first().cloned().unwrap_or_default();
        let remedy = failed["remedy"].as_str().unwrap_or("none");
        println!("{}: {} -> {remedy}: {}", fault.file, failed["job"], failed["cause"]);
        if update {
            let doc = document(&data, &op, expect, fault, &node);
            std::fs::write(corpus.join(fault.file), doc).unwrap();
        }
        // The fault is met by the job the document captured; a run that failed before it got
        // there (a package cache that stalled, a timeout on a loaded machine) says so.
        let captured = stored.lines().find_map(|l| l.strip_prefix("  job: ")).unwrap_or_default();
        if !update && failed["job"] != captured {
            wrong.push(format!(
                "{}: the run failed at {} before meeting the fault at {captured}: {}",
                fault.file, failed["job"], failed["cause"]
            ));
        } else if expect.split(' ').next() != Some(remedy) {
            wrong.push(format!("{}: expected {expect}, diagnose says {remedy}: {failed}", fault.file));
        }
    }
    drop(fleet);
    assert_eq!(machine(), before, "down leaves the machine as it found it");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    for fault in FAULTS {
        assert!(Path::new(&corpus.join(fault.file)).is_file(), "{} is not captured (UPDATE_CORPUS=1)", fault.file);
    }
}
