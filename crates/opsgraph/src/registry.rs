//! Installed packs: a file-based registry in the data directory.
//!
//! ```text
//! DATA_DIR/packs/<id>/<version>/               the pack's files
//! DATA_DIR/packs/<id>/<version>/.install.json  digest, source, installed_at, installed_by
//! ```
//!
//! The record lives inside the version directory (the loader skips names starting with `.`, so
//! it is not part of the digest), so one `rename` installs files and record together. An install
//! is written into `DATA_DIR/packs/<id>/.tmp-…`, checked, then renamed into place. Loading an
//! installed pack recomputes its digest and refuses a pack whose files no longer match.
//!
//! Archives are read in memory and never extracted as they are: every entry is checked (regular
//! files and directories only, no `..`, no absolute path, limits on size and count), and the
//! files are written from validated path components.

use std::collections::BTreeSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use opsgraph_core::pack::{Code, Diagnostic, Pack, Pos};
use serde::{Deserialize, Serialize};

use crate::load::{self, Source};

/// Most bytes of all files of one pack.
pub const MAX_TOTAL_BYTES: u64 = 16 * 1024 * 1024;
/// Most entries (files and directories) of one pack.
pub const MAX_ENTRIES: usize = 2_000;
/// Most bytes of one file.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The install record, inside the version directory.
pub const RECORD: &str = ".install.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    pub version: String,
    pub digest: String,
    /// The directory or archive it was installed from.
    pub source: String,
    pub installed_at: String,
    pub installed_by: String,
}

/// One installed pack version, checked.
#[derive(Debug)]
pub struct Installed {
    pub id: String,
    pub version: String,
    pub dir: PathBuf,
    pub record: Option<Record>,
    /// The pack when it loads and its digest matches the record.
    pub pack: Option<Pack>,
    /// Why it does not load.
    pub problems: Vec<Diagnostic>,
}

pub fn root(data_dir: &Path) -> PathBuf {
    data_dir.join("packs")
}

/// The files of a pack to install: relative `/`-separated paths (validated components) and bytes.
type Files = Vec<(String, Vec<u8>)>;

/// Every installed pack version, each loaded and its digest verified.
pub fn installed(data_dir: &Path) -> anyhow::Result<Vec<Installed>> {
    let root = root(data_dir);
    let mut out = Vec::new();
    if !root.is_dir() {
        return Ok(out);
    }
    for id in sorted_names(&root)? {
        let id_dir = root.join(&id);
        if !opsgraph_core::model::is_id(&id) || !id_dir.is_dir() {
            continue;
        }
        for version in sorted_names(&id_dir)? {
            let dir = id_dir.join(&version);
            if !opsgraph_core::model::is_id(&version) || !dir.is_dir() {
                continue;
            }
            out.push(check_installed(&id, &version, &dir));
        }
    }
    Ok(out)
}

fn sorted_names(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().to_string()))
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    Ok(names)
}

fn check_installed(id: &str, version: &str, dir: &Path) -> Installed {
    let file = dir.display().to_string();
    let problem = |msg: String| Diagnostic::error(Pos { line: 0, col: 0 }, Code::Pack, msg).in_file(&file);
    let mut problems = Vec::new();
    let record: Option<Record> = std::fs::read(dir.join(RECORD)).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let (mut packs, diags) = load::packs(&[Source::Disk(dir.to_path_buf())]);
    problems.extend(diags.into_iter().filter(Diagnostic::is_error));
    let mut pack = packs.pop();
    match (&record, &pack) {
        (None, _) => problems.push(problem(format!(
            "installed pack {id}@{version} has no readable install record ({RECORD}); \
             remove it with `opsgraph pack remove {id}@{version}` and install it again"
        ))),
        (Some(r), Some(p)) if r.digest != p.digest => problems.push(problem(format!(
            "installed pack {id}@{version} was changed after it was installed (tampering?): \
             recorded digest {}, its files now have digest {}; remove it and install it again",
            r.digest, p.digest
        ))),
        (Some(_), Some(p)) if p.manifest.id != id || p.manifest.version != version => {
            problems.push(problem(format!("the pack in {file} is {}, not {id}@{version}", p.reference())))
        }
        _ => {}
    }
    if !problems.is_empty() {
        pack = None;
    }
    Installed { id: id.into(), version: version.into(), dir: dir.to_path_buf(), record, pack, problems }
}

