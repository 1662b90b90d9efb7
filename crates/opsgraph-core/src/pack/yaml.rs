//! YAML text -> a tree of nodes that remember where they came from.
//!
//! serde-based YAML loaders stop at the first problem and forget positions; diagnostics need every
//! problem at once with file:line:column, so the tree is built from the parser's events directly.
//! Scalars keep their source text and style: a plain `1.30` is a number, `"1.30"` is a string, and
//! a field that wants a string may still take the text the user wrote.

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

/// A 1-based line and column in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

impl Pos {
    fn from_span(span: Span) -> Pos {
        Pos { line: span.start.line() as u32, col: span.start.col() as u32 + 1 }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// The scalar's resolved type, and its text as written (unquoted).
    Scalar(Scalar, String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: NodeKind,
    pub pos: Pos,
}

impl Node {
    pub fn describe(&self) -> &'static str {
        match &self.kind {
            NodeKind::Scalar(Scalar::Null, _) => "null",
            NodeKind::Scalar(Scalar::Bool(_), _) => "a boolean",
            NodeKind::Scalar(Scalar::Int(_), _) => "an integer",
            NodeKind::Scalar(Scalar::Float(_), _) => "a number",
            NodeKind::Scalar(Scalar::Str, _) => "a string",
            NodeKind::Seq(_) => "a list",
            NodeKind::Map(_) => "a mapping",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar(_, text) => Some(text),
            _ => None,
        }
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            NodeKind::Map(entries) => entries.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// A syntax error: where, and what the parser said.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    pub pos: Pos,
    pub message: String,
    /// A size limit, not malformed YAML.
    pub limit: bool,
}

/// Parses every document of a YAML stream.
/// The deepest nesting of sequences and mappings a document may have.
pub const MAX_DEPTH: usize = 64;
/// How many nodes a stream may make, aliases expanded (a guard against "billion laughs").
pub const MAX_NODES: usize = 1_000_000;

pub fn parse_stream(text: &str) -> Result<Vec<Node>, SyntaxError> {
    let mut builder = Builder { anchors: Vec::new(), stack: Vec::new(), docs: Vec::new(), nodes: 0 };
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| SyntaxError {
            pos: Pos { line: e.marker().line() as u32, col: e.marker().col() as u32 + 1 },
            message: e.info().to_string(),
            limit: false,
        })?;
        builder.event(event, span)?;
    }
    Ok(builder.docs)
}

enum Frame {
    Seq { items: Vec<Node>, pos: Pos, anchor: usize },
    Map { entries: Vec<(Node, Node)>, pending_key: Option<Node>, pos: Pos, anchor: usize },
}

struct Builder {
    /// Anchor id, the node, and how many nodes it holds.
    anchors: Vec<(usize, Node, usize)>,
    stack: Vec<Frame>,
    docs: Vec<Node>,
    nodes: usize,
}

fn size(node: &Node) -> usize {
    match &node.kind {
        NodeKind::Scalar(..) => 1,
        NodeKind::Seq(items) => 1 + items.iter().map(size).sum::<usize>(),
        NodeKind::Map(entries) => 1 + entries.iter().map(|(k, v)| size(k) + size(v)).sum::<usize>(),
    }
}

impl Builder {
    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), SyntaxError> {
        let pos = Pos::from_span(span);
        match event {
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
            Event::DocumentStart(_) => {}
            Event::Alias(id) => {
                let i = self.anchors.iter().rposition(|(a, _, _)| *a == id).ok_or(SyntaxError {
                    pos,
                    message: "unknown alias".to_string(),
                    limit: false,
                })?;
                // Counted before it is copied: an expansion past the limit is never built.
                self.count(self.anchors[i].2, pos)?;
                let kind = self.anchors[i].1.kind.clone();
                self.push(Node { kind, pos })?;
            }
            Event::Scalar(value, style, anchor, _tag) => {
                // A quoted scalar may spell one (`"\0"`, `"\u0000"`): no text of a document
                // may hold it (PostgreSQL's text cannot, and no tool that reads it expects one).
                if value.contains('\0') {
                    return Err(SyntaxError {
                        pos,
                        message: "a NUL character (`\\0`) in a scalar: no text here may hold one".to_string(),
                        limit: false,
                    });
                }
                let scalar = match style {
                    ScalarStyle::Plain => resolve_plain(&value),
                    _ => Scalar::Str,
                };
                let node = Node { kind: NodeKind::Scalar(scalar, value.into_owned()), pos };
                self.count(1, pos)?;
                if anchor != 0 {
                    self.anchors.push((anchor, node.clone(), 1));
                }
                self.push(node)?;
            }
            Event::SequenceStart(anchor, _) => {
                self.open(pos)?;
                self.stack.push(Frame::Seq { items: Vec::new(), pos, anchor })
            }
            Event::MappingStart(anchor, _) => {
                self.open(pos)?;
                self.stack.push(Frame::Map { entries: Vec::new(), pending_key: None, pos, anchor })
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (node, anchor) = match self.stack.pop() {
                    Some(Frame::Seq { items, pos, anchor }) => (Node { kind: NodeKind::Seq(items), pos }, anchor),
                    Some(Frame::Map { entries, pos, anchor, .. }) => {
                        (Node { kind: NodeKind::Map(entries), pos }, anchor)
                    }
                    None => return Err(SyntaxError { pos, message: "unbalanced".to_string(), limit: false }),
                };
                if anchor != 0 {
                    let n = size(&node);
                    self.anchors.push((anchor, node.clone(), n));
                }
                self.push(node)?;
            }
        }
        Ok(())
    }

    /// A new sequence or mapping: one node, one level deeper.
    fn open(&mut self, pos: Pos) -> Result<(), SyntaxError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(SyntaxError {
                pos,
                message: format!("nesting deeper than {MAX_DEPTH} levels (limit: depth of a document)"),
                limit: true,
            });
        }
        self.count(1, pos)
    }

    fn count(&mut self, n: usize, pos: Pos) -> Result<(), SyntaxError> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            return Err(SyntaxError {
                pos,
                message: format!("more than {MAX_NODES} nodes with aliases expanded (limit: nodes of a file)"),
                limit: true,
            });
        }
        Ok(())
    }

    fn push(&mut self, node: Node) -> Result<(), SyntaxError> {
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { entries, pending_key, .. }) => match pending_key.take() {
                None => {
                    if !matches!(node.kind, NodeKind::Scalar(..)) {
                        return Err(SyntaxError {
                            pos: node.pos,
                            message: "a mapping key must be a scalar".to_string(),
                            limit: false,
                        });
                    }
                    if let Some((first, _)) = entries.iter().find(|(k, _)| k.as_str() == node.as_str()) {
                        return Err(SyntaxError {
                            pos: node.pos,
                            message: format!(
                                "duplicate key `{}` (first at line {})",
                                node.as_str().unwrap_or_default(),
                                first.pos.line
                            ),
                            limit: false,
                        });
                    }
                    *pending_key = Some(node);
                }
                Some(key) => entries.push((key, node)),
            },
        }
        Ok(())
    }
}

