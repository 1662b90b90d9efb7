//! The shape of every document kind, as data.
//!
//! One description serves three purposes: checking a YAML tree (all problems at once, with
//! positions and hints), normalising short forms into the single shape `model`
//! deserialises, and exporting JSON Schema for editors. Keeping them in one place means the
//! schema an editor sees is the schema the validator enforces.

use serde_json::{json, Map, Value};

use crate::pack::diag::{did_you_mean, Code, Diagnostic};
use crate::pack::yaml::{Node, NodeKind, Pos, Scalar};

pub enum Shape {
    /// Any scalar, taken as the text the user wrote.
    Str,
    /// An id: lowercase `[a-z0-9][a-z0-9._-]*`.
    Id,
    /// A pack: its id, or `id@version`.
    PackRef,
    /// A dotted capability key.
    CapKey,
    /// `<type>/<name>`.
    ResourceId,
    /// `30s`, `10m`, `1h`, `2d`.
    Duration,
    Int {
        min: i64,
        max: i64,
    },
    Number,
    Bool,
    /// A number of instances: an integer >= `min`, or a percentage `N%` (`min`..100); normalised
    /// to `{count: N}` or `{percent: N}`.
    Amount {
        min: i64,
    },
    /// One of the listed words.
    Enum(&'static [&'static str]),
    /// A plain scalar, typed as YAML types it (parameters, attributes).
    Scalar,
    /// Anything: scalars, lists, maps.
    Any,
    List(&'static Shape),
    /// A mapping with free keys of the given shape.
    Map {
        key: &'static Shape,
        value: &'static Shape,
    },
    Obj(&'static Obj),
    /// Different shapes by the kind of node the user wrote.
    Alt(&'static Alt),
    /// A single item or a list of them; always a list after normalisation.
    OneOrList(&'static Shape),
}

/// How an alternative is rewritten into the normal form.
pub enum Wrap {
    Keep,
    /// `x` becomes `{field: x}`.
    Field(&'static str),
    /// `x` becomes `{tag: x}` (an externally tagged enum).
    Tag(&'static str),
}

pub struct Alt {
    pub doc: &'static str,
    pub scalar: Option<(&'static Shape, Wrap)>,
    pub seq: Option<(&'static Shape, Wrap)>,
    pub map: Option<(&'static Shape, Wrap)>,
}

pub struct Field {
    pub name: &'static str,
    pub shape: &'static Shape,
    pub required: bool,
    pub doc: &'static str,
    /// Other spellings accepted for this field (`key` for `capability`).
    pub aliases: &'static [&'static str],
}

pub struct Obj {
    pub name: &'static str,
    pub doc: &'static str,
    pub fields: &'static [Field],
    /// Exactly one of these keys must be present.
    pub one_of: &'static [&'static str],
    /// A final rewrite into the model's shape, after checking.
    pub normalize: Option<fn(Map<String, Value>) -> Value>,
}

/// An object of `fields`, with no `one_of` and no final rewrite (see [`Obj::one_of`],
/// [`Obj::normalized`]).
pub const fn obj(name: &'static str, doc: &'static str, fields: &'static [Field]) -> Obj {
    Obj { name, doc, fields, one_of: &[], normalize: None }
}

impl Obj {
    /// The same object, where exactly one of `keys` must be present.
    pub const fn one_of(self, keys: &'static [&'static str]) -> Obj {
        Obj { one_of: keys, ..self }
    }

    /// The same object, rewritten by `normalize` once checked.
    pub const fn normalized(self, normalize: fn(Map<String, Value>) -> Value) -> Obj {
        Obj { normalize: Some(normalize), ..self }
    }
}

pub const fn field(name: &'static str, shape: &'static Shape, doc: &'static str) -> Field {
    Field { name, shape, required: false, doc, aliases: &[] }
}

pub const fn required(name: &'static str, shape: &'static Shape, doc: &'static str) -> Field {
    Field { name, shape, required: true, doc, aliases: &[] }
}

impl Field {
    /// The same field, accepted under other spellings too.
    pub const fn aliases(self, aliases: &'static [&'static str]) -> Field {
        Field { aliases, ..self }
    }
}

/// Checks `node` against `shape`: the normalised value, or `None` where it was wrong.
pub fn check(shape: &Shape, node: &Node, diags: &mut Vec<Diagnostic>) -> Option<Value> {
    Checker { diags }.check(shape, node)
}

struct Checker<'a> {
    diags: &'a mut Vec<Diagnostic>,
}

impl Checker<'_> {
    fn wrong_type(&mut self, node: &Node, expected: String) -> Option<Value> {
        self.diags.push(
            Diagnostic::error(node.pos, Code::WrongType, format!("found {}", node.describe())).expected(expected),
        );
        None
    }

    fn check(&mut self, shape: &Shape, node: &Node) -> Option<Value> {
        match shape {
            Shape::Str => match &node.kind {
                NodeKind::Scalar(Scalar::Null, _) => self.wrong_type(node, expected(shape)),
                NodeKind::Scalar(_, text) => Some(Value::String(text.clone())),
                _ => self.wrong_type(node, expected(shape)),
            },
            Shape::Id | Shape::PackRef | Shape::CapKey | Shape::ResourceId => {
                let text = match &node.kind {
                    NodeKind::Scalar(Scalar::Null, _) => return self.wrong_type(node, expected(shape)),
                    NodeKind::Scalar(_, text) => text,
                    _ => return self.wrong_type(node, expected(shape)),
                };
                let ok = match shape {
                    Shape::Id => crate::model::is_id(text),
                    Shape::PackRef => is_pack_ref(text),
                    Shape::CapKey => crate::model::is_capability_key(text),
                    _ => crate::model::is_resource_id(text),
                };
                if !ok {
                    let lower = text.to_lowercase().replace(' ', "-");
                    let mut diag =
                        Diagnostic::error(node.pos, Code::BadId, format!("`{text}` is not a valid {}", name_of(shape)))
                            .expected(expected(shape));
                    let valid = match shape {
                        Shape::Id => crate::model::is_id(&lower),
                        Shape::PackRef => is_pack_ref(&lower),
                        Shape::CapKey => crate::model::is_capability_key(&lower),
                        _ => crate::model::is_resource_id(&lower),
                    };
                    if valid {
                        diag = diag.hint(format!("did you mean `{lower}`?"));
                    }
                    self.diags.push(diag);
                    return None;
                }
                Some(Value::String(text.clone()))
            }
            Shape::Duration => match &node.kind {
                NodeKind::Scalar(Scalar::Str, text) if parse_duration(text).is_some() => {
                    Some(Value::String(text.clone()))
                }
                NodeKind::Scalar(Scalar::Str, text) => {
                    self.diags.push(
                        Diagnostic::error(node.pos, Code::BadValue, format!("`{text}` is not a duration"))
                            .expected(expected(shape)),
                    );
                    None
                }
                NodeKind::Scalar(Scalar::Int(n), _) => {
                    self.diags.push(
                        Diagnostic::error(node.pos, Code::BadValue, format!("`{n}` has no unit"))
                            .expected(expected(shape))
                            .hint(format!("write `{n}s` for seconds")),
                    );
                    None
                }
                _ => self.wrong_type(node, expected(shape)),
            },
            Shape::Int { min, max } => match &node.kind {
                NodeKind::Scalar(Scalar::Int(n), _) if n >= min && n <= max => Some(json!(n)),
                NodeKind::Scalar(Scalar::Int(n), _) => {
                    self.diags.push(
                        Diagnostic::error(node.pos, Code::BadValue, format!("{n} is out of range"))
                            .expected(expected(shape)),
                    );
                    None
                }
                _ => self.wrong_type(node, expected(shape)),
            },
            Shape::Amount { min } => {
                let bad = |what: String| Diagnostic::error(node.pos, Code::BadValue, what).expected(expected(shape));
                match &node.kind {
                    NodeKind::Scalar(Scalar::Int(n), _) if n >= min => Some(json!({"count": n})),
                    NodeKind::Scalar(Scalar::Int(n), _) => {
                        self.diags.push(bad(format!("{n} is out of range")));
                        None
                    }
                    NodeKind::Scalar(Scalar::Str, text) if text.ends_with('%') => {
                        match text.trim_end_matches('%').parse::<i64>() {
                            Ok(p) if p >= *min && p <= 100 => Some(json!({"percent": p})),
                            _ => {
                                self.diags.push(bad(format!("`{text}` is not a percentage from {min}% to 100%")));
                                None
                            }
                        }
                    }
                    _ => self.wrong_type(node, expected(shape)),
                }
            }
            Shape::Number => match &node.kind {
                NodeKind::Scalar(Scalar::Int(n), _) => Some(json!(n)),
                NodeKind::Scalar(Scalar::Float(f), _) => Some(json!(f)),
                _ => self.wrong_type(node, expected(shape)),
            },
            Shape::Bool => match &node.kind {
                NodeKind::Scalar(Scalar::Bool(b), _) => Some(Value::Bool(*b)),
                NodeKind::Scalar(Scalar::Str, text) if matches!(text.as_str(), "yes" | "no" | "on" | "off") => {
                    self.diags.push(
                        Diagnostic::error(node.pos, Code::WrongType, format!("`{text}` is not a boolean in YAML 1.2"))
                            .expected("true or false")
                            .hint(format!(
                                "write `{}`",
                                if matches!(text.as_str(), "yes" | "on") { "true" } else { "false" }
                            )),
                    );
                    None
                }
                _ => self.wrong_type(node, expected(shape)),
            },
            Shape::Enum(words) => match &node.kind {
                NodeKind::Scalar(Scalar::Null, _) => self.wrong_type(node, expected(shape)),
                NodeKind::Scalar(_, text) if words.contains(&text.as_str()) => Some(Value::String(text.clone())),
                NodeKind::Scalar(_, text) => {
                    let mut diag = Diagnostic::error(node.pos, Code::BadValue, format!("unknown value `{text}`"))
                        .expected(expected(shape));
                    if let Some(close) = did_you_mean(&text.to_lowercase(), words.iter().copied()) {
                        diag = diag.hint(format!("did you mean `{close}`?"));
                    }
                    self.diags.push(diag);
                    None
                }
                _ => self.wrong_type(node, expected(shape)),
            },
            Shape::Scalar => match &node.kind {
                NodeKind::Scalar(..) => Some(to_json(node)),
                _ => self.wrong_type(node, expected(shape)),
            },
            Shape::Any => Some(to_json(node)),
            Shape::List(item) => match &node.kind {
                NodeKind::Seq(items) => {
                    let mut out = Vec::with_capacity(items.len());
                    let mut ok = true;
                    for it in items {
                        match self.check(item, it) {
                            Some(v) => out.push(v),
                            None => ok = false,
                        }
                    }
                    ok.then_some(Value::Array(out))
                }
                _ => self.wrong_type(node, expected(shape)),
            },
            Shape::OneOrList(item) => match &node.kind {
                NodeKind::Seq(_) => self.check(&Shape::List(item), node),
                _ => self.check(item, node).map(|v| Value::Array(vec![v])),
            },
            Shape::Map { key, value } => match &node.kind {
                NodeKind::Map(entries) => {
                    let mut out = Map::new();
                    let mut ok = true;
                    for (k, v) in entries {
                        let key = self.check(key, k);
                        let value = self.check(value, v);
                        match (key, value) {
                            (Some(Value::String(k)), Some(v)) => {
                                out.insert(k, v);
                            }
                            _ => ok = false,
                        }
                    }
                    ok.then_some(Value::Object(out))
                }
                NodeKind::Scalar(Scalar::Null, _) => Some(Value::Object(Map::new())),
                _ => self.wrong_type(node, expected(shape)),
            },
            Shape::Obj(obj) => self.check_obj(obj, node),
            Shape::Alt(alt) => {
                let choice = match &node.kind {
                    NodeKind::Scalar(Scalar::Null, _) => None,
                    NodeKind::Scalar(..) => alt.scalar.as_ref(),
                    NodeKind::Seq(_) => alt.seq.as_ref(),
                    NodeKind::Map(_) => alt.map.as_ref(),
                };
                let Some((shape, wrap)) = choice else {
                    return self.wrong_type(node, alt.doc.to_string());
                };
                let value = self.check(shape, node)?;
                Some(match wrap {
                    Wrap::Keep => value,
                    Wrap::Field(name) | Wrap::Tag(name) => json!({ *name: value }),
                })
            }
        }
    }

    fn check_obj(&mut self, obj: &Obj, node: &Node) -> Option<Value> {
        let entries = match &node.kind {
            NodeKind::Map(entries) => entries,
            _ => return self.wrong_type(node, format!("a mapping ({})", obj.name)),
        };
        let mut out = Map::new();
        let mut ok = true;
        for (k, v) in entries {
            let key = k.as_str().unwrap_or_default();
            let field = obj.fields.iter().find(|f| f.name == key || f.aliases.contains(&key));
            let Some(field) = field else {
                let names = obj.fields.iter().map(|f| f.name);
                let mut diag =
                    Diagnostic::error(k.pos, Code::UnknownKey, format!("unknown key `{key}` in {}", obj.name))
                        .expected(format!("one of {}", list_words(obj.fields.iter().map(|f| f.name))));
                if let Some(close) = did_you_mean(key, names) {
                    diag = diag.hint(format!("did you mean `{close}`?"));
                }
                self.diags.push(diag);
                ok = false;
                continue;
            };
            if out.contains_key(field.name) {
                self.diags.push(Diagnostic::error(
                    k.pos,
                    Code::Duplicate,
                    format!("`{key}` and `{}` say the same thing; keep one", field.name),
                ));
                ok = false;
                continue;
            }
            match self.check(field.shape, v) {
                Some(value) => {
                    out.insert(field.name.to_string(), value);
                }
                None => ok = false,
            }
        }
        for f in obj.fields.iter().filter(|f| f.required) {
            let present = entries.iter().any(|(k, _)| {
                let key = k.as_str().unwrap_or_default();
                key == f.name || f.aliases.contains(&key)
            });
            if !present {
                self.diags.push(
                    Diagnostic::error(node.pos, Code::MissingKey, format!("{} is missing `{}`", obj.name, f.name))
                        .expected(format!("`{}`: {}", f.name, f.doc)),
                );
                ok = false;
            }
        }
        if !obj.one_of.is_empty() {
            let present: Vec<&str> = obj.one_of.iter().copied().filter(|k| node.get(k).is_some()).collect();
            if present.len() != 1 {
                let msg = if present.is_empty() {
                    format!("{} needs one of {}", obj.name, list_words(obj.one_of.iter().copied()))
                } else {
                    format!("{} takes only one of {}", obj.name, list_words(present.iter().copied()))
                };
                self.diags.push(
                    Diagnostic::error(node.pos, Code::MissingKey, msg)
                        .expected(format!("exactly one of {}", list_words(obj.one_of.iter().copied()))),
                );
                ok = false;
            }
        }
        if !ok {
            return None;
        }
        Some(match obj.normalize {
            Some(f) => f(out),
            None => Value::Object(out),
        })
    }
}

/// The node as plain JSON, typed as YAML types it.
pub fn to_json(node: &Node) -> Value {
    match &node.kind {
        NodeKind::Scalar(Scalar::Null, _) => Value::Null,
        NodeKind::Scalar(Scalar::Bool(b), _) => Value::Bool(*b),
        NodeKind::Scalar(Scalar::Int(i), _) => json!(i),
        NodeKind::Scalar(Scalar::Float(f), _) => json!(f),
        NodeKind::Scalar(Scalar::Str, s) => Value::String(s.clone()),
        NodeKind::Seq(items) => Value::Array(items.iter().map(to_json).collect()),
        NodeKind::Map(entries) => Value::Object(
            entries.iter().map(|(k, v)| (k.as_str().unwrap_or_default().to_string(), to_json(v))).collect(),
        ),
    }
}

/// `30s`, `10m`, `1h`, `2d`, `500ms` -> milliseconds.
pub fn parse_duration(text: &str) -> Option<u64> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().ok()?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(ms)
}

fn list_words<'a>(words: impl Iterator<Item = &'a str>) -> String {
    let words: Vec<String> = words.map(|w| format!("`{w}`")).collect();
    words.join(", ")
}

