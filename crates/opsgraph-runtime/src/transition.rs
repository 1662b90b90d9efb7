//! Moving an operation: a lifecycle transition, its timeline entry and the writes that go with
//! it, committed in one transaction.

use opsgraph_core::plan::lifecycle::{self, state_name, Event};
use opsgraph_store::{OperationRecord, TimelineEntry, Write};
use serde_json::Value;

use crate::timeline::{entry, Progress};
use crate::{Error, Runtime};

impl Runtime {
    /// The write of a lifecycle transition (state, version check, timeline entry), not committed.
    /// The lifecycle's effects are carried out by whoever asks for the transition: the driver's
    /// through `decide` and `lifecycle_writes`; a person's call by what it does around it (retry
    /// resets its jobs, intervene runs its checks) and by the driver that reads the new state
    /// (dispatch, stop, cancel attempts).
    pub(crate) fn transition_write(
        op: &OperationRecord,
        event: &Event,
        actor: &str,
        reason: &str,
    ) -> Result<(OperationRecord, Write, TimelineEntry), Error> {
        let (state, _effects) = lifecycle::apply(&op.state, event)?;
        let mut e = entry(&op.id, actor, event.name(), reason, serde_json::to_value(event).unwrap_or(Value::Null));
        e.from = Some(state_name(op.state.kind()).to_string());
        e.to = Some(state_name(state.kind()).to_string());
        let write = Write::Transition {
            operation: op.id.clone(),
            expect_version: op.version,
            state: state.clone(),
            entry: e.clone(),
        };
        let mut next = op.clone();
        next.state = state;
        next.version += 1;
        Ok((next, write, e))
    }

    /// Applies a lifecycle event and commits the new state, its timeline entry and `extra` in one
    /// transaction. Returns the new record.
    pub(crate) fn transition(
        &mut self,
        op: &OperationRecord,
        event: Event,
        actor: &str,
        reason: &str,
        extra: Vec<Write>,
        progress: Progress<'_>,
    ) -> Result<OperationRecord, Error> {
        let (next, write, e) = Runtime::transition_write(op, &event, actor, reason)?;
        let mut writes = vec![write];
        writes.extend(extra);
        // What the caller observed ends here; what follows belongs to the transition alone.
        let observed_end = writes.len();
        if matches!(event, Event::Cancel { .. }) {
            writes.extend(self.cancel_writes(op, actor)?);
        }
        if let Err(err) = self.commit(&writes) {
            // Someone else moved the operation first (a person cancelled or paused it): what this
            // writer observed — job results, evidence — is still true and is kept.
            // An audit record alone is not kept: it describes the change that was refused.
            let observed = writes[1..observed_end].iter().any(|w| !matches!(w, Write::Audit(_)));
            if matches!(err, opsgraph_store::Error::Conflict { .. }) && observed {
                self.commit(&writes[1..observed_end])?;
                for w in &writes[1..observed_end] {
                    if let Write::Timeline(t) = w {
                        progress(t);
                    }
                }
            }
            return Err(err.into());
        }
        crate::failpoint::hit("transition.committed");
        progress(&e);
        for w in &writes[1..] {
            if let Write::Timeline(t) = w {
                progress(t);
            }
        }
        Ok(next)
    }

    pub(crate) fn commit_timeline(&mut self, writes: &[Write], progress: Progress<'_>) -> Result<(), Error> {
        self.commit_timeline_as(writes, crate::Durable::Now, progress).map(|_| ())
    }

    /// [`Runtime::commit_timeline`], left to the committer to make durable unless `durable` is
    /// `Now` (`committer.rs`): the commit's number, for what must wait until it is durable
    /// (`None`: nothing was written).
    pub(crate) fn commit_timeline_as(
        &mut self,
        writes: &[Write],
        durable: crate::Durable,
        progress: Progress<'_>,
    ) -> Result<Option<u64>, Error> {
        if writes.is_empty() {
            return Ok(None);
        }
        let n = self.commit_as(writes, durable)?;
        for w in writes {
            if let Write::Timeline(t) = w {
                progress(t);
            }
        }
        Ok(Some(n))
    }
}
