//! The OpenAPI 3.1 document, built from the route table as data: each route's JSON request and
//! success bodies by the JSON Schemas `schemars` derives from their Rust types (requests as they
//! are deserialized, answers as they are serialized) under `components/schemas`; document bodies
//! (`intent`, `resource`, …) by the validator's own shapes (`opsgraph schema KIND`).

use schemars::SchemaGenerator;
use serde_json::{json, Value};

use crate::media::*;
use crate::route::{openapi_path, Access, Route};

/// The schema of a path or query parameter: what the handler accepts, so that a request the
/// document allows is not refused for its shape.
fn parameter_schema(r: &Route, name: &str) -> Value {
    const PACK_ID: &str = "[a-z0-9][a-z0-9._-]*";
    match (r.method, r.path, name) {
        // Removing names one version; reading names one or every version.
        ("DELETE", "/api/v1/packs/{id}", "id") => {
            json!({"type": "string", "pattern": format!("^{PACK_ID}@{PACK_ID}$"), "description": "`id@version`"})
        }
        ("GET", "/api/v1/packs/{id}", "id") => {
            json!({"type": "string", "pattern": format!("^{PACK_ID}(@{PACK_ID})?$"), "description": "`id` or `id@version`"})
        }
        (_, _, "since") => json!({
            "type": "string",
            "format": "date-time",
            "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$",
            "description": "RFC 3339: entries at or after this time",
        }),
        (_, _, "after") => {
            json!({"type": "integer", "minimum": 0, "maximum": i64::MAX, "description": "Events after this seq"})
        }
        (_, _, "format") => {
            json!({"enum": ["json", "text"], "description": "`text`: the preview a person reads, beside the JSON"})
        }
        (_, _, "analyzer") => json!({"enum": ["rules"]}),
        (_, _, "replace") => json!({"enum": ["true", "false"]}),
        ("GET", "/api/v1/operations", "pack") => json!({
            "type": "string",
            "pattern": format!("^{PACK_ID}(@{PACK_ID})?$"),
            "description": "`id` (any version) or `id@version`",
        }),
        ("GET", "/api/v1/operations", "environment") => {
            json!({"type": "string", "minLength": 1, "description": "An environment's name, as intents give it"})
        }
        (_, _, "state") => json!({"type": "string", "description": "An operation state (`running`, `failed`, …)"}),
        _ => json!({"type": "string"}),
    }
}

fn success_content(r: &Route, generator: &mut SchemaGenerator) -> Value {
    match (r.produces, r.response) {
        (JSON, Some(schema)) => json!({"schema": schema(generator)}),
        (EVENT_STREAM, _) => {
            json!({"schema": {"type": "string", "description": "`id: <seq>` and `data: <timeline entry as JSON>` per event; `event: end` when the operation is terminal"}})
        }
        _ => json!({"schema": {"type": "string"}}),
    }
}

/// The JSON Schema of one document kind, as the validator checks it, with its definitions moved
/// to `components/schemas` (`doc.NAME`) so that every `$ref` of the document is a local pointer.
fn document_schema(kind: &str, components: &mut serde_json::Map<String, Value>) -> Value {
    let Some(Value::Object(mut schema)) = opsgraph_core::pack::json_schema(Some(kind)) else {
        return json!({"type": "object"});
    };
    let component = |name: &str| {
        let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
        format!("doc.{safe}")
    };
    fn relink(v: &mut Value, component: &dyn Fn(&str) -> String) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get_mut("$ref") {
                    if let Some(name) = r.strip_prefix("#/$defs/") {
                        *r = format!("#/components/schemas/{}", component(name));
                    }
                }
                m.values_mut().for_each(|v| relink(v, component));
            }
            Value::Array(items) => items.iter_mut().for_each(|v| relink(v, component)),
            _ => {}
        }
    }
    for key in ["$schema", "$id"] {
        schema.remove(key);
    }
    if let Some(Value::Object(defs)) = schema.remove("$defs") {
        for (name, mut def) in defs {
            relink(&mut def, &component);
            components.insert(component(&name), def);
        }
    }
    let mut schema = Value::Object(schema);
    relink(&mut schema, &component);
    let name = format!("{}Document", kind.split('_').map(capitalize).collect::<String>());
    components.insert(name.clone(), schema);
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// No text the API takes or gives may hold a NUL (PostgreSQL's text cannot; a request with one is
/// refused with 400, a document with 422): every string without a pattern of its own says so.
const NO_NUL: &str = "^[^\\u0000]*$";
/// The component of an untyped value (`serde_json::Value`), its strings and keys without a NUL.
const NO_NUL_JSON: &str = "Json";
/// The agent protocol's text: what a host printed is screened (a NUL written as U+FFFD, other
/// controls escaped), never refused, so that a job's report is never lost for its output.
const SCREENED: &[(&str, &[&str])] = &[("LeaseBody", &["text", "report"])];

