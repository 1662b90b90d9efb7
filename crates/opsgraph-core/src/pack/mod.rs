//! YAML text -> validated `model` documents, with every problem reported at once.
//!
//! Architecture invariant: no IO. Callers read files and hand in `(path, text)`; this crate
//! returns values and diagnostics.
//!
//! The pipeline per file: [`yaml::parse_stream`] builds a positioned tree; [`shape::check`]
//! checks each document against its kind's [`shape::Shape`] and normalises short forms;
//! `serde_json` turns the normal form into model types; [`semantic`] checks the rules that span
//! several fields. [`pack`] then checks the references between the documents of a pack.

pub mod contents;
pub mod diag;
pub mod digest;
pub mod expr;
mod kinds;
pub mod libraries;
pub mod library;
pub mod lint;
mod refusals;
pub mod remedy;
mod semantic;
pub mod shape;
pub mod yaml;

use crate::model::Document;
use serde_json::{json, Map, Value};

pub use contents::{check_pack, JobIndex, Pack, PackFile};
pub use diag::{Code, Diagnostic, Severity};
pub use digest::{compare_versions, content_digest, short_digest, split_pack_ref};
pub use yaml::{Node, Pos};

/// A document and where it came from.
#[derive(Debug, Clone)]
pub struct Located {
    pub file: String,
    pub pos: Pos,
    pub doc: Document,
    /// The document's body (under its root key), for positions of later diagnostics.
    pub node: Node,
}

/// The documents of one file that passed, and the problems of those that did not.
#[derive(Debug, Default)]
pub struct Parsed {
    pub docs: Vec<Located>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Parsed {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// The names of every document kind, in the order of documents.md.
/// The change kinds a plan patch may use (the allow-list of the `change` shape).
pub fn patch_change_kinds() -> &'static [&'static str] {
    kinds::CHANGE.one_of
}

pub fn kinds() -> impl Iterator<Item = &'static str> {
    kinds::KINDS.iter().map(|(k, _)| *k)
}

/// The largest file of documents read.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// The diagnostic for a file of `len` bytes, over [`MAX_FILE_BYTES`]: callers that read files
/// check the size before reading and say the same.
pub fn too_large(file: &str, len: u64) -> Diagnostic {
    Diagnostic::error(
        Pos { line: 1, col: 1 },
        Code::Limit,
        format!("the file is {len} bytes; the limit is {MAX_FILE_BYTES} bytes (1 MiB) per file"),
    )
    .in_file(file)
    .hint("split it into several files")
}

/// Parses and checks every document of one file.
pub fn parse_file(file: &str, text: &str) -> Parsed {
    let mut parsed = Parsed::default();
    if text.len() > MAX_FILE_BYTES {
        parsed.diagnostics.push(too_large(file, text.len() as u64));
        return parsed;
    }
    let roots = match yaml::parse_stream(text) {
        Ok(roots) => roots,
        Err(e) => {
            parsed.diagnostics.push(match e.limit {
                true => Diagnostic::error(e.pos, Code::Limit, e.message).in_file(file),
                false => Diagnostic::error(e.pos, Code::Syntax, format!("invalid YAML: {}", e.message)).in_file(file),
            });
            return parsed;
        }
    };
    for root in roots {
        let mut diags = Vec::new();
        if let Some(located) = parse_document(file, &root, &mut diags) {
            parsed.docs.push(located);
        }
        parsed.diagnostics.extend(diags.into_iter().map(|d| d.in_file(file)));
    }
    diag::sort(&mut parsed.diagnostics);
    parsed
}