fn name_of(shape: &Shape) -> &'static str {
    match shape {
        Shape::Id => "id",
        Shape::PackRef => "pack reference",
        Shape::CapKey => "capability key",
        Shape::ResourceId => "resource id",
        _ => "value",
    }
}

/// What a shape expects, in words.
pub fn expected(shape: &Shape) -> String {
    match shape {
        Shape::Str => "a string".to_string(),
        Shape::Id => "an id: lowercase letters, digits, `.`, `_`, `-`, starting with a letter or digit".to_string(),
        Shape::PackRef => "a pack id, or `id@version` such as `tempo@1.1.0`".to_string(),
        Shape::CapKey => "a dotted capability key such as `object_storage.s3`".to_string(),
        Shape::ResourceId => "a resource id `<type>/<name>` such as `compute_node/worker-3`".to_string(),
        Shape::Duration => "a duration such as `30s`, `10m`, `1h`".to_string(),
        Shape::Int { min, max } if *max == i64::MAX => format!("an integer >= {min}"),
        Shape::Int { min, max } => format!("an integer from {min} to {max}"),
        Shape::Number => "a number".to_string(),
        Shape::Amount { min } => format!("a count >= {min}, or a percentage such as `25%`"),
        Shape::Bool => "true or false".to_string(),
        Shape::Enum(words) => format!("one of {}", list_words(words.iter().copied())),
        Shape::Scalar => "a string, number or boolean".to_string(),
        Shape::Any => "any value".to_string(),
        Shape::List(item) => format!("a list of {}", plural(item)),
        Shape::OneOrList(item) => format!("{}, or a list of them", expected(item)),
        Shape::Map { value, .. } => format!("a mapping of {}", strip_article(&expected(value))),
        Shape::Obj(obj) => format!("a mapping ({})", obj.name),
        Shape::Alt(alt) => alt.doc.to_string(),
    }
}

