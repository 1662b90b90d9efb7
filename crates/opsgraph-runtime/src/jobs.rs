//! One attempt of one job instance: prepare its environment, run it, check its evidence, collect
//! its artifacts. Runs on a worker thread; everything it needs is owned.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use opsgraph_core::model::Evidence;
use opsgraph_core::pack::libraries::LIBRARY_ENV;
use opsgraph_exec::{check_evidence, Cancel, EvidenceResult, Executor, Spec};
use opsgraph_store::BlobStore;

use crate::live::{live_path, LiveLog};
use crate::masking::Masking;
use crate::task::{Task, TaskResult};

/// Runs every evidence check; the first failing one is the reason.
pub(crate) fn evidence(
    checks: &[Evidence],
    executor: &dyn Executor,
    env: &BTreeMap<String, String>,
    cancel: &Cancel,
) -> (Vec<(Evidence, EvidenceResult)>, Option<String>) {
    let mut results = Vec::new();
    let mut failure = None;
    for check in checks {
        let r = check_evidence(check, executor, env, cancel);
        if !r.passed && failure.is_none() {
            failure = Some(format!(
                "evidence {} failed: expected {}, observed {}",
                check.id,
                r.expected,
                if r.observed.is_empty() { "nothing".to_string() } else { r.observed.clone() }
            ));
        }
        results.push((check.clone(), r));
    }
    (results, failure)
}

pub(crate) fn run(task: Task) -> TaskResult {
    let started = Instant::now();
    if task.is_trivial() {
        // Nothing to run, check or collect (the in-process no-op job): what the steps below
        // would conclude, without copying its environment or naming its output directory.
        let mut result = TaskResult::nothing_to_run(task.instance, task.attempt);
        result.duration = started.elapsed();
        return result;
    }
    let mut result = TaskResult::of(&task);
    if task.check_first && !task.evidence.is_empty() {
        let (checks, failure) = evidence(&task.evidence, &*task.executor, &task.env, &task.cancel);
        if failure.is_none() {
            result.outcome = "evidence already passes".into();
            result.satisfied_without_run = true;
            result.no_live_file = true;
            result.evidence = Masking::new(task.mask.clone()).evidence(checks);
            result.duration = started.elapsed();
            return result;
        }
    }
    // A directory costs a filesystem round trip: only jobs that declare artifacts get one.
    let out = task.dir.join(format!("{}.out", task.stem));
    if !task.job.outputs.artifacts.is_empty() {
        if let Err(e) = std::fs::create_dir_all(&out) {
            result.outcome = "could not start".into();
            result.failure = Some(format!("could not create {}: {e}", out.display()));
            return result;
        }
    }
    let mut env = task.env.clone();
    env.insert("OPSGRAPH_OUT".into(), out.display().to_string());
    // The libraries are in one directory (the pack's, or the agent's copy): scripts source them
    // from there, or from the copy the SSH executor makes on the remote host.
    if let Some(lib) = task.libraries.first().and_then(|l| l.parent()) {
        env.insert(LIBRARY_ENV.into(), lib.display().to_string());
    }
    let mut masker = Masking::new(task.mask.clone());
    if let Some(program) = task.program.clone() {
        let mut spec = Spec::new(program);
        spec.timeout = task.timeout;
        spec.workdir = Some(task.dir.clone());
        spec.mark = task.mark.clone();
        // On a remote host: required artifacts and credentials go there first, produced ones
        // come back. Local runs use the files where they are and ignore it: not built for them.
        if !task.executor.is_local() {
            spec.transfer = Some(opsgraph_exec::Transfer {
                upload: env
                    .keys()
                    .filter(|k| {
                        k.starts_with("OPSGRAPH_ARTIFACT_") || k.ends_with("_CREDENTIALS") || *k == "KUBECONFIG"
                    })
                    .cloned()
                    .collect(),
                bundle: Some(opsgraph_exec::Bundle { env: LIBRARY_ENV.into(), files: task.libraries.clone() }),
                download: Some(opsgraph_exec::Download {
                    env: "OPSGRAPH_OUT".into(),
                    local_dir: out.clone(),
                    files: task.job.outputs.artifacts.clone(),
                }),
            });
        }
        // Lent to the run, taken back for the evidence checks (no copy of it a job).
        spec.env = std::mem::take(&mut env);
        // Its output as it arrives, masked, in the live log (`live.rs`).
        let live = std::sync::Arc::new(std::sync::Mutex::new(LiveLog::new(
            live_path(&task.dir, &task.stem),
            task.mask.clone(),
            !task.secret_outputs.is_empty(),
            task.share_live.as_ref(),
        )));
        spec.tee = Some(LiveLog::tee(&live));
        let mut run = task.executor.run(&spec, &task.cancel);
        env = std::mem::take(&mut spec.env);
        {
            let mut live = live.lock().unwrap_or_else(|e| e.into_inner());
            live.finish();
            // Nothing to remove after it when it never made its file (no output).
            result.no_live_file = !live.touched();
        }
        // Secret values (given, and produced) never reach the log or a failure reason.
        let mut values = task.mask.clone();
        for id in &task.secret_outputs {
            if let Ok(bytes) = std::fs::read(out.join(id)) {
                values.push(bytes);
            }
        }
        masker = Masking::new(values);
        run.output.stdout = masker.bytes(&run.output.stdout);
        run.output.stderr = masker.bytes(&run.output.stderr);
        let mut text = run.output.stdout.clone();
        if !run.output.stderr.is_empty() {
            text.extend_from_slice(b"--- stderr\n");
            text.extend_from_slice(&run.output.stderr);
        }
        if !text.is_empty() {
            let log = task.dir.join(format!("{}.log", task.stem));
            let _ = std::fs::write(&log, &text);
            result.log = Some(log);
        }
        result.outcome = run.outcome.to_string();
        result.cancelled = matches!(run.outcome, opsgraph_exec::Outcome::Cancelled);
        if !run.outcome.is_success() {
            let tail = last_line(&run.output.stderr).or_else(|| last_line(&run.output.stdout));
            // Over SSH, what became of the remote command is part of why (a retry may meet it).
            let outcome = match &run.remote_stop {
                Some(stop) => format!("{} ({stop})", run.outcome),
                None => run.outcome.to_string(),
            };
            result.failure = Some(match tail {
                Some(line) => format!("{outcome}: {}", crate::masking::printable(&line)),
                None => outcome,
            });
            result.duration = started.elapsed();
            return result;
        }
    } else {
        result.outcome = "nothing to run".into();
    }
    for artifact in &task.job.outputs.artifacts {
        let path = out.join(artifact);
        if path.is_file() {
            result.produced.push((artifact.clone(), path));
        } else if result.failure.is_none() {
            result.failure =
                Some(format!("artifact {artifact} was not produced (expected at $OPSGRAPH_OUT/{artifact})"));
        }
    }
    // Evidence decides, whatever the exit code said.
    let (checks, failure) = evidence(&task.evidence, &*task.executor, &env, &task.cancel);
    result.evidence = masker.evidence(checks);
    if result.failure.is_none() {
        result.failure = failure.map(|f| masker.field(&f));
    }
    result.duration = started.elapsed();
    result
}

