//! Architecture invariants and generated files, checked like any other behaviour.

use std::collections::BTreeMap;

use crate::support::root;

/// The core (`model`, `pack`, `plan`) does no IO: no filesystem, processes, network or async
/// runtime.
#[test]
fn core_crate_does_no_io() {
    let forbidden = ["std::fs", "std::process", "std::net", "tokio", "File::open", "Command::new"];
    for krate in ["opsgraph-core"] {
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
/// A crate's test module (`*_tests.rs`, compiled only for its tests) may open one to drive the
/// crate's internals on a real file (the runtime's `committer_tests.rs`).
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
        .filter(|f| !f.to_string_lossy().ends_with("_tests.rs"))
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
    let want = opsgraph_core::pack::markdown_reference();
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == want, "docs/reference/documents.md is stale: run `UPDATE_EXPECT=1 cargo test --test it tidy`");
}

/// A pack is a self-contained unit (installed, digested and shipped alone), so packs that share a
/// library (`scripts/lib/NAME`, docs/pack-authoring.md) each carry a copy (a link out of the pack
/// would be refused where the pack is read alone): this holds the copies of one name equal (edit
/// one, copy it to the others).
#[test]
fn shared_pack_libraries_are_one_text() {
    let mut by_name: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut packs: Vec<_> = std::fs::read_dir(root().join("packs")).unwrap().flatten().map(|e| e.path()).collect();
    packs.sort();
    for pack in packs {
        for lib in std::fs::read_dir(pack.join("scripts/lib")).into_iter().flatten() {
            let lib = lib.unwrap().path();
            let name = lib.file_name().unwrap().to_string_lossy().into_owned();
            let owner = pack.file_name().unwrap().to_string_lossy().into_owned();
            by_name.entry(name).or_default().push((owner, std::fs::read_to_string(&lib).unwrap()));
        }
    }
    let mut shared = Vec::new();
    for (name, copies) in &by_name {
        let (first, text) = &copies[0];
        for (owner, other) in &copies[1..] {
            assert!(other == text, "packs/{owner}/scripts/lib/{name} differs from packs/{first}/scripts/lib/{name}");
        }
        if copies.len() > 1 {
            shared.push(format!("{name}: {}", copies.iter().map(|c| c.0.as_str()).collect::<Vec<_>>().join(", ")));
        }
    }
    assert_eq!(shared, ["helm-lib.sh: minio, tempo", "lab-lib.sh: lab-cluster, lab-database, postgresql-local"]);
}

/// The CLI's modules import downwards: `args` and `render` below every command, the commands
/// below `cli`, the one dispatcher; no circle.
#[test]
fn cli_modules_import_no_circle() {
    let dir = root().join("crates/opsgraph/src");
    let mut modules: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_suffix(".rs").map(str::to_string))
        .filter(|m| m != "lib" && m != "main")
        .collect();
    modules.sort();
    let uses = |text: &str, m: &str| {
        let grouped = text.match_indices("crate::{").any(|(i, _)| {
            let group = &text[i + 8..];
            let group = &group[..group.find('}').unwrap_or(0)];
            group.split(|c: char| !c.is_alphanumeric() && c != '_').any(|w| w == m)
        });
        grouped || text.contains(&format!("crate::{m}::")) || text.contains(&format!("crate::{m};"))
    };
    let edges: std::collections::BTreeMap<&str, Vec<&str>> = modules
        .iter()
        .map(|a| {
            let text = std::fs::read_to_string(dir.join(format!("{a}.rs"))).unwrap();
            (a.as_str(), modules.iter().filter(|b| *b != a && uses(&text, b)).map(String::as_str).collect())
        })
        .collect();
    // Modules on a circle: those that reach themselves.
    let reaches = |from: &str, to: &str| {
        let (mut seen, mut todo) = (std::collections::BTreeSet::new(), vec![from]);
        while let Some(m) = todo.pop() {
            for &n in &edges[m] {
                if n == to {
                    return true;
                }
                if seen.insert(n) {
                    todo.push(n);
                }
            }
        }
        false
    };
    let circled: Vec<&str> = modules.iter().map(String::as_str).filter(|m| reaches(m, m)).collect();
    assert_eq!(circled, Vec::<&str>::new(), "modules on an import circle in crates/opsgraph/src");
    for m in ["args", "render", "client", "query_cmd"] {
        assert!(!edges[m].contains(&"cli"), "{m} imports cli");
    }
    assert_eq!(edges["render"], Vec::<&str>::new(), "render imports nothing of the crate");
}

