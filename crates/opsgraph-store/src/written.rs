//! The in-process signal that timeline entries were committed to a database: a backend rings
//! it after each commit that wrote some, so a reader in the same process (the server's event
//! hubs, through [`crate::Store::wait_for_timeline`]) wakes at once instead of polling. One per
//! database (a SQLite file), so that the stores of another database (tests, several servers in
//! one process) do not wake its readers. Writers in other processes are not heard here; the
//! backends have their own way for those.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// A generation counter and the threads waiting for it to move.
pub struct Written {
    generation: Mutex<Count>,
    moved: Condvar,
    /// How often a ring woke waiters (the tests' witness that a ring with none makes no call).
    #[cfg(test)]
    notified: std::sync::atomic::AtomicU64,
}

/// The generation, and how many threads wait for it to move: a ring wakes them only when there
/// are some. std's condition variable makes a `futex` call at every notify, waiters or not, and
/// the driver rings after every commit with timeline entries while usually nobody in its
/// process waits (a CLI `apply`, the benches: ~0.5 calls a job of a wide DAG, issue [N] 5).
#[derive(Default)]
struct Count {
    generation: u64,
    waiters: usize,
}

/// The signals of the databases this process has stores of, by name (a SQLite file's path).
static BELLS: Mutex<Option<HashMap<String, Weak<Written>>>> = Mutex::new(None);

/// The signal of the database `name` in this process: every store of it gets the same one
/// (a reader's connection is not the writer's).
pub fn timeline_written(name: &str) -> Arc<Written> {
    let mut bells = BELLS.lock().unwrap_or_else(|e| e.into_inner());
    let bells = bells.get_or_insert_with(HashMap::new);
    if let Some(bell) = bells.get(name).and_then(Weak::upgrade) {
        return bell;
    }
    bells.retain(|_, b| b.strong_count() > 0);
    let bell = Arc::new(Written::new());
    bells.insert(name.to_string(), Arc::downgrade(&bell));
    bell
}

impl Default for Written {
    fn default() -> Written {
        Written::new()
    }
}

impl Written {
    /// A signal of its own (a database nobody else opens: SQLite in memory).
    pub fn new() -> Written {
        Written {
            generation: Mutex::new(Count::default()),
            moved: Condvar::new(),
            #[cfg(test)]
            notified: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How often a waiting SQLite reader also looks at `data_version` (another process's commit).
    pub const SLICE: Duration = Duration::from_millis(20);

    /// Called by a backend after a commit that wrote timeline entries.
    pub fn ring(&self) {
        let mut g = self.generation.lock().unwrap_or_else(|e| e.into_inner());
        g.generation = g.generation.wrapping_add(1);
        // A waiter counted itself under this lock before it slept, or sees the new generation.
        if g.waiters > 0 {
            drop(g);
            #[cfg(test)]
            self.notified.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.moved.notify_all();
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation.lock().unwrap_or_else(|e| e.into_inner()).generation
    }

    /// Waits until the generation is no longer `seen`, at most `timeout`; returns it.
    pub fn wait(&self, seen: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        let mut g = self.generation.lock().unwrap_or_else(|e| e.into_inner());
        while g.generation == seen {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            g.waiters += 1;
            g = self.moved.wait_timeout(g, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            g.waiters -= 1;
        }
        g.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_wakes_a_waiter_and_a_quiet_wait_times_out() {
        let w = Written::new();
        assert_eq!(w.wait(0, Duration::from_millis(10)), 0, "nothing rang");
        std::thread::scope(|s| {
            let waiter = s.spawn(|| w.wait(0, Duration::from_secs(10)));
            std::thread::sleep(Duration::from_millis(20));
            w.ring();
            assert_eq!(waiter.join().unwrap(), 1);
        });
        assert_eq!(w.wait(0, Duration::from_secs(10)), 1, "already moved: no wait");
    }

    /// A ring with nobody waiting makes no `futex` call (std's notify does, waiters or not);
    /// with a waiter it wakes it, as above.
    #[test]
    fn a_ring_with_nobody_waiting_notifies_nobody() {
        let w = Written::new();
        for _ in 0..3 {
            w.ring();
        }
        assert_eq!(w.notified.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(w.generation(), 3);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| w.wait(3, Duration::from_secs(10)));
            while w.generation.lock().unwrap().waiters == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            w.ring();
            assert_eq!(waiter.join().unwrap(), 4);
        });
        assert_eq!(w.notified.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn one_database_one_signal() {
        let (a, again, b) = (timeline_written("/a.db"), timeline_written("/a.db"), timeline_written("/b.db"));
        a.ring();
        assert_eq!((again.generation(), b.generation()), (1, 0));
    }
}
