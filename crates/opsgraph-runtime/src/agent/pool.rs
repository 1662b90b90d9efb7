//! How the runtime reaches agents: the store connections waiting workers use, the bell the
//! server rings, the keys payloads and reports are sealed with, and what a waiting worker holds.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use base64::Engine as _;
use opsgraph_store::{now, now_ms, AgentClaim, AgentTask, AgentTaskState, Store};
use serde_json::{json, Value};

use super::wire::{b64, AgentJob, Payload};
use crate::Error;

/// Opens another connection to the store.
pub type OpenStore = dyn Fn() -> Result<Box<dyn Store>, opsgraph_store::Error> + Send + Sync;

/// How a runtime reaches agents: through the store, which the server's agent routes share.
pub struct Agents {
    /// A connection for each attempt waiting for an agent.
    pub open: Arc<OpenStore>,
    /// Rung when agent work is queued (claims look) or a task moves (its waiting worker looks),
    /// so waiters in this process look at once; other processes' changes are seen by polling.
    pub bell: Arc<Bell>,
    /// How long a task may wait for an agent to claim it (default 60 s).
    pub claim_timeout: Duration,
    /// How long a claim lasts without a heartbeat (default 30 s; agents beat every third).
    pub lease: Duration,
    /// Connections of finished waits, for the next ones.
    pool: Mutex<Vec<Box<dyn Store>>>,
    /// The master keyring, loaded once (payloads and reports are sealed with it).
    keyring: std::sync::OnceLock<Result<Arc<opsgraph_secrets::Keyring>, String>>,
    /// What recent tasks' reports and logs are screened with.
    pub(crate) screens: super::screen::Screens,
}

impl Agents {
    pub fn new(open: Arc<OpenStore>) -> Agents {
        Agents {
            open,
            bell: Arc::new(Bell::default()),
            claim_timeout: Duration::from_secs(60),
            lease: Duration::from_secs(30),
            pool: Mutex::new(Vec::new()),
            keyring: std::sync::OnceLock::new(),
            screens: Default::default(),
        }
    }

    pub(super) fn connection(&self) -> Result<Pooled<'_>, opsgraph_store::Error> {
        let pooled = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let store = match pooled {
            Some(s) => s,
            None => (self.open)()?,
        };
        Ok(Pooled { agents: self, store: Some(store) })
    }

    /// The master keyring of `data_dir`, loaded on first use.
    pub fn keyring(&self, data_dir: &Path) -> Result<Arc<opsgraph_secrets::Keyring>, Error> {
        self.keyring
            .get_or_init(|| {
                opsgraph_secrets::Keyring::load(data_dir).map(|(k, _)| Arc::new(k)).map_err(|e| e.to_string())
            })
            .clone()
            .map_err(Error::Secrets)
    }

    /// The plaintext payload of a claimed task, for the agent that claimed it; its `kind` is the
    /// task's (an evidence task shares its run task's payload and must never run the job). The
    /// task's screen is built from it and kept: the log chunks and the report that follow are
    /// screened without opening the payload again.
    pub fn open_payload(&self, data_dir: &Path, task: &AgentTask) -> Result<Payload, Error> {
        let plain = self.plaintext(data_dir, task)?;
        let payload =
            Payload::of(plain.expose(), &task.kind).map_err(|e| Error::Secrets(format!("agent payload: {e}")))?;
        if let Payload::Job(job) = &payload {
            self.screens.put(&task.id, super::screen::Screen::new(job));
        }
        Ok(payload)
    }

    fn plaintext(&self, data_dir: &Path, task: &AgentTask) -> Result<opsgraph_secrets::Secret, Error> {
        let sealed = task.payload.get("sealed").and_then(Value::as_str).unwrap_or_default();
        let aad = payload_aad(&task.operation, &task.job, task.attempt);
        open_with(&*self.keyring(data_dir)?, sealed, &aad)
    }

    /// What `task`'s log text and report are screened with before they are stored or shown
    /// (see [`Screen`](super::screen::Screen)), from its sealed payload: the one its claim's
    /// answer built, or built again (another replica answered the claim; the cache started over).
    pub fn screen(&self, data_dir: &Path, task: &AgentTask) -> Result<Arc<super::screen::Screen>, Error> {
        self.screens.get(&task.id, || {
            let plain = self.plaintext(data_dir, task)?;
            let job: AgentJob =
                serde_json::from_slice(plain.expose()).map_err(|e| Error::Secrets(format!("agent payload: {e}")))?;
            Ok(super::screen::Screen::new(&job))
        })
    }

    /// An agent's report, sealed for the store (it may hold secret artifacts).
    pub fn seal_report(&self, data_dir: &Path, task: &str, report: &Value) -> Result<Value, Error> {
        let text = serde_json::to_string(report).map_err(|e| Error::Secrets(e.to_string()))?;
        Ok(json!({ "sealed": seal_with(&*self.keyring(data_dir)?, &text, &report_aad(task))? }))
    }
}

