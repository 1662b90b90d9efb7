//! Pack catalogues: `pack search [TERM] --from URL` and `pack install NAME[@VERSION] --from URL`.
//!
//! A catalogue is a static directory any web server can serve (or a local directory):
//!
//! ```text
//! index.json                    {"catalogue": 1, "packs": [ENTRY, ...]}
//! tempo/tempo-1.1.0.tar.gz      a pack archive, as `opsgraph pack install` takes it
//! tempo/tempo-1.1.0.tar.gz.minisig   its minisign signature (ed25519, prehashed)
//! ```
//!
//! An entry names the pack (`name`, `version`, `description`), the archive (`tarball`, a path
//! relative to the index), its `sha256` and its `signature` (a path too); `digest` optionally pins
//! the pack's content digest (`sha256:…`, as `pack validate` prints it). Everything is checked
//! before anything is written: the archive's sha256 against the entry, its signature against the
//! trusted keys (`trusted_keys:` of `DATA_DIR/config.yaml` and `--trusted-key`; none configured is
//! a refusal — deny by default), the pack in it against the entry's name, version and digest, and
//! then every check of an archive install (`registry::install_archive`). A refusal carries a
//! stable code ([`Refusal`]) and installs nothing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::Digest as _;

use crate::registry::{self, MAX_TOTAL_BYTES};

/// The file a catalogue directory serves its entries from.
pub const INDEX: &str = "index.json";
/// The format version of the index this binary reads.
pub const FORMAT: u64 = 1;
/// Most bytes of an index.
pub const MAX_INDEX_BYTES: u64 = 4 * 1024 * 1024;
/// Most bytes of a signature file (a minisign signature is about 300).
pub const MAX_SIGNATURE_BYTES: u64 = 4096;

/// A refusal with a stable code (docs/errors.md, "Pack catalogue errors"): nothing was installed.
#[derive(Debug)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

fn refuse(code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal { code, message: message.into() }
}

/// The index of a catalogue.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Index {
    /// The format version: 1.
    pub catalogue: u64,
    pub packs: Vec<Entry>,
}

/// One pack version of a catalogue.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub description: String,
    /// The archive, relative to the index.
    pub tarball: String,
    /// The archive's SHA-256, hex (`sha256:` in front is accepted).
    pub sha256: String,
    /// The archive's minisign signature, relative to the index; an entry without one is refused
    /// at install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The pack's content digest (`sha256:…`), pinned when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Where a catalogue is: an HTTP(S) URL, or a local directory (`file://` or a path). Either names
/// the directory holding `index.json`, or the index file itself (ending in `.json`).
#[derive(Clone)]
pub enum Location {
    /// The index's URL and the URL of the directory holding it (ending in `/`).
    Http { index: String, base: String, agent: ureq::Agent },
    /// The index file.
    Dir { index: PathBuf },
}

