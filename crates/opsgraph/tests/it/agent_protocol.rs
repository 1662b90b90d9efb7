//! The agent protocol by hand against a real `opsgraph serve` (the `Cluster` of `agent.rs`):
//! protocol 2's claims of a batch under one lease and reports carrying the job's last lines;
//! protocol 3's report that claims the agent's next task in the commit that lands it (the
//! driver's, with the job's result; sent again, the same task), a refused report that claims
//! nothing, and `next` saying when nothing is queued.

use std::time::{Duration, Instant};

use opsgraph_store::Store as _;
use serde_json::Value;

use crate::agent::{intent, nodes, pack, Cluster, STEP};

/// Protocol 2, by hand: a claim takes a batch under one lease (retried with that lease, the same
/// batch); a report carries the job's last lines and lands with them or not at all.
#[test]
fn a_claim_takes_a_batch_under_one_lease_and_a_report_lands_with_its_last_lines() {
    let mut files = pack(1, STEP, "");
    files.push(("inventory/nodes.yaml".into(), nodes(&["w0", "w1", "w2"], "pool")));
    let c = Cluster::new(files, "30s", "60s");
    let token = std::fs::read_to_string(&c.agent_token).unwrap();
    let claim = |body: &str| c.call("POST", "/api/v1/agent/claim", &token, body);
    for bad in [0, 65] {
        let (status, refused) = claim(&format!(r#"{{"wait_ms": 0, "max_tasks": {bad}}}"#));
        assert_eq!((status, refused["error"]["code"].as_str()), (422, Some("invalid_max_tasks")), "{refused}");
    }
    let id = c.create(&intent(&["w0", "w1", "w2"], &c.dir.join("ledger")));
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.store().agent_tasks(&id).unwrap().len() < 3 {
        assert!(Instant::now() < deadline, "the tasks were not queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Two of the three, oldest first, under one lease; the same two again with that lease.
    let lease = "lease-of-the-batch-0001";
    let batch = format!(r#"{{"wait_ms": 0, "max_tasks": 2, "lease": "{lease}"}}"#);
    let ids = |v: &Value| -> Vec<String> {
        std::iter::once(&v["task"])
            .chain(v["more"].as_array().into_iter().flatten().map(|m| &m["task"]))
            .map(|t| t["id"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let (status, first) = claim(&batch);
    assert_eq!((status, first["protocol"].as_u64(), first["lease"].as_str()), (200, Some(3), Some(lease)), "{first}");
    let got = ids(&first);
    assert_eq!(got.len(), 2, "{first}");
    assert!(first["more"][0]["payload"]["env"]["OPSGRAPH_PARAM_LEDGER"].is_string(), "{first}");
    assert_eq!(ids(&claim(&batch).1), got);
    let (_, rest) = claim(r#"{"wait_ms": 0, "max_tasks": 5, "lease": "lease-of-the-batch-0002"}"#);
    assert_eq!(ids(&rest).len(), 1, "{rest}");
    let report = |task: &str, lease: &str, check: &str, text: &str| {
        serde_json::json!({"task": task, "lease": lease, "text": text, "report": {
            "outcome": "exit code 0", "failure": null, "satisfied_without_run": false, "cancelled": false,
            "produced": [], "duration_ms": 1,
            "evidence": [{"check": check, "passed": true, "expected": "", "observed": "", "detail": "", "attempts": 1}]}})
        .to_string()
    };
    let logged = |task: &str| c.store().agent_log(task, 0).unwrap().len();
    // Refused (undeclared evidence, a stale lease): the last lines are not kept either.
    let (status, _) = c.call("POST", "/api/v1/agent/report", &token, &report(&got[0], lease, "healthy", "last\n"));
    assert_eq!((status, logged(&got[0])), (422, 0));
    let (status, _) =
        c.call("POST", "/api/v1/agent/report", &token, &report(&got[0], "not-the-lease-0000", "done", "x\n"));
    assert_eq!((status, logged(&got[0])), (409, 0));
    // Accepted: the lines and the outcome in one commit, each task of the batch on its own.
    let all = [(got[0].clone(), lease), (got[1].clone(), lease), (ids(&rest)[0].clone(), "lease-of-the-batch-0002")];
    for (task, lease) in &all {
        let job = task.split('/').nth(1).unwrap();
        let text = format!("last line of {job}\n");
        let (status, body) = c.call("POST", "/api/v1/agent/report", &token, &report(task, lease, "done", &text));
        assert_eq!(status, 200, "{body}");
        // Sent again (its answer was lost): done already, nothing added.
        assert_eq!(c.call("POST", "/api/v1/agent/report", &token, &report(task, lease, "done", &text)).0, 200);
        assert_eq!(logged(task), 1);
    }
    // The evidence an agent reports decides, as for any agent: the operation completes, and each
    // attempt's log holds its last line.
    let (state, detail) = c.wait(&id, Duration::from_secs(30));
    assert_eq!(state, "completed", "{detail}");
    for node in ["w0", "w1", "w2"] {
        let log = std::fs::read_to_string(c.dir.join(&format!("data/runs/{id}/j0@{node}.1.log"))).unwrap();
        assert_eq!(log, format!("last line of j0@{node}\n"));
    }
}

/// Protocol 3, by hand: a report claims the agent's next task in its commit and answers it in
/// `next` (sent again, the same task); a refused report claims nothing; with nothing queued,
/// `next` says so.
#[test]
fn a_report_claims_the_next_task_in_its_commit() {
    let mut files = pack(1, STEP, "");
    files.push(("inventory/nodes.yaml".into(), nodes(&["w0", "w1", "w2"], "pool")));
    let c = Cluster::new(files, "30s", "60s");
    let token = std::fs::read_to_string(&c.agent_token).unwrap();
    let id = c.create(&intent(&["w0", "w1", "w2"], &c.dir.join("ledger")));
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.store().agent_tasks(&id).unwrap().len() < 3 {
        assert!(Instant::now() < deadline, "the tasks were not queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, first) =
        c.call("POST", "/api/v1/agent/claim", &token, r#"{"wait_ms": 0, "lease": "lease-of-task-one-0001"}"#);
    assert_eq!((status, first["protocol"].as_u64()), (200, Some(3)), "{first}");
    let report = |task: &str, lease: &str, claim: Value| {
        serde_json::json!({"task": task, "lease": lease, "claim": claim, "report": {
            "outcome": "exit code 0", "failure": null, "satisfied_without_run": false, "cancelled": false,
            "produced": [], "duration_ms": 1,
            "evidence": [{"check": "done", "passed": true, "expected": "", "observed": "", "detail": "", "attempts": 1}]}})
        .to_string()
    };
    let post = |body: String| c.call("POST", "/api/v1/agent/report", &token, &body);
    let state = |task: &str| c.store().agent_task(task).unwrap().unwrap().state.as_str();
    let queued = |id: &str| c.store().agent_tasks(id).unwrap().iter().filter(|t| t.state.as_str() == "queued").count();
    let task1 = first["task"]["id"].as_str().unwrap().to_string();
    // Refused: a claim that would wait, one without its lease, a stale report: nothing changes.
    for (claim, lease, code) in [
        (
            serde_json::json!({"lease": "lease-of-task-two-0002", "wait_ms": 5}),
            "lease-of-task-one-0001",
            "invalid_claim",
        ),
        (serde_json::json!({}), "lease-of-task-one-0001", "invalid_claim"),
        (serde_json::json!({"lease": "lease-of-task-two-0002"}), "not-the-lease-00000", "stale_lease"),
    ] {
        let (status, refused) = post(report(&task1, lease, claim));
        assert_eq!(refused["error"]["code"].as_str(), Some(code), "{status} {refused}");
        assert_eq!((state(&task1), queued(&id)), ("claimed", 2));
    }
    // Accepted: reported, and the next task claimed under the claim's lease, with its payload.
    let two = serde_json::json!({"lease": "lease-of-task-two-0002", "instance": "here/1"});
    let (status, answer) = post(report(&task1, "lease-of-task-one-0001", two.clone()));
    assert_eq!(status, 200, "{answer}");
    let next = &answer["next"];
    assert_eq!((next["protocol"].as_u64(), next["lease"].as_str()), (Some(3), Some("lease-of-task-two-0002")));
    assert!(next["payload"]["env"]["OPSGRAPH_PARAM_LEDGER"].is_string(), "{answer}");
    let task2 = next["task"]["id"].as_str().unwrap().to_string();
    assert_ne!(task2, task1);
    assert_eq!((state(&task1), state(&task2), queued(&id)), ("reported", "claimed", 1));
    // With work queued, the report was handed to the worker waiting for its task all the same:
    // the driver committed it with the job's result and, last, the next task's claim, before the
    // agent was answered (one commit; the route committing the report and claim first put the
    // claim before the job's result on the timeline).
    let job1 = c.store().agent_task(&task1).unwrap().unwrap().job;
    let entries = c.store().timeline(&id).unwrap();
    let at = |event: &str, key: &str, value: &str| {
        entries.iter().position(|e| e.event == event && e.data[key].as_str() == Some(value))
    };
    let (succeeded, claimed) = (at("job_succeeded", "job", &job1), at("agent_claimed", "task", &task2));
    assert!(matches!((succeeded, claimed), (Some(s), Some(k)) if s < k), "{succeeded:?} {claimed:?} {entries:#?}");
    // Sent again (its answer was lost): the same next task, nothing more claimed.
    let (_, again) = post(report(&task1, "lease-of-task-one-0001", two));
    assert_eq!((again["next"]["task"]["id"].as_str(), queued(&id)), (Some(task2.as_str()), 1), "{again}");
    let three = serde_json::json!({"lease": "lease-of-task-three-03"});
    let (_, answer) = post(report(&task2, "lease-of-task-two-0002", three));
    let task3 = answer["next"]["task"]["id"].as_str().unwrap().to_string();
    // Nothing left: the report lands, and `next` says nothing was claimed.
    let (status, answer) =
        post(report(&task3, "lease-of-task-three-03", serde_json::json!({"lease": "lease-of-task-four-004"})));
    assert_eq!((status, answer["next"]["task"].is_null(), state(&task3)), (200, true, "reported"), "{answer}");
    // Nothing was queued: the report was handed to the worker waiting for its task, and the
    // driver committed it with the job's result before the agent was answered.
    let job3 = c.store().agent_task(&task3).unwrap().unwrap().job;
    let record = c.store().jobs(&id).unwrap().into_iter().find(|j| j.id == job3).unwrap();
    assert_eq!(record.state, opsgraph_core::model::JobState::Succeeded, "{record:?}");
    let audit = c.store().audit(&opsgraph_store::AuditFilter { operation: Some(id.clone()), ..Default::default() });
    assert_eq!(audit.unwrap().iter().filter(|a| a.action == "agent.report").count(), 3);
    let reported = c.store().timeline(&id).unwrap().iter().filter(|e| e.event == "agent_reported").count();
    assert_eq!(reported, 3);
    let claims = c.store().timeline(&id).unwrap().iter().filter(|e| e.event == "agent_claimed").count();
    assert_eq!(claims, 3);
    let (state, detail) = c.wait(&id, Duration::from_secs(30));
    assert_eq!(state, "completed", "{detail}");
}
