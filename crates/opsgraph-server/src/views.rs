//! The JSON shapes of stored records, as `describe` and `get` show them — for the API and for
//! the CLI alike, so the two cannot drift.

use opsgraph_model::OperationState;
use opsgraph_plan::lifecycle::state_name;
use opsgraph_store::{ArtifactRecord, AuditRecord, OperationRecord, Store, TimelineEntry, TokenRecord};
use serde_json::{json, Value};

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

pub fn operation_summary(o: &OperationRecord) -> Value {
    json!({
        "id": o.id,
        "parent": o.parent,
        "state": state_name(o.state.kind()),
        "detail": detail(&o.state),
        "resource": o.resource,
        "actor": o.actor,
        "plan_revision": o.plan_revision,
        "created_at": o.created_at,
        "updated_at": o.updated_at,
    })
}

/// Secret artifacts are shown by reference only; others with where they are kept.
pub fn artifact(a: &ArtifactRecord) -> Value {
    let mut v = json!({
        "id": a.id,
        "job": a.job,
        "sensitivity": a.sensitivity,
        "size": a.size,
        "at": a.at,
        "reference": format!("artifact:{}/{}/{}", a.operation, a.job, a.id),
    });
    if a.sensitivity != "secret" {
        v["location"] = json!(a.location);
    }
    v
}

pub fn timeline_entry(e: &TimelineEntry) -> Value {
    json!({
        "seq": e.seq,
        "at": e.at,
        "actor": e.actor,
        "event": e.event,
        "from": e.from,
        "to": e.to,
        "reason": e.reason,
        "data": e.data,
    })
}

/// Everything about an operation, as `opsgraph describe operation` shows it.
pub fn operation(store: &dyn Store, o: &OperationRecord) -> Result<Value, opsgraph_store::Error> {
    let mut v = operation_summary(o);
    // The pack it ran, pinned by digest.
    let plan = store.plan(&o.plan_revision)?;
    v["pack"] = plan.as_ref().map_or(Value::Null, |p| p["pack"].clone());
    v["pack_digest"] = plan.as_ref().map_or(Value::Null, |p| p["pack_digest"].clone());
    v["stages"] = plan.as_ref().map_or(json!([]), stages);
    v["intent"] = hide_sealed(o.intent.clone());
    v["gates"] = hide_sealed(json!(store.gates(&o.id)?));
    v["jobs"] = json!(store.jobs(&o.id)?);
    v["evidence"] = json!(store.evidence(&o.id)?);
    v["artifacts"] = json!(store.artifacts(&o.id)?.iter().map(artifact).collect::<Vec<_>>());
    v["timeline"] = json!(store.timeline(&o.id)?.iter().map(timeline_entry).collect::<Vec<_>>());
    Ok(v)
}

/// The plan's stages, each with the job instances in it (the plan names template jobs; an
/// instance records its stage).
fn stages(plan: &Value) -> Value {
    let empty = Vec::new();
    let jobs = plan["jobs"].as_array().unwrap_or(&empty);
    let stages = plan["stages"].as_array().unwrap_or(&empty);
    json!(stages
        .iter()
        .map(|s| {
            let in_stage: Vec<&Value> = jobs.iter().filter(|j| j["stage"] == s["id"]).map(|j| &j["id"]).collect();
            json!({"id": s["id"], "name": s["name"], "jobs": in_stage})
        })
        .collect::<Vec<_>>())
}

pub(crate) fn token(t: &TokenRecord) -> Value {
    json!({
        "id": t.id,
        "name": t.name,
        "roles": t.roles,
        "created_by": t.created_by,
        "created_at": t.created_at,
        "revoked_at": t.revoked_at,
    })
}

pub(crate) fn audit(a: &AuditRecord) -> Value {
    json!(a)
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