/// A connection of the pool, given back when dropped.
pub(super) struct Pooled<'a> {
    agents: &'a Agents,
    store: Option<Box<dyn Store>>,
}

impl std::ops::Deref for Pooled<'_> {
    type Target = dyn Store;
    fn deref(&self) -> &(dyn Store + 'static) {
        self.store.as_deref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut (dyn Store + 'static) {
        self.store.as_deref_mut().expect("present until dropped")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        let mut pool = self.agents.pool.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = self.store.take().filter(|_| pool.len() < 64) {
            pool.push(s);
        }
    }
}

/// `sealed:<base64>`, as `Runtime::seal_text` writes it.
pub(super) fn seal_with(keys: &opsgraph_secrets::Keyring, plain: &str, aad: &str) -> Result<String, Error> {
    let sealed = keys.seal(plain.as_bytes(), aad.as_bytes()).map_err(|e| Error::Secrets(e.to_string()))?;
    Ok(format!("sealed:{}", b64(&sealed)))
}

pub(super) fn open_with(
    keys: &opsgraph_secrets::Keyring,
    value: &str,
    aad: &str,
) -> Result<opsgraph_secrets::Secret, Error> {
    let b = value.strip_prefix("sealed:").ok_or_else(|| Error::Secrets(format!("{aad}: not a sealed value")))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b)
        .map_err(|_| Error::Secrets(format!("{aad}: the sealed value is not base64")))?;
    keys.open(&bytes, aad.as_bytes()).map_err(|e| Error::Secrets(format!("{aad}: {e}")))
}

/// How the agent routes and the workers waiting for agents wake each other in this process,
/// without polling the store: two kinds of news.
///
/// - **Work**: a task became claimable (queued): claims waiting for work look at the store.
/// - **A task moved** (claimed, logged, reported, settled): only the worker waiting for that task
///   looks at the store; the others sleep on.
///
/// Each waiter that waits for news of its own (a worker for its task, a report route for its
/// report's commit, a parked claim for the task handed to it) waits on a condition variable of
/// its own ([`Rung`]), and only that one is woken: with one shared by every waiter of a kind, each
/// task's moves woke every waiting worker (up to the drive's concurrency) to find its own task
/// unchanged and sleep again, several times a job (issue [N] 2).
///
/// Changes made by other processes are not rung: waiters still look at the store at a slow pace.
#[derive(Default)]
pub struct Bell {
    news: Mutex<News>,
    /// Rung with work for the claims that are not parked (parked ones have their own).
    work_rung: Condvar,
}

/// The condition variable one waiter waits on, always with [`Bell`]'s `news` lock.
type Rung = Arc<Condvar>;

