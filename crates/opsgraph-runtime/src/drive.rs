//! Driving an operation: the loop around `decide`, and what it loads once per drive (the plan
//! and the pack version it was made from).

use std::collections::HashSet;
use std::sync::Arc;

use opsgraph_core::model::OperationState;
use opsgraph_core::pack::Pack;
use opsgraph_core::plan::lifecycle::Event;
use opsgraph_core::plan::Plan;
use opsgraph_store::{JobRecord, JobState, OperationRecord};

use crate::decide::{decide, Input};
use crate::execute::{raced, Drive, Flow};
use crate::subop::Children;
use crate::timeline::Progress;
use crate::{Error, Runtime};

impl Runtime {
    pub(crate) fn load(&self, id: &str) -> Result<(OperationRecord, Plan), Error> {
        let op = self.store.operation(id)?.ok_or_else(|| Error::NoOperation(id.to_string()))?;
        let plan = self.store.plan_text(&op.plan_revision)?.ok_or_else(|| Error::Plan(op.plan_revision.clone()))?;
        let plan: Plan = serde_json::from_str(&plan).map_err(|_| Error::Plan(op.plan_revision.clone()))?;
        Ok((op, plan))
    }

    /// The pack version the plan was made from (`id@version`; several versions may be loaded).
    /// When the plan recorded a digest, the loaded pack must have it: an operation runs the
    /// files that were planned and approved, not whatever now carries the same version.
    pub(crate) fn pack(&self, plan: &Plan) -> Result<&Pack, Error> {
        // `id@version`, compared without formatting it (this runs for every attempt).
        let named =
            |p: &&Pack| plan.pack.split_once('@').is_some_and(|(id, v)| id == p.manifest.id && v == p.manifest.version);
        let same = self.packs.iter().filter(named);
        let mut first = None;
        for p in same {
            match plan.pack_digest.as_deref() {
                Some(d) if p.digest != d => first = first.or(Some(p)),
                _ => return Ok(p),
            }
        }
        match (first, plan.pack_digest.as_deref()) {
            (Some(p), Some(d)) => {
                Err(Error::PackChanged { pack: plan.pack.clone(), planned: d.to_string(), loaded: p.digest.clone() })
            }
            _ => Err(Error::NoPack(plan.pack.clone())),
        }
    }

    /// Runs an operation until it completes, fails, is cancelled, or waits for a person.
    /// Returns the state it stopped in.
    ///
    /// A short loop around one pure decision: read a snapshot of the operation, `decide` what to
    /// write and do, commit and carry it out (`execute`), then turn the workers' reports into the
    /// next decision. Sub-operations and crash recovery are steps of reading the snapshot: they
    /// drive children and check evidence before anything is decided.
    pub fn drive(&mut self, id: &str, progress: Progress<'_>) -> Result<OperationState, Error> {
        let (_, plan) = self.load(id)?;
        let pack = self.pack(&plan)?.clone();
        let inputs = self.gate_inputs(id)?;
        // Made once per drive: every attempt works and logs in the operation's run directory.
        let run_dir = self.data_dir.join("runs").join(id);
        for d in [&run_dir, &self.data_dir.join("lab")] {
            std::fs::create_dir_all(d).map_err(|source| Error::Io { path: d.display().to_string(), source })?;
        }
        // Plaintext copies of secrets a crashed driver left behind.
        let _ = std::fs::remove_dir_all(run_dir.join("secrets"));
        let mut d = Drive::new(&plan, &pack, inputs, self.actor.clone(), run_dir);

        loop {
            if let Some(lost) = self.lease_lost() {
                // Another replica carries on from the store; nothing more is started or recorded here.
                for c in d.in_flight.values() {
                    c.cancel();
                }
                return Err(lost);
            }
            let op = self.snapshot_op(&mut d, id)?;
            let running = matches!(op.state, OperationState::Running);
            if d.cache_stale {
                d.cache = self.store.jobs(id)?.into_iter().map(|j| (j.id.clone(), crate::execute::cached(j))).collect();
                d.waiting = crate::waiting::Waiting::new(&plan.jobs, &d.cache);
                d.cache_stale = false;
                d.done_prefix = 0;
            }
            let gates = if plan.gates.is_empty() { Vec::new() } else { self.store.gates(id)? };

            // Sub-operations: providers created for this operation run first; the jobs that need
            // what they provide wait for them.
            let mut blocked: HashSet<String> = HashSet::new();
            let mut waiting_children: Vec<String> = Vec::new();
            if running {
                match self.sub_operations(id, &plan, &d.actor, progress)? {
                    Children::Failed(reason) => {
                        // The resource is not marked failed here (the lifecycle's
                        // `MarkResourceFailed` is not carried out): the jobs that change it never ran.
                        let actor = d.actor.clone();
                        let event = Event::JobFailed { job: "sub-operation".into(), reason: reason.clone() };
                        raced(self.transition(&op, event, &actor, &reason, vec![], progress))?;
                        continue;
                    }
                    Children::Progressed => continue,
                    Children::Blocking { jobs, waiting } => {
                        blocked = jobs;
                        waiting_children = waiting;
                    }
                }
            }

            // Recovery: attempts recorded as started whose outcome nobody recorded.
            if running && !d.recovered_checked && self.recover_orphans(&mut d, &op, progress)? {
                continue;
            }

            let snapshot = d.snapshot(&op, &gates, &blocked, &waiting_children, self.concurrency);
            let decision = decide(&snapshot, Input::Tick)?;
            match self.execute(&mut d, &op, decision, progress)? {
                // Whatever the drive committed is durable when it returns.
                Flow::Stop(state) => {
                    self.committer.settle()?;
                    return Ok(state);
                }
                Flow::Again => continue,
                Flow::Next => {}
            }
            if d.in_flight.is_empty() {
                continue;
            }
            // Wait for one report, then take every other one that is ready: one decision, one
            // commit for all.
            let Some(finished) = self.collect(&mut d, &op)? else { continue };
            let snapshot = d.snapshot(&op, &gates, &blocked, &waiting_children, self.concurrency);
            let decision = decide(&snapshot, Input::Finished(finished))?;
            self.execute(&mut d, &op, decision, progress)?;
            d.row_trusted = d.in_flight.is_empty();
        }
    }

