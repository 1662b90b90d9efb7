//! What to run.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The program of a [`Spec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// Exec'd directly: no shell, every element reaches the program as one argument.
    Argv(Vec<String>),
    /// A script file run with `sh -eu <path> <args...>`.
    Script { path: PathBuf, args: Vec<String> },
    /// A shell line a person wrote, run with `sh -c`. Only for lines that hold shell syntax
    /// ([`program_for`]); never built by pasting parameters into a string.
    Shell(String),
    /// One HTTP/1.1 request (`http://` only), for [`crate::HttpExecutor`].
    Http { method: String, url: String, headers: Vec<(String, String)>, body: Vec<u8> },
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Program::Argv(argv) => f.write_str(&argv.join(" ")),
            Program::Script { path, args } => {
                write!(f, "sh -eu {}", path.display())?;
                args.iter().try_for_each(|a| write!(f, " {a}"))
            }
            Program::Shell(line) => write!(f, "sh -c {line}"),
            Program::Http { method, url, .. } => write!(f, "{method} {url}"),
        }
    }
}

/// Characters that make a command line shell syntax (quotes, expansions, globs, redirections,
/// operators, comments, assignments) and so keep it a [`Program::Shell`].
const SHELL_SYNTAX: &[char] = &[
    '|', '&', ';', '<', '>', '(', ')', '$', '`', '\\', '"', '\'', '*', '?', '[', ']', '#', '~', '=', '%', '!', '{',
    '}', '\n', '\r',
];

/// Words that mean something only to a shell (keywords and builtins without a program of the
/// same name): a line starting with one is a shell line even without any syntax character.
const SHELL_WORDS: &[&str] = &[
    ".", ":", "alias", "bg", "break", "case", "cd", "command", "continue", "do", "done", "elif", "else", "esac",
    "eval", "exec", "exit", "export", "fc", "fg", "fi", "for", "function", "getopts", "hash", "if", "in", "jobs",
    "local", "read", "readonly", "return", "select", "set", "shift", "source", "then", "times", "trap", "type",
    "ulimit", "umask", "unalias", "unset", "until", "wait", "while",
];

/// The program for a document's command: `Argv` stays argv; a `Line` is split on spaces and tabs
/// into argv when it holds no shell syntax (no quotes, `$`, globs, operators, redirections, `#`,
/// `~`, `=`, `%`, newlines, and does not start with a shell keyword or builtin), and is a
/// [`Program::Shell`] line otherwise. Splitting is plain: quoting is shell syntax, so a quoted
/// line is a shell line.
pub fn program_for(cmd: &opsgraph_core::model::Command) -> Program {
    match cmd {
        opsgraph_core::model::Command::Argv(argv) => Program::Argv(argv.clone()),
        opsgraph_core::model::Command::Line(line) => {
            let words: Vec<&str> = line.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
            let shell = line.contains(SHELL_SYNTAX) || words.first().is_none_or(|first| SHELL_WORDS.contains(first));
            if shell {
                Program::Shell(line.clone())
            } else {
                Program::Argv(words.into_iter().map(str::to_owned).collect())
            }
        }
    }
}

/// The environment variable a parameter reaches commands as: `OPSGRAPH_PARAM_` and the name in
/// upper case, every character that is not an ASCII letter or digit replaced by `_`
/// (`release-name` -> `OPSGRAPH_PARAM_RELEASE_NAME`).
pub fn param_env(name: &str) -> String {
    let mut out = String::from("OPSGRAPH_PARAM_");
    out.extend(name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }));
    out
}

/// Whether `name` can be an environment variable name every shell accepts.
pub(crate) fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `PATH` of a local job that neither inherits the environment nor sets one.
pub(crate) const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What to run, where, and within which limits.
#[derive(Clone, PartialEq, Eq)]
pub struct Spec {
    pub program: Program,
    /// Variables the program gets (names must be `[A-Za-z_][A-Za-z0-9_]*`).
    pub env: BTreeMap<String, String>,
    /// Local executor: start from the control plane's own environment instead of an empty one.
    /// Remote commands always start from the login environment `sshd` gives them.
    pub inherit_env: bool,
    pub workdir: Option<PathBuf>,
    /// No limit when `None`.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Bytes kept per output stream (head and tail).
    pub output_cap: usize,
    /// Bytes written to the program's stdin (it reads end-of-file at once when `None`).
    pub stdin: Option<Vec<u8>>,
    /// Files that cross to and from a remote host (the SSH executor); local runs ignore it.
    pub transfer: Option<Transfer>,
    /// Sees the output as it arrives, besides the capture (a remote agent streams its log).
    pub tee: Option<Tee>,
    /// The mark a remote command carries on its host ([`crate::new_mark`]), given by a caller
    /// that records it before the run, so that whoever takes over after the caller died can stop
    /// what is left of the run there ([`crate::Executor::stop_marked`]). A fresh one per run
    /// when `None`. Local runs ignore it (their leftovers are found by their environment).
    pub mark: Option<String>,
}

