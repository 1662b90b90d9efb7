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
    use opsgraph_core::model::OperationStateKind as K;
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

/// The changes a person makes to an operation through a client. Locally each change commits
/// with its audit row (the server's rows, `opsgraph_runtime::audit`); a server audits its caller.
pub trait Control: Client {
    /// Answers `gate` of `operation`. `user` names the person locally (`--as`); a server knows
    /// its caller from the token. `value` is the typed value of a missing-input gate.
    fn answer(
        &mut self,
        operation: &str,
        gate: &str,
        option: &str,
        value: Option<serde_json::Value>,
        user: &str,
    ) -> anyhow::Result<crate::dto::AnswerReply>;
    fn pause(&mut self, operation: &str) -> anyhow::Result<crate::dto::ControlReply>;
    /// Resumes a paused operation; a `running` one is only driven again.
    fn resume(&mut self, operation: &str) -> anyhow::Result<crate::dto::ControlReply>;
    fn cancel(&mut self, operation: &str) -> anyhow::Result<crate::dto::ControlReply>;
    /// Runs failed jobs again (all when `jobs` is empty).
    fn retry(&mut self, operation: &str, jobs: &[String]) -> anyhow::Result<crate::dto::ControlReply>;
    /// Records a manual fix of a failed operation and verifies it by the evidence it names.
    fn intervene(
        &mut self,
        operation: &str,
        iv: &opsgraph_core::model::Intervention,
    ) -> anyhow::Result<crate::dto::InterventionReply>;
    /// Verifies a resource now by its pack's checks ([I]) and records what they found.
    fn verify(&mut self, resource: &str) -> anyhow::Result<opsgraph_runtime::VerifyReport>;
}

/// A gate's value as given on the command line: JSON when it parses, else the text itself.
pub fn gate_value(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_string()))
}
