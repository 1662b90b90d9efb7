//! Rolling back an operation: a plan that undoes its completed jobs in reverse order
//! (`opsgraph_core::plan::rollback`), run as a new operation on the same resource.

use std::collections::HashSet;

use opsgraph_core::model::OperationState;
use opsgraph_core::plan::lifecycle::{self, Event};
use opsgraph_core::plan::rollback::{rollback, RollbackPlan};

use crate::{new_operation_id, Error, Runtime};

impl Runtime {
    /// The rollback plan of `op_id`: what it would undo, and what it cannot.
    pub fn rollback_plan(&self, op_id: &str) -> Result<RollbackPlan, Error> {
        let (_, plan) = self.load(op_id)?;
        let pack = self.pack(&plan)?;
        let done: HashSet<String> = self
            .store
            .jobs(op_id)?
            .into_iter()
            .filter(|j| j.state.is_done() && j.state != opsgraph_store::JobState::Skipped)
            .map(|j| j.id)
            .collect();
        let mut rb = rollback(&plan, pack, &done).map_err(|errs| {
            Error::Unsupported(format!(
                "the rollback plan cannot be built: {}",
                errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
            ))
        })?;
        // Which operation it undoes: once it completes, that one leaves the resource's record
        // (`manage::completed_plans`), and a day-2 action's resource is as it was before it.
        rb.plan.rolls_back = Some(op_id.to_string());
        Ok(rb)
    }

    /// Starts the rollback of `op_id` as a new operation. A failed or paused operation is
    /// cancelled first (the rollback replaces it); a running one must be paused or cancelled by a
    /// person before.
    pub fn start_rollback(&mut self, op_id: &str, rb: &RollbackPlan, actor: &str) -> Result<String, Error> {
        let (op, _) = self.load(op_id)?;
        let id = new_operation_id();
        match &op.state {
            s if lifecycle::is_terminal(s) => {}
            OperationState::Failed { .. } | OperationState::Paused { .. } => {
                let reason = format!("rolled back by operation {id}");
                self.transition(&op, Event::Cancel { reason: reason.clone() }, actor, &reason, vec![], &mut |_| {})?;
            }
            other => {
                return Err(Error::Unsupported(format!(
                    "operation {op_id} is {}: pause or cancel it before rolling it back",
                    lifecycle::state_name(other.kind())
                )))
            }
        }
        self.create_as(&id, &rb.plan, actor, &mut |_| {})?;
        Ok(id)
    }
}
