//! Diagnostics: every problem of a file, each with where, what was expected and a hint.

use std::fmt;

use crate::pack::yaml::Pos;

/// Stable codes, so that scripts and docs can refer to a kind of problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Code {
    /// The text is not YAML.
    Syntax,
    /// A document's root is not a mapping with one key naming a known kind.
    UnknownKind,
    UnknownKey,
    MissingKey,
    WrongType,
    BadValue,
    BadId,
    /// Two documents (or two entries) declare the same id.
    Duplicate,
    /// A reference to something that does not exist.
    UnknownRef,
    /// A pack-level rule: coverage, contracts, scripts.
    Pack,
    /// A size limit: bytes of a file, nesting depth, nodes after alias expansion.
    Limit,
    /// Warning: an evidence command's pipeline without `pipefail` (a failing stage is not seen).
    Pipeline,
    /// Warning: an evidence command swallows a failure (`|| true`, a final `; true`).
    Swallowed,
    /// A file that is not read: not a regular file (a FIFO, socket or device), a symbolic link
    /// leaving the tree, or unreadable.
    File,
    /// A policy expression (CEL) that does not compile, or names an unknown variable.
    Expression,
    /// An intent's parameter `plan` would refuse: unknown, of the wrong type, outside its enum
    /// (the planning error P003, found by `validate` at the value's position).
    Parameter,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Syntax => "E001",
            Code::UnknownKind => "E002",
            Code::UnknownKey => "E003",
            Code::MissingKey => "E004",
            Code::WrongType => "E005",
            Code::BadValue => "E006",
            Code::BadId => "E007",
            Code::Duplicate => "E008",
            Code::UnknownRef => "E009",
            Code::Pack => "E010",
            Code::Limit => "E011",
            Code::Pipeline => "W001",
            Code::Swallowed => "W002",
            Code::File => "E012",
            Code::Expression => "E013",
            Code::Parameter => "P003",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Code::Syntax => "syntax",
            Code::UnknownKind => "unknown-kind",
            Code::UnknownKey => "unknown-key",
            Code::MissingKey => "missing-key",
            Code::WrongType => "wrong-type",
            Code::BadValue => "bad-value",
            Code::BadId => "bad-id",
            Code::Duplicate => "duplicate",
            Code::UnknownRef => "unknown-ref",
            Code::Pack => "pack",
            Code::Limit => "limit",
            Code::Pipeline => "pipeline-without-pipefail",
            Code::Swallowed => "swallowed-failure",
            Code::File => "file",
            Code::Expression => "expression",
            Code::Parameter => "parameter",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub pos: Pos,
    pub severity: Severity,
    pub code: Code,
    pub message: String,
    pub expected: Option<String>,
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn error(pos: Pos, code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            file: String::new(),
            pos,
            severity: Severity::Error,
            code,
            message: message.into(),
            expected: None,
            hint: None,
        }
    }

    pub fn warning(pos: Pos, code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(pos, code, message) }
    }

    pub fn expected(mut self, expected: impl Into<String>) -> Diagnostic {
        self.expected = Some(expected.into());
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    pub fn in_file(mut self, file: &str) -> Diagnostic {
        self.file = file.to_string();
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        // Line 0: about the file as a whole (it could not be read, it is not a pack).
        if self.pos.line == 0 {
            write!(f, "{}: {severity}[{}]: {}", self.file, self.code.as_str(), self.message)?;
        } else {
            write!(
                f,
                "{}:{}:{}: {severity}[{}]: {}",
                self.file,
                self.pos.line,
                self.pos.col,
                self.code.as_str(),
                self.message
            )?;
        }
        if let Some(expected) = &self.expected {
            write!(f, "\n  = expected: {expected}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  = hint: {hint}")?;
        }
        Ok(())
    }
}

/// Sorts diagnostics by file and position, the order a person fixes them in.
pub fn sort(diags: &mut [Diagnostic]) {
    diags.sort_by(|a, b| (&a.file, a.pos, &a.message).cmp(&(&b.file, b.pos, &b.message)));
}

/// The closest candidate to `word`, when it is close enough to be a likely typo.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let distance = edit_distance(word, candidate);
        let limit = (candidate.len().max(word.len()) / 3).max(1);
        let prefix = candidate.len() >= 3 && (word.starts_with(candidate) || candidate.starts_with(word));
        if (distance <= limit || prefix) && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// Edit distance where swapping two neighbours counts once (optimal string alignment).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j - 1] + cost).min(d[i - 1][j] + 1).min(d[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        let keys = ["options", "reason", "required_roles", "id", "type"];
        assert_eq!(did_you_mean("option", keys), Some("options"));
        assert_eq!(did_you_mean("optoins", keys), Some("options"));
        assert_eq!(did_you_mean("required_role", keys), Some("required_roles"));
        assert_eq!(did_you_mean("colour", keys), None);
        assert_eq!(did_you_mean("hots", ["host", "port"]), Some("host"));
    }
}
