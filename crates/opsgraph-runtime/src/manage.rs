//! Changes people make to what operations work with — resources stored by hand, installed packs —
//! and the guards shared by the CLI and the server: nothing an unfinished operation depends on is
//! changed under it.

use opsgraph_core::model::{Intent, OperationState, Resource};
use opsgraph_core::plan::{lifecycle, Plan, Recorded};
use opsgraph_store::{now, OperationFilter, OperationRecord, ResourceRecord, Store, Write};
use serde_json::{json, Value};

use crate::Error;

/// The resources a plan is built from: `given` (an inventory; it wins for a resource it also
/// describes) plus the resources earlier operations and people stored. The one assembly of the
/// world's resources, for `opsgraph plan`, `opsgraph apply` and the server alike: a preview
/// sees what the run will bind.
pub fn world_resources(given: &[Resource], store: &dyn Store) -> Result<Vec<Resource>, Error> {
    let mut resources = given.to_vec();
    for r in store.resources()? {
        if let Ok(doc) = serde_json::from_value::<Resource>(r.doc) {
            if !resources.iter().any(|x| x.id == doc.id) {
                resources.push(doc);
            }
        }
    }
    Ok(resources)
}

/// The completed operations of a resource's current life, oldest first, with their plans: those
/// after the latest one that removed it (an `uninstall`), rollbacks left out (they undo, they
/// configure nothing) and so is each operation a completed rollback undid (an upgrade rolled
/// back: the record is the one before it; the creating operation rolled back: nothing is left).
pub(crate) fn completed_plans(store: &dyn Store, resource: &str) -> Result<Vec<(OperationRecord, Plan)>, Error> {
    let ops = store.operations(&OperationFilter { state: None, resource: Some(resource.to_string()) })?;
    let mut out: Vec<(OperationRecord, Plan)> = Vec::new();
    for op in ops {
        if op.state != OperationState::Completed {
            continue;
        }
        let Some(plan) = store.plan(&op.plan_revision)? else { continue };
        let Ok(plan) = serde_json::from_value::<Plan>(plan) else { continue };
        if plan.action == "rollback" {
            // Undoing what created it undoes its whole life; undoing a day-2 action, that one.
            match out.first() {
                Some((first, _)) if Some(&first.id) == plan.rolls_back.as_ref() => out.clear(),
                _ => out.retain(|(o, _)| Some(&o.id) != plan.rolls_back.as_ref()),
            }
        } else if plan.removes_resource {
            out.clear();
        } else {
            out.push((op, plan));
        }
    }
    Ok(out)
}

/// What the store recorded about the resource `intent` names, for a day-2 plan
/// (`opsgraph_core::plan::day2`): the stored resource, the action that created it, and the
/// parameters and targets of its completed operations — each value from the latest operation
/// that had it, so a backup (which takes no `owner`) does not hide the install's. Secret
/// parameters are never handed on (the stored plan holds them sealed): a day-2 action that needs
/// one is given it again, or asks at its missing-input gate. `None` when the store has no such
/// resource or no completed operation on it. The one assembly for `opsgraph plan`, `apply` and
/// the server.
pub fn recorded(intent: &Intent, store: &dyn Store) -> Result<Option<Recorded>, Error> {
    let Some(id) = intent.resource_id() else { return Ok(None) };
    let Some(record) = store.resource(&id)? else { return Ok(None) };
    let Ok(resource) = serde_json::from_value::<Resource>(record.doc) else { return Ok(None) };
    let plans = completed_plans(store, &id)?;
    let (Some((_, first)), Some((last, _))) = (plans.first(), plans.last()) else { return Ok(None) };
    let mut recorded = Recorded {
        resource,
        created_by: first.action.clone(),
        operation: last.id.clone(),
        parameters: Default::default(),
        targets: Default::default(),
    };
    for (_, plan) in &plans {
        for (name, value) in &plan.parameters {
            if !plan.secret_parameters.contains(name) && !crate::secrets::is_sealed(value) {
                recorded.parameters.insert(name.clone(), value.clone());
            }
        }
        if plan.removes_targets {
            // Removed (`remove_node`): what it targeted is no longer the resource's.
            let gone: Vec<&String> = plan.intent.targets.values().flatten().collect();
            for ids in recorded.targets.values_mut() {
                ids.retain(|id| !gone.contains(&id));
            }
            continue;
        }
        let inherited = plan.inherited.iter().flat_map(|i| &i.targets);
        for (key, ids) in plan.intent.targets.iter().chain(inherited) {
            recorded.targets.insert(key.clone(), ids.clone());
        }
    }
    Ok(Some(recorded))
}

