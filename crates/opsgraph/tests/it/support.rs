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

    /// Asserts that the run was refused: exit code 1, `says` in its standard error.
    pub(crate) fn assert_refused(&self, says: &str) {
        assert_eq!(self.code, 1, "{}", self.render());
        assert!(self.err.contains(says), "{}", self.render());
    }

    /// The id of the operation the run printed (`Operation op-…: …`, the first such line).
    pub(crate) fn operation_id(&self) -> String {
        let line =
            self.out.lines().find(|l| l.starts_with("Operation op-")).unwrap_or_else(|| panic!("{}", self.render()));
        line["Operation ".len()..].split(':').next().unwrap().to_string()
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

/// An intent for `dev`: its resource type, action and name, then `body` (its other keys, each
/// line indented by two spaces).
pub(crate) fn dev_intent(resource_type: &str, action: &str, name: &str, body: &str) -> String {
    format!("intent:\n  target_resource_type: {resource_type}\n  action: {action}\n  name: {name}\n  environment: dev\n{body}")
}

/// What a finished process printed: its standard output, then its standard error.
pub(crate) fn printed(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
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

/// A pack of jobs `j0`, `j1`, … each fanned out over the intent's `nodes` (compute nodes) and
/// running `scripts/step.sh`, proven by the evidence `done`: the shape the agent and fleet tests
/// drive in bulk.
pub(crate) struct StepPack<'a> {
    pub(crate) id: &'a str,
    pub(crate) resource_type: &'a str,
    /// The template's `parameters:` entries, each a line indented by four spaces.
    pub(crate) parameters: &'a str,
    /// The command of the evidence `done`.
    pub(crate) done: &'a str,
    pub(crate) step: &'a str,
}

impl StepPack<'_> {
    /// The pack's files (under `packs/<id>/`) with `jobs` jobs; `extra(k)` goes into job `k`'s
    /// document before its `run` (controls, `after`).
    pub(crate) fn files(&self, jobs: usize, extra: &dyn Fn(usize) -> String) -> Vec<(String, String)> {
        let (id, ty) = (self.id, self.resource_type);
        let ids: Vec<String> = (0..jobs).map(|k| format!("j{k}")).collect();
        let ids_list = ids.join(", ");
        let docs: Vec<String> = ids
            .iter()
            .enumerate()
            .map(|(k, j)| {
                format!("job: {{id: {j}, {}scope: {{resources: [compute_node], target: nodes}}, outputs: {{evidence: [done]}}, run: {{script: scripts/step.sh}}}}\n", extra(k))
            })
            .collect();
        vec![
            (
                format!("packs/{id}/pack.yaml"),
                format!("scenario_pack:\n  id: {id}\n  version: 1.0.0\n  resource_types: [{ty}]\n  actions: [run]\n  plan_templates: [{{id: {id}.run}}]\n"),
            ),
            (
                format!("packs/{id}/templates.yaml"),
                format!(
                    "plan_template:\n  id: {id}.run\n  action: run\n  parameters:\n{}  scopes:\n    nodes: {{resource_type: compute_node, from: targets.nodes}}\n  stages:\n    - {{id: all, name: All, jobs: [{ids_list}]}}\n  jobs: [{ids_list}]\n",
                    self.parameters
                ),
            ),
            (
                format!("packs/{id}/evidence.yaml"),
                format!("evidence:\n  - {{id: done, source: command, command: '{}'}}\n", self.done),
            ),
            (format!("packs/{id}/scripts/step.sh"), self.step.to_string()),
            (format!("packs/{id}/jobs.yaml"), docs.join("---\n")),
        ]
    }
}

/// Every file under `dir`, with its bytes (the places a secret must never be in plain text).
pub(crate) fn files_under(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p, b));
        }
    }
}

/// Whether `hay` holds `needle`'s bytes.
pub(crate) fn holds(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A TCP port free on `address` just now.
pub(crate) fn free_port(address: &str) -> u16 {
    std::net::TcpListener::bind((address, 0)).unwrap().local_addr().unwrap().port()
}

/// An admin token (`platform_admin`) and an agent token named `agent` made in `store`: their
/// secrets, in that order.
pub(crate) fn admin_and_agent_tokens(store: &mut dyn opsgraph_store::Store, agent: &str) -> (String, String) {
    let config = opsgraph_server::Config::default();
    let mut make = |name: &str, role: &str| {
        opsgraph_server::auth::create_token(store, &config, name, &[role.to_string()], "test", None, None).unwrap().1
    };
    (make("admin", "platform_admin"), make(agent, "agent"))
}
