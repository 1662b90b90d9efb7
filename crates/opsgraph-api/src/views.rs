//! The documents of stored records, built once: the server's handlers serve them and the CLI's
//! local client returns them, so the two cannot drift.

use std::collections::HashMap;

use opsgraph_core::model::{JobState, OperationState};
use opsgraph_core::plan::lifecycle::state_name;
use opsgraph_store::{ArtifactRecord, JobRecord, OperationRecord, ResourceRecord, Store, TimelineEntry, TokenRecord};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::dto::{
    ArtifactView, OperationSummary, OperationView, ResourceRow, ResourceView, StageStatus, StageView, TimelineView,
    TokenView,
};
use crate::replies::OperationItem;

/// The state in words: its reason, or the gates it waits at.
pub fn detail(state: &OperationState) -> String {
    match state {
        OperationState::Failed { reason } => format!("failed: {reason}"),
        OperationState::Paused { reason } => format!("paused: {reason}"),
        OperationState::Cancelled { reason } => format!("cancelled: {reason}"),
        OperationState::WaitingForApproval { gates } => format!("waiting for approval at {}", gates.join(", ")),
        OperationState::WaitingForInput { gates } => format!("waiting for input at {}", gates.join(", ")),
        other => state_name(other.kind()).to_string(),
    }
}

pub fn operation_summary(o: &OperationRecord) -> OperationSummary {
    OperationSummary {
        id: o.id.clone(),
        parent: o.parent.clone(),
        state: o.state.kind(),
        detail: detail(&o.state),
        resource: o.resource.clone(),
        actor: o.actor.clone(),
        plan_revision: o.plan_revision.clone(),
        created_at: o.created_at.clone(),
        updated_at: o.updated_at.clone(),
    }
}

/// An operation as `GET /operations` lists it: its summary, the pack its plan records and its
/// intent's environment.
pub fn operation_item(store: &dyn Store, o: &OperationRecord) -> Result<OperationItem, opsgraph_store::Error> {
    let text = |k: &str| o.intent.get(k).and_then(Value::as_str).map(str::to_string);
    Ok(OperationItem {
        summary: operation_summary(o),
        pack: planned_pack(store, &o.plan_revision)?.or_else(|| text("pack")),
        environment: text("environment"),
    })
}

/// Packs of plan revisions already read, at most [`PACKS_KEPT`] (then it starts over).
static PACKS: std::sync::Mutex<Option<HashMap<String, Option<String>>>> = std::sync::Mutex::new(None);
const PACKS_KEPT: usize = 4096;

/// The pack a stored plan records. A revision is the hash of its plan's content, so what was read
/// once holds for good: a server lists each plan's pack after reading its text once, not on every
/// request (a 10,000-job plan is 1.7 MB of text, a 100,000-job one ten times that).
fn planned_pack(store: &dyn Store, revision: &str) -> Result<Option<String>, opsgraph_store::Error> {
    #[derive(Deserialize)]
    struct PackOnly {
        #[serde(default)]
        pack: Option<String>,
    }
    if let Some(known) = PACKS.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|m| m.get(revision)) {
        return Ok(known.clone());
    }
    let Some(plan) = store.plan_text(revision)? else { return Ok(None) };
    let pack = serde_json::from_str::<PackOnly>(&plan)?.pack;
    let mut kept = PACKS.lock().unwrap_or_else(|e| e.into_inner());
    let map = kept.get_or_insert_with(HashMap::new);
    if map.len() >= PACKS_KEPT {
        map.clear();
    }
    map.insert(revision.to_string(), pack.clone());
    Ok(pack)
}

/// Whether a listed pack (`id@version`) is the one a filter names: `id@version` exactly, or `id`
/// at any version.
pub fn pack_matches(listed: Option<&str>, wanted: &str) -> bool {
    let Some(listed) = listed else { return false };
    listed == wanted || (!wanted.contains('@') && listed.split('@').next() == Some(wanted))
}

