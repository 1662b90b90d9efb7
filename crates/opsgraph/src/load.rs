//! Reading documents from disk (or from the copy of `packs/` and `examples/` built into the
//! binary) and routing them by kind.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use opsgraph_core::model::{CapabilityPolicy, Document, Intent, OperationsPolicy, Provider, Resource};
use opsgraph_core::pack::{check_pack, parse_file, Code, Diagnostic, Located, Pack, PackFile, Pos};

mod bundled {
    include!(concat!(env!("OUT_DIR"), "/bundled.rs"));
}

/// The prefix under which bundled files are named in diagnostics and `--packs` arguments.
pub const BUNDLED: &str = "bundled:";

/// Where documents come from: a directory tree on disk, or the bundled copy.
#[derive(Debug, Clone)]
pub enum Source {
    Disk(PathBuf),
    /// A path inside the bundled tree (`packs`, `examples/inventory`).
    Bundled(String),
}

impl Source {
    /// `bundled:packs` names the bundled tree; anything else is a path.
    pub fn parse(arg: &str) -> Source {
        match arg.strip_prefix(BUNDLED) {
            Some(rest) => Source::Bundled(rest.trim_matches('/').to_string()),
            None => Source::Disk(PathBuf::from(arg)),
        }
    }

    pub fn display(&self) -> String {
        match self {
            Source::Disk(p) => p.display().to_string(),
            Source::Bundled(p) => format!("{BUNDLED}{p}"),
        }
    }

    /// Every file under this source: (path relative to it, its bytes or why they were not read).
    /// A file source yields itself. Names starting with `.` are skipped. An error is about the
    /// source itself (it does not exist, or is not a directory that can be listed).
    fn files(&self) -> std::io::Result<Vec<(String, Read)>> {
        match self {
            Source::Disk(path) if !path.is_dir() => {
                let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
                // Named by the user: followed if a link, but still only a regular file is read.
                let meta = std::fs::metadata(path)?;
                Ok(vec![(name, read_regular(path, &meta))])
            }
            Source::Disk(path) => {
                let root = std::fs::canonicalize(path)?;
                let mut out = Vec::new();
                let mut seen = BTreeSet::from([root.clone()]);
                walk(&root, path, path, &mut seen, &mut out)?;
                Ok(out)
            }
            Source::Bundled(prefix) => {
                let files: Vec<(String, Read)> = bundled::FILES
                    .iter()
                    .filter_map(|(p, text)| {
                        if p == prefix {
                            let name = p.rsplit('/').next().unwrap_or(p).to_string();
                            return Some((name, Ok(text.as_bytes().to_vec())));
                        }
                        let rel = if prefix.is_empty() {
                            Some(*p)
                        } else {
                            p.strip_prefix(prefix.as_str())?.strip_prefix('/')
                        };
                        rel.map(|r| (r.to_string(), Ok(text.as_bytes().to_vec())))
                    })
                    .collect();
                if files.is_empty() {
                    return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no such bundled path"));
                }
                Ok(files)
            }
        }
    }

    fn join(&self, rel: &str) -> String {
        let base = self.display();
        if rel.is_empty() {
            base
        } else {
            format!("{}/{rel}", base.trim_end_matches('/'))
        }
    }

    fn is_file(&self) -> bool {
        match self {
            Source::Disk(p) => !p.is_dir(),
            Source::Bundled(p) => bundled::FILES.iter().any(|(f, _)| f == p),
        }
    }
}

/// A file's bytes, or why they were not read.
type Read = Result<Vec<u8>, Unread>;

#[derive(Debug)]
enum Unread {
    /// Over the size limit: this many bytes.
    TooLarge(u64),
    /// Not a regular file, a link leaving the tree, or an IO error: the sentence says which.
    File(String),
}

/// Reads the tree under `dir` (`root`, canonical, is the top of the tree). Only regular files are
/// read, each after its size is checked; a symbolic link is followed only when it stays inside the
/// tree, and a directory is read once (a link back up does not loop).
fn walk(
    root: &Path,
    top: &Path,
    dir: &Path,
    seen: &mut BTreeSet<PathBuf>,
    out: &mut Vec<(String, Read)>,
) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    entries.sort();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        let rel = path.strip_prefix(top).unwrap_or(&path).to_string_lossy().replace('\\', "/");
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                out.push((rel, Err(Unread::File(format!("cannot read: {e}")))));
                continue;
            }
        };
        let meta = if meta.file_type().is_symlink() {
            match std::fs::canonicalize(&path) {
                Ok(target) if target.starts_with(root) => match std::fs::metadata(&target) {
                    Ok(m) => m,
                    Err(e) => {
                        out.push((rel, Err(Unread::File(format!("cannot read: {e}")))));
                        continue;
                    }
                },
                Ok(target) => {
                    let why = format!("refused: a symbolic link leaving the tree (to {})", target.display());
                    out.push((rel, Err(Unread::File(why))));
                    continue;
                }
                Err(e) => {
                    out.push((rel, Err(Unread::File(format!("cannot read: a symbolic link to nothing ({e})")))));
                    continue;
                }
            }
        } else {
            meta
        };
        if meta.is_dir() {
            let canonical = std::fs::canonicalize(&path)?;
            if seen.insert(canonical) {
                if let Err(e) = walk(root, top, &path, seen, out) {
                    out.push((rel, Err(Unread::File(format!("cannot read the directory: {e}")))));
                }
            }
        } else {
            // Every file is read: scripts count in a pack's digest.
            out.push((rel, read_regular(&path, &meta)));
        }
    }
    Ok(())
}

