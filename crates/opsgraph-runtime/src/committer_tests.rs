//! The committer under a drive (`committer.rs`): every attempt starts only once the commit
//! holding its `running` record is durable, also when every sync is slow; a sync that fails
//! stops the drive before anything it guarded starts, and the next drive recovers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use opsgraph_core::model::*;
use opsgraph_core::pack::Pack;
use opsgraph_core::plan::{Input, Inventory, Plan};
use opsgraph_store_sqlite::{Durability, SqliteStore};

use crate::Runtime;

/// `n` jobs that each append a line to `ledger` (`/bin/sh`), chained by `after` when `chained`.
fn pack(n: usize, chained: bool, ledger: &Path) -> Pack {
    let jobs: Vec<Job> = (0..n)
        .map(|k| Job {
            id: format!("j{k}"),
            title: None,
            description: None,
            type_: JobType::Noop,
            scope: None,
            inputs: Inputs::default(),
            outputs: Outputs { provides: Provides::default(), artifacts: vec![], evidence: vec![] },
            controls: Controls::default(),
            run: Some(Run::local(vec!["/bin/sh".into(), "-c".into(), format!("echo j{k} >> {}", ledger.display())])),
            after: if k == 0 || !chained { vec![] } else { vec![format!("j{}", k - 1)] },
            cost: None,
        })
        .collect();
    Pack::one_stage("/nonexistent", "chain", "chain.thing", BTreeMap::new(), jobs)
}

fn plan(pack: &Pack) -> Plan {
    let intent = Intent { target_resource_type: "chain.thing".into(), action: "run".into(), ..Default::default() };
    opsgraph_core::plan::build(&Input {
        intent: &intent,
        packs: std::slice::from_ref(pack),
        inventory: &Inventory::new(&[]),
        providers: &[],
        policy: &CapabilityPolicy::default(),
        operations: &Default::default(),
        recorded: None,
        roles: &[],
    })
    .expect("plan")
}

fn runtime(dir: &Path, pack: &Pack) -> Runtime {
    let store = SqliteStore::open(&dir.join("opsgraph.db"), Durability::Full).unwrap();
    runtime_on(Box::new(store), dir, pack)
}

fn runtime_on(store: Box<dyn opsgraph_store::Store>, dir: &Path, pack: &Pack) -> Runtime {
    let mut rt = Runtime::new(store, vec![pack.clone()], vec![], dir.to_path_buf());
    rt.concurrency = 4;
    rt
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("opsgraph-committer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn lines(ledger: &Path) -> usize {
    std::fs::read_to_string(ledger).map_or(0, |t| t.lines().count())
}

/// A drive stopped by a failed sync: no attempt started, no process ran (the workers were told
/// before they could start anything), and the attempts it recorded are left `running`.
fn stopped_before_anything_started(rt: &Runtime, id: &str, ledger: &Path) {
    assert!(rt.committer.mark().starts.lock().unwrap().is_empty(), "no attempt started");
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(lines(ledger), 0, "no process ran for a record that was not durable");
    let recorded = rt.store().jobs(id).unwrap();
    assert!(recorded.iter().any(|j| j.state == opsgraph_store::JobState::Running), "{recorded:?}");
}

/// The next drive (a new runtime, as after a restart) recovers the attempts left `running` by
/// evidence: the operation ends, no job ran twice, none is left `running`.
fn recovers_running_nothing_twice(mut rt: Runtime, id: &str, ledger: &Path) {
    let state = rt.drive(id, &mut |_| {}).unwrap();
    assert!(matches!(state, OperationState::Completed | OperationState::Failed { .. }), "{state:?}");
    let ran = std::fs::read_to_string(ledger).unwrap_or_default();
    let mut jobs: Vec<&str> = ran.lines().collect();
    let all = jobs.len();
    jobs.sort_unstable();
    jobs.dedup();
    assert_eq!(jobs.len(), all, "no job ran twice: {ran}");
    assert!(rt.store().jobs(id).unwrap().iter().all(|j| j.state != opsgraph_store::JobState::Running));
}

/// Drives 16 independent jobs to their end, every sync taking `sync_ms`: each job ran once.
fn wide_drive_with_slow_syncs(name: &str, sync_ms: u64) -> (Runtime, PathBuf) {
    let dir = temp(name);
    let ledger = dir.join("ledger");
    let pack = pack(16, false, &ledger);
    let mut rt = runtime(&dir, &pack);
    rt.committer.fault = Some(Arc::new(move |_| {
        std::thread::sleep(std::time::Duration::from_millis(sync_ms));
        Ok(())
    }));
    let id = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed);
    assert_eq!(lines(&ledger), 16, "each job ran once");
    (rt, dir)
}

