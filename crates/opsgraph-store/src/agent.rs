//! Durable work for remote agents (issue [F]): a job attempt or an evidence check aimed at a
//! resource that an agent serves (`access: {agent: NAME}`) becomes an [`AgentTask`]. The runtime
//! enqueues it in the transaction that records the attempt `running`; an agent claims it with a
//! lease (a fencing token and an expiry), heartbeats, appends log lines and reports; the runtime
//! reads the report.
//!
//! Every change after the claim names the lease it holds: a writer whose lease is no longer the
//! task's (it expired and the runtime gave the task up, or the task was cancelled) is refused
//! with [`crate::Error::StaleLease`], whatever it believes. The SQL is portable: the claim is one
//! conditional `UPDATE … WHERE state = 'queued'` over the oldest matching rows (a PostgreSQL port
//! adds `FOR UPDATE SKIP LOCKED` to its sub-select), times are integer milliseconds since the
//! epoch passed in by the caller, and no backend-specific function is used.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{AuditRecord, TimelineEntry};

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentTaskState {
    /// Waiting for an agent; `expires_ms` is the claim deadline.
    Queued,
    /// An agent holds it under `lease` until `expires_ms` (heartbeats extend it).
    Claimed,
    /// The agent's report is in `report`.
    Reported,
    /// Nobody claimed it before its deadline.
    Unclaimed,
    /// Its agent stopped heartbeating; its outcome is unknown.
    Lost,
    /// The runtime no longer wants it (the operation was cancelled).
    Cancelled,
}

impl AgentTaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentTaskState::Queued => "queued",
            AgentTaskState::Claimed => "claimed",
            AgentTaskState::Reported => "reported",
            AgentTaskState::Unclaimed => "unclaimed",
            AgentTaskState::Lost => "lost",
            AgentTaskState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<AgentTaskState> {
        Some(match s {
            "queued" => AgentTaskState::Queued,
            "claimed" => AgentTaskState::Claimed,
            "reported" => AgentTaskState::Reported,
            "unclaimed" => AgentTaskState::Unclaimed,
            "lost" => AgentTaskState::Lost,
            "cancelled" => AgentTaskState::Cancelled,
            _ => return None,
        })
    }
}

/// One piece of work for an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentTask {
    /// `<operation>/<job instance>/<attempt>/<kind>`; unique.
    pub id: String,
    pub operation: String,
    pub job: String,
    pub attempt: u32,
    /// `run` (the job, then its evidence) or `evidence` (its evidence checks only: recovery).
    pub kind: String,
    /// The agent name the resource names (`access: {agent: NAME}`): only a token of that name
    /// claims it.
    pub agent: String,
    pub resource: String,
    pub state: AgentTaskState,
    /// What to run, as the runtime wrote it (sealed: it may hold secrets).
    pub payload: Value,
    /// The fencing token of the current claim.
    pub lease: Option<String>,
    /// The actor that claimed it last.
    pub claimed_by: Option<String>,
    /// How many times it was claimed (at most once, unless a port re-queues).
    pub claims: u32,
    /// Queued: the claim deadline; claimed: the lease's expiry (ms since the epoch).
    pub expires_ms: i64,
    /// The agent's report (sealed), once reported.
    pub report: Option<Value>,
    pub created_at: String,
    pub updated_at: String,
}

/// A claim: the oldest queued tasks of `agent` (for one of `resources`, when any are named), at
/// most `max` of them, are taken under `lease` until `expires_ms`. The claim, an audit row and a
/// timeline entry per task are one transaction; the store fills in each task's id, operation and
/// resource. A claim made again with the lease of tasks it holds (the claimer never saw the
/// answer) returns those tasks, and claims nothing more.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentClaim {
    pub agent: String,
    pub resources: Vec<String>,
    pub lease: String,
    pub actor: String,
    /// At most this many tasks (one when 0).
    pub max: u32,
    pub expires_ms: i64,
    pub at: String,
    /// Written with the claim: `target`, `operation` and `resource` become the task's.
    pub audit: AuditRecord,
    /// Written with the claim: `operation` becomes the task's; `{task}` in `reason` its id.
    pub entry: TimelineEntry,
}

/// A change to an agent task, applied by [`crate::Store::commit`] as `Write::Agent`.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentWrite {
    /// A new queued task.
    Enqueue(Box<AgentTask>),
    /// A new task handed at once to a claim that was waiting for work (a long-polling claim of
    /// the enqueuing process): `task` is written already `claimed` under `claim`'s lease (its
    /// `lease`, `claimed_by`, `claims` and `expires_ms` set by the caller from the claim), with
    /// the claim's audit row and timeline entry, in the enqueuing transaction, so the claim
    /// needs no transaction of its own. The claim's `resources`, `max` and `expires_ms` are not
    /// read: the caller matched the task to it.
    Handed { task: Box<AgentTask>, claim: Box<AgentClaim> },
    /// A claim made inside this transaction, as [`crate::Store::agent_claim`] makes one: the
    /// oldest queued tasks of the claim's agent (those enqueued earlier in the same transaction
    /// included), each with its audit row and timeline entry; none queued claims nothing, and is
    /// no error. A claim whose lease holds tasks already claims nothing more. The claimer learns
    /// what it got after the commit, from `agent_claim` with the same lease (which returns what
    /// the lease holds): an agent's report committed by the driver with the job's result carries
    /// the agent's next claim so (one commit for the report, the result and the claim).
    Claim(Box<AgentClaim>),
    /// The lease holder is alive: the lease now ends at `expires_ms`. Refused when stale.
    Heartbeat { task: String, lease: String, expires_ms: i64, at: String },
    /// Output of the running job, appended. Refused when stale.
    Log { task: String, lease: String, text: String, at: String },
    /// The outcome. Refused when stale (a report after the task was given up counts for nothing).
    Report { task: String, lease: String, report: Value, at: String },
    /// The runtime gives a task up: `queued` past its deadline becomes `unclaimed`, `claimed`
    /// past its lease becomes `lost` (both only when `expires_ms < now_ms`), and either becomes
    /// `cancelled` whatever the time. Refused with `AgentTaskMoved` when the task is not in
    /// `from` (or its lease was extended meanwhile).
    Settle { task: String, from: AgentTaskState, to: AgentTaskState, now_ms: i64, at: String },
}

/// A line of an agent task's log, in the order it arrived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentLogLine {
    pub seq: i64,
    pub task: String,
    pub at: String,
    pub text: String,
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