/// The bytes of `path`, whose metadata (links followed) is `meta`: only a regular file, only up
/// to the size limit, checked before reading. It is opened without blocking (a FIFO swapped in
/// after the check does not hang the read) and checked again through the open file.
fn read_regular(path: &Path, meta: &std::fs::Metadata) -> Read {
    use std::io::Read as _;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let kind = |t: std::fs::FileType| {
        if t.is_fifo() {
            "a FIFO"
        } else if t.is_socket() {
            "a socket"
        } else if t.is_block_device() || t.is_char_device() {
            "a device"
        } else {
            "not a regular file"
        }
    };
    let limit = opsgraph_core::pack::MAX_FILE_BYTES as u64;
    let check = |meta: &std::fs::Metadata| -> Result<(), Unread> {
        if !meta.is_file() {
            return Err(Unread::File(format!("refused: {}; only regular files are read", kind(meta.file_type()))));
        }
        if meta.len() > limit {
            return Err(Unread::TooLarge(meta.len()));
        }
        Ok(())
    };
    check(meta)?;
    let cannot = |e: std::io::Error| Unread::File(format!("cannot read: {e}"));
    let file = std::fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NONBLOCK).open(path).map_err(cannot)?;
    check(&file.metadata().map_err(cannot)?)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > limit {
        return Err(Unread::TooLarge(bytes.len() as u64));
    }
    Ok(bytes)
}

/// The text of one document file named by the user (`-f FILE`, sent to a server as it is): read
/// as [`documents`] reads files — a regular file only, its size checked first, never blocking.
/// The text of one document file named on the command line: a path, or `bundled:…`.
pub fn document_text(arg: &str) -> anyhow::Result<String> {
    match Source::parse(arg) {
        Source::Bundled(p) => bundled::FILES
            .iter()
            .find(|(f, _)| *f == p)
            .map(|(_, text)| text.to_string())
            .ok_or_else(|| anyhow::anyhow!("{arg}: no such bundled file")),
        Source::Disk(_) => read_document(arg),
    }
}

pub fn read_document(path: &str) -> anyhow::Result<String> {
    let meta = std::fs::metadata(path).map_err(|e| anyhow::anyhow!("{path}: cannot read: {e}"))?;
    let bytes = read_regular(Path::new(path), &meta).map_err(|u| anyhow::anyhow!("{}", refusal(path, &u)))?;
    text_of(&bytes).map_err(|e| anyhow::anyhow!("{path}: cannot read: {e}"))
}

/// The diagnostic for a file that was not read.
fn refusal(file: &str, unread: &Unread) -> Diagnostic {
    match unread {
        Unread::TooLarge(len) => opsgraph_core::pack::too_large(file, *len),
        Unread::File(why) => Diagnostic::error(Pos { line: 0, col: 0 }, Code::File, why.clone()).in_file(file),
    }
}

fn is_yaml(path: &str) -> bool {
    path.ends_with(".yaml") || path.ends_with(".yml")
}

/// The text of a YAML file; invalid UTF-8 is an error, as reading it as text would be.
fn text_of(bytes: &[u8]) -> std::io::Result<String> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

fn io_error(source: &Source, e: &std::io::Error) -> Diagnostic {
    Diagnostic::error(Pos { line: 0, col: 0 }, Code::File, format!("cannot read: {e}")).in_file(&source.display())
}

