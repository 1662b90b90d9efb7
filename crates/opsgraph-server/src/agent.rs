//! `/api/v1/agent/*`: remote agents pull the work of the resources that name them
//! (`access: {agent: NAME}`, NAME the token's name), keep their lease alive, stream output and
//! report. A claim may take several tasks at once (`max_tasks`: one transaction, an audit row and
//! a timeline entry each); a report carries the job's last output lines (`text`) and lands with
//! them, its audit row and its timeline entry in one commit, which also claims the agent's next
//! tasks when it asks (`claim`, protocol 3: one commit and one round trip for both); a write
//! under a lease that is no longer the task's is refused with 409 `stale_lease`. Log text and
//! reports are masked with the task's own mask list before they are stored (an agent is not
//! trusted to have masked), and a report naming evidence or artifacts the job does not declare is
//! refused (422 `undeclared_evidence`, `undeclared_artifact`) and changes nothing.

use std::time::{Duration, Instant};

use opsgraph_runtime::agent::{Handed, Left, Payload, ReportHand};
use opsgraph_store::{now, now_ms, AgentClaim, AgentTask, AgentWrite, Write};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::auth;
use crate::error::ApiError;
use crate::handlers::{Ctx, Reply};

/// The longest a claim waits for work.
const MAX_WAIT: Duration = Duration::from_secs(30);
/// A log chunk's limit.
const MAX_LOG_BYTES: usize = 256 << 10;
/// Resources one claim may name.
const MAX_RESOURCES: usize = 1000;
/// Tasks one claim may take.
const MAX_TASKS: u32 = 64;
/// The agent protocol this server speaks, in every claim's answer: 2 added batches
/// (`max_tasks`, `more`) and the last output lines in a report (`text`); 3 a report that claims
/// the agent's next tasks in its own commit (`claim`, answered in `next`).
const PROTOCOL: u32 = 3;

/// The body of a claim (may be empty: every resource of the agent's name, answered at once).
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClaimBody {
    /// Only these resources (all of the agent name's when empty).
    #[serde(default)]
    #[schemars(length(max = 1000))]
    resources: Vec<String>,
    /// How long to wait for work, in ms (at most 30 s; 0 answers at once; a longer wait is cut
    /// to 30 s). The bound is u64's, so that the document says what the server reads.
    #[serde(default)]
    #[schemars(range(max = 18_446_744_073_709_551_615_u64))]
    wait_ms: u64,
    /// Which process of the agent name claims (`host/pid`), recorded with the claim.
    #[serde(default)]
    instance: Option<String>,
    /// The lease token to claim under, chosen by the agent (16 to 128 of `A-Za-z0-9_-`) so that
    /// a claim whose answer was lost can be made again: it returns the task it holds.
    #[serde(default)]
    #[schemars(pattern(r"^[A-Za-z0-9_-]{16,128}$"))]
    lease: Option<String>,
    /// Claim up to this many tasks at once, all under the one lease (1 to 64; 1 when absent):
    /// the first as `task` and `payload`, the others in `more`.
    #[serde(default)]
    #[schemars(range(min = 1, max = 64))]
    max_tasks: Option<u32>,
}

/// The body of a heartbeat (`task`, `lease`), a log chunk (`text`) or a report (`report`, and the
/// job's last output lines in `text`, appended in the report's commit).
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeaseBody {
    task: String,
    lease: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    report: Option<Value>,
    /// With a report (protocol 3): claim the agent's next tasks in the report's commit, as a
    /// claim with this body would without waiting (`wait_ms` must be 0 or absent; `lease` is
    /// required: the report sent again with it gets the same tasks). The answer's `next`.
    #[serde(default)]
    claim: Option<ClaimBody>,
}

/// A task as its agent sees it.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct TaskView {
    id: String,
    operation: String,
    job: String,
    attempt: u32,
    /// `run` (the job, then its evidence) or `evidence` (its evidence checks only).
    kind: String,
    resource: String,
    agent: String,
}

/// A claim's answer: the task and its lease, or `{"task": null}` when none came in time.
#[derive(Default, Serialize, schemars::JsonSchema)]
pub(crate) struct ClaimReply {
    /// The agent protocol the server speaks (absent: 1).
    protocol: u32,
    task: Option<TaskView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_expires_ms: Option<i64>,
    /// How often to send a heartbeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    heartbeat_ms: Option<i64>,
    /// What to run (opened for the agent: it may hold secrets its job needs).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Value>")]
    payload: Option<Payload>,
    /// With `max_tasks`: the other tasks claimed under the same lease, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    more: Vec<MoreTask>,
}

