use std::borrow::Cow;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
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
/// - base64 wrapped over lines (`base64`'s 76 columns, PEM's 64, any width of at least 16): the
///   line breaks after lines of only base64 characters are read through;
/// - hex, lower and upper case, contiguous, with a space between bytes (`od -tx1`, `hexdump -C`)
///   or between pairs of bytes (`xxd`), and as hex dumps print it over lines, offsets and text
///   columns between (`xxd`, `xxd -p`, `od -tx1`, `od -An -tx1`, `hexdump -C`): a dump's match is
///   masked from its first digit to the end of its last line, text column included;
/// - URL encoding: RFC 3986 (`%XX` upper and lower case), form encoding (space as `+`),
///   JavaScript's `encodeURIComponent`, and every byte as `%XX` (upper and lower case);
/// - for UTF-8 secrets, the inside of a JSON string: minimal escaping, non-ASCII as `\uXXXX`,
///   HTML-safe (`<>&` escaped, as Go does), `\/`, every character as `\uXXXX` (lower and upper
///   case), and a JSON string escaped twice (JSON in JSON).
///
/// It cannot mask what a job computes from a secret: rot13 or any other cipher, reversal,
/// compression, a substring, the value split over lines or interleaved with other output, or an
/// encoding not listed here.
///
/// Every byte covered by any occurrence of any of these forms is masked, so overlapping or
/// adjacent secrets (`abcdef` and `defghi` in `abcdefghi`) leave nothing of either; a run of
/// covered bytes becomes one [`MASK`]. For a secret that does not contain `*`, masked output
/// provably does not contain the secret in any of these forms: an occurrence cannot overlap a
/// mark, so it would lie in text copied unchanged from the input, where it would have been found.
///
/// Matching uses Aho-Corasick automata over all forms of all secrets, on the output and on two
/// views of it (wrapped base64 joined, hex dump digits joined): linear in the output's length. Mask whole captured outputs with [`Masker::mask`] or [`Masker::mask_bytes`], or chunks
/// as they arrive with [`Masker::stream`], which gives the same result.
#[derive(Debug, Clone)]
pub struct Masker {
    automaton: Option<AhoCorasick>,
    /// The secrets' base64 forms, matched in [`View::Base64`] (wrapped lines joined).
    base64: Option<AhoCorasick>,
    /// The secrets' lower-case hex, matched in [`View::Dump`] (the data columns of a hex dump).
    dump: Option<AhoCorasick>,
    /// How many bytes a stream holds back: the longest span any match can cover.
    reach: usize,
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
        let mut base64 = Vec::new();
        let mut dump = Vec::new();
        let mut ignored = 0;
        for secret in secrets {
            let secret = secret.as_ref();
            if secret.len() < MIN_SECRET_LEN {
                ignored += 1;
                continue;
            }
            forms(secret, &mut patterns);
            base64_forms(secret, &mut base64);
            dump.push(Zeroizing::new(hex(secret, b"0123456789abcdef")));
        }
        let (automaton, longest) = build(patterns)?;
        let (base64, longest_base64) = build(base64)?;
        let (dump, longest_dump) = build(dump)?;
        let reach = longest.max(View::Base64.reach(longest_base64)).max(View::Dump.reach(longest_dump));
        Ok(Masker { automaton, base64, dump, reach, ignored })
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
        let mut spans = self.spans(text.as_bytes(), Edges::WHOLE);
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
        for (start, end) in self.spans(bytes, Edges::WHOLE) {
            out.extend_from_slice(&bytes[pos..start]);
            out.extend_from_slice(MASK.as_bytes());
            pos = end;
        }
        out.extend_from_slice(&bytes[pos..]);
        out
    }

    /// A masker for output that arrives in chunks (a pipe read by read). It holds back what a
    /// secret's longest form could still cover (for a hex dump, the lines its bytes span; some
    /// kilobytes), and cuts at line starts, so a live view lags by that much until
    /// [`MaskStream::finish`]. The concatenated output equals [`Masker::mask_bytes`] of the
    /// concatenated input, however the input was cut.
    pub fn stream(&self) -> MaskStream<'_> {
        MaskStream { masker: Cow::Borrowed(self), held: Vec::new(), forced: 0, mask_open: false, mid_line: false }
    }

    /// [`Masker::stream`] owning its masker: for a stream kept beside the output it feeds (a
    /// job's live log, pushed to from the thread that reads the job's pipes).
    pub fn into_stream(self) -> MaskStream<'static> {
        MaskStream { masker: Cow::Owned(self), held: Vec::new(), forced: 0, mask_open: false, mid_line: false }
    }

    /// The byte ranges covered by any occurrence of any pattern in `hay` itself or in one of its
    /// views, sorted, with overlapping and touching ranges merged.
    fn spans(&self, hay: &[u8], edges: Edges) -> Vec<(usize, usize)> {
        let Some(automaton) = &self.automaton else { return Vec::new() };
        let mut spans: Vec<(usize, usize)> =
            automaton.find_overlapping_iter(hay).map(|m| (m.start(), m.end())).collect();
        for (view, automaton) in [(View::Base64, &self.base64), (View::Dump, &self.dump)] {
            if let Some(automaton) = automaton {
                let (text, origin) = view.project(hay, edges);
                spans.extend(
                    automaton.find_overlapping_iter(&text[..]).map(|m| (origin[m.start()].0, origin[m.end() - 1].1)),
                );
            }
        }
        spans.sort_unstable();
        merge(spans)
    }
}

