//! Lints of shell text that decides evidence: a check that cannot fail proves nothing.
//!
//! [`shell`] reads a shell line or script well enough to find its operators (quotes, `$(…)`,
//! `${…}`, backquotes, comments and `\` escapes are understood; it is not a parser) and reports
//! the constructs that let a check pass when its tool is missing or fails:
//!
//! - a pipeline without `pipefail` (`kubectl … | awk …` reports `awk`'s status, so a missing
//!   `kubectl` is not noticed) — unless every stage before the last only prints text
//!   (`printf`/`echo` without a command substitution): the capture-then-pipe form
//!   `out=$(tool …) && printf '%s\n' "$out" | awk …` is the portable equivalent, since Debian 12's
//!   `sh` (dash 0.5.12) has no `pipefail`;
//! - a swallowed failure: `|| true`, `|| :`, `|| exit 0`, `|| return 0`, a trailing `; true`,
//!   `; :` or `; exit 0`, and a command put in the background with `&`.
//!
//! [`evidence`] adds the rule that needs the check itself: a pipeline whose output is compared
//! (`expected`, `contains`, `matches`) without `expected_exit_code` has its exit status ignored,
//! so not even `pipefail` can make it fail.

use crate::model::{Command, Evidence, EvidenceSource};

use crate::pack::diag::Code;

/// One construct found, at a byte offset of the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub code: Code,
    pub offset: usize,
    pub message: String,
    pub hint: String,
}

/// Findings of an evidence check's command (none for checks without a shell line).
pub fn evidence(ev: &Evidence) -> Vec<Finding> {
    if !matches!(ev.source, EvidenceSource::Command | EvidenceSource::Systemd) {
        return Vec::new();
    }
    let Some(text) = ev.command.as_ref().and_then(shell_text) else {
        return Vec::new();
    };
    let mut findings = shell(&text);
    findings.sort_by_key(|f| f.offset);
    findings
}

/// The shell text of a command: a `Line`, or the script of an argv `sh -c SCRIPT` (any of `sh`,
/// `bash`, `dash`, with `-o pipefail` kept in front of it).
fn shell_text(cmd: &Command) -> Option<String> {
    match cmd {
        Command::Line(line) => Some(line.clone()),
        Command::Argv(argv) => {
            let shell = argv.first()?.rsplit('/').next()?;
            if !matches!(shell, "sh" | "bash" | "dash") {
                return None;
            }
            let c = argv.iter().position(|a| a == "-c")?;
            let script = argv.get(c + 1)?;
            let pipefail = argv[1..c].windows(2).any(|w| sets_option(&w[0]) && w[1] == "pipefail");
            // The option becomes a line of its own before the script (offsets of an argv
            // script are not reported: its diagnostics point at the command).
            Some(if pipefail { format!("set -o pipefail\n{script}") } else { script.clone() })
        }
    }
}

/// Findings of a shell line or script, in the order of the text.
pub fn shell(text: &str) -> Vec<Finding> {
    let toks = scan(text);
    let mut findings = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        if t.is_op("|") && !pipefail_at(&toks, i) && !in_case_pattern(&toks, i) {
            let stage = stage_before(&toks, i);
            let prints_only = stage.first().and_then(|t| t.word()).is_some_and(|w| w == "printf" || w == "echo")
                && stage.iter().all(|s| s.depth == t.depth && !s.subst);
            if !prints_only {
                // The command that can fail unseen: the stage's, or the first one of a command
                // substitution a printing stage hides it in.
                let prints = stage.first().and_then(|t| t.word()).is_some_and(|w| w == "printf" || w == "echo");
                let first = stage
                    .iter()
                    .filter_map(|s| Some((s.depth, s.word()?)))
                    .find(|(depth, _)| if prints { *depth > t.depth } else { *depth == t.depth })
                    .map(|(_, word)| word)
                    .unwrap_or("(…)");
                findings.push(Finding {
                    code: Code::Pipeline,
                    offset: t.offset,
                    message: format!(
                        "a pipeline without pipefail: its status is its last stage's, so `{first}` failing or missing goes unnoticed"
                    ),
                    hint: "capture first: `out=$(tool …) && printf '%s\\n' \"$out\" | …` (Debian's sh has no pipefail), or run the line with `bash -o pipefail -c`".to_owned(),
                });
            }
        }
        if t.is_op("||") {
            let next = words_after(&toks, i);
            if swallows(&next) {
                findings.push(Finding {
                    code: Code::Swallowed,
                    offset: t.offset,
                    message: format!("`|| {}` turns a failure into success", next.join(" ")),
                    hint:
                        "let the command's status decide; to accept a known failure, test for it (`[ … ] ||`) instead"
                            .to_owned(),
                });
            }
        }
        if t.is_op("&") {
            findings.push(Finding {
                code: Code::Swallowed,
                offset: t.offset,
                message: "a command run in the background (`&`) cannot fail the check: its status is never waited for"
                    .to_owned(),
                hint: "run it in the foreground".to_owned(),
            });
        }
        if (t.is_op(";") || t.is_op("\n")) && t.depth == 0 {
            let next = words_after(&toks, i);
            let last = toks[i + 1..].iter().all(|n| n.word().is_some() || n.is_op(";") || n.is_op("\n"));
            if last && !next.is_empty() && swallows(&next) {
                findings.push(Finding {
                    code: Code::Swallowed,
                    offset: t.offset,
                    message: format!(
                        "a final `{}` makes the whole command succeed whatever came before",
                        next.join(" ")
                    ),
                    hint: "remove it: the status of the last real command is the check's".to_owned(),
                });
            }
        }
    }
    findings
}