/// Secret artifacts are shown by reference only; others with where they are kept.
pub fn artifact(a: &ArtifactRecord) -> ArtifactView {
    ArtifactView {
        id: a.id.clone(),
        job: a.job.clone(),
        sensitivity: a.sensitivity.clone(),
        size: a.size,
        at: a.at.clone(),
        reference: format!("artifact:{}/{}/{}", a.operation, a.job, a.id),
        location: (a.sensitivity != "secret").then(|| a.location.clone()),
    }
}

pub fn timeline_entry(e: &TimelineEntry) -> TimelineView {
    TimelineView {
        seq: e.seq,
        at: e.at.clone(),
        actor: e.actor.clone(),
        event: e.event.clone(),
        from: e.from.clone(),
        to: e.to.clone(),
        reason: e.reason.clone(),
        data: e.data.clone(),
    }
}

/// What a view reads of a stored plan: deserialized from its text alone, never as a whole
/// `Value` (a 10,000-job plan is tens of megabytes as one).
#[derive(Deserialize, Default)]
struct PlanOutline {
    #[serde(default)]
    pack: Option<String>,
    #[serde(default)]
    pack_digest: Option<String>,
    #[serde(default)]
    customizations: Vec<Value>,
    #[serde(default)]
    stages: Vec<StageOutline>,
    #[serde(default)]
    jobs: Vec<JobOutline>,
}