/// Every YAML document under the sources (files or directories), parsed and checked.
pub fn documents(sources: &[Source]) -> (Vec<Located>, Vec<Diagnostic>) {
    let mut docs = Vec::new();
    let mut diags = Vec::new();
    for source in sources {
        let Some(files) = source.files().map_err(|e| diags.push(io_error(source, &e))).ok() else { continue };
        let single = source.is_file();
        for (rel, read) in files.iter().filter(|(p, _)| single || is_yaml(p)) {
            let name = if single { source.display() } else { source.join(rel) };
            let bytes = match read {
                Ok(bytes) => bytes,
                Err(why) => {
                    diags.push(refusal(&name, why));
                    continue;
                }
            };
            let text = match text_of(bytes) {
                Ok(text) => text,
                Err(e) => {
                    diags.push(io_error(&Source::parse(&name), &e));
                    continue;
                }
            };
            let parsed = parse_file(&name, &text);
            docs.extend(parsed.docs);
            diags.extend(parsed.diagnostics);
        }
    }
    (docs, diags)
}

/// The packs under each source: the source itself when it holds `pack.yaml`, else each
/// directory below it that does.
pub fn packs(sources: &[Source]) -> (Vec<Pack>, Vec<Diagnostic>) {
    let mut packs = Vec::new();
    let mut diags = Vec::new();
    for source in sources {
        let Some(files) = source.files().map_err(|e| diags.push(io_error(source, &e))).ok() else { continue };
        // A file that was not read fails the pack it is in: it would count in its digest.
        let files: Vec<(String, Vec<u8>)> = files
            .into_iter()
            .filter_map(|(rel, read)| match read {
                Ok(bytes) => Some((rel, bytes)),
                Err(why) => {
                    diags.push(refusal(&source.join(&rel), &why));
                    None
                }
            })
            .collect();
        let roots: BTreeSet<String> = files
            .iter()
            .filter_map(|(p, _)| {
                p.strip_suffix("pack.yaml")
                    .filter(|r| r.is_empty() || r.ends_with('/'))
                    .map(|r| r.trim_end_matches('/').to_string())
            })
            .collect();
        if roots.is_empty() {
            diags.push(
                Diagnostic::error(
                    Pos { line: 0, col: 0 },
                    Code::Pack,
                    "no pack here: no pack.yaml in it or in its subdirectories",
                )
                .in_file(&source.display()),
            );
        }
        for root in roots {
            let inside = |p: &str| -> Option<String> {
                if root.is_empty() {
                    Some(p.to_string())
                } else {
                    p.strip_prefix(&root)?.strip_prefix('/').map(str::to_string)
                }
            };
            let mut mine = Vec::new();
            for (p, bytes) in &files {
                if let Some(rel) = inside(p) {
                    // A nested pack belongs to itself, not to this one.
                    if rel.contains('/') && roots_contains_prefix(&files, &root, &rel) {
                        continue;
                    }
                    mine.push((rel, bytes.as_slice()));
                }
            }
            let (mut pack, d) = check_files(&source.join(&root), &mine);
            diags.extend(d);
            // Jobs run in their own directories: a pack read from a relative path keeps the
            // absolute one, or a local job's script would be looked for under its run directory.
            if let (Some(p), Source::Disk(_)) = (pack.as_mut(), source) {
                if let Ok(abs) = std::path::absolute(&p.root) {
                    p.root = abs.display().to_string();
                }
            }
            packs.extend(pack);
        }
    }
    (packs, diags)
}

/// Checks the files of one pack (paths relative to its root) and stamps its content digest.
pub fn check_files(root: &str, files: &[(String, &[u8])]) -> (Option<Pack>, Vec<Diagnostic>) {
    let mut yaml = Vec::new();
    let mut diags = Vec::new();
    for (rel, bytes) in files.iter().filter(|(p, _)| is_yaml(p)) {
        match text_of(bytes) {
            Ok(text) => yaml.push(PackFile { path: rel.clone(), text }),
            Err(e) => diags.push(io_error(&Source::parse(&format!("{}/{rel}", root.trim_end_matches('/'))), &e)),
        }
    }
    // Scripts go along as text, so that those an evidence command names are linted too.
    for (rel, bytes) in files.iter().filter(|(p, _)| !is_yaml(p) && p.starts_with("scripts/")) {
        if let Ok(text) = std::str::from_utf8(bytes) {
            yaml.push(PackFile { path: rel.clone(), text: text.to_owned() });
        }
    }
    let all: BTreeSet<String> = files.iter().map(|(p, _)| p.clone()).collect();
    let (pack, d) = check_pack(root, &yaml, &all);
    diags.extend(d);
    let pack = pack.map(|mut p| {
        p.digest = opsgraph_core::pack::content_digest(files.iter().map(|(p, b)| (p.as_str(), *b)));
        p
    });
    (pack, diags)
}

