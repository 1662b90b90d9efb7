//! The agent's side: a claimed payload run by the same code as a local attempt, its output
//! masked and streamed.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opsgraph_core::model::Evidence;
use opsgraph_exec::{Cancel, EvidenceResult, Executor, LocalExecutor, Program};
use serde_json::Value;

use super::scripts::{private_dir, script_file};
use super::wire::{b64, unb64, AgentJob, AgentReport, WireEvidence, WireFile, WireProgram};
use crate::task::Task;

/// Runs a claimed payload on this machine the way a local attempt runs: `jobs::run` on the
/// local executor (the HTTP one for HTTP jobs) and the same evidence checks. `dir` is the task's
/// private working directory (made when missing; the caller empties it between tasks);
/// `scripts` is where scripts are kept by content between tasks (see [`script_file`]); `tee`
/// sees the job's output as it arrives.
pub fn execute(
    payload: &Value,
    dir: &Path,
    scripts: &Path,
    tee: Option<opsgraph_exec::Tee>,
    cancel: &Cancel,
) -> AgentReport {
    // Read in place (`&Value` is a deserializer): the payload is not copied first.
    match <AgentJob as serde::Deserialize>::deserialize(payload) {
        Ok(job) => execute_job(&job, dir, scripts, tee, cancel),
        Err(e) => refused(format!("the payload is not a job this agent understands: {e}")),
    }
}

fn refused(why: String) -> AgentReport {
    AgentReport { outcome: "could not start".into(), failure: Some(why), ..Default::default() }
}

/// [`execute`] for a payload the agent read straight into its job (no JSON tree first).
pub fn execute_job(
    job: &AgentJob,
    dir: &Path,
    scripts: &Path,
    tee: Option<opsgraph_exec::Tee>,
    cancel: &Cancel,
) -> AgentReport {
    if let Err(e) = private_dir(dir) {
        return refused(format!("cannot make the working directory {}: {e}", dir.display()));
    }
    let mut env = job.env.clone();
    for f in &job.files {
        match crate::secrets::private_file(&dir.join("files"), &f.name, &unb64(&f.content)) {
            Ok(path) => {
                env.insert(f.name.clone(), path.display().to_string());
            }
            Err(e) => return refused(format!("cannot write {}: {e}", f.name)),
        }
    }
    let mut libraries = Vec::new();
    for f in &job.libraries {
        if f.name.is_empty() || f.name.contains('/') || f.name.starts_with('.') {
            return refused(format!("`{}` is not a library's file name", f.name));
        }
        match crate::secrets::private_file(&dir.join("lib"), &f.name, &unb64(&f.content)) {
            Ok(path) => libraries.push(path),
            Err(e) => return refused(format!("cannot write the library {}: {e}", f.name)),
        }
    }
    // The kept script this task runs: not removed from the cache while it is held (`scripts.rs`).
    let mut in_use = None;
    let program = match &job.program {
        None => None,
        Some(WireProgram::Argv(a)) => Some(Program::Argv(a.clone())),
        Some(WireProgram::Shell(l)) => Some(Program::Shell(l.clone())),
        Some(WireProgram::Script { name, content, args }) => {
            let name = if name.is_empty() || name.contains('/') || name.starts_with('.') { "script.sh" } else { name };
            match script_file(scripts, name, &unb64(content)) {
                Ok(kept) => {
                    let path = kept.path.clone();
                    in_use = Some(kept);
                    Some(Program::Script { path, args: args.clone() })
                }
                Err(e) => return refused(format!("cannot write the script: {e}")),
            }
        }
        Some(WireProgram::Http { method, url, headers, body }) => Some(Program::Http {
            method: method.clone(),
            url: url.clone(),
            headers: headers.clone(),
            body: unb64(body),
        }),
    };
    let executor: Arc<dyn Executor> = if matches!(program, Some(Program::Http { .. })) {
        Arc::new(opsgraph_exec::HttpExecutor)
    } else {
        Arc::new(TeeExecutor(tee))
    };
    let mask: Vec<Vec<u8>> = job.mask.iter().map(|m| unb64(m)).collect();
    let started = Instant::now();
    if job.kind == "evidence" {
        let (checks, failure) = crate::jobs::evidence(&job.evidence, &*executor, &env, cancel);
        let (checks, failure) = crate::masking::masked(mask, checks, failure);
        return AgentReport {
            outcome: "evidence checked".into(),
            failure,
            satisfied_without_run: true,
            evidence: wire_evidence(checks),
            duration_ms: started.elapsed().as_millis() as u64,
            ..Default::default()
        };
    }
    let task = Task {
        instance: job.instance.clone(),
        attempt: job.attempt,
        job: job.job.clone(),
        evidence: job.evidence.clone(),
        program,
        env,
        libraries,
        timeout: job.timeout_ms.map(Duration::from_millis),
        executor,
        mark: None,
        dir: dir.to_path_buf(),
        stem: "job".into(),
        cancel: cancel.clone(),
        check_first: job.check_first,
        secret_outputs: job.secret_outputs.clone(),
        mask,
        instead: None,
        share_live: None,
    };
    let r = crate::jobs::run(task);
    drop(in_use);
    AgentReport {
        outcome: r.outcome,
        failure: r.failure,
        satisfied_without_run: r.satisfied_without_run,
        cancelled: r.cancelled,
        evidence: wire_evidence(r.evidence),
        produced: r
            .produced
            .iter()
            .filter_map(|(id, path)| Some(WireFile { name: id.clone(), content: b64(&std::fs::read(path).ok()?) }))
            .collect(),
        duration_ms: r.duration.as_millis() as u64,
    }
}