#[derive(Deserialize)]
struct StageOutline {
    id: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct JobOutline {
    id: String,
    #[serde(default)]
    stage: String,
}

/// Everything about an operation, as `opsgraph describe operation` shows it.
pub fn operation(store: &dyn Store, o: &OperationRecord) -> Result<OperationView, opsgraph_store::Error> {
    let mut view = operation_brief(store, o)?;
    view.timeline = store.timeline(&o.id)?.iter().map(timeline_entry).collect();
    Ok(view)
}

/// [`operation`] without its timeline: what a finished run prints, without reading back every
/// entry it already showed.
pub fn operation_brief(store: &dyn Store, o: &OperationRecord) -> Result<OperationView, opsgraph_store::Error> {
    // The pack it ran, pinned by digest.
    let plan: Option<PlanOutline> = store.plan_text(&o.plan_revision)?.map(|t| serde_json::from_str(&t)).transpose()?;
    let jobs = store.jobs(&o.id)?;
    let (pack, pack_digest, customizations, stages) = match plan {
        Some(p) => {
            let stages = stages(&p, &jobs);
            (p.pack, p.pack_digest, p.customizations, stages)
        }
        None => Default::default(),
    };
    Ok(OperationView {
        summary: operation_summary(o),
        intent_id: o.intent_id.clone(),
        plan_id: if o.plan_id.is_empty() { o.plan_revision.clone() } else { o.plan_id.clone() },
        customized: !customizations.is_empty(),
        customizations,
        pack,
        pack_digest,
        stages,
        intent: hide_sealed(o.intent.clone()),
        gates: gates(store, o)?.gates,
        waiting_at: waiting_at(&o.state).to_vec(),
        jobs,
        evidence: store.evidence(&o.id)?,
        artifacts: store.artifacts(&o.id)?.iter().map(artifact).collect(),
        timeline: Vec::new(),
    })
}

/// The plan's stages, each with the job instances in it (the plan names template jobs; an
/// instance records its stage).
fn stages(plan: &PlanOutline, records: &[JobRecord]) -> Vec<StageView> {
    let state: HashMap<&str, JobState> = records.iter().map(|r| (r.id.as_str(), r.state)).collect();
    let mut in_stage: HashMap<&str, Vec<String>> = HashMap::new();
    for j in &plan.jobs {
        in_stage.entry(j.stage.as_str()).or_default().push(j.id.clone());
    }
    plan.stages
        .iter()
        .map(|s| {
            let ids = in_stage.remove(s.id.as_str()).unwrap_or_default();
            let states: Vec<JobState> = ids.iter().filter_map(|id| state.get(id.as_str()).copied()).collect();
            StageView { id: s.id.clone(), name: s.name.clone(), status: stage_status(&states), jobs: ids }
        })
        .collect()
}

/// A stage's status from its jobs' states (protocol §2: a Stage has a status).
fn stage_status(states: &[JobState]) -> StageStatus {
    let done = |s: &JobState| {
        matches!(
            s,
            JobState::Succeeded
                | JobState::AlreadySatisfied
                | JobState::Recovered
                | JobState::ManuallyFixed
                | JobState::Skipped
        )
    };
    if states.is_empty() {
        StageStatus::Pending
    } else if states.iter().any(|s| matches!(s, JobState::Failed)) {
        StageStatus::Failed
    } else if states.iter().any(|s| matches!(s, JobState::Cancelled)) {
        StageStatus::Cancelled
    } else if states.iter().any(|s| matches!(s, JobState::Running)) {
        StageStatus::Running
    } else if states.iter().all(done) {
        StageStatus::Completed
    } else if states.iter().any(done) {
        StageStatus::Waiting
    } else {
        StageStatus::Pending
    }
}

/// A resource in a list.
pub fn resource_row(r: &ResourceRecord) -> ResourceRow {
    ResourceRow {
        id: r.id.clone(),
        status: r.doc["status"].clone(),
        health: r.doc["health"].clone(),
        last_operation: r.last_operation.clone(),
        observed_state: r.doc["observed_state"].clone(),
        updated_at: r.updated_at.clone(),
    }
}

/// How many entries of a resource's history its view shows.
pub const HISTORY_SHOWN: usize = 20;

/// A resource with the operations that touched it.
pub fn resource(store: &dyn Store, r: &ResourceRecord) -> Result<ResourceView, opsgraph_store::Error> {
    let filter = opsgraph_store::OperationFilter { state: None, resource: Some(r.id.clone()) };
    Ok(ResourceView {
        id: r.id.clone(),
        resource: r.doc.clone(),
        last_operation: r.last_operation.clone(),
        updated_at: r.updated_at.clone(),
        operations: store.operations(&filter)?.iter().map(operation_summary).collect(),
        history: store.resource_events(&r.id, HISTORY_SHOWN)?,
    })
}

pub fn token(t: &TokenRecord) -> TokenView {
    TokenView {
        id: t.id.clone(),
        name: t.name.clone(),
        roles: t.roles.clone(),
        created_by: t.created_by.clone(),
        created_at: t.created_at.clone(),
        revoked_at: t.revoked_at.clone(),
    }
}

/// Sealed values (secret parameters, secret gate answers) are shown as references, never as
/// their ciphertext: `{"secret": "sealed"}`.
pub fn hide_sealed(v: Value) -> Value {
    match v {
        Value::String(s) if s.starts_with("sealed:") => json!({"secret": "sealed"}),
        Value::Array(items) => Value::Array(items.into_iter().map(hide_sealed).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, hide_sealed(v))).collect()),
        other => other,
    }
}

/// Each attempt's captured (masked) output, read from the operation's run directory
/// (`runs/<op>/<job>.<attempt>.log`): one job (`JOB`, or its instances `JOB@…`) or all.
pub fn logs(
    store: &dyn Store,
    blobs: &dyn opsgraph_store::BlobStore,
    op: &str,
    job: Option<&str>,
) -> Result<Vec<crate::dto::LogEntry>, opsgraph_store::Error> {
    let mut list = Vec::new();
    for j in store.jobs(op)?.iter().filter(|j| job.is_none_or(|x| j.id == x || j.id.starts_with(&format!("{x}@")))) {
        for attempt in 1..=j.attempts {
            let text = blobs.log(&opsgraph_store::LogKey::new(op, &j.id, attempt)).ok().flatten();
            let output = text.map(|b| String::from_utf8_lossy(&b).into_owned());
            list.push(crate::dto::LogEntry { job: j.id.clone(), attempt, output });
        }
    }
    Ok(list)
}

