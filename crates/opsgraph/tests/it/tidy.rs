//! Architecture invariants and generated files, checked like any other behaviour.

use crate::support::root;

/// `model`, `pack` and `plan` do no IO: no filesystem, processes, network or async runtime.
#[test]
fn core_crates_do_no_io() {
    let forbidden = ["std::fs", "std::process", "std::net", "tokio", "File::open", "Command::new"];
    for krate in ["opsgraph-model", "opsgraph-pack", "opsgraph-plan"] {
        let dir = root().join("crates").join(krate);
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        for dep in ["tokio", "sqlx", "rusqlite", "reqwest", "hyper"] {
            assert!(!manifest.contains(dep), "{krate} depends on {dep}");
        }
        let mut files = Vec::new();
        collect(&dir.join("src"), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for word in forbidden {
                assert!(!text.contains(word), "{} uses {word}: {krate} must do no IO", f.display());
            }
        }
    }
}

/// The store's trait crate is backend-neutral: the database clients are its backends' own
/// dependencies (`opsgraph-store-sqlite`, `opsgraph-store-pg`).
#[test]
fn the_store_trait_crate_depends_on_no_database_client() {
    let manifest = std::fs::read_to_string(root().join("crates/opsgraph-store/Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).unwrap_or_default();
    let deps = deps.split("\n[").next().unwrap_or_default();
    let names: Vec<&str> =
        deps.lines().filter_map(|l| l.split(['.', ' ', '=']).next()).filter(|n| !n.is_empty()).collect();
    for client in ["rusqlite", "postgres", "opsgraph-store-sqlite", "opsgraph-store-pg"] {
        assert!(!names.contains(&client), "opsgraph-store depends on {client}: {names:?}");
    }
    assert!(names.contains(&"serde"), "the [dependencies] section was not found: {names:?}");
}

/// Stores are opened in one place: outside the backend crates, only the binary's `storage.rs`
/// names a backend in code (everything else sees `dyn Store` and `dyn BlobStore`, opened by URL there).
#[test]
fn only_storage_rs_names_a_store_backend() {
    let crates = root().join("crates");
    let mut files = Vec::new();
    for e in std::fs::read_dir(&crates).unwrap() {
        let dir = e.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("opsgraph-store-") && dir.join("src").is_dir() {
            collect(&dir.join("src"), &mut files);
        }
    }
    let mut naming: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
            code.into_iter().any(|l| l.contains("opsgraph_store_sqlite") || l.contains("opsgraph_store_pg"))
        })
        .map(|f| f.strip_prefix(&crates).unwrap().display().to_string())
        .collect();
    naming.sort();
    assert_eq!(naming, ["opsgraph/src/storage.rs"]);
}

fn collect(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The document reference is generated from the validator's shapes; `UPDATE_EXPECT=1` rewrites it.
#[test]
fn document_reference_is_current() {
    let path = root().join("docs/reference/documents.md");
    let want = opsgraph_pack::markdown_reference();
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == want, "docs/reference/documents.md is stale: run `UPDATE_EXPECT=1 cargo test --test it tidy`");
}
