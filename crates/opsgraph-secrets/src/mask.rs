use aho_corasick::{AhoCorasick, MatchKind};
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use zeroize::Zeroizing;

use crate::Result;

/// What replaces a secret in output.
///
/// A fixed mark rather than a reference such as `[secret:<hash>]`: an unkeyed hash of a value, even
/// truncated, lets anyone holding the log confirm a guess of a low-entropy secret offline, and a
/// keyed one would make the masker depend on the master key. The caller knows which secrets a job
/// was given, which is what someone reading its output needs.
pub const MASK: &str = "***";

/// Secrets shorter than this many bytes are not masked.
///
/// A 1- to 3-byte value (`on`, `443`, `dev`) occurs by chance all over ordinary output; masking it
/// would mangle logs and, by where the marks fall, would reveal the value anyway. Such values are
/// not secrets worth the name; [`Masker::ignored`] counts them so the caller can warn.
pub const MIN_SECRET_LEN: usize = 4;

/// Scrubs secret values from captured job output: a backstop, not a guarantee (see the crate
/// documentation for what it cannot catch).
///
/// For each secret of at least [`MIN_SECRET_LEN`] bytes it masks these forms:
///
/// - the exact bytes, and with `\n` written as `\r\n` (output captured through a terminal);
/// - base64, standard and URL-safe alphabets, padded and unpadded, and the part of the secret's
///   base64 that is fixed whatever surrounds it, at each of the three alignments: so the secret is
///   found inside a longer base64 text too (`Authorization: Basic base64(user:password)`, a
///   base64-encoded kubeconfig). Up to two boundary characters, which mix in neighbouring bytes,
///   stay visible;
/// - hex, lower and upper case;
/// - URL encoding: RFC 3986 (`%XX` upper and lower case), form encoding (space as `+`) and
///   JavaScript's `encodeURIComponent`;
/// - for UTF-8 secrets, the inside of a JSON string: minimal escaping, non-ASCII as `\uXXXX`,
///   HTML-safe (`<>&` escaped, as Go does), `\/`, and a JSON string escaped twice (JSON in JSON).
///
/// Every byte covered by any occurrence of any of these forms is masked, so overlapping or
/// adjacent secrets (`abcdef` and `defghi` in `abcdefghi`) leave nothing of either; a run of
/// covered bytes becomes one [`MASK`]. For a secret that does not contain `*`, masked output
/// provably does not contain the secret in any of these forms: an occurrence cannot overlap a
/// mark, so it would lie in text copied unchanged from the input, where it would have been found.
///
/// Matching uses one Aho-Corasick automaton over all forms of all secrets: linear in the output's
/// length. Mask whole captured outputs with [`Masker::mask`] or [`Masker::mask_bytes`], or chunks
/// as they arrive with [`Masker::stream`], which gives the same result.
#[derive(Debug, Clone)]
pub struct Masker {
    automaton: Option<AhoCorasick>,
    longest: usize,
    ignored: usize,
}

impl Masker {
    /// A masker for `secrets` (e.g. `job_secrets.iter().map(Secret::expose)`).
    ///
    /// Fails only if the automaton would exceed `aho-corasick`'s size limits (an absurd number of
    /// secrets): callers must then refuse to publish the output rather than publish it unmasked.
    pub fn new<I, S>(secrets: I) -> Result<Masker>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<[u8]>,
    {
        let mut patterns: Vec<Zeroizing<Vec<u8>>> = Vec::new();
        let mut ignored = 0;
        for secret in secrets {
            let secret = secret.as_ref();
            if secret.len() < MIN_SECRET_LEN {
                ignored += 1;
                continue;
            }
            forms(secret, &mut patterns);
        }
        patterns.retain(|p| p.len() >= MIN_SECRET_LEN);
        patterns.sort_unstable_by(|a, b| a[..].cmp(&b[..]));
        patterns.dedup_by(|a, b| a[..] == b[..]);
        let longest = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
        let automaton = if patterns.is_empty() {
            None
        } else {
            Some(AhoCorasick::builder().match_kind(MatchKind::Standard).build(patterns.iter().map(|p| &p[..]))?)
        };
        Ok(Masker { automaton, longest, ignored })
    }

