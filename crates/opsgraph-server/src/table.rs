//! The one table of routes (method, path, access, documented shape, handler) and what is derived
//! from it as data: the OpenAPI document. The router (`routes.rs`) serves it; nothing below the
//! handlers imports it.

use serde_json::{json, Value};

use crate::auth::Permission;
use crate::error::ApiError;
use crate::handlers::{self, Ctx, Reply};
use crate::media::*;
use crate::{agent, analyze, catalog, manage, observe, reveal, ui, verifier};

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

/// One route. `path` uses axum's syntax (`{id}`, `{*id}` for the rest of the path).
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub access: Access,
    pub summary: &'static str,
    /// The request body, for the document: `none`, `json`, `archive` (a `.tar.gz`, within
    /// `limits.archive_bytes`), or the kind of the one document it holds (`intent`, `resource`,
    /// …; YAML or JSON).
    pub body: &'static str,
    /// Query parameters, for the document.
    pub query: &'static [&'static str],
    /// The success status.
    pub status: u16,
    /// The media type of a success: `application/json`, `text/event-stream` (a stream of
    /// server-sent events), `application/octet-stream` (an artifact's content) or the Prometheus
    /// text format.
    pub produces: &'static str,
    pub(crate) handler: Handler,
}

use Access::*;
use Permission::*;

macro_rules! route {
    ($method:literal, $path:literal, $access:expr, $status:literal, $body:literal, $query:expr, $handler:path, $summary:literal) => {
        route!($method, $path, $access, $status, $body, $query, $handler, $summary, JSON)
    };
    ($method:literal, $path:literal, $access:expr, $status:literal, $body:literal, $query:expr, $handler:path, $summary:literal, $produces:expr) => {
        Route {
            method: $method,
            path: $path,
            access: $access,
            summary: $summary,
            body: $body,
            query: $query,
            status: $status,
            produces: $produces,
            handler: $handler,
        }
    };
}