fn plural(shape: &Shape) -> String {
    match shape {
        Shape::Id => "ids".to_string(),
        Shape::CapKey => "capability keys".to_string(),
        Shape::ResourceId => "resource ids (`<type>/<name>`)".to_string(),
        Shape::Str => "strings".to_string(),
        Shape::Obj(obj) => format!("mappings ({})", obj.name),
        other => strip_article(&expected(other)),
    }
}

fn strip_article(s: &str) -> String {
    s.strip_prefix("a ").or_else(|| s.strip_prefix("an ")).unwrap_or(s).to_string()
}

/// JSON Schema (2020-12) for a shape, as written by users (before normalisation).
pub fn json_schema(shape: &Shape, defs: &mut Map<String, Value>) -> Value {
    match shape {
        Shape::Str => json!({"type": ["string", "number", "boolean"]}),
        Shape::Id => json!({"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]*$"}),
        Shape::PackRef => json!({"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]*(@[a-z0-9][a-z0-9._-]*)?$"}),
        Shape::CapKey => {
            json!({"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]*(\\.[a-z0-9][a-z0-9_-]*)*$"})
        }
        Shape::ResourceId => {
            json!({"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]*/[a-z0-9][a-z0-9._-]*$"})
        }
        Shape::Duration => json!({"type": "string", "pattern": "^[0-9]+(ms|s|m|h|d)$"}),
        Shape::Int { min, max } => {
            let mut s = json!({"type": "integer", "minimum": min});
            if *max != i64::MAX {
                s["maximum"] = json!(max);
            }
            s
        }
        Shape::Number => json!({"type": "number"}),
        Shape::Amount { min } => json!({"anyOf": [
            {"type": "integer", "minimum": min},
            {"type": "string", "pattern": "^[0-9]{1,3}%$"},
        ]}),
        Shape::Bool => json!({"type": "boolean"}),
        Shape::Enum(words) => json!({"enum": words}),
        Shape::Scalar => json!({"type": ["string", "number", "boolean", "null"]}),
        Shape::Any => json!({}),
        Shape::List(item) => json!({"type": "array", "items": json_schema(item, defs)}),
        Shape::OneOrList(item) => {
            let item = json_schema(item, defs);
            json!({"anyOf": [item.clone(), {"type": "array", "items": item}]})
        }
        Shape::Map { key, value } => {
            let mut s = json!({"type": "object", "additionalProperties": json_schema(value, defs)});
            if let Some(pattern) = json_schema(key, defs).get("pattern") {
                s["propertyNames"] = json!({"pattern": pattern});
            }
            s
        }
        Shape::Obj(obj) => {
            if !defs.contains_key(obj.name) {
                defs.insert(obj.name.to_string(), Value::Null);
                let mut props = Map::new();
                for f in obj.fields {
                    let mut s = json_schema(f.shape, defs);
                    if let Value::Object(m) = &mut s {
                        m.insert("description".into(), json!(f.doc));
                    }
                    props.insert(f.name.to_string(), s.clone());
                    for alias in f.aliases {
                        props.insert(alias.to_string(), s.clone());
                    }
                }
                let required: Vec<&str> =
                    obj.fields.iter().filter(|f| f.required && f.aliases.is_empty()).map(|f| f.name).collect();
                let mut s = json!({
                    "type": "object",
                    "description": obj.doc,
                    "properties": props,
                    "additionalProperties": false,
                });
                if !required.is_empty() {
                    s["required"] = json!(required);
                }
                if !obj.one_of.is_empty() {
                    s["oneOf"] = Value::Array(obj.one_of.iter().map(|k| json!({"required": [k]})).collect());
                }
                defs.insert(obj.name.to_string(), s);
            }
            json!({"$ref": format!("#/$defs/{}", obj.name)})
        }
        Shape::Alt(alt) => {
            let any: Vec<Value> =
                [&alt.scalar, &alt.seq, &alt.map].into_iter().flatten().map(|(s, _)| json_schema(s, defs)).collect();
            json!({"description": alt.doc, "anyOf": any})
        }
    }
}