    /// How many secrets were too short to mask.
    pub fn ignored(&self) -> usize {
        self.ignored
    }

    /// Whether there is nothing to mask (no secrets, or all too short).
    pub fn is_empty(&self) -> bool {
        self.automaton.is_none()
    }

    /// `text` with every form of every secret replaced by [`MASK`]. A binary secret that would cut
    /// a UTF-8 character has its mark widened to whole characters.
    pub fn mask(&self, text: &str) -> String {
        let mut spans = self.spans(text.as_bytes());
        for span in &mut spans {
            while !text.is_char_boundary(span.0) {
                span.0 -= 1;
            }
            while !text.is_char_boundary(span.1) {
                span.1 += 1;
            }
        }
        let spans = merge(spans);
        let mut out = String::with_capacity(text.len());
        let mut pos = 0;
        for (start, end) in spans {
            out.push_str(&text[pos..start]);
            out.push_str(MASK);
            pos = end;
        }
        out.push_str(&text[pos..]);
        out
    }

    /// Like [`Masker::mask`], for output that may not be UTF-8. Mask before any lossy conversion.
    pub fn mask_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len());
        let mut pos = 0;
        for (start, end) in self.spans(bytes) {
            out.extend_from_slice(&bytes[pos..start]);
            out.extend_from_slice(MASK.as_bytes());
            pos = end;
        }
        out.extend_from_slice(&bytes[pos..]);
        out
    }

    /// A masker for output that arrives in chunks (a pipe read by read). It holds back the last
    /// `longest form − 1` bytes of what it was given, since a secret may straddle two chunks, so a
    /// live view lags by that much until [`MaskStream::finish`]. The concatenated output equals
    /// [`Masker::mask_bytes`] of the concatenated input, however the input was cut.
    pub fn stream(&self) -> MaskStream<'_> {
        MaskStream { masker: self, held: Vec::new(), forced: 0, mask_open: false }
    }

    /// The byte ranges covered by any occurrence of any pattern, sorted, with overlapping and
    /// touching ranges merged.
    fn spans(&self, hay: &[u8]) -> Vec<(usize, usize)> {
        let Some(automaton) = &self.automaton else { return Vec::new() };
        let mut spans: Vec<(usize, usize)> =
            automaton.find_overlapping_iter(hay).map(|m| (m.start(), m.end())).collect();
        spans.sort_unstable();
        merge(spans)
    }
}

/// Merges sorted ranges that overlap or touch.
fn merge(spans: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// Masks output chunk by chunk; see [`Masker::stream`].
#[derive(Debug)]
pub struct MaskStream<'m> {
    masker: &'m Masker,
    /// Input not yet written out (it may begin a secret).
    held: Vec<u8>,
    /// How many leading bytes of `held` belong to a secret already found (its mark is written).
    forced: usize,
    /// Whether the output written so far ends with a mark, so a secret touching it joins it.
    mask_open: bool,
}

impl MaskStream<'_> {
    /// Takes the next chunk and appends to `out` whatever can no longer be part of a secret.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if self.masker.is_empty() {
            out.extend_from_slice(chunk);
            return;
        }
        self.held.extend_from_slice(chunk);
        let keep = self.masker.longest - 1;
        self.drain(self.held.len().saturating_sub(keep), out);
    }

    /// Appends the rest to `out`.
    pub fn finish(mut self, out: &mut Vec<u8>) {
        self.drain(self.held.len(), out);
    }

    /// Writes out `held[..cut]`. A match that starts before `cut` ends within `held` (a match is
    /// at most `longest` bytes, and at least `longest - 1` bytes follow `cut`), so every match that
    /// touches the written part is known now.
    fn drain(&mut self, cut: usize, out: &mut Vec<u8>) {
        let mut spans = self.masker.spans(&self.held);
        if self.forced > 0 {
            spans.insert(0, (0, self.forced));
            spans = merge(spans);
        }
        let mut pos = 0;
        let mut forced = 0;
        for (start, end) in spans {
            if start >= cut {
                break;
            }
            if start > pos {
                out.extend_from_slice(&self.held[pos..start]);
                self.mask_open = false;
            }
            if !self.mask_open {
                out.extend_from_slice(MASK.as_bytes());
                self.mask_open = true;
            }
            if end > cut {
                forced = end - cut;
                pos = cut;
                break;
            }
            pos = end;
        }
        if pos < cut {
            out.extend_from_slice(&self.held[pos..cut]);
            self.mask_open = false;
        }
        self.held.drain(..cut);
        self.forced = forced;
    }
}

