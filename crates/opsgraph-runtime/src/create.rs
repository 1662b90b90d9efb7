//! Creating an operation: its record, job and gate records, and every step up to running (or a
//! wait for a person) in one transaction; sub-operations are created the same way.

use std::collections::HashSet;

use opsgraph_core::model::{GateType, OperationState};
use opsgraph_core::plan::lifecycle::{self, state_name, Event};
use opsgraph_core::plan::Plan;
use opsgraph_store::{now, GateRecord, JobRecord, JobState, OperationFilter, OperationRecord, ResourceRecord, Write};
use serde_json::{json, Value};

use crate::jobs::param_text;
use crate::timeline::{entry, Progress};
use crate::{new_operation_id, Durable, Error, Runtime};

/// An operation about to be created: its id, its parent (a sub-operation's), what its creating
/// transaction also writes (attached audit or idempotency records, the parent's note), and when
/// that transaction is durable.
pub(crate) struct New<'a> {
    pub(crate) id: String,
    pub(crate) parent: Option<&'a str>,
    pub(crate) extra: Vec<Write>,
    pub(crate) durable: Durable,
}

pub(crate) fn is_input_gate(t: GateType) -> bool {
    matches!(t, GateType::MissingInput | GateType::ProviderSelection)
}

/// What follows capability resolution: wait for input, then for approval, then run.
fn resolution_event(plan: &Plan, answered: &HashSet<String>) -> (Event, String) {
    let open = |input: bool| -> Vec<String> {
        plan.gates
            .iter()
            .filter(|g| g.source.is_pre_run() && is_input_gate(g.type_) == input && !answered.contains(&g.id))
            .map(|g| g.id.clone())
            .collect()
    };
    let (inputs, approvals) = (open(true), open(false));
    if !inputs.is_empty() {
        let reason = format!("waiting for input at {}", inputs.join(", "));
        (Event::NeedInput { gates: inputs }, reason)
    } else if !approvals.is_empty() {
        let reason = format!("waiting for approval at {}", approvals.join(", "));
        (Event::NeedApproval { gates: approvals }, reason)
    } else {
        (Event::Start, "no approval needed".to_string())
    }
}

impl Runtime {
    /// Records an operation for a plan and takes it as far as it goes without running anything:
    /// to `running`, or to a wait for input or approval.
    pub fn create(&mut self, plan: &Plan, actor: &str, progress: Progress<'_>) -> Result<String, Error> {
        // Providers the resolution creates run first, as child operations, once the run starts
        // (after every gate before the run is answered: a cost or approval gate also guards them).
        let attached = self.take_attached();
        let new = New { id: new_operation_id(), parent: None, extra: attached, durable: Durable::Now };
        self.create_operation(plan, new, actor, progress)
    }

    /// Records a child operation that creates `provider` for `requirement` of `parent`; the
    /// child and the parent's note of it are one transaction.
    pub(crate) fn start_sub_operation(
        &mut self,
        parent: &str,
        requirement: &str,
        provider: &str,
        plan: &Plan,
        actor: &str,
        progress: Progress<'_>,
    ) -> Result<String, Error> {
        let child = new_operation_id();
        let note = entry(
            parent,
            actor,
            "sub_operation_created",
            format!(
                "{requirement}: provider {provider} is created by operation {child} ({} {})",
                plan.action, plan.pack
            ),
            json!({"child": child, "requirement": requirement, "provider": provider}),
        );
        let new = New { id: child, parent: Some(parent), extra: vec![Write::Timeline(note)], durable: Durable::Now };
        self.create_operation(plan, new, actor, progress)
    }

