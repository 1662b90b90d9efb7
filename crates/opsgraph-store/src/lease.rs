//! Leases on operations, and what the backends share about URLs and lease messages.

use serde::{Deserialize, Serialize};

use crate::{Error, Store};

/// How long a lease lasts unless renewed, when `OPSGRAPH_LEASE_TTL_MS` does not say.
pub const DEFAULT_LEASE_TTL_MS: i64 = 10_000;

/// The right to drive one operation, until it expires. `token` grows with every acquisition of
/// the operation's lease, so a write fenced with an older token is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub operation: String,
    pub holder: String,
    pub token: i64,
    /// Milliseconds left when it was read, by the store's clock (negative: expired). Relative,
    /// so replicas whose clocks disagree with each other still agree with the store.
    pub expires_in_ms: i64,
    /// Let go by its holder (`release_lease`) rather than expired: a later holder took nothing
    /// over from it.
    #[serde(default)]
    pub released: bool,
}

impl Lease {
    /// The guard every write made under this lease carries.
    pub fn fence(&self) -> crate::Write {
        crate::Write::Fence { operation: self.operation.clone(), holder: self.holder.clone(), token: self.token }
    }
}

/// Whether a URL names PostgreSQL.
pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// A URL with its password replaced, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (auth, host) = match rest.split_once('@') {
        Some((auth, host)) => (auth, host),
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

impl Error {
    /// A fence check failed: `holder`'s lease with `token` on `operation` no longer holds;
    /// `current` is the stored lease's holder and token, if any (both backends).
    pub fn fenced(operation: &str, holder: &str, token: i64, current: Option<(String, i64)>) -> Error {
        let current = match current {
            Some((holder, token)) => format!("the lease is now {holder}'s with token {token}"),
            None => "the operation was never leased".to_string(),
        };
        Error::Fenced { operation: operation.to_string(), holder: holder.to_string(), token, current }
    }
}

/// A boxed store is a store: an opened `Box<dyn Store>` goes wherever a concrete store went.
impl<S: Store + ?Sized> Store for Box<S> {
    fn commit(&mut self, writes: &[crate::Write]) -> Result<(), Error> {
        (**self).commit(writes)
    }
    fn commit_deferred(&mut self, writes: &[crate::Write]) -> Result<(), Error> {
        (**self).commit_deferred(writes)
    }
    fn syncer(&self) -> Option<std::sync::Arc<dyn crate::Syncer>> {
        (**self).syncer()
    }
    fn agent_claim(&mut self, claim: &crate::AgentClaim) -> Result<Vec<crate::AgentTask>, Error> {
        (**self).agent_claim(claim)
    }
    fn agent_commit_claim(
        &mut self,
        writes: &[crate::Write],
        claim: &crate::AgentClaim,
    ) -> Result<Vec<crate::AgentTask>, Error> {
        (**self).agent_commit_claim(writes, claim)
    }
    fn agent_task(&self, id: &str) -> Result<Option<crate::AgentTask>, Error> {
        (**self).agent_task(id)
    }
    fn agent_tasks(&self, operation: &str) -> Result<Vec<crate::AgentTask>, Error> {
        (**self).agent_tasks(operation)
    }
    fn agent_log(&self, task: &str, after: i64) -> Result<Vec<crate::AgentLogLine>, Error> {
        (**self).agent_log(task, after)
    }
    fn operation(&self, id: &str) -> Result<Option<crate::OperationRecord>, Error> {
        (**self).operation(id)
    }
    fn operations(&self, filter: &crate::OperationFilter) -> Result<Vec<crate::OperationRecord>, Error> {
        (**self).operations(filter)
    }
    fn plan_text(&self, revision: &str) -> Result<Option<String>, Error> {
        (**self).plan_text(revision)
    }
    fn timeline(&self, operation: &str) -> Result<Vec<crate::TimelineEntry>, Error> {
        (**self).timeline(operation)
    }
    fn jobs(&self, operation: &str) -> Result<Vec<crate::JobRecord>, Error> {
        (**self).jobs(operation)
    }
    fn evidence(&self, operation: &str) -> Result<Vec<crate::EvidenceRecord>, Error> {
        (**self).evidence(operation)
    }
    fn gates(&self, operation: &str) -> Result<Vec<crate::GateRecord>, Error> {
        (**self).gates(operation)
    }
    fn artifacts(&self, operation: &str) -> Result<Vec<crate::ArtifactRecord>, Error> {
        (**self).artifacts(operation)
    }
    fn resources(&self) -> Result<Vec<crate::ResourceRecord>, Error> {
        (**self).resources()
    }
    fn resource(&self, id: &str) -> Result<Option<crate::ResourceRecord>, Error> {
        (**self).resource(id)
    }
    fn resource_events(&self, resource: &str, limit: usize) -> Result<Vec<crate::ResourceEventRecord>, Error> {
        (**self).resource_events(resource, limit)
    }
    fn idempotency(&self, key: &str) -> Result<Option<(String, String)>, Error> {
        (**self).idempotency(key)
    }
    fn timeline_after(
        &self,
        operation: Option<&str>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<crate::TimelineEntry>, Error> {
        (**self).timeline_after(operation, after, limit)
    }
    fn stats(&self) -> Result<crate::Stats, Error> {
        (**self).stats()
    }
    fn data_version(&self) -> Result<Option<i64>, Error> {
        (**self).data_version()
    }
    fn wait_for_timeline(&mut self, timeout: std::time::Duration) -> Result<bool, Error> {
        (**self).wait_for_timeline(timeout)
    }
    fn wait_for_agent_tasks(&mut self, timeout: std::time::Duration) -> Result<Option<Vec<(String, bool)>>, Error> {
        (**self).wait_for_agent_tasks(timeout)
    }
    fn tokens(&self) -> Result<Vec<crate::TokenRecord>, Error> {
        (**self).tokens()
    }
    fn token_by_hash(&self, hash: &str) -> Result<Option<crate::TokenRecord>, Error> {
        (**self).token_by_hash(hash)
    }
    fn audit(&self, filter: &crate::AuditFilter) -> Result<Vec<crate::AuditRecord>, Error> {
        (**self).audit(filter)
    }
    fn request(&self, actor: &str, key: &str) -> Result<Option<crate::RequestRecord>, Error> {
        (**self).request(actor, key)
    }
    fn acquire_lease(&mut self, operation: &str, holder: &str, ttl_ms: i64) -> Result<Lease, Error> {
        (**self).acquire_lease(operation, holder, ttl_ms)
    }
    fn renew_lease(&mut self, lease: &Lease, ttl_ms: i64) -> Result<Lease, Error> {
        (**self).renew_lease(lease, ttl_ms)
    }
    fn release_lease(&mut self, lease: &Lease) -> Result<(), Error> {
        (**self).release_lease(lease)
    }
    fn lease(&self, operation: &str) -> Result<Option<Lease>, Error> {
        (**self).lease(operation)
    }
    fn adoptable(&self) -> Result<Vec<String>, Error> {
        (**self).adoptable()
    }
}