/// `schema` and its subschemas, each string saying it holds no NUL, each map's keys the same, each
/// untyped value the [`NO_NUL_JSON`] component. Literals (`enum`, `const`, `default`) are left as
/// they are, and so is a string with a pattern or a media type of its own.
fn no_nul(schema: &mut Value) {
    let untyped = |m: &serde_json::Map<String, Value>| {
        m.keys().all(|k| matches!(k.as_str(), "description" | "title" | "default" | "examples"))
    };
    let m = match schema {
        Value::Bool(true) => {
            *schema = json!({"$ref": format!("#/components/schemas/{NO_NUL_JSON}")});
            return;
        }
        Value::Object(m) if untyped(m) => {
            m.insert("$ref".into(), json!(format!("#/components/schemas/{NO_NUL_JSON}")));
            return;
        }
        Value::Object(m) => m,
        _ => return,
    };
    let is = |t: &str| match m.get("type") {
        Some(Value::String(s)) => s == t,
        Some(Value::Array(ts)) => ts.iter().any(|s| s == t),
        _ => false,
    };
    let (string, object) = (is("string"), is("object"));
    let free = |m: &serde_json::Map<String, Value>, k: &str| !m.contains_key(k);
    if string && ["pattern", "enum", "const", "contentMediaType"].iter().all(|k| free(m, k)) {
        m.insert("pattern".into(), json!(NO_NUL));
    }
    let open_map = !matches!(m.get("additionalProperties"), None | Some(Value::Bool(false)));
    if object && open_map && free(m, "propertyNames") {
        m.insert("propertyNames".into(), json!({"pattern": NO_NUL}));
    }
    for key in ["items", "additionalProperties", "not", "contains", "if", "then", "else"] {
        if let Some(sub) = m.get_mut(key) {
            no_nul(sub);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(subs)) = m.get_mut(key) {
            subs.iter_mut().for_each(no_nul);
        }
    }
    for key in ["properties", "patternProperties"] {
        if let Some(Value::Object(subs)) = m.get_mut(key) {
            subs.values_mut().for_each(no_nul);
        }
    }
}

fn capitalize(word: &str) -> String {
    let mut c = word.chars();
    c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
}