impl Location {
    pub fn parse(from: &str) -> Result<Location, Refusal> {
        let lower = from.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            // What the URL holds is recorded (install record, audit row) and printed: no secret.
            let authority = from.split_once("://").map_or("", |(_, r)| r.split('/').next().unwrap_or(""));
            if authority.contains('@') || from.contains(['?', '#']) {
                return Err(refuse(
                    "catalogue_invalid",
                    "a catalogue URL with credentials, a query or a fragment is refused: it is recorded in the \
                     install record and the audit log; serve the catalogue without them",
                ));
            }
            let index = if from.ends_with(".json") {
                from.to_string()
            } else {
                format!("{}/{INDEX}", from.trim_end_matches('/'))
            };
            let base = index[..index.rfind('/').map_or(index.len(), |i| i + 1)].to_string();
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(60)))
                .build()
                .into();
            return Ok(Location::Http { index, base, agent });
        }
        if lower.contains("://") && !lower.starts_with("file://") {
            return Err(refuse(
                "catalogue_invalid",
                format!("`{from}`: a catalogue is an http(s):// or file:// URL, or a directory"),
            ));
        }
        let path = PathBuf::from(from.strip_prefix("file://").unwrap_or(from));
        let index = if path.is_dir() { path.join(INDEX) } else { path };
        Ok(Location::Dir { index })
    }

    /// Where the index is, for messages and records.
    pub fn index(&self) -> String {
        match self {
            Location::Http { index, .. } => index.clone(),
            Location::Dir { index } => index.display().to_string(),
        }
    }

    /// Where `rel` (a path from the index, checked) is.
    fn locate(&self, rel: &str) -> Result<String, Refusal> {
        check_relative(rel)?;
        Ok(match self {
            Location::Http { base, .. } => format!("{base}{rel}"),
            Location::Dir { index } => index.parent().unwrap_or(Path::new(".")).join(rel).display().to_string(),
        })
    }

    /// The bytes at `at` (a URL or path this location made), at most `limit` of them.
    fn fetch(&self, at: &str, limit: u64) -> Result<Vec<u8>, Refusal> {
        let failed = |why: String| refuse("catalogue_fetch_failed", format!("{at}: {why}"));
        match self {
            Location::Http { agent, .. } => {
                let mut resp = agent.get(at).call().map_err(|e| failed(format!("cannot fetch: {e}")))?;
                let status = resp.status();
                if !status.is_success() {
                    return Err(failed(format!("HTTP {status}")));
                }
                resp.body_mut().with_config().limit(limit).read_to_vec().map_err(|e| match e {
                    ureq::Error::BodyExceedsLimit(_) => failed(format!("over the limit of {limit} bytes")),
                    e => failed(format!("cannot read: {e}")),
                })
            }
            Location::Dir { .. } => {
                let path = Path::new(at);
                let meta = std::fs::metadata(path).map_err(|e| failed(format!("cannot read: {e}")))?;
                if !meta.is_file() {
                    return Err(failed("not a regular file".into()));
                }
                if meta.len() > limit {
                    return Err(failed(format!("{} bytes, over the limit of {limit}", meta.len())));
                }
                registry::read_archive_file(path, &meta).map_err(|e| failed(format!("{e:#}")))
            }
        }
    }

    /// The catalogue's index, checked.
    pub fn read_index(&self) -> Result<Index, Refusal> {
        let at = self.index();
        let bytes = self.fetch(&at, MAX_INDEX_BYTES)?;
        let index: Index = serde_json::from_slice(&bytes)
            .map_err(|e| refuse("catalogue_invalid", format!("{at}: not a pack catalogue index: {e}")))?;
        if index.catalogue != FORMAT {
            return Err(refuse(
                "catalogue_invalid",
                format!("{at}: catalogue format {}; this opsgraph reads format {FORMAT}", index.catalogue),
            ));
        }
        for e in &index.packs {
            if !opsgraph_core::model::is_id(&e.name) || !opsgraph_core::model::is_id(&e.version) {
                return Err(refuse(
                    "catalogue_invalid",
                    format!("{at}: `{}@{}` is not a pack reference", e.name, e.version),
                ));
            }
        }
        Ok(index)
    }
}

/// A path inside the catalogue: relative, `/`-separated, no `..`, no query or fragment.
fn check_relative(rel: &str) -> Result<(), Refusal> {
    let ok = !rel.is_empty()
        && !rel.starts_with('/')
        && rel.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && rel.chars().all(|c| c.is_ascii_alphanumeric() || "._-+@/".contains(c));
    if ok {
        Ok(())
    } else {
        Err(refuse(
            "catalogue_invalid",
            format!("`{rel}`: a catalogue entry names a relative path inside the catalogue (letters, digits, `._-+@/`, no `..`)"),
        ))
    }
}

/// A minisign public key packs may be signed with, and where it was configured.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    /// The key id as minisign prints it (16 hex digits).
    pub id: String,
    pub key: minisign_verify::PublicKey,
    pub from: String,
}

/// The key id of a minisign key or signature line (base64 of algorithm, 8-byte id, ...).
fn key_id(line: &str) -> Option<String> {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD.decode(line.trim()).ok()?;
    let id: [u8; 8] = raw.get(2..10)?.try_into().ok()?;
    Some(format!("{:016X}", u64::from_le_bytes(id)))
}