fn roots_contains_prefix(files: &[(String, Vec<u8>)], root: &str, rel: &str) -> bool {
    // True when `rel` lies in a subdirectory of `root` that has its own pack.yaml.
    let mut dir = rel;
    while let Some((parent, _)) = dir.rsplit_once('/') {
        let manifest =
            if root.is_empty() { format!("{parent}/pack.yaml") } else { format!("{root}/{parent}/pack.yaml") };
        if files.iter().any(|(p, _)| *p == manifest) {
            return true;
        }
        dir = parent;
    }
    false
}

/// The world a plan is made in: inventory, providers, policy.
#[derive(Debug, Default)]
pub struct World {
    pub resources: Vec<Resource>,
    pub providers: Vec<Provider>,
    pub policy: CapabilityPolicy,
    pub operations: OperationsPolicy,
    pub intents: Vec<(String, Intent)>,
}

/// Routes documents by kind. Pack documents found among them are refused with a hint.
pub fn world(docs: Vec<Located>, diags: &mut Vec<Diagnostic>) -> World {
    let mut world = World::default();
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    let mut policy_origin: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut ops_origin: BTreeMap<String, String> = BTreeMap::new();
    for d in docs {
        let here = format!("{}:{}:{}", d.file, d.pos.line, d.pos.col);
        match d.doc {
            Document::Resource(r) => {
                if let Some(first) = ids.insert(format!("resource {}", r.id), here.clone()) {
                    diags.push(twice(d.pos, &d.file, format!("resource `{}`", r.id), &first));
                    continue;
                }
                world.resources.push(r);
            }
            Document::Provider(p) => {
                if let Some(first) = ids.insert(format!("provider {}", p.id), here.clone()) {
                    diags.push(twice(d.pos, &d.file, format!("provider `{}`", p.id), &first));
                    continue;
                }
                world.providers.push(p);
            }
            Document::CapabilityPolicy(p) => {
                for (cap, envs) in p.rules {
                    for (env, rule) in envs {
                        if let Some(first) = policy_origin.insert((cap.clone(), env.clone()), here.clone()) {
                            diags.push(twice(d.pos, &d.file, format!("policy for `{cap}` in `{env}`"), &first));
                            continue;
                        }
                        world.policy.rules.entry(cap.clone()).or_default().insert(env, rule);
                    }
                }
            }
            Document::OperationsPolicy(p) => {
                for (env, rule) in p.environments {
                    if let Some(first) = ops_origin.insert(env.clone(), here.clone()) {
                        diags.push(twice(d.pos, &d.file, format!("operations policy for `{env}`"), &first));
                        continue;
                    }
                    world.operations.environments.insert(env, rule);
                }
            }
            Document::Intent(i) => world.intents.push((d.file.clone(), i)),
            Document::Requires(_) => {}
            other => diags.push(
                Diagnostic::warning(
                    d.pos,
                    Code::Pack,
                    format!("a `{}` document belongs in a pack; ignored here", other.kind()),
                )
                .in_file(&d.file)
                .hint("pass pack directories with --packs"),
            ),
        }
    }
    world
}

/// `what`, declared again at `pos` of `file`; `first` is where it was declared first.
fn twice(pos: Pos, file: &str, what: String, first: &str) -> Diagnostic {
    Diagnostic::error(pos, Code::Duplicate, format!("{what} is declared twice"))
        .in_file(file)
        .hint(format!("first declared at {first}"))
}

/// Writes the bundled tree (`packs/`, `examples/`) under `root`, so its scripts exist on disk.
/// Files are rewritten only when their content differs.
pub fn materialize(root: &Path) -> std::io::Result<()> {
    for (rel, text) in bundled::FILES {
        let path = root.join(rel);
        if std::fs::read_to_string(&path).is_ok_and(|t| t == *text) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text)?;
    }
    Ok(())
}

/// The bytes of one file of a loaded pack (`rel` relative to its root), bundled or on disk.
pub fn pack_file(pack_root: &str, rel: &str) -> Option<Vec<u8>> {
    let source = Source::parse(&format!("{}/{}", pack_root.trim_end_matches('/'), rel.trim_start_matches("./")));
    source.is_file().then(|| source.files().ok()).flatten()?.pop().and_then(|(_, b)| b.ok())
}

/// The `plan_patch` document of a file.
pub fn patch_file(file: &str) -> anyhow::Result<opsgraph_core::model::PlanPatch> {
    let (docs, diags) = documents(&[Source::parse(file)]);
    if diags.iter().any(|d| d.is_error()) {
        let text: Vec<String> = diags.iter().map(ToString::to_string).collect();
        anyhow::bail!("{}", text.join("\n"));
    }
    docs.into_iter()
        .find_map(|d| match d.doc {
            opsgraph_core::model::Document::PlanPatch(p) => Some(p),
            _ => None,
        })
        .ok_or_else(|| anyhow::anyhow!("{file} holds no plan_patch document"))
}