/// The installed packs that load, and the problems of those that do not (as errors: a tampered
/// pack stops every command that would use the installed packs).
pub fn load_installed(data_dir: &Path) -> anyhow::Result<(Vec<Pack>, Vec<Diagnostic>)> {
    let mut packs = Vec::new();
    let mut diags = Vec::new();
    for i in installed(data_dir)? {
        packs.extend(i.pack);
        diags.extend(i.problems);
    }
    Ok((packs, diags))
}

/// The same id@version is installed with other content (HTTP 409).
#[derive(Debug)]
pub struct Conflict(pub String);

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Conflict {}

/// What `install` did.
#[derive(Debug)]
pub enum Installation {
    Installed(Record),
    Replaced { record: Record, previous: String },
    AlreadyInstalled(Record),
}

/// Installs a pack from a directory or a `.tar.gz`. Nothing is written unless every check passes.
pub fn install(data_dir: &Path, path: &Path, replace: bool, actor: &str) -> anyhow::Result<Installation> {
    let source = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()).display().to_string();
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    let files = if meta.is_dir() {
        read_dir_tree(path)?
    } else {
        let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        if !(name.ends_with(".tar.gz") || name.ends_with(".tgz")) {
            bail!("{}: expected a pack directory or a .tar.gz archive", path.display());
        }
        let bytes = read_archive_file(path, &meta)?;
        read_archive(&bytes).with_context(|| format!("{}: refused", path.display()))?
    };
    install_files(data_dir, files, &source, replace, actor)
}

/// The bytes of a pack archive on disk (`meta` its metadata, links followed): a regular file only
/// (a FIFO or a device is refused, never opened), within the archive limit, checked first.
pub fn read_archive_file(path: &Path, meta: &std::fs::Metadata) -> anyhow::Result<Vec<u8>> {
    if !meta.is_file() {
        bail!("{}: refused: not a regular file or directory", path.display());
    }
    if meta.len() > MAX_TOTAL_BYTES {
        bail!("{}: refused: the archive is {} bytes, over the limit of {MAX_TOTAL_BYTES}", path.display(), meta.len());
    }
    use std::os::unix::fs::OpenOptionsExt as _;
    // Without blocking: a FIFO swapped in after the check does not hang the read.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        bail!("{}: refused: not a regular file or directory", path.display());
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOTAL_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() as u64 > MAX_TOTAL_BYTES {
        bail!("{}: refused: the archive grew over the limit of {MAX_TOTAL_BYTES} while read", path.display());
    }
    Ok(bytes)
}

/// The pack `files` hold, checked as an install checks it (one pack, valid, a version that can
/// name a directory).
fn check_pack(files: &Files, source: &str) -> anyhow::Result<Pack> {
    if let Some((nested, _)) = files.iter().find(|(p, _)| p.ends_with("/pack.yaml")) {
        bail!("{source}: one pack per install: `{nested}` is a second pack inside it");
    }
    let borrowed: Vec<(String, &[u8])> = files.iter().map(|(p, b)| (p.clone(), b.as_slice())).collect();
    let (pack, diags) = load::check_files(source, &borrowed);
    let errors: Vec<String> = diags.iter().filter(|d| d.is_error()).map(ToString::to_string).collect();
    let Some(pack) = pack.filter(|_| errors.is_empty()) else {
        bail!("{source} is not a valid pack; nothing installed:\n{}", errors.join("\n"));
    };
    let (id, version) = (&pack.manifest.id, &pack.manifest.version);
    if !opsgraph_core::model::is_id(version) {
        bail!("pack {id}: version `{version}` cannot name a directory: use letters, digits, `.`, `_`, `-`");
    }
    Ok(pack)
}

