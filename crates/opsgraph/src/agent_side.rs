//! The side of an `opsgraph agent` runner: while a task's job runs, its output is sent as log
//! chunks (every 100 ms; with protocol 2 and later the last lines travel in the report instead)
//! and its lease is kept with heartbeats (a refused one, 409: the task was given up or
//! cancelled, stops the job). One thread per runner watches the tasks the runner runs one after
//! another (a claimed task, then the successors its reports claim): a thread started and joined
//! per task cost a start, a stack and an exit each job.
//!
//! The runner hands it each task in a shared slot and takes it back when the job ends, without
//! waking it: the side thread looks at the slot on its own tick (every 100 ms while it watches
//! something; asleep, woken only by a task handed while it had nothing to watch). Handing it each
//! task and its end over a channel, and waiting for its answer, cost three thread wake-ups a job
//! (issue [N] 2).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
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

/// The slot the runner and its side thread share.
#[derive(Default)]
struct Slot {
    /// The task watched now, and when its lease was last kept.
    watch: Option<(Arc<Watch>, Instant)>,
    /// The side thread is sending for the task it took from the slot.
    busy: bool,
    /// The side thread sleeps without a tick (nothing to watch): a task handed wakes it.
    asleep: bool,
    stop: bool,
}

struct Shared {
    slot: Mutex<Slot>,
    changed: Condvar,
    /// How often the side thread woke (tests count them).
    #[cfg(test)]
    wakes: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A runner's side thread.
pub(crate) struct Side {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// How often the side thread looks at the task it watches.
const TICK: Duration = Duration::from_millis(100);

impl Side {
    pub(crate) fn new() -> Side {
        let shared = Arc::new(Shared {
            slot: Mutex::default(),
            changed: Condvar::new(),
            #[cfg(test)]
            wakes: Default::default(),
        });
        let thread = {
            let shared = shared.clone();
            std::thread::spawn(move || side(&shared))
        };
        Side { shared, thread: Some(thread) }
    }

    /// Watches `w` until [`Side::end`].
    pub(crate) fn watch(&self, w: Watch) {
        let mut slot = self.shared.lock();
        slot.watch = Some((Arc::new(w), Instant::now()));
        if slot.asleep {
            slot.asleep = false;
            self.shared.changed.notify_all();
        }
    }

    /// The watched task's job ended: returns once nothing more is sent for it by the side
    /// thread, and what it printed was sent as log chunks when its lines do not go with the
    /// report.
    pub(crate) fn end(&self) {
        let mut slot = self.shared.lock();
        let Some((w, _)) = slot.watch.take() else { return };
        while slot.busy {
            slot = self.shared.changed.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
        drop(slot);
        if !w.lines_in_report {
            send_output(&w, true);
        }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends what `w`'s job printed as log chunks: whole lines, or everything at its `end`.
fn send_output(w: &Watch, end: bool) {
    loop {
        let text = w.stream.lock().unwrap_or_else(|e| e.into_inner()).take(end);
        if text.is_empty() {
            return;
        }
        send_log(&w.client, &w.id, &w.lease, text, &w.cancel, end);
    }
}

/// The side thread: on each tick, the watched task's whole lines sent and its lease kept when
/// due; asleep while nothing is watched; until its runner drops it.
///
/// Woken by a handed task, it ticks at least once before it sleeps again, even when that task
/// ended before it looked: sleeping at once would let every short task handed after it wake it
/// anew (a race the runner wins whenever tasks follow each other faster than the thread runs).
fn side(shared: &Shared) {
    let mut slot = shared.lock();
    let mut handed = false;
    loop {
        #[cfg(test)]
        shared.wakes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if slot.stop {
            return;
        }
        let beat = match slot.watch.as_ref() {
            Some((w, _)) => w.beat,
            None if handed => TICK,
            None => {
                slot.asleep = true;
                slot = shared.changed.wait(slot).unwrap_or_else(|e| e.into_inner());
                handed = true;
                continue;
            }
        };
        handed = false;
        (slot, _) = shared.changed.wait_timeout(slot, TICK.min(beat)).unwrap_or_else(|e| e.into_inner());
        // The task watched now (the one before may have ended meanwhile).
        let Some((w, last_beat)) = slot.watch.clone().filter(|_| !slot.stop) else { continue };
        slot.busy = true;
        drop(slot);
        send_output(&w, false);
        let beat_due = last_beat.elapsed() >= w.beat;
        if beat_due {
            if let Answer::Refused(409, ..) =
                w.client.post("/api/v1/agent/heartbeat", &json!({"task": w.id, "lease": w.lease}))
            {
                // Given up or cancelled: stop the job.
                w.cancel.cancel();
            }
        }
        slot = shared.lock();
        slot.busy = false;
        match slot.watch.as_mut() {
            Some((now, at)) if beat_due && Arc::ptr_eq(now, &w) => *at = Instant::now(),
            _ => {}
        }
        shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tasks that start and end between two ticks do not wake the side thread: 200 of them, one
    /// after another, cost it at most its first wake-up and one a tick (with a channel, each
    /// cost it two, and its runner a third).
    #[test]
    fn short_tasks_do_not_wake_the_side_thread() {
        let side = Side::new();
        let client = Client::new("http://127.0.0.1:9", "og_test");
        let started = Instant::now();
        for k in 0..200 {
            side.watch(Watch {
                client: client.clone(),
                id: format!("t{k}"),
                lease: "l".into(),
                cancel: Cancel::new(),
                stream: Arc::new(Mutex::new(LogStream::for_payload(&serde_json::Value::Null))),
                beat: Duration::from_secs(10),
                lines_in_report: true,
            });
            side.end();
        }
        let ticks = (started.elapsed().as_millis() / TICK.as_millis()) as u64;
        let wakes = side.shared.wakes.load(std::sync::atomic::Ordering::Relaxed);
        assert!(wakes <= ticks + 3, "{wakes} wake-ups for 200 tasks in {:?}", started.elapsed());
    }
}
