//! Connections lent to one caller at a time and given back when it is done ([`Idle`]): a
//! server's store connections for its requests, PostgreSQL's blob store's connections for the
//! jobs appending their logs. A caller that finds none idle opens one; at most `keep` are kept
//! idle, the rest are closed when given back. There is no upper bound on the connections lent
//! at once: callers are threads of a bounded pool already (tokio's blocking threads, a drive's
//! workers), and a wait for a connection would only move their queue here.

use std::sync::{Arc, Mutex};

/// Idle connections (or anything costly to open), kept for the next caller.
pub struct Idle<T> {
    kept: Mutex<Vec<T>>,
    keep: usize,
    /// Whether a connection given back may serve again (a PostgreSQL client whose connection
    /// broke may not).
    usable: fn(&T) -> bool,
}

/// A connection lent by an [`Idle`]: given back when dropped — not after a panic, which may
/// have left it in any state, nor when it is no longer usable.
pub struct Lent<T> {
    item: Option<T>,
    home: Arc<Idle<T>>,
}

impl<T> Idle<T> {
    /// A pool keeping at most `keep` idle connections, each given back only when `usable`.
    pub fn new(keep: usize, usable: fn(&T) -> bool) -> Arc<Idle<T>> {
        Arc::new(Idle { kept: Mutex::new(Vec::new()), keep, usable })
    }

    /// An idle connection given back before (the last given back first: the likeliest to be
    /// warm), else a new one from `open`.
    pub fn lend<E>(self: &Arc<Self>, open: impl FnOnce() -> Result<T, E>) -> Result<Lent<T>, E> {
        let idle = self.kept.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let item = match idle {
            Some(item) => item,
            None => open()?,
        };
        Ok(Lent { item: Some(item), home: Arc::clone(self) })
    }

    /// Keeps `item` idle as if it had been lent and given back (the connection a constructor
    /// opened to check the database). One no longer usable is closed, and so are the idle ones:
    /// what broke it (a database restart) likely broke them too, and each would fail the call
    /// that found it so.
    pub fn give(&self, item: T) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if !(self.usable)(&item) {
            kept.clear();
        } else if kept.len() < self.keep {
            kept.push(item);
        }
    }

    /// How many are idle now.
    pub fn idle(&self) -> usize {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl<T> std::ops::Deref for Lent<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.item.as_ref().expect("a lent connection is taken only on drop")
    }
}

impl<T> std::ops::DerefMut for Lent<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.item.as_mut().expect("a lent connection is taken only on drop")
    }
}

impl<T> Drop for Lent<T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Some(item) = self.item.take() {
            self.home.give(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(script: &[&str], expect_opened: usize, expect_idle: usize) {
        let pool = Idle::new(2, |n: &i32| *n >= 0);
        let opened = std::cell::Cell::new(0);
        let open = || -> Result<i32, ()> {
            opened.set(opened.get() + 1);
            Ok(opened.get())
        };
        let mut held = Vec::new();
        for step in script {
            match *step {
                "lend" => held.push(pool.lend(open).unwrap()),
                "back" => drop(held.remove(0)),
                "break" => *held[0] = -1,
                other => panic!("unknown step {other}"),
            }
        }
        drop(held);
        assert_eq!((opened.get(), pool.idle()), (expect_opened as i32, expect_idle), "{script:?}");
    }

    #[test]
    fn connections_are_lent_given_back_and_opened_only_when_none_is_idle() {
        // One at a time: one connection serves every caller.
        check(&["lend", "back", "lend", "back", "lend"], 1, 1);
        // Three at once: three opened, two kept idle.
        check(&["lend", "lend", "lend"], 3, 2);
        check(&["lend", "lend", "lend", "back", "lend"], 3, 2);
        // A broken one is not given back: the next caller opens a new one.
        check(&["lend", "break", "back", "lend"], 2, 1);
        // Nor are those idle beside it kept (broken by the same restart, likely).
        check(&["lend", "lend", "lend", "back", "break", "back", "lend"], 4, 2);
    }

    #[test]
    fn a_connection_lent_when_a_panic_unwinds_is_not_given_back() {
        let pool = Idle::new(4, |_: &u8| true);
        let p = Arc::clone(&pool);
        let _ = std::thread::spawn(move || {
            let _lent = p.lend(|| Ok::<u8, ()>(1)).unwrap();
            panic!("a request that panics");
        })
        .join();
        assert_eq!(pool.idle(), 0);
    }
}
