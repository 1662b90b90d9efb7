//! The threads that run one drive's attempts.
//!
//! An attempt handed over waits in one queue until it may start — the commit holding its
//! `running` record is durable (`committer.rs`, rule 1), or a sync failed (it is then reported
//! "not started") — and only then wakes a worker: the committer's sync that makes it durable
//! wakes as many idle workers as attempts it made ready. A worker is not woken to be handed an
//! attempt only to sleep again on the durable mark, nor to take its turn at the queue's receiver
//! (a wide DAG of short jobs spent ~2 context switches a job on those, issue [N] 5).

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::committer::{Guard, Listener, Mark};
use crate::jobs;
use crate::task::{Task, TaskResult};

/// An attempt handed to a worker, with the commit its `running` record must be durable in.
type Handed = (Task, Option<Guard>);

/// The threads that run one drive's attempts: started as attempts need them, never more than
/// are in flight at once (so at most the concurrency), reused for the rest of the drive, ended
/// when the drive returns. Each attempt still runs alone on its thread from start to result.
/// They run nothing but attempts, so each lowers its CPU priority by `OPSGRAPH_JOBS_NICE` once
/// at its start, and the job processes it starts inherit that: the driver, the server's streams
/// and the API keep their turn on a busy machine (docs/operations.md#executors).
pub(crate) struct Workers {
    queue: Arc<Queue>,
    results: mpsc::Sender<TaskResult>,
    started: usize,
    /// The durable mark this queue listens to (the runtime's committer's).
    listens: Option<Arc<Mark>>,
}

/// The attempts handed over and not taken yet, and the idle workers waiting for one that may start.
struct Queue {
    state: Mutex<Waiting>,
    ready: Condvar,
}

struct Waiting {
    tasks: VecDeque<Handed>,
    /// Workers waiting on `ready`.
    idle: usize,
    /// The drive returned: workers take what is left (each still waits for its own guard) and end.
    closed: bool,
}

/// Whether a handed attempt may be taken now: no sync to wait for, its commit durable, or a
/// sync failed (it is reported "not started").
fn may_start((_, guard): &Handed) -> bool {
    guard.as_ref().is_none_or(Guard::settled)
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next attempt for a worker, waiting until one may start; `None` once the drive returned
    /// and nothing is left.
    fn next(&self) -> Option<Handed> {
        let mut q = self.lock();
        loop {
            let at = if q.closed { (!q.tasks.is_empty()).then_some(0) } else { q.tasks.iter().position(may_start) };
            if let Some(i) = at {
                return q.tasks.remove(i);
            }
            if q.closed {
                return None;
            }
            q.idle += 1;
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            q.idle -= 1;
        }
    }
}

impl Listener for Queue {
    /// The durable mark moved: one idle worker woken for each attempt that may start now.
    fn moved(&self) {
        let q = self.lock();
        let ready = q.tasks.iter().filter(|t| may_start(t)).count().min(q.idle);
        drop(q);
        for _ in 0..ready {
            self.ready.notify_one();
        }
    }
}

impl Workers {
    pub(crate) fn new(results: mpsc::Sender<TaskResult>) -> Workers {
        let queue = Queue {
            state: Mutex::new(Waiting { tasks: VecDeque::new(), idle: 0, closed: false }),
            ready: Condvar::new(),
        };
        Workers { queue: Arc::new(queue), results, started: 0, listens: None }
    }

    /// Hands `task` to a worker; `in_flight` counts the attempts started and not yet reported,
    /// this one included. A worker is free for every one of them. `guard`: the commit holding
    /// the attempt's `running` record, which must be durable before a worker takes it
    /// (`committer.rs`, rule 1); the driver goes on meanwhile.
    pub(crate) fn run(&mut self, task: Task, in_flight: usize, guard: Option<Guard>) {
        if let Some(g) = &guard {
            if !self.listens.as_ref().is_some_and(|m| Arc::ptr_eq(m, &g.mark)) {
                let queue: Arc<dyn Listener> = self.queue.clone();
                g.mark.listen(Arc::downgrade(&queue));
                self.listens = Some(Arc::clone(&g.mark));
            }
        }
        while self.started < in_flight {
            let queue = Arc::clone(&self.queue);
            let results = self.results.clone();
            std::thread::spawn(move || {
                // Below the control plane, with the processes it starts (`opsgraph_exec::job_thread`).
                opsgraph_exec::job_thread();
                while let Some((task, guard)) = queue.next() {
                    if results.send(run(task, guard)).is_err() {
                        break;
                    }
                }
            });
            self.started += 1;
        }
        let handed = (task, guard);
        let mut q = self.queue.lock();
        // Checked under the queue's lock: a mark that moves after this finds the attempt queued.
        let wake = may_start(&handed) && q.idle > 0;
        q.tasks.push_back(handed);
        drop(q);
        if wake {
            self.queue.ready.notify_one();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.queue.lock().closed = true;
        self.queue.ready.notify_all();
    }
}

/// One attempt on a worker thread, once its `running` record is durable: carried out otherwise
/// (an agent's report waited for, checks between waves), or run here. Never started when the
/// record could not be made durable: the drive stops at its next commit, and this result,
/// never committed, goes with it.
fn run(mut task: Task, guard: Option<Guard>) -> TaskResult {
    let after_sync = guard.is_some();
    if let Some(Err(e)) = guard.map(|g| g.wait(&task.instance)) {
        let mut r = TaskResult::of(&task);
        r.outcome = "not started".into();
        r.failure = Some(format!("not started: {e}"));
        return r;
    }
    let mut r = match task.instead.take() {
        Some(instead) => instead(task),
        None => jobs::run(task),
    };
    r.after_sync = after_sync;
    r
}
