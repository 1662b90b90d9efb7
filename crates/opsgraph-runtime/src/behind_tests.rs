//! The committer's thread behind under a drive (`committer.rs`, rule 7; `behind.rs`): no-op
//! jobs' commits run there, the drive ends with all of them made and durable, and one refused
//! by its version guard (a pause committed meanwhile by another connection) is undone before
//! anything decided from it is committed.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use opsgraph_core::model::OperationState;
use opsgraph_core::pack::Pack;
use opsgraph_store::{JobState, Store};
use opsgraph_store_sqlite::{Durability, SqliteStore};

use crate::committer_tests::{self, plan, runtime, temp};
use crate::Runtime;

/// `n` independent jobs with nothing to run (the in-process no-op job).
fn pack(n: usize) -> Pack {
    let mut pack = committer_tests::pack(n, false, Path::new("/nonexistent"));
    for job in pack.jobs.values_mut() {
        job.run = None;
    }
    pack
}

/// Every job record in the store agrees with the timeline: each attempt a record counts has its
/// start on the timeline, and a finished one its end; none is left `running`.
fn consistent(store: &dyn Store, id: &str) {
    let timeline = store.timeline(id).unwrap();
    let of = |job: &str, attempt: u32| {
        timeline
            .iter()
            .filter(|e| e.data.get("job").and_then(|j| j.as_str()) == Some(job))
            .filter(|e| e.data.get("attempt").and_then(|a| a.as_u64()) == Some(u64::from(attempt)))
            .map(|e| e.event.clone())
            .collect::<Vec<_>>()
    };
    for j in store.jobs(id).unwrap() {
        assert_ne!(j.state, JobState::Running, "{j:?}");
        if j.state == JobState::Succeeded {
            let events = of(&j.id, j.attempts);
            assert_eq!(events.len(), 2, "{} attempt {}: its start and its end, got {events:?}", j.id, j.attempts);
        }
    }
}

/// No-op jobs' commits run on the thread behind; the drive ends with every one of them made
/// (all jobs succeeded, the timeline whole) and durable (the mark covers every commit). While
/// the thread behind is slow to make one, no sync claims it: a sync covers only what was made
/// before it began (without that, the committer's thread, woken by the hand-over, would sync
/// at once and raise the mark over a commit not yet in the WAL).
#[test]
fn no_op_jobs_commits_run_behind_and_are_made_and_durable_when_the_drive_ends() {
    let dir = temp("behind-made");
    let pack = pack(24);
    let mut rt = runtime(&dir, &pack);
    let behind = Arc::new(AtomicUsize::new(0));
    let claimed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (counted, early, mark) = (Arc::clone(&behind), Arc::clone(&claimed), Arc::clone(rt.committer.mark()));
    rt.committer.before_behind = Some(Arc::new(move |n| {
        counted.fetch_add(1, Ordering::AcqRel);
        std::thread::sleep(std::time::Duration::from_millis(3));
        if mark.durable() >= n {
            early.lock().unwrap().push((n, mark.durable()));
        }
    }));
    let id = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed);
    assert!(behind.load(Ordering::Acquire) >= 6, "24 jobs 4 at a time: their starts went behind");
    assert_eq!(*claimed.lock().unwrap(), vec![], "commits marked durable before they were made");
    let jobs = rt.store().jobs(&id).unwrap();
    assert_eq!(jobs.len(), 24);
    assert!(jobs.iter().all(|j| j.state == JobState::Succeeded && j.attempts == 1), "{jobs:?}");
    consistent(rt.store(), &id);
    assert!(rt.committer.mark().durable() >= rt.committer.mark().made(), "every commit durable");
    drop(rt);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A pause committed by another connection just before the thread behind runs the third commit:
/// that commit's version guard refuses it. The driver had already taken its attempts' results
/// and decided from them; all of that is dropped (without it, the results of attempts never
/// recorded would be committed: jobs succeeded with no start on the timeline), the results the
/// refused commit carried are committed alone, and the drive stops paused. Resumed, it ends
/// with every job run once.
#[test]
fn a_commit_refused_behind_is_undone_before_anything_decided_from_it_is_committed() {
    let dir = temp("behind-refused");
    let pack = pack(24);
    let mut rt = runtime(&dir, &pack);
    let id = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let (counted, db, other_dir, other_pack, op) =
        (Arc::clone(&calls), dir.join("opsgraph.db"), dir.clone(), pack.clone(), id.clone());
    rt.committer.before_behind = Some(Arc::new(move |_| {
        if counted.fetch_add(1, Ordering::AcqRel) == 2 {
            let store = SqliteStore::open(&db, Durability::Full).unwrap();
            let mut other = Runtime::new(Box::new(store), vec![other_pack.clone()], vec![], other_dir.clone());
            other.pause(&op, "someone", "paused meanwhile").unwrap();
        }
    }));
    let state = rt.drive(&id, &mut |_| {}).unwrap();
    assert!(matches!(state, OperationState::Paused { .. }), "{state:?}");
    consistent(rt.store(), &id);
    let done = rt.store().jobs(&id).unwrap().iter().filter(|j| j.state == JobState::Succeeded).count();
    assert!((4..24).contains(&done), "the commits before the refused one were kept, not the rest: {done}");

    rt.resume(&id, "someone").unwrap();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed);
    consistent(rt.store(), &id);
    let jobs = rt.store().jobs(&id).unwrap();
    assert!(jobs.iter().all(|j| j.state == JobState::Succeeded && j.attempts == 1), "{jobs:?}");
    drop(rt);
    std::fs::remove_dir_all(&dir).unwrap();
}