/// The pack in a `.tar.gz` held in memory, every entry checked; nothing is written.
pub fn inspect_archive(bytes: &[u8], source: &str) -> anyhow::Result<Pack> {
    if bytes.len() as u64 > MAX_TOTAL_BYTES {
        bail!("{source}: refused: the archive is {} bytes, over the limit of {MAX_TOTAL_BYTES}", bytes.len());
    }
    let files = read_archive(bytes).with_context(|| format!("{source}: refused"))?;
    check_pack(&files, source)
}

/// Installs a pack from a `.tar.gz` held in memory (what the server receives); `source` is
/// recorded as where it came from.
pub fn install_archive(
    data_dir: &Path,
    bytes: &[u8],
    source: &str,
    replace: bool,
    actor: &str,
) -> anyhow::Result<Installation> {
    if bytes.len() as u64 > MAX_TOTAL_BYTES {
        bail!("{source}: refused: the archive is {} bytes, over the limit of {MAX_TOTAL_BYTES}", bytes.len());
    }
    let files = read_archive(bytes).with_context(|| format!("{source}: refused"))?;
    install_files(data_dir, files, source, replace, actor)
}

/// A pack directory as a `.tar.gz` in memory (for sending to a server), read with the checks of
/// a directory install: no links, no special files, the same limits.
pub fn archive_dir(dir: &Path) -> anyhow::Result<Vec<u8>> {
    let files = read_dir_tree(dir)?;
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut b = tar::Builder::new(gz);
    for (path, bytes) in &files {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append_data(&mut h, path, bytes.as_slice())?;
    }
    Ok(b.into_inner()?.finish()?)
}