/// The OpenAPI 3.1 document of `routes`: request bodies as their handlers deserialize them,
/// success bodies as they are serialized.
pub(crate) fn document(routes: &[Route]) -> Value {
    let settings = |s: schemars::generate::SchemaSettings| {
        s.with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
    };
    let mut requests = settings(schemars::generate::SchemaSettings::draft2020_12().for_deserialize()).into_generator();
    let mut responses = settings(schemars::generate::SchemaSettings::draft2020_12().for_serialize()).into_generator();
    let mut documents = serde_json::Map::new();
    let mut paths = serde_json::Map::new();
    for r in routes {
        let path = openapi_path(r.path);
        let mut parameters: Vec<Value> = r
            .path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| {
                let (name, rest) = match name.strip_prefix('*') {
                    Some(n) => (n, true),
                    None => (name, false),
                };
                let mut p = json!({"name": name, "in": "path", "required": true, "schema": parameter_schema(r, name)});
                if rest {
                    p["description"] = json!("May contain `/`, literally or percent-encoded as `%2F`.");
                }
                p
            })
            .collect();
        parameters.extend(
            r.query
                .iter()
                .map(|q| json!({"name": q, "in": "query", "required": false, "schema": parameter_schema(r, q)})),
        );
        if r.produces == EVENT_STREAM {
            parameters.push(json!({"name": "Last-Event-ID", "in": "header", "required": false, "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"}, "description": "Resume after this event id (a timeline seq); wins over `after`."}));
        }
        if r.method == "POST" && r.path == "/api/v1/operations" {
            // Printable ASCII with at least one non-space (it is trimmed); at most
            // `limits.idempotency_key_bytes` (255 by default).
            parameters.push(json!({"name": "Idempotency-Key", "in": "header", "required": false, "schema": {
                "type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]*[!-~][ -~]*$"
            }}));
        }
        let success = json!({"description": "success", "content": {r.produces: success_content(r, &mut responses)}});
        let mut answers = serde_json::Map::new();
        // Storing what is already there (the same resource or pack archive) is not a creation.
        if r.status == 201 && matches!(r.body, "resource" | "archive") {
            answers.insert("200".into(), json!({"description": "unchanged or updated", "content": success["content"]}));
        }
        answers.insert(r.status.to_string(), success);
        answers.insert(
            "default".into(),
            json!({"description": "an error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}),
        );
        let mut op = json!({
            "summary": r.summary,
            "operationId": format!("{} {}", r.method.to_lowercase(), path),
            "parameters": parameters,
            "responses": answers,
        });
        match r.access {
            Access::Public => op["security"] = json!([]),
            Access::Authenticated => op["x-opsgraph-permission"] = json!(null),
            Access::Need(p) => op["x-opsgraph-permission"] = json!(p.as_str()),
        }
        match (r.body, r.request) {
            ("none", _) => {}
            // One document (YAML, or its JSON form) of the kind named.
            (kind @ ("intent" | "plan_patch" | "intervention" | "resource"), _) => {
                let schema = document_schema(kind, &mut documents);
                op["requestBody"] = json!({"required": true, "content": {
                    "application/yaml": {"schema": {"type": "string", "description": format!("One `{kind}` document in YAML (`opsgraph schema {kind}`)")}},
                    "application/json": {"schema": schema},
                }});
            }
            ("archive", _) => {
                op["requestBody"] = json!({"required": true, "content": {
                    "application/gzip": {"schema": {"type": "string", "contentMediaType": "application/gzip", "description": "A pack as a `.tar.gz` archive (`opsgraph pack build`), within `limits.archive_bytes`; anything else is refused with 422 `pack_refused`"}},
                }});
            }
            (body, Some(schema)) => {
                // `json?`: a body that may be empty, read as `{}`.
                op["requestBody"] = json!({"required": !body.ends_with('?'), "content": {"application/json": {"schema": schema(&mut requests)}}});
            }
            (body, None) => unreachable!("route {} {}: a `{body}` body without its type", r.method, r.path),
        }
        let entry = paths.entry(path).or_insert_with(|| json!({}));
        entry[r.method.to_lowercase()] = op;
    }
    let mut schemas = responses.take_definitions(true);
    for (name, schema) in requests.take_definitions(true) {
        match schemas.get(&name) {
            Some(same) if *same == schema => {}
            Some(_) => panic!("schema `{name}` differs as a request and as a response: give one of them its own type"),
            None => {
                schemas.insert(name, schema);
            }
        }
    }
    schemas.extend(documents);
    for (name, schema) in schemas.iter_mut() {
        let screened = SCREENED.iter().find(|(component, _)| component == name).map_or(&[][..], |(_, fields)| *fields);
        let kept: Vec<(&str, Value)> = screened
            .iter()
            .filter_map(|f| Some((*f, schema.get_mut("properties")?.as_object_mut()?.remove(*f)?)))
            .collect();
        no_nul(schema);
        for (field, sub) in kept {
            schema["properties"][field] = sub;
        }
    }
    for op in paths.values_mut().filter_map(Value::as_object_mut).flat_map(|ops| ops.values_mut()) {
        if let Some(parameters) = op["parameters"].as_array_mut() {
            parameters.iter_mut().for_each(|p| no_nul(&mut p["schema"]));
        }
        if let Some(Value::Object(content)) = op.pointer_mut("/requestBody/content") {
            content.values_mut().for_each(|c| no_nul(&mut c["schema"]));
        }
    }
    schemas.insert(
        NO_NUL_JSON.into(),
        json!({"description": "Any JSON value whose strings and keys hold no NUL", "anyOf": [
            {"type": ["null", "boolean", "number"]},
            {"type": "string", "pattern": NO_NUL},
            {"type": "array", "items": {"$ref": format!("#/components/schemas/{NO_NUL_JSON}")}},
            {"type": "object", "propertyNames": {"pattern": NO_NUL}, "additionalProperties": {"$ref": format!("#/components/schemas/{NO_NUL_JSON}")}},
        ]}),
    );
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "required": ["error"],
            "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                "code": {"type": "string"}, "message": {"type": "string"}, "details": {}
            }}},
        }),
    );
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Opsgraph API", "version": "v1"},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
        },
    })
}

