//! The sealed format; it is described in the crate documentation.

use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};

use crate::key::{KeyId, MasterKey};
use crate::{Error, Result, Secret};

pub(crate) const MAGIC: [u8; 2] = *b"og";
pub(crate) const VERSION: u8 = 1;
const HEADER: usize = 2 + 1 + 4;
const NONCE: usize = 24;
const TAG: usize = 16;

/// Bytes a sealed value has beyond its plaintext: header, nonce and tag.
pub const SEALED_OVERHEAD: usize = HEADER + NONCE + TAG;

/// The id of the key that sealed `sealed`, read from its header without opening it.
///
/// Use it to find rows that still need [`reseal`](crate::Keyring::reseal) before a key is retired.
pub fn sealed_key_id(sealed: &[u8]) -> Result<KeyId> {
    if sealed.len() < SEALED_OVERHEAD {
        return Err(Error::Malformed("shorter than the smallest sealed value"));
    }
    if sealed[..2] != MAGIC {
        return Err(Error::Malformed("wrong magic bytes"));
    }
    if sealed[2] != VERSION {
        return Err(Error::UnsupportedVersion(sealed[2]));
    }
    Ok(KeyId(sealed[3..7].try_into().expect("4 bytes")))
}

fn cipher(key: &MasterKey) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(key.bytes().into())
}

fn associated_data(header: &[u8], aad: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(header.len() + aad.len());
    data.extend_from_slice(header);
    data.extend_from_slice(aad);
    data
}

pub(crate) fn seal(key: &MasterKey, plaintext: &[u8], aad: &[u8]) -> Result<Vec<u8>> {
    let mut nonce = [0u8; NONCE];
    getrandom::fill(&mut nonce).map_err(Error::Random)?;
    let mut out = Vec::with_capacity(SEALED_OVERHEAD + plaintext.len());
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&key.id().0);
    let ad = associated_data(&out, aad);
    out.extend_from_slice(&nonce);
    let body =
        cipher(key).encrypt(&XNonce::from(nonce), Payload { msg: plaintext, aad: &ad }).map_err(|_| Error::TooLong)?;
    out.extend_from_slice(&body);
    Ok(out)
}

/// Opens `sealed` with `key`, which the caller looked up by the header's key id.
pub(crate) fn open(key: &MasterKey, sealed: &[u8], aad: &[u8]) -> Result<Secret> {
    let ad = associated_data(&sealed[..HEADER], aad);
    let nonce = XNonce::try_from(&sealed[HEADER..HEADER + NONCE]).expect("24 bytes");
    let plaintext = cipher(key)
        .decrypt(&nonce, Payload { msg: &sealed[HEADER + NONCE..], aad: &ad })
        .map_err(|_| Error::Inauthentic { key: key.id() })?;
    Ok(Secret::new(plaintext))
}
