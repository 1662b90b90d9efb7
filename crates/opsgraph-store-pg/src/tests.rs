use crate::PgStore;

/// The schema version a fresh store migrates to: one per migration.
fn latest() -> i64 {
    crate::schema::MIGRATIONS.len() as i64
}

#[test]
fn postgres_schema_is_versioned_and_a_newer_one_refused() {
    let Some(db) = crate::test_db("postgres_schema_is_versioned_and_a_newer_one_refused") else { return };
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), latest());
    drop(store);
    // Connecting again migrates nothing.
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), latest());
    drop(store);
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    admin.batch_execute("UPDATE schema_version SET version = 99").unwrap();
    let err = PgStore::connect(db.url()).err().unwrap();
    assert_eq!(
        err.to_string(),
        format!("the store's schema version 99 is newer than this binary's {}; upgrade opsgraph", latest())
    );
    let err = PgStore::connect("postgres://postgres:hunter2@127.0.0.1:1/nowhere").err().unwrap();
    assert!(
        err.to_string().starts_with("failed to connect to PostgreSQL at postgres://postgres:***@127.0.0.1:1/nowhere: "),
        "{err}"
    );
}

/// Makes the empty database `admin` is connected to as the first `version` migrations did.
fn migrated_to(admin: &mut ::postgres::Client, version: usize) {
    admin
        .batch_execute(&format!(
            "CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES ({version})"
        ))
        .unwrap();
    for sql in &crate::schema::MIGRATIONS[..version] {
        admin.batch_execute(sql).unwrap();
    }
}

/// A database made by the first `version` migrations and holding `rows` is connected to
/// (migrated to the latest) and `check`ed.
fn check_migration(test: &str, version: usize, rows: &str, check: fn(&dyn opsgraph_store::Store)) {
    let Some(db) = crate::test_db(test) else { return };
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    migrated_to(&mut admin, version);
    admin.batch_execute(rows).unwrap();
    let store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), latest());
    check(&store);
}

/// Migration 10: the jobs table has its primary key and no other index, in a database made
/// after it and in one made by the first 9 migrations with a job in it (which reads as before).
#[test]
fn postgres_jobs_have_no_index_on_their_state() {
    use opsgraph_store::Store;
    for (test, version) in [("postgres_jobs_have_no_index_on_their_state", None), ("... from 9", Some(9))] {
        let Some(db) = crate::test_db(test) else { return };
        let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
        if let Some(version) = version {
            migrated_to(&mut admin, version);
            admin
                .batch_execute(
                    "INSERT INTO jobs (operation, id, state, attempts, outcome, updated_at)
                     VALUES ('op-1', 'a', 'running', 1, 'null', 't0')",
                )
                .unwrap();
        }
        let store = PgStore::connect(db.url()).unwrap();
        assert_eq!(store.schema_version().unwrap(), latest());
        let rows = admin.query("SELECT indexname FROM pg_indexes WHERE tablename = 'jobs' ORDER BY 1", &[]).unwrap();
        let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        assert_eq!(names, ["jobs_pkey"], "{test}");
        let jobs: Vec<(String, u32)> = store.jobs("op-1").unwrap().into_iter().map(|j| (j.id, j.attempts)).collect();
        let want: Vec<(String, u32)> = version.map(|_| ("a".to_string(), 1)).into_iter().collect();
        assert_eq!(jobs, want, "{test}");
    }
}

/// Migration 4 gives gates made before it their kind (`testing::assert_gates_got_their_kinds`).
#[test]
fn postgres_gates_made_before_kinds_existed_get_theirs() {
    use opsgraph_store::testing::{assert_gates_got_their_kinds, GATES_BEFORE_KINDS};
    check_migration(
        "postgres_gates_made_before_kinds_existed_get_theirs",
        3,
        GATES_BEFORE_KINDS,
        assert_gates_got_their_kinds,
    );
}

/// Migration 6 gives operations made before it their `intent_id` and `plan_id`
/// (`testing::assert_operations_got_their_ids`).
#[test]
fn postgres_operations_made_before_ids_existed_get_theirs() {
    use opsgraph_store::testing::{assert_operations_got_their_ids, OPERATIONS_BEFORE_IDS};
    check_migration(
        "postgres_operations_made_before_ids_existed_get_theirs",
        5,
        OPERATIONS_BEFORE_IDS,
        assert_operations_got_their_ids,
    );
}

