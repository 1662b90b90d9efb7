//! Secrets at rest and in output: the [`Secret`] type, the master [`Keyring`] that seals and opens
//! secret values with an AEAD cipher, key rotation, and the [`Masker`] that scrubs secret values
//! from captured job output.
//!
//! This is threat T2 of the reliability research (secret leakage through logs, artifacts, API and
//! UI). The crate is a library: the store decides which rows are sealed, the runtime decides which
//! output is masked.
//!
//! # What is promised
//!
//! - **A secret is a distinct type.** [`Secret`] never prints its value (`Debug` and `Display` show
//!   `Secret(**redacted**, 12 bytes)`), has no `Serialize`, and zeroes its buffer when dropped. The
//!   value is read only through [`Secret::expose`], so every read is greppable.
//! - **Sealed values are confidential and tamper-evident without the key.** [`Keyring::seal`]
//!   encrypts with XChaCha20-Poly1305 under the active master key; [`Keyring::open`] refuses any
//!   ciphertext that was altered (any byte), that was moved to another row (the `aad` argument
//!   binds it to its row, e.g. `artifact:sha256:…` or `param:<op>/<name>`), or whose key is not in
//!   the keyring. The format is versioned and names its key (below).
//! - **The key lives outside the database**: in `OPSGRAPH_MASTER_KEY`, or in `DATA_DIR/master.key`
//!   created at first start with mode 0600. A key file readable or writable by group or others is
//!   refused. See [`Keyring::load`].
//! - **Keys rotate without downtime for reads.** [`rotate`] makes a new active key and keeps the
//!   old ones for opening; [`Keyring::reseal`] moves a row to the active key; [`retire`] drops an
//!   old key once no row needs it. The procedure is in [`rotate`].
//! - **Output masking catches the exact value and its common encodings** (base64 in both
//!   alphabets, padded or not, at any alignment inside a longer base64 text and wrapped over lines;
//!   hex, also byte-spaced and in hex dumps; URL encoding, also of every byte; JSON string
//!   escaping, also of every character). See [`Masker`].
//!
//! # What is not promised
//!
//! - **Masking is a backstop, not a control.** A job that transforms a secret (reverses it, prints
//!   it one character per line, rot13s, compresses or encrypts it, prints a substring, or uses an
//!   encoding not listed above) leaks it, and so does a job that sends it anywhere other than its
//!   captured output. GitHub Actions and Jenkins say the same of their masking; the real control is
//!   that jobs receive only the secrets they declare. Secrets shorter than [`MIN_SECRET_LEN`] bytes
//!   are not masked at all.
//! - **Anyone with both the key and the database reads every secret.** That includes root on the
//!   server, a backup that holds both `master.key` and the database, and a process environment
//!   dump when the key comes from `OPSGRAPH_MASTER_KEY`. Keep the key file out of database backups
//!   (or back it up separately), and prefer the environment variable fed by a secret manager where
//!   one exists.
//! - **An attacker who controls storage can delete rows or roll them back** to older sealed values
//!   of the same row (the `aad` names the row, not its version). This is Vault's stated limit too.
//! - **Zeroization is best effort.** Copies made before a value became a [`Secret`] (the process
//!   environment, pipe and file buffers, a `String` the caller built) and the masker's pattern
//!   tables are not wiped; swap and core dumps are outside this crate.
//!
//! # The sealed format, version 1
//!
//! ```text
//! offset  size  field
//!      0     2  magic "og"
//!      2     1  format version (1)
//!      3     4  key id: the first 4 bytes of sha256("opsgraph master key id\0" || key)
//!      7    24  XChaCha20 nonce, random
//!     31     n  ciphertext (as long as the plaintext)
//!   31+n    16  Poly1305 tag
//! ```
//!
//! The AEAD's associated data is the 7-byte header followed by the caller's `aad`, so the header
//! (version, key id) is authenticated too and the caller's row binding cannot be confused with it
//! (the header has a fixed length).

mod key;
mod keyring;
mod mask;
mod sealed;
mod secret;

pub use key::{KeyId, MasterKey};
pub use keyring::{retire, rotate, KeySource, Keyring, Rotation, ENV_VAR, KEY_FILE};
pub use mask::{MaskStream, Masker, MASK, MIN_SECRET_LEN};
pub use sealed::{sealed_key_id, SEALED_OVERHEAD};
pub use secret::Secret;

use std::path::PathBuf;

/// Everything that can go wrong. No variant carries key material or a secret value.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{ENV_VAR}: {reason}")]
    EnvKey { reason: String },
    #[error("{path}: {action} failed")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the master key file {path} has mode {mode:04o}, so group or others can use it; \
         run `chmod 600 {path}` (and ask who may have read it: if anyone, rotate the key)"
    )]
    KeyFileMode { path: PathBuf, mode: u32 },
    #[error("the master key file {path} is not a regular file")]
    KeyFileKind { path: PathBuf },
    #[error("the master key file {path}, line {line}: {reason}")]
    KeyFileSyntax { path: PathBuf, line: usize, reason: String },
    #[error("the master key file {path} has no active key")]
    NoActiveKey { path: PathBuf },
    #[error("{path} exists: another key rotation is running, or one was interrupted; if none is running, remove it")]
    Locked { path: PathBuf },
    #[error("two master keys have the id {0}")]
    DuplicateKey(KeyId),
    #[error("no key {id} in the keyring (known: {known})")]
    NoSuchKey { id: KeyId, known: String },
    #[error("key {0} is the active key; rotate first, reseal, then retire it")]
    RetireActive(KeyId),
    #[error("the operating system's random number generator failed: {0}")]
    Random(getrandom::Error),
    #[error("not a sealed secret: {0}")]
    Malformed(&'static str),
    #[error("sealed with format version {0}; this binary reads version {version}, upgrade opsgraph", version = sealed::VERSION)]
    UnsupportedVersion(u8),
    #[error(
        "sealed with key {id}, which is not in the keyring (known: {known}); \
         was it retired before every row was resealed?"
    )]
    UnknownKey { id: KeyId, known: String },
    #[error(
        "a secret sealed with key {key} does not authenticate: it was altered, it belongs to another row \
         (associated data differs), or another key with the same id sealed it"
    )]
    Inauthentic { key: KeyId },
    #[error("the secret is too long to seal")]
    TooLong,
    #[error("cannot build the output masker")]
    Masker(#[from] aho_corasick::BuildError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_mask_forms;
