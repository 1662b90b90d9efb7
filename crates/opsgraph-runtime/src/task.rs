//! One attempt as the driver hands it to a worker ([`Task`]) and as the worker reports it
//! ([`TaskResult`]). Below the modules that build, run and read them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use opsgraph_core::model::{Evidence, Job};
use opsgraph_exec::{Cancel, EvidenceResult, Executor, Program};

/// Everything a worker needs for one attempt.
pub(crate) struct Task {
    pub(crate) instance: String,
    pub(crate) attempt: u32,
    pub(crate) job: Job,
    pub(crate) evidence: Vec<Evidence>,
    pub(crate) program: Option<Program>,
    pub(crate) env: BTreeMap<String, String>,
    /// The pack's library scripts, staged beside the script wherever it runs, in the directory
    /// `OPSGRAPH_LIB` names (all in one local directory: the pack's `scripts/lib/`).
    pub(crate) libraries: Vec<PathBuf>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) executor: Arc<dyn Executor>,
    /// The mark its run carries on a remote target, recorded with its `running` record
    /// (`opsgraph_exec::Spec::mark`).
    pub(crate) mark: Option<String>,
    /// The operation's run directory, the attempt's working directory.
    pub(crate) dir: PathBuf,
    /// `<instance>.<attempt>`: names the attempt's `.out/` directory and `.log` file in `dir`.
    pub(crate) stem: String,
    pub(crate) cancel: Cancel,
    /// Check evidence first: when it all passes, the job is already satisfied and does not run.
    pub(crate) check_first: bool,
    /// Declared outputs that are secret: their content is masked in the output too.
    pub(crate) secret_outputs: Vec<String>,
    /// Secret values the job was given, masked in its captured output and evidence.
    pub(crate) mask: Vec<Vec<u8>>,
    /// Carried out otherwise: the worker runs this instead of running the attempt here —
    /// waiting for a remote agent's report, or running a rollout's checks between waves on the
    /// hosts done. A closure, so that a task names nothing of the modules that make them.
    pub(crate) instead: Option<Instead>,
    /// Its live log, shared with the server replicas that do not drive it (`live/share.rs`).
    pub(crate) share_live: Option<crate::live::share::ShareAs>,
}

/// How a worker carries out an attempt that does not run here (`Task::instead`).
pub(crate) type Instead = Box<dyn FnOnce(Task) -> TaskResult + Send>;

impl Task {
    /// Nothing to run, no evidence to check, no artifact to collect, and not an agent's: the
    /// attempt's result is known the moment it starts.
    pub(crate) fn is_trivial(&self) -> bool {
        // One carried out otherwise (an agent's, checks between waves): never trivial.
        self.instead.is_none() && nothing_to_run(self.program.as_ref(), &self.evidence, &self.job)
    }
}

/// Whether an attempt of `job`, running `program` and checking `evidence` (the pack's checks
/// the job names), has nothing to run, check or collect.
pub(crate) fn nothing_to_run(program: Option<&Program>, evidence: &[Evidence], job: &Job) -> bool {
    program.is_none() && evidence.is_empty() && job.outputs.artifacts.is_empty()
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub(crate) struct TaskResult {
    pub(crate) instance: String,
    pub(crate) attempt: u32,
    pub(crate) outcome: String,
    /// `None` when the job's output contract is proven.
    pub(crate) failure: Option<String>,
    /// Evidence passed without running the job (idempotency or recovery).
    pub(crate) satisfied_without_run: bool,
    pub(crate) evidence: Vec<(Evidence, EvidenceResult)>,
    pub(crate) produced: Vec<(String, PathBuf)>,
    pub(crate) log: Option<PathBuf>,
    pub(crate) duration: Duration,
    pub(crate) cancelled: bool,
    /// Its agent was lost mid-run: `evidence` was checked instead (recovery, as after a crash).
    pub(crate) unknown: bool,
    /// An agent's report handed to this attempt's worker in memory (not committed yet): its
    /// writes go into the driver's commit of this result, and only then is the agent answered.
    pub(crate) handed: Option<Arc<Handed>>,
    /// A worker started it once its `running` record was durable (`committer.rs`, rule 6).
    pub(crate) after_sync: bool,
    /// Its live log never made a file (a local or SSH run without output): the driver need not
    /// remove one (an `unlink` a job on the driver's thread). False wherever it is not known.
    pub(crate) no_live_file: bool,
}

/// Writes a result brings to the driver's commit, and who waits for that commit: told once,
/// after it (`true`), or when they are dropped uncommitted (`false`: the waiter commits them
/// itself, as if nothing had been handed).
pub(crate) struct Handed {
    pub(crate) writes: Vec<opsgraph_store::Write>,
    told: std::sync::Mutex<Option<Told>>,
}

/// Tells the waiter whether the writes were committed.
pub(crate) type Told = Box<dyn FnOnce(bool) + Send>;

impl Handed {
    pub(crate) fn new(writes: Vec<opsgraph_store::Write>, told: Told) -> Handed {
        Handed { writes, told: std::sync::Mutex::new(Some(told)) }
    }

    /// The driver committed the writes.
    pub(crate) fn committed(&self) {
        if let Some(tell) = self.told.lock().unwrap_or_else(|e| e.into_inner()).take() {
            tell(true);
        }
    }
}

impl Drop for Handed {
    fn drop(&mut self) {
        if let Some(tell) = self.told.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            tell(false);
        }
    }
}

impl std::fmt::Debug for Handed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handed({} writes)", self.writes.len())
    }
}

impl TaskResult {
    /// The result of `task` before anything is known: no outcome yet, nothing produced.
    pub(crate) fn of(task: &Task) -> TaskResult {
        TaskResult::blank(task.instance.clone(), task.attempt)
    }

    /// The result of an attempt with nothing to run, check or collect ([`nothing_to_run`]):
    /// known the moment it starts. It made no live log (nothing for the driver to remove).
    pub(crate) fn nothing_to_run(instance: String, attempt: u32) -> TaskResult {
        let mut r = TaskResult::blank(instance, attempt);
        r.outcome = "nothing to run".into();
        r.no_live_file = true;
        r
    }

    fn blank(instance: String, attempt: u32) -> TaskResult {
        TaskResult {
            instance,
            attempt,
            outcome: String::new(),
            failure: None,
            satisfied_without_run: false,
            evidence: Vec::new(),
            produced: Vec::new(),
            log: None,
            duration: Duration::ZERO,
            cancelled: false,
            unknown: false,
            handed: None,
            after_sync: false,
            no_live_file: false,
        }
    }
}

/// An executor that refuses, saying why: every run is "could not start" with that reason (a
/// target nothing can reach, a task no agent may take).
pub(crate) struct Refuse(pub(crate) String);

impl Executor for Refuse {
    fn run(&self, _: &opsgraph_exec::Spec, _: &Cancel) -> opsgraph_exec::Run {
        opsgraph_exec::Run {
            outcome: opsgraph_exec::Outcome::CouldNotStart { error: self.0.clone() },
            output: opsgraph_exec::Output::default(),
            http_status: None,
            leaked: false,
            remote_stop: None,
        }
    }
}