/// Every route of the API. Deny by default: a route is reachable only through this table, and
/// its access is checked before its handler runs.
pub static ROUTES: &[Route] = &[
    route!("GET", "/", Public, 200, "none", &[], ui::index, "The web UI (it signs in with a token).", HTML),
    route!(
        "GET",
        "/ui/{file}",
        Public,
        200,
        "none",
        &[],
        ui::file,
        "A file of the web UI (`app.js`, `app.css`).",
        "text/javascript; charset=utf-8"
    ),
    route!("GET", "/api/v1/health", Public, 200, "none", &[], handlers::health, "The server process is up."),
    route!("GET", "/api/v1/ready", Public, 200, "none", &[], handlers::ready, "The store answers (503 when not)."),
    route!(
        "GET",
        "/api/v1/openapi.json",
        Public,
        200,
        "none",
        &[],
        openapi_doc,
        "This API's OpenAPI 3.1 document."
    ),
    route!(
        "GET",
        "/api/v1/me",
        Authenticated,
        200,
        "none",
        &[],
        handlers::me,
        "The caller's identity, roles and permissions."
    ),
    route!("GET", "/api/v1/roles", Need(Read), 200, "none", &[], handlers::roles, "Every role and its permissions."),
    route!(
        "POST",
        "/api/v1/plans",
        Need(Read),
        200,
        "intent",
        &["format"],
        handlers::plan,
        "Plan preview of an intent document; nothing runs."
    ),
    route!(
        "GET",
        "/api/v1/operations",
        Need(Read),
        200,
        "none",
        &["state", "resource"],
        handlers::operations,
        "Operations, filtered by state and resource."
    ),
    route!(
        "POST",
        "/api/v1/operations",
        Need(Apply),
        201,
        "intent",
        &[],
        handlers::create_operation,
        "Plan an intent and run it (honours Idempotency-Key)."
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}",
        Need(Read),
        200,
        "none",
        &[],
        handlers::operation,
        "Everything about one operation."
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/jobs",
        Need(Read),
        200,
        "none",
        &[],
        handlers::jobs,
        "The operation's job instances."
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/timeline",
        Need(Read),
        200,
        "none",
        &[],
        handlers::timeline,
        "The operation's timeline."
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/evidence",
        Need(Read),
        200,
        "none",
        &[],
        handlers::evidence,
        "The operation's evidence records."
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/artifacts",
        Need(Read),
        200,
        "none",
        &[],
        handlers::artifacts,
        "The operation's artifacts (secret ones by reference)."
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
        OCTETS
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/artifacts/{artifact}/reveal",
        // Who may reveal is the artifact's `visible_to_roles`, else `reveal_secrets`: checked by
        // the handler once the declaration is read (reveal::reveal_artifact).
        Need(Read),
        200,
        "json",
        &[],
        reveal::reveal_artifact,
        "Reveal an artifact's content, secret ones included; audited before the value is sent.",
        OCTETS
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
        EVENT_STREAM
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/plan",
        Need(Read),
        200,
        "none",
        &[],
        handlers::operation_plan,
        "The operation's current plan revision: jobs and what they wait for, the capability resolution."
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/patches",
        Need(Read),
        200,
        "none",
        &[],
        handlers::patches,
        "The plan patches proposed for the operation: diff, the reviewer's findings, gate and answer."
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/gates",
        Need(Read),
        200,
        "none",
        &[],
        handlers::gates,
        "The operation's gates and their answers."
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/gates/{gate}/answer",
        Need(AnswerGates),
        200,
        "json",
        &[],
        handlers::answer_gate,
        "Answer a gate for the operation's current plan revision."
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/pause",
        Need(Apply),
        200,
        "json",
        &[],
        handlers::pause,
        "Stop starting new jobs."
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/resume",
        Need(Apply),
        200,
        "json",
        &[],
        handlers::resume,
        "Continue a paused operation."
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/cancel",
        Need(Apply),
        200,
        "json",
        &[],
        handlers::cancel,
        "Cancel: running jobs are stopped."
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/patches",
        Need(Patch),
        200,
        "plan_patch",
        &["remedy", "analyzer"],
        analyze::propose_patch,
        "Propose a plan patch for a failed operation: reviewed, then applied or waiting at its patch gate."
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/interventions",
        Need(Intervene),
        200,
        "intervention",
        &[],
        handlers::intervene,
        "Record a manual fix of a failed operation and verify it with the evidence it names."
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/diagnosis",
        Need(Read),
        200,
        "none",
        &[],
        handlers::diagnosis,
        "The rules analyzer's diagnosis of the failed jobs: the matching remedy, or none."
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/diagnosis",
        Need(Read),
        200,
        "none",
        &["analyzer"],
        analyze::diagnose,
        "Ask an analyzer: `rules` (the default, as GET) or `ai` (the configured endpoint; its answer recorded and audited, its patch reviewed, not proposed)."
    ),
    route!(
        "GET",
        "/api/v1/operations/{id}/logs",
        Need(Read),
        200,
        "none",
        &["job"],
        handlers::logs,
        "Each attempt's captured output (secret values masked)."
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/retry",
        Need(Intervene),
        200,
        "json",
        &[],
        handlers::retry,
        "Run failed jobs again."
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
        EVENT_STREAM
    ),
    route!(
        "GET",
        "/api/v1/resources",
        Need(Read),
        200,
        "none",
        &[],
        handlers::resources,
        "Resources recorded by operations."
    ),
    route!(
        "POST",
        "/api/v1/resources",
        Need(ManageResources),
        201,
        "resource",
        &[],
        manage::apply_resource,
        "Store one `resource` document (insert or replace; 201 when new); refused while an unfinished operation targets it."
    ),
    route!(
        "GET",
        "/api/v1/resources/{*id}",
        Need(Read),
        200,
        "none",
        &[],
        handlers::resource,
        "One resource (its id holds `/`) and the operations that explain it."
    ),
    route!(
        "POST",
        "/api/v1/verifications",
        Need(Apply),
        200,
        "json",
        &[],
        verifier::verify,
        "Verify a resource now by its pack's checks (`{\"resource\": ID}`); records and returns what they found."
    ),
    route!(
        "DELETE",
        "/api/v1/resources/{*id}",
        Need(ManageResources),
        200,
        "none",
        &[],
        manage::delete_resource,
        "Delete a stored resource; refused while an unfinished operation targets it."
    ),
    route!(
        "GET",
        "/api/v1/audit",
        Need(Read),
        200,
        "none",
        &["actor", "operation", "resource", "since"],
        handlers::audit,
        "The audit log."
    ),
    route!(
        "GET",
        "/api/v1/packs",
        Need(Read),
        200,
        "none",
        &[],
        catalog::packs,
        "The packs the server loaded: id, version, digest, templates."
    ),
    route!(
        "POST",
        "/api/v1/packs",
        Need(ManagePacks),
        201,
        "archive",
        &["replace"],
        manage::install_pack,
        "Install a pack from a .tar.gz archive (`Content-Type: application/gzip`), as `opsgraph pack install` does; 200 when the same content is installed."
    ),
    route!(
        "GET",
        "/api/v1/packs/{id}",
        Need(Read),
        200,
        "none",
        &[],
        catalog::pack,
        "One pack (`id` for every loaded version, `id@version` for one): templates, jobs and what they run."
    ),
    route!(
        "DELETE",
        "/api/v1/packs/{id}",
        Need(ManagePacks),
        200,
        "none",
        &[],
        manage::remove_pack,
        "Remove an installed pack version (`id@version`); refused while an unfinished operation runs it."
    ),
    route!(
        "GET",
        "/api/v1/providers",
        Need(Read),
        200,
        "none",
        &[],
        catalog::providers,
        "Providers of the world documents and of the packs."
    ),
    route!(
        "GET",
        "/api/v1/policies",
        Need(Read),
        200,
        "none",
        &[],
        catalog::policies,
        "The capability policy and the operations policy."
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
        PROMETHEUS
    ),
    route!(
        "GET",
        "/api/v1/tokens",
        Need(ManageTokens),
        200,
        "none",
        &[],
        handlers::tokens,
        "API tokens (never their secret)."
    ),
    route!(
        "POST",
        "/api/v1/tokens",
        Need(ManageTokens),
        201,
        "json",
        &[],
        handlers::create_token,
        "Create a token; it is shown once."
    ),
    route!(
        "POST",
        "/api/v1/agent/claim",
        Need(AgentWork),
        200,
        "json",
        &[],
        agent::claim,
        "An agent long-polls for the next task of its resources (`{resources, wait_ms}`); `task` is null when none came."
    ),
    route!(
        "POST",
        "/api/v1/agent/heartbeat",
        Need(AgentWork),
        200,
        "json",
        &[],
        agent::heartbeat,
        "The lease holder is alive (`{task, lease}`): the lease is extended; 409 `stale_lease` when it is no longer held."
    ),
    route!(
        "POST",
        "/api/v1/agent/log",
        Need(AgentWork),
        200,
        "json",
        &[],
        agent::log,
        "Output of the running job (`{task, lease, text}`), appended to the attempt's log; 409 `stale_lease` when stale."
    ),
    route!(
        "POST",
        "/api/v1/agent/report",
        Need(AgentWork),
        200,
        "agent_report",
        &[],
        agent::report,
        "The outcome (`{task, lease, report}`), within `limits.agent_report_bytes`; audited; 409 `stale_lease` when stale."
    ),
    route!(
        "DELETE",
        "/api/v1/tokens/{id}",
        Need(ManageTokens),
        200,
        "none",
        &[],
        handlers::revoke_token,
        "Revoke a token."
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

fn success_schema(produces: &str) -> Value {
    match produces {
        JSON => json!({"schema": {}}),
        EVENT_STREAM => {
            json!({"schema": {"type": "string", "description": "`id: <seq>` and `data: <timeline entry as JSON>` per event; `event: end` when the operation is terminal"}})
        }
        _ => json!({"schema": {"type": "string"}}),
    }
}

/// The OpenAPI 3.1 document, generated from [`ROUTES`].
pub fn openapi() -> Value {
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
                let mut p = json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}});
                if rest {
                    p["description"] = json!("May contain `/`, literally or percent-encoded as `%2F`.");
                }
                p
            })
            .collect();
        parameters.extend(
            r.query.iter().map(|q| json!({"name": q, "in": "query", "required": false, "schema": {"type": "string"}})),
        );
        if r.produces == EVENT_STREAM {
            parameters.push(json!({"name": "Last-Event-ID", "in": "header", "required": false, "schema": {"type": "string"}, "description": "Resume after this event id (a timeline seq); wins over `after`."}));
        }
        if r.method == "POST" && r.path == "/api/v1/operations" {
            parameters.push(json!({"name": "Idempotency-Key", "in": "header", "required": false, "schema": {"type": "string", "maxLength": 255}}));
        }
        let mut op = json!({
            "summary": r.summary,
            "operationId": format!("{} {}", r.method.to_lowercase(), path),
            "parameters": parameters,
            "responses": {
                r.status.to_string(): {"description": "success", "content": {r.produces: success_schema(r.produces)}},
                "default": {"description": "an error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
            },
        });
        match r.access {
            Public => op["security"] = json!([]),
            Authenticated => op["x-opsgraph-permission"] = json!(null),
            Need(p) => op["x-opsgraph-permission"] = json!(p.as_str()),
        }
        match r.body {
            // One document (YAML, or its JSON form) of the kind named.
            "intent" | "plan_patch" | "intervention" | "resource" => {
                op["requestBody"] = json!({"required": true, "content": {
                    "application/yaml": {"schema": {"type": "string"}},
                    "application/json": {"schema": {"type": "object"}},
                }});
            }
            "archive" => {
                op["requestBody"] = json!({"required": true, "content": {
                    "application/gzip": {"schema": {"type": "string", "contentEncoding": "binary"}},
                }});
            }
            "json" | "agent_report" => {
                op["requestBody"] =
                    json!({"required": false, "content": {"application/json": {"schema": {"type": "object"}}}});
            }
            _ => {}
        }
        let entry = paths.entry(path).or_insert_with(|| json!({}));
        entry[r.method.to_lowercase()] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Opsgraph API", "version": "v1"},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                    "code": {"type": "string"}, "message": {"type": "string"}, "details": {}
                }}},
            }},
        },
    })
}