/// `job`'s latest attempt's output (`GET /operations/{id}/jobs/{job}/log?after=`, `logs --follow`):
/// its live log from byte `after` on while it runs (read from `data_dir`'s run directory, or as
/// the replica driving it shares it through `blobs`), its whole final log once it ended; `None` when the operation has no such job.
pub fn job_log(
    store: &dyn Store,
    blobs: &dyn opsgraph_store::BlobStore,
    data_dir: &std::path::Path,
    op: &str,
    job: &str,
    after: u64,
) -> Result<Option<crate::replies::JobLog>, opsgraph_runtime::Error> {
    let Some(record) = store.jobs(op)?.into_iter().find(|j| j.id == job) else { return Ok(None) };
    let running = record.state == JobState::Running;
    let mut log = crate::replies::JobLog {
        job: record.id,
        state: record.state,
        attempt: record.attempts,
        running,
        from: after,
        next: after,
        text: String::new(),
        final_log: false,
    };
    if record.attempts == 0 {
        return Ok(Some(log));
    }
    if running {
        if let Some(t) = opsgraph_runtime::live_log(data_dir, blobs, op, &log.job, record.attempts, after)? {
            (log.from, log.next, log.text) = (t.from, t.next, t.text);
        }
    } else {
        let bytes = blobs.log(&opsgraph_store::LogKey::new(op, &log.job, record.attempts))?.unwrap_or_default();
        (log.from, log.next, log.final_log) = (0, bytes.len() as u64, true);
        log.text = String::from_utf8_lossy(&bytes).into_owned();
    }
    Ok(Some(log))
}

/// An operation's gates with its current plan revision; sealed values as references.
pub fn gates(store: &dyn Store, o: &OperationRecord) -> Result<crate::dto::GateList, opsgraph_store::Error> {
    let mut gates = store.gates(&o.id)?;
    for g in &mut gates {
        g.value = g.value.take().map(hide_sealed);
    }
    Ok(crate::dto::GateList { plan_revision: o.plan_revision.clone(), gates })
}

/// The gates an operation in `state` waits at: none unless it waits for a person.
pub fn waiting_at(state: &OperationState) -> &[String] {
    match state {
        OperationState::WaitingForApproval { gates } | OperationState::WaitingForInput { gates } => gates,
        _ => &[],
    }
}

/// The exit status of a command that leaves an operation in `state`: 1 when it failed or was
/// cancelled; 0 when it completed, runs or waits for a person.
pub fn exit_code(state: opsgraph_core::model::OperationStateKind) -> u8 {
    use opsgraph_core::model::OperationStateKind as K;
    u8::from(matches!(state, K::Failed | K::Cancelled))
}

/// A manual fix as recorded and verified by the runtime.
pub fn intervention(operation: &str, v: &opsgraph_runtime::Verified) -> crate::dto::InterventionReply {
    crate::dto::InterventionReply {
        id: operation.to_string(),
        intervention: v.intervention.clone(),
        jobs: v.jobs.clone(),
        checks: v
            .checks
            .iter()
            .map(|(job, check, passed, expected, observed)| crate::dto::CheckResult {
                job: job.clone(),
                check: check.clone(),
                passed: *passed,
                expected: expected.clone(),
                observed: observed.clone(),
            })
            .collect(),
        state: v.state.kind(),
        detail: detail(&v.state),
    }
}

/// A plan patch as proposed, of operation `operation`.
pub fn patch_reply(operation: &str, p: &opsgraph_runtime::Proposal) -> crate::dto::PatchReply {
    crate::dto::PatchReply {
        id: operation.to_string(),
        patch: p.patch.clone(),
        diff: p.diff.clone(),
        diff_text: p.diff.text(),
        findings: p.findings.clone(),
        gate: p.gate.clone(),
        approval: serde_json::to_value(&p.approval).unwrap_or(Value::Null),
        state: p.state.kind(),
        detail: detail(&p.state),
    }
}

