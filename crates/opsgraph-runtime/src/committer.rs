//! The committer (issue [N] 5): the sync of the driver's commits on a thread of its own, so that
//! a commit's `fsync` overlaps the driver's next decisions instead of stopping it.
//!
//! The driver makes each commit that records attempts with [`Store::commit_deferred`] (made and
//! visible, not yet durable; the SQL still runs on the driver's thread, on its one connection)
//! and numbers it; this thread syncs ([`opsgraph_store::Syncer`]) whatever was made before each
//! sync began, and raises the durable mark to the last number that sync covers. The rules that
//! keep the runtime's guarantees (docs/benchmarks.md, "The committer thread"):
//!
//! 1. A task is handed to a worker only once the mark covers the commit holding its `running`
//!    record ([`Committer::wait`]); a worker checks it again before it runs ([`Guard`]).
//! 2. Results go into a later commit than their `running` record, made after it on the same
//!    connection: a sync that covers the later one covers the earlier (`recover.rs` unchanged).
//! 3. What overlaps a sync: collecting reports, deciding, preparing the next tasks, and the
//!    result of a trivial attempt (no process, no effect outside the driver), which joins the
//!    next commit. Agents' reports are answered only after the mark covers their commit.
//! 4. A sync that fails stops the drive before anything its commits guarded starts: every later
//!    [`Committer::submit`] and [`Committer::wait`] fails with [`Error::NotDurable`].
//! 5. The driver's caches (its job records, its copy of the operation row) count a write when
//!    it is made on the driver's connection: the store reads it back so too, and if it is never
//!    made durable, the drive stops and the caches go with it (the next drive reads the store).
//! 6. A batch of starts per sync: reports of attempts that waited for a sync, arriving while a
//!    sync is under way, are held until it ends ([`Committer::wait_idle`]), then committed at
//!    once with the attempts they make room for. Those could not be durable sooner (the sync
//!    that covers them begins when the one under way ends), and a wide DAG makes one commit per
//!    sync instead of one per report (issue [N] 5).
//! 7. A commit that only enqueues attempts for agents ([`Durable::ByItsClaims`]) starts no sync:
//!    an agent hears of a task only from a claim, a write of its row made after this commit and
//!    synced at its own commit, which covers this one (the WAL is synced in order). Its workers
//!    start nothing, so they wait for no guard; the next sync, or one started when the driver
//!    finds no report for a while ([`Committer::catch_up`]) or stops, covers it too (issue [N] 2).
//!
//! When the driver would only wait for the sync — every attempt in flight is one the commit
//! records, one of them a process to start: a chain's next job — it syncs on its own thread
//! instead ([`Durable::Here`]), by the same rules, without the hand-off to this thread and back.
//!
//! A store without a syncer (SQLite with `Durability::Normal` or in memory; PostgreSQL when its
//! syncer's connection cannot be made) commits synchronously, and its mark is every number at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;

use opsgraph_store::{Error, Syncer};

/// When a commit the runtime makes is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durable {
    /// At its commit: whoever asked may be told at once (a server's reply, a person's change).
    Now,
    /// Once the committer's sync covers it, a sync begun at once ([`Store::commit_deferred`]):
    /// the driver's commits that record attempts; what they guard waits for the durable mark.
    ///
    /// [`Store::commit_deferred`]: opsgraph_store::Store::commit_deferred
    Deferred,
    /// Made as [`Durable::Deferred`], but no sync starts for it: the next commit of this runtime
    /// made durable covers it (the WAL keeps commits in order), and the drive that the caller
    /// starts at once in this process (`drive_leased`) syncs it when it stops if none did. For
    /// an operation the CLI creates and drives at once, reporting nothing of it before the
    /// drive's first commit (which records its first attempts, synced before their processes
    /// start): one `fsync` fewer before a cold `apply`'s first job (issue [N] 5).
    ByItsDrive,
    /// Made as [`Durable::Deferred`], no sync started for it: the driver's commit that records
    /// attempts only agents run (and enqueues their tasks, handing none to a parked claim and
    /// carrying no report an agent waits on). Nothing of this process acts on it: its agent
    /// tasks reach an agent only through a claim, a write of their rows made after this commit
    /// on any connection and synced at its commit before the claim is answered (SQLite appends
    /// the WAL in commit order and one `fdatasync` of it covers what was written before;
    /// PostgreSQL flushes its WAL in order), which covers this commit too. The workers waiting
    /// for those agents start nothing and need no guard; the next sync of this runtime, or
    /// `settle`, covers it as well. One `fsync` a turn fewer through agents (issue [N] 2).
    ByItsClaims,
    /// Made as [`Durable::Deferred`], then synced at once on the calling thread, before the
    /// commit's number is returned: for a driver that has nothing to do but wait for that sync
    /// (every attempt in flight is one the commit records, one of them a process to start — a
    /// chain's next job). Rule 1 holds as with the thread's sync; what it saves is the hand-off
    /// to the committer's thread and back (issue [N] 5, docs/benchmarks.md).
    Here,
}