#[derive(Default)]
struct News {
    work: u64,
    count: u64,
    /// The count at each watched task's last change, and what its worker waits on.
    tasks: std::collections::HashMap<String, (u64, Rung)>,
    /// Claims waiting for work that an enqueue may hand a task to, oldest first.
    parked: Vec<(u64, AgentClaim, Rung)>,
    /// Tasks handed to parked claims, by ticket: committed (delivered) or not yet.
    hands: std::collections::HashMap<u64, (Hand, Rung)>,
    tickets: u64,
    /// Reports handed to the workers waiting for their tasks, by task, and what their report
    /// routes wait on.
    reports: std::collections::HashMap<String, (Handoff, Rung)>,
    /// Reports their routes committed, by task, for the workers waiting for them: taken instead
    /// of reading the task's row and opening its sealed report again.
    committed: std::collections::HashMap<String, super::wire::AgentReport>,
    /// How often a waiting worker looked whether its task moved (tests count the wake-ups).
    #[cfg(test)]
    looks: u64,
}

impl News {
    /// A waiting worker looks whether `id` moved past `mark`.
    fn unmoved(&mut self, id: &str, mark: u64) -> bool {
        #[cfg(test)]
        {
            self.looks += 1;
        }
        self.tasks.get(id).is_some_and(|(at, _)| *at == mark)
    }
}

/// An agent's report on its way to the driver's commit without a transaction of its own
/// ([`Bell::offer_report`]): screened and sealed by the report route, its writes (the report,
/// its last lines, its audit row and timeline entry, and the claim of the agent's next tasks,
/// `AgentWrite::Claim`, which the driver puts last) committed by the driver with the job's result.
pub struct ReportHand {
    /// The report as screened (masked, within the job's declarations).
    pub report: super::wire::AgentReport,
    /// The job's last output lines, masked (also in `writes`).
    pub text: String,
    pub writes: Vec<opsgraph_store::Write>,
}

/// Where a handed report is.
enum Handoff {
    /// Offered, not taken by its worker yet.
    Offered(Box<ReportHand>),
    /// Taken by its worker: its writes travel with the attempt's result to the driver.
    Taken,
    /// Committed by the driver.
    Committed,
    /// Given back uncommitted (its worker stopped waiting, or the drive ended first): whoever
    /// waits for it commits it as if nothing had been handed.
    Returned,
}

/// What became of a handed report ([`Bell::await_report`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Handed {
    /// The driver committed its writes: the agent may be answered.
    Committed,
    /// Not committed by the driver, and never will be: commit it as usual (the store fences it
    /// when its lease is no longer the task's), after looking whether it is in the store already.
    Returned,
    /// Not settled within the time given: still on its way (a report sent again waits for it).
    Pending,
}

/// A task handed to a parked claim.
enum Hand {
    /// Written `claimed` in a transaction not known to be committed yet.
    Promised(Box<AgentTask>),
    /// Its transaction committed: the claim may answer with it.
    Delivered(Box<AgentTask>),
    /// Its transaction will not be committed (refused, or the drive stopped before the task's
    /// worker started): the claim looks again, at once, instead of waiting for it.
    Withdrawn,
}

/// A claim parked on the bell ([`Bell::park`]), and what it waits on.
#[derive(Debug)]
pub struct Ticket(u64, Rung);

/// What became of a parked claim when it stopped waiting ([`Bell::leave`]).
pub enum Left {
    /// Nothing was handed to it.
    Free,
    /// A task was handed to it in a transaction not known to be committed yet (this id): wait
    /// for it ([`Bell::wait_hand`]), or look for it in the store.
    Promised(String),
    /// A task was handed to it and committed.
    Delivered(Box<AgentTask>),
}

impl Bell {
    fn news(&self) -> std::sync::MutexGuard<'_, News> {
        self.news.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Work was queued: waiting claims look.
    pub fn ring_work(&self) {
        let mut news = self.news();
        news.work += 1;
        for (_, _, rung) in &news.parked {
            rung.notify_all();
        }
        for (_, rung) in news.hands.values() {
            rung.notify_all();
        }
        drop(news);
        self.work_rung.notify_all();
    }

    /// How much work was rung so far (pass it to [`Bell::wait_work`]).
    pub fn work_seen(&self) -> u64 {
        self.news().work
    }

    /// Waits until work is rung past `seen` or `timeout` passes.
    pub fn wait_work(&self, seen: u64, timeout: Duration) {
        let news = self.news();
        let _ = self.work_rung.wait_timeout_while(news, timeout, |n| n.work == seen);
    }

