use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use zeroize::Zeroizing;

use crate::key::{decode_hex, KeyId, MasterKey, KEY_LEN};
use crate::{sealed, Error, Result, Secret};

/// The environment variable that holds the master key(s); when set, the key file is not read.
pub const ENV_VAR: &str = "OPSGRAPH_MASTER_KEY";

/// The key file's name inside the data directory.
pub const KEY_FILE: &str = "master.key";

const FILE_HEADER: &str = "\
# Opsgraph master keys. Anyone with this file and the database reads every secret: keep it 0600
# and out of the database's backups. `active` seals; `retired` keys only open older secrets.
";

/// Standard alphabet, padding optional when decoding.
const BASE64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Where [`Keyring::load`] found the keys, for the startup log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `OPSGRAPH_MASTER_KEY`; the key file, if any, was not read.
    Env,
    /// The key file, which existed.
    File(PathBuf),
    /// The key file, created now with a new key: a first start.
    Created(PathBuf),
}

/// The master keys: one active key that seals, and retired keys that only open.
///
/// Retired keys exist for rotation: after [`rotate`], rows sealed with the previous key still
/// open, and [`Keyring::reseal`] moves them to the active key.
#[derive(Clone)]
pub struct Keyring {
    active: MasterKey,
    retired: Vec<MasterKey>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("active", &self.active.id)
            .field("retired", &self.retired.iter().map(|k| k.id).collect::<Vec<_>>())
            .finish()
    }
}

