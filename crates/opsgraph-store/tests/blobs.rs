//! The blob stores' conformance suite: artifact contents and job logs behave alike on the
//! filesystem (next to a SQLite database) and in PostgreSQL; plus the filesystem's own layout,
//! which data written before the `BlobStore` trait must keep being read in.

use opsgraph_store::blob::{blob_location, check_location};
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

opsgraph_store::conformance!(
    sqlite: opsgraph_store_sqlite::test_db,
    postgres: opsgraph_store_pg::test_db;
    artifacts_are_stored_once_by_content_and_read_back,
    logs_are_appended_per_attempt,
);

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
