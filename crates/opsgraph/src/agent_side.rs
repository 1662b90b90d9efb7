//! The side of an `opsgraph agent` runner: while a task's job runs, its output is sent as log
//! chunks (every 100 ms; with protocol 2 and later the last lines travel in the report instead)
//! and its lease is kept with heartbeats (a refused one, 409: the task was given up or
//! cancelled, stops the job). One thread per runner watches the tasks the runner runs one after
//! another (a claimed task, then the successors its reports claim): a thread started and joined
//! per task cost a start, a stack and an exit each job.

use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opsgraph_exec::Cancel;
use opsgraph_runtime::LogStream;
use serde_json::json;

use crate::agent_client::{send_log, Answer, Client};

/// A task to watch while its job runs.
pub(crate) struct Watch {
    pub(crate) client: Client,
    pub(crate) id: String,
    pub(crate) lease: String,
    pub(crate) cancel: Cancel,
    pub(crate) stream: Arc<Mutex<LogStream>>,
    /// How often to send a heartbeat.
    pub(crate) beat: Duration,
    /// Protocol 2 and later: the last lines go with the report, not as log chunks.
    pub(crate) lines_in_report: bool,
}

enum Msg {
    Watch(Box<Watch>),
    /// The watched task's job ended.
    End,
}

/// A runner's side thread.
pub(crate) struct Side {
    to: Option<Sender<Msg>>,
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl Side {
    pub(crate) fn new() -> Side {
        let (to, from) = channel();
        let (done_to, done) = channel();
        let thread = std::thread::spawn(move || side(&from, &done_to));
        Side { to: Some(to), done, thread: Some(thread) }
    }

    /// Watches `w` until [`Side::end`].
    pub(crate) fn watch(&self, w: Watch) {
        self.send(Msg::Watch(Box::new(w)));
    }

    /// The watched task's job ended: returns once what it printed was sent (as log chunks, when
    /// its lines do not go with the report) and nothing more is sent for it.
    pub(crate) fn end(&self) {
        self.send(Msg::End);
        let _ = self.done.recv();
    }

    fn send(&self, m: Msg) {
        if let Some(to) = &self.to {
            let _ = to.send(m);
        }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        self.to = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The side thread: each task, from its `Watch` to its `End`; until its runner drops it.
fn side(from: &Receiver<Msg>, done: &Sender<()>) {
    while let Ok(m) = from.recv() {
        if let Msg::Watch(w) = m {
            watch(&w, from);
        }
        let _ = done.send(());
    }
}

fn watch(w: &Watch, from: &Receiver<Msg>) {
    let mut last_beat = Instant::now();
    let mut end = false;
    loop {
        if end && w.lines_in_report {
            return;
        }
        loop {
            let text = w.stream.lock().unwrap_or_else(|e| e.into_inner()).take(end);
            if text.is_empty() {
                break;
            }
            send_log(&w.client, &w.id, &w.lease, text, &w.cancel, end);
        }
        if end {
            return;
        }
        if last_beat.elapsed() >= w.beat {
            last_beat = Instant::now();
            if let Answer::Refused(409, ..) =
                w.client.post("/api/v1/agent/heartbeat", &json!({"task": w.id, "lease": w.lease}))
            {
                // Given up or cancelled: stop the job.
                w.cancel.cancel();
            }
        }
        match from.recv_timeout(Duration::from_millis(100).min(w.beat)) {
            Ok(Msg::End) | Err(RecvTimeoutError::Disconnected) => end = true,
            // A runner watches one task at a time: a new one means the last ended.
            Ok(Msg::Watch(_)) => end = true,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}