fn install_files(
    data_dir: &Path,
    files: Files,
    source: &str,
    replace: bool,
    actor: &str,
) -> anyhow::Result<Installation> {
    let pack = check_pack(&files, source)?;
    let (id, version) = (pack.manifest.id.clone(), pack.manifest.version.clone());
    let id_dir = root(data_dir).join(&id);
    let target = id_dir.join(&version);
    let record = Record {
        id: id.clone(),
        version: version.clone(),
        digest: pack.digest.clone(),
        source: source.to_string(),
        installed_at: now(),
        installed_by: actor.to_string(),
    };
    let mut previous = None;
    if target.exists() {
        let old = check_installed(&id, &version, &target);
        let old_digest = old.record.as_ref().map(|r| r.digest.clone());
        match old_digest {
            Some(d) if d == pack.digest && old.problems.is_empty() => {
                return Ok(Installation::AlreadyInstalled(old.record.unwrap_or(record)));
            }
            _ if replace => previous = Some(old_digest.unwrap_or_else(|| "(unknown)".into())),
            d => {
                return Err(Conflict(format!(
                    "conflict (409): pack {id}@{version} is already installed with digest {}; {source} has digest {}. \
                     Give the new content a new version, or pass --replace",
                    d.unwrap_or_else(|| "(unreadable record)".into()),
                    pack.digest
                ))
                .into())
            }
        }
    }
    std::fs::create_dir_all(&id_dir).with_context(|| format!("cannot create {}", id_dir.display()))?;
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let tmp = id_dir.join(format!(".tmp-{version}-{}-{stamp}", std::process::id()));
    let guard = RemoveOnDrop(tmp.clone());
    std::fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    for (rel, bytes) in &files {
        let mut path = tmp.clone();
        for comp in rel.split('/') {
            // Components were validated when the files were read; checked again here because a
            // wrong one would write outside the pack.
            if comp.is_empty() || comp == "." || comp == ".." || comp.contains('\\') || comp.contains('\0') {
                bail!("internal error: unchecked path `{rel}`");
            }
            path.push(comp);
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        write_new(&path, bytes)?;
    }
    write_new(&tmp.join(RECORD), &serde_json::to_vec_pretty(&record)?)?;
    // What was written is what was checked.
    let (written, _) = load::packs(&[Source::Disk(tmp.clone())]);
    match written.first() {
        Some(p) if p.digest == pack.digest => {}
        other => bail!(
            "the written pack does not match what was checked ({} != {}); nothing installed",
            other.map_or("(does not load)", |p| p.digest.as_str()),
            pack.digest
        ),
    }
    if previous.is_some() {
        let old = id_dir.join(format!(".old-{version}-{}-{stamp}", std::process::id()));
        std::fs::rename(&target, &old).with_context(|| format!("cannot move {} aside", target.display()))?;
        std::fs::rename(&tmp, &target).with_context(|| format!("cannot install into {}", target.display()))?;
        let _ = std::fs::remove_dir_all(&old);
    } else {
        std::fs::rename(&tmp, &target).with_context(|| format!("cannot install into {}", target.display()))?;
    }
    drop(guard);
    Ok(match previous {
        Some(previous) => Installation::Replaced { record, previous },
        None => Installation::Installed(record),
    })
}

fn write_new(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("cannot write {}", path.display()))?;
    f.sync_all().with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes an installed pack version.
pub fn remove(data_dir: &Path, id: &str, version: &str) -> anyhow::Result<()> {
    if !opsgraph_core::model::is_id(id) || !opsgraph_core::model::is_id(version) {
        bail!("`{id}@{version}` is not a pack reference (id@version)");
    }
    let dir = root(data_dir).join(id).join(version);
    if !dir.is_dir() {
        bail!("pack {id}@{version} is not installed in {}", root(data_dir).display());
    }
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    // Out of sight first (one rename), then deleted.
    let gone = root(data_dir).join(id).join(format!(".removed-{version}-{}-{stamp}", std::process::id()));
    std::fs::rename(&dir, &gone).with_context(|| format!("cannot remove {}", dir.display()))?;
    std::fs::remove_dir_all(&gone).with_context(|| format!("cannot remove {}", gone.display()))?;
    let id_dir = root(data_dir).join(id);
    if sorted_names(&id_dir).is_ok_and(|n| n.is_empty()) {
        let _ = std::fs::remove_dir(&id_dir);
    }
    Ok(())
}

/// A path of an archive entry or directory walk, checked component by component: `/`-separated,
/// relative, no `..`, no backslash or NUL. `.` and empty components are dropped. `Ok(None)` for a
/// path that is skipped (a component starting with `.`, as the loader skips them; or the root).
fn clean_path(raw: &str) -> Result<Option<String>, &'static str> {
    if raw.starts_with('/') {
        return Err("an absolute path");
    }
    if raw.contains('\\') {
        return Err("a backslash in the path");
    }
    if raw.contains('\0') {
        return Err("a NUL byte in the path");
    }
    let mut comps = Vec::new();
    for comp in raw.split('/') {
        match comp {
            "" | "." => {}
            ".." => return Err("a `..` component (the path leaves the pack)"),
            c => comps.push(c),
        }
    }
    if comps.is_empty() || comps.iter().any(|c| c.starts_with('.')) {
        return Ok(None);
    }
    Ok(Some(comps.join("/")))
}

/// Counts and sizes against the limits; refuses duplicates and a file that is also a directory.
#[derive(Default)]
struct Limits {
    entries: usize,
    total: u64,
    files: BTreeSet<String>,
    dirs: BTreeSet<String>,
}

impl Limits {
    fn entry(&mut self, name: &str) -> anyhow::Result<()> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            bail!("entry `{name}`: more than {MAX_ENTRIES} entries (limit)");
        }
        Ok(())
    }

    fn size(&mut self, name: &str, size: u64) -> anyhow::Result<()> {
        if size > MAX_FILE_BYTES {
            bail!("entry `{name}`: {size} bytes, over the limit of {MAX_FILE_BYTES} per file");
        }
        self.total += size;
        if self.total > MAX_TOTAL_BYTES {
            bail!("entry `{name}`: the files add up to more than {MAX_TOTAL_BYTES} bytes (limit)");
        }
        Ok(())
    }

    fn file(&mut self, name: &str, path: &str) -> anyhow::Result<()> {
        if self.dirs.contains(path) || !self.files.insert(path.to_string()) {
            bail!("entry `{name}`: duplicate path `{path}`");
        }
        let mut dir = path;
        while let Some((parent, _)) = dir.rsplit_once('/') {
            if self.files.contains(parent) {
                bail!("entry `{name}`: `{parent}` is both a file and a directory");
            }
            self.dirs.insert(parent.to_string());
            dir = parent;
        }
        Ok(())
    }
}