impl Keyring {
    /// Two keys with the same id are refused (the id picks the key when opening).
    pub fn new(active: MasterKey, retired: Vec<MasterKey>) -> Result<Keyring> {
        let mut ids: Vec<KeyId> = std::iter::once(&active).chain(&retired).map(|k| k.id).collect();
        ids.sort();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::DuplicateKey(w[0]));
        }
        Ok(Keyring { active, retired })
    }

    /// The keys for a server whose data directory is `data_dir`, in this order:
    ///
    /// 1. `OPSGRAPH_MASTER_KEY`, when set (see [`Keyring::from_env_value`]). The key file is then
    ///    not read, nor created.
    /// 2. `DATA_DIR/master.key`, when it exists (see [`Keyring::read_file`]).
    /// 3. Otherwise a new key is generated and `DATA_DIR/master.key` is created with mode 0600,
    ///    atomically: it appears complete or not at all, and of two processes starting at once one
    ///    creates it and the other reads it. The data directory must exist.
    pub fn load(data_dir: &Path) -> Result<(Keyring, KeySource)> {
        match std::env::var_os(ENV_VAR) {
            Some(value) => {
                let value =
                    Zeroizing::new(value.into_string().map_err(|_| Error::EnvKey {
                        reason: "is not valid UTF-8; it must be base64 or hex".into(),
                    })?);
                Ok((Keyring::from_env_value(&value)?, KeySource::Env))
            }
            None => Keyring::open_or_create(data_dir),
        }
    }

    /// Parses the value of `OPSGRAPH_MASTER_KEY`: one or more keys separated by commas, the first
    /// active, the others retired (that is how rotation works with the variable: put the new key
    /// first, restart, reseal, then drop the old one).
    ///
    /// Each key is 32 bytes written as 64 hex digits (`openssl rand -hex 32`) or as standard base64,
    /// padding optional (`openssl rand -base64 32`). The two cannot be confused: 64 hex digits read
    /// as base64 would be 48 bytes. Any other length is refused, naming the length, never the value.
    pub fn from_env_value(value: &str) -> Result<Keyring> {
        let parts: Vec<&str> = value.split(',').map(str::trim).collect();
        let mut keys = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let which = if parts.len() == 1 { "the key".to_string() } else { format!("key #{}", i + 1) };
            if part.is_empty() {
                return Err(Error::EnvKey { reason: format!("{which} is empty") });
            }
            let key = decode_key(part).map_err(|reason| Error::EnvKey { reason: format!("{which} {reason}") })?;
            keys.push(key);
        }
        let active = keys.remove(0);
        Keyring::new(active, keys)
    }

    /// Reads `DATA_DIR/master.key`, or creates it with a new key when it does not exist.
    pub fn open_or_create(data_dir: &Path) -> Result<(Keyring, KeySource)> {
        let path = data_dir.join(KEY_FILE);
        match Keyring::read_file(&path) {
            Ok(keyring) => return Ok((keyring, KeySource::File(path))),
            Err(Error::Io { ref source, .. }) if source.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let keyring = Keyring::new(MasterKey::generate()?, Vec::new())?;
        if write_atomically(&path, &keyring.file_contents(), false)? {
            Ok((keyring, KeySource::Created(path)))
        } else {
            // Another process created it first: use theirs.
            Ok((Keyring::read_file(&path)?, KeySource::File(path)))
        }
    }

    /// Reads a key file. It must be a regular file without any permission bit for group or others
    /// (0600 or 0400); otherwise it is refused with its path and mode.
    ///
    /// The format is text, one key a line, `#` comments:
    ///
    /// ```text
    /// active 1a2b3c4d <32 bytes, standard base64>
    /// retired 5e6f7a8b <32 bytes, standard base64>
    /// ```
    ///
    /// Exactly one key is active; each id must match its key.
    pub fn read_file(path: &Path) -> Result<Keyring> {
        let io = |action| move |source| Error::Io { path: path.to_owned(), action, source };
        let mut file = File::open(path).map_err(io("open"))?;
        let meta = file.metadata().map_err(io("stat"))?;
        if !meta.is_file() {
            return Err(Error::KeyFileKind { path: path.to_owned() });
        }
        if meta.mode() & 0o077 != 0 {
            return Err(Error::KeyFileMode { path: path.to_owned(), mode: meta.mode() & 0o7777 });
        }
        let mut text = Zeroizing::new(String::new());
        file.read_to_string(&mut text).map_err(io("read"))?;
        parse_key_file(path, &text)
    }

    pub fn active_id(&self) -> KeyId {
        self.active.id
    }

    /// Every key's id, the active one first.
    pub fn ids(&self) -> Vec<KeyId> {
        std::iter::once(&self.active).chain(&self.retired).map(|k| k.id).collect()
    }

    /// Encrypts `plaintext` with the active key and a fresh random nonce, binding it to `aad`.
    ///
    /// `aad` names the row the value belongs to (`artifact:sha256:…`, `param:<op>/<name>`): it is
    /// not stored, and [`Keyring::open`] must be given the same bytes. A sealed value copied to
    /// another row therefore does not open there.
    ///
    /// XChaCha20-Poly1305 rather than AES-GCM or AES-GCM-SIV: its 192-bit nonce can be drawn at
    /// random for every value with no practical collision risk (96-bit nonces, as in GCM and
    /// GCM-SIV, bound random use to about 2^32 messages per key), so no nonce counter has to be
    /// kept durable; it is constant-time in software, with no dependence on AES instructions; and
    /// the RustCrypto implementation is widely used and audited.
    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Result<Vec<u8>> {
        sealed::seal(&self.active, plaintext, aad)
    }

    /// Decrypts a value [`Keyring::seal`] produced with any key of this keyring and the same `aad`.
    ///
    /// Fails with [`Error::Malformed`] or [`Error::UnsupportedVersion`] for bytes that are not a
    /// sealed value, [`Error::UnknownKey`] when its key is not here (retired too early, or another
    /// installation's), and [`Error::Inauthentic`] when any byte was changed or `aad` differs.
    pub fn open(&self, sealed: &[u8], aad: &[u8]) -> Result<Secret> {
        let id = sealed::sealed_key_id(sealed)?;
        let key = self.key(id).ok_or_else(|| Error::UnknownKey { id, known: self.known() })?;
        sealed::open(key, sealed, aad)
    }

    /// Opens `sealed` with whichever key sealed it and seals it again with the active key (and a
    /// new nonce). Rotation calls it for every sealed row, in one transaction; rows already under
    /// the active key can be skipped by comparing [`sealed_key_id`](crate::sealed_key_id) with
    /// [`Keyring::active_id`].
    pub fn reseal(&self, sealed: &[u8], aad: &[u8]) -> Result<Vec<u8>> {
        let secret = self.open(sealed, aad)?;
        self.seal(secret.expose(), aad)
    }

    fn key(&self, id: KeyId) -> Option<&MasterKey> {
        std::iter::once(&self.active).chain(&self.retired).find(|k| k.id == id)
    }

    fn known(&self) -> String {
        self.ids().iter().map(KeyId::to_string).collect::<Vec<_>>().join(", ")
    }

    fn file_contents(&self) -> Zeroizing<String> {
        let mut text = Zeroizing::new(String::from(FILE_HEADER));
        let lines = std::iter::once(("active", &self.active)).chain(self.retired.iter().map(|k| ("retired", k)));
        for (state, key) in lines {
            let encoded = Zeroizing::new(STANDARD.encode(key.bytes()));
            text.push_str(state);
            text.push(' ');
            text.push_str(&key.id.to_string());
            text.push(' ');
            text.push_str(&encoded);
            text.push('\n');
        }
        text
    }
}