/// An automaton over `patterns` (those of at least [`MIN_SECRET_LEN`] bytes, deduplicated) and the
/// length of the longest.
fn build(mut patterns: Vec<Zeroizing<Vec<u8>>>) -> Result<(Option<AhoCorasick>, usize)> {
    patterns.retain(|p| p.len() >= MIN_SECRET_LEN);
    patterns.sort_unstable_by(|a, b| a[..].cmp(&b[..]));
    patterns.dedup_by(|a, b| a[..] == b[..]);
    let longest = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
    if patterns.is_empty() {
        return Ok((None, 0));
    }
    // A contiguous NFA: building a DFA for a few hundred patterns costs more than a job's whole
    // output takes to search, and a masker is built per job.
    let automaton = AhoCorasick::builder()
        .match_kind(MatchKind::Standard)
        .kind(Some(AhoCorasickKind::ContiguousNFA))
        .build(patterns.iter().map(|p| &p[..]))?;
    Ok((Some(automaton), longest))
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
    masker: Cow<'m, Masker>,
    /// Input not yet written out (it may begin a secret).
    held: Vec<u8>,
    /// How many leading bytes of `held` belong to a secret already found (its mark is written).
    forced: usize,
    /// Whether the output written so far ends with a mark, so a secret touching it joins it.
    mask_open: bool,
    /// Whether `held` starts inside a line longer than [`MAX_VIEW_LINE`] (one no view reads).
    mid_line: bool,
}