/// The position of the node at `path` (keys and list indices), for diagnostics found after
/// checking, or the nearest ancestor's.
pub fn pos_at(node: &Node, path: &[PathSeg<'_>]) -> Pos {
    let mut cur = node;
    for seg in path {
        let next = match (seg, &cur.kind) {
            (PathSeg::Key(k), NodeKind::Map(_)) => cur.get(k),
            (PathSeg::Index(i), NodeKind::Seq(items)) => items.get(*i),
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => break,
        }
    }
    cur.pos
}

#[derive(Debug, Clone, Copy)]
pub enum PathSeg<'a> {
    Key(&'a str),
    Index(usize),
}

/// Markdown tables for an object shape and the objects it contains, each once.
pub(crate) fn markdown(shape: &Shape, out: &mut String, seen: &mut Vec<&'static str>, top: bool) {
    match shape {
        Shape::Obj(obj) => {
            if seen.contains(&obj.name) {
                return;
            }
            seen.push(obj.name);
            if !top {
                out.push_str(&format!("\n### {}\n\n", obj.name));
            }
            out.push_str(&format!("{}\n\n| key | required | value | meaning |\n|---|---|---|---|\n", obj.doc));
            for f in obj.fields {
                let name = if f.aliases.is_empty() {
                    format!("`{}`", f.name)
                } else {
                    format!("`{}` (or `{}`)", f.name, f.aliases.join("`, `"))
                };
                out.push_str(&format!(
                    "| {name} | {} | {} | {} |\n",
                    if f.required { "yes" } else { "" },
                    brief(f.shape).replace('|', "\\|"),
                    f.doc.replace('|', "\\|")
                ));
            }
            if !obj.one_of.is_empty() {
                let keys: Vec<String> = obj.one_of.iter().map(|k| format!("`{k}`")).collect();
                out.push_str(&format!("\nExactly one of {} is present.\n", keys.join(", ")));
            }
            for f in obj.fields {
                markdown(f.shape, out, seen, false);
            }
        }
        Shape::List(item) | Shape::OneOrList(item) => markdown(item, out, seen, top),
        Shape::Map { value, .. } => {
            if top {
                out.push_str(&format!("A mapping of {}.\n", plural(value)));
            }
            markdown(value, out, seen, false)
        }
        Shape::Alt(alt) => {
            if top {
                out.push_str(&format!("{}.\n", alt.doc));
            }
            for (s, _) in [&alt.scalar, &alt.seq, &alt.map].into_iter().flatten() {
                markdown(s, out, seen, top && matches!(s, Shape::Obj(_)));
            }
        }
        _ => {}
    }
}

/// A short name for a shape, for reference tables.
fn brief(shape: &Shape) -> String {
    match shape {
        Shape::Str => "string".into(),
        Shape::Id => "id".into(),
        Shape::PackRef => "id or id@version".into(),
        Shape::CapKey => "capability key".into(),
        Shape::ResourceId => "resource id".into(),
        Shape::Duration => "duration".into(),
        Shape::Int { min, max } if *max == i64::MAX => format!("integer >= {min}"),
        Shape::Int { min, max } => format!("integer {min}..{max}"),
        Shape::Number => "number".into(),
        Shape::Amount { min } => format!("count >= {min} or N%"),
        Shape::Bool => "boolean".into(),
        Shape::Enum(words) => words.iter().map(|w| format!("`{w}`")).collect::<Vec<_>>().join(" | "),
        Shape::Scalar => "scalar".into(),
        Shape::Any => "any".into(),
        Shape::List(item) => format!("list of {}", brief(item)),
        Shape::OneOrList(item) => format!("{} or list of them", brief(item)),
        Shape::Map { key, value } => format!("map {} -> {}", brief(key), brief(value)),
        Shape::Obj(obj) => obj.name.to_string(),
        Shape::Alt(alt) => [&alt.scalar, &alt.seq, &alt.map]
            .into_iter()
            .flatten()
            .map(|(s, _)| brief(s))
            .collect::<Vec<_>>()
            .join(" or "),
    }
}

/// `tempo` or `tempo@1.1.0`: a pack id, optionally with a version that is an id too.
fn is_pack_ref(s: &str) -> bool {
    match s.split_once('@') {
        Some((id, version)) => crate::model::is_id(id) && crate::model::is_id(version),
        None => crate::model::is_id(s),
    }
}
