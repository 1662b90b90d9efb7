//! `Client`: what the CLI asks of Opsgraph, whether it acts on a data directory itself (the local
//! client, runtime + store) or talks to `opsgraph serve` (the HTTP client). Both return the
//! documents of `dto`, so a command is written once and prints the same either way.

use opsgraph_store::{AuditFilter, AuditRecord, JobRecord, TimelineEntry};

use crate::dto::{
    DiagnosisView, GateList, LogEntry, OperationSummary, OperationView, PatchReply, ResourceRow, ResourceView,
};

pub trait Client {
    /// Every operation, oldest first.
    fn operations(&self) -> anyhow::Result<Vec<OperationSummary>>;
    /// The operations a query names, oldest first, each with its pack and environment
    /// (`GET /operations?…`, `get operations --state …`).
    fn operation_list(&self, query: &crate::OperationQuery) -> anyhow::Result<Vec<crate::OperationItem>>;
    /// Everything about one operation; an error naming it when there is none.
    fn operation(&self, id: &str) -> anyhow::Result<OperationView>;
    /// The operation's own timeline entries with a `seq` above `after`, oldest first (read from
    /// there on, not the whole document: a follower asks after every commit).
    fn timeline(&self, operation: &str, after: i64) -> anyhow::Result<Vec<TimelineEntry>>;
    /// The job instances of an operation; an error naming it when there is none.
    fn jobs(&self, operation: &str) -> anyhow::Result<Vec<JobRecord>>;
    /// The gates of an operation, with its current plan revision.
    fn gates(&self, operation: &str) -> anyhow::Result<GateList>;
    /// Every resource an operation recorded.
    fn resources(&self) -> anyhow::Result<Vec<ResourceRow>>;
    /// One resource with the operations that touched it; an error naming it when there is none.
    fn resource(&self, id: &str) -> anyhow::Result<ResourceView>;
    /// Each attempt's captured output, for one job (`JOB` or its instances `JOB@…`) or all.
    fn logs(&self, operation: &str, job: Option<&str>) -> anyhow::Result<Vec<LogEntry>>;
    /// One job instance's latest attempt: its live output from byte `after` on while it runs, its
    /// final log once it ended (`logs --follow`); an error naming it when there is none.
    fn job_log(&self, operation: &str, job: &str, after: u64) -> anyhow::Result<crate::replies::JobLog>;
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
    /// This client as a reader (the trait objects' upcast, spelled out for the MSRV).
    fn as_client(&self) -> &dyn Client;
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
    /// Proposes a plan patch for a failed (or paused) operation: reviewed, then applied or left
    /// waiting at its review gate.
    fn propose(&mut self, operation: &str, patch: &PatchRequest) -> anyhow::Result<PatchReply>;
    /// Follows operation `id` until it stops moving — driving it here (the local client) or
    /// watching the server drive it (HTTP) — and hands `seen` each entry of [`timeline_after`]
    /// `after` as it is committed. Returns the operation's document once it stopped (locally
    /// without its timeline, which the follower was handed entry by entry).
    fn follow(
        &mut self,
        id: &str,
        after: i64,
        seen: &mut (dyn FnMut(&TimelineEntry) + Send),
    ) -> anyhow::Result<OperationView>;
    /// Verifies a resource now by its pack's checks ([I]) and records what they found.
    fn verify(&mut self, resource: &str) -> anyhow::Result<opsgraph_runtime::VerifyReport>;
}

/// The plan patch a person proposes.
#[derive(Debug, Clone)]
pub enum PatchRequest {
    /// A `plan_patch` document: checked, and its text (what a server is sent).
    Document { patch: opsgraph_core::model::PlanPatch, text: String },
    /// The patch of one of the operation's pack remedies, by id, proposed by the caller.
    Remedy(String),
    /// The patch of the remedy the rules analyzer matches for the operation's failure, proposed
    /// by the analyzer (`ai-agent:planner`): it waits for a person like any AI's patch.
    Analyzer,
}

/// The operation at the top of `id`'s chain of parents: the one that drives it.
pub fn root_of(client: &dyn Client, id: &str) -> anyhow::Result<String> {
    let mut id = id.to_string();
    for _ in 0..16 {
        match client.operation(&id)?.summary.parent {
            Some(parent) => id = parent,
            None => break,
        }
    }
    Ok(id)
}

/// The timeline entries of operation `id` and of its sub-operations (at any depth) with a `seq`
/// above `after`, in commit order: what following an operation shows, the same for both clients.
pub fn timeline_after(client: &dyn Client, id: &str, after: i64) -> anyhow::Result<Vec<TimelineEntry>> {
    let family = family(&client.operations()?, id);
    let mut entries = Vec::new();
    for op in &family {
        entries.extend(client.timeline(op, after)?);
    }
    entries.sort_by_key(|e| e.seq);
    Ok(entries)
}

/// Operation `id` and its sub-operations at any depth, by the `parent`s of `all`.
pub fn family(all: &[OperationSummary], id: &str) -> std::collections::BTreeSet<String> {
    let mut family = std::collections::BTreeSet::from([id.to_string()]);
    let mut grown = true;
    while grown {
        grown = false;
        for o in all {
            if o.parent.as_ref().is_some_and(|p| family.contains(p)) {
                grown |= family.insert(o.id.clone());
            }
        }
    }
    family
}

/// Where a follower starts: after the last entry `timeline_after` shows now.
pub fn last_seq(client: &dyn Client, id: &str) -> anyhow::Result<i64> {
    Ok(timeline_after(client, id, 0)?.last().map_or(0, |e| e.seq))
}

/// A follower's place in an operation's timeline: hands on each entry once, in commit order.
///
/// Each round reads the timelines of the operations it knows, each from its own last entry (so an
/// entry committed to one between the reads of two others is never skipped), and only then the
/// list of the family: a sub-operation exists before its parent's entry that names it, so a child
/// whose note was just read is listed, and it is read from where the follower started — its
/// first entries, committed before that note, are handed on before it, not after. Every entry is
/// handed on once; across two operations of the family, an entry committed to one between the
/// reads of two timelines may come a round late (a server's event stream has no such gap).
#[derive(Debug, Clone)]
pub struct Cursor {
    /// The last entry handed on, of any operation of the family.
    pub after: i64,
    start: i64,
    /// The operations of the family read so far, each with its last entry handed on.
    known: std::collections::BTreeMap<String, i64>,
}

impl Cursor {
    /// A follower of the entries after `after`.
    pub fn new(after: i64) -> Cursor {
        Cursor { after, start: after, known: Default::default() }
    }

    /// Hands `seen` every entry committed since the last call.
    pub fn advance(
        &mut self,
        client: &dyn Client,
        id: &str,
        seen: &mut dyn FnMut(&TimelineEntry),
    ) -> anyhow::Result<()> {
        let first = self.known.is_empty();
        if first {
            self.known.insert(id.to_string(), self.start);
        }
        let mut entries = Vec::new();
        for (op, after) in &self.known {
            entries.extend(client.timeline(op, *after)?);
        }
        for op in family(&client.operations()?, id) {
            if !self.known.contains_key(&op) {
                entries.extend(client.timeline(&op, self.start)?);
                self.known.insert(op, self.start);
            }
        }
        entries.sort_by_key(|e| e.seq);
        for e in entries {
            if let Some(after) = self.known.get_mut(&e.operation) {
                *after = (*after).max(e.seq);
            }
            self.after = self.after.max(e.seq);
            seen(&e);
        }
        Ok(())
    }
}

/// A gate's value as given on the command line: JSON when it parses, else the text itself.
pub fn gate_value(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_string()))
}