/// What [`rotate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// The new active key.
    pub active: KeyId,
    /// The key that was active before, now retired.
    pub retired: KeyId,
}

/// Makes a new active key in `DATA_DIR/master.key`; the previously active key becomes retired and
/// keeps opening what it sealed.
///
/// The procedure (the CLI's `secrets rotate` should print it):
///
/// 1. `rotate(data_dir)`. The file is replaced atomically; a crash leaves the old or the new file.
/// 2. Restart the server (or reload its [`Keyring`]), so new values are sealed with the new key.
///    Until then it keeps sealing with the old key, which is still readable: nothing is lost.
/// 3. In one store transaction, [`Keyring::reseal`] every sealed row whose
///    [`sealed_key_id`](crate::sealed_key_id) is not the active key.
/// 4. Check that no row still names the old key, then [`retire`] it. Its ciphertexts are then
///    unreadable here, which is the point when the key may have leaked; old database backups
///    still need the old key, so archive it with them if they must stay readable.
///
/// This works on the key file only. When the keys come from `OPSGRAPH_MASTER_KEY` the file is not
/// used: rotate by putting a new key first in the variable (`new,old`), then steps 2 to 4, then
/// removing `old` from the variable. Concurrent rotations are refused through a lock file,
/// `master.key.lock`, removed when the rotation ends.
pub fn rotate(data_dir: &Path) -> Result<Rotation> {
    let path = data_dir.join(KEY_FILE);
    let _lock = Lock::take(&path)?;
    let current = Keyring::read_file(&path)?;
    let new = loop {
        let key = MasterKey::generate()?;
        if current.key(key.id).is_none() {
            break key;
        }
    };
    let rotation = Rotation { active: new.id, retired: current.active.id };
    let mut retired = vec![current.active];
    retired.extend(current.retired);
    let keyring = Keyring::new(new, retired)?;
    write_atomically(&path, &keyring.file_contents(), true)?;
    Ok(rotation)
}

/// Removes a retired key from `DATA_DIR/master.key` (step 4 of [`rotate`]). The active key cannot
/// be retired.
pub fn retire(data_dir: &Path, id: KeyId) -> Result<()> {
    let path = data_dir.join(KEY_FILE);
    let _lock = Lock::take(&path)?;
    let mut keyring = Keyring::read_file(&path)?;
    if keyring.active.id == id {
        return Err(Error::RetireActive(id));
    }
    let before = keyring.retired.len();
    let known = keyring.known();
    keyring.retired.retain(|k| k.id != id);
    if keyring.retired.len() == before {
        return Err(Error::NoSuchKey { id, known });
    }
    write_atomically(&path, &keyring.file_contents(), true)?;
    Ok(())
}

