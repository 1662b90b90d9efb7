//! Drift -> repair ([I] 3): a verification that finds a resource newly `degraded` diagnoses the
//! failing checks against its pack's remedies and, as the operations policy of its environment
//! says (`repair: off | propose | apply_safe`), plans the pack's `repair` action against the
//! operation it was verified against and records it as an operation — behind an approval gate
//! under `propose`, started at once under `apply_safe` unless its own plan has gates. Nothing runs
//! without the policy allowing it; every step is on the resource's history.

use opsgraph_core::model::{
    CapabilityPolicy, GateType, OperationsPolicy, Provider, RepairMode, Resource, ResourceStatus,
};
use opsgraph_core::pack::remedy::{best_match, Symptoms};
use opsgraph_core::plan::{Edit, GateSource, Input, Inventory, Plan, PlanGate};
use opsgraph_store::{now, ResourceEventRecord, Write};
use serde_json::json;

use crate::report::{CheckRun, Repair, VerifyReport};
use crate::{Error, Runtime};

/// What plans are made in besides the packs and resources the runtime has: the server's world, or
/// the files the CLI was given. Without it, drift is recorded and nothing is planned.
#[derive(Debug, Clone, Default)]
pub struct PlanWorld {
    pub providers: Vec<Provider>,
    pub policy: CapabilityPolicy,
    pub operations: OperationsPolicy,
}

/// The remedies of the resource's pack that match its failing checks, one line each.
fn diagnose(pack: &opsgraph_core::pack::Pack, failed: &[&CheckRun]) -> Vec<String> {
    let mut found = Vec::new();
    let mut on: Vec<&str> = failed.iter().map(|c| c.on.as_str()).collect();
    on.dedup();
    for instance in on {
        let checks: Vec<&str> = failed.iter().filter(|c| c.on == instance).map(|c| c.check.as_str()).collect();
        let output: String = failed.iter().filter(|c| c.on == instance).map(|c| format!("{}\n", c.observed)).collect();
        let (job_type, provides) = opsgraph_core::pack::remedy::job_facts(pack, instance);
        let symptoms = Symptoms {
            pack: &pack.manifest.id,
            job_type,
            provides: &provides,
            failed_evidence: &checks,
            ..Symptoms::new(instance, &output)
        };
        if let Some(m) = best_match(&pack.remedies, &symptoms) {
            found.push(format!("{} on {instance} ({:.0}% sure)", m.remedy.id, m.confidence * 100.0));
        }
    }
    found
}

impl Runtime {
    /// After `report` turned its resource degraded: diagnoses, and repairs as the policy says.
    pub(crate) fn on_drift(&mut self, report: &VerifyReport, actor: &str) -> Result<Repair, Error> {
        let record =
            self.store.resource(&report.resource)?.ok_or_else(|| Error::NoResource(report.resource.clone()))?;
        let doc: Resource = serde_json::from_value(record.doc)
            .map_err(|e| Error::Unsupported(format!("resource `{}`: {e}", report.resource)))?;
        let Some((pack, _)) = self.resource_spec(&doc.type_) else { return Ok(off("no pack verifies it")) };
        let pack = pack.clone();
        let failed: Vec<&CheckRun> = report.checks.iter().filter(|c| !c.passed).collect();
        let diagnosis = diagnose(&pack, &failed);
        let mode = self
            .plan_world
            .as_ref()
            .and_then(|w| w.operations.for_environment(doc.environment.as_deref()))
            .map(|e| e.repair)
            .unwrap_or_default();
        let outcome = match (mode, self.plan_world.clone()) {
            (RepairMode::Off, _) => off("the operations policy says `repair: off` for its environment"),
            (_, None) => off("no operations policy was given"),
            (mode, Some(world)) => self.plan_repair(report, &pack, &diagnosis, mode, &world, actor),
        };
        let summary = match &outcome {
            Repair::Off { reason } => format!("drift recorded; no repair: {reason}"),
            Repair::NotPlanned { reason } => format!("no repair planned: {reason}"),
            Repair::Created { operation, state } => format!("repair operation {operation} created ({state})"),
        };
        let summary =
            if diagnosis.is_empty() { summary } else { format!("{summary}; diagnosis: {}", diagnosis.join(", ")) };
        let operation = match &outcome {
            Repair::Created { operation, .. } => Some(operation.clone()),
            _ => None,
        };
        if matches!(outcome, Repair::Off { .. }) && diagnosis.is_empty() {
            // Nothing found and nothing to do: the verification's own entry says it all.
            return Ok(outcome);
        }
        self.store.commit(&[Write::ResourceEvent(ResourceEventRecord {
            seq: 0,
            resource: report.resource.clone(),
            at: now(),
            actor: actor.to_string(),
            kind: "repair".into(),
            status: ResourceStatus::Degraded.as_str().into(),
            operation,
            summary,
            detail: json!({"diagnosis": diagnosis, "repair": outcome}),
        })])?;
        Ok(outcome)
    }