/// A further task of a claim, under the claim's lease.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct MoreTask {
    task: TaskView,
    lease_expires_ms: i64,
    #[schemars(with = "Value")]
    payload: Payload,
}

/// A heartbeat's answer: when the lease now expires (ms since the epoch).
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct LeaseReply {
    lease_expires_ms: i64,
}

/// A log chunk was appended.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Logged {}

/// A report was recorded (or had been: the same report again).
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Reported {
    task: String,
    state: String,
    /// With `claim`: what it claimed (`{"task": null}` when nothing was queued).
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<ClaimReply>,
}

pub(crate) fn claim(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let body: ClaimBody = ctx.json(true)?;
    let claimer = Claimer::of(ctx, body)?;
    let deadline = Instant::now() + Duration::from_millis(claimer.wait_ms).min(MAX_WAIT);
    let agents = ctx.state.0.agents.clone();
    let bell = &agents.bell;
    'claim: loop {
        let seen = bell.work_seen();
        let tasks = ctx.store.agent_claim(&claimer.claim())?;
        if !tasks.is_empty() {
            return Reply::typed(&claimer.answer(ctx, tasks)?);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let closing = || ctx.state.0.closing.load(std::sync::atomic::Ordering::SeqCst);
        if left.is_zero() || closing() {
            return Reply::typed(&ClaimReply { protocol: PROTOCOL, ..Default::default() });
        }
        let nap = left.min(Duration::from_millis(250));
        if !claimer.own_lease {
            // Not handed work: an answer lost with a lease the agent never knew could not be
            // claimed again.
            bell.wait_work(seen, nap);
            continue;
        }
        // Parked: work queued in this process may be handed to this claim in the enqueuing
        // commit (no transaction of the claim's own), or rings; other writers are seen by polling.
        let ticket = bell.park(claimer.claim());
        bell.wait_parked(seen, &ticket, nap);
        let id = match bell.leave(&ticket) {
            Left::Free => continue,
            Left::Delivered(task) => return Reply::typed(&claimer.answer(ctx, vec![*task])?),
            Left::Promised(id) => id,
        };
        // Handed a task whose commit is not done yet: wait for it (it is this claim's alone now).
        loop {
            if let Some(task) = bell.wait_hand(&ticket, Duration::from_millis(250)) {
                return Reply::typed(&claimer.answer(ctx, vec![*task])?);
            }
            // Its commit was refused or its drive stopped: look again at once.
            if bell.withdrawn(&ticket) {
                continue 'claim;
            }
            // The commit may be done without its waiting worker having started: the store says.
            if let Some(task) = ctx.store.agent_task(&id)?.filter(|t| {
                t.state == opsgraph_store::AgentTaskState::Claimed && t.lease.as_deref() == Some(claimer.lease.as_str())
            }) {
                bell.forget(&ticket);
                return Reply::typed(&claimer.answer(ctx, vec![task])?);
            }
            // Its commit failed, or is slow: answered empty, the agent claims again with the same
            // lease and gets the task from the store if it was committed after all.
            if Instant::now() >= deadline || closing() {
                bell.forget(&ticket);
                return Reply::typed(&ClaimReply { protocol: PROTOCOL, ..Default::default() });
            }
        }
    }
}

/// A claim's body checked, with who claims and under which lease.
struct Claimer {
    agent: String,
    actor: String,
    /// `actor/instance`, recorded with the claim.
    claimer: String,
    instance: Option<String>,
    resources: Vec<String>,
    lease: String,
    /// The agent chose the lease (`lease` in the body): a claim whose answer was lost can be made
    /// again, so work may be handed to it while it waits.
    own_lease: bool,
    max: u32,
    wait_ms: u64,
    lease_ms: i64,
}

