//! The content digest of a pack and the order of pack versions.

use std::cmp::Ordering;

use sha2::{Digest as _, Sha256};

/// `sha256:<hex>` over a pack's files in a canonical form: a domain tag, the number of files,
/// then for each file in the byte order of its path (relative, `/`-separated) the length of the
/// path, the path, the length of the content and the content, lengths as 8-byte little-endian.
/// Every field is length-prefixed, so no two different trees give the same byte stream.
///
/// The caller decides which files count (the loader skips names starting with `.`); the same
/// path given twice is counted once, the last one winning.
pub fn content_digest<'a>(files: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> String {
    let sorted: std::collections::BTreeMap<&str, &[u8]> = files.into_iter().collect();
    let mut h = Sha256::new();
    h.update(b"opsgraph-pack-digest-v1\0");
    h.update((sorted.len() as u64).to_le_bytes());
    for (path, bytes) in &sorted {
        h.update((path.len() as u64).to_le_bytes());
        h.update(path.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for b in h.finalize().iter() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The first 12 hex digits of a digest, for tables (`sha256:0a1b2c3d4e5f`).
pub fn short_digest(digest: &str) -> String {
    match digest.strip_prefix("sha256:") {
        Some(hex) => format!("sha256:{}", hex.get(..12).unwrap_or(hex)),
        None => digest.to_string(),
    }
}

/// Orders pack versions by their dotted components: two numeric components compare as numbers
/// (`1.10.0` > `1.9.0`), a numeric component sorts before a non-numeric one, two non-numeric ones
/// compare as text; when one version is a prefix of the other, the shorter is lower (`1.0` <
/// `1.0.0`).
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    let mut xs = a.split('.');
    let mut ys = b.split('.');
    loop {
        match (xs.next(), ys.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let o = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => x.cmp(&y),
                    (Ok(_), Err(_)) => Ordering::Less,
                    (Err(_), Ok(_)) => Ordering::Greater,
                    (Err(_), Err(_)) => x.cmp(y),
                };
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

/// `tempo@1.1.0` -> (`tempo`, Some(`1.1.0`)); `tempo` -> (`tempo`, None).
pub fn split_pack_ref(r: &str) -> (&str, Option<&str>) {
    match r.split_once('@') {
        Some((id, version)) => (id, Some(version)),
        None => (r, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_canonical_and_unambiguous() {
        let a = content_digest([("a", b"xy".as_slice()), ("b", b"z".as_slice())]);
        let reordered = content_digest([("b", b"z".as_slice()), ("a", b"xy".as_slice())]);
        assert_eq!(a, reordered);
        // Moving a byte from one file to the other, or from a name to a content, changes it.
        assert_ne!(a, content_digest([("a", b"x".as_slice()), ("b", b"yz".as_slice())]));
        assert_ne!(content_digest([("ab", b"".as_slice())]), content_digest([("a", b"b".as_slice())]));
        assert_ne!(content_digest([]), content_digest([("", b"".as_slice())]));
        assert!(a.starts_with("sha256:") && a.len() == 71);
        assert_eq!(short_digest(&a).len(), "sha256:".len() + 12);
    }

    #[test]
    fn versions_compare_numerically() {
        use Ordering::*;
        for (a, b, o) in [
            ("1.10.0", "1.9.0", Greater),
            ("1.0.0", "1.0.0", Equal),
            ("1.0", "1.0.0", Less),
            ("2", "10", Less),
            ("1.0.0", "1.0.rc1", Less),
            ("1.0.beta", "1.0.alpha", Greater),
        ] {
            assert_eq!(compare_versions(a, b), o, "{a} vs {b}");
        }
        assert_eq!(split_pack_ref("tempo@1.1.0"), ("tempo", Some("1.1.0")));
        assert_eq!(split_pack_ref("tempo"), ("tempo", None));
    }
}