/// No file in `crates/*/src` is over 800 lines, so that a newcomer can hold each in their head;
/// the exceptions are listed with their reason.
#[test]
fn no_source_file_is_over_800_lines() {
    let allowed: &[(&str, &str)] = &[
        ("crates/opsgraph-exec/src/tests.rs", "the executor's test suite"),
        ("crates/opsgraph-core/src/pack/kinds.rs", "one declarative shape per document kind: a table"),
    ];
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        collect(&krate.path().join("src"), &mut files);
    }
    let mut over = Vec::new();
    for f in files {
        let rel = f.strip_prefix(root()).unwrap().display().to_string();
        let lines = std::fs::read_to_string(&f).unwrap().lines().count();
        if lines > 800 && !allowed.iter().any(|(p, _)| *p == rel) {
            over.push(format!("{rel}: {lines} lines"));
        }
    }
    assert!(over.is_empty(), "split these by concern (or list them here with a reason):\n{}", over.join("\n"));
}

/// Inside each crate, modules import downwards: no module reaches itself through the `crate::`
/// (or, in a module directory, `super::`) paths of the modules it names. A module directory is
/// one module at its parent's level. The circles left are listed; a new one fails here.
#[test]
fn no_import_circle_inside_a_crate() {
    use std::collections::{BTreeMap, BTreeSet};
    fn text_of(p: &std::path::Path) -> String {
        let mut files = Vec::new();
        if p.is_dir() {
            collect(p, &mut files);
        } else {
            files.push(p.to_path_buf());
        }
        files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect()
    }
    fn uses(text: &str, prefix: &str, m: &str) -> bool {
        let word = |s: &str| s.split(|c: char| !c.is_alphanumeric() && c != '_').any(|w| w == m);
        let direct = [format!("crate::{prefix}{m}::"), format!("crate::{prefix}{m};")];
        if direct.iter().any(|d| text.contains(d.as_str())) {
            return true;
        }
        let group = format!("crate::{prefix}{{");
        if text.match_indices(&group).any(|(i, _)| {
            let rest = &text[i + group.len()..];
            word(&rest[..rest.find('}').unwrap_or(0)])
        }) {
            return true;
        }
        !prefix.is_empty() && (text.contains(&format!("super::{m}::")) || text.contains(&format!("super::{m};")))
    }
    fn walk(dir: &std::path::Path, prefix: &str, krate: &str, out: &mut Vec<String>) {
        let mut modules: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() && p.join("mod.rs").exists() {
                walk(&p, &format!("{prefix}{name}::"), krate, out);
                modules.insert(name, p);
            } else if let Some(stem) = name.strip_suffix(".rs").filter(|s| !["lib", "main", "mod"].contains(s)) {
                modules.insert(stem.to_owned(), p);
            }
        }
        let edges: BTreeMap<&str, Vec<&str>> = modules
            .iter()
            .map(|(a, p)| {
                let text = text_of(p);
                (a.as_str(), modules.keys().filter(|b| *b != a && uses(&text, prefix, b)).map(String::as_str).collect())
            })
            .collect();
        for m in modules.keys() {
            let (mut seen, mut todo) = (BTreeSet::new(), vec![m.as_str()]);
            let mut circled = false;
            while let Some(x) = todo.pop() {
                for &n in &edges[x] {
                    circled |= n == m;
                    if seen.insert(n) {
                        todo.push(n);
                    }
                }
            }
            if circled {
                out.push(format!("{krate}: {prefix}{m}"));
            }
        }
    }
    let mut circled = Vec::new();
    for krate in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        let name = krate.file_name().to_string_lossy().into_owned();
        walk(&krate.path().join("src"), "", &name, &mut circled);
    }
    circled.sort();
    assert_eq!(circled, Vec::<String>::new(), "modules on an import circle");
}
