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

/// A pack is a self-contained unit (installed, digested and shipped alone), so the lab packs each
/// carry the lab shell library; this holds the copies equal to the one in `lab-cluster`, the
/// copy to edit.
#[test]
fn the_lab_shell_library_is_one_text() {
    let canonical = root().join("packs/lab-cluster/scripts/lab-lib.sh");
    let want = std::fs::read_to_string(&canonical).unwrap();
    let mut copies = Vec::new();
    for pack in std::fs::read_dir(root().join("packs")).unwrap().flatten() {
        let copy = pack.path().join("scripts/lab-lib.sh");
        if copy.exists() && copy != canonical {
            let text = std::fs::read_to_string(&copy).unwrap();
            assert!(text == want, "{} differs from {}: copy the canonical one", copy.display(), canonical.display());
            copies.push(pack.file_name().to_string_lossy().into_owned());
        }
    }
    copies.sort();
    assert_eq!(copies, ["lab-database", "postgresql-local"]);
}