/// A turn's commits in one transaction: when one is refused (a stale version, a fence that does
/// not hold), each runs again alone, in order; the refused ones get their own error, the others
/// hold.
#[test]
fn postgres_grouped_commits_fail_alone() {
    use opsgraph_core::model::OperationState;
    use opsgraph_store::{Store, TimelineEntry, Write};
    let Some(db) = crate::test_db("postgres_grouped_commits_fail_alone") else { return };
    let mut store = PgStore::connect(db.url()).unwrap();
    let note = |op: &str, event: &str| TimelineEntry {
        seq: 0,
        operation: op.into(),
        at: "2026-01-01T00:00:00Z".into(),
        actor: "test".into(),
        event: event.into(),
        from: None,
        to: None,
        reason: String::new(),
        data: serde_json::json!({}),
    };
    let create =
        |id: &str| Write::CreateOperation { op: opsgraph_store::testing::operation(id, None), plan: "{}".into() };
    store.commit(&[create("op-1"), create("op-2")]).unwrap();
    let lease = store.acquire_lease("op-2", "me", 60_000).unwrap();
    let transition = |version: i64, event: &str| Write::Transition {
        operation: "op-1".into(),
        expect_version: version,
        state: OperationState::Running,
        entry: note("op-1", event),
    };
    let stale = crate::pg_group::Pending::new(vec![transition(0, "stale")]);
    let fenced = crate::pg_group::Pending::new(vec![
        Write::Fence { operation: "op-2".into(), holder: "me".into(), token: lease.token + 1 },
        Write::Timeline(note("op-2", "fenced")),
    ]);
    let held = crate::pg_group::Pending::new(vec![lease.fence(), Write::Timeline(note("op-2", "held"))]);
    let mine = [transition(0, "first")];
    let out = store.commit_group(Some(&mine), vec![stale.clone(), fenced.clone(), held.clone()]);
    assert!(out.unwrap().is_ok());
    let err = stale.take().unwrap().unwrap_err().to_string();
    assert!(err.contains("op-1"), "{err}");
    let err = fenced.take().unwrap().unwrap_err().to_string();
    assert!(err.contains("me") && err.contains("op-2"), "{err}");
    assert!(held.take().unwrap().is_ok());
    let events = |op: &str| store.timeline(op).unwrap().into_iter().map(|e| (e.seq, e.event)).collect::<Vec<_>>();
    assert_eq!(events("op-1"), vec![(1, "first".to_string())]);
    assert_eq!(events("op-2"), vec![(2, "held".to_string())]);
    assert_eq!(store.operation("op-1").unwrap().unwrap().version, 1);
}

