//! The turn of a group commit, one implementation for both backends (SQLite's `writer.rs`,
//! PostgreSQL's `pg_group.rs`): the connections of this process to one database take turns on
//! a mutex, and whoever takes the turn commits what queued up while the previous turn ran, with
//! its own write, in one transaction. What a queued write is and how a turn commits it is the
//! backend's; who commits, and when, is decided here.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};

/// One database's committers in this process; `P` is a backend's queued write.
pub struct GroupTurn<P> {
    turn: Mutex<()>,
    queue: Mutex<Vec<Arc<P>>>,
}

impl<P> Default for GroupTurn<P> {
    fn default() -> Self {
        GroupTurn { turn: Mutex::new(()), queue: Mutex::new(Vec::new()) }
    }
}

/// What a caller of [`GroupTurn::take`] does, holding the turn (until this is dropped).
pub enum Turn<'a, P> {
    /// The turn was free: commit your own write with `queued` (possibly none).
    First { queued: Vec<Arc<P>>, turn: MutexGuard<'a, ()> },
    /// Your write waited in the queue as `pending`. `lead` is `Some` (with `pending` among them)
    /// when no earlier holder of the turn ran it: commit them; else `pending` holds its result.
    Queued { pending: Arc<P>, lead: Option<Vec<Arc<P>>>, turn: MutexGuard<'a, ()> },
}

/// `m` locked; a poisoned lock is taken over (what it guards stays consistent: a queue, a slot).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<P> GroupTurn<P> {
    /// The turn alone, for a write that is never grouped (migrations, leases).
    pub fn turn(&self) -> MutexGuard<'_, ()> {
        lock(&self.turn)
    }

    /// Takes the turn for a write: at once when it is free, else after queuing the write made
    /// by `queue` (made only then) and waiting for the holder; `ran` says whether a turn ran it.
    pub fn take(&self, queue: impl FnOnce() -> Arc<P>, ran: impl FnOnce(&P) -> bool) -> Turn<'_, P> {
        let first = match self.turn.try_lock() {
            Ok(t) => Some(t),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        if let Some(turn) = first {
            let queued = std::mem::take(&mut *lock(&self.queue));
            return Turn::First { queued, turn };
        }
        let pending = queue();
        lock(&self.queue).push(Arc::clone(&pending));
        let turn = self.turn();
        // Nobody ran it: this caller leads, with it and whatever else waits.
        let lead = (!ran(&pending)).then(|| std::mem::take(&mut *lock(&self.queue)));
        Turn::Queued { pending, lead, turn }
    }
}

/// The one `W` of this process for `key` (a database), made when none is alive.
pub fn shared<K: Hash + Eq, W: Default>(all: &Mutex<HashMap<K, Weak<W>>>, key: K) -> Arc<W> {
    let mut all = lock(all);
    all.retain(|_, w| w.strong_count() > 0);
    if let Some(w) = all.get(&key).and_then(Weak::upgrade) {
        return w;
    }
    let w = Arc::new(W::default());
    all.insert(key, Arc::downgrade(&w));
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_turn_is_taken_at_once_without_queuing() {
        let g: GroupTurn<Mutex<bool>> = GroupTurn::default();
        let mut made = false;
        match g.take(
            || {
                made = true;
                Arc::new(Mutex::new(false))
            },
            |_| false,
        ) {
            Turn::First { queued, .. } => assert!(queued.is_empty()),
            Turn::Queued { .. } => panic!("the turn was free"),
        }
        assert!(!made, "nothing is queued when the turn is free");
    }

    #[test]
    fn a_queued_write_is_run_by_the_holder_or_led_by_its_caller() {
        let g: Arc<GroupTurn<Mutex<bool>>> = Arc::default();
        let held = g.turn();
        let g2 = Arc::clone(&g);
        let waiter = std::thread::spawn(move || match g2.take(|| Arc::new(Mutex::new(false)), |p| *lock(p)) {
            Turn::Queued { lead, .. } => lead.map(|l| l.len()),
            Turn::First { .. } => Some(usize::MAX),
        });
        // Wait until it queued, then run it as the holder would.
        while lock(&g.queue).is_empty() {
            std::thread::yield_now();
        }
        for p in std::mem::take(&mut *lock(&g.queue)) {
            *lock(&p) = true;
        }
        drop(held);
        assert_eq!(waiter.join().unwrap(), None, "run by the holder: nothing to lead");

        // Queued, and nobody ran it: its caller leads with it.
        let held = g.turn();
        let g3 = Arc::clone(&g);
        let waiter = std::thread::spawn(move || match g3.take(|| Arc::new(Mutex::new(false)), |p| *lock(p)) {
            Turn::Queued { lead, .. } => lead.map(|l| l.len()),
            Turn::First { .. } => Some(usize::MAX),
        });
        while lock(&g.queue).is_empty() {
            std::thread::yield_now();
        }
        drop(held);
        assert_eq!(waiter.join().unwrap(), Some(1));
    }

    #[test]
    fn one_shared_value_per_key_while_alive() {
        let all: Mutex<HashMap<&str, Weak<Mutex<u8>>>> = Mutex::default();
        let a = shared(&all, "db");
        assert!(Arc::ptr_eq(&a, &shared(&all, "db")));
        assert!(!Arc::ptr_eq(&a, &shared(&all, "other")));
        drop(a);
        let _b = shared(&all, "next");
        assert_eq!(lock(&all).len(), 1, "dropped ones are forgotten at the next lookup");
    }
}