/// Appends the forms of `secret` that output may contain.
fn forms(secret: &[u8], out: &mut Vec<Zeroizing<Vec<u8>>>) {
    let mut add = |form: Vec<u8>| out.push(Zeroizing::new(form));
    add(secret.to_vec());
    if secret.contains(&b'\n') {
        add(crlf(secret));
    }
    for engine in [&STANDARD, &URL_SAFE] {
        add(engine.encode(secret).into_bytes());
    }
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        add(engine.encode(secret).into_bytes());
        for skew in 0..3 {
            add(base64_core(engine, secret, skew));
        }
    }
    add(hex(secret, b"0123456789abcdef"));
    add(hex(secret, b"0123456789ABCDEF"));
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    let uri_component = |b: u8| b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b);
    add(percent(secret, unreserved, false, b"0123456789ABCDEF"));
    add(percent(secret, unreserved, false, b"0123456789abcdef"));
    add(percent(secret, unreserved, true, b"0123456789ABCDEF"));
    add(percent(secret, uri_component, false, b"0123456789ABCDEF"));
    if let Ok(text) = std::str::from_utf8(secret) {
        for flags in 0..8u8 {
            add(json_escape(text, flags & 1 != 0, flags & 2 != 0, flags & 4 != 0).into_bytes());
        }
        let once = Zeroizing::new(json_escape(text, false, false, false));
        add(json_escape(&once, false, false, false).into_bytes());
    }
}

fn crlf(secret: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(secret.len() + 8);
    for (i, &b) in secret.iter().enumerate() {
        if b == b'\n' && (i == 0 || secret[i - 1] != b'\r') {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}

/// The characters of the base64 of `secret` that do not depend on its neighbours, when it starts
/// `skew` bytes after a 3-byte group boundary of a longer encoded text. Character `i` encodes bits
/// `6i..6i+6`; the secret holds bits `8·skew..8·(skew+len)`.
fn base64_core(engine: &impl Engine, secret: &[u8], skew: usize) -> Vec<u8> {
    let mut padded = Zeroizing::new(vec![0u8; skew]);
    padded.extend_from_slice(secret);
    let encoded = Zeroizing::new(engine.encode(&padded[..]).into_bytes());
    let start = (8 * skew).div_ceil(6);
    let end = 8 * (skew + secret.len()) / 6;
    encoded[start..end].to_vec()
}

fn hex(bytes: &[u8], digits: &[u8; 16]) -> Vec<u8> {
    bytes.iter().flat_map(|&b| [digits[usize::from(b >> 4)], digits[usize::from(b & 15)]]).collect()
}

fn percent(bytes: &[u8], keep: impl Fn(u8) -> bool, space_as_plus: bool, digits: &[u8; 16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() * 3);
    for &b in bytes {
        if keep(b) {
            out.push(b);
        } else if b == b' ' && space_as_plus {
            out.push(b'+');
        } else {
            out.extend_from_slice(&[b'%', digits[usize::from(b >> 4)], digits[usize::from(b & 15)]]);
        }
    }
    out
}

/// The inside of a JSON string holding `text`. `ascii`: non-ASCII as `\uXXXX` (Python's default);
/// `html`: `<`, `>`, `&`, U+2028 and U+2029 as `\uXXXX` (Go's default); `slash`: `/` as `\/`.
fn json_escape(text: &str, ascii: bool, html: bool, slash: bool) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let unicode = |out: &mut String, c: char| {
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            out.push_str(&format!("\\u{unit:04x}"));
        }
    };
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '/' if slash => out.push_str("\\/"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if html => unicode(&mut out, c),
            c if c < ' ' => unicode(&mut out, c),
            c if ascii && !c.is_ascii() => unicode(&mut out, c),
            c => out.push(c),
        }
    }
    out
}