    /// Parks a claim that waits for work (a long-polling claim with a lease of its own): until it
    /// leaves, a task enqueued in this process for its agent (one of its resources, when it names
    /// any) may be handed to it in the enqueuing transaction ([`Bell::hand`]).
    pub fn park(&self, claim: AgentClaim) -> Ticket {
        let mut news = self.news();
        news.tickets += 1;
        let id = news.tickets;
        let rung = Rung::default();
        news.parked.push((id, claim, rung.clone()));
        Ticket(id, rung)
    }

    /// Called by the enqueuing side before its transaction: the oldest parked claim that may take
    /// `task` takes it (the task becomes `claimed` under its lease, claimed by its actor, its
    /// lease running from now for `lease_ms`); returns the claim to write with the task
    /// ([`opsgraph_store::AgentWrite::Handed`]). After the commit, [`Bell::deliver`].
    pub fn hand(&self, task: &mut AgentTask, lease_ms: i64) -> Option<AgentClaim> {
        let mut news = self.news();
        let at = news.parked.iter().position(|(_, c, _)| {
            c.agent == task.agent && (c.resources.is_empty() || c.resources.contains(&task.resource))
        })?;
        let (ticket, mut claim, rung) = news.parked.remove(at);
        claim.at = now();
        claim.expires_ms = now_ms() + lease_ms;
        claim.audit.at = claim.at.clone();
        claim.entry.at = claim.at.clone();
        task.state = AgentTaskState::Claimed;
        task.lease = Some(claim.lease.clone());
        task.claimed_by = Some(claim.actor.clone());
        task.claims = 1;
        task.expires_ms = claim.expires_ms;
        task.updated_at = claim.at.clone();
        news.hands.insert(ticket, (Hand::Promised(Box::new(task.clone())), rung));
        Some(claim)
    }

    /// The transaction that handed task `id` to a parked claim committed: the claim answers.
    /// Returns whether a parked claim waited for it.
    pub fn deliver(&self, id: &str) -> bool {
        let mut news = self.news();
        let found =
            news.hands.iter().find_map(|(k, (h, _))| matches!(h, Hand::Promised(t) if t.id == id).then_some(*k));
        let Some(ticket) = found else { return false };
        if let Some((Hand::Promised(t) | Hand::Delivered(t), rung)) = news.hands.remove(&ticket) {
            rung.notify_all();
            news.hands.insert(ticket, (Hand::Delivered(t), rung));
        }
        true
    }

    /// The transaction that was to hand task `id` to a parked claim will not commit (the task
    /// was never enqueued): the claim stops waiting for it and looks again.
    pub fn withdraw(&self, id: &str) {
        let mut news = self.news();
        let found =
            news.hands.iter().find_map(|(k, (h, _))| matches!(h, Hand::Promised(t) if t.id == id).then_some(*k));
        let Some(ticket) = found else { return };
        if let Some((h, rung)) = news.hands.get_mut(&ticket) {
            *h = Hand::Withdrawn;
            rung.notify_all();
        }
    }

    /// After [`Bell::wait_hand`] found nothing: whether the task promised to `ticket` was
    /// withdrawn (the hand is then forgotten, and the claim looks again).
    pub fn withdrawn(&self, ticket: &Ticket) -> bool {
        let mut news = self.news();
        if matches!(news.hands.get(&ticket.0), Some((Hand::Withdrawn, _))) {
            news.hands.remove(&ticket.0);
            return true;
        }
        false
    }

    /// For a parked claim: waits until work is rung past `seen`, a task handed to it is
    /// delivered or withdrawn, or `timeout` passes.
    pub fn wait_parked(&self, seen: u64, ticket: &Ticket, timeout: Duration) {
        let news = self.news();
        let _ = ticket.1.wait_timeout_while(news, timeout, |n| {
            n.work == seen && !matches!(n.hands.get(&ticket.0), Some((Hand::Delivered(_) | Hand::Withdrawn, _)))
        });
    }

