//! The blob stores' conformance suite: artifact contents and job logs behave alike on the
//! filesystem (next to a SQLite database) and in PostgreSQL; plus the filesystem's own layout,
//! which data written before the `BlobStore` trait must keep being read in.

use opsgraph_store::blob::{blob_location, check_location, Layered};
use opsgraph_store::testing::TestDb;
use opsgraph_store::{BlobStore, Error, FsBlobStore, LogKey};

/// A location by what it is: `bytes` stored, or a refusal's text.
fn check_get(blobs: &dyn BlobStore, location: &str, expect: Result<Option<&[u8]>, &str>) {
    let got = blobs.get(location).map_err(|e| e.to_string());
    let expect = expect.map(|b| b.map(<[u8]>::to_vec)).map_err(str::to_string);
    assert_eq!(got, expect, "{location}");
}

fn artifacts_are_stored_once_by_content_and_read_back(db: &TestDb) {
    let blobs = db.blobs();
    let (location, size) = blobs.put(b"port=8080\n").unwrap();
    assert_eq!((location.as_str(), size), (blob_location(b"port=8080\n").as_str(), 10));
    assert!(location.starts_with("blobs/") && location.len() == "blobs/".len() + 2 + 1 + 62, "{location}");
    // The same bytes again: the same location, nothing new.
    assert_eq!(blobs.put(b"port=8080\n").unwrap(), (location.clone(), 10));
    let (empty, zero) = blobs.put(b"").unwrap();
    assert_eq!(zero, 0);
    check_get(&*blobs, &location, Ok(Some(b"port=8080\n")));
    check_get(&*blobs, &empty, Ok(Some(b"")));
    check_get(&*blobs, &blob_location(b"never stored"), Ok(None));
    for bad in ["../opsgraph.db", "blobs/ab/../../master.key", "blobs/AB/cdef", "/etc/passwd", ""] {
        check_get(&*blobs, bad, Err(&format!("location `{bad}` is refused: not a blob location")));
    }
    // Another connection sees it.
    check_get(&*db.blobs(), &location, Ok(Some(b"port=8080\n")));
    // Removed (a re-sealed secret's old blob): gone, and removing it again is nothing.
    blobs.remove(&location).unwrap();
    check_get(&*blobs, &location, Ok(None));
    blobs.remove(&location).unwrap();
    assert!(matches!(blobs.remove("../opsgraph.db"), Err(Error::BadBlob { .. })));
}

fn logs_are_appended_per_attempt(db: &TestDb) {
    let blobs = db.blobs();
    let first = LogKey::new("op-1", "install@w1", 1);
    assert_eq!(blobs.log(&first).unwrap(), None);
    blobs.append_log(&first, b"starting\n").unwrap();
    blobs.append_log(&first, b"done\n").unwrap();
    blobs.append_log(&LogKey::new("op-1", "install@w1", 2), b"again\n").unwrap();
    assert_eq!(blobs.log(&first).unwrap().as_deref(), Some(&b"starting\ndone\n"[..]));
    assert_eq!(blobs.log(&LogKey::new("op-1", "install@w1", 2)).unwrap().as_deref(), Some(&b"again\n"[..]));
    assert_eq!(blobs.log(&LogKey::new("op-2", "install@w1", 1)).unwrap(), None);
    for (op, job) in [("op-1", "../x"), ("..", "j"), ("op-1", ""), ("op/1", "j")] {
        let err = blobs.append_log(&LogKey::new(op, job, 1), b"x").unwrap_err();
        assert!(matches!(err, Error::BadBlob { .. }), "{op} {job}: {err}");
    }
}

/// A database's blob store in front of the files: new bytes go to the database, older ones are
/// still read from the files (and a removal takes both).
fn a_layered_store_writes_to_its_primary_and_reads_older_files(db: &TestDb) {
    let files = opsgraph_store_sqlite::test_db();
    let older = FsBlobStore::new(files.dir().unwrap());
    let (old, _) = older.put(b"written before").unwrap();
    older.append_log(&LogKey::new("op-old", "j", 1), b"old log\n").unwrap();
    let layered = Layered { primary: db.blobs(), older: older.clone() };
    let (new, _) = layered.put(b"written now").unwrap();
    check_get(&older, &new, Ok(None));
    check_get(&*db.blobs(), &new, Ok(Some(b"written now")));
    check_get(&layered, &old, Ok(Some(b"written before")));
    check_get(&layered, &new, Ok(Some(b"written now")));
    assert_eq!(layered.log(&LogKey::new("op-old", "j", 1)).unwrap().as_deref(), Some(&b"old log\n"[..]));
    layered.append_log(&LogKey::new("op-new", "j", 1), b"new log\n").unwrap();
    assert_eq!(older.log(&LogKey::new("op-new", "j", 1)).unwrap(), None);
    assert_eq!(layered.log(&LogKey::new("op-new", "j", 1)).unwrap().as_deref(), Some(&b"new log\n"[..]));
    layered.remove(&old).unwrap();
    check_get(&layered, &old, Ok(None));
}