impl MaskStream<'_> {
    /// Takes the next chunk and appends to `out` whatever can no longer be part of a secret.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if self.masker.is_empty() {
            out.extend_from_slice(chunk);
            return;
        }
        self.held.extend_from_slice(chunk);
        let Some(cut) = self.held.len().checked_sub(self.masker.reach) else { return };
        // Cut at the start of a line, so that the views read the same lines as in the whole
        // output; inside a line too long for any view, anywhere.
        let line_start = match self.held[..cut].iter().rposition(|&b| b == b'\n') {
            Some(newline) => Some(newline + 1),
            None if self.mid_line => None,
            None => Some(0),
        };
        match line_start {
            Some(start) if cut - start <= MAX_VIEW_LINE + 2 => {
                self.drain(start, Edges { mid_line: self.mid_line, complete: false }, out);
                self.mid_line = self.mid_line && start == 0;
            }
            _ => {
                self.drain(cut, Edges { mid_line: self.mid_line, complete: false }, out);
                self.mid_line = true;
            }
        }
    }

    /// Appends the rest to `out`.
    pub fn finish(mut self, out: &mut Vec<u8>) {
        let edges = Edges { mid_line: self.mid_line, complete: true };
        self.drain(self.held.len(), edges, out);
    }

    /// Writes out `held[..cut]`. A match that starts before `cut` ends within `held` (a match
    /// covers at most `reach` bytes, and at least that many follow `cut`), so every match that
    /// touches the written part is known now.
    fn drain(&mut self, cut: usize, edges: Edges, out: &mut Vec<u8>) {
        if cut == 0 && !edges.complete {
            // Nothing can be written yet; a mark still open (`forced`) stays open.
            return;
        }
        let mut spans = self.masker.spans(&self.held, edges);
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
    base64_forms(secret, out);
    let mut add = |form: Vec<u8>| out.push(Zeroizing::new(form));
    for digits in [b"0123456789abcdef", b"0123456789ABCDEF"] {
        let hex = Zeroizing::new(hex(secret, digits));
        add(hex.to_vec());
        // Bytes apart (`od -tx1`, `hexdump -C`) and in pairs at either alignment (`xxd`).
        add(spaced(&hex, 2, 0));
        add(spaced(&hex, 4, 0));
        add(spaced(&hex, 4, 2));
    }
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    let uri_component = |b: u8| b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b);
    add(percent(secret, unreserved, false, b"0123456789ABCDEF"));
    add(percent(secret, unreserved, false, b"0123456789abcdef"));
    add(percent(secret, unreserved, true, b"0123456789ABCDEF"));
    add(percent(secret, uri_component, false, b"0123456789ABCDEF"));
    // Every byte escaped, as `urllib.parse.quote(s, safe="")` does not but hand-rolled encoders do.
    add(percent(secret, |_| false, false, b"0123456789ABCDEF"));
    add(percent(secret, |_| false, false, b"0123456789abcdef"));
    if let Ok(text) = std::str::from_utf8(secret) {
        for flags in 0..8u8 {
            add(json_escape(text, flags & 1 != 0, flags & 2 != 0, flags & 4 != 0).into_bytes());
        }
        // Every character as `\uXXXX` (UTF-16 units), lower and upper case hex.
        let all = Zeroizing::new(json_unicode(text));
        add(all.as_bytes().to_vec());
        let upper = Zeroizing::new(all.to_ascii_uppercase());
        add(upper.replace("\\U", "\\u").into_bytes());
        let once = Zeroizing::new(json_escape(text, false, false, false));
        add(json_escape(&once, false, false, false).into_bytes());
    }
}