/// The failpoint delays every sync; each worker records the durable mark it saw when it started
/// its attempt: every mark covers the commit of that attempt's `running` record.
#[test]
fn every_attempt_starts_once_its_running_record_is_durable_even_when_syncs_are_slow() {
    for chained in [false, true] {
        let dir = temp(if chained { "slow-chain" } else { "slow-wide" });
        let ledger = dir.join("ledger");
        let pack = pack(12, chained, &ledger);
        let mut rt = runtime(&dir, &pack);
        assert!(rt.committer.defers(), "SQLite with full durability defers its syncs to the committer");
        rt.committer.fault = Some(Arc::new(|_| {
            std::thread::sleep(std::time::Duration::from_millis(15));
            Ok(())
        }));
        let id = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
        let state = rt.drive(&id, &mut |_| {}).unwrap();
        assert_eq!(state, OperationState::Completed);
        let starts = rt.committer.mark().starts.lock().unwrap().clone();
        assert_eq!(starts.len(), 12, "{starts:?}");
        for (instance, commit, durable) in &starts {
            assert!(durable >= commit, "{instance} started at mark {durable}, its record is in commit {commit}");
        }
        assert_eq!(lines(&ledger), 12, "each job ran once");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Rule 6: reports of attempts that waited for a sync, arriving while a sync is under way, are
/// held until it ends: no commit that starts attempts is made while one is being synced (it would
/// be durable only after the next sync anyway), and the reports that came in meanwhile share one.
#[test]
fn a_wide_drive_commits_no_starts_while_a_sync_is_under_way() {
    // Slow syncs: four jobs of a few milliseconds each end while one is under way.
    let (rt, dir) = wide_drive_with_slow_syncs("batched", 30);
    let deferred = rt.committer.mark().deferred.lock().unwrap().clone();
    assert!(!deferred.is_empty());
    // Held reports wait while a sync is under way; one may still slip in when the committer's
    // thread begins a sync between the driver's look and its commit (a loaded machine's
    // scheduling: seen in 2 of 3 runs of the crate's tests in parallel). Without the rule, 5 of 9.
    let during = deferred.iter().filter(|syncing| **syncing).count();
    assert!(during <= 2, "{during} commits made while a sync was under way: {deferred:?}");
    let starts = rt.committer.mark().starts.lock().unwrap().clone();
    let commits: std::collections::BTreeSet<u64> = starts.iter().map(|(_, commit, _)| *commit).collect();
    assert!(commits.len() < starts.len(), "one commit per start: {starts:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A worker is given an attempt only once the commit holding its `running` record is durable
/// (`workers.rs`): in a wide drive with slow syncs no worker waits on the mark for the attempt it
/// took (it would be woken twice for it: handed the attempt, then by the sync). Every one did on
/// `main`, where an attempt went to a worker with its commit.
#[test]
fn a_worker_takes_an_attempt_only_once_its_record_is_durable() {
    let (rt, dir) = wide_drive_with_slow_syncs("taken-durable", 20);
    let mark = rt.committer.mark();
    assert_eq!(mark.starts.lock().unwrap().len(), 16);
    let waited = mark.waited.load(std::sync::atomic::Ordering::Acquire);
    assert_eq!(waited, 0, "{waited} of 16 attempts were taken by a worker before their commit was durable");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The committer's sync fails: no attempt whose `running` record it was to make durable starts,
/// the drive stops with the store's `NotDurable` error, and the next drive (a new runtime, as
/// after a restart) recovers the attempts left `running` by evidence, running nothing twice.
#[test]
fn a_failed_sync_stops_the_drive_before_anything_it_guarded_starts_and_recovery_follows() {
    let dir = temp("failed");
    let ledger = dir.join("ledger");
    let pack = pack(6, false, &ledger);
    let mut rt = runtime(&dir, &pack);
    rt.committer.fault = Some(Arc::new(|_| Err("injected: the disk failed".into())));
    let id = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
    let err = rt.drive(&id, &mut |_| {}).unwrap_err();
    assert!(
        matches!(&err, crate::Error::Store(opsgraph_store::Error::NotDurable { reason }) if reason.contains("injected")),
        "{err:?}"
    );
    stopped_before_anything_started(&rt, &id, &ledger);
    drop(rt);

    recovers_running_nothing_twice(runtime(&dir, &pack), &id, &ledger);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// PostgreSQL (issue [N] 5): its deferred commits (`synchronous_commit = off`) are made durable by
/// its syncer, a connection of its own that flushes the WAL; every attempt starts only once the
/// commit holding its `running` record is flushed, also when every sync is slow.
#[test]
fn postgres_every_attempt_starts_once_its_running_record_is_flushed() {
    let Some(db) = opsgraph_store_pg::test_db("postgres_every_attempt_starts_once_its_running_record_is_flushed")
    else {
        return;
    };
    let dir = temp("pg-slow");
    let ledger = dir.join("ledger");
    let pack = pack(12, false, &ledger);
    let mut rt = runtime_on(db.store(), &dir, &pack);
    assert!(rt.committer.defers(), "PostgreSQL defers its flushes to the committer");
    let syncs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&syncs);
    rt.committer.fault = Some(Arc::new(move |_| {
        counted.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        std::thread::sleep(std::time::Duration::from_millis(15));
        Ok(())
    }));
    let id = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed);
    let starts = rt.committer.mark().starts.lock().unwrap().clone();
    assert_eq!(starts.len(), 12, "{starts:?}");
    for (instance, commit, durable) in &starts {
        assert!(durable >= commit, "{instance} started at mark {durable}, its record is in commit {commit}");
    }
    assert!(syncs.load(std::sync::atomic::Ordering::Acquire) > 0, "the committer synced");
    assert_eq!(lines(&ledger), 12, "each job ran once");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// PostgreSQL: the syncer's connection is closed by the server (as a server that restarted, and
/// may have lost commits not flushed, closes it): no attempt whose `running` record it was to
/// flush starts, the drive stops with `NotDurable`, and the next drive (a new runtime, a new
/// syncer) recovers the attempts left `running`, running nothing twice.
#[test]
fn postgres_a_syncer_cut_off_stops_the_drive_before_anything_it_guarded_starts() {
    let Some(db) =
        opsgraph_store_pg::test_db("postgres_a_syncer_cut_off_stops_the_drive_before_anything_it_guarded_starts")
    else {
        return;
    };
    let dir = temp("pg-cut");
    let ledger = dir.join("ledger");
    let pack = pack(6, false, &ledger);
    let mut rt = runtime_on(db.store(), &dir, &pack);
    assert!(rt.committer.defers(), "PostgreSQL defers its flushes to the committer");
    let id = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
    let mut admin = postgres::Client::connect(db.url(), postgres::NoTls).unwrap();
    let cut = admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
            &[&opsgraph_store_pg::SYNCER_APPLICATION],
        )
        .unwrap();
    assert_eq!(cut, 1, "the syncer's connection");
    let err = rt.drive(&id, &mut |_| {}).unwrap_err();
    assert!(matches!(&err, crate::Error::Store(opsgraph_store::Error::NotDurable { .. })), "{err:?}");
    stopped_before_anything_started(&rt, &id, &ledger);
    drop(rt);

    recovers_running_nothing_twice(runtime_on(db.store(), &dir, &pack), &id, &ledger);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A chain's driver has nothing to do while the commit that records the next job `running` is
/// synced: it syncs that commit itself (`Durable::Here`), one sync per job and none on the
/// committer's thread, so the next process starts without a hand-off to that thread and back
/// (issue [N] 5). While another attempt runs, the thread syncs: independent jobs beside a slow
/// one (`j0`, a second) are each synced there; only the first commit, when nothing ran yet, is
/// synced by the driver.
#[test]
fn a_chained_job_is_synced_once_on_the_drivers_thread_others_beside_a_running_one_on_the_committers() {
    for chained in [true, false] {
        let dir = temp(if chained { "here-chain" } else { "here-wide" });
        let ledger = dir.join("ledger");
        let mut pack = pack(12, chained, &ledger);
        if !chained {
            let slow = format!("sleep 1; echo j0 >> {}", ledger.display());
            pack.jobs.get_mut("j0").unwrap().run = Some(Run::local(vec!["/bin/sh".into(), "-c".into(), slow]));
        }
        let mut rt = runtime(&dir, &pack);
        rt.concurrency = 2;
        let syncs = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&syncs);
        rt.committer.fault = Some(Arc::new(move |covers| {
            seen.lock().unwrap().push((covers, std::thread::current().id()));
            Ok(())
        }));
        let id = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
        let driver = std::thread::current().id();
        assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed);
        assert_eq!(lines(&ledger), 12, "each job ran once");
        let syncs = syncs.lock().unwrap().clone();
        let here: Vec<u64> = syncs.iter().filter(|(_, t)| *t == driver).map(|(n, _)| *n).collect();
        if chained {
            // Each job's `running` record (with the result before it), and nothing else.
            assert_eq!((syncs.len(), here.len()), (12, 12), "{syncs:?}");
        } else {
            assert_eq!(here, [syncs[0].0], "the first commit only (nothing ran yet): {syncs:?}");
            assert!(syncs.len() >= 6, "the others on the committer's thread: {syncs:?}");
        }
        let starts = rt.committer.mark().starts.lock().unwrap().clone();
        assert_eq!(starts.len(), 12, "{starts:?}");
        assert!(starts.iter().all(|(_, commit, durable)| durable >= commit), "{starts:?}");
        drop(rt);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A chain asks the store whether another connection committed only on turns that could act on
/// a stale row without a guard: not on the turn after each job's result, whose writes are all
/// version-guarded (`Drive::row_trusted`). Twelve chained jobs: 14 data-version reads on `main`
/// (one a job, the first turn and the last), 2 now (the first turn, and the one after the
/// completion's transition), and one more for each turn of its own after a wait that saw no
/// result (a job longer than the driver's 250 ms wait, on a loaded machine).
#[test]
fn a_chain_reads_the_data_version_only_where_a_write_is_not_version_guarded() {
    let dir = temp("version-reads");
    let ledger = dir.join("ledger");
    let pack = pack(12, true, &ledger);
    let mut rt = runtime(&dir, &pack);
    let id = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed);
    assert_eq!(lines(&ledger), 12);
    assert_eq!(rt.version_reads, 2 + rt.quiet_waits, "{} quiet waits", rt.quiet_waits);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The driver removes an attempt's private directory after its result only once this runtime
/// has written a plaintext file into one: a chain whose jobs are given no secret costs no
/// `statx` a job for a directory that was never made (issue [N] 5); after one was written, every
/// result's directory is removed again.
#[test]
fn private_directories_are_removed_once_the_runtime_has_made_one() {
    let dir = temp("private-dirs");
    let ledger = dir.join("ledger");
    let pack = pack(3, true, &ledger);
    let mut rt = runtime(&dir, &pack);
    let first = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
    assert_eq!(rt.drive(&first, &mut |_| {}).unwrap(), OperationState::Completed);
    assert_eq!(rt.private_removals, 0, "no private file made: nothing to remove");
    let private = dir.join("runs").join("other").join("secrets").join("j0");
    rt.private_file(&private, "token", b"s3cret").unwrap();
    let second = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
    assert_eq!(rt.drive(&second, &mut |_| {}).unwrap(), OperationState::Completed);
    assert_eq!(rt.private_removals, 3, "one removal a result once a private file was made");
    assert_eq!(lines(&ledger), 6);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A job with nothing to run, no idempotency key and no agent: its attempt is recorded
/// `running` and its result (`nothing to run`) joins a later commit, as before, but neither its
/// environment nor a task is made for it (issue [N] 5). Two such jobs before a process job in a
/// chain: only the process job is prepared (all three were on `main`), and each job's timeline
/// is the same two entries.
#[test]
fn an_attempt_with_nothing_to_run_is_recorded_without_being_prepared() {
    let dir = temp("nothing-to-run");
    let ledger = dir.join("ledger");
    let mut pack = pack(3, true, &ledger);
    for j in ["j0", "j1"] {
        pack.jobs.get_mut(j).unwrap().run = None;
    }
    let mut rt = runtime(&dir, &pack);
    let id = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed);
    assert_eq!(std::fs::read_to_string(&ledger).unwrap(), "j2\n", "only the process job ran");
    assert_eq!(rt.prepared, 1, "the process job only");
    let jobs = rt.store().jobs(&id).unwrap();
    for j in ["j0", "j1"] {
        let r = jobs.iter().find(|r| r.id == j).unwrap();
        assert_eq!((r.state, r.attempts), (opsgraph_store::JobState::Succeeded, 1), "{r:?}");
        assert_eq!(r.outcome["outcome"], "nothing to run", "{r:?}");
    }
    let timeline = rt.store().timeline(&id).unwrap();
    let events =
        |j: &str| -> Vec<String> { timeline.iter().filter(|e| e.data["job"] == j).map(|e| e.event.clone()).collect() };
    assert_eq!(events("j0").len(), 2, "{:?}", events("j0"));
    assert_eq!((events("j0"), events("j1")), (events("j2"), events("j2")));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A person pauses the operation from another connection while a chained job runs (its
/// `running` record committed, not yet synced): the job runs to its end and its result is kept,
/// the next job does not start (the turn after the result decides on its copy of the row, and
/// the commit that would start the next job is refused by the row's version), and the drive
/// stops paused.
#[test]
fn a_pause_from_another_connection_while_a_chained_job_runs_stops_the_chain_after_it() {
    let dir = temp("paused-chain");
    let ledger = dir.join("ledger");
    let pack = pack(6, true, &ledger);
    let mut rt = runtime(&dir, &pack);
    let id = rt.create(&plan(&pack), "test", &mut |_| {}).unwrap();
    let syncs = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (other_dir, other_pack, other_id) = (dir.clone(), pack.clone(), id.clone());
    rt.committer.fault = Some(Arc::new(move |_| {
        // The third job's `running` record is made: a person pauses before it is synced.
        if syncs.fetch_add(1, std::sync::atomic::Ordering::AcqRel) == 2 {
            let mut other = runtime(&other_dir, &other_pack);
            other.pause(&other_id, "user:bob", "look first").map_err(|e| e.to_string())?;
        }
        Ok(())
    }));
    let state = rt.drive(&id, &mut |_| {}).unwrap();
    assert_eq!(state, OperationState::Paused { reason: "look first".into() });
    assert_eq!(
        std::fs::read_to_string(&ledger).unwrap(),
        "j0\nj1\nj2\n",
        "the job recorded before the pause ran, no other"
    );
    let jobs = rt.store().jobs(&id).unwrap();
    let state_of = |j: &str| jobs.iter().find(|r| r.id == j).unwrap().state;
    assert_eq!(state_of("j2"), opsgraph_store::JobState::Succeeded, "its result is kept");
    assert_eq!(state_of("j3"), opsgraph_store::JobState::Pending);
    std::fs::remove_dir_all(&dir).unwrap();
}