impl Durable {
    /// How the driver's commit that records attempts `running` is made durable (`execute.rs`):
    /// `Now` when it hands a task to a parked claim (answered once its worker starts, or found in
    /// the store by the claim, with no write of the claim's own) or carries a report handed over
    /// in memory (its agent is answered after this commit), with the claim of the agent's next
    /// task it may carry (`AgentWrite::Claim`, answered after it too); `ByItsClaims` when it enqueues for
    /// agents and every attempt it starts is an agent's or has nothing to run (`agents_only`);
    /// `Now` when it enqueues beside local processes, as before; `Here` when the attempts it
    /// records are all that is in flight and one is a process to start (`only_these`: a chain's
    /// next job; the driver would only wait); otherwise `Deferred`.
    pub(crate) fn of_starts(writes: &[opsgraph_store::Write], only_these: bool, agents_only: bool) -> Durable {
        use opsgraph_store::{AgentWrite, Write};
        let enqueues = |w: &Write| matches!(w, Write::Agent(AgentWrite::Enqueue(_)));
        let agent = |w: &Write| matches!(w, Write::Agent(_));
        if writes.iter().any(|w| agent(w) && !enqueues(w)) {
            Durable::Now
        } else if writes.iter().any(enqueues) {
            if agents_only {
                Durable::ByItsClaims
            } else {
                Durable::Now
            }
        } else if only_these {
            Durable::Here
        } else {
            Durable::Deferred
        }
    }
}

/// A failpoint of the committer, for tests: called before each sync with the last commit it
/// covers; an `Err` is the sync failing with that reason (a sleep in it delays every sync).
pub(crate) type Fault = Arc<dyn Fn(u64) -> Result<(), String> + Send + Sync>;

/// What the driver and the committer's thread share.
pub(crate) struct Mark {
    /// The last commit made (numbered from 1).
    made: AtomicU64,
    /// The last commit known durable.
    durable: AtomicU64,
    state: Mutex<State>,
    /// The mark moved (raised, or a sync failed or ended): what the workers, `wait_idle` and
    /// `Durable::Here` wait on. Never notified for a commit made, which moves no mark: with one
    /// condition variable for both, every commit of a wide drive woke every worker waiting for
    /// its start, to sleep again (issue [N] 5).
    moved: Condvar,
    /// A commit was made that the thread may sync, or the committer stops: what the committer's
    /// thread waits on.
    work: Condvar,
    /// Told whenever the mark moves, after `moved` (the workers' queue: `workers.rs`).
    listeners: Mutex<Vec<Weak<dyn Listener>>>,
    /// Each start a worker made: the attempt, the commit holding its `running` record, and the
    /// durable mark it saw (the tests' witness of rule 1).
    #[cfg(test)]
    pub(crate) starts: Mutex<Vec<(String, u64, u64)>>,
    /// Each deferred commit: whether a sync was under way when it was made (the tests' witness
    /// of rule 6).
    #[cfg(test)]
    pub(crate) deferred: Mutex<Vec<bool>>,
    /// How often a waiter for a commit woke before it was durable (and no sync had failed).
    #[cfg(test)]
    pub(crate) early: AtomicU64,
    /// How often a worker had to wait for the commit of an attempt it was given.
    #[cfg(test)]
    pub(crate) waited: AtomicU64,
    /// How often a move of the mark notified `moved`.
    #[cfg(test)]
    pub(crate) notified: AtomicU64,
}