impl TrustedKey {
    /// A key given as its base64 line (`RW…`), or a `minisign.pub` file holding it.
    pub fn parse(value: &str, from: &str) -> Result<TrustedKey, Refusal> {
        let bad =
            |why: &str| refuse("bad_trusted_key", format!("{from}: `{value}` is not a minisign public key: {why}"));
        let path = Path::new(value);
        let line = if path.is_file() {
            let text = std::fs::read_to_string(path).map_err(|e| bad(&e.to_string()))?;
            text.lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with("untrusted comment:"))
                .unwrap_or("")
                .to_string()
        } else {
            value.trim().to_string()
        };
        let key = minisign_verify::PublicKey::from_base64(&line).map_err(|e| bad(&e.to_string()))?;
        let id = key_id(&line).ok_or_else(|| bad("no key id"))?;
        Ok(TrustedKey { id, key, from: from.to_string() })
    }
}

/// The trusted keys: `trusted_keys:` of `DATA_DIR/config.yaml`, then each `--trusted-key`.
pub fn trusted_keys(data_dir: &Path, extra: &[String]) -> anyhow::Result<Vec<TrustedKey>> {
    let path = data_dir.join("config.yaml");
    let mut keys = Vec::new();
    if let Ok(text) = std::fs::read_to_string(&path) {
        let docs = opsgraph_core::pack::yaml::parse_stream(&text)
            .map_err(|e| anyhow::anyhow!("{}:{}: {}", path.display(), e.pos.line, e.message))?;
        let config = docs.first().map(opsgraph_core::pack::shape::to_json).unwrap_or(Value::Null);
        match &config["trusted_keys"] {
            Value::Null => {}
            Value::Array(list) => {
                for k in list {
                    let Some(k) = k.as_str() else {
                        return Err(refuse(
                            "bad_trusted_key",
                            format!("{}: trusted_keys: {k} is not a string", path.display()),
                        )
                        .into());
                    };
                    keys.push(TrustedKey::parse(k, &format!("{} trusted_keys", path.display()))?);
                }
            }
            other => {
                return Err(refuse(
                    "bad_trusted_key",
                    format!("{}: trusted_keys is a list of minisign public keys, not {other}", path.display()),
                )
                .into())
            }
        }
    }
    for k in extra {
        keys.push(TrustedKey::parse(k, "--trusted-key")?);
    }
    Ok(keys)
}

/// The entry `reference` (`name` for the highest version, `name@version`) names.
pub fn pick<'a>(index: &'a Index, reference: &str, at: &str) -> Result<&'a Entry, Refusal> {
    let (name, version) = opsgraph_core::pack::split_pack_ref(reference);
    let mut same: Vec<&Entry> = index.packs.iter().filter(|e| e.name == name).collect();
    same.sort_by(|a, b| opsgraph_core::pack::compare_versions(&a.version, &b.version));
    let found = match version {
        Some(v) => same.iter().find(|e| e.version == v).copied(),
        None => same.last().copied(),
    };
    found.ok_or_else(|| {
        let versions: Vec<&str> = same.iter().map(|e| e.version.as_str()).collect();
        let known = if versions.is_empty() {
            format!("it has no pack `{name}`")
        } else {
            format!("versions of {name} there: {}", versions.join(", "))
        };
        refuse("pack_not_in_catalogue", format!("no pack `{reference}` in the catalogue {at} ({known})"))
    })
}

/// A pack archive fetched from a catalogue and verified: its sha256, its signature by a trusted
/// key, and the pack in it is the entry's.
#[derive(Debug)]
pub struct Verified {
    pub entry: Entry,
    pub archive: Vec<u8>,
    /// The pack's content digest.
    pub digest: String,
    /// The id of the trusted key that signed it.
    pub signer: String,
    /// Where it came from, as the install record says it.
    pub source: String,
}