/// The analyzer's findings as the API serves them.
pub fn diagnosis(d: &opsgraph_runtime::Diagnosis) -> crate::dto::DiagnosisView {
    crate::dto::DiagnosisView {
        operation: d.operation.clone(),
        job: d.job.clone(),
        summary: d.summary.clone(),
        cause: d.cause.clone(),
        confidence: d.confidence,
        evidence: d.evidence.clone(),
        remedy: d.remedy.clone(),
        source: d.remedy.as_ref().map(|_| crate::dto::RemedySource::of(d.from_library)),
        patch: serde_json::to_value(&d.patch).unwrap_or(Value::Null),
        analyzer: d.analyzer.clone(),
    }
}

/// The AI analyzer's answer as the API serves it: its patch only when the reviewer passed it,
/// and the review.
pub fn ai_diagnosis(
    operation: &str,
    d: &opsgraph_runtime::ai::AiDiagnosis,
) -> (crate::dto::DiagnosisView, Option<crate::dto::ReviewView>) {
    let a = &d.answer;
    let passed = matches!(d.review, Some(Ok(_)));
    let view = crate::dto::DiagnosisView {
        operation: operation.to_string(),
        job: a.jobs.join(", "),
        summary: a.summary.clone(),
        cause: a.cause.clone(),
        confidence: a.confidence,
        evidence: a.evidence.clone(),
        remedy: a.remedy.clone(),
        source: a.remedy.as_ref().map(|_| crate::dto::RemedySource::of(a.from_library)),
        patch: a
            .plan_patch
            .as_ref()
            .filter(|_| passed)
            .map(|p| serde_json::to_value(p).unwrap_or(Value::Null))
            .unwrap_or(Value::Null),
        analyzer: "ai".into(),
    };
    let review = d.review.as_ref().map(|r| match r {
        Ok(findings) => crate::dto::ReviewView { state: "passed".into(), findings: findings.clone() },
        Err(findings) => crate::dto::ReviewView { state: "refused".into(), findings: findings.clone() },
    });
    (view, review)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stage's status from its jobs' states.
    #[test]
    fn a_stage_status_follows_its_jobs() {
        use JobState::*;
        let cases: &[(&[JobState], &str)] = &[
            (&[], "pending"),
            (&[Pending, Pending], "pending"),
            (&[Succeeded, Pending], "waiting"),
            (&[Succeeded, Running], "running"),
            (&[Succeeded, Skipped, Recovered], "completed"),
            (&[Succeeded, Failed, Running], "failed"),
            (&[Succeeded, Cancelled], "cancelled"),
        ];
        for (states, want) in cases {
            assert_eq!(serde_json::to_value(stage_status(states)).unwrap(), *want, "{states:?}");
        }
    }

    /// The gates an operation waits at are its state's, typed; `detail` names the same ones.
    fn check(state: OperationState, expect: &[&str]) {
        assert_eq!(waiting_at(&state), expect, "{state:?}");
        for g in expect {
            assert!(detail(&state).contains(g), "{}", detail(&state));
        }
    }

    #[test]
    fn waiting_gates_are_the_gates_of_the_state() {
        let gates = |g: &[&str]| g.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        check(OperationState::WaitingForApproval { gates: gates(&["approve"]) }, &["approve"]);
        check(OperationState::WaitingForInput { gates: gates(&["a", "patch-p1"]) }, &["a", "patch-p1"]);
        check(OperationState::Failed { reason: "x at y, z".into() }, &[]);
        check(OperationState::Paused { reason: "waiting for approval at g".into() }, &[]);
        check(OperationState::Running, &[]);
    }

    #[test]
    fn only_failed_and_cancelled_operations_exit_1() {
        use opsgraph_core::model::OperationStateKind as K;
        let ones: Vec<K> = [K::Running, K::Failed, K::Cancelled, K::Completed, K::WaitingForApproval, K::Paused]
            .into_iter()
            .filter(|k| exit_code(*k) == 1)
            .collect();
        assert_eq!(ones, [K::Failed, K::Cancelled]);
    }
}