#[derive(Default)]
struct State {
    failed: Option<String>,
    stop: bool,
    /// The thread is syncing: a commit made now is covered only by the sync after this one.
    syncing: bool,
    /// Threads waiting on `moved`: the mark's move wakes them only when there are some (std's
    /// notify makes a `futex` call, waiters or not; most syncs of a wide drive have none).
    waiters: usize,
}

impl Mark {
    fn new() -> Mark {
        Mark {
            made: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            moved: Condvar::new(),
            work: Condvar::new(),
            listeners: Mutex::new(Vec::new()),
            #[cfg(test)]
            starts: Mutex::new(Vec::new()),
            #[cfg(test)]
            deferred: Mutex::new(Vec::new()),
            #[cfg(test)]
            early: AtomicU64::new(0),
            #[cfg(test)]
            waited: AtomicU64::new(0),
            #[cfg(test)]
            notified: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// `listener` is told whenever the mark moves (raised, or a sync failed), until it is dropped.
    pub(crate) fn listen(&self, listener: Weak<dyn Listener>) {
        let mut all = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|l| l.strong_count() > 0);
        all.push(listener);
    }

    /// The mark moved: wakes its waiters (`waiters`, counted under the state's lock when the move
    /// was made there) and tells its listeners. Called without the state's lock.
    fn announce(&self, waiters: usize) {
        if waiters > 0 {
            #[cfg(test)]
            self.notified.fetch_add(1, Ordering::AcqRel);
            self.moved.notify_all();
        }
        let all: Vec<Arc<dyn Listener>> =
            self.listeners.lock().unwrap_or_else(|e| e.into_inner()).iter().filter_map(Weak::upgrade).collect();
        for l in all {
            l.moved();
        }
    }

    /// Waits until commit `n` is durable; fails when a sync failed first.
    fn wait(&self, n: u64) -> Result<(), Error> {
        if self.durable() >= n {
            return Ok(());
        }
        let mut state = self.lock();
        loop {
            if let Some(reason) = &state.failed {
                return Err(Error::NotDurable { reason: reason.clone() });
            }
            if self.durable() >= n {
                return Ok(());
            }
            state.waiters += 1;
            state = self.moved.wait(state).unwrap_or_else(|e| e.into_inner());
            state.waiters -= 1;
            #[cfg(test)]
            if state.failed.is_none() && self.durable() < n {
                self.early.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}

/// What is told when the durable mark moves ([`Mark::listen`]).
pub(crate) trait Listener: Send + Sync {
    fn moved(&self);
}

/// The commit a task's `running` record is in, and the mark that says when it is durable.
#[derive(Clone)]
pub(crate) struct Guard {
    pub(crate) commit: u64,
    pub(crate) mark: Arc<Mark>,
}

impl Guard {
    /// Whether [`Guard::wait`] would return at once: the commit is durable, or a sync failed.
    pub(crate) fn settled(&self) -> bool {
        self.mark.durable() >= self.commit || self.mark.lock().failed.is_some()
    }

    /// Waits until attempt `instance` may start: its `running` record is durable. Fails (the
    /// attempt must not start) when a sync failed first.
    pub(crate) fn wait(&self, instance: &str) -> Result<(), Error> {
        #[cfg(test)]
        if self.mark.durable() < self.commit {
            self.mark.waited.fetch_add(1, Ordering::AcqRel);
        }
        self.mark.wait(self.commit)?;
        #[cfg(test)]
        self.mark.starts.lock().unwrap_or_else(|e| e.into_inner()).push((
            instance.to_string(),
            self.commit,
            self.mark.durable(),
        ));
        #[cfg(not(test))]
        let _ = instance;
        Ok(())
    }
}

/// The committer of one runtime: its thread is started at the first deferred commit.
pub(crate) struct Committer {
    mark: Arc<Mark>,
    syncer: Option<Arc<dyn Syncer>>,
    thread: Option<JoinHandle<()>>,
    pub(crate) fault: Option<Fault>,
}

impl Committer {
    /// `syncer`: the store's ([`opsgraph_store::Store::syncer`]); without one, every commit is
    /// durable when made.
    pub(crate) fn new(syncer: Option<Arc<dyn Syncer>>) -> Committer {
        Committer { mark: Arc::new(Mark::new()), syncer, thread: None, fault: None }
    }

    /// Whether commits are deferred to this committer (else the driver commits durably).
    pub(crate) fn defers(&self) -> bool {
        self.syncer.is_some()
    }

    #[cfg(test)]
    pub(crate) fn mark(&self) -> &Arc<Mark> {
        &self.mark
    }

    /// Fails when an earlier sync failed: nothing more is decided on commits that may be lost.
    pub(crate) fn check(&self) -> Result<(), Error> {
        match &self.mark.lock().failed {
            Some(reason) => Err(Error::NotDurable { reason: reason.clone() }),
            None => Ok(()),
        }
    }

    /// A commit was made, durable as `durable` says (`Now` when this committer does not defer):
    /// its number, for [`Committer::wait`].
    pub(crate) fn submit(&mut self, durable: Durable) -> Result<u64, Error> {
        self.check()?;
        let n = self.mark.made.fetch_add(1, Ordering::AcqRel) + 1;
        match durable {
            _ if !self.defers() => {}
            // Durable already. It covers the deferred commits made before it only if it wrote
            // something (a commit that changed no row syncs nothing): while any is not known
            // durable, the thread's sync decides for it too.
            Durable::Now if self.mark.durable() + 1 < n => {
                self.sync_soon();
                return Ok(n);
            }
            Durable::Now => {}
            // Its sync is left to what follows (`settle`, or a commit made durable after it;
            // for `ByItsClaims` also the claims of its tasks, which nothing here waits for).
            Durable::ByItsDrive | Durable::ByItsClaims => return Ok(n),
            Durable::Deferred => {
                #[cfg(test)]
                {
                    let syncing = self.mark.lock().syncing;
                    self.mark.deferred.lock().unwrap_or_else(|e| e.into_inner()).push(syncing);
                }
                self.sync_soon();
                return Ok(n);
            }
            // Nothing waits on the thread for it: this thread syncs what was made.
            Durable::Here => {
                sync_made(&self.mark, &**self.syncer.as_ref().expect("defers"), self.fault.as_ref(), n, false);
                self.mark.wait(n)?;
                return Ok(n);
            }
        }
        let state = self.mark.lock();
        self.mark.durable.fetch_max(n, Ordering::AcqRel);
        let waiters = state.waiters;
        drop(state);
        self.mark.announce(waiters);
        Ok(n)
    }

    /// Has the thread sync what was made, starting it if needed.
    fn sync_soon(&mut self) {
        if self.thread.is_none() {
            self.thread = Some(self.spawn());
        }
        // Taken under the lock, so the thread cannot miss it between its check and its wait.
        drop(self.mark.lock());
        self.mark.work.notify_one();
    }

    /// Waits until commit `n` is durable; fails when a sync failed first.
    pub(crate) fn wait(&self, n: u64) -> Result<(), Error> {
        self.mark.wait(n)
    }

    /// Waits while a sync is under way (rule 6): a commit made meanwhile would be durable only
    /// once the sync after it returned, which begins when this one ends, so what it would start
    /// loses nothing by being committed then, with whatever else came in meanwhile. Fails when a
    /// sync failed. Returns at once when nothing is being synced (a store that does not defer).
    pub(crate) fn wait_idle(&self) -> Result<(), Error> {
        let mut state = self.mark.lock();
        loop {
            if let Some(reason) = &state.failed {
                return Err(Error::NotDurable { reason: reason.clone() });
            }
            if !state.syncing {
                return Ok(());
            }
            state.waiters += 1;
            state = self.mark.moved.wait(state).unwrap_or_else(|e| e.into_inner());
            state.waiters -= 1;
        }
    }

    /// What a worker waits on before it starts an attempt recorded in commit `n`.
    pub(crate) fn guard(&self, n: u64) -> Guard {
        Guard { commit: n, mark: Arc::clone(&self.mark) }
    }

    /// Has the thread sync what was made and left to what follows (`ByItsClaims`, `ByItsDrive`),
    /// without waiting for it: the driver found nothing to do for a while.
    pub(crate) fn catch_up(&mut self) {
        if self.defers() && self.mark.made.load(Ordering::Acquire) > self.mark.durable() {
            self.sync_soon();
        }
    }

    /// Waits until every commit made is durable (before a drive returns), syncing one left to
    /// what follows (`Durable::ByItsDrive`) that nothing synced yet.
    pub(crate) fn settle(&mut self) -> Result<(), Error> {
        let made = self.mark.made.load(Ordering::Acquire);
        if self.defers() && made > self.mark.durable() {
            self.sync_soon();
        }
        self.wait(made)
    }

    fn spawn(&self) -> JoinHandle<()> {
        let (mark, fault) = (Arc::clone(&self.mark), self.fault.clone());
        let syncer = self.syncer.clone().expect("spawned only with a syncer");
        std::thread::spawn(move || loop {
            let covers = {
                let mut state = mark.lock();
                loop {
                    let made = mark.made.load(Ordering::Acquire);
                    if state.failed.is_some() || (state.stop && made <= mark.durable()) {
                        return;
                    }
                    if made > mark.durable() {
                        state.syncing = true;
                        break made;
                    }
                    state = mark.work.wait(state).unwrap_or_else(|e| e.into_inner());
                }
            };
            sync_made(&mark, &*syncer, fault.as_ref(), covers, true);
        })
    }
}

/// One sync, on the calling thread (the committer's, or a driver's for [`Durable::Here`]): it
/// covers commit `covers` and every one made before it (all made before the sync began), and
/// raises the mark to it; a failure is kept, and fails every later wait and commit (rule 4).
/// `thread`: the committer's thread's sync, whose end lets held reports go (rule 6).
fn sync_made(mark: &Mark, syncer: &dyn Syncer, fault: Option<&Fault>, covers: u64, thread: bool) {
    crate::failpoint::hit("commit.unsynced");
    let synced = match fault.map(|f| f(covers)) {
        Some(Err(reason)) => Err(reason),
        _ => syncer.sync().map_err(|e| e.to_string()),
    };
    let mut state = mark.lock();
    if thread {
        state.syncing = false;
    }
    let failed = synced.is_err();
    match synced {
        Ok(()) => {
            mark.durable.fetch_max(covers, Ordering::AcqRel);
        }
        Err(reason) => state.failed = Some(reason),
    }
    let waiters = state.waiters;
    drop(state);
    mark.announce(waiters);
    if failed {
        // The thread ends (a sync on the driver's thread failed).
        mark.work.notify_one();
    }
}

impl Drop for Committer {
    /// Syncs what was made, then ends the thread: a runtime dropped after commits it did not
    /// wait for still leaves them durable when it can.
    fn drop(&mut self) {
        // A commit left to what follows (`Durable::ByItsDrive`) and nothing followed.
        if self.thread.is_none() && self.defers() && self.mark.made.load(Ordering::Acquire) > self.mark.durable() {
            self.thread = Some(self.spawn());
        }
        self.mark.lock().stop = true;
        self.mark.work.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counted(AtomicU64);

    impl Syncer for Counted {
        fn sync(&self) -> Result<(), Error> {
            self.0.fetch_add(1, Ordering::AcqRel);
            Ok(())
        }
    }

    /// How the commit that starts attempts is made durable, by what it holds and starts: synced
    /// at once when it hands a task to a parked claim or carries a report its agent waits on;
    /// left to the claims of its tasks when it only enqueues for agents (and nothing else it
    /// starts runs a process); synced at once beside local processes; else as local starts.
    #[test]
    fn a_commit_that_only_enqueues_for_agents_is_left_to_their_claims() {
        use opsgraph_store::{AgentWrite, Write};
        let guard = Write::ExpectVersion { operation: "op".into(), version: 1 };
        let task = || Box::new(opsgraph_store::testing::agent_task("t1", "op"));
        let enqueue = Write::Agent(AgentWrite::Enqueue(task()));
        let report = Write::Agent(AgentWrite::Report {
            task: "t0".into(),
            lease: "l".into(),
            report: serde_json::Value::Null,
            at: opsgraph_store::now(),
        });
        let claim = opsgraph_store::testing::agent_claim("l");
        let handed = Write::Agent(AgentWrite::Handed { task: task(), claim: Box::new(claim.clone()) });
        let next = Write::Agent(AgentWrite::Claim(Box::new(claim)));
        let cases: [(&str, Vec<Write>, bool, bool); 9] = [
            ("local starts", vec![guard.clone()], false, false),
            ("a chain's next job", vec![guard.clone()], true, false),
            ("enqueues for agents only", vec![guard.clone(), enqueue.clone()], false, true),
            ("enqueues beside a local process", vec![guard.clone(), enqueue.clone()], true, false),
            ("hands a task to a parked claim", vec![guard.clone(), handed.clone()], false, true),
            ("carries a handed report", vec![report.clone(), guard.clone(), enqueue.clone()], false, true),
            ("carries a handed report, starts nothing of agents", vec![report, guard.clone()], false, true),
            ("hands and enqueues", vec![guard.clone(), enqueue.clone(), handed], false, true),
            ("carries an agent's next claim", vec![guard, enqueue, next], false, true),
        ];
        let got: String = cases
            .iter()
            .map(|(what, writes, only_these, agents_only)| {
                format!("{what}: {:?}\n", Durable::of_starts(writes, *only_these, *agents_only))
            })
            .collect();
        expect_test::expect![[r#"
            local starts: Deferred
            a chain's next job: Here
            enqueues for agents only: ByItsClaims
            enqueues beside a local process: Now
            hands a task to a parked claim: Now
            carries a handed report: Now
            carries a handed report, starts nothing of agents: Now
            hands and enqueues: Now
            carries an agent's next claim: Now
        "#]]
        .assert_eq(&got);
    }

    /// A commit left to its tasks' claims starts no sync and raises no mark; a durable commit
    /// after it does not vouch for it (the thread syncs both), nor does anything else but a
    /// sync: `catch_up` (the driver idle) has the thread sync it without waiting.
    #[test]
    fn a_commit_left_to_the_claims_is_synced_only_by_a_later_sync() {
        let synced = Arc::new(Counted(AtomicU64::new(0)));
        let mut c = Committer::new(Some(synced.clone() as Arc<dyn Syncer>));
        let first = c.submit(Durable::ByItsClaims).unwrap();
        let second = c.submit(Durable::ByItsClaims).unwrap();
        assert!(c.thread.is_none(), "no sync was started for them");
        assert_eq!((c.mark().durable(), synced.0.load(Ordering::Acquire)), (0, 0));
        c.catch_up();
        c.wait(second).unwrap();
        assert_eq!((first, c.mark().durable(), synced.0.load(Ordering::Acquire)), (1, 2, 1));
        c.catch_up();
        c.submit(Durable::ByItsClaims).unwrap();
        let now = c.submit(Durable::Now).unwrap();
        c.wait(now).unwrap();
        assert!(synced.0.load(Ordering::Acquire) >= 2, "synced by the thread, not assumed");
        assert_eq!(c.mark().durable(), now);
        c.settle().unwrap();
    }

    #[test]
    fn a_commit_is_waited_for_until_a_sync_begun_after_it_returned() {
        let synced = Arc::new(Counted(AtomicU64::new(0)));
        let mut c = Committer::new(Some(synced.clone() as Arc<dyn Syncer>));
        c.fault = Some(Arc::new(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            Ok(())
        }));
        let first = c.submit(Durable::Deferred).unwrap();
        let second = c.submit(Durable::Deferred).unwrap();
        assert_eq!((first, second), (1, 2));
        c.wait(second).unwrap();
        assert!(c.mark().durable() >= 2);
        assert!(synced.0.load(Ordering::Acquire) >= 1);
        // A durable commit made directly covers itself and everything before it.
        let third = c.submit(Durable::Now).unwrap();
        assert_eq!(c.mark().durable(), third);
        c.settle().unwrap();
    }

    #[test]
    fn a_failed_sync_fails_every_wait_and_every_later_commit() {
        let mut c = Committer::new(Some(Arc::new(Counted(AtomicU64::new(0))) as Arc<dyn Syncer>));
        c.fault = Some(Arc::new(|_| Err("disk gone".into())));
        let n = c.submit(Durable::Deferred).unwrap();
        let err = c.wait(n).unwrap_err();
        assert!(matches!(&err, Error::NotDurable { reason } if reason == "disk gone"), "{err:?}");
        assert_eq!(c.mark().durable(), 0, "nothing was made durable");
        assert!(matches!(c.submit(Durable::Deferred), Err(Error::NotDurable { .. })));
        assert!(c.settle().is_err());
    }

    /// A worker waiting for its commit to be durable is woken when the mark moves, not by every
    /// commit the driver makes meanwhile (which only asks the committer's thread for a sync):
    /// five commits during a 300 ms sync woke it five times when one condition variable served
    /// both; now only the end of that sync does (it covers the commit before the awaited one).
    #[test]
    fn a_commit_made_does_not_wake_the_workers_waiting_for_the_mark() {
        use std::time::Duration;
        let mut c = Committer::new(Some(Arc::new(Counted(AtomicU64::new(0))) as Arc<dyn Syncer>));
        c.fault = Some(Arc::new(|_| {
            std::thread::sleep(Duration::from_millis(300));
            Ok(())
        }));
        let first = c.submit(Durable::Deferred).unwrap();
        let guard = c.guard(first + 1);
        let waiter = std::thread::spawn(move || guard.wait("w"));
        std::thread::sleep(Duration::from_millis(30));
        for _ in 0..5 {
            c.submit(Durable::Deferred).unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        waiter.join().unwrap().unwrap();
        let early = c.mark().early.load(Ordering::Acquire);
        assert!(early <= 1, "the waiter woke {early} times before its commit was durable");
        c.settle().unwrap();
    }

    /// A commit left to its drive starts no sync; a deferred commit after it is synced with it
    /// (one sync covers both); one that nothing followed is synced by `settle`, or when the
    /// committer is dropped.
    #[test]
    fn a_commit_left_to_its_drive_is_synced_by_what_follows_or_by_settle() {
        let synced = Arc::new(Counted(AtomicU64::new(0)));
        let mut c = Committer::new(Some(synced.clone() as Arc<dyn Syncer>));
        let created = c.submit(Durable::ByItsDrive).unwrap();
        assert!(c.thread.is_none(), "no sync was started for it");
        assert_eq!(c.mark().durable(), 0);
        let recorded = c.submit(Durable::Deferred).unwrap();
        c.wait(recorded).unwrap();
        assert!(c.mark().durable() >= created);
        assert_eq!(synced.0.load(Ordering::Acquire), 1, "one sync for both");

        let mut c = Committer::new(Some(synced.clone() as Arc<dyn Syncer>));
        c.submit(Durable::ByItsDrive).unwrap();
        c.settle().unwrap();
        assert_eq!((c.mark().durable(), synced.0.load(Ordering::Acquire)), (1, 2));
        c.settle().unwrap();
        assert_eq!(synced.0.load(Ordering::Acquire), 2, "nothing new: no sync");

        let mut c = Committer::new(Some(synced.clone() as Arc<dyn Syncer>));
        c.submit(Durable::ByItsDrive).unwrap();
        drop(c);
        assert_eq!(synced.0.load(Ordering::Acquire), 3, "synced when dropped");

        // A durable commit after one not synced yet does not vouch for it (a commit that changed
        // no row syncs nothing): the thread syncs them.
        let mut c = Committer::new(Some(synced.clone() as Arc<dyn Syncer>));
        c.submit(Durable::ByItsDrive).unwrap();
        let now = c.submit(Durable::Now).unwrap();
        c.wait(now).unwrap();
        assert_eq!(synced.0.load(Ordering::Acquire), 4, "synced by the thread, not assumed");
        drop(c);

        // Without a syncer every commit is durable when made.
        let mut c = Committer::new(None);
        let n = c.submit(Durable::ByItsDrive).unwrap();
        assert_eq!(c.mark().durable(), n);
    }

    /// A sync that nobody waits for (a wide drive's, whose workers wait in their queue, not on
    /// the mark) notifies no waiter: no `futex` call a sync. One waited for wakes its waiter.
    #[test]
    fn a_sync_nobody_waits_for_notifies_nobody() {
        use std::time::Duration;
        let mut c = Committer::new(Some(Arc::new(Counted(AtomicU64::new(0))) as Arc<dyn Syncer>));
        for _ in 0..3 {
            let n = c.submit(Durable::Deferred).unwrap();
            while c.mark().durable() < n {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(c.mark().notified.load(Ordering::Acquire), 0, "nobody waited");
        // The thread takes its fault when it starts: a new committer.
        let mut c = Committer::new(Some(Arc::new(Counted(AtomicU64::new(0))) as Arc<dyn Syncer>));
        c.fault = Some(Arc::new(|_| {
            std::thread::sleep(Duration::from_millis(300));
            Ok(())
        }));
        let n = c.submit(Durable::Deferred).unwrap();
        let guard = c.guard(n);
        let waiter = std::thread::spawn(move || guard.wait("w"));
        waiter.join().unwrap().unwrap();
        assert!(c.mark().notified.load(Ordering::Acquire) >= 1, "the waiter was woken");
    }
}
