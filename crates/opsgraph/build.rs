//! Embeds the bundled packs and examples, so `opsgraph demo` works from any directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("../..").canonicalize().unwrap();
    let mut code = String::from("pub(crate) static FILES: &[(&str, &str)] = &[\n");
    for top in ["packs", "examples"] {
        let dir = root.join(top);
        // Relative to this package, not absolute: cargo keeps the paths of the last run in its
        // fingerprint and the build's hash does not depend on where the workspace is, so with a
        // target directory shared by two checkouts (CI's clones and a developer's tree) an
        // absolute path would let one checkout's build embed the other's packs.
        // And a build from another checkout (another working directory) runs this script again:
        // a later run elsewhere would otherwise leave this checkout's files looking unchanged.
        println!("cargo:rerun-if-changed=../../{top}");
        println!("cargo:rerun-if-env-changed=PWD");
        let mut files = Vec::new();
        walk(&dir, &mut files);
        for f in files {
            let rel = f.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
            writeln!(code, "    ({rel:?}, include_str!({:?})),", f.display().to_string()).unwrap();
        }
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("bundled.rs");
    std::fs::write(out, code).unwrap();
}