/// Reads a `.tar.gz` in memory. Only regular files and directories are accepted.
fn read_archive(bytes: &[u8]) -> anyhow::Result<Files> {
    use tar::EntryType;
    // A bound on the decompressed stream too: headers and padding of MAX_ENTRIES entries fit in
    // the second half.
    let gz = flate2::read::GzDecoder::new(bytes).take(2 * MAX_TOTAL_BYTES);
    let mut archive = tar::Archive::new(gz);
    let mut limits = Limits::default();
    let mut files = Vec::new();
    let entries = archive.entries().context("not a tar.gz archive")?;
    for entry in entries {
        let mut entry = entry.context("a damaged or truncated archive")?;
        let raw = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).to_string();
        let name = name.as_str();
        limits.entry(name)?;
        let kind = entry.header().entry_type();
        let rule = match kind {
            EntryType::Regular | EntryType::Continuous | EntryType::Directory => None,
            // A pax global header (`git archive` writes one) is metadata, not a file.
            EntryType::XGlobalHeader => continue,
            EntryType::Symlink => Some("a symbolic link (links are refused)"),
            EntryType::Link => Some("a hard link (links are refused)"),
            EntryType::Char | EntryType::Block => Some("a device file"),
            EntryType::Fifo => Some("a FIFO"),
            _ => Some("not a regular file or directory"),
        };
        if let Some(rule) = rule {
            bail!("entry `{name}`: {rule}");
        }
        let path = match std::str::from_utf8(&raw) {
            Ok(p) => clean_path(p).map_err(|rule| anyhow::anyhow!("entry `{name}`: {rule}"))?,
            Err(_) => bail!("entry `{name}`: the path is not UTF-8"),
        };
        if kind == EntryType::Directory {
            continue;
        }
        let size = entry.header().size().with_context(|| format!("entry `{name}`: a damaged header"))?;
        limits.size(name, size)?;
        let Some(path) = path else { continue };
        limits.file(name, &path)?;
        let mut content = Vec::with_capacity(size as usize);
        (&mut entry).take(MAX_FILE_BYTES + 1).read_to_end(&mut content).with_context(|| format!("entry `{name}`"))?;
        if content.len() as u64 != size {
            bail!("entry `{name}`: truncated ({} of {size} bytes)", content.len());
        }
        files.push((path, content));
    }
    strip_top(files)
}

/// Accepts `pack.yaml` at the root, or every file under one top-level directory holding it.
fn strip_top(files: Files) -> anyhow::Result<Files> {
    if files.iter().any(|(p, _)| p == "pack.yaml") {
        return Ok(files);
    }
    let tops: BTreeSet<&str> = files.iter().map(|(p, _)| p.split('/').next().unwrap_or_default()).collect();
    match tops.iter().next() {
        Some(top) if tops.len() == 1 && files.iter().any(|(p, _)| *p == format!("{top}/pack.yaml")) => {
            let prefix = format!("{top}/");
            Ok(files.into_iter().map(|(p, b)| (p.strip_prefix(&prefix).unwrap_or(&p).to_string(), b)).collect())
        }
        _ => bail!("no pack.yaml at the root or under a single top-level directory"),
    }
}

/// Reads a pack directory for install: no links, no special files, the same limits as archives.
fn read_dir_tree(root: &Path) -> anyhow::Result<Files> {
    let mut limits = Limits::default();
    let mut files = Vec::new();
    walk(root, root, &mut limits, &mut files)?;
    if !files.iter().any(|(p, _)| p == "pack.yaml") {
        bail!("{}: no pack.yaml in it", root.display());
    }
    Ok(files)
}

/// The paths in a directory, sorted (a walk in the same order on every machine).
pub(crate) fn sorted_entries(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    Ok(entries)
}

