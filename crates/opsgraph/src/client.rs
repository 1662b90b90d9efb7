//! The local client: the CLI's commands over a data directory's store, without a server. It
//! returns the API's documents, built by the views the server's handlers use, so a command run
//! here prints what it prints against `opsgraph serve` (`remote.rs` is the HTTP client).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use opsgraph_api::{
    views, AnswerReply, Client, Control, ControlReply, Cursor, DiagnosisView, GateList, InterventionReply, LogEntry,
    OperationSummary, OperationView, PatchReply, PatchRequest, ResourceRow, ResourceView,
};
use opsgraph_core::model::{Intervention, OperationState};
use opsgraph_runtime::GateAnswer;
use opsgraph_runtime::Runtime;
use opsgraph_store::{AuditFilter, AuditRecord, JobRecord, OperationFilter, OperationRecord, Store, TimelineEntry};
use serde_json::{json, Value};

pub struct Local<'a> {
    store: &'a dyn Store,
    data_dir: PathBuf,
    /// The runtime, with the packs, for what needs them (the analyzer).
    runtime: Option<&'a Runtime>,
}

impl<'a> Local<'a> {
    /// A client over an open store of the data directory `data_dir` (which holds the run logs).
    pub fn new(store: &'a dyn Store, data_dir: &Path) -> Local<'a> {
        Local { store, data_dir: data_dir.to_path_buf(), runtime: None }
    }

    /// A client over a runtime: its store, its data directory and its packs.
    pub fn of(rt: &'a Runtime) -> Local<'a> {
        Local { store: rt.store(), data_dir: rt.data_dir().to_path_buf(), runtime: Some(rt) }
    }
}

impl Client for Local<'_> {
    fn operations(&self) -> anyhow::Result<Vec<OperationSummary>> {
        Ok(self.store.operations(&OperationFilter::default())?.iter().map(views::operation_summary).collect())
    }

    fn operation_list(&self, query: &opsgraph_api::OperationQuery) -> anyhow::Result<Vec<opsgraph_api::OperationItem>> {
        Ok(opsgraph_api::listing::operations(self.store, query)?)
    }

    fn operation(&self, id: &str) -> anyhow::Result<OperationView> {
        let op = self.store.operation(id)?.with_context(|| format!("no operation `{id}`"))?;
        Ok(views::operation(self.store, &op)?)
    }

    fn timeline(&self, operation: &str, after: i64) -> anyhow::Result<Vec<TimelineEntry>> {
        Ok(self.store.timeline_after(Some(operation), after, usize::MAX)?)
    }

    fn jobs(&self, operation: &str) -> anyhow::Result<Vec<JobRecord>> {
        self.store.operation(operation)?.with_context(|| format!("no operation `{operation}`"))?;
        Ok(self.store.jobs(operation)?)
    }

    fn gates(&self, operation: &str) -> anyhow::Result<GateList> {
        let op = self.store.operation(operation)?.with_context(|| format!("no operation `{operation}`"))?;
        Ok(views::gates(self.store, &op)?)
    }

    fn resources(&self) -> anyhow::Result<Vec<ResourceRow>> {
        Ok(self.store.resources()?.iter().map(views::resource_row).collect())
    }

    fn resource(&self, id: &str) -> anyhow::Result<ResourceView> {
        let r = self.store.resource(id)?.with_context(|| format!("no resource `{id}`"))?;
        Ok(views::resource(self.store, &r)?)
    }

    fn logs(&self, operation: &str, job: Option<&str>) -> anyhow::Result<Vec<LogEntry>> {
        self.store.operation(operation)?.with_context(|| format!("no operation `{operation}`"))?;
        let blobs = crate::storage::blobs(&self.data_dir)?;
        Ok(views::logs(self.store, &*blobs, operation, job)?)
    }

    fn job_log(&self, operation: &str, job: &str, after: u64) -> anyhow::Result<opsgraph_api::JobLog> {
        self.store.operation(operation)?.with_context(|| format!("no operation `{operation}`"))?;
        let blobs = crate::storage::blobs(&self.data_dir)?;
        views::job_log(self.store, &*blobs, &self.data_dir, operation, job, after)?
            .with_context(|| format!("operation `{operation}` has no job `{job}`"))
    }

    fn audit(&self, filter: &AuditFilter) -> anyhow::Result<Vec<AuditRecord>> {
        Ok(self.store.audit(filter)?)
    }

    fn diagnosis(&self, operation: &str) -> anyhow::Result<Vec<DiagnosisView>> {
        let rt = self.runtime.context("diagnosing needs the packs: a client over a runtime (Local::of)")?;
        Ok(rt.diagnose(operation)?.iter().map(views::diagnosis).collect())
    }
}

/// Who a local command acts as: `user:NAME` for `--as NAME`, else `$USER`, else `user:local`.
/// Audit rows and the timeline name this actor.
pub fn local_actor(name: Option<&str>) -> String {
    let name = name.map(str::to_string).or_else(|| std::env::var("USER").ok()).filter(|n| !n.trim().is_empty());
    format!("user:{}", name.as_deref().unwrap_or("local"))
}

/// The users and their roles (`<data-dir>/config.yaml`, `users: {alice: [sre]}`). A local
/// stand-in for the identities of the server (issue [C]).
pub fn roles_of(data_dir: &Path, user: &str) -> anyhow::Result<Vec<String>> {
    let path = data_dir.join("config.yaml");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("no user config at {}: create it with `users: {{{user}: [sre]}}`", path.display()))?;
    let docs = opsgraph_core::pack::yaml::parse_stream(&text)
        .map_err(|e| anyhow::anyhow!("{}:{}: {}", path.display(), e.pos.line, e.message))?;
    let config = docs.first().map(opsgraph_core::pack::shape::to_json).unwrap_or(Value::Null);
    let roles =
        config["users"][user].as_array().with_context(|| format!("user `{user}` is not in {}", path.display()))?;
    Ok(roles.iter().filter_map(|r| r.as_str().map(str::to_string)).collect())
}