    /// The parked claim stops waiting: no task is handed to it from now on.
    pub fn leave(&self, ticket: &Ticket) -> Left {
        let mut news = self.news();
        if let Some(at) = news.parked.iter().position(|(id, _, _)| *id == ticket.0) {
            news.parked.remove(at);
            return Left::Free;
        }
        match news.hands.remove(&ticket.0) {
            None | Some((Hand::Withdrawn, _)) => Left::Free,
            Some((Hand::Delivered(t), _)) => Left::Delivered(t),
            Some((Hand::Promised(t), rung)) => {
                let id = t.id.clone();
                news.hands.insert(ticket.0, (Hand::Promised(t), rung));
                Left::Promised(id)
            }
        }
    }

    /// After [`Left::Promised`]: waits up to `timeout` for the task's delivery and returns it
    /// (the hand is then forgotten).
    pub fn wait_hand(&self, ticket: &Ticket, timeout: Duration) -> Option<Box<AgentTask>> {
        let news = self.news();
        let (mut news, _) = ticket
            .1
            .wait_timeout_while(news, timeout, |n| matches!(n.hands.get(&ticket.0), Some((Hand::Promised(_), _))))
            .unwrap_or_else(|e| e.into_inner());
        match news.hands.remove(&ticket.0) {
            Some((Hand::Delivered(t), _)) => Some(t),
            Some(promised) => {
                news.hands.insert(ticket.0, promised);
                None
            }
            None => None,
        }
    }

    /// Forgets what was handed to a claim that answers without it (found in the store, or given
    /// up: its agent's next claim with the same lease gets it from the store).
    pub fn forget(&self, ticket: &Ticket) {
        self.news().hands.remove(&ticket.0);
    }

    /// Hands the report of task `id` to the worker of this process waiting for that task, when
    /// one waits and nothing was handed for it yet; returns whether it was handed. The worker's result takes
    /// its writes to the driver's commit ([`Bell::await_report`] says when it is done).
    pub fn offer_report(&self, id: &str, hand: ReportHand) -> bool {
        let mut news = self.news();
        if news.reports.contains_key(id) {
            return false;
        }
        news.count += 1;
        let count = news.count;
        let Some((at, rung)) = news.tasks.get_mut(id) else { return false };
        *at = count;
        rung.notify_all();
        news.reports.insert(id.to_string(), (Handoff::Offered(Box::new(hand)), Rung::default()));
        true
    }

    /// Whether a report of task `id` was handed over and is not settled yet (a report sent again
    /// waits for it with [`Bell::await_report`] instead of writing it again).
    pub fn report_pending(&self, id: &str) -> bool {
        self.news().reports.contains_key(id)
    }

    /// Waits up to `timeout` for the report handed for task `id` to be committed or given back;
    /// a settled one is forgotten (a report sent again after that finds it in the store).
    pub fn await_report(&self, id: &str, timeout: Duration) -> Handed {
        let mut news = self.news();
        if let Some(rung) = news.reports.get(id).map(|(_, r)| r.clone()) {
            (news, _) = rung
                .wait_timeout_while(news, timeout, |n| {
                    matches!(n.reports.get(id), Some((Handoff::Offered(_) | Handoff::Taken, _)))
                })
                .unwrap_or_else(|e| e.into_inner());
        }
        match news.reports.get(id) {
            Some((Handoff::Offered(_) | Handoff::Taken, _)) => Handed::Pending,
            Some((Handoff::Committed, _)) => {
                news.reports.remove(id);
                Handed::Committed
            }
            Some((Handoff::Returned, _)) | None => {
                news.reports.remove(id);
                Handed::Returned
            }
        }
    }

    /// For the worker waiting for task `id`: the report handed to it, if any (then it is its to
    /// bring to the driver, and to settle with [`Bell::settle_report`]).
    pub(crate) fn take_report(&self, id: &str) -> Option<ReportHand> {
        let mut news = self.news();
        match news.reports.get_mut(id) {
            Some((h @ Handoff::Offered(_), _)) => match std::mem::replace(h, Handoff::Taken) {
                Handoff::Offered(hand) => Some(*hand),
                _ => None,
            },
            _ => None,
        }
    }