/// Whether token `i`, a `|`, separates the patterns of a `case` item (`absent | *gone) …`)
/// rather than the commands of a pipeline: going back at its depth over pattern words, it meets
/// the `in` of `case WORD in`, or the `;;` that ends the item before.
fn in_case_pattern(toks: &[Tok], i: usize) -> bool {
    let depth = toks[i].depth;
    for j in (0..i).rev() {
        let t = &toks[j];
        if t.depth != depth {
            return false;
        }
        match &t.kind {
            Kind::Word(w) if w == "in" => return j >= 2 && toks[j - 2].is_word("case"),
            Kind::Word(_) | Kind::Op("|") | Kind::Op("\n") | Kind::Op("(") => {}
            Kind::Op(";") => return j >= 1 && matches!(toks[j - 1].kind, Kind::Op(";")),
            Kind::Op(_) => return false,
        }
    }
    false
}

/// Whether `pipefail` was set before token `i` (`set -o pipefail`, `set -euo pipefail`).
fn pipefail_at(toks: &[Tok], i: usize) -> bool {
    toks[..i].windows(2).any(|w| w[1].is_word("pipefail") && w[0].word().is_some_and(sets_option))
}

/// Whether a word sets shell options ending in `-o`, as in `-o`, `-eo`, `-euo`.
fn sets_option(word: &str) -> bool {
    word.starts_with('-') && word.ends_with('o') && word[1..].chars().all(|c| c.is_ascii_alphabetic())
}

fn swallows(words: &[&str]) -> bool {
    matches!(words, ["true"] | [":"] | ["exit", "0"] | ["return", "0"])
}

/// The tokens of the simple command before token `i`, at its depth or deeper, oldest first.
fn stage_before(toks: &[Tok], i: usize) -> Vec<&Tok> {
    let depth = toks[i].depth;
    let mut stage: Vec<&Tok> = toks[..i].iter().rev().take_while(|t| t.depth > depth || t.word().is_some()).collect();
    stage.reverse();
    stage
}