/// The local client that changes operations: a runtime over the data directory, acting as
/// `actor` (`--as`, else `$USER`). Each change carries the server's audit row for it, committed in
/// the change's own transaction.
pub struct LocalControl {
    pub rt: Runtime,
    actor: String,
}

impl LocalControl {
    pub fn new(rt: Runtime, actor: &str) -> LocalControl {
        LocalControl { rt, actor: actor.to_string() }
    }

    fn record(&self, id: &str) -> anyhow::Result<OperationRecord> {
        self.rt.store().operation(id)?.with_context(|| format!("no operation `{id}`"))
    }

    fn reply(id: &str, state: &OperationState) -> ControlReply {
        ControlReply { id: id.to_string(), state: state.kind(), detail: views::detail(state) }
    }

    fn audited(&mut self, action: &str, id: &str, detail: Value) -> anyhow::Result<()> {
        let op = self.record(id)?;
        self.rt.attach(vec![opsgraph_runtime::audit::control(&self.actor, action, &op, detail)]);
        Ok(())
    }
}

impl Client for LocalControl {
    fn operations(&self) -> anyhow::Result<Vec<OperationSummary>> {
        Local::of(&self.rt).operations()
    }

    fn operation_list(&self, query: &opsgraph_api::OperationQuery) -> anyhow::Result<Vec<opsgraph_api::OperationItem>> {
        Local::of(&self.rt).operation_list(query)
    }

    fn operation(&self, id: &str) -> anyhow::Result<OperationView> {
        Local::of(&self.rt).operation(id)
    }

    fn timeline(&self, operation: &str, after: i64) -> anyhow::Result<Vec<TimelineEntry>> {
        Local::of(&self.rt).timeline(operation, after)
    }

    fn jobs(&self, operation: &str) -> anyhow::Result<Vec<JobRecord>> {
        Local::of(&self.rt).jobs(operation)
    }