/// The YAML 1.2 core schema's resolution of plain scalars.
fn resolve_plain(text: &str) -> Scalar {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        "true" | "True" | "TRUE" => return Scalar::Bool(true),
        "false" | "False" | "FALSE" => return Scalar::Bool(false),
        _ => {}
    }
    if let Ok(i) = text.parse::<i64>() {
        return Scalar::Int(i);
    }
    if let Some(hex) = text.strip_prefix("0x") {
        if let Ok(i) = i64::from_str_radix(hex, 16) {
            return Scalar::Int(i);
        }
    }
    let looks_numeric =
        text.trim_start_matches(['+', '-']).chars().next().is_some_and(|c| c.is_ascii_digit() || c == '.');
    if looks_numeric && text.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) {
        if let Ok(f) = text.parse::<f64>() {
            return Scalar::Float(f);
        }
    }
    Scalar::Str
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_scalars() {
        let docs = parse_stream("a: 1\nb:\n  - \"1.30\"\n  - 1.30\n  - x\n---\nc: ~\n").unwrap();
        assert_eq!(docs.len(), 2);
        let b = docs[0].get("b").unwrap();
        let NodeKind::Seq(items) = &b.kind else { panic!() };
        assert_eq!(items[0].kind, NodeKind::Scalar(Scalar::Str, "1.30".into()));
        assert_eq!(items[1].kind, NodeKind::Scalar(Scalar::Float(1.3), "1.30".into()));
        assert_eq!(items[2].pos, Pos { line: 5, col: 5 });
        assert_eq!(docs[1].get("c").unwrap().kind, NodeKind::Scalar(Scalar::Null, "~".into()));
    }

    #[test]
    fn duplicate_keys_are_errors() {
        let err = parse_stream("a: 1\na: 2\n").unwrap_err();
        assert_eq!(err.pos, Pos { line: 2, col: 1 });
        assert!(err.message.contains("duplicate key `a`"), "{}", err.message);
    }

    #[test]
    fn a_nul_in_any_scalar_is_an_error_at_its_position() {
        for (text, pos) in [
            ("a: \"x\\0y\"\n", Pos { line: 1, col: 4 }),
            ("a:\n  - 'ok'\n  - \"\\u0000\"\n", Pos { line: 3, col: 5 }),
            ("\"k\\x00\": 1\n", Pos { line: 1, col: 1 }),
        ] {
            let err = parse_stream(text).unwrap_err();
            assert_eq!((err.pos, err.message.contains("NUL")), (pos, true), "{text:?}: {}", err.message);
        }
        assert!(parse_stream("a: \"\\\\0\"\n").is_ok(), "an escaped backslash then 0 is not a NUL");
    }

    #[test]
    fn version_strings_stay_text() {
        assert_eq!(resolve_plain("1.0.0"), Scalar::Str);
        assert_eq!(resolve_plain("1.7.x"), Scalar::Str);
        assert_eq!(resolve_plain("-3"), Scalar::Int(-3));
    }
}

#[cfg(test)]
mod line_breaks {
    /// Found by `fuzz/` (target `documents`): YAML counts a lone carriage return as a line break,
    /// as most editors do, so positions count lines that `str::lines` does not. The error is at
    /// the end of the text: line 6 when `\r` breaks line 4.
    #[test]
    fn a_lone_carriage_return_breaks_a_line() {
        let text = "artifact:\n  type: kubeconfig.admin\n  sensitivity: secret\n  storage: orm_a\rdmin\n";
        let parsed = crate::pack::parse_file("f.yaml", text);
        let shown: Vec<String> = parsed.diagnostics.iter().map(|d| d.to_string()).collect();
        assert_eq!(shown, ["f.yaml:6:1: error[E001]: invalid YAML: simple key expect ':'"]);
    }
}