/// This document as an answer (`GET /api/v1/openapi.json`). Its full shape is OpenAPI 3.1's own
/// meta-schema, which is not repeated here; its schema says what a client relies on: the
/// version, the paths with their operations, the components.
#[derive(serde::Serialize)]
#[serde(transparent)]
pub(crate) struct Document(pub(crate) Value);

impl schemars::JsonSchema for Document {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "OpenApiDocument".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "An OpenAPI 3.1 document (https://spec.openapis.org/oas/v3.1.0)",
            "type": "object",
            "required": ["openapi", "info", "paths", "components"],
            "properties": {
                "openapi": {"type": "string", "pattern": "^3\\.1\\.[0-9]+$"},
                "info": {"type": "object", "required": ["title", "version"], "properties": {
                    "title": {"type": "string"}, "version": {"type": "string"}
                }},
                "paths": {"type": "object", "additionalProperties": {
                    "type": "object",
                    "propertyNames": {"enum": ["get", "put", "post", "delete", "options", "head", "patch", "trace", "summary", "description", "servers", "parameters"]},
                    "additionalProperties": {"type": "object"}
                }},
                "components": {"type": "object", "properties": {"schemas": {"type": "object", "additionalProperties": {"type": ["object", "boolean"]}}}}
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    fn check(mut input: Value, expect: Value) {
        super::no_nul(&mut input);
        assert_eq!(input, expect);
    }

    #[test]
    fn every_text_of_a_schema_says_it_holds_no_nul() {
        let (p, any) = (super::NO_NUL, json!({"$ref": "#/components/schemas/Json"}));
        check(json!({"type": "string"}), json!({"type": "string", "pattern": p}));
        check(json!({"type": ["string", "null"]}), json!({"type": ["string", "null"], "pattern": p}));
        // A pattern, a literal or a media type of its own already says what the text is.
        for kept in [
            json!({"type": "string", "pattern": "^[a-z]+$"}),
            json!({"type": "string", "enum": ["a", "b"]}),
            json!({"type": "string", "const": "a"}),
            json!({"type": "string", "contentMediaType": "application/gzip"}),
            json!({"type": "integer"}),
        ] {
            check(kept.clone(), kept);
        }
        check(
            json!({"type": "object", "additionalProperties": true}),
            json!({"type": "object", "additionalProperties": any, "propertyNames": {"pattern": p}}),
        );
        check(
            json!({"type": "object", "additionalProperties": false, "properties": {
                "a": {"type": "string"}, "b": true, "c": {"description": "untyped"}, "d": {"$ref": "#/x"}
            }}),
            json!({"type": "object", "additionalProperties": false, "properties": {
                "a": {"type": "string", "pattern": p}, "b": any,
                "c": {"description": "untyped", "$ref": "#/components/schemas/Json"}, "d": {"$ref": "#/x"}
            }}),
        );
        check(
            json!({"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}),
            json!({"anyOf": [{"type": "array", "items": {"type": "string", "pattern": p}}, {"type": "null"}]}),
        );
    }
}