opsgraph_store::conformance!(
    sqlite: opsgraph_store_sqlite::test_db,
    postgres: opsgraph_store_pg::test_db;
    artifacts_are_stored_once_by_content_and_read_back,
    logs_are_appended_per_attempt,
    a_layered_store_writes_to_its_primary_and_reads_older_files,
);

/// A server keeps one blob store for its life: after its connection is killed (a database
/// restart), the call that finds it broken fails and the next one connects again.
#[test]
fn the_postgresql_blob_store_connects_again_after_its_connection_broke() {
    let Some(db) = opsgraph_store_pg::test_db("blobs::the_postgresql_blob_store_connects_again") else { return };
    let blobs = opsgraph_store_pg::PgBlobStore::connect(db.url()).unwrap();
    let (location, _) = blobs.put(b"kept").unwrap();
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    admin
        .execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
    let first = blobs.get(&location).unwrap_err();
    assert!(first.to_string().starts_with("PostgreSQL: "), "{first}");
    assert_eq!(blobs.get(&location).unwrap().as_deref(), Some(&b"kept"[..]));
}

/// Each call has a connection of its own: a log append held up on the server (here by a lock
/// another session holds on the logs' table) does not hold up the calls of other jobs, as it did
/// when they shared one connection.
#[test]
fn a_postgresql_blob_call_held_up_does_not_hold_up_the_others() {
    let Some(db) = opsgraph_store_pg::test_db("blobs::a_postgresql_blob_call_held_up") else { return };
    let blobs = std::sync::Arc::new(opsgraph_store_pg::PgBlobStore::connect(db.url()).unwrap());
    let (location, _) = blobs.put(b"kept").unwrap();
    let mut admin = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    let mut lock = admin.transaction().unwrap();
    lock.batch_execute("LOCK TABLE job_logs IN ACCESS EXCLUSIVE MODE").unwrap();
    let appending = std::sync::Arc::clone(&blobs);
    let append = std::thread::spawn(move || appending.append_log(&LogKey::new("op", "j", 1), b"line\n"));
    let mut waiting = ::postgres::Client::connect(db.url(), ::postgres::NoTls).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while waiting
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(std::time::Instant::now() < deadline, "the append never waited for the lock");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let reading = std::sync::Arc::clone(&blobs);
    let loc = location.clone();
    std::thread::spawn(move || tx.send(reading.get(&loc).map(|b| b.map(|b| b.to_vec()))));
    let read = rx.recv_timeout(std::time::Duration::from_secs(10));
    lock.commit().unwrap();
    append.join().unwrap().unwrap();
    assert_eq!(read.expect("a read waited for another call's connection").unwrap().as_deref(), Some(&b"kept"[..]));
    assert_eq!(blobs.log(&LogKey::new("op", "j", 1)).unwrap().as_deref(), Some(&b"line\n"[..]));
}

/// A data directory written before the trait: `blobs/ab/cdef…` files (0600) and
/// `runs/<op>/<job>.<attempt>.log` files are what the filesystem backend reads and writes.
#[test]
fn the_filesystem_backend_keeps_the_data_directory_layout() {
    let db = opsgraph_store_sqlite::test_db();
    let dir = db.dir().unwrap();
    let location = blob_location(b"old");
    check_location(&location).unwrap();
    std::fs::create_dir_all(dir.join(&location).parent().unwrap()).unwrap();
    std::fs::write(dir.join(&location), b"old").unwrap();
    std::fs::create_dir_all(dir.join("runs/op-old")).unwrap();
    std::fs::write(dir.join("runs/op-old/install@w1.1.log"), b"old log\n").unwrap();
    let blobs = FsBlobStore::new(dir);
    check_get(&blobs, &location, Ok(Some(b"old")));
    let log = LogKey::new("op-old", "install@w1", 1);
    assert_eq!(blobs.log(&log).unwrap().as_deref(), Some(&b"old log\n"[..]));
    blobs.append_log(&log, b"more\n").unwrap();
    assert_eq!(std::fs::read(dir.join("runs/op-old/install@w1.1.log")).unwrap(), b"old log\nmore\n");
    let (new, _) = blobs.put(b"new").unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join(&new)).unwrap().permissions().mode() & 0o777;
    assert_eq!((std::fs::read(dir.join(&new)).unwrap(), mode), (b"new".to_vec(), 0o600));
}
