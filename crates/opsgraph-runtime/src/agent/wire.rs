//! The wire forms between the runtime and its agents: the job an agent runs ([`AgentJob`], sealed
//! at rest, plaintext to the agent that claimed it) and what the agent reports ([`AgentReport`]).

use std::collections::BTreeMap;

use base64::Engine as _;
use opsgraph_core::model::{Evidence, Job};
use serde::{Deserialize, Serialize};

/// What an agent runs, as the runtime hands it over (sealed at rest, plaintext to the agent).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentJob {
    pub instance: String,
    pub attempt: u32,
    /// `run`, or `evidence` (check the evidence only).
    pub kind: String,
    pub job: Job,
    pub evidence: Vec<Evidence>,
    pub program: Option<WireProgram>,
    pub env: BTreeMap<String, String>,
    /// Files the job reads (required artifacts, credentials): the variable naming each is set
    /// to the agent's private copy.
    pub files: Vec<WireFile>,
    /// The pack's library scripts, by file name: the agent writes them into one directory beside
    /// the script and sets `OPSGRAPH_LIB` to it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub libraries: Vec<WireFile>,
    pub timeout_ms: Option<u64>,
    pub check_first: bool,
    pub secret_outputs: Vec<String>,
    /// Secret values to mask in output (base64).
    pub mask: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireProgram {
    Argv(Vec<String>),
    /// A pack script, by content: the agent has no pack.
    Script {
        name: String,
        content: String,
        args: Vec<String>,
    },
    Shell(String),
    Http {
        method: String,
        url: String,
        headers: Vec<(String, String)>,
        body: String,
    },
}

/// A file by content (base64): an input under the variable `name`, or a produced artifact.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireFile {
    pub name: String,
    pub content: String,
}

/// What an agent reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentReport {
    pub outcome: String,
    pub failure: Option<String>,
    pub satisfied_without_run: bool,
    pub cancelled: bool,
    pub evidence: Vec<WireEvidence>,
    pub produced: Vec<WireFile>,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireEvidence {
    pub check: String,
    pub passed: bool,
    pub expected: String,
    pub observed: String,
    pub detail: String,
    pub attempts: u32,
}

/// A claimed task's payload as its agent gets it: the job, its `kind` the task's (an evidence
/// task shares its run task's payload and must never run the job). Read from the opened
/// plaintext straight into an [`AgentJob`] and written from it to the claim's answer: no JSON
/// tree is built, copied into the answer's and written again (issue [N] 2). A payload that is not
/// an `AgentJob` to this build is passed on as opened, its `kind` set.
#[derive(Debug, Clone)]
pub enum Payload {
    Job(Box<AgentJob>),
    Opened(serde_json::Value),
}

impl Payload {
    /// The payload of a task of `kind` from its opened plaintext.
    pub fn of(plain: &[u8], kind: &str) -> serde_json::Result<Payload> {
        if let Ok(mut job) = serde_json::from_slice::<AgentJob>(plain) {
            job.kind = kind.to_string();
            return Ok(Payload::Job(Box::new(job)));
        }
        let mut value: serde_json::Value = serde_json::from_slice(plain)?;
        if let Some(fields) = value.as_object_mut() {
            fields.insert("kind".into(), serde_json::Value::String(kind.to_string()));
        }
        Ok(Payload::Opened(value))
    }
}

impl Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Payload::Job(job) => job.serialize(s),
            Payload::Opened(value) => value.serialize(s),
        }
    }
}

/// Files an agent job may carry, in all: larger inputs are refused with that reason.
pub const MAX_FILES_BYTES: usize = 8 << 20;

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) fn unb64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// What the claim's answer gave before (issue [N] 2): the plaintext parsed into a tree, its
    /// `kind` replaced.
    fn as_a_tree(plain: &[u8], kind: &str) -> String {
        let mut v: Value = serde_json::from_slice(plain).unwrap();
        v["kind"] = Value::String(kind.into());
        serde_json::to_string(&v).unwrap()
    }

    #[test]
    fn a_payload_is_answered_as_the_tree_of_its_plaintext_with_the_tasks_kind() {
        // As `queue.rs` seals it: an `AgentJob` written by serde.
        let job: AgentJob = serde_json::from_value(json!({
            "instance": "make@w0", "attempt": 2, "kind": "run",
            "job": {"id": "make", "title": "Make it",
                    "scope": {"resources": ["compute_node"], "target": "target_nodes"},
                    "outputs": {"artifacts": ["note"], "evidence": ["done"]},
                    "run": {"script": "scripts/make.sh", "timeout": "30s", "env": {"A": "é"}},
                    "controls": {"retry_policy": {"max_attempts": 3}, "idempotency": {"key": "k"}},
                    "after": ["prepare"], "cost": 1.5},
            "evidence": [{"id": "done", "source": "command", "command": {"line": "test -s \"$X\""}}],
            "program": {"script": {"name": "make.sh", "content": "ZWNobyBoaQo=", "args": ["a b"]}},
            "env": {"OPSGRAPH_JOB_ID": "make@w0", "Z": "\u{1}\n\"quoted\""},
            "files": [{"name": "OPSGRAPH_ARTIFACT_IN", "content": "aGk="}],
            "libraries": [{"name": "lib.sh", "content": "Zm9v"}],
            "timeout_ms": 30000, "check_first": true, "secret_outputs": ["note"], "mask": ["c2VjcmV0"],
        }))
        .unwrap();
        let plain = serde_json::to_vec(&job).unwrap();
        for kind in ["run", "evidence"] {
            let payload = Payload::of(&plain, kind).unwrap();
            assert!(matches!(payload, Payload::Job(_)));
            assert_eq!(serde_json::to_string(&payload).unwrap(), as_a_tree(&plain, kind));
        }
        // Not an `AgentJob` to this build (another version's): passed on as opened.
        let other = br#"{"instance":"x","kind":"run","something":[1,2]}"#;
        let payload = Payload::of(other, "evidence").unwrap();
        assert!(matches!(payload, Payload::Opened(_)));
        assert_eq!(serde_json::to_string(&payload).unwrap(), as_a_tree(other, "evidence"));
        assert!(Payload::of(b"not json", "run").is_err());
    }
}