    fn gates(&self, operation: &str) -> anyhow::Result<GateList> {
        Local::of(&self.rt).gates(operation)
    }

    fn resources(&self) -> anyhow::Result<Vec<ResourceRow>> {
        Local::of(&self.rt).resources()
    }

    fn resource(&self, id: &str) -> anyhow::Result<ResourceView> {
        Local::of(&self.rt).resource(id)
    }

    fn logs(&self, operation: &str, job: Option<&str>) -> anyhow::Result<Vec<LogEntry>> {
        Local::of(&self.rt).logs(operation, job)
    }

    fn job_log(&self, operation: &str, job: &str, after: u64) -> anyhow::Result<opsgraph_api::JobLog> {
        Local::of(&self.rt).job_log(operation, job, after)
    }

    fn audit(&self, filter: &AuditFilter) -> anyhow::Result<Vec<AuditRecord>> {
        Local::of(&self.rt).audit(filter)
    }

    fn diagnosis(&self, operation: &str) -> anyhow::Result<Vec<DiagnosisView>> {
        Local::of(&self.rt).diagnosis(operation)
    }
}

impl Control for LocalControl {
    fn as_client(&self) -> &dyn Client {
        self
    }

    fn answer(
        &mut self,
        operation: &str,
        gate: &str,
        option: &str,
        value: Option<Value>,
        user: &str,
    ) -> anyhow::Result<AnswerReply> {
        // The role it answers in: the first of the user's roles the gate accepts.
        let roles = roles_of(self.rt.data_dir(), user)?;
        let required = self
            .rt
            .store()
            .gates(operation)?
            .into_iter()
            .find(|g| g.id == gate)
            .map(|g| g.required_roles)
            .unwrap_or_default();
        let role = roles
            .iter()
            .find(|r| required.is_empty() || required.contains(r))
            .cloned()
            .unwrap_or_else(|| roles.join("+"));
        let answer = GateAnswer { option: option.to_string(), actor: local_actor(Some(user)), role, value };
        let op = self.record(operation)?;
        let revision = op.plan_revision.clone();
        self.rt.attach(vec![
            opsgraph_store::Write::ExpectPlan { operation: operation.to_string(), revision: revision.clone() },
            opsgraph_runtime::audit::gate_answer(
                &answer.actor,
                &op,
                gate,
                (option, &answer.role),
                &revision,
                answer.value.is_some(),
            ),
        ]);
        let state = self.rt.answer_gate(operation, gate, &answer)?;
        Ok(AnswerReply {
            operation: operation.to_string(),
            gate: gate.to_string(),
            answer: option.to_string(),
            answered_by: answer.actor,
            role: answer.role,
            state: state.kind(),
        })
    }

    fn pause(&mut self, operation: &str) -> anyhow::Result<ControlReply> {
        let reason = "paused by a person";
        self.audited("operation.pause", operation, json!({"reason": reason}))?;
        let state = self.rt.pause(operation, &self.actor.clone(), reason)?;
        Ok(Self::reply(operation, &state))
    }

    fn resume(&mut self, operation: &str) -> anyhow::Result<ControlReply> {
        // A `running` operation whose driver died (a crash, a closed terminal) is simply driven
        // again: recovery checks the evidence of attempts left without an outcome.
        let op = self.record(operation)?;
        if matches!(op.state, OperationState::Running) {
            return Ok(Self::reply(operation, &op.state));
        }
        self.audited("operation.resume", operation, json!({}))?;
        let state = self.rt.resume(operation, &self.actor.clone())?;
        Ok(Self::reply(operation, &state))
    }

    fn cancel(&mut self, operation: &str) -> anyhow::Result<ControlReply> {
        let reason = "cancelled by a person";
        self.audited("operation.cancel", operation, json!({"reason": reason}))?;
        let state = self.rt.cancel(operation, &self.actor.clone(), reason)?;
        Ok(Self::reply(operation, &state))
    }

