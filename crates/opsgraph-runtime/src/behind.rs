//! The driver's side of the thread behind (`committer.rs`, rule 7): which commits it hands over,
//! and what it does with what that thread made of them.
//!
//! A commit goes behind when it records only attempts with nothing to run, nothing else is in
//! flight, and it holds job records and timeline entries only (with its version guard): the
//! no-op jobs' commits. Nothing the driver reads before it takes the result back depends on
//! them (the job records it keeps itself; no artifact, evidence or key is among them), and
//! nothing else is in flight whose results could mix with what it decides meanwhile: if the
//! commit is refused, everything decided since came from it and is dropped.

use std::time::Instant;

use opsgraph_store::Write;

use crate::execute::{Drive, Outstanding};
use crate::task::Task;
use crate::timeline::Progress;
use crate::{Error, Runtime};

impl Runtime {
    /// Whether the commit of `writes`, which records `started` and hands `tasks` out, goes to
    /// the thread behind (starting it at the first one).
    pub(crate) fn goes_behind(&mut self, d: &Drive<'_>, writes: &[Write], started: usize, tasks: &[Task]) -> bool {
        d.in_flight.len() == started
            && tasks.len() == started
            && d.handed.is_empty()
            && d.plan.sub_operations.is_empty()
            && tasks.iter().all(Task::is_trivial)
            && writes.iter().all(|w| matches!(w, Write::Job(_) | Write::Timeline(_) | Write::ExpectVersion { .. }))
            && self.committer.behind_ready(&*self.store)
    }

    /// Hands `writes` (their first `carried` carried from before) to the thread behind, fenced
    /// with the lease held as every commit is; the driver takes the result with
    /// [`Runtime::settle_behind`].
    pub(crate) fn commit_behind(
        &mut self,
        d: &mut Drive<'_>,
        mut writes: Vec<Write>,
        carried: usize,
        started: Vec<(String, Option<Instant>)>,
    ) -> Result<u64, Error> {
        let fence = usize::from(self.lease.is_some());
        if let Some(held) = &self.lease {
            writes.insert(0, held.lease.fence());
        }
        let n = self.committer.submit_behind(writes)?;
        d.behind = Some(Outstanding { carried: fence..fence + carried, started });
        Ok(n)
    }

    /// Takes what the thread behind made of the driver's last commit handed to it, waiting for
    /// it if needed. Made: its timeline entries are reported. Refused by its version guard (the
    /// operation moved meanwhile): its starts are withdrawn, what the driver decided since (all
    /// of it came from those attempts) is dropped, the results it carried are committed alone,
    /// and the driver reads the operation and its job records again; returns true (decide
    /// again). Any other refusal ends the drive, as the commit's own would.
    pub(crate) fn settle_behind(&mut self, d: &mut Drive<'_>, progress: Progress<'_>) -> Result<bool, Error> {
        let Some(out) = d.behind.take() else { return Ok(false) };
        let Some((writes, refused)) = self.committer.drain() else { return Ok(false) };
        match refused {
            None => {
                for w in &writes {
                    if let Write::Timeline(t) = w {
                        progress(t);
                    }
                }
                self.committer.recycle(writes);
                Ok(false)
            }
            Some(opsgraph_store::Error::Conflict { .. }) => {
                self.withdraw(d, out.started);
                d.carry.clear();
                d.op_seen = None;
                d.cache_stale = true;
                self.commit_timeline(&writes[out.carried], progress)?;
                Ok(true)
            }
            Some(e) => {
                if let (opsgraph_store::Error::Fenced { .. }, Some(held)) = (&e, &self.lease) {
                    held.fenced();
                }
                Err(e.into())
            }
        }
    }

    /// Attempts recorded by a commit that was refused: no longer in flight, their backoffs back.
    pub(crate) fn withdraw(&self, d: &mut Drive<'_>, started: Vec<(String, Option<Instant>)>) {
        for (instance, not_before) in started {
            d.in_flight.remove(&instance);
            d.keys.remove(&instance);
            if let Some(held) = &self.lease {
                held.watch(&instance, None);
            }
            if let Some(t) = not_before {
                d.not_before.insert(instance, t);
            }
        }
    }
}
