//! The local client: the CLI's commands over a data directory's store, without a server. It
//! returns the API's documents, built by the views the server's handlers use, so a command run
//! here prints what it prints against `opsgraph serve` (`remote.rs` is the HTTP client).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use opsgraph_api::{views, Client, GateList, LogEntry, OperationSummary, OperationView, ResourceRow};
use opsgraph_store::{AuditFilter, AuditRecord, JobRecord, OperationFilter, Store};

pub struct Local<'a> {
    store: &'a dyn Store,
    data_dir: PathBuf,
}

impl<'a> Local<'a> {
    /// A client over an open store of the data directory `data_dir` (which holds the run logs).
    pub fn new(store: &'a dyn Store, data_dir: &Path) -> Local<'a> {
        Local { store, data_dir: data_dir.to_path_buf() }
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
}