    /// The report taken for task `id` was committed by the driver, or will not be.
    pub(crate) fn settle_report(&self, id: &str, committed: bool) {
        let mut news = self.news();
        if let Some((h, rung)) = news.reports.get_mut(id) {
            *h = if committed { Handoff::Committed } else { Handoff::Returned };
            rung.notify_all();
        }
    }

    /// Task `id` was reported in a commit that is done (its report route's own): the worker of
    /// this process waiting for it takes `report` (as screened; what was sealed and stored)
    /// without reading the row back and opening it. Nobody watching: nothing is kept.
    pub fn report_committed(&self, id: &str, report: super::wire::AgentReport) {
        let mut news = self.news();
        news.count += 1;
        let count = news.count;
        if let Some((at, rung)) = news.tasks.get_mut(id) {
            *at = count;
            rung.notify_all();
            news.committed.insert(id.to_string(), report);
        }
    }

    /// For the worker waiting for task `id`: its report, committed by its route
    /// ([`Bell::report_committed`]), if any.
    pub(crate) fn take_committed(&self, id: &str) -> Option<super::wire::AgentReport> {
        self.news().committed.remove(id)
    }

    /// Task `id` moved: the worker waiting for it looks (a task nobody watches is not recorded).
    pub fn ring_task(&self, id: &str) {
        let mut news = self.news();
        news.count += 1;
        let count = news.count;
        if let Some((at, rung)) = news.tasks.get_mut(id) {
            *at = count;
            rung.notify_all();
        }
    }

    /// Starts watching task `id`; returns the mark to pass to [`Bell::wait_task`].
    pub fn watch(&self, id: &str) -> u64 {
        let mut news = self.news();
        let count = news.count;
        news.tasks.entry(id.to_string()).or_insert_with(|| (count, Rung::default())).0
    }

    /// Whether a worker watches task `id` (tests wait for it).
    #[cfg(test)]
    pub(crate) fn watching(&self, id: &str) -> bool {
        self.news().tasks.contains_key(id)
    }

    /// Stops watching task `id`: a report handed for it and not taken is given back.
    pub fn unwatch(&self, id: &str) {
        let mut news = self.news();
        news.tasks.remove(id);
        news.committed.remove(id);
        if let Some((h @ Handoff::Offered(_), rung)) = news.reports.get_mut(id) {
            *h = Handoff::Returned;
            rung.notify_all();
        }
    }

    /// Waits until task `id` moved past `mark` or `timeout` passes; returns its new mark.
    pub fn wait_task(&self, id: &str, mark: u64, timeout: Duration) -> u64 {
        let news = self.news();
        let Some(rung) = news.tasks.get(id).map(|(_, r)| r.clone()) else { return mark };
        let (news, _) =
            rung.wait_timeout_while(news, timeout, |n| n.unmoved(id, mark)).unwrap_or_else(|e| e.into_inner());
        news.tasks.get(id).map_or(mark, |(at, _)| *at)
    }
}

/// The associated data of a task's payload: the attempt, whatever the kind, so recovery can
/// hand the same payload to an `evidence` task.
pub(super) fn payload_aad(operation: &str, job: &str, attempt: u32) -> String {
    format!("agent:{operation}/{job}/{attempt}")
}

/// The associated data of a task's sealed report.
pub fn report_aad(task: &str) -> String {
    format!("agent-report:{task}")
}

pub(super) fn task_id(operation: &str, job: &str, attempt: u32, kind: &str) -> String {
    format!("{operation}/{job}/{attempt}/{kind}")
}