    fn retry(&mut self, operation: &str, jobs: &[String]) -> anyhow::Result<ControlReply> {
        self.audited("operation.retry", operation, json!({"jobs": jobs}))?;
        let state = self.rt.retry(operation, jobs, &self.actor.clone())?;
        Ok(Self::reply(operation, &state))
    }

    fn intervene(&mut self, operation: &str, iv: &Intervention) -> anyhow::Result<InterventionReply> {
        self.audited("operation.intervene", operation, json!({"note": iv.note}))?;
        let v = self.rt.intervene(operation, iv, &self.actor.clone())?;
        Ok(views::intervention(operation, &v))
    }

    fn propose(&mut self, operation: &str, patch: &PatchRequest) -> anyhow::Result<PatchReply> {
        let (patch, author) = match patch {
            PatchRequest::Document { patch, .. } => (patch.clone(), self.actor.clone()),
            PatchRequest::Remedy(id) => (self.rt.remedy_patch(operation, id)?, self.actor.clone()),
            PatchRequest::Analyzer => {
                (self.rt.analyzer_patch(operation)?, opsgraph_runtime::ANALYZER_AUTHOR.to_string())
            }
        };
        let op = self.record(operation)?;
        self.rt.attach(vec![opsgraph_runtime::audit::control(
            &self.actor,
            "operation.patch",
            &op,
            json!({"reason": patch.reason}),
        )]);
        let p = self.rt.propose_patch(operation, &patch, &author)?;
        Ok(views::patch_reply(operation, &p))
    }

    fn follow(
        &mut self,
        id: &str,
        after: i64,
        seen: &mut (dyn FnMut(&TimelineEntry) + Send),
    ) -> anyhow::Result<OperationView> {
        // What this drive commits is read back from the store on a connection of its own, so
        // it shows exactly what a server's client sees of the same run. The driver runs on this
        // thread and only signals each commit: the reading and `seen` (the printing) happen on
        // the follower's thread meanwhile, so the driver never waits for them
        // (`crate::follower`). The reading connection is opened at the first look (the drive's
        // first commit), on that thread, while the driver goes on: the drive does not wait for
        // it to read the schema.
        let data_dir = self.rt.data_dir().to_path_buf();
        let mut reader: Option<Box<dyn Store>> = None;
        let mut cursor = Cursor::new(after);
        let mut look = |seen: &mut dyn FnMut(&TimelineEntry)| -> anyhow::Result<()> {
            let store = match &mut reader {
                Some(store) => store,
                empty => empty.insert(crate::storage::open_store(&data_dir)?),
            };
            cursor.advance(&Local::new(&**store, &data_dir), id, seen)
        };
        let rt = &mut self.rt;
        crate::follower::beside(
            |progress| drive(rt, id, progress),
            || {
                let _ = look(seen);
            },
        )
        .and_then(|driven| {
            // Everything the drive committed, its last entries included, once it stopped.
            let shown = look(seen);
            driven?;
            shown
        })?;
        let op = self.rt.store().operation(id)?.with_context(|| format!("no operation `{id}`"))?;
        Ok(opsgraph_api::views::operation_brief(self.rt.store(), &op)?)
    }

    fn verify(&mut self, resource: &str) -> anyhow::Result<opsgraph_runtime::VerifyReport> {
        Ok(self.rt.verify(resource, &self.actor.clone())?)
    }
}

/// Drives an operation under its lease, so that no server replica (or other CLI) drives it at
/// the same time; refused while another holds it.
pub fn drive(rt: &mut Runtime, id: &str, progress: opsgraph_runtime::Progress<'_>) -> anyhow::Result<OperationState> {
    let data_dir = rt.data_dir().to_path_buf();
    let open = crate::storage::opener(&data_dir);
    let keeper = opsgraph_runtime::lease::Keeper::new(
        opsgraph_runtime::lease::LeaseConfig::from_env(),
        Box::new(move || open()),
    );
    Ok(rt.drive_leased(id, &keeper, progress)?)
}