/// The words of the simple command after token `i`, at its depth.
fn words_after(toks: &[Tok], i: usize) -> Vec<&str> {
    let depth = toks[i].depth;
    toks[i + 1..].iter().take_while(|t| t.depth == depth && t.word().is_some()).filter_map(Tok::word).collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A word, its quotes removed (expansions kept as written).
    Word(String),
    /// `|`, `||`, `&&`, `&`, `;`, a newline, `(` or `)`.
    Op(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Tok {
    kind: Kind,
    offset: usize,
    /// Nesting in `$(…)`, backquotes and `( … )`.
    depth: u32,
    /// A word that holds a command substitution.
    subst: bool,
}

impl Tok {
    fn word(&self) -> Option<&str> {
        match &self.kind {
            Kind::Word(w) => Some(w),
            Kind::Op(_) => None,
        }
    }

    fn is_word(&self, w: &str) -> bool {
        self.word() == Some(w)
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(&self.kind, Kind::Op(o) if *o == op || (op == ";" && *o == "\n"))
    }
}

/// The tokens of `text`, in order; the tokens of a command substitution come before the word
/// holding it, one level deeper.
fn scan(text: &str) -> Vec<Tok> {
    let mut s = Scanner { b: text.as_bytes(), i: 0, toks: Vec::new() };
    s.code(0, None);
    s.toks
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    toks: Vec<Tok>,
}

impl Scanner<'_> {
    fn peek(&self, k: usize) -> Option<u8> {
        self.b.get(self.i + k).copied()
    }

    fn op(&mut self, op: &'static str, depth: u32) {
        self.toks.push(Tok { kind: Kind::Op(op), offset: self.i, depth, subst: false });
        self.i += op.len();
    }

    /// Code until `end` (`)` or a backquote) or the end of the text.
    fn code(&mut self, depth: u32, end: Option<u8>) {
        let mut word = String::new();
        let mut start = self.i;
        let mut subst = false;
        let mut in_word = false;
        let mut parens = 0u32;
        while let Some(c) = self.peek(0) {
            if Some(c) == end && (end == Some(b'`') || parens == 0) {
                break;
            }
            let op: Option<&'static str> = match (c, self.peek(1)) {
                (b'|', Some(b'|')) => Some("||"),
                (b'|', _) => Some("|"),
                (b'&', Some(b'&')) => Some("&&"),
                (b'&', _) if word.ends_with(['<', '>']) => None,
                (b'&', _) => Some("&"),
                (b';', _) => Some(";"),
                (b'\n', _) => Some("\n"),
                (b'(', _) => Some("("),
                (b')', _) => Some(")"),
                _ => None,
            };
            if let Some(op) = op {
                self.flush(&mut word, &mut in_word, start, depth, &mut subst);
                match op {
                    "(" => parens += 1,
                    ")" => parens = parens.saturating_sub(1),
                    _ => {}
                }
                self.op(op, depth);
                continue;
            }
            if c == b' ' || c == b'\t' {
                self.flush(&mut word, &mut in_word, start, depth, &mut subst);
                self.i += 1;
                continue;
            }
            if !in_word {
                if c == b'#' {
                    while self.peek(0).is_some_and(|c| c != b'\n') {
                        self.i += 1;
                    }
                    continue;
                }
                in_word = true;
                start = self.i;
            }
            match c {
                b'\\' => {
                    if let Some(n) = self.peek(1).filter(|n| *n != b'\n') {
                        word.push(n as char);
                    }
                    self.i += 2;
                }
                b'\'' => {
                    self.i += 1;
                    while let Some(c) = self.peek(0) {
                        self.i += 1;
                        if c == b'\'' {
                            break;
                        }
                        word.push(c as char);
                    }
                }
                b'"' => {
                    self.i += 1;
                    while let Some(c) = self.peek(0) {
                        match c {
                            b'"' => {
                                self.i += 1;
                                break;
                            }
                            b'\\' => {
                                word.push(self.peek(1).unwrap_or(b'\\') as char);
                                self.i += 2;
                            }
                            b'$' | b'`' => subst |= self.expansion(&mut word, depth),
                            _ => {
                                word.push(c as char);
                                self.i += 1;
                            }
                        }
                    }
                }
                b'$' | b'`' => subst |= self.expansion(&mut word, depth),
                _ => {
                    word.push(c as char);
                    self.i += 1;
                }
            }
        }
        self.flush(&mut word, &mut in_word, start, depth, &mut subst);
    }

    /// An expansion at `$` or a backquote, appended to `word` as written; true when it is a
    /// command substitution (its commands are scanned one level deeper).
    fn expansion(&mut self, word: &mut String, depth: u32) -> bool {
        let from = self.i;
        match (self.peek(0), self.peek(1), self.peek(2)) {
            (Some(b'$'), Some(b'('), Some(b'(')) => self.balanced(b'(', b')'),
            (Some(b'$'), Some(b'{'), _) => self.balanced(b'{', b'}'),
            (Some(b'$'), Some(b'('), _) | (Some(b'`'), _, _) => {
                let end = if self.peek(0) == Some(b'`') { b'`' } else { b')' };
                self.i += if end == b'`' { 1 } else { 2 };
                self.toks.push(Tok { kind: Kind::Op("("), offset: from, depth: depth + 1, subst: false });
                self.code(depth + 1, Some(end));
                self.toks.push(Tok { kind: Kind::Op(")"), offset: self.i, depth: depth + 1, subst: false });
                self.i += 1;
                word.push_str(&String::from_utf8_lossy(&self.b[from..self.i.min(self.b.len())]));
                return true;
            }
            _ => self.i += 1,
        }
        word.push_str(&String::from_utf8_lossy(&self.b[from..self.i.min(self.b.len())]));
        false
    }

    /// Skips from an opening `$` past the bracket that closes the one after it.
    fn balanced(&mut self, open: u8, close: u8) {
        self.i += 1;
        let mut level = 0;
        while let Some(c) = self.peek(0) {
            self.i += 1;
            if c == open {
                level += 1;
            } else if c == close {
                level -= 1;
                if level == 0 {
                    break;
                }
            }
        }
    }

    fn flush(&mut self, word: &mut String, in_word: &mut bool, start: usize, depth: u32, subst: &mut bool) {
        if *in_word {
            self.toks.push(Tok { kind: Kind::Word(std::mem::take(word)), offset: start, depth, subst: *subst });
        }
        *in_word = false;
        *subst = false;
    }
}

/// The 1-based line and column of a byte offset of `text`.
pub fn line_col(text: &str, offset: usize) -> crate::pack::Pos {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let col = before.iter().rev().take_while(|b| **b != b'\n').count() + 1;
    crate::pack::Pos { line: u32::try_from(line).unwrap_or(u32::MAX), col: u32::try_from(col).unwrap_or(u32::MAX) }
}

#[cfg(test)]
#[path = "lint_tests.rs"]
mod tests;
