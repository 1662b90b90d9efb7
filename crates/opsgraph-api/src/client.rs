//! `Client`: what the CLI asks of Opsgraph, whether it acts on a data directory itself (the local
//! client, runtime + store) or talks to `opsgraph serve` (the HTTP client). Both return the
//! documents of `dto`, so a command is written once and prints the same either way.

use opsgraph_store::{AuditFilter, AuditRecord, JobRecord};

use crate::dto::{DiagnosisView, GateList, LogEntry, OperationSummary, OperationView, ResourceRow};

pub trait Client {
    /// Every operation, oldest first.
    fn operations(&self) -> anyhow::Result<Vec<OperationSummary>>;
    /// Everything about one operation; an error naming it when there is none.
    fn operation(&self, id: &str) -> anyhow::Result<OperationView>;
    /// The job instances of an operation.
    fn jobs(&self, operation: &str) -> anyhow::Result<Vec<JobRecord>>;
    /// The gates of an operation, with its current plan revision.
    fn gates(&self, operation: &str) -> anyhow::Result<GateList>;
    /// Every resource an operation recorded.
    fn resources(&self) -> anyhow::Result<Vec<ResourceRow>>;
    /// Each attempt's captured output, for one job (`JOB` or its instances `JOB@…`) or all.
    fn logs(&self, operation: &str, job: Option<&str>) -> anyhow::Result<Vec<LogEntry>>;
    /// The audit log, narrowed by the filter.
    fn audit(&self, filter: &AuditFilter) -> anyhow::Result<Vec<AuditRecord>>;
    /// The rules analyzer on the operation's failed jobs (empty when none failed).
    fn diagnosis(&self, operation: &str) -> anyhow::Result<Vec<DiagnosisView>>;
}

/// The one operation whose gate `gate` is open (unanswered, the operation neither completed nor
/// cancelled); an error when none or several are.
pub fn find_gate(client: &dyn Client, gate: &str) -> anyhow::Result<String> {
    use opsgraph_model::OperationStateKind as K;
    let mut found = Vec::new();
    for op in client.operations()? {
        if matches!(op.state, K::Completed | K::Cancelled) {
            continue;
        }
        if client.gates(&op.id)?.gates.iter().any(|g| g.id == gate && g.answer.is_none()) {
            found.push(op.id);
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => anyhow::bail!("no open gate `{gate}` in any operation"),
        many => {
            anyhow::bail!(
                "gate `{gate}` is open in several operations ({}); name one with --operation",
                many.join(", ")
            )
        }
    }
}