fn walk(root: &Path, dir: &Path, limits: &mut Limits, out: &mut Files) -> anyhow::Result<()> {
    for path in sorted_entries(dir)? {
        let rel = path.strip_prefix(root).unwrap_or(&path);
        let Some(rel) = rel.to_str() else { bail!("{}: refused: the path is not UTF-8", path.display()) };
        let Some(clean) = clean_path(rel).map_err(|rule| anyhow::anyhow!("{}: refused: {rule}", path.display()))?
        else {
            continue;
        };
        limits.entry(rel).with_context(|| format!("{}: refused", root.display()))?;
        let meta = std::fs::symlink_metadata(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            bail!("{}: refused: entry `{rel}`: a symbolic link (links are refused)", root.display());
        } else if ft.is_dir() {
            walk(root, &path, limits, out)?;
        } else if ft.is_file() {
            limits.size(rel, meta.len()).with_context(|| format!("{}: refused", root.display()))?;
            limits.file(rel, &clean).with_context(|| format!("{}: refused", root.display()))?;
            let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
            if bytes.len() as u64 > MAX_FILE_BYTES {
                bail!("{}: refused: entry `{rel}` grew over the limit while read", root.display());
            }
            out.push((clean, bytes));
        } else {
            bail!("{}: refused: entry `{rel}`: not a regular file or directory", root.display());
        }
    }
    Ok(())
}

fn now() -> String {
    opsgraph_store::now()
}

/// Which loaded packs win: an installed pack replaces a bundled one of the same `id@version`.
pub fn merge(bundled: Vec<Pack>, installed: Vec<Pack>) -> Vec<Pack> {
    let installed_refs: BTreeSet<String> = installed.iter().map(Pack::reference).collect();
    bundled.into_iter().filter(|p| !installed_refs.contains(&p.reference())).chain(installed).collect()
}

/// Where packs come from. With `materialize`, bundled packs are written into the data directory
/// first, so their scripts exist on disk (commands that run jobs need that; `plan` does not).
pub fn pack_sources(packs: &[String], data_dir: &Path, materialize: bool) -> anyhow::Result<Vec<Source>> {
    let packs: Vec<String> = if packs.is_empty() { vec!["bundled:packs".into()] } else { packs.to_vec() };
    packs
        .iter()
        .map(|p| match Source::parse(p) {
            Source::Bundled(rel) if materialize => {
                let root = data_dir.join("bundled");
                crate::load::materialize(&root)?;
                Ok(Source::Disk(root.join(rel)))
            }
            bundled @ Source::Bundled(_) => Ok(bundled),
            // Scripts run from the operation's run directory: pack paths must not be relative.
            Source::Disk(path) => Ok(Source::Disk(std::path::absolute(&path).unwrap_or(path))),
        })
        .collect()
}

/// The packs a command uses: those of `--packs`; without it, the bundled packs plus the packs
/// installed in the data directory (an installed `id@version` replaces the bundled one). Several
/// versions of a pack may be loaded side by side; the plan picks one.
pub fn load_packs(
    packs: &[String],
    data_dir: &Path,
    materialize: bool,
) -> anyhow::Result<(Vec<opsgraph_core::pack::Pack>, Vec<opsgraph_core::pack::Diagnostic>)> {
    let (loaded, mut diags) = crate::load::packs(&pack_sources(packs, data_dir, materialize)?);
    if !packs.is_empty() {
        return Ok((loaded, diags));
    }
    let (installed, d) = load_installed(data_dir)?;
    diags.extend(d);
    Ok((merge(loaded, installed), diags))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked_component_by_component() {
        assert_eq!(clean_path("a/b.yaml"), Ok(Some("a/b.yaml".into())));
        assert_eq!(clean_path("./a//b/"), Ok(Some("a/b".into())));
        assert_eq!(clean_path("a/.hidden"), Ok(None));
        assert_eq!(clean_path("."), Ok(None));
        for bad in ["/etc/passwd", "../x", "a/../../x", "a/..", "a\\b", "a\0b"] {
            assert!(clean_path(bad).is_err(), "{bad:?}");
        }
    }
}
