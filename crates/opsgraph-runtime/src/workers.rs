//! The threads that run one drive's attempts.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use crate::committer::Guard;
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
    tasks: mpsc::Sender<Handed>,
    queue: Arc<Mutex<mpsc::Receiver<Handed>>>,
    results: mpsc::Sender<TaskResult>,
    started: usize,
}

impl Workers {
    pub(crate) fn new(results: mpsc::Sender<TaskResult>) -> Workers {
        let (tasks, queue) = mpsc::channel();
        Workers { tasks, queue: Arc::new(Mutex::new(queue)), results, started: 0 }
    }

    /// Hands `task` to a worker; `in_flight` counts the attempts started and not yet reported,
    /// this one included. A worker is free for every one of them. `guard`: the commit holding
    /// the attempt's `running` record, which the worker waits to be durable before it starts it
    /// (`committer.rs`, rule 1); the driver goes on meanwhile.
    pub(crate) fn run(&mut self, task: Task, in_flight: usize, guard: Option<Guard>) {
        while self.started < in_flight {
            let queue = Arc::clone(&self.queue);
            let results = self.results.clone();
            std::thread::spawn(move || {
                // Below the control plane, with the processes it starts (`opsgraph_exec::job_thread`).
                opsgraph_exec::job_thread();
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok((task, guard)) = next else { break };
                    if results.send(run(task, guard)).is_err() {
                        break;
                    }
                }
            });
            self.started += 1;
        }
        // The receiving side lives as long as a worker does; a send fails only if none could start.
        let _ = self.tasks.send((task, guard));
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