fn last_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    text.lines().rev().map(str::trim).find(|l| !l.is_empty()).map(|l| l.chars().take(300).collect())
}

/// `OPSGRAPH_ARTIFACT_<ID>`: uppercased, `.` and `-` turned into `_`.
pub(crate) fn artifact_env(id: &str) -> String {
    let mut name = String::from("OPSGRAPH_ARTIFACT_");
    name.extend(id.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }));
    name
}

/// A parameter value as the text a command receives.
pub(crate) fn param_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Renders `{placeholder}`s of an idempotency key; unknown ones stay as written.
pub fn render_key(template: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        match rest[start..].find('}') {
            Some(end) => {
                let name = &rest[start + 1..start + end];
                match values.get(name) {
                    Some(v) => out.push_str(v),
                    None => out.push_str(&rest[start..=start + end]),
                }
                rest = &rest[start + end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Copies a produced artifact into the content-addressed blob store; returns its location
/// relative to the data directory. A user's artifact name never becomes a path.
pub(crate) fn store_blob(blobs: &dyn BlobStore, file: &Path) -> std::io::Result<(String, i64)> {
    store_blob_bytes(blobs, &std::fs::read(file)?)
}

/// Stores `bytes` content-addressed (`blobs/ab/cdef…`, 0600); returns the location and size.
pub(crate) fn store_blob_bytes(blobs: &dyn BlobStore, bytes: &[u8]) -> std::io::Result<(String, i64)> {
    blobs.put(bytes).map_err(opsgraph_store::blob::into_io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_render_known_placeholders() {
        let values: BTreeMap<String, String> =
            [("node_id".to_string(), "worker-3".to_string()), ("version".to_string(), "1.7.x".to_string())].into();
        assert_eq!(render_key("install-containerd:{node_id}:{version}", &values), "install-containerd:worker-3:1.7.x");
        assert_eq!(render_key("x:{unknown}:{node_id", &values), "x:{unknown}:{node_id");
        assert_eq!(artifact_env("kubeconfig.admin"), "OPSGRAPH_ARTIFACT_KUBECONFIG_ADMIN");
    }
}
