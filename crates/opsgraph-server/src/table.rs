//! The one table of routes (method, path, access, documented shape, handler) and what is derived
//! from it as data: the OpenAPI document. The router (`routes.rs`) serves it; nothing below the
//! handlers imports it.
//!
//! Each route names the Rust types of its JSON request and success bodies; their JSON Schemas are
//! derived from those types (`schemars`), the ones the handlers deserialize and serialize, and
//! the document lists them under `components/schemas`. Document bodies (`intent`, `resource`, …)
//! are described by the validator's own shapes (`opsgraph schema KIND`).

use opsgraph_api::*;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Value};

use crate::auth::Permission;
use crate::error::ApiError;
use crate::handlers::{self, Ctx, Reply};
use crate::media::*;
use crate::{agent, catalog, manage, observe, reveal, ui, verifier};

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, without a token (health, readiness, the API description).
    Public,
    /// Any valid token.
    Authenticated,
    /// A token whose roles hold this permission.
    Need(Permission),
}

pub(crate) type Handler = fn(&mut Ctx) -> Result<Reply, ApiError>;

/// The JSON Schema of a type, as a `$ref` into the generator's definitions.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// One route. `path` uses axum's syntax (`{id}`, `{*id}` for the rest of the path).
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub access: Access,
    pub summary: &'static str,
    /// The request body: `none`, `json` (an object of type `request`), `agent_report` (the same,
    /// within `limits.agent_report_bytes`), `archive` (a `.tar.gz`, within
    /// `limits.archive_bytes`), or the kind of the one document it holds (`intent`, `resource`,
    /// …; YAML or JSON).
    pub body: &'static str,
    /// The type of a `json` body.
    pub request: Option<SchemaFn>,
    /// Query parameters, for the document.
    pub query: &'static [&'static str],
    /// The success status.
    pub status: u16,
    /// The media type of a success: `application/json`, `text/event-stream` (a stream of
    /// server-sent events), `application/octet-stream` (an artifact's content) or the Prometheus
    /// text format.
    pub produces: &'static str,
    /// The type of a JSON success body.
    pub response: Option<SchemaFn>,
    pub(crate) handler: Handler,
}

use Access::*;
use Permission::*;

/// `route!(METHOD, PATH, ACCESS, STATUS, BODY [REQUEST_TYPE], QUERY, HANDLER, SUMMARY, -> RESPONSE_TYPE)`
/// for a JSON success, or `…, SUMMARY, media MEDIA_TYPE)` for another.
macro_rules! route {
    (@schema) => { None };
    (@schema $t:ty) => { Some(schema_of::<$t> as SchemaFn) };
    ($method:literal, $path:literal, $access:expr, $status:literal, $body:literal $($req:ty)?, $query:expr, $handler:path, $summary:literal, media $produces:expr) => {
        Route {
            method: $method,
            path: $path,
            access: $access,
            summary: $summary,
            body: $body,
            request: route!(@schema $($req)?),
            query: $query,
            status: $status,
            produces: $produces,
            response: None,
            handler: $handler,
        }
    };
    ($method:literal, $path:literal, $access:expr, $status:literal, $body:literal $($req:ty)?, $query:expr, $handler:path, $summary:literal, -> $resp:ty) => {
        Route {
            method: $method,
            path: $path,
            access: $access,
            summary: $summary,
            body: $body,
            request: route!(@schema $($req)?),
            query: $query,
            status: $status,
            produces: JSON,
            response: route!(@schema $resp),
            handler: $handler,
        }
    };
}