/// Text that reaches the server as escaped literals (commits sent in one message, `pg_one.rs`)
/// comes back byte for byte, whatever it holds: quotes, backslashes, dollar quotes, statement
/// ends, comments, non-ASCII, and what an array literal's syntax reads (double quotes, braces,
/// commas, `NULL`, white space around an element), beside a `NULL` element (`from` unset).
/// (A NUL PostgreSQL's text cannot hold at all, bound or not.)
#[test]
fn postgres_text_in_one_message_is_stored_as_given() {
    use opsgraph_store::{Store, TimelineEntry, Write};
    let Some(db) = crate::test_db("postgres_text_in_one_message_is_stored_as_given") else { return };
    let mut store = PgStore::connect(db.url()).unwrap();
    let create = Write::CreateOperation { op: opsgraph_store::testing::operation("op-1", None), plan: "{}".into() };
    store.commit(&[create]).unwrap();
    let lease = store.acquire_lease("op-1", "me", 60_000).unwrap();
    let texts = [
        "it's",
        r"back\slash \' \\' E'\x41'",
        "$$ dollar $$ $tag$ x $tag$",
        "'); DROP TABLE timeline; --",
        "/* comment */ -- line",
        "ünïcødé ✓ 𝄞",
        "line\nbreak\ttab\r",
        "",
        r#""quoted" {braces}, commas"#,
        "NULL",
        "  spaced  ",
        r#"\"back\"slash\\"#,
        "{\"a\",NULL}",
    ];
    let entry = |reason: &str| TimelineEntry {
        seq: 0,
        operation: "op-1".into(),
        at: "2026-01-01T00:00:00Z".into(),
        actor: "o'brien\\".into(),
        event: "note".into(),
        from: (reason.len() % 2 == 0).then(|| reason.to_string()),
        to: None,
        reason: reason.into(),
        data: serde_json::json!({"text": reason, "quote": "'\"\\"}),
    };
    // A job record per text: its id and outcome are array elements too, its attempts a number.
    let job = |id: &str| opsgraph_store::JobRecord {
        operation: "op-1".into(),
        id: id.into(),
        state: opsgraph_store::JobState::Succeeded,
        attempts: id.len() as u32,
        outcome: serde_json::json!({ "reason": id }),
        updated_at: "2026-01-01T00:00:00Z".into(),
    };
    // Each in a turn of its own and all in one turn (the one-message path groups them).
    for t in &texts {
        store.commit(&[lease.fence(), Write::Timeline(entry(t)), Write::Job(job(t))]).unwrap();
    }
    let queued: Vec<_> =
        texts.iter().map(|t| crate::pg_group::Pending::new(vec![lease.fence(), Write::Timeline(entry(t))])).collect();
    assert!(store.commit_group(None, queued.clone()).is_none());
    for p in &queued {
        p.take().unwrap().unwrap();
    }
    type Stored = (String, String, serde_json::Value, Option<String>);
    let stored: Vec<Stored> =
        store.timeline("op-1").unwrap().into_iter().map(|e| (e.reason, e.actor, e.data, e.from)).collect();
    let want: Vec<Stored> = texts
        .iter()
        .chain(texts.iter())
        .map(|t| (t.to_string(), "o'brien\\".to_string(), entry(t).data, entry(t).from))
        .collect();
    assert_eq!(stored, want);
    let jobs = store.jobs("op-1").unwrap();
    assert_eq!(jobs, texts.iter().map(|t| job(t)).collect::<Vec<_>>());
    assert!(store.operation("op-1").unwrap().is_some(), "the table is still there");
}

/// `Store::commit_deferred` on PostgreSQL (issue [N] 5): without a syncer handed out it commits
/// durably; with one, the commit is made and visible at once (another connection reads it), and
/// once a sync begun after it returned, the server's WAL is flushed past everything written
/// before the sync began. A syncer whose connection was closed (as a restarted server closes it)
/// fails, and stays failed, instead of vouching for commits a new server may not have; the next
/// `syncer()` is a new one.
#[test]
fn postgres_a_deferred_commit_is_visible_at_once_and_flushed_by_the_syncer() {
    use opsgraph_store::{Store, TimelineEntry, Write};
    let Some(db) = crate::test_db("postgres_a_deferred_commit_is_visible_at_once_and_flushed_by_the_syncer") else {
        return;
    };
    let mut store = PgStore::connect(db.url()).unwrap();
    let reader = PgStore::connect(db.url()).unwrap();
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    let lsn = |admin: &mut ::postgres::Client, f: &str| -> i64 {
        admin.query_one(&format!("SELECT ({f}() - '0/0'::pg_lsn)::bigint"), &[]).unwrap().get(0)
    };
    let create =
        |id: &str| Write::CreateOperation { op: opsgraph_store::testing::operation(id, None), plan: "{}".into() };
    store.commit_deferred(&[create("op-durable")]).unwrap();
    assert!(store.syncer.get().is_none(), "no syncer yet: the commit was made durable at once");

    let syncer = store.syncer().expect("a syncer");
    let syncers = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()";
    let count = |admin: &mut ::postgres::Client| -> i64 {
        admin.query_one(syncers, &[&crate::SYNCER_APPLICATION]).unwrap().get(0)
    };
    assert_eq!(count(&mut admin), 1, "the syncer has a connection of its own");
    store.commit_deferred(&[create("op-1")]).unwrap();
    assert!(reader.operation("op-1").unwrap().is_some(), "made and visible when it returns");
    // Refused as a durable commit would be, writing nothing.
    let stale = Write::Transition {
        operation: "op-1".into(),
        expect_version: 7,
        state: opsgraph_core::model::OperationState::Running,
        entry: TimelineEntry {
            seq: 0,
            operation: "op-1".into(),
            at: "2026-01-01T00:00:00Z".into(),
            actor: "test".into(),
            event: "stale".into(),
            from: None,
            to: None,
            reason: String::new(),
            data: serde_json::json!({}),
        },
    };
    let err = store.commit_deferred(&[stale]).unwrap_err();
    assert!(matches!(err, opsgraph_store::Error::Conflict { .. }), "{err:?}");
    assert!(reader.timeline("op-1").unwrap().is_empty());
    let written = lsn(&mut admin, "pg_current_wal_insert_lsn");
    syncer.sync().unwrap();
    assert!(lsn(&mut admin, "pg_current_wal_flush_lsn") >= written, "the sync flushed the WAL past the commit");
    assert_eq!(
        crate::pg_sync::syncer_of(db.url()).map(|s| std::sync::Arc::as_ptr(&s) as *const ()),
        Some(std::sync::Arc::as_ptr(&syncer) as *const ()),
        "one syncer per database in this process"
    );

    // Its connection closed by the server: the sync fails, and so does every later one.
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
            &[&crate::SYNCER_APPLICATION],
        )
        .unwrap();
    store.commit_deferred(&[create("op-2")]).unwrap();
    let err = syncer.sync().unwrap_err();
    assert!(matches!(err, opsgraph_store::Error::NotDurable { .. }), "{err:?}");
    assert!(matches!(syncer.sync(), Err(opsgraph_store::Error::NotDurable { .. })), "never connected again");
    let again = store.syncer().expect("a new syncer");
    again.sync().unwrap();
}

