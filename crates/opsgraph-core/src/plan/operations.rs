//! The operations policy over a whole plan ([O]): its rules' CEL expressions over the intent's
//! context, the requester's roles and the plan's cost estimate, and the cost confirmation.
//! Above `types` (it makes gates), beside `policy` (whose evaluation it shares).

use crate::model::{EnvironmentOperations, GateType, Intent, OperationsRule};
use crate::pack::expr::Scope;
use crate::plan::policy::{base_context, holds, named};
use crate::plan::types::{amount, Cost, GateSource, PlanGate};
use crate::plan::Error;

/// The gates the operations policy puts before a plan's first jobs (`roots`): an approval for
/// each rule that asks for one, and the cost confirmation, at the threshold of the first rule
/// that sets one, else the environment's; or the refusal of the first rule that denies.
pub(crate) fn operations(
    policy: Option<&EnvironmentOperations>,
    intent: &Intent,
    roles: &[String],
    cost: Option<&Cost>,
    roots: &[String],
) -> Result<Vec<PlanGate>, Error> {
    let Some(policy) = policy else { return Ok(Vec::new()) };
    let cx = base_context(intent, roles, Some(cost.map_or(0.0, |c| c.total)));
    let active: Vec<&OperationsRule> =
        policy.rules.iter().filter(|r| holds(r.when.as_deref(), Scope::Operations, &cx)).collect();
    if let Some(rule) = active.iter().find(|r| r.deny.is_some()) {
        return Err(Error::Denied {
            rule: rule.name.clone(),
            when: rule.when.clone(),
            reason: rule.deny.clone().unwrap_or_default(),
        });
    }
    let default_roles = || vec!["sre".to_string(), "platform_admin".to_string()];
    let mut gates = Vec::new();
    for rule in active.iter().filter(|r| r.require_approval) {
        gates.push(PlanGate {
            id: format!("approve-{}", rule.name.replace(['_', '.'], "-")),
            type_: GateType::Approval,
            reason: format!("the operations policy asks for an approval: {}", named(&rule.name, rule.when.as_deref())),
            options: vec!["approve".into(), "cancel operation".into()],
            required_roles: Some(rule.approval_roles.clone()).filter(|r| !r.is_empty()).unwrap_or_else(default_roles),
            before: roots.to_vec(),
            source: GateSource::Policy,
            opens_after: Vec::new(),
        });
    }
    let threshold = active
        .iter()
        .find_map(|r| Some((r.confirm_cost_above?, Some(*r))))
        .or_else(|| Some((policy.confirm_cost_above?, None)));
    if let (Some(cost), Some((limit, by))) = (cost, threshold) {
        if cost.total > limit {
            let unit = cost.unit.as_deref().map(|u| format!(" {u}")).unwrap_or_default();
            let env = intent.environment.as_deref().unwrap_or("this environment");
            let allows = match by {
                Some(rule) => format!("{env} allows by {}", named(&rule.name, rule.when.as_deref())),
                None => format!("{env} allows"),
            };
            gates.push(PlanGate {
                id: "confirm-cost".into(),
                type_: GateType::CostConfirmation,
                reason: format!(
                    "the plan is estimated at {}{unit}, above the {}{unit} that {allows} without confirmation ({})",
                    amount(cost.total),
                    amount(limit),
                    cost.items
                        .iter()
                        .map(|i| format!("{}: {}", i.what, amount(i.amount)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                options: vec!["confirm cost".into(), "cancel operation".into()],
                required_roles: Some(policy.cost_roles.clone()).filter(|r| !r.is_empty()).unwrap_or_else(default_roles),
                before: roots.to_vec(),
                source: GateSource::Cost,
                opens_after: Vec::new(),
            });
        }
    }
    Ok(gates)
}
