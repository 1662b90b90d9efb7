//! Following a run beside its driver. The driver runs on the calling thread and, at each commit,
//! only signals that there is something new; the follower (the CLI's live view: it reads the new
//! timeline entries back and prints them) runs on a thread of its own and looks whenever it was
//! signalled.
//! So the driver never waits for the reading or the printing, and commits made while the
//! follower was looking are read together, at its next look.

use std::sync::{Condvar, Mutex, PoisonError};

use opsgraph_runtime::Progress;

/// What the driver has told the follower since it last looked.
#[derive(Debug, Default)]
struct News {
    state: Mutex<Said>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Said {
    /// Something was committed since the follower last looked.
    committed: bool,
    /// The driver stopped.
    stopped: bool,
}

impl News {
    fn commit(&self) {
        let mut said = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // Already signalled and not yet taken: the follower looks anyway (no wake-up to pay).
        if !said.committed {
            said.committed = true;
            self.changed.notify_one();
        }
    }

    fn stop(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).stopped = true;
        self.changed.notify_one();
    }

    /// Waits for news: true when there were commits to look at, false once the driver stopped.
    fn wait(&self) -> bool {
        let mut said = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if said.stopped {
                return false;
            }
            if said.committed {
                said.committed = false;
                return true;
            }
            said = self.changed.wait(said).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Tells the follower the driver stopped, however it stopped (a panic included).
struct Stopped<'a>(&'a News);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Runs `drive` on this thread, handing it the progress callback that signals each commit, and
/// meanwhile calls `look` on a thread of its own after each signal (commits made during a look
/// are looked at once, by the next). Returns what `drive` returned, once it returned and the last
/// look ended: what the drive committed after that look is the caller's to read (its last
/// entries). A panic of either is carried on here.
///
/// The drive stays on the calling thread because that thread built and created the operation:
/// glibc's allocator gives every other thread an arena of its own, and memory one thread freed
/// is reused only by allocations made in that thread's arena. A drive on a second thread kept
/// the creation's freed heap (~21 MB for 10,000 jobs) resident beside its own (issue [N] 1).
pub fn beside<R>(drive: impl FnOnce(Progress<'_>) -> R, mut look: impl FnMut() + Send) -> anyhow::Result<R> {
    let news = News::default();
    std::thread::scope(|s| {
        let follower = std::thread::Builder::new().name("opsgraph-follow".into()).spawn_scoped(s, || {
            while news.wait() {
                look();
            }
        })?;
        let driven = {
            let _stopped = Stopped(&news);
            drive(&mut |_| news.commit())
        };
        match follower.join() {
            Ok(()) => Ok(driven),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use opsgraph_store::TimelineEntry;

    use super::beside;

    /// Waits until `done` says so, at most 10 s (the test's assertions then say what was missed).
    fn within_10s(mut done: impl FnMut() -> bool) {
        let t = std::time::Instant::now();
        while !done() && t.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    fn entry(k: usize) -> TimelineEntry {
        TimelineEntry {
            seq: k as i64,
            operation: "op".into(),
            at: String::new(),
            actor: String::new(),
            event: format!("e{k}"),
            from: None,
            to: None,
            reason: String::new(),
            data: serde_json::Value::Null,
        }
    }

    /// Whatever the follower's pace, the driver's commits are looked at in order, at most one
    /// look per commit, and a look after a commit sees it: with the caller's read after the
    /// driver stopped, nothing is missed.
    #[test]
    fn looks_follow_commits_and_the_last_read_sees_the_rest() {
        for (commits, look_ms) in [(0, 0), (1, 0), (50, 0), (50, 1), (5, 20)] {
            let committed = AtomicUsize::new(0);
            let mut looked = Vec::new();
            let got = beside(
                |progress| {
                    for k in 0..commits {
                        committed.store(k + 1, Ordering::SeqCst);
                        progress(&entry(k));
                    }
                    "stopped"
                },
                || {
                    looked.push(committed.load(Ordering::SeqCst));
                    std::thread::sleep(std::time::Duration::from_millis(look_ms));
                },
            )
            .unwrap();
            assert_eq!(got, "stopped");
            assert!(looked.len() <= commits, "{commits} commits, looks {looked:?}");
            assert!(looked.windows(2).all(|w| w[0] <= w[1]), "{looked:?}");
            assert!(looked.iter().all(|n| *n >= 1), "a look before any commit: {looked:?}");
            assert_eq!(committed.load(Ordering::SeqCst), commits);
        }
    }

    /// A commit is looked at while the driver goes on: a slow driver's first commit is seen
    /// before its second (the live view's `started` line does not wait for the next commit).
    #[test]
    fn a_commit_is_looked_at_before_the_next() {
        let (committed, looks) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let mut looked = Vec::new();
        beside(
            |progress| {
                for k in 0..3 {
                    committed.store(k + 1, Ordering::SeqCst);
                    progress(&entry(k));
                    // The next commit comes only once this one was looked at (or after 10 s).
                    within_10s(|| looks.load(Ordering::SeqCst) > k);
                }
            },
            || {
                looked.push(committed.load(Ordering::SeqCst));
                looks.fetch_add(1, Ordering::SeqCst);
            },
        )
        .unwrap();
        assert_eq!(looked, [1, 2, 3]);
    }

    /// A driver that panics stops the follower and its panic reaches the caller.
    #[test]
    fn a_panic_of_the_driver_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| {
            beside(
                |progress| {
                    progress(&entry(0));
                    panic!("driver broke");
                },
                || {},
            )
        });
        let panic = caught.expect_err("the panic is carried on");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"driver broke"));
    }

    /// A follower that panics does not stop the drive (it is the run's, not the view's): the
    /// drive goes on to its end, then the follower's panic reaches the caller.
    #[test]
    fn a_panic_of_the_follower_reaches_the_caller_after_the_drive() {
        let (committed, looks) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let caught = std::panic::catch_unwind(|| {
            beside(
                |progress| {
                    for k in 0..20 {
                        committed.store(k + 1, Ordering::SeqCst);
                        progress(&entry(k));
                        // The first commit is looked at before the next (or 10 s passed): a
                        // driver that stops first leaves the follower nothing to look at.
                        within_10s(|| k > 0 || looks.load(Ordering::SeqCst) > 0);
                    }
                },
                || {
                    looks.fetch_add(1, Ordering::SeqCst);
                    panic!("view broke")
                },
            )
        });
        let panic = caught.expect_err("the panic is carried on");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"view broke"));
        assert_eq!(committed.load(Ordering::SeqCst), 20);
    }

    /// The drive runs on the calling thread (the one that created the operation), the looks on
    /// another.
    #[test]
    fn the_drive_runs_on_the_calling_thread() {
        let caller = std::thread::current().id();
        let looked_on = std::sync::Mutex::new(None);
        let driven_on = beside(
            |progress| {
                progress(&entry(0));
                // Its commit looked at (or 10 s passed) before the driver stops.
                within_10s(|| looked_on.lock().unwrap().is_some());
                std::thread::current().id()
            },
            || *looked_on.lock().unwrap() = Some(std::thread::current().id()),
        )
        .unwrap();
        assert_eq!(driven_on, caller);
        let looked_on = looked_on.into_inner().unwrap().expect("the commit was looked at");
        assert_ne!(looked_on, caller);
    }
}
