//! The route table, the router built from it, and the OpenAPI document built from it.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter};
use axum::Router;
use serde_json::{json, Value};

use crate::auth::{token_hash, Identity, Permission};
use crate::error::ApiError;
use crate::handlers::{self, Ctx, Reply};
use crate::AppState;
use crate::{agent, catalog, manage, observe, reveal, ui};

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

/// The media type of most routes.
pub const JSON: &str = "application/json";
/// Server-sent events: the handler answers with a stream that a blocking thread feeds.
pub const EVENT_STREAM: &str = "text/event-stream";
/// Bytes as stored (artifacts).
pub const OCTETS: &str = "application/octet-stream";
/// The web UI's page.
pub const HTML: &str = "text/html; charset=utf-8";
/// The Prometheus text exposition format 0.0.4.
pub const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

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
        handlers::openapi_doc,
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
        &["remedy"],
        handlers::propose_patch,
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

fn method_filter(method: &str) -> MethodFilter {
    match method {
        "GET" => MethodFilter::GET,
        "POST" => MethodFilter::POST,
        "DELETE" => MethodFilter::DELETE,
        "PUT" => MethodFilter::PUT,
        "PATCH" => MethodFilter::PATCH,
        other => panic!("route table: unsupported method {other}"),
    }
}

/// The API router: every route of [`ROUTES`], and JSON errors for everything else.
pub fn router(state: AppState) -> Router {
    let mut router: Router<AppState> = Router::new();
    for route in ROUTES {
        router = router.route(
            route.path,
            on(method_filter(route.method), move |State(state): State<AppState>, req: Request| {
                dispatch(state, route, req)
            }),
        );
    }
    router
        .fallback(|| async {
            ApiError::not_found("no_route", "no such route; see /api/v1/openapi.json").into_response()
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this route does not take that method")
                .into_response()
        })
        .with_state(state)
}

/// Authenticate, authorize, read the body within its limit, run the handler on a blocking thread.
async fn dispatch(state: AppState, route: &'static Route, req: Request) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let state_for_count = state.clone();
    let result = handle(state, route, req).await;
    let (response, actor) = match result {
        Ok((reply, actor)) => (reply.into_response(), actor),
        Err((e, actor)) => {
            if e.status.is_server_error() {
                tracing::error!(code = e.code, "{}", e.message);
            }
            (e.into_response(), actor)
        }
    };
    {
        let mut requests = state_for_count.0.requests.lock().unwrap_or_else(|e| e.into_inner());
        *requests.entry((route.method, route.path, response.status().as_u16())).or_insert(0) += 1;
    }
    tracing::info!(
        method = %method,
        path = %path,
        route = route.path,
        status = response.status().as_u16(),
        actor = actor.as_deref().unwrap_or("-"),
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    response
}

type Outcome = Result<(Reply, Option<String>), (ApiError, Option<String>)>;

async fn handle(state: AppState, route: &'static Route, req: Request) -> Outcome {
    let (parts, body) = req.into_parts();
    let bearer = bearer(&parts.headers);
    let who = match route.access {
        Public => None,
        Authenticated | Need(_) => {
            let s = state.clone();
            let who = blocking(move || authenticate(&s, bearer)).await.map_err(|e| (e, None))?;
            if let Need(p) = route.access {
                if !who.may(p) {
                    let e = ApiError::forbidden(
                        "forbidden",
                        format!("roles {} do not allow `{}`", who.roles.join(", "), p.as_str()),
                    )
                    .with_details(json!({"needs": p.as_str(), "roles": who.roles}));
                    return Err((e, Some(who.actor())));
                }
            }
            Some(who)
        }
    };
    let actor = who.as_ref().map(Identity::actor);
    let limit = if route.body == "archive" {
        ("archive_bytes", state.0.limits.archive_bytes)
    } else if route.body == "agent_report" {
        ("agent_report_bytes", state.0.limits.agent_report_bytes)
    } else {
        ("body_bytes", state.0.limits.body_bytes)
    };
    let body = read_body(body, &parts.headers, limit).await.map_err(|e| (e, actor.clone()))?;
    let params = path_params(&parts.uri, route.path);
    let query: BTreeMap<String, String> = parts
        .uri
        .query()
        .map(|q| {
            q.split('&')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (percent_decode(&k.replace('+', " ")), percent_decode(&v.replace('+', " ")))
                })
                .collect()
        })
        .unwrap_or_default();
    if let Some(k) = query.keys().find(|k| !route.query.contains(&k.as_str())) {
        let allowed = if route.query.is_empty() { "none".to_string() } else { route.query.join(", ") };
        let e = ApiError::bad_request(
            "unknown_parameter",
            format!("unknown query parameter `{k}`; this route takes: {allowed}"),
        );
        return Err((e, actor));
    }
    let method = parts.method.clone();
    let headers = parts.headers;
    let a = actor.clone();
    blocking(move || {
        let store = state.store()?;
        let mut ctx = Ctx { state, who, params, query, headers, body, method, store };
        (route.handler)(&mut ctx)
    })
    .await
    .map(|reply| (reply, a))
    .map_err(|e| (e, actor))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, ApiError> + Send + 'static) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) => Err(ApiError::internal("a request handler panicked", &e)),
    }
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_string())
}

fn authenticate(state: &AppState, bearer: Option<String>) -> Result<Identity, ApiError> {
    let token = bearer
        .ok_or_else(|| ApiError::unauthorized("unauthenticated", "this route needs `Authorization: Bearer <token>`"))?;
    let store = state.store()?;
    let hash = token_hash(&token);
    let record = store
        .token_by_hash(&hash)?
        .filter(|t| t.hash == hash)
        .ok_or_else(|| ApiError::unauthorized("invalid_token", "the token is not known"))?;
    if let Some(at) = record.revoked_at {
        return Err(ApiError::unauthorized("token_revoked", format!("the token was revoked at {at}")));
    }
    let permissions = state.config().union(&record.roles);
    Ok(Identity { token: record.id, name: record.name, roles: record.roles, permissions })
}

async fn read_body(body: Body, headers: &HeaderMap, (name, limit): (&str, usize)) -> Result<Vec<u8>, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is larger than limits.{name} ({limit} bytes)"),
        )
        .with_details(json!({"limit": name, "max": limit}))
    };
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Ok(bytes.to_vec()),
        Err(_) => Err(too_large()),
    }
}

/// The values of `{name}` and `{*name}` segments of `pattern` in the request path,
/// percent-decoded (`compute_node%2Fn1` and `compute_node/n1` are the same id).
pub(crate) fn path_params(uri: &axum::http::Uri, pattern: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let path: Vec<&str> = uri.path().split('/').collect();
    for (i, seg) in pattern.split('/').enumerate() {
        if let Some(name) = seg.strip_prefix("{*").and_then(|s| s.strip_suffix('}')) {
            out.insert(name.to_string(), percent_decode(&path.get(i..).unwrap_or_default().join("/")));
            break;
        }
        if let Some(name) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            out.insert(name.to_string(), percent_decode(path.get(i).copied().unwrap_or_default()));
        }
    }
    out
}

/// `%XX` escapes decoded (a `+` stays a `+`: in query strings it is turned into a space first).
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
