//! When verifications run ([I]): which resources are due, and one verification under a lease so
//! that replicas sharing a store never verify the same resource at once.
//!
//! A resource is due when it is `running` or `degraded`, its type declares a verification, and
//! it was never verified, or an operation completed since (its `last_operation` is not the one
//! the last verification ran against), or its interval (plus a per-resource jitter of up to a
//! tenth of it, so resources verified together drift apart) has passed.

use opsgraph_core::model::{Resource, ResourceStatus};
use opsgraph_core::pack::shape::parse_duration;
use opsgraph_store::{parse_rfc3339, ResourceRecord};

use crate::report::VerifyReport;
use crate::{Error, Runtime};

/// The lease key of a resource's verification (leases are keyed by name; operations use their id).
pub fn lease_key(resource: &str) -> String {
    format!("verify:{resource}")
}

/// A stable jitter for `resource` in `[0, interval/10]`: FNV-1a of its id.
fn jitter_ms(resource: &str, interval_ms: i64) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in resource.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let span = (interval_ms / 10).max(0) as u64;
    if span == 0 {
        0
    } else {
        (h % (span + 1)) as i64
    }
}

/// Whether `record` is due at `now_ms`, given its type's interval.
pub fn is_due(record: &ResourceRecord, doc: &Resource, interval_ms: i64, now_ms: i64) -> bool {
    if !matches!(doc.status, Some(ResourceStatus::Running | ResourceStatus::Degraded)) {
        return false;
    }
    let Some(v) = &doc.verification else { return true };
    if record.last_operation.as_deref().is_some_and(|op| op != v.operation) {
        return true;
    }
    match parse_rfc3339(&v.at) {
        Some(at) => now_ms - at >= interval_ms + jitter_ms(&doc.id, interval_ms),
        None => true,
    }
}

impl Runtime {
    /// The interval of `type_`'s verification in milliseconds, when a loaded pack declares one.
    pub fn verify_interval_ms(&self, type_: &str) -> Option<i64> {
        let (_, spec) = self.resource_spec(type_)?;
        parse_duration(&spec.interval).map(|ms| ms as i64)
    }

    /// The resources whose verification is due at `now_ms`, oldest verification first.
    pub fn due_verifications(&self, now_ms: i64) -> Result<Vec<String>, Error> {
        let mut due = Vec::new();
        for record in self.store.resources()? {
            let Ok(doc) = serde_json::from_value::<Resource>(record.doc.clone()) else { continue };
            let Some(interval) = self.verify_interval_ms(&doc.type_) else { continue };
            if is_due(&record, &doc, interval, now_ms) {
                let at = doc.verification.as_ref().and_then(|v| parse_rfc3339(&v.at)).unwrap_or(0);
                due.push((at, record.id));
            }
        }
        due.sort();
        Ok(due.into_iter().map(|(_, id)| id).collect())
    }

    /// Verifies `id` as `holder` if it takes the resource's verification lease and the resource
    /// is still due once it holds it (another replica may have just verified it). `None`: not
    /// this holder's to do now. The lease is let go afterwards.
    pub fn verify_leased(&mut self, id: &str, holder: &str, ttl_ms: i64) -> Result<Option<VerifyReport>, Error> {
        let key = lease_key(id);
        let lease = match self.store.acquire_lease(&key, holder, ttl_ms) {
            Ok(lease) => lease,
            Err(opsgraph_store::Error::LeaseHeld { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let still_due = match self.store.resource(id)? {
            Some(record) => match serde_json::from_value::<Resource>(record.doc.clone()) {
                Ok(doc) => self.verify_interval_ms(&doc.type_).is_some_and(|interval| {
                    is_due(&record, &doc, interval, parse_rfc3339(&opsgraph_store::now()).unwrap_or(0))
                }),
                Err(_) => false,
            },
            None => false,
        };
        let result = if still_due { self.verify(id, &format!("serve:{holder}")).map(Some) } else { Ok(None) };
        let _ = self.store.release_lease(&lease);
        result
    }
}