fn wire_evidence(checks: Vec<(Evidence, EvidenceResult)>) -> Vec<WireEvidence> {
    checks
        .into_iter()
        .map(|(e, r)| WireEvidence {
            check: e.id,
            passed: r.passed,
            expected: r.expected,
            observed: r.observed,
            detail: r.detail,
            attempts: r.attempts,
        })
        .collect()
}

/// The local executor, with the job's own run teed to the server: the run `jobs::run` gives a
/// live log's tee (its evidence checks have none). Not the run that carries a transfer: a
/// local run is given none.
struct TeeExecutor(Option<opsgraph_exec::Tee>);

impl Executor for TeeExecutor {
    fn run(&self, spec: &opsgraph_exec::Spec, cancel: &Cancel) -> opsgraph_exec::Run {
        match &self.0 {
            Some(tee) if spec.tee.is_some() => {
                let mut spec = spec.clone();
                spec.tee = Some(tee.clone());
                LocalExecutor.run(&spec, cancel)
            }
            _ => LocalExecutor.run(spec, cancel),
        }
    }

    fn is_local(&self) -> bool {
        true
    }
}

/// A job's output on its way to the server: whole lines, secret values masked (a value split
/// across a line break is not recognised; the final log is masked the same way).
pub struct LogStream {
    masking: crate::masking::Masking,
    pending: Vec<u8>,
}

impl LogStream {
    /// For the payload an agent claimed (its secret values are masked).
    pub fn for_payload(payload: &Value) -> LogStream {
        let mask: Vec<Vec<u8>> = payload
            .get("mask")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(unb64)
            .collect();
        LogStream { masking: crate::masking::Masking::new(mask), pending: Vec::new() }
    }

    /// For a job an agent claimed (its secret values are masked).
    pub fn for_job(job: &AgentJob) -> LogStream {
        let mask = job.mask.iter().map(|m| unb64(m)).collect();
        LogStream { masking: crate::masking::Masking::new(mask), pending: Vec::new() }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// Whether nothing is left to take.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The complete lines so far, masked (everything, when `all` or past 64 KiB), at most
    /// 128 KiB at a time.
    pub fn take(&mut self, all: bool) -> String {
        let cut = if all || self.pending.len() > 64 << 10 {
            self.pending.len()
        } else {
            match self.pending.iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                None => return String::new(),
            }
        };
        // At most 128 KiB a chunk (the server takes 256 KiB): call again for the rest.
        let cut = cut.min(128 << 10);
        let chunk: Vec<u8> = self.pending.drain(..cut).collect();
        crate::masking::storable_log(String::from_utf8_lossy(&self.masking.bytes(&chunk)).into_owned())
    }
}