impl Claimer {
    fn of(ctx: &Ctx, body: ClaimBody) -> Result<Claimer, ApiError> {
        if body.max_tasks.is_some_and(|m| !(1..=MAX_TASKS).contains(&m)) {
            return Err(ApiError::unprocessable(
                "invalid_max_tasks",
                format!("a claim takes 1 to {MAX_TASKS} tasks (`max_tasks`)"),
            ));
        }
        if body.resources.len() > MAX_RESOURCES {
            return Err(ApiError::unprocessable(
                "too_many_resources",
                format!("a claim names at most {MAX_RESOURCES} resources"),
            ));
        }
        let who = ctx.who()?;
        let actor = who.actor();
        let claimer = match body.instance.as_deref().filter(|i| !i.is_empty()) {
            Some(i) => format!("{actor}/{}", i.chars().take(100).collect::<String>()),
            None => actor.clone(),
        };
        let own_lease = body.lease.is_some();
        let lease = match body.lease {
            Some(l)
                if (16..=128).contains(&l.len())
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b)) =>
            {
                l
            }
            Some(_) => {
                return Err(ApiError::unprocessable(
                    "invalid_lease",
                    "a lease token is 16 to 128 of A-Z, a-z, 0-9, `_`, `-`",
                ))
            }
            None => auth::new_token().map_err(|e| ApiError::internal("no randomness for a lease", &e))?,
        };
        Ok(Claimer {
            agent: who.name.clone(),
            actor,
            claimer,
            instance: body.instance,
            resources: body.resources,
            lease,
            own_lease,
            max: body.max_tasks.unwrap_or(1),
            wait_ms: body.wait_ms,
            lease_ms: ctx.state.0.agents.lease.as_millis() as i64,
        })
    }

    /// The claim as the store takes it, now.
    fn claim(&self) -> AgentClaim {
        let at = now();
        let entry = opsgraph_store::TimelineEntry {
            seq: 0,
            operation: String::new(),
            at: at.clone(),
            actor: self.actor.clone(),
            event: "agent_claimed".into(),
            from: None,
            to: None,
            reason: format!("{} claimed {{task}}", self.claimer),
            data: Value::Null,
        };
        AgentClaim {
            agent: self.agent.clone(),
            resources: self.resources.clone(),
            lease: self.lease.clone(),
            actor: self.claimer.clone(),
            max: self.max,
            expires_ms: now_ms() + self.lease_ms,
            at,
            audit: auth::audit(&self.actor, "agent.claim", "", None, None, json!({"instance": self.instance})),
            entry,
        }
    }

    /// The answer for the tasks claimed (none: `{"task": null}`), their payloads opened.
    fn answer(&self, ctx: &Ctx, tasks: Vec<AgentTask>) -> Result<ClaimReply, ApiError> {
        let agents = &ctx.state.0.agents;
        let mut tasks = tasks.into_iter();
        let Some(task) = tasks.next() else { return Ok(ClaimReply { protocol: PROTOCOL, ..Default::default() }) };
        let payload = agents.open_payload(&ctx.state.0.data_dir, &task)?;
        let more = tasks
            .map(|t| {
                let payload = agents.open_payload(&ctx.state.0.data_dir, &t)?;
                Ok(MoreTask { task: task_view(&t), lease_expires_ms: t.expires_ms, payload })
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        Ok(ClaimReply {
            protocol: PROTOCOL,
            task: Some(task_view(&task)),
            lease: Some(self.lease.clone()),
            lease_expires_ms: Some(task.expires_ms),
            heartbeat_ms: Some((self.lease_ms / 3).max(100)),
            payload: Some(payload),
            more,
        })
    }
}

fn task_view(t: &AgentTask) -> TaskView {
    TaskView {
        id: t.id.clone(),
        operation: t.operation.clone(),
        job: t.job.clone(),
        attempt: t.attempt,
        kind: t.kind.clone(),
        resource: t.resource.clone(),
        agent: t.agent.clone(),
    }
}

/// The task named by the body, when it belongs to the caller's agent name.
fn own_task(ctx: &Ctx, id: &str) -> Result<AgentTask, ApiError> {
    let who = ctx.who()?;
    match ctx.store.agent_task(id)? {
        Some(t) if t.agent == who.name => Ok(t),
        _ => Err(ApiError::not_found("no_agent_task", format!("no agent task `{id}` for agent `{}`", who.name))),
    }
}

/// A heartbeat's, log chunk's or report's body: its `text` and `report` (what a host printed)
/// screened later, never refused for a NUL; its task and lease (ids) refused with one, as any
/// other request's strings are.
fn lease_body(ctx: &Ctx) -> Result<LeaseBody, ApiError> {
    let body: LeaseBody = ctx.screened_json(false)?;
    if body.task.contains('\0') || body.lease.contains('\0') {
        return Err(ApiError::bad_request("invalid_json", "a task or lease id holds a NUL character (`\\u0000`)"));
    }
    Ok(body)
}

pub(crate) fn heartbeat(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let body = lease_body(ctx)?;
    own_task(ctx, &body.task)?;
    let expires_ms = now_ms() + ctx.state.0.agents.lease.as_millis() as i64;
    ctx.store.commit(&[Write::Agent(AgentWrite::Heartbeat {
        task: body.task,
        lease: body.lease,
        expires_ms,
        at: now(),
    })])?;
    Reply::typed(&LeaseReply { lease_expires_ms: expires_ms })
}

pub(crate) fn log(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let body = lease_body(ctx)?;
    let text = log_text(body.text.as_deref())?;
    let task = own_task(ctx, &body.task)?;
    // Masked here, whatever the agent did: it is not trusted with that.
    let text = ctx.state.0.agents.screen(&ctx.state.0.data_dir, &task)?.log(text);
    ctx.store.commit(&[Write::Agent(AgentWrite::Log { task: body.task, lease: body.lease, text, at: now() })])?;
    ctx.state.0.agents.bell.ring_task(&task.id);
    Reply::typed(&Logged {})
}

/// A chunk of log text, within its limit.
fn log_text(text: Option<&str>) -> Result<&str, ApiError> {
    let text = text.unwrap_or_default();
    if text.len() > MAX_LOG_BYTES {
        return Err(ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "log_too_large",
            format!("a log chunk holds at most {MAX_LOG_BYTES} bytes"),
        ));
    }
    Ok(text)
}