/// A running attempt's live output shared through PostgreSQL (`pg_blob.rs`): pieces read back
/// from an offset on as one run of bytes, a piece shared again keeps the longer, what lies more
/// than `keep` behind the end is forgotten, and the final log removes them all (and those of the
/// job's earlier attempts), and refuses any shared after it.
#[test]
fn postgres_live_pieces_are_read_back_kept_bounded_and_replaced_by_the_final_log() {
    use opsgraph_store::{BlobStore, LogKey};
    let Some(db) = crate::test_db("postgres_live_pieces_are_read_back_kept_bounded_and_replaced_by_the_final_log")
    else {
        return;
    };
    let blobs = crate::PgBlobStore::connect(db.url()).unwrap();
    assert!(blobs.shares_live_logs());
    let key = LogKey::new("op-1", "speak", 1);
    let other = LogKey::new("op-1", "speak", 2);
    let live = |after| {
        blobs.live(&key, after).unwrap().map(|(from, bytes)| format!("{from}:{}", String::from_utf8(bytes).unwrap()))
    };
    assert_eq!(live(0), None);
    blobs.put_live(&key, 0, b"abc", 100).unwrap();
    blobs.put_live(&key, 3, b"de", 100).unwrap();
    // Shared again after an error it did not see, with what came since: the longer is kept.
    blobs.put_live(&key, 3, b"d", 100).unwrap();
    blobs.put_live(&key, 3, b"defg", 100).unwrap();
    blobs.put_live(&other, 0, b"zz", 100).unwrap();
    assert_eq!(live(0).as_deref(), Some("0:abcdefg"));
    assert_eq!(live(3).as_deref(), Some("3:defg"), "pieces wholly before `after` are not read");
    assert_eq!(live(7), None);
    // Past `keep`: the pieces wholly more than 5 bytes behind the end go.
    blobs.put_live(&key, 7, b"hij", 5).unwrap();
    assert_eq!(live(0).as_deref(), Some("3:defghij"));
    blobs.append_log(&key, b"abcdefghij").unwrap();
    assert_eq!(live(0), None, "the final log replaces the live pieces");
    assert_eq!(blobs.log(&key).unwrap().as_deref(), Some(&b"abcdefghij"[..]));
    assert!(blobs.live(&other, 0).unwrap().is_some(), "a later attempt's pieces stay");
    // A share that was on its way when the attempt ended is not kept.
    blobs.put_live(&key, 10, b"k", 100).unwrap();
    assert_eq!(live(0), None, "a piece stored after the final log");
    // A driver died while attempt 2 ran: attempt 3's final log removes what attempt 2 left.
    blobs.append_log(&LogKey::new("op-1", "speak", 3), b"done").unwrap();
    assert_eq!(blobs.live(&other, 0).unwrap(), None, "an earlier attempt's pieces stay");
    let bad = blobs.put_live(&LogKey::new("../x", "speak", 1), 0, b"a", 5).unwrap_err();
    assert!(bad.to_string().contains("not a plain name"), "{bad}");
}