/// The worker's side of an attempt handed to an agent.
pub(crate) struct Waiting {
    pub(super) agents: Arc<Agents>,
    pub(super) keyring: Arc<opsgraph_secrets::Keyring>,
    pub(super) operation: String,
    pub(super) agent: String,
    pub(super) resource: String,
    /// The run task, and its payload (copied into an evidence task when its agent is lost).
    pub(super) task: String,
    pub(super) payload: Value,
    /// Run again after a lost agent when its evidence fails: an idempotency key and attempts left.
    pub(super) retry_allowed: bool,
    pub(super) actor: String,
    /// Enqueued by this process in the commit just done (not found after a restart): its row
    /// is known, queued or handed, and is not read until the task moves or the poll passes.
    pub(super) fresh: bool,
}

impl Drop for Waiting {
    /// A task handed to a parked claim in a commit that was refused, or whose worker never
    /// started (the drive stopped), is withdrawn: the claim looks again at once instead of
    /// waiting out its deadline. After the worker delivered it, nothing is left to withdraw.
    fn drop(&mut self) {
        self.agents.bell.withdraw(&self.task);
    }
}

#[cfg(test)]
mod tests {
    use expect_test::expect;

    use super::*;

    fn hand() -> ReportHand {
        ReportHand { report: Default::default(), text: String::new(), writes: vec![] }
    }

