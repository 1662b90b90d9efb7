//! Jobs for resources that a remote agent serves (`access: {agent: NAME}`).
//!
//! Persist, then act, as everywhere else: the dispatcher enqueues the attempt as an agent task
//! ([`opsgraph_store::AgentTask`]) in the same transaction that records it `running`, with its
//! payload (program, script text, environment, the files it needs, evidence checks) sealed under
//! the master key. A worker thread then waits for the task through a store connection of its
//! own, copying the agent's log lines into the attempt's log file as they arrive, and turns the
//! report into the attempt's result.
//!
//! - Nobody claims it within [`Agents::claim_timeout`]: the attempt fails, naming the resource
//!   and the agent that should serve it (retried only as its retry policy says).
//! - Its agent stops heartbeating (the lease expired): the task is given up (`lost`, so the old
//!   holder is fenced off), and, as after a crash, its evidence is checked first — by an agent,
//!   through an `evidence` task: passes -> recovered; fails -> run again only when the job has
//!   an idempotency key and attempts left; else the operation fails with "outcome unknown".
//! - The operation is cancelled: the task is cancelled; its agent's next heartbeat is refused
//!   and it stops the job.
//!
//! The agent side ([`execute`]) runs the payload with the same code as a local attempt
//! (`jobs::run` on the local executor, the same evidence checks), streaming output lines
//! through [`LogStream`], masked.
//!
//! By concern: `pool.rs` (how the runtime reaches agents: [`Agents`], [`Bell`], sealing),
//! `queue.rs` (handing attempts over), `wait.rs` (the worker waiting for a report), `exec.rs`
//! (the agent's side: [`execute`], [`LogStream`]), `wire.rs` (the wire forms) and `screen.rs`
//! (what the server applies to what an agent sends). The modules name each other directly, never
//! through this one, which only re-exports.

mod exec;
pub(crate) mod pool;
mod queue;
pub(crate) mod screen;
mod scripts;
pub(crate) mod wait;
pub(crate) mod wire;

pub use exec::{execute, execute_job, LogStream};
pub use pool::{report_aad, Agents, Bell, Handed, Left, OpenStore, ReportHand, Ticket};
pub use wire::{AgentJob, AgentReport, Payload, WireEvidence, WireFile, WireProgram, MAX_FILES_BYTES};
