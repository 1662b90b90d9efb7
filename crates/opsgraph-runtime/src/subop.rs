//! Sub-operations: providers a resolution creates, run as child operations before the jobs that
//! need them.

use std::collections::{HashMap, HashSet};

use opsgraph_core::model::OperationState;
use opsgraph_core::plan::lifecycle::state_name;
use opsgraph_core::plan::Plan;
use opsgraph_store::Write;
use serde_json::{json, Value};

use crate::timeline::{entry, Progress};
use crate::{Error, Runtime};

impl Runtime {
    /// Drives this operation's sub-operations as far as they go. Returns which jobs must still
    /// wait, and for which children; or that one failed; or that one made progress (look again).
    pub(crate) fn sub_operations(
        &mut self,
        id: &str,
        plan: &Plan,
        actor: &str,
        progress: Progress<'_>,
    ) -> Result<Children, Error> {
        let mut jobs = HashSet::new();
        let mut waiting = Vec::new();
        if plan.sub_operations.is_empty() {
            return Ok(Children::Blocking { jobs, waiting });
        }
        let timeline = self.store.timeline(id)?;
        let bound: HashSet<String> = timeline
            .iter()
            .filter(|e| e.event == "sub_operation_bound")
            .filter_map(|e| e.data.get("child").and_then(Value::as_str).map(str::to_string))
            .collect();
        let children: Vec<(String, String)> = timeline
            .iter()
            .filter(|e| e.event == "sub_operation_created")
            .filter_map(|e| {
                Some((e.data.get("child")?.as_str()?.to_string(), e.data.get("requirement")?.as_str()?.to_string()))
            })
            .collect();
        // Providers to create: chosen by the resolution, or by a person at its gate.
        let answers: HashMap<String, String> =
            self.store.gates(id)?.into_iter().filter_map(|g| Some((g.id, g.answer?))).collect();
        for r in &plan.resolution {
            let provider = match &r.outcome {
                opsgraph_core::plan::Outcome::Create { provider, .. } => Some(provider.clone()),
                opsgraph_core::plan::Outcome::Gate { gate } => answers.get(&gate.id).and_then(|a| {
                    gate.options.iter().find_map(|o| match o {
                        opsgraph_core::plan::resolve::GateOption::Create { label, provider, .. } if label == a => {
                            Some(provider.clone())
                        }
                        _ => None,
                    })
                }),
                _ => None,
            };
            let Some(provider) = provider else { continue };
            let cap = &r.requirement.capability;
            if children.iter().any(|(_, req)| req == cap) {
                continue;
            }
            let sub = plan.sub_operations.iter().find(|s| s.provider == provider && s.requirement == *cap);
            let Some(sub_plan) = sub.and_then(|s| s.plan.as_deref()) else {
                return Ok(Children::Failed(format!(
                    "provider {provider} for {cap} has no plan to create it: {}",
                    sub.and_then(|s| s.error.clone()).unwrap_or_else(|| "its pack is not loaded".into())
                )));
            };
            let sub_plan = sub_plan.clone();
            self.start_sub_operation(id, cap, &provider, &sub_plan, actor, progress)?;
            return Ok(Children::Progressed);
        }
        for (child, requirement) in children {
            let Some(record) = self.store.operation(&child)? else { continue };
            match &record.state {
                OperationState::Completed => {
                    if !bound.contains(&child) {
                        let note = entry(
                            id,
                            actor,
                            "sub_operation_bound",
                            format!(
                                "{requirement}: bound to {} created by {child}",
                                record.resource.clone().unwrap_or_default()
                            ),
                            json!({"child": child, "requirement": requirement, "resource": record.resource}),
                        );
                        self.commit_timeline(&[Write::Timeline(note)], progress)?;
                    }
                }
                OperationState::Failed { reason } | OperationState::Cancelled { reason } => {
                    return Ok(Children::Failed(format!(
                        "sub-operation {child} for {requirement} did not complete: {reason}"
                    )));
                }
                OperationState::Running => {
                    self.drive(&child, progress)?;
                    return Ok(Children::Progressed);
                }
                other => {
                    waiting.push(format!("{child} ({})", state_name(other.kind())));
                    for r in plan.resolution.iter().filter(|r| r.requirement.capability == requirement) {
                        if r.required_by.iter().all(|u| u == "pack") {
                            jobs.extend(plan.jobs.iter().map(|j| j.job.clone()));
                        }
                        jobs.extend(r.required_by.iter().filter(|u| *u != "pack").cloned());
                    }
                }
            }
        }
        Ok(Children::Blocking { jobs, waiting })
    }
}

pub(crate) enum Children {
    /// These jobs wait for these children (which wait for a person).
    Blocking {
        jobs: HashSet<String>,
        waiting: Vec<String>,
    },
    Failed(String),
    /// A child was driven: look again.
    Progressed,
}