    /// Plans the pack's `repair` action with the intent of the operation the resource was verified
    /// against (its parameters and targets), and creates it.
    fn plan_repair(
        &mut self,
        report: &VerifyReport,
        pack: &opsgraph_core::pack::Pack,
        diagnosis: &[String],
        mode: RepairMode,
        world: &PlanWorld,
        actor: &str,
    ) -> Repair {
        let plan = match self.load(&report.operation) {
            Ok((_, plan)) => plan,
            Err(e) => return Repair::NotPlanned { reason: e.to_string() },
        };
        let Some(template) = pack.template_for("repair") else {
            return Repair::NotPlanned { reason: format!("pack {} has no `repair` action", pack.reference()) };
        };
        // The operation's intent, for what the repair template reads of it: its parameters and
        // the targets its scopes are drawn from.
        let mut intent = plan.intent.clone();
        intent.action = "repair".into();
        intent.parameters.retain(|k, _| template.parameters.contains_key(k));
        let read: Vec<String> = template
            .scopes
            .values()
            .flat_map(|s| &s.from)
            .filter_map(|f| f.strip_prefix("targets.").map(str::to_string))
            .collect();
        intent.targets.retain(|k, _| read.contains(k));
        intent.desired_result = Some(format!("repair {} after a verification found it degraded", report.resource));
        let resources = match crate::manage::world_resources(&self.resources, &*self.store) {
            Ok(r) => r,
            Err(e) => return Repair::NotPlanned { reason: e.to_string() },
        };
        let inventory = Inventory::new(&resources);
        let built = opsgraph_core::plan::build(&Input {
            intent: &intent,
            packs: &self.packs,
            inventory: &inventory,
            providers: &world.providers,
            policy: &world.policy,
            operations: &world.operations,
            // The intent already carries the verified operation's parameters and targets.
            recorded: None,
            // The operations policy plans a repair, not a person: no roles.
            roles: &[],
        });
        let mut plan = match built {
            Ok(plan) => plan,
            Err(errors) => {
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                return Repair::NotPlanned { reason: format!("its plan cannot be built: {}", text.join("; ")) };
            }
        };
        if mode == RepairMode::Propose
            && !plan.gates.iter().any(|g| g.source.is_pre_run() && g.type_ == GateType::Approval)
        {
            match with_approval(plan, report, diagnosis) {
                Ok(p) => plan = p,
                Err(reason) => return Repair::NotPlanned { reason },
            }
        }
        let id = crate::new_operation_id();
        self.attach(vec![crate::audit::create(actor, &id, &plan, None)]);
        match self.create_as(&id, &plan, actor, &mut |_| {}) {
            Ok(_) => {
                let state = self
                    .store
                    .operation(&id)
                    .ok()
                    .flatten()
                    .map(|o| opsgraph_core::plan::lifecycle::state_name(o.state.kind()).to_string())
                    .unwrap_or_default();
                Repair::Created { operation: id, state }
            }
            Err(e) => Repair::NotPlanned { reason: e.to_string() },
        }
    }
}

/// `propose`: nothing runs before a person approves the repair.
fn with_approval(plan: Plan, report: &VerifyReport, diagnosis: &[String]) -> Result<Plan, String> {
    let roots: Vec<String> = plan.jobs.iter().filter(|j| j.depends_on.is_empty()).map(|j| j.id.clone()).collect();
    let why = if diagnosis.is_empty() { String::new() } else { format!(" (diagnosis: {})", diagnosis.join(", ")) };
    let gate = PlanGate {
        id: "approve-repair".into(),
        type_: GateType::Approval,
        reason: format!("{}: {}{why}; the operations policy proposes this repair", report.resource, report.summary()),
        options: vec!["approve".into(), "cancel operation".into()],
        required_roles: vec!["sre".into(), "platform_admin".into()],
        before: roots,
        opens_after: Vec::new(),
        source: GateSource::Policy,
    };
    opsgraph_core::plan::apply(plan, vec![Edit::AddGate(gate)])
        .map_err(|errors| errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
}

fn off(reason: &str) -> Repair {
    Repair::Off { reason: reason.to_string() }
}