/// Every route of the API. Deny by default: a route is reachable only through this table, and
/// its access is checked before its handler runs.
pub static ROUTES: &[Route] = &[
    route!(
        "GET",
        "/",
        Public,
        200,
        "none",
        &[],
        ui::index,
        "The web UI (it signs in with a token).",
        media HTML
    ),
    route!(
        "GET",
        "/ui/{file}",
        Public,
        200,
        "none",
        &[],
        ui::file,
        "A file of the web UI (`app.js`, `app.css`).",
        media "text/javascript; charset=utf-8"
    ),
    route!(
        "GET",
        "/api/v1/health",
        Public,
        200,
        "none",
        &[],
        handlers::health,
        "The server process is up.",
        -> Status
    ),
    route!(
        "GET",
        "/api/v1/ready",
        Public,
        200,
        "none",
        &[],
        handlers::ready,
        "The store answers (503 when not).",
        -> Status
    ),
    route!(
        "GET",
        "/api/v1/openapi.json",
        Public,
        200,
        "none",
        &[],
        openapi_doc,
        "This API's OpenAPI 3.1 document.",
        -> Value
    ),
    route!(
        "GET",
        "/api/v1/me",
        Authenticated,
        200,
        "none",
        &[],
        handlers::me,
        "The caller's identity, roles and permissions.",
        -> Me
    ),
    route!(
        "GET",
        "/api/v1/roles",
        Need(Read),
        200,
        "none",
        &[],
        handlers::roles,
        "Every role and its permissions.",
        -> RoleList
    ),
    route!(
        "POST",
        "/api/v1/plans",
        Need(Read),
        200,
        "intent",
        &["format"],
        handlers::plan,
        "Plan preview of an intent document; nothing runs.",
        -> Value
    ),
    route!(
        "GET",
        "/api/v1/operations",
        Need(Read),
        200,
        "none",
        &["state", "resource"],
        handlers::operations,
        "Operations, filtered by state and resource.",
        -> OperationList
    ),
    route!(
        "POST",
        "/api/v1/operations",
        Need(Apply),
        201,
        "intent",
        &[],
        handlers::create_operation,
        "Plan an intent and run it (honours Idempotency-Key).",
        -> Created
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}",
        Need(Read),
        200,
        "none",
        &[],
        handlers::operation,
        "Everything about one operation.",
        -> OperationView
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/jobs",
        Need(Read),
        200,
        "none",
        &[],
        handlers::jobs,
        "The operation's job instances.",
        -> JobList
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/timeline",
        Need(Read),
        200,
        "none",
        &[],
        handlers::timeline,
        "The operation's timeline.",
        -> Timeline
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/evidence",
        Need(Read),
        200,
        "none",
        &[],
        handlers::evidence,
        "The operation's evidence records.",
        -> EvidenceList
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/artifacts",
        Need(Read),
        200,
        "none",
        &[],
        handlers::artifacts,
        "The operation's artifacts (secret ones by reference).",
        -> ArtifactList
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/artifacts/{artifact}",
        Need(Read),
        200,
        "none",
        &[],
        reveal::artifact_content,
        "The content of a non-secret artifact (the last one of that id); secret ones only by reveal.",
        media OCTETS
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/artifacts/{artifact}/reveal",
        // Who may reveal is the artifact's `visible_to_roles`, else `reveal_secrets`: checked by
        // the handler once the declaration is read (reveal::reveal_artifact).
        Need(Read),
        200,
        "json" RevealRequest,
        &[],
        reveal::reveal_artifact,
        "Reveal an artifact's content, secret ones included; audited before the value is sent.",
        media OCTETS
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/events",
        Need(Read),
        200,
        "none",
        &["after"],
        observe::operation_events,
        "The operation's timeline as server-sent events (resume with Last-Event-ID); ends when it is terminal.",
        media EVENT_STREAM
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/plan",
        Need(Read),
        200,
        "none",
        &[],
        handlers::operation_plan,
        "The operation's current plan revision: jobs and what they wait for, the capability resolution.",
        -> Value
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/patches",
        Need(Read),
        200,
        "none",
        &[],
        handlers::patches,
        "The plan patches proposed for the operation: diff, the reviewer's findings, gate and answer.",
        -> PatchList
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/gates",
        Need(Read),
        200,
        "none",
        &[],
        handlers::gates,
        "The operation's gates and their answers.",
        -> GateList
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/gates/{gate}/answer",
        Need(AnswerGates),
        200,
        "json" AnswerRequest,
        &[],
        handlers::answer_gate,
        "Answer a gate for the operation's current plan revision.",
        -> AnswerReply
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/pause",
        Need(Apply),
        200,
        "json" ReasonRequest,
        &[],
        handlers::pause,
        "Stop starting new jobs.",
        -> ControlReply
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/resume",
        Need(Apply),
        200,
        "json" ReasonRequest,
        &[],
        handlers::resume,
        "Continue a paused operation.",
        -> ControlReply
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/cancel",
        Need(Apply),
        200,
        "json" ReasonRequest,
        &[],
        handlers::cancel,
        "Cancel: running jobs are stopped.",
        -> ControlReply
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/patches",
        Need(Patch),
        200,
        "plan_patch",
        &["remedy", "analyzer"],
        handlers::propose_patch,
        "Propose a plan patch for a failed operation: reviewed, then applied or waiting at its patch gate.",
        -> PatchReply
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/interventions",
        Need(Intervene),
        200,
        "intervention",
        &[],
        handlers::intervene,
        "Record a manual fix of a failed operation and verify it with the evidence it names.",
        -> InterventionReply
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/diagnosis",
        Need(Read),
        200,
        "none",
        &[],
        handlers::diagnosis,
        "The rules analyzer's diagnosis of the failed jobs: the matching remedy, or none.",
        -> DiagnosisList
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/logs",
        Need(Read),
        200,
        "none",
        &["job"],
        handlers::logs,
        "Each attempt's captured output (secret values masked).",
        -> LogList
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/retry",
        Need(Intervene),
        200,
        "json" RetryRequest,
        &[],
        handlers::retry,
        "Run failed jobs again.",
        -> ControlReply
    ),
    route!(
        "GET",
        "/api/v1/events",
        Need(Read),
        200,
        "none",
        &["after"],
        observe::all_events,
        "Every operation's timeline as server-sent events (resume with Last-Event-ID).",
        media EVENT_STREAM
    ),
    route!(
        "GET",
        "/api/v1/resources",
        Need(Read),
        200,
        "none",
        &[],
        handlers::resources,
        "Resources recorded by operations.",
        -> ResourceList
    ),
    route!(
        "POST",
        "/api/v1/resources",
        Need(ManageResources),
        201,
        "resource",
        &[],
        manage::apply_resource,
        "Store one `resource` document (insert or replace; 201 when new); refused while an unfinished operation targets it.",
        -> ResourceChange
    ),
    route!(
        "GET",
        "/api/v1/resources/{*id}",
        Need(Read),
        200,
        "none",
        &[],
        handlers::resource,
        "One resource (its id holds `/`) and the operations that explain it.",
        -> ResourceView
    ),
    route!(
        "POST",
        "/api/v1/verifications",
        Need(Apply),
        200,
        "json" VerifyRequest,
        &[],
        verifier::verify,
        "Verify a resource now by its pack's checks (`{\"resource\": ID}`); records and returns what they found.",
        -> Value
    ),
    route!(
        "DELETE",
        "/api/v1/resources/{*id}",
        Need(ManageResources),
        200,
        "none",
        &[],
        manage::delete_resource,
        "Delete a stored resource; refused while an unfinished operation targets it.",
        -> ResourceChange
    ),
    route!(
        "GET",
        "/api/v1/audit",
        Need(Read),
        200,
        "none",
        &["actor", "operation", "resource", "since"],
        handlers::audit,
        "The audit log.",
        -> AuditList
    ),
    route!(
        "GET",
        "/api/v1/packs",
        Need(Read),
        200,
        "none",
        &[],
        catalog::packs,
        "The packs the server loaded: id, version, digest, templates.",
        -> Value
    ),
    route!(
        "POST",
        "/api/v1/packs",
        Need(ManagePacks),
        201,
        "archive",
        &["replace"],
        manage::install_pack,
        "Install a pack from a .tar.gz archive (`Content-Type: application/gzip`), as `opsgraph pack install` does; 200 when the same content is installed.",
        -> PackInstalled
    ),
    route!(
        "GET",
        "/api/v1/packs/{id}",
        Need(Read),
        200,
        "none",
        &[],
        catalog::pack,
        "One pack (`id` for every loaded version, `id@version` for one): templates, jobs and what they run.",
        -> Value
    ),
    route!(
        "DELETE",
        "/api/v1/packs/{id}",
        Need(ManagePacks),
        200,
        "none",
        &[],
        manage::remove_pack,
        "Remove an installed pack version (`id@version`); refused while an unfinished operation runs it.",
        -> PackRemoved
    ),
    route!(
        "GET",
        "/api/v1/providers",
        Need(Read),
        200,
        "none",
        &[],
        catalog::providers,
        "Providers of the world documents and of the packs.",
        -> Value
    ),
    route!(
        "GET",
        "/api/v1/policies",
        Need(Read),
        200,
        "none",
        &[],
        catalog::policies,
        "The capability policy and the operations policy.",
        -> Value
    ),
    route!(
        "GET",
        "/metrics",
        Need(Metrics),
        200,
        "none",
        &[],
        observe::metrics,
        "Prometheus metrics (text exposition format 0.0.4).",
        media PROMETHEUS
    ),
    route!(
        "GET",
        "/api/v1/tokens",
        Need(ManageTokens),
        200,
        "none",
        &[],
        handlers::tokens,
        "API tokens (never their secret).",
        -> TokenList
    ),
    route!(
        "POST",
        "/api/v1/tokens",
        Need(ManageTokens),
        201,
        "json" TokenRequest,
        &[],
        handlers::create_token,
        "Create a token; it is shown once.",
        -> CreatedToken
    ),
    route!(
        "POST",
        "/api/v1/agent/claim",
        Need(AgentWork),
        200,
        "json" agent::ClaimBody,
        &[],
        agent::claim,
        "An agent long-polls for the next task of its resources (`{resources, wait_ms}`); `task` is null when none came.",
        -> Value
    ),
    route!(
        "POST",
        "/api/v1/agent/heartbeat",
        Need(AgentWork),
        200,
        "json" agent::LeaseBody,
        &[],
        agent::heartbeat,
        "The lease holder is alive (`{task, lease}`): the lease is extended; 409 `stale_lease` when it is no longer held.",
        -> Value
    ),
    route!(
        "POST",
        "/api/v1/agent/log",
        Need(AgentWork),
        200,
        "json" agent::LeaseBody,
        &[],
        agent::log,
        "Output of the running job (`{task, lease, text}`), appended to the attempt's log; 409 `stale_lease` when stale.",
        -> Value
    ),
    route!(
        "POST",
        "/api/v1/agent/report",
        Need(AgentWork),
        200,
        "agent_report" agent::LeaseBody,
        &[],
        agent::report,
        "The outcome (`{task, lease, report}`), within `limits.agent_report_bytes`; audited; 409 `stale_lease` when stale.",
        -> Value
    ),
    route!(
        "DELETE",
        "/api/v1/tokens/{id}",
        Need(ManageTokens),
        200,
        "none",
        &[],
        handlers::revoke_token,
        "Revoke a token.",
        -> TokenView
    ),
];