/// Fetches `reference` from the catalogue at `from` and verifies it; nothing is written.
pub fn fetch_verified(from: &str, reference: &str, keys: &[TrustedKey]) -> Result<Verified, Refusal> {
    if keys.is_empty() {
        return Err(refuse(
            "no_trusted_keys",
            "no trusted keys: packs from a catalogue are installed only when signed by a key you trust; \
             add its minisign public key to `trusted_keys:` in DATA_DIR/config.yaml or pass --trusted-key",
        ));
    }
    let loc = Location::parse(from)?;
    let index = loc.read_index()?;
    let entry = pick(&index, reference, &loc.index())?.clone();
    let reference = format!("{}@{}", entry.name, entry.version);
    let tarball = loc.locate(&entry.tarball)?;
    let archive = loc.fetch(&tarball, MAX_TOTAL_BYTES)?;
    // The digest the index pins.
    let want = entry.sha256.strip_prefix("sha256:").unwrap_or(&entry.sha256).to_ascii_lowercase();
    let got = sha256_hex(&archive);
    if want != got {
        return Err(refuse(
            "pack_digest_mismatch",
            format!("{tarball}: sha256 {got}, but the catalogue says {want} for {reference}; nothing installed"),
        ));
    }
    // The signature, by a trusted key.
    let Some(sig_rel) = &entry.signature else {
        return Err(refuse(
            "pack_unsigned",
            format!("{reference} in {} has no signature; nothing installed", loc.index()),
        ));
    };
    let sig_at = loc.locate(sig_rel)?;
    let sig_bytes = loc.fetch(&sig_at, MAX_SIGNATURE_BYTES).map_err(|e| {
        refuse("pack_unsigned", format!("{reference}: its signature cannot be had ({}); nothing installed", e.message))
    })?;
    let bad = |why: String| refuse("pack_bad_signature", format!("{sig_at}: {why}; nothing installed"));
    let sig_text = String::from_utf8(sig_bytes).map_err(|_| bad("not a minisign signature (not text)".into()))?;
    let signature =
        minisign_verify::Signature::decode(&sig_text).map_err(|e| bad(format!("not a minisign signature ({e})")))?;
    let signed_by = sig_text.lines().nth(1).and_then(key_id).unwrap_or_else(|| "(unknown)".into());
    let mut signer = None;
    for k in keys {
        match k.key.verify(&archive, &signature, false) {
            Ok(()) => {
                signer = Some(k.id.clone());
                break;
            }
            Err(minisign_verify::Error::UnexpectedKeyId) => continue,
            Err(minisign_verify::Error::UnexpectedAlgorithm) => {
                return Err(bad("a legacy (not prehashed) signature: sign with a current minisign".into()))
            }
            Err(e) => {
                return Err(bad(format!("the signature of key {signed_by} does not match {tarball} ({e})")));
            }
        }
    }
    let Some(signer) = signer else {
        let trusted: Vec<&str> = keys.iter().map(|k| k.id.as_str()).collect();
        return Err(refuse(
            "pack_untrusted_key",
            format!(
                "{reference} is signed by key {signed_by}, which is not trusted (trusted: {}); nothing installed",
                trusted.join(", ")
            ),
        ));
    };
    // The pack in it is the one the entry names.
    let source = format!("{tarball} (catalogue {}, signed by key {signer})", loc.index());
    let pack = registry::inspect_archive(&archive, &tarball).map_err(|e| refuse("pack_refused", format!("{e:#}")))?;
    if pack.reference() != reference {
        return Err(refuse(
            "pack_mismatch",
            format!(
                "{tarball} holds pack {}, not {reference} as the catalogue says; nothing installed",
                pack.reference()
            ),
        ));
    }
    if let Some(d) = entry.digest.as_deref().filter(|d| *d != pack.digest) {
        return Err(refuse(
            "pack_digest_mismatch",
            format!("{reference}: the pack's digest is {}, the catalogue pins {d}; nothing installed", pack.digest),
        ));
    }
    Ok(Verified { entry, archive, digest: pack.digest, signer, source })
}