pub(crate) fn report(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let body = lease_body(ctx)?;
    let text = log_text(body.text.as_deref())?.to_string();
    let task = own_task(ctx, &body.task)?;
    // The next tasks to claim with it (protocol 3), checked before anything is written.
    let next =
        match body.claim {
            Some(c) if c.wait_ms > 0 => return Err(ApiError::unprocessable(
                "invalid_claim",
                "a report's claim does not wait (`wait_ms` 0 or absent): claim with POST /api/v1/agent/claim to wait",
            )),
            Some(ClaimBody { lease: None, .. }) => {
                return Err(ApiError::unprocessable(
                    "invalid_claim",
                    "a report's claim names its `lease` (sent again, the report gets the same tasks)",
                ))
            }
            Some(c) => Some(Claimer::of(ctx, c)?),
            None => None,
        };
    let agents = ctx.state.0.agents.clone();
    let bell = &agents.bell;
    // The same report again while its first is handed over (its answer was lost): that one's
    // commit answers it.
    if bell.report_pending(&task.id) {
        return match bell.await_report(&task.id, HANDED_WAIT) {
            Handed::Pending => Err(pending()),
            // Committed, or given back to the first request, which commits it: the store says.
            Handed::Committed | Handed::Returned => match ctx.store.agent_task(&task.id)? {
                Some(t) if reported_with(&t, &body.lease) => done_again(ctx, task.id, next),
                _ => Err(pending()),
            },
        };
    }
    // The same report again (its answer was lost): done already; its claim, made again with its
    // lease, returns what it holds.
    if reported_with(&task, &body.lease) {
        return done_again(ctx, task.id, next);
    }
    let report = body.report.unwrap_or(Value::Null);
    let parsed: opsgraph_runtime::AgentReport = serde_json::from_value(report)
        .map_err(|e| ApiError::unprocessable("invalid_report", format!("the report is not an agent report: {e}")))?;
    // Checked against the job's declarations and masked before anything is stored or shown.
    let parsed = ctx
        .state
        .0
        .agents
        .screen(&ctx.state.0.data_dir, &task)?
        .report(parsed)
        .map_err(|r| ApiError::unprocessable(r.code, r.message))?;
    let report = serde_json::to_value(&parsed).map_err(|e| ApiError::internal("an agent report", &e))?;
    let actor = ctx.who()?.actor();
    let sealed = ctx.state.0.agents.seal_report(&ctx.state.0.data_dir, &task.id, &report)?;
    let passed = parsed.evidence.iter().filter(|e| e.passed).count();
    let verdict = match &parsed.failure {
        None => format!("{passed} evidence checks passed"),
        Some(f) => f.chars().take(300).collect(),
    };
    let reason = format!("{} attempt {} ({}): {}; {verdict}", task.job, task.attempt, task.kind, parsed.outcome);
    let entry = opsgraph_store::TimelineEntry {
        seq: 0,
        operation: task.operation.clone(),
        at: now(),
        actor: actor.clone(),
        event: "agent_reported".into(),
        from: None,
        to: None,
        reason,
        data: json!({"task": task.id, "job": task.job, "attempt": task.attempt, "kind": task.kind,
                     "failed": parsed.failure.is_some()}),
    };
    let audit = auth::audit(
        &actor,
        "agent.report",
        &task.id,
        Some(&task.operation),
        Some(&task.resource),
        json!({"kind": task.kind, "outcome": parsed.outcome, "failed": parsed.failure.is_some(),
               "evidence_passed": passed, "artifacts": parsed.produced.len()}),
    );
    // The last output lines, the outcome, its audit row and timeline entry: one commit.
    let mut writes = Vec::with_capacity(4);
    let text = if text.is_empty() { text } else { ctx.state.0.agents.screen(&ctx.state.0.data_dir, &task)?.log(&text) };
    if !text.is_empty() {
        writes.push(Write::Agent(AgentWrite::Log {
            task: task.id.clone(),
            lease: body.lease.clone(),
            text: text.clone(),
            at: now(),
        }));
    }
    writes.push(Write::Agent(AgentWrite::Report {
        task: task.id.clone(),
        lease: body.lease.clone(),
        report: sealed,
        at: now(),
    }));
    writes.push(Write::Audit(audit));
    writes.push(Write::Timeline(entry));
    // The worker of this process waiting for the task takes the report in memory, and the
    // driver commits it with the job's result, the attempts that result lets start and, last,
    // the claim of the agent's next tasks (`AgentWrite::Claim`: the oldest queued, one just
    // enqueued by that commit included): one commit for all, synced before the agent is
    // answered. Once that commit is done the agent is answered with what its claim's lease
    // holds; given back uncommitted, the report is committed here.
    let mut kept = Some(parsed);
    if task.state == opsgraph_store::AgentTaskState::Claimed && task.lease.as_deref() == Some(body.lease.as_str()) {
        let mut carried = writes.clone();
        if let Some(c) = &next {
            carried.push(Write::Agent(AgentWrite::Claim(Box::new(c.claim()))));
        }
        // Handed over, it is the worker's: given back, the worker reads it from the store.
        let hand = ReportHand { report: kept.take().unwrap_or_default(), text, writes: carried };
        let handed = bell.offer_report(&task.id, hand);
        let outcome = if handed { bell.await_report(&task.id, HANDED_WAIT) } else { Handed::Returned };
        match outcome {
            // Its claim, made again with its lease, reads what the driver's commit claimed (or
            // claims now, when that commit found nothing queued and something is now).
            Handed::Committed => return done_again(ctx, task.id, next),
            // Sent again with the same claim's lease, the report gets what the lease holds.
            Handed::Pending => return Err(pending()),
            Handed::Returned if handed => {
                // Given back: committed after all (a commit whose answer was lost)?
                if let Some(t) = ctx.store.agent_task(&task.id)?.filter(|t| reported_with(t, &body.lease)) {
                    return done_again(ctx, t.id, next);
                }
            }
            Handed::Returned => {}
        }
        // Not handed over: committed here, as if nothing had been tried.
    }
    // Committed: the worker of this process waiting for the task takes the report as screened
    // here (what was sealed), without reading it back.
    let committed = |bell: &opsgraph_runtime::agent::Bell, kept: Option<opsgraph_runtime::AgentReport>| match kept {
        Some(report) => bell.report_committed(&task.id, report),
        None => bell.ring_task(&task.id),
    };
    let next = match next {
        // With the agent's next tasks: one commit, one round trip.
        Some(c) => {
            let tasks = ctx.store.agent_commit_claim(&writes, &c.claim())?;
            committed(bell, kept);
            Some(c.answer(ctx, tasks)?)
        }
        None => {
            ctx.store.commit(&writes)?;
            committed(bell, kept);
            None
        }
    };
    Reply::typed(&Reported { task: task.id, state: "reported".into(), next })
}

/// How long a report handed to a waiting worker waits for the driver's commit before it is
/// answered 503 (the agent sends it again; that request waits for the same commit).
const HANDED_WAIT: Duration = Duration::from_secs(20);

/// The answer to a report still on its way to the driver's commit: try again.
fn pending() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "report_pending",
        "the report is being committed with its job's result: send it again",
    )
}

/// Whether `task` was reported under `lease` (a report sent again is answered as done).
fn reported_with(task: &AgentTask, lease: &str) -> bool {
    task.state == opsgraph_store::AgentTaskState::Reported && task.lease.as_deref() == Some(lease)
}

/// The answer to a report that is in the store already; its claim, made again with its lease,
/// returns what the lease holds.
fn done_again(ctx: &mut Ctx, task: String, next: Option<Claimer>) -> Result<Reply, ApiError> {
    let next = match next {
        Some(c) => {
            let tasks = ctx.store.agent_claim(&c.claim())?;
            Some(c.answer(ctx, tasks)?)
        }
        None => None,
    };
    Reply::typed(&Reported { task, state: "reported".into(), next })
}