/// Decodes one key written as 64 hex digits or base64; the error completes "the key …".
fn decode_key(text: &str) -> Result<MasterKey, String> {
    let bytes = if text.len() == 2 * KEY_LEN && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        Zeroizing::new(decode_hex(text).expect("hex digits"))
    } else {
        Zeroizing::new(BASE64_LENIENT.decode(text).map_err(|_| {
            format!(
                "is neither 64 hex digits nor base64 ({} characters); generate one with `openssl rand -base64 32`",
                text.len()
            )
        })?)
    };
    let array: [u8; KEY_LEN] = bytes[..].try_into().map_err(|_| {
        format!("decodes to {} bytes; a master key is {KEY_LEN} bytes (`openssl rand -base64 32`)", bytes.len())
    })?;
    Ok(MasterKey::from_bytes(Zeroizing::new(array)))
}

fn parse_key_file(path: &Path, text: &str) -> Result<Keyring> {
    let syntax = |line, reason: String| Error::KeyFileSyntax { path: path.to_owned(), line, reason };
    let mut active = None;
    let mut retired = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [state, id, encoded] = fields[..] else {
            return Err(syntax(n, "expected `active|retired <id> <base64 key>`".into()));
        };
        let id: KeyId = id.parse().map_err(|e| syntax(n, e))?;
        let key = decode_key(encoded).map_err(|e| syntax(n, format!("the key {e}")))?;
        if key.id != id {
            return Err(syntax(n, format!("the key's id is {}, not {id}", key.id)));
        }
        match state {
            "active" if active.is_some() => return Err(syntax(n, "a second active key".into())),
            "active" => active = Some(key),
            "retired" => retired.push(key),
            other => return Err(syntax(n, format!("`{other}` is neither `active` nor `retired`"))),
        }
    }
    let active = active.ok_or_else(|| Error::NoActiveKey { path: path.to_owned() })?;
    Keyring::new(active, retired)
}

/// Writes `contents` to `path` through a temporary file created 0600 with `create_new`, synced,
/// then renamed over `path` (`replace`) or hard-linked to it (`!replace`: fails if `path` exists,
/// returning `false`). Either way `path` is never seen partly written. The directory is synced.
fn write_atomically(path: &Path, contents: &str, replace: bool) -> Result<bool> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(Error::Random)?;
    let name = format!(".{KEY_FILE}.{}.{:016x}.tmp", std::process::id(), u64::from_le_bytes(suffix));
    let tmp = dir.join(name);
    let io = |p: &Path, action| {
        let p = p.to_owned();
        move |source| Error::Io { path: p, action, source }
    };
    let result = (|| {
        let mut file =
            OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io(&tmp, "create"))?;
        file.write_all(contents.as_bytes()).map_err(io(&tmp, "write"))?;
        file.sync_all().map_err(io(&tmp, "sync"))?;
        let placed = if replace {
            std::fs::rename(&tmp, path).map_err(io(path, "rename"))?;
            true
        } else {
            match std::fs::hard_link(&tmp, path) {
                Ok(()) => true,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => false,
                Err(e) => return Err(io(path, "link")(e)),
            }
        };
        File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir, "sync"))?;
        Ok(placed)
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

/// `master.key.lock`, created exclusively and removed on drop, as git does with `index.lock`.
struct Lock(PathBuf);

impl Lock {
    fn take(key_file: &Path) -> Result<Lock> {
        let path = key_file.with_file_name(format!("{KEY_FILE}.lock"));
        match OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
            Ok(_) => Ok(Lock(path)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(Error::Locked { path }),
            Err(source) => Err(Error::Io { path, action: "create", source }),
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