    pub(crate) fn create_operation(
        &mut self,
        plan: &Plan,
        new: New<'_>,
        actor: &str,
        progress: Progress<'_>,
    ) -> Result<String, Error> {
        let New { id, parent, extra, durable } = new;
        if plan.is_blocked() {
            let reasons: Vec<String> = plan
                .resolution
                .iter()
                .filter_map(|r| match &r.outcome {
                    opsgraph_core::plan::Outcome::Unsatisfiable { reason } => {
                        Some(format!("{}: {reason}", r.requirement.capability))
                    }
                    _ => None,
                })
                .collect();
            return Err(Error::Blocked(reasons.join("; ")));
        }
        // A parameter naming an artifact of an earlier operation names one that exists.
        for (name, _, reference) in self.artifact_params(plan, &Default::default()) {
            self.produced_artifact(&reference).map_err(|why| Error::Unsupported(format!("parameter {name}: {why}")))?;
        }
        let resource = Runtime::target_resource(&plan.intent);
        if let Some(resource) = &resource {
            let busy = self.store.operations(&OperationFilter { state: None, resource: Some(resource.clone()) })?;
            if let Some(other) = busy.iter().find(|o| !lifecycle::is_terminal(&o.state)) {
                return Err(Error::Busy {
                    resource: resource.clone(),
                    operation: other.id.clone(),
                    state: state_name(other.state.kind()).to_string(),
                });
            }
        }
        // Secret parameter values are stored sealed (in the plan and in the intent).
        // Copied only when something is to be sealed: a 10,000-job plan is megabytes.
        let stored: std::borrow::Cow<'_, Plan> = if self.has_secret_values(plan) {
            let mut sealed = plan.clone();
            self.seal_plan(&mut sealed)?;
            std::borrow::Cow::Owned(sealed)
        } else {
            std::borrow::Cow::Borrowed(plan)
        };
        let at = now();
        let record = OperationRecord {
            id: id.clone(),
            parent: parent.map(str::to_string),
            intent: serde_json::to_value(&stored.intent).unwrap_or(Value::Null),
            resource,
            state: OperationState::DraftIntent,
            plan_revision: plan.revision.hash.clone(),
            intent_id: plan.intent.id.clone(),
            plan_id: plan.revision.hash.clone(),
            actor: actor.to_string(),
            created_at: at.clone(),
            updated_at: at.clone(),
            version: 0,
        };
        let mut writes = vec![
            Write::CreateOperation {
                op: record.clone(),
                plan: serde_json::to_string(&*stored).map_err(|_| Error::Plan(plan.revision.hash.clone()))?,
            },
            Write::Timeline(entry(
                &id,
                actor,
                "created",
                format!("{} {} from {}", plan.action, plan.pack, plan.template),
                json!({"revision": plan.revision.hash}),
            )),
        ];
        // Each patch that customised the plan before its run ([O]): on the timeline, as it is on
        // the plan.
        for c in &plan.customizations {
            writes.push(Write::Timeline(entry(
                &id,
                c.author.as_deref().unwrap_or(actor),
                "customized",
                format!(
                    "revision {} by patch {}: {}",
                    c.revision,
                    c.patch.as_deref().unwrap_or("(unnamed)"),
                    c.diff.join("; ")
                ),
                serde_json::to_value(c).unwrap_or(Value::Null),
            )));
        }
        // One write a job instance: reserved at once, not grown by doubling (a `Write` is a few
        // hundred bytes; 10,000 jobs grown by doubling held three times what they need).
        // The inventory entries the plan runs on are kept, so later commands reach them without
        // being given the inventory again.
        let targets: HashSet<&str> = plan.jobs.iter().filter_map(|j| j.resource.as_deref()).collect();
        writes.reserve(plan.jobs.len() + plan.gates.len() + targets.len() + 16);
        for j in &plan.jobs {
            writes.push(Write::Job(JobRecord {
                operation: id.clone(),
                id: j.id.clone(),
                // Skipped by a patch to the preview: done without running.
                state: if j.skipped.is_some() { JobState::Skipped } else { JobState::Pending },
                attempts: 0,
                outcome: Value::Null,
                updated_at: at.clone(),
            }));
        }
        writes.extend(plan.gates.iter().map(|g| open_gate(&id, g)));
        for r in self.resources.iter().filter(|r| targets.contains(r.id.as_str())) {
            if self.store.resource(&r.id)?.is_none() {
                writes.push(Write::Resource(ResourceRecord {
                    id: r.id.clone(),
                    doc: serde_json::to_value(r).unwrap_or(Value::Null),
                    last_operation: None,
                    updated_at: at.clone(),
                }));
            }
        }
        // The record and every step up to running (or a wait for a person) are one transaction:
        // a crash never leaves an operation half created.
        let (event, reason) = resolution_event(plan, &HashSet::new());
        let mut op = record;
        for (event, reason) in [
            (Event::PlanBuilt, "plan preview built".to_string()),
            (Event::Resolve, "capabilities resolved".to_string()),
            (event, reason),
        ] {
            let (next, write, _) = Runtime::transition_write(&op, &event, actor, &reason)?;
            writes.push(write);
            op = next;
        }
        writes.extend(extra);
        writes.extend(self.start_writes(&id, plan, actor));
        if let Some(resource) = &op.resource {
            // Checked again inside the transaction: another replica may be creating one too.
            writes.insert(0, Write::ExpectIdle { resource: resource.clone(), operation: id.clone() });
        }
        self.commit_as(&writes, durable).map_err(|e| match e {
            opsgraph_store::Error::ResourceBusy { resource, operation, state } => {
                Error::Busy { resource, operation, state }
            }
            e => Error::Store(e),
        })?;
        crate::failpoint::hit("operation.created");
        for w in &writes {
            match w {
                Write::Timeline(e) | Write::Transition { entry: e, .. } => progress(e),
                _ => {}
            }
        }
        Ok(id)
    }

    /// From capability resolution: wait for input, then approval, then run.
    pub(crate) fn after_resolution(
        &mut self,
        op: &OperationRecord,
        plan: &Plan,
        actor: &str,
    ) -> Result<OperationRecord, Error> {
        let answered: HashSet<String> =
            self.store.gates(&op.id)?.into_iter().filter(|g| g.answer.is_some()).map(|g| g.id).collect();
        let (event, reason) = resolution_event(plan, &answered);
        self.transition(op, event, actor, &reason, vec![], &mut |_| {})
    }

    /// Seals the values of secret parameters (and those of the sub-operations' plans).
    /// Whether [`Runtime::seal_plan`] would change anything: a value of a secret parameter not
    /// sealed yet, here or in a sub-operation's plan.
    fn has_secret_values(&self, plan: &Plan) -> bool {
        let names = self.secret_params(plan);
        let open = |map: &opsgraph_core::model::Attributes| {
            names.iter().any(|n| map.get(n).is_some_and(|v| !v.is_null() && !crate::secrets::is_sealed(v)))
        };
        open(&plan.parameters)
            || open(&plan.intent.parameters)
            || plan.sub_operations.iter().filter_map(|s| s.plan.as_deref()).any(|p| self.has_secret_values(p))
    }

    fn seal_plan(&self, plan: &mut Plan) -> Result<(), Error> {
        let names = self.secret_params(plan);
        for name in &names {
            let aad = format!("param:{}/{name}", plan.revision.hash);
            for map in [&mut plan.parameters, &mut plan.intent.parameters] {
                if let Some(v) = map.get_mut(name).filter(|v| !v.is_null() && !crate::secrets::is_sealed(v)) {
                    *v = Value::String(self.seal_text(&param_text(v), &aad)?);
                }
            }
        }
        for sub in &mut plan.sub_operations {
            if let Some(p) = sub.plan.as_deref_mut() {
                self.seal_plan(p)?;
            }
        }
        Ok(())
    }
}

/// The record of a plan's gate of operation `op`, not answered yet.
pub(crate) fn open_gate(op: &str, g: &opsgraph_core::plan::PlanGate) -> Write {
    Write::Gate(GateRecord {
        operation: op.to_string(),
        id: g.id.clone(),
        gate_type: g.type_,
        kind: opsgraph_core::model::GateKind::Plan,
        reason: g.reason.clone(),
        options: g.options.clone(),
        required_roles: g.required_roles.clone(),
        answer: None,
        answered_by: None,
        answered_at: None,
        value: None,
    })
}