/// `GET /api/v1/openapi.json`: the document, built from the table.
pub(crate) fn openapi_doc(_: &mut Ctx) -> Result<Reply, ApiError> {
    Reply::ok(openapi())
}

/// The OpenAPI path of a route: `{*id}` becomes `{id}`.
pub fn openapi_path(path: &str) -> String {
    path.replace("{*", "{")
}

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
            "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$",
            "description": "RFC 3339: entries at or after this time",
        }),
        (_, _, "after") => {
            json!({"type": "integer", "minimum": 0, "maximum": i64::MAX, "description": "Events after this seq"})
        }
        (_, _, "format") => json!({"enum": ["json", "text"], "description": "`text`: the preview a person reads, beside the JSON"}),
        (_, _, "analyzer") => json!({"enum": ["rules"]}),
        (_, _, "replace") => json!({"enum": ["true", "false"]}),
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
        let safe: String =
            name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
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

fn capitalize(word: &str) -> String {
    let mut c = word.chars();
    c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
}

/// The OpenAPI 3.1 document, generated from [`ROUTES`]: request bodies as their handlers
/// deserialize them, success bodies as they are serialized.
pub fn openapi() -> Value {
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
    for r in ROUTES {
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
            Public => op["security"] = json!([]),
            Authenticated => op["x-opsgraph-permission"] = json!(null),
            Need(p) => op["x-opsgraph-permission"] = json!(p.as_str()),
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
            (_, Some(schema)) => {
                // A body that may be empty is read as `{}`.
                op["requestBody"] =
                    json!({"required": false, "content": {"application/json": {"schema": schema(&mut requests)}}});
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