/// Agent tasks written by other processes reach a listener (`Store::wait_for_agent_tasks`,
/// migration 9): each task once with whether it is queued now, in order; this process's own
/// writes are left out (its bell rang for them already).
#[test]
fn postgres_agent_tasks_other_processes_write_are_notified_and_this_ones_are_not() {
    use opsgraph_store::Store;
    use std::time::Duration;
    let Some(db) = crate::test_db("postgres_agent_tasks_other_processes_write_are_notified_and_this_ones_are_not")
    else {
        return;
    };
    let mut listener = PgStore::connect(db.url()).unwrap();
    assert_eq!(listener.wait_for_agent_tasks(Duration::ZERO).unwrap(), Some(vec![]), "the first call listens");
    let insert = |id: &str| {
        format!(
            "INSERT INTO agent_tasks (id, operation, job, attempt, kind, agent, resource, state, payload, claims,
                                      expires_ms, created_at, updated_at)
             VALUES ('{id}', 'op', 'j', 1, 'run', 'pool', 'r', 'queued', '{{}}', 0, 0, 'now', 'now')"
        )
    };
    // Another process: a connection that is not one of this process's stores.
    let mut other = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    other.batch_execute(&insert("t1")).unwrap();
    other.batch_execute("UPDATE agent_tasks SET state = 'claimed' WHERE id = 't1'").unwrap();
    other.batch_execute(&insert("t2")).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let got = listener.wait_for_agent_tasks(Duration::from_secs(5)).unwrap().unwrap();
        assert!(!got.is_empty(), "nothing notified; seen {seen:?}");
        for (id, queued) in got {
            match seen.iter_mut().find(|(s, _): &&mut (String, bool)| *s == id) {
                Some(known) => known.1 = queued,
                None => seen.push((id, queued)),
            }
        }
    }
    assert_eq!(seen, [("t1".to_string(), false), ("t2".to_string(), true)]);
    // This process's own writes (its store connections' backends): nothing.
    let own = PgStore::connect(db.url()).unwrap();
    own.client.borrow_mut().batch_execute(&insert("t3")).unwrap();
    assert_eq!(listener.wait_for_agent_tasks(Duration::from_millis(300)).unwrap(), Some(vec![]));
}

/// A timeline note of `op` for the tests below.
fn note(op: &str, event: &str) -> opsgraph_store::TimelineEntry {
    opsgraph_store::TimelineEntry {
        seq: 0,
        operation: op.into(),
        at: "2026-01-01T00:00:00Z".into(),
        actor: "test".into(),
        event: event.into(),
        from: (event.len() % 2 == 0).then(|| "running".to_string()),
        to: None,
        reason: format!("{event} of {op}"),
        data: serde_json::json!({ "event": event }),
    }
}