/// The unfinished operation (not `completed` or `cancelled`) that targets `resource`, if any.
pub fn operation_changing(store: &dyn Store, resource: &str) -> Result<Option<OperationRecord>, Error> {
    let ops = store.operations(&OperationFilter { state: None, resource: Some(resource.to_string()) })?;
    Ok(ops.into_iter().find(|o| !lifecycle::is_terminal(&o.state)))
}

/// The unfinished operation whose plan runs pack `reference` (`id@version`) with these files
/// (`digest`; `None` matches any), if any.
pub fn operation_using_pack(
    store: &dyn Store,
    reference: &str,
    digest: Option<&str>,
) -> Result<Option<OperationRecord>, Error> {
    for op in store.operations(&OperationFilter::default())? {
        if lifecycle::is_terminal(&op.state) {
            continue;
        }
        let Some(plan) = store.plan(&op.plan_revision)? else { continue };
        let Ok(plan) = serde_json::from_value::<opsgraph_core::plan::Plan>(plan) else { continue };
        let same_files = match (plan.pack_digest.as_deref(), digest) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        if plan.pack == reference && same_files {
            return Ok(Some(op));
        }
    }
    Ok(None)
}

fn busy(op: OperationRecord, resource: &str) -> Error {
    Error::Busy {
        resource: resource.to_string(),
        operation: op.id,
        state: lifecycle::state_name(op.state.kind()).to_string(),
    }
}

/// What [`apply_resource`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upsert {
    Created,
    Updated,
    /// The stored document is the same: nothing written, nothing audited.
    Unchanged,
}

impl Upsert {
    pub fn as_str(self) -> &'static str {
        match self {
            Upsert::Created => "created",
            Upsert::Updated => "updated",
            Upsert::Unchanged => "unchanged",
        }
    }
}

fn audit(actor: &str, action: &str, resource: &str, detail: Value) -> Write {
    Write::Audit(crate::audit::record(actor, action, resource, None, Some(resource), detail))
}

/// Stores a resource document (insert or replace) with its `resource.apply` audit row in one
/// transaction. Refused (`Error::Busy`) while an unfinished operation targets it. The operation
/// that last wrote the row stays recorded.
pub fn apply_resource(store: &mut dyn Store, resource: &Resource, actor: &str) -> Result<Upsert, Error> {
    if let Some(op) = operation_changing(&*store, &resource.id)? {
        return Err(busy(op, &resource.id));
    }
    let doc = serde_json::to_value(resource).map_err(opsgraph_store::Error::from)?;
    let old = store.resource(&resource.id)?;
    let result = match &old {
        None => Upsert::Created,
        Some(r) if r.doc == doc => return Ok(Upsert::Unchanged),
        Some(_) => Upsert::Updated,
    };
    let record = ResourceRecord {
        id: resource.id.clone(),
        doc,
        last_operation: old.and_then(|r| r.last_operation),
        updated_at: now(),
    };
    store.commit(&[
        Write::Resource(record),
        audit(actor, "resource.apply", &resource.id, json!({"result": result.as_str(), "type": resource.type_})),
    ])?;
    Ok(result)
}

/// Deletes a stored resource with its `resource.delete` audit row in one transaction; `false`
/// when there is none. Refused (`Error::Busy`) while an unfinished operation targets it.
pub fn delete_resource(store: &mut dyn Store, id: &str, actor: &str) -> Result<bool, Error> {
    let Some(old) = store.resource(id)? else { return Ok(false) };
    if let Some(op) = operation_changing(&*store, id)? {
        return Err(busy(op, id));
    }
    store.commit(&[
        Write::DeleteResource(id.to_string()),
        audit(actor, "resource.delete", id, json!({"last_operation": old.last_operation})),
    ])?;
    Ok(true)
}