    /// A task handed to a parked claim whose commit will not happen (refused, or its drive
    /// stopped): withdrawn, the claim stops waiting for it at once — parked (`leave` finds it
    /// free) or already waiting for the hand (`withdrawn`) — and a delivered one is not taken back.
    #[test]
    fn a_hand_withdrawn_lets_its_claim_look_again_at_once() {
        let bell = Bell::default();
        let task = || opsgraph_store::testing::agent_task("t1", "op");
        let claim = || opsgraph_store::testing::agent_claim("l");
        let mut seen = Vec::new();
        // Parked, handed, withdrawn: the wait ends at once and the claim is free.
        let ticket = bell.park(claim());
        assert!(bell.hand(&mut task(), 1_000).is_some());
        bell.withdraw("t1");
        let t0 = std::time::Instant::now();
        bell.wait_parked(bell.work_seen(), &ticket, Duration::from_secs(5));
        seen.push(format!("parked: waited under a second {}", t0.elapsed() < Duration::from_secs(1)));
        seen.push(format!("parked: left free {}", matches!(bell.leave(&ticket), Left::Free)));
        // Left while promised, then withdrawn: the hand is not awaited, and it is forgotten.
        let ticket = bell.park(claim());
        bell.hand(&mut task(), 1_000);
        seen.push(format!("left promised {}", matches!(bell.leave(&ticket), Left::Promised(_))));
        bell.withdraw("t1");
        seen.push(format!("waited hand {}", bell.wait_hand(&ticket, Duration::from_secs(5)).is_some()));
        seen.push(format!("withdrawn {}, again {}", bell.withdrawn(&ticket), bell.withdrawn(&ticket)));
        // Delivered first: a later withdraw (the worker's `Waiting` dropped) changes nothing.
        let ticket = bell.park(claim());
        bell.hand(&mut task(), 1_000);
        bell.deliver("t1");
        bell.withdraw("t1");
        seen.push(format!("delivered, withdrawn after {}", matches!(bell.leave(&ticket), Left::Delivered(_))));
        expect![[r#"
            parked: waited under a second true
            parked: left free true
            left promised true
            waited hand false
            withdrawn true, again false
            delivered, withdrawn after true
        "#]]
        .assert_eq(&(seen.join("\n") + "\n"));
    }

    /// A report handed over, as its route and the worker waiting for its task see it: offered
    /// only to a worker that waits, taken once, settled once; given back when the worker stops
    /// waiting first or the driver drops it uncommitted.
    #[test]
    fn a_report_is_handed_only_to_a_waiting_worker_and_settled_once() {
        let bell = Arc::new(Bell::default());
        let mut seen = Vec::new();
        let mut say = |what: &str, v: String| seen.push(format!("{what}: {v}"));
        say("nobody waits, offered", bell.offer_report("t", hand()).to_string());
        bell.watch("t");
        say("offered", bell.offer_report("t", hand()).to_string());
        say("offered again", bell.offer_report("t", hand()).to_string());
        say("pending", bell.report_pending("t").to_string());
        say("awaited", format!("{:?}", bell.await_report("t", Duration::ZERO)));
        say("taken", bell.take_report("t").is_some().to_string());
        say("taken again", bell.take_report("t").is_some().to_string());
        let settle = bell.clone();
        let handed = crate::task::Handed::new(vec![], Box::new(move |c| settle.settle_report("t", c)));
        handed.committed();
        drop(handed);
        say("awaited", format!("{:?}", bell.await_report("t", Duration::ZERO)));
        say("pending after", bell.report_pending("t").to_string());
        bell.offer_report("t", hand());
        bell.unwatch("t");
        say("offered, worker gone, awaited", format!("{:?}", bell.await_report("t", Duration::ZERO)));
        bell.watch("u");
        bell.offer_report("u", hand());
        bell.take_report("u");
        let settle = bell.clone();
        drop(crate::task::Handed::new(vec![], Box::new(move |c| settle.settle_report("u", c))));
        say("taken, dropped uncommitted, awaited", format!("{:?}", bell.await_report("u", Duration::ZERO)));
        expect![[r#"
            nobody waits, offered: false
            offered: true
            offered again: false
            pending: true
            awaited: Pending
            taken: true
            taken again: false
            awaited: Committed
            pending after: false
            offered, worker gone, awaited: Returned
            taken, dropped uncommitted, awaited: Returned"#]]
        .assert_eq(&seen.join("\n"));
    }

    /// A task that moves wakes the worker waiting for it and no other: eight workers wait, each
    /// for its task; the eight tasks move one after another; each worker looks once before it
    /// sleeps and once when its own task moved (with one condition variable for all, every
    /// move woke every worker still waiting: 8 + 8 + 7 + … looks).
    #[test]
    fn a_task_that_moves_wakes_only_its_own_worker() {
        let bell = Arc::new(Bell::default());
        let ids: Vec<String> = (0..8).map(|k| format!("t{k}")).collect();
        let workers: Vec<_> = ids
            .iter()
            .map(|id| {
                let (bell, id) = (bell.clone(), id.clone());
                let mark = bell.watch(&id);
                std::thread::spawn(move || bell.wait_task(&id, mark, Duration::from_secs(30)) != mark)
            })
            .collect();
        while bell.news().looks < 8 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut moved = Vec::new();
        for (id, w) in ids.iter().zip(workers) {
            bell.ring_task(id);
            moved.push(w.join().unwrap());
        }
        assert!(moved.iter().all(|m| *m), "{moved:?}");
        assert_eq!(bell.news().looks, 16, "each worker looks once asleep and once woken by its own task");
    }

    /// A report its route committed is kept for the worker watching its task (which is woken and
    /// takes it once, instead of reading the row back), and for nobody else: a task nobody
    /// watches keeps nothing, and a worker that stops watching leaves nothing behind.
    #[test]
    fn a_report_committed_by_its_route_is_taken_once_by_the_worker_watching_it() {
        let bell = Bell::default();
        let report = |outcome: &str| super::super::wire::AgentReport { outcome: outcome.into(), ..Default::default() };
        let mut seen = Vec::new();
        let mark = bell.watch("t1");
        bell.report_committed("t1", report("done"));
        let moved = bell.wait_task("t1", mark, Duration::from_secs(5)) != mark;
        seen.push(format!("woken {moved}"));
        seen.push(format!("taken {:?}", bell.take_committed("t1").map(|r| r.outcome)));
        seen.push(format!("again {:?}", bell.take_committed("t1").map(|r| r.outcome)));
        bell.report_committed("t2", report("unwatched"));
        seen.push(format!("unwatched {:?}", bell.take_committed("t2").map(|r| r.outcome)));
        bell.report_committed("t1", report("late"));
        bell.unwatch("t1");
        seen.push(format!("after unwatch {}", bell.news().committed.len()));
        expect![[r#"
            woken true
            taken Some("done")
            again None
            unwatched None
            after unwatch 0
        "#]]
        .assert_eq(&(seen.join("\n") + "\n"));
    }
}