/// Migration 11: a commit's timeline entries of one operation are one row (a run), in a turn's
/// one message and in a transaction of their own; entries of several operations are a run per
/// stretch of one operation. Read back, they are the entries in seq order, whole (`timeline`) and
/// page by page from every seq (`timeline_after`, with and without an operation).
#[test]
fn postgres_a_commits_entries_of_one_operation_are_one_row() {
    use opsgraph_store::{Store, TimelineEntry, Write};
    let Some(db) = crate::test_db("postgres_a_commits_entries_of_one_operation_are_one_row") else { return };
    let mut store = PgStore::connect(db.url()).unwrap();
    let create =
        |id: &str| Write::CreateOperation { op: opsgraph_store::testing::operation(id, None), plan: "{}".into() };
    store.commit(&[create("op-1"), create("op-2")]).unwrap();
    let lease = store.acquire_lease("op-1", "me", 60_000).unwrap();
    // A driven commit's shape: the fence, then 16 entries, in a turn of one message.
    let driven: Vec<Write> = std::iter::once(lease.fence())
        .chain((0..16).map(|k| Write::Timeline(note("op-1", &format!("e{k}")))))
        .collect();
    let turn = crate::pg_group::Pending::new(driven);
    assert!(store.commit_group(None, vec![turn.clone()]).is_none());
    turn.take().unwrap().unwrap();
    // Entries of two operations in one transaction: op-1, op-1, op-2, op-1.
    let mixed = [("op-1", "m0"), ("op-1", "m1"), ("op-2", "m2"), ("op-1", "m3")];
    store.commit(&mixed.map(|(op, event)| Write::Timeline(note(op, event)))).unwrap();
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    let runs: Vec<(i64, i64, String)> = admin
        .query("SELECT first_seq, last_seq, operation FROM timeline_runs ORDER BY last_seq", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let want = [(1, 16, "op-1"), (17, 18, "op-1"), (19, 19, "op-2"), (20, 20, "op-1")];
    assert_eq!(runs, want.map(|(f, l, o)| (f, l, o.to_string())));
    let all: Vec<TimelineEntry> = (0..16)
        .map(|k| ("op-1", format!("e{k}")))
        .chain(mixed.iter().map(|(op, event)| (*op, event.to_string())))
        .enumerate()
        .map(|(k, (op, event))| TimelineEntry { seq: k as i64 + 1, ..note(op, &event) })
        .collect();
    let of = |op: &str| all.iter().filter(|e| e.operation == op).cloned().collect::<Vec<_>>();
    assert_eq!(store.timeline("op-1").unwrap(), of("op-1"));
    assert_eq!(store.timeline("op-2").unwrap(), of("op-2"));
    for after in 0..=21 {
        for limit in [1, 2, 3, 17, 100] {
            let page = |entries: Vec<TimelineEntry>| -> Vec<TimelineEntry> {
                entries.into_iter().filter(|e| e.seq > after).take(limit).collect()
            };
            assert_eq!(store.timeline_after(None, after, limit).unwrap(), page(all.clone()), "{after} {limit}");
            for op in ["op-1", "op-2"] {
                let got = store.timeline_after(Some(op), after, limit).unwrap();
                assert_eq!(got, page(of(op)), "{op} {after} {limit}");
            }
        }
    }
}

/// Migration 11 on a database made by the first 10 with timeline rows in it: each row becomes a
/// run of one entry and reads as before, the seqs go on from the counter, and the trigger that
/// notifies waiters moved to the runs.
#[test]
fn postgres_timeline_rows_made_before_runs_read_as_before() {
    use opsgraph_store::{Store, TimelineEntry, Write};
    let Some(db) = crate::test_db("postgres_timeline_rows_made_before_runs_read_as_before") else { return };
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    migrated_to(&mut admin, 10);
    admin
        .batch_execute(
            "INSERT INTO timeline (seq, operation, at, actor, event, from_state, to_state, reason, data)
             VALUES (1, 'op-1', 't1', 'a', 'created', NULL, 'draft', 'r1', '{}'),
                    (2, 'op-2', 't2', 'b', 'note', 'x', NULL, 'r2', '{\"k\": 1}'),
                    (3, 'op-1', 't3', 'c', 'note', NULL, NULL, '', 'null');
             UPDATE counters SET value = 3 WHERE name = 'timeline';",
        )
        .unwrap();
    let mut store = PgStore::connect(db.url()).unwrap();
    assert_eq!(store.schema_version().unwrap(), latest());
    let old = |seq: i64, op: &str, event: &str, from: Option<&str>, to: Option<&str>, data| TimelineEntry {
        seq,
        operation: op.into(),
        at: format!("t{seq}"),
        actor: ["a", "b", "c"][seq as usize - 1].into(),
        event: event.into(),
        from: from.map(str::to_string),
        to: to.map(str::to_string),
        reason: if seq == 3 { String::new() } else { format!("r{seq}") },
        data,
    };
    let before = vec![
        old(1, "op-1", "created", None, Some("draft"), serde_json::json!({})),
        old(2, "op-2", "note", Some("x"), None, serde_json::json!({"k": 1})),
        old(3, "op-1", "note", None, None, serde_json::Value::Null),
    ];
    assert_eq!(store.timeline_after(None, 0, 10).unwrap(), before);
    store.commit(&[Write::Timeline(note("op-1", "later"))]).unwrap();
    let op1: Vec<(i64, String)> = store.timeline("op-1").unwrap().into_iter().map(|e| (e.seq, e.event)).collect();
    assert_eq!(op1, [(1, "created".to_string()), (3, "note".into()), (4, "later".into())]);
    let triggers: Vec<String> = admin
        .query(
            "SELECT tgname::text FROM pg_trigger WHERE tgrelid = 'timeline_runs'::regclass AND NOT tgisinternal",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(triggers, ["timeline_written"]);
}