/// Output as it arrives: called with the stream (0 stdout, 1 stderr) and the bytes just read,
/// on the thread that runs the program; it should not block.
#[derive(Clone)]
pub struct Tee(pub Arc<TeeFn>);

/// The function behind a [`Tee`].
pub type TeeFn = dyn Fn(usize, &[u8]) + Send + Sync;

impl PartialEq for Tee {
    fn eq(&self, other: &Tee) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Tee {}

/// Files a remote run needs and produces. With a transfer, the SSH executor ignores
/// [`Spec::workdir`] (a directory of the control host) and, when there is anything to move,
/// runs in a fresh private directory on the remote host that it removes afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Transfer {
    /// Variables of [`Spec::env`] whose values are paths of local files: each file is copied to
    /// the remote directory (mode 0600) and the variable names the copy there.
    pub upload: Vec<String>,
    /// Files copied by name into one remote directory, which a variable then names.
    pub bundle: Option<Bundle>,
    /// A variable set to a remote directory the program writes into (`OPSGRAPH_OUT`), and the
    /// files fetched from it into a local directory afterwards (missing ones are skipped).
    pub download: Option<Download>,
}

/// Local files that travel together into one remote directory (mode 0600, each under its file
/// name), and the variable of [`Spec::env`] set to that directory: a pack's library scripts,
/// `OPSGRAPH_LIB`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    pub env: String,
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    pub env: String,
    pub local_dir: PathBuf,
    /// Plain file names (no `/`), as the pack declares its artifacts.
    pub files: Vec<String>,
}

impl Transfer {
    pub fn is_empty(&self) -> bool {
        self.upload.is_empty()
            && self.bundle.as_ref().is_none_or(|b| b.files.is_empty())
            && self.download.as_ref().is_none_or(|d| d.files.is_empty())
    }
}

impl Spec {
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
    pub const DEFAULT_OUTPUT_CAP: usize = 1 << 20;

    /// A spec with an empty environment, no timeout, 5 s of grace and 1 MiB of output per stream.
    pub fn new(program: Program) -> Spec {
        Spec {
            program,
            env: BTreeMap::new(),
            inherit_env: false,
            workdir: None,
            timeout: None,
            grace: Spec::DEFAULT_GRACE,
            output_cap: Spec::DEFAULT_OUTPUT_CAP,
            stdin: None,
            transfer: None,
            tee: None,
            mark: None,
        }
    }

    /// `Spec::new(Program::Argv(..))`.
    pub fn argv<S: AsRef<str>>(argv: impl IntoIterator<Item = S>) -> Spec {
        Spec::new(Program::Argv(argv.into_iter().map(|s| s.as_ref().to_owned()).collect()))
    }

    /// The first invalid environment variable name, as a could-not-start message.
    pub(crate) fn env_error(&self) -> Option<String> {
        let bad = self.env.keys().find(|name| !is_env_name(name))?;
        Some(format!("invalid environment variable name `{bad}` (expected [A-Za-z_][A-Za-z0-9_]*)"))
    }
}

/// Names only: values may be secrets.
impl fmt::Debug for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spec")
            .field("program", &self.program)
            .field("env", &self.env.keys().map(|k| format!("{k}=<redacted>")).collect::<Vec<_>>())
            .field("inherit_env", &self.inherit_env)
            .field("workdir", &self.workdir)
            .field("timeout", &self.timeout)
            .field("grace", &self.grace)
            .field("output_cap", &self.output_cap)
            .field("stdin", &self.stdin.as_ref().map(|s| format!("<{} bytes>", s.len())))
            .field("transfer", &self.transfer)
            .field("tee", &self.tee.is_some())
            .finish()
    }
}

/// A cancellation token: clone it, hand a clone to the run, call [`Cancel::cancel`] from anywhere.
/// Executors poll it while they wait (every 20 ms at most).
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How often a waiting executor looks at its [`Cancel`].
pub(crate) const CANCEL_POLL: Duration = Duration::from_millis(20);