fn parse_document(file: &str, root: &Node, diags: &mut Vec<Diagnostic>) -> Option<Located> {
    let entries = match &root.kind {
        yaml::NodeKind::Map(entries) if entries.len() == 1 => entries,
        yaml::NodeKind::Scalar(yaml::Scalar::Null, _) => return None, // An empty document.
        yaml::NodeKind::Map(entries) if entries.len() > 1 => {
            let keys: Vec<&str> = entries.iter().filter_map(|(k, _)| k.as_str()).collect();
            diags.push(
                Diagnostic::error(
                    root.pos,
                    Code::UnknownKind,
                    format!("a document has one root key; found {}", keys.join(", ")),
                )
                .expected(format!("exactly one of {}", kinds().collect::<Vec<_>>().join(", ")))
                .hint("separate documents with a line `---`"),
            );
            return None;
        }
        _ => {
            diags.push(
                Diagnostic::error(
                    root.pos,
                    Code::UnknownKind,
                    format!("a document must be a mapping, found {}", root.describe()),
                )
                .expected(format!("a mapping with one root key: {}", kinds().collect::<Vec<_>>().join(", "))),
            );
            return None;
        }
    };
    let (key, body) = &entries[0];
    let kind = key.as_str().unwrap_or_default();
    let Some((kind, shape)) = kinds::KINDS.iter().find(|(k, _)| *k == kind) else {
        let mut d = Diagnostic::error(key.pos, Code::UnknownKind, format!("unknown document kind `{kind}`"))
            .expected(format!("one of {}", kinds().collect::<Vec<_>>().join(", ")));
        if let Some(close) = diag::did_you_mean(&kind.to_lowercase(), kinds()) {
            d = d.hint(format!("did you mean `{close}`?"));
        }
        diags.push(d);
        return None;
    };
    let before = diags.len();
    let value = shape::check(shape, body, diags);
    // Cross-field rules run even when the shape failed: all problems at once.
    semantic::check(kind, body, diags);
    let value = value?;
    if diags[before..].iter().any(Diagnostic::is_error) {
        return None;
    }
    let tagged = json!({ *kind: value });
    match serde_json::from_value::<Document>(tagged) {
        Ok(doc) => Some(Located { file: file.to_string(), pos: key.pos, doc, node: body.clone() }),
        Err(e) => {
            // The shape accepted what the model refuses: a bug in this crate, reported as such.
            diags.push(Diagnostic::error(
                key.pos,
                Code::BadValue,
                format!("internal error: the {kind} passed its shape check but not the model ({e})"),
            ));
            None
        }
    }
}

/// JSON Schema for one kind, or for a whole document (any kind) when `kind` is `None`.
pub fn json_schema(kind: Option<&str>) -> Option<Value> {
    let mut defs = Map::new();
    let body = match kind {
        Some(kind) => {
            let (_, shape) = kinds::KINDS.iter().find(|(k, _)| *k == kind)?;
            let inner = shape::json_schema(shape, &mut defs);
            json!({
                "type": "object",
                "properties": { kind: inner },
                "required": [kind],
                "additionalProperties": false,
            })
        }
        None => {
            let any: Vec<Value> = kinds::KINDS
                .iter()
                .map(|(k, shape)| {
                    let inner = shape::json_schema(shape, &mut defs);
                    json!({
                        "type": "object",
                        "properties": { *k: inner },
                        "required": [k],
                        "additionalProperties": false,
                    })
                })
                .collect();
            json!({ "oneOf": any })
        }
    };
    let mut schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": format!("https://opsgraph.dev/schema/{}.json", kind.unwrap_or("document")),
        "title": format!("Opsgraph {}", kind.unwrap_or("document")),
    });
    if let (Value::Object(s), Value::Object(b)) = (&mut schema, body) {
        s.extend(b);
        s.insert("$defs".into(), Value::Object(defs));
    }
    Some(schema)
}

/// The reference of every document kind, in Markdown, generated from the shapes the validator
/// enforces (`docs/reference/documents.md` is this text; a test keeps it in sync).
pub fn markdown_reference() -> String {
    let mut out = String::from(
        "# Document reference\n\nGenerated from the validator's own shapes by `opsgraph schema --markdown`; do not edit by hand.\nSee `docs/documents.md` for the concepts and examples.\n",
    );
    for (kind, shape) in kinds::KINDS {
        out.push_str(&format!("\n## `{kind}`\n\n"));
        let mut seen = Vec::new();
        shape::markdown(shape, &mut out, &mut seen, true);
    }
    out
}
