//! Timeline entries as the runtime writes them, and how a caller follows them. Below every other
//! module of the crate: it names no other one.

use opsgraph_store::{now, TimelineEntry};
use serde_json::Value;

/// What the driver reports as it goes: each timeline entry once it is committed.
pub type Progress<'a> = &'a mut dyn FnMut(&TimelineEntry);

/// A timeline entry of operation `op`, stamped now; `seq` is the store's to give.
pub(crate) fn entry(op: &str, actor: &str, event: &str, reason: impl Into<String>, data: Value) -> TimelineEntry {
    entry_at(op, actor, event, reason, data, now())
}

/// [`entry`] stamped `at` (the time of the decision that writes it, taken once for all its
/// records: `opsgraph_store::now` formats a timestamp, ~600 instructions each).
pub(crate) fn entry_at(
    op: &str,
    actor: &str,
    event: &str,
    reason: impl Into<String>,
    data: Value,
    at: String,
) -> TimelineEntry {
    TimelineEntry {
        seq: 0,
        operation: op.to_string(),
        at,
        actor: actor.to_string(),
        event: event.to_string(),
        from: None,
        to: None,
        reason: reason.into(),
        data,
    }
}
