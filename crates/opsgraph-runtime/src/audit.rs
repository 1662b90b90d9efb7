//! The audit rows of what people do, built in one place for the server and the local CLI alike:
//! the same change writes the same row (action, target, detail) whoever carries it, and the row
//! joins the change's own transaction (`Runtime::attach`, or the caller's commit). Rows never
//! hold a secret value: a gate answer records that a value was given, not the value.

use opsgraph_core::plan::Plan;
use opsgraph_store::{now, AuditRecord, OperationRecord, Write};
use serde_json::{json, Value};

/// One row: who (`user:NAME`, `token:ID`, ...), what (`operation.create`, `gate.answer`, ...), to
/// what (an operation id, `op/gate`, a token id, a resource id).
pub fn record(
    actor: &str,
    action: &str,
    target: &str,
    operation: Option<&str>,
    resource: Option<&str>,
    detail: Value,
) -> AuditRecord {
    AuditRecord {
        seq: 0,
        at: now(),
        actor: actor.to_string(),
        action: action.to_string(),
        target: target.to_string(),
        operation: operation.map(str::to_string),
        resource: resource.map(str::to_string),
        detail,
    }
}

/// `operation.create`: operation `id` for `plan` (created with `Runtime::create_as`).
pub fn create(actor: &str, id: &str, plan: &Plan, idempotency_key: Option<&str>) -> Write {
    let resource = crate::Runtime::target_resource(&plan.intent);
    Write::Audit(record(
        actor,
        "operation.create",
        id,
        Some(id),
        resource.as_deref(),
        json!({"pack": plan.pack, "action": plan.action, "revision": plan.revision.hash, "idempotency_key": idempotency_key}),
    ))
}

/// `plan.customize`: one row per patch that changed the plan before its run ([O]), beside the
/// creation's row, naming the patch, its author and its diff.
pub fn customizations(actor: &str, id: &str, plan: &Plan) -> Vec<Write> {
    let resource = crate::Runtime::target_resource(&plan.intent);
    plan.customizations
        .iter()
        .map(|c| {
            let target = format!("{id}/{}", c.patch.clone().unwrap_or_else(|| format!("revision-{}", c.revision)));
            let detail = serde_json::to_value(c).unwrap_or_default();
            Write::Audit(record(actor, "plan.customize", &target, Some(id), resource.as_deref(), detail))
        })
        .collect()
}

/// `gate.answer`: `gate` of `op` answered `option` in `role`, against plan `revision`.
pub fn gate_answer(
    actor: &str,
    op: &OperationRecord,
    gate: &str,
    (option, role): (&str, &str),
    revision: &str,
    value_given: bool,
) -> Write {
    Write::Audit(record(
        actor,
        "gate.answer",
        &format!("{}/{gate}", op.id),
        Some(&op.id),
        op.resource.as_deref(),
        json!({"option": option, "role": role, "revision": revision, "value_given": value_given}),
    ))
}

/// A change to an operation: `operation.pause` (`{reason}`), `operation.resume` (`{}`),
/// `operation.cancel` (`{reason}`), `operation.retry` (`{jobs}`), `operation.patch` (`{reason}`),
/// `operation.intervene` (`{note}`).
pub fn control(actor: &str, action: &str, op: &OperationRecord, detail: Value) -> Write {
    Write::Audit(record(actor, action, &op.id, Some(&op.id), op.resource.as_deref(), detail))
}
