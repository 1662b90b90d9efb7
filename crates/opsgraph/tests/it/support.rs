//! Running the CLI in-process and making its output stable for snapshots.

use std::path::PathBuf;

use clap::Parser as _;

/// The repository root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A path under the repository root, as an argument.
pub(crate) fn path(rel: &str) -> String {
    root().join(rel).display().to_string()
}

pub(crate) struct Run {
    pub(crate) code: u8,
    pub(crate) out: String,
    pub(crate) err: String,
}

impl Run {
    /// Exit code, stdout and stderr in one text, with the repository root removed.
    pub(crate) fn render(&self) -> String {
        let mut s = format!("exit: {}\n", self.code);
        if !self.out.is_empty() {
            s.push_str("--- stdout\n");
            s.push_str(&self.out);
        }
        if !self.err.is_empty() {
            s.push_str("--- stderr\n");
            s.push_str(&self.err);
        }
        s
    }
}

/// Runs `opsgraph ARGS...` in-process. `{root}` in an argument is the repository root.
pub(crate) fn opsgraph(args: &[&str]) -> Run {
    let root = root().display().to_string();
    let mut args: Vec<String> =
        std::iter::once("opsgraph".to_string()).chain(args.iter().map(|a| a.replace("{root}", &root))).collect();
    // Hermetic: without `--data-dir`, a data directory that does not exist, never the user's.
    if !args.iter().any(|a| a == "--data-dir") {
        args.push("--data-dir".into());
        args.push(std::env::temp_dir().join("opsgraph-it-no-data-dir").display().to_string());
    }
    let cli = opsgraph::cli::Cli::try_parse_from(&args).expect("arguments parse");
    let mut out = Vec::new();
    let mut err = Vec::new();
    // As `main` does: a refused request is an error line and exit status 1.
    let code = match opsgraph::cli::run(cli, &mut std::io::empty(), &mut out, &mut err) {
        Ok(code) => code,
        Err(e) => {
            use std::io::Write as _;
            writeln!(err, "error: {e:#}").unwrap();
            1
        }
    };
    let clean = |b: Vec<u8>| String::from_utf8(b).unwrap().replace(&format!("{root}/"), "").replace(&root, ".");
    Run { code, out: clean(out), err: clean(err) }
}

/// A temporary directory, removed when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn join(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    pub(crate) fn display(&self) -> std::path::Display<'_> {
        self.0.display()
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes files into a fresh temporary directory.
pub(crate) fn temp_dir(files: &[(&str, &str)]) -> TempDir {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir =
        std::env::temp_dir().join(format!("opsgraph-it-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_dir_all(&dir);
    for (name, text) in files {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    TempDir(dir)
}