/// `pack search [TERM] --from URL`: the catalogue's packs whose name or description holds TERM.
pub fn search(from: &str, term: Option<&str>, output: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    let loc = Location::parse(from)?;
    let index = loc.read_index()?;
    let term = term.map(str::to_lowercase);
    let mut rows: Vec<&Entry> = index
        .packs
        .iter()
        .filter(|e| {
            term.as_deref()
                .is_none_or(|t| e.name.to_lowercase().contains(t) || e.description.to_lowercase().contains(t))
        })
        .collect();
    rows.sort_by(|a, b| {
        a.name.cmp(&b.name).then_with(|| opsgraph_core::pack::compare_versions(&a.version, &b.version))
    });
    let value: Vec<Value> = rows
        .iter()
        .map(|e| {
            json!({"name": e.name, "version": e.version, "description": e.description,
                   "signed": e.signature.is_some(), "sha256": e.sha256, "digest": e.digest})
        })
        .collect();
    match output {
        "json" => writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?,
        "yaml" => write!(out, "{}", crate::render::to_yaml(&Value::Array(value), 0))?,
        _ => {
            if rows.is_empty() {
                writeln!(out, "no pack in {} matches", loc.index())?;
            }
            let width = rows.iter().map(|e| e.name.len() + e.version.len() + 1).max().unwrap_or(0);
            for e in rows {
                let reference = format!("{}@{}", e.name, e.version);
                let unsigned = if e.signature.is_some() { "" } else { " (unsigned)" };
                writeln!(out, "{reference:width$}  {}{unsigned}", e.description)?;
            }
        }
    }
    Ok(0)
}

/// Prints a refusal as `error[CODE]: message` and returns exit status 1; other errors pass.
pub fn report(result: anyhow::Result<u8>, err: &mut dyn Write) -> anyhow::Result<u8> {
    match result {
        Err(e) => match e.downcast::<Refusal>() {
            Ok(r) => {
                writeln!(err, "error[{}]: {}", r.code, r.message)?;
                Ok(1)
            }
            Err(e) => Err(e),
        },
        ok => ok,
    }
}

/// A `sha256` hex digest of `bytes`, as an index entry gives it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `pack index DIR`: the `index.json` of a catalogue directory, from the pack archives under it
/// (`*.tar.gz`, `*.tgz`, each checked as an install checks it) and the `.minisig` beside each.
/// Descriptions are the packs' titles. Printed; the publisher writes it to `DIR/index.json`.
pub fn index(dir: &Path, out: &mut dyn Write) -> anyhow::Result<u8> {
    fn walk(root: &Path, dir: &Path, found: &mut Vec<String>) -> anyhow::Result<()> {
        for path in crate::registry::sorted_entries(dir)? {
            let meta = std::fs::symlink_metadata(&path)?;
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().to_string();
            if meta.is_dir() && !rel.rsplit('/').next().unwrap_or_default().starts_with('.') {
                walk(root, &path, found)?;
            } else if meta.is_file() && (rel.ends_with(".tar.gz") || rel.ends_with(".tgz")) {
                found.push(rel);
            }
        }
        Ok(())
    }
    let mut archives = Vec::new();
    walk(dir, dir, &mut archives)?;
    let mut packs = Vec::new();
    for rel in archives {
        check_relative(&rel)?;
        let path = dir.join(&rel);
        let bytes = registry::read_archive_file(&path, &std::fs::metadata(&path)?)?;
        let pack = registry::inspect_archive(&bytes, &path.display().to_string())?;
        let signature = format!("{rel}.minisig");
        packs.push(Entry {
            name: pack.manifest.id.clone(),
            version: pack.manifest.version.clone(),
            description: pack.manifest.title.clone().unwrap_or_default(),
            tarball: rel,
            sha256: sha256_hex(&bytes),
            signature: dir.join(&signature).is_file().then_some(signature),
            digest: Some(pack.digest.clone()),
        });
    }
    writeln!(out, "{}", serde_json::to_string_pretty(&Index { catalogue: FORMAT, packs })?)?;
    Ok(0)
}
