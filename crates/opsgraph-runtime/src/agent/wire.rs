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

/// Files an agent job may carry, in all: larger inputs are refused with that reason.
pub const MAX_FILES_BYTES: usize = 8 << 20;

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) fn unb64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_default()
}