/// The base64 forms of `secret`: whole, padded or not, and the parts fixed at each alignment
/// inside a longer base64 text, in both alphabets.
fn base64_forms(secret: &[u8], out: &mut Vec<Zeroizing<Vec<u8>>>) {
    let mut add = |form: Vec<u8>| out.push(Zeroizing::new(form));
    for engine in [&STANDARD, &URL_SAFE] {
        add(engine.encode(secret).into_bytes());
    }
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        add(engine.encode(secret).into_bytes());
        for skew in 0..3 {
            add(base64_core(engine, secret, skew));
        }
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

/// `hex` with a space before every `group` digits, the first group cut short to `group - skew`
/// digits: the whole groups of a dump whose groups start `skew` digits before the secret.
fn spaced(hex: &[u8], group: usize, skew: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(hex.len() * 2);
    for (i, &digit) in hex.iter().enumerate() {
        if i > 0 && (i + skew) % group == 0 {
            out.push(b' ');
        }
        out.push(digit);
    }
    out
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

/// `text` as a JSON string's inside with every character escaped as `\uXXXX`.
fn json_unicode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 6);
    let mut units = [0u16; 2];
    for c in text.chars() {
        for unit in c.encode_utf16(&mut units) {
            out.push_str(&format!("\\u{unit:04x}"));
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

/// Lines longer than this (without their line break) are not read by a [`View`]: a hex dump's line
/// is at most about 80 bytes (`xxd -c 32` about 120), wrapped base64 76 or 64.
const MAX_VIEW_LINE: usize = 128;

/// A wrapped base64 line is at least this long (MIME wraps at 76, PEM at 64).
const MIN_BASE64_LINE: usize = 16;

/// What a view knows about the edges of the text it reads.
#[derive(Debug, Clone, Copy)]
struct Edges {
    /// The text starts inside a line longer than [`MAX_VIEW_LINE`].
    mid_line: bool,
    /// The text's last line is complete even without a line break (the end of the output).
    complete: bool,
}

impl Edges {
    const WHOLE: Edges = Edges { mid_line: false, complete: true };
}

/// A rewriting of the output in which an encoded secret that a tool spread over lines is
/// contiguous again. Each byte of a view remembers the span of the output it stands for; a byte
/// no pattern contains (`\n`) separates what must not join.
#[derive(Debug, Clone, Copy)]
enum View {
    /// Line breaks after lines of only base64 characters removed (`base64`, PEM, MIME).
    Base64,
    /// The data columns of hex dump lines (`xxd`, `od -tx1`, `hexdump -C`, `xxd -p`), lower
    /// case, joined across lines. A match stands for the output from its first digit to the end of
    /// its last line, so the dump's text column, which shows the same bytes, is masked too.
    Dump,
}

impl View {
    /// The most output bytes a match of a `longest`-byte pattern in this view can stand for.
    fn reach(self, longest: usize) -> usize {
        match self {
            // Every joined line holds at least MIN_BASE64_LINE characters and loses up to 2 bytes.
            View::Base64 => longest + 2 * (longest / MIN_BASE64_LINE + 1),
            // Every dump line holds at least one byte (2 digits), and the match runs to its end.
            View::Dump => (longest / 2 + 1) * (MAX_VIEW_LINE + 2),
        }
    }

    /// The view's text and, for each of its bytes, the output span it stands for.
    fn project(self, hay: &[u8], edges: Edges) -> (Zeroizing<Vec<u8>>, Vec<(usize, usize)>) {
        let mut text = Zeroizing::new(Vec::with_capacity(hay.len()));
        let mut origin = Vec::with_capacity(hay.len());
        let mut start = 0;
        // Whether the line before was joined to this one.
        let mut joined = false;
        while start < hay.len() {
            let (end, next, broken) = match hay[start..].iter().position(|&b| b == b'\n') {
                Some(n) => (start + n, start + n + 1, true),
                None => (hay.len(), hay.len(), false),
            };
            let content = if end > start && hay[end - 1] == b'\r' { end - 1 } else { end };
            let line = &hay[start..content];
            let readable = line.len() <= MAX_VIEW_LINE && !(edges.mid_line && start == 0) && (broken || edges.complete);
            let mut join = false;
            match self {
                View::Base64 => {
                    join = readable
                        && broken
                        && line.len() >= MIN_BASE64_LINE
                        && line.iter().all(|&b| b.is_ascii_alphanumeric() || b"+/-_".contains(&b));
                    // Only lines at a join: what lies within one line the output itself shows.
                    if join || joined {
                        for (i, &b) in line.iter().enumerate() {
                            text.push(b);
                            origin.push((start + i, start + i + 1));
                        }
                    }
                }
                View::Dump if readable => {
                    for i in dump_digits(line) {
                        text.push(line[i].to_ascii_lowercase());
                        origin.push((start + i, content));
                        join = true;
                    }
                }
                View::Dump => {}
            }
            if !join && text.last() != Some(&b'\n') {
                text.push(b'\n');
                origin.push((start, start));
            }
            joined = join;
            start = next;
        }
        (text, origin)
    }
}

/// The positions of the data digits of a hex dump line: after an offset (`00000010:` of xxd, the
/// 7 or 8 digits of od and hexdump), the tokens of only hex digits of even length up to the first
/// other token (hexdump's `|text|`) or, after an xxd offset, up to the two spaces before its text
/// column. Empty for a line that is not a dump line.
fn dump_digits(line: &[u8]) -> Vec<usize> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < line.len() {
        if line[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        while i < line.len() && !line[i].is_ascii_whitespace() {
            i += 1;
        }
        tokens.push((start, i));
    }
    let hex = |(s, e): (usize, usize)| line[s..e].iter().all(u8::is_ascii_hexdigit);
    let mut rest = &tokens[..];
    let mut xxd = false;
    if let [(s, e), _, ..] = tokens[..] {
        let colon = line[e - 1] == b':';
        let digits = if colon { e - 1 } else { e };
        if digits - s >= 6 && hex((s, digits)) {
            xxd = colon;
            rest = &tokens[1..];
        }
    }
    let mut digits = Vec::new();
    let mut last_end = None;
    for &(s, e) in rest {
        if !hex((s, e)) || (e - s) % 2 != 0 || (xxd && last_end.is_some_and(|l| s - l >= 2)) {
            break;
        }
        digits.extend(s..e);
        last_end = Some(e);
    }
    digits
}
