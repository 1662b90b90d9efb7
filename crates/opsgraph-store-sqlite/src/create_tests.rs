use std::path::{Path, PathBuf};

use super::{create, leftover_pid, link, temp_name, Created};
use crate::schema::MIGRATIONS;

/// A new empty directory for one test.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("opsgraph-create-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The schema SQLite keeps (every table, index and trigger, normalised: `schema_tests.rs`), the
/// version and the journal mode of a file.
fn schema(path: &Path) -> ((Vec<String>, i64), String) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mode = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    (crate::schema::tests::schema(&conn), mode)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// A new file (made from the snapshot) has exactly the schema the migrations give an old one, one
/// by one, in WAL; nothing else is left in the directory.
#[test]
fn a_new_file_has_the_schema_of_every_migration_and_nothing_is_left_beside_it() {
    let d = dir("new");
    let (new, old) = (d.join("new.db"), d.join("old.db"));
    assert_eq!(create(&new).ok(), Some(Created::Made));
    {
        let conn = rusqlite::Connection::open(&old).unwrap();
        conn.execute_batch("PRAGMA journal_mode=WAL").unwrap();
        crate::schema::tests::migrated_one_by_one(&conn);
    }
    let (got, want) = (schema(&new), schema(&old));
    assert_eq!(got, want);
    assert_eq!((got.0 .1, got.1.as_str()), (MIGRATIONS.len() as i64, "wal"));
    assert_eq!(names(&d), ["new.db", "old.db"]);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A file that exists is not touched; nor is one another process linked first (the race of a
/// server and a CLI starting together): this process's file is dropped.
#[test]
fn an_existing_file_is_kept_as_it_is() {
    let d = dir("existing");
    let path = d.join("opsgraph.db");
    std::fs::write(&path, b"not replaced").unwrap();
    assert_eq!(create(&path).ok(), Some(Created::Found));
    let temp = temp_name(&path, std::process::id(), 999);
    std::fs::write(&temp, b"lost the race").unwrap();
    assert_eq!(link(&temp, &path).ok(), Some(Created::Found));
    assert_eq!(std::fs::read(&path).unwrap(), b"not replaced");
    std::fs::remove_dir_all(&d).unwrap();
}

/// What a process that died while making the file left is removed by the next one that opens
/// the store; a running process's is left alone.
#[test]
fn leftovers_of_a_dead_process_are_removed_at_the_next_start() {
    let d = dir("leftover");
    let path = d.join("opsgraph.db");
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let alive = std::process::id(); // this test's own: it runs
    for (pid, suffix) in [(dead, ""), (dead, "-journal"), (alive, ""), (alive, "-wal")] {
        let mut name = temp_name(&path, pid, 7).into_os_string();
        name.push(suffix);
        std::fs::write(name, b"half made").unwrap();
    }
    let store = crate::SqliteStore::open(&path, crate::Durability::Full).unwrap();
    assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len() as i64);
    drop(store);
    let left: Vec<String> = names(&d).into_iter().filter(|n| n.contains(".new-")).collect();
    assert_eq!(left, [format!("opsgraph.db.new-{alive}-7"), format!("opsgraph.db.new-{alive}-7-wal")]);
    std::fs::remove_dir_all(&d).unwrap();
}

fn check(input: &str, expect: Option<u32>) {
    assert_eq!(leftover_pid(input), expect, "{input}");
}

#[test]
fn the_pid_of_a_leftover() {
    check("123-0", Some(123));
    check("123-45-wal", Some(123));
    check("123-45-journal", Some(123));
    check("123-45-shm", Some(123));
    check("123-x", None);
    check("123", None);
    check("abc-0", None);
    check("123-0-other", None);
}
