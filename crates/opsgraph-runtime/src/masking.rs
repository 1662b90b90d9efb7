//! Masking secret values in what a job shows: its output, its evidence, its failure; and the
//! fields among them made printable.
//!
//! What a host prints is not trusted: a failure reason or an evidence value may hold a NUL (which
//! PostgreSQL's text cannot store: the drive's commit would fail), a terminal escape sequence (which
//! would reach the operator's terminal through `opsgraph get` and the live view), a carriage return
//! that overprints a line, or a bidirectional override that reorders what is read. Every such field
//! goes through [`Masking::field`]: masked first (a secret's bytes are matched as printed), then
//! [`printable`]. Logs are kept as printed ([`Masking::text`], [`Masking::bytes`]), as `kubectl logs`
//! keeps them.

use std::borrow::Cow;
use std::fmt::Write as _;

use opsgraph_core::model::Evidence;
use opsgraph_exec::EvidenceResult;

/// Evidence results and their failure with `values` masked.
pub(crate) fn masked(
    values: Vec<Vec<u8>>,
    checks: Vec<(Evidence, EvidenceResult)>,
    failure: Option<String>,
) -> (Vec<(Evidence, EvidenceResult)>, Option<String>) {
    let m = Masking::new(values);
    let failure = failure.map(|f| m.field(&f));
    (m.evidence(checks), failure)
}

/// Masks secret values in what a job shows. When the masker cannot be built, output is
/// withheld rather than shown unmasked (fail closed).
pub(crate) enum Masking {
    None,
    Mask(opsgraph_secrets::Masker),
    Withhold,
}

impl Masking {
    pub(crate) fn new(values: Vec<Vec<u8>>) -> Masking {
        if values.is_empty() {
            return Masking::None;
        }
        match opsgraph_secrets::Masker::new(values) {
            Ok(m) => Masking::Mask(m),
            Err(_) => Masking::Withhold,
        }
    }

    pub(crate) fn bytes(&self, b: &[u8]) -> Vec<u8> {
        match self {
            Masking::None => b.to_vec(),
            Masking::Mask(m) => m.mask_bytes(b),
            Masking::Withhold if b.is_empty() => Vec::new(),
            Masking::Withhold => b"(output withheld: secrets could not be masked)\n".to_vec(),
        }
    }

    pub(crate) fn text(&self, t: &str) -> String {
        String::from_utf8_lossy(&self.bytes(t.as_bytes())).into_owned()
    }

    /// A field (a failure reason, an outcome, an evidence value): masked, then [`printable`].
    pub(crate) fn field(&self, t: &str) -> String {
        match self {
            Masking::None => printable(t).into_owned(),
            _ => printable(&self.text(t)).into_owned(),
        }
    }

    pub(crate) fn evidence(&self, checks: Vec<(Evidence, EvidenceResult)>) -> Vec<(Evidence, EvidenceResult)> {
        checks
            .into_iter()
            .map(|(e, mut r)| {
                r.observed = self.field(&r.observed);
                r.expected = self.field(&r.expected);
                r.detail = self.field(&r.detail);
                for v in r.captured.values_mut() {
                    *v = self.field(v);
                }
                (e, r)
            })
            .collect()
    }
}

/// `text` with the characters that change how text is stored or shown written as escapes: C0
/// controls but tab and line feed (`\x1b`, `\x00`, `\r` as `\x0d`), DEL, C1 controls and Unicode's
/// bidirectional controls (`\u{202e}`). Everything else, backslashes included, is kept as it is.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !escaped(c) => out.push(c),
            c if (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// Log text as a database's text column can hold it: a NUL (which PostgreSQL's text refuses)
/// becomes U+FFFD, as bytes that are not UTF-8 do when the log is read as text. Nothing else of a
/// log is changed.
pub(crate) fn storable_log(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{fffd}")
    } else {
        text
    }
}

fn escaped(c: char) -> bool {
    (c.is_control() && c != '\t' && c != '\n') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};

    use super::*;

    fn check(input: &str, expect: Expect) {
        expect.assert_eq(&printable(input));
    }

    #[test]
    fn what_a_host_prints_is_stored_printable() {
        check(
            "exit code 1: plain text, tabs\tand\nlines, C:\\path",
            expect![[r#"
            exit code 1: plain text, tabs	and
            lines, C:\path"#]],
        );
        check("nul \0 here", expect![[r#"nul \x00 here"#]]);
        check("\x1b[2J\x1b]0;title\x07cleared", expect![[r#"\x1b[2J\x1b]0;title\x07cleared"#]]);
        check("evidence failed\rchecks passed", expect![[r#"evidence failed\x0dchecks passed"#]]);
        check("csi \u{9b}31m del \x7f", expect![[r#"csi \x9b31m del \x7f"#]]);
        check("user \u{202e}nimda\u{202c} é ✓", expect![[r#"user \u{202e}nimda\u{202c} é ✓"#]]);
    }

    #[test]
    fn a_field_is_masked_before_it_is_made_printable() {
        // A secret with a control byte in it is matched as printed, not as its escape.
        let masking = Masking::new(vec![b"s\x1bcret".to_vec()]);
        expect![[r#"token *** then \x1b[0m"#]].assert_eq(&masking.field("token s\x1bcret then \x1b[0m"));
        expect![[r#"nul \x00"#]].assert_eq(&Masking::None.field("nul \0"));
    }

    #[test]
    fn a_log_keeps_its_bytes_but_a_nul() {
        expect![[r#"
            "find -print0: a�b� \u{1b}[1mbold\u{1b}[0m\r\n"
        "#]]
        .assert_debug_eq(&storable_log("find -print0: a\0b\0 \x1b[1mbold\x1b[0m\r\n".into()));
    }
}
