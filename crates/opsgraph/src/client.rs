//! The local client: the CLI's commands over a data directory's store, without a server. It
//! returns the API's documents, built by the views the server's handlers use, so a command run
//! here prints what it prints against `opsgraph serve` (`remote.rs` is the HTTP client).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use opsgraph_api::{views, Client, DiagnosisView, GateList, LogEntry, OperationSummary, OperationView, ResourceRow};
use opsgraph_runtime::Runtime;
use opsgraph_store::{AuditFilter, AuditRecord, JobRecord, OperationFilter, Store};

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

    fn operation(&self, id: &str) -> anyhow::Result<OperationView> {
        let op = self.store.operation(id)?.with_context(|| format!("no operation `{id}`"))?;
        Ok(views::operation(self.store, &op)?)
    }

    fn jobs(&self, operation: &str) -> anyhow::Result<Vec<JobRecord>> {
        Ok(self.store.jobs(operation)?)
    }

    fn gates(&self, operation: &str) -> anyhow::Result<GateList> {
        let op = self.store.operation(operation)?.with_context(|| format!("no operation `{operation}`"))?;
        Ok(views::gates(self.store, &op)?)
    }

    fn resources(&self) -> anyhow::Result<Vec<ResourceRow>> {
        Ok(self.store.resources()?.iter().map(views::resource_row).collect())
    }

    fn logs(&self, operation: &str, job: Option<&str>) -> anyhow::Result<Vec<LogEntry>> {
        self.store.operation(operation)?.with_context(|| format!("no operation `{operation}`"))?;
        Ok(views::logs(self.store, &self.data_dir.join("runs"), operation, job)?)
    }

    fn audit(&self, filter: &AuditFilter) -> anyhow::Result<Vec<AuditRecord>> {
        Ok(self.store.audit(filter)?)
    }

    fn diagnosis(&self, operation: &str) -> anyhow::Result<Vec<DiagnosisView>> {
        let rt = self.runtime.context("diagnosing needs the packs: a client over a runtime (Local::of)")?;
        Ok(rt.diagnose(operation)?.iter().map(views::diagnosis).collect())
    }
}