    /// The operation row, read again only when the store's data version or this runtime's own
    /// operation writes say it may have changed; without a data version (PostgreSQL), when this
    /// runtime wrote the row, a guarded commit was refused or the driver waited
    /// (`Drive::guarded`). The turn right after results that left nothing in flight does not ask
    /// for the data version (`Drive::row_trusted`): its writes are all version-guarded.
    /// Shared with the drive's copy, not copied: a turn reads it only (two copies of the row and
    /// their drops a chained job, issue [N] 5).
    fn snapshot_op(&mut self, d: &mut Drive<'_>, id: &str) -> Result<Arc<OperationRecord>, Error> {
        // Right after results with nothing in flight: every write of this turn is version-guarded.
        if std::mem::take(&mut d.row_trusted) {
            if let Some((_, w, op)) = &d.op_seen {
                if *w == self.operation_writes {
                    return Ok(Arc::clone(op));
                }
            }
        }
        #[cfg(test)]
        {
            self.version_reads += 1;
        }
        let data_version = self.store.data_version()?;
        d.guarded = data_version.is_none();
        Ok(match (&d.op_seen, data_version) {
            (Some((v, w, op)), now) if now.is_none_or(|now| *v == now) && *w == self.operation_writes => Arc::clone(op),
            _ => {
                let op = Arc::new(self.store.operation(id)?.ok_or_else(|| Error::NoOperation(id.to_string()))?);
                d.op_seen = Some((data_version.unwrap_or(0), self.operation_writes, Arc::clone(&op)));
                op
            }
        })
    }

    /// Crash recovery, once per drive: attempts recorded as started whose outcome nobody
    /// recorded are checked by evidence (those handed to agents are waited for again). Returns
    /// whether it rewrote job records (the snapshot must be read again).
    fn recover_orphans(
        &mut self,
        d: &mut Drive<'_>,
        op: &OperationRecord,
        progress: Progress<'_>,
    ) -> Result<bool, Error> {
        d.recovered_checked = true;
        let orphans: Vec<JobRecord> = d
            .cache
            .values()
            .filter(|j| j.state == JobState::Running && !d.in_flight.contains_key(&j.id))
            .cloned()
            .collect();
        // Attempts handed to agents are waited for again: their agent may still run them.
        let (in_flight, keys, workers) = (&mut d.in_flight, &mut d.keys, &mut d.workers);
        let orphans = self.agent_orphans(op, d.plan, d.pack, orphans, &d.run_dir, |task, key| {
            in_flight.insert(task.instance.clone(), task.cancel.clone());
            keys.insert(task.instance.clone(), key);
            // Recorded by an earlier drive: durable.
            workers.run(task, in_flight.len(), None);
        })?;
        if orphans.is_empty() {
            return Ok(false);
        }
        self.recover(op, d.plan, d.pack, &orphans, &d.inputs, progress)?;
        d.cache_stale = true;
        Ok(true)
    }
}
