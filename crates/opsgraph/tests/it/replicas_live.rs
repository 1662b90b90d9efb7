//! A running job's live output on every server replica, not only on the one that drives it: two
//! `opsgraph serve` replicas on one PostgreSQL database, each with a data directory of its own
//! (as on two machines), one job that prints a line and waits. Both replicas' log route shows the
//! line while the job runs; once it ended both show its final log, and the shared pieces are gone
//! from the database. Skipped with a `SKIPPED` line when PostgreSQL is unreachable, except under
//! `CI=true`.

use std::time::{Duration, Instant};

use crate::replicas::replica;
use crate::support::temp_dir;

const PACK: &[(&str, &str)] = &[
    (
        "talk/pack.yaml",
        "scenario_pack:\n  id: talk\n  version: 1.0.0\n  resource_types: [talk.thing]\n  actions: [run]\n  plan_templates: [{id: talk.run}]\n",
    ),
    (
        "talk/templates.yaml",
        "plan_template:\n  id: talk.run\n  action: run\n  parameters:\n    go: {type: string, required: true}\n  stages:\n    - {id: all, name: All, jobs: [speak]}\n  jobs: [speak]\n",
    ),
    ("talk/jobs.yaml", "job: {id: speak, run: {script: scripts/speak.sh}}\n"),
    (
        "talk/scripts/speak.sh",
        "echo \"first line of $OPSGRAPH_JOB_ID\"\nwhile [ ! -e \"$OPSGRAPH_PARAM_GO\" ]; do sleep 0.05; done\necho 'last line'\n",
    ),
];

#[test]
fn every_replica_shows_a_running_jobs_output() {
    let Some(db) = opsgraph_store_pg::test_db("replicas_live::every_replica_shows_a_running_jobs_output") else {
        return;
    };
    let dir = temp_dir(PACK);
    let go = dir.join("go");
    let token = format!("og_{}", "l".repeat(43));
    let token_file = dir.join("admin.token");
    std::fs::write(&token_file, &token).unwrap();
    let replicas: Vec<_> = ["live-a", "live-b"]
        .iter()
        .map(|id| {
            let data = dir.join(&format!("data-{id}"));
            (*id, replica(id, &data, db.url(), &dir.join("talk"), &token_file, &dir.join(&format!("{id}.log"))))
        })
        .collect();
    let intent = format!(
        "intent:\n  target_resource_type: talk.thing\n  action: run\n  name: t1\n  parameters: {{go: '{}'}}\n",
        go.display()
    );
    let (status, created) = crate::server::http(replicas[0].1.addr, "POST", "/api/v1/operations", &token, &intent);
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let log =
        |addr| crate::server::http(addr, "GET", &format!("/api/v1/operations/{id}/jobs/speak/log?after=0"), &token, "");

    // While it runs: each replica shows the line, the one that does not drive it too.
    let store = db.store();
    let started = Instant::now();
    let mut shown = Vec::new();
    for (name, r) in &replicas {
        let body = loop {
            let (status, body) = log(r.addr);
            assert_eq!(status, 200, "{body}");
            if body["text"].as_str().unwrap_or_default().contains("first line") {
                break body;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{name} shows no live output: {body} (lease {:?})",
                store.lease(&id)
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!((body["running"].as_bool(), body["final"].as_bool()), (Some(true), Some(false)), "{name}: {body}");
        assert_eq!(body["text"], "first line of speak\n", "{name}: {body}");
        shown.push(*name);
    }
    let driver = store.lease(&id).unwrap().expect("the driving replica holds a lease").holder;
    assert_eq!(shown.len(), 2);
    assert!(["live-a", "live-b"].contains(&driver.as_str()), "{driver}");

    // Once it ended: the final log on both; no shared piece is left.
    std::fs::write(&go, "").unwrap();
    for (name, r) in &replicas {
        let body = loop {
            let (_, body) = log(r.addr);
            if body["final"].as_bool() == Some(true) {
                break body;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "{name}: the job does not end: {body}");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(body["text"], "first line of speak\nlast line\n", "{name}: {body}");
    }
    use opsgraph_store::BlobStore;
    let blobs = opsgraph_store_pg::PgBlobStore::connect(db.url()).unwrap();
    let left = blobs.live(&opsgraph_store::LogKey::new(&id, "speak", 1), 0).unwrap();
    assert_eq!(left, None, "shared live pieces left after the final log");
}
