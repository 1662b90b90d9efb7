//! Test fixtures shared by the crate's unit tests, below every module that uses them.

use opsgraph_core::plan::JobInstance;

/// Job instance `id` (of template job `id` before any `@`, on the resource after it), after
/// `deps`, in stage `s`: the fixture the decision tests and the ready-job index's share.
pub(crate) fn instance(id: &str, deps: &[&str]) -> JobInstance {
    JobInstance {
        id: id.into(),
        job: id.split('@').next().unwrap_or(id).into(),
        title: None,
        stage: "s".into(),
        scope: None,
        resource: id.split_once('@').map(|(_, r)| r.to_string()),
        depends_on: deps.iter().map(|d| d.to_string()).collect(),
        because: vec![],
        destructive: false,
        skipped: None,
        parameters: Default::default(),
        wave: None,
        verifies: None,
    }
}
