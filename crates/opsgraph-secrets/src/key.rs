//! A master key and its public name. Below the keyring and the sealed format, which both use it.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::{Error, Result};

pub(crate) const KEY_LEN: usize = 32;

/// A master key's public name: the first 4 bytes of `sha256("opsgraph master key id\0" || key)`,
/// shown as 8 lowercase hex digits. It is stored in every sealed value, so a reader knows which
/// key to use, and in logs, so people can talk about keys without holding them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(pub(crate) [u8; 4]);

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

impl FromStr for KeyId {
    type Err = String;

    fn from_str(s: &str) -> Result<KeyId, String> {
        let bytes = decode_hex(s).filter(|b| b.len() == 4).ok_or_else(|| format!("`{s}` is not 8 hex digits"))?;
        Ok(KeyId(bytes[..].try_into().expect("4 bytes")))
    }
}

/// 32 random bytes that seal and open secrets, with their [`KeyId`]. Zeroed on drop; `Debug`
/// shows the id only.
#[derive(Clone)]
pub struct MasterKey {
    pub(crate) id: KeyId,
    pub(crate) bytes: Zeroizing<[u8; KEY_LEN]>,
}

impl MasterKey {
    /// A new key from the operating system's random number generator.
    pub fn generate() -> Result<MasterKey> {
        let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
        getrandom::fill(&mut bytes[..]).map_err(Error::Random)?;
        Ok(MasterKey::from_bytes(bytes))
    }

    pub fn from_bytes(bytes: Zeroizing<[u8; KEY_LEN]>) -> MasterKey {
        let mut hash = Sha256::new();
        hash.update(b"opsgraph master key id\0");
        hash.update(&bytes[..]);
        let digest = hash.finalize();
        MasterKey { id: KeyId(digest[..4].try_into().expect("4 bytes")), bytes }
    }

    pub fn id(&self) -> KeyId {
        self.id
    }

    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.bytes
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MasterKey({}, **redacted**)", self.id)
    }
}

pub(crate) fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}
