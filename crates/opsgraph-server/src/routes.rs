//! The router built from the route table: authentication, access, limits and refusals before a
//! handler runs.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter};
use axum::Router;
use serde_json::json;

use crate::auth::{bearer, token_hash, Identity};
use crate::error::ApiError;
use crate::handlers::{Ctx, Reply};
use crate::table::Access::{Authenticated, Need, Public};
use crate::table::{Route, ROUTES};
use crate::AppState;

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
        .fallback(|req: Request| async move {
            let e = ApiError::not_found("no_route", "no such route; see /api/v1/openapi.json");
            refused_unread(req.headers(), e.into_response())
        })
        .method_not_allowed_fallback(|req: Request| async move {
            let e = ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            );
            refused_unread(req.headers(), e.into_response())
        })
        .with_state(state)
}

/// Authenticate, authorize, read the body within its limit, run the handler on a blocking thread.
async fn dispatch(state: AppState, route: &'static Route, req: Request) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let state_for_count = state.clone();
    let headers = req.headers().clone();
    let result = handle(state, route, req).await;
    let (response, actor) = match result {
        Ok((reply, actor)) => (reply.into_response(), actor),
        Err(Refusal { error, actor, body_unread }) => {
            if error.status.is_server_error() {
                tracing::error!(code = error.code, "{}", error.message);
            }
            if let Some(row) = actor.as_deref().and_then(|a| refusal_audit(route, &path, a, &error)) {
                let s = state_for_count.clone();
                let written = blocking(move || Ok(s.store()?.commit(&[opsgraph_store::Write::Audit(row)])?)).await;
                if let Err(e) = written {
                    tracing::error!(code = e.code, "the audit row of a refused request was not written: {}", e.message);
                }
            }
            let response = error.into_response();
            (if body_unread { refused_unread(&headers, response) } else { response }, actor)
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

/// The audit row of a refused request that decided something about its actor: a denial (403, on
/// any route), or a change refused by a rule (a template's `refuse:` rule, a blocked plan, a
/// refused patch or pack) on a route that changes something. Bad input (400, 413, 415), unknown things (404) and
/// races (409) changed nothing and decided nothing about the actor: they are in the request log
/// only. The row holds the route, status and codes, never the message (a refused value could be
/// a secret's).
fn refusal_audit(route: &Route, path: &str, actor: &str, e: &ApiError) -> Option<opsgraph_store::AuditRecord> {
    let denied = e.status == StatusCode::FORBIDDEN;
    let codes: Vec<&str> = e
        .details
        .as_ref()
        .and_then(|d| d.get("errors"))
        .and_then(|l| l.as_array())
        .map(|l| l.iter().filter_map(|x| x.get("code").and_then(|c| c.as_str())).collect())
        .unwrap_or_default();
    // Refused by a rule, not for its shape: a template's `refuse:` rule (P012), a blocked plan, a
    // patch the reviewer refused, a pack the registry refused.
    let by_rule = codes.contains(&"P012") || ["plan_blocked", "patch_refused", "pack_refused"].contains(&e.code);
    // A change, not a preview or a read: a route that needs more than `read`.
    let changes = matches!(route.access, Need(p) if p != crate::auth::Permission::Read);
    if !(denied || changes && by_rule) {
        return None;
    }
    let mut detail = json!({
        "method": route.method,
        "route": route.path,
        "status": e.status.as_u16(),
        "code": e.code,
    });
    if !codes.is_empty() {
        detail["errors"] = json!(codes);
    }
    let action = if denied { "request.denied" } else { "request.refused" };
    // `/api/v1/operations/{id}/…` and `/api/v1/resources/{*id}`: the row is found by its
    // operation or resource too.
    let operation = path.split('/').nth(4).filter(|_| route.path.starts_with("/api/v1/operations/{id}"));
    let resource = path.strip_prefix("/api/v1/resources/").filter(|_| route.path == "/api/v1/resources/{*id}");
    Some(crate::auth::audit(actor, action, path, operation, resource, detail))
}

/// A request answered with an error: by whom, and whether its body was left unread (refused
/// before the body was read, or beyond its limit while reading).
struct Refusal {
    error: ApiError,
    actor: Option<String>,
    body_unread: bool,
}

type Outcome = Result<(Reply, Option<String>), Refusal>;

/// An answer to a request whose body the server did not read: when it came with one, the answer
/// says `Connection: close` and the connection is closed after it (hyper closes a connection
/// whose response says so), so the unread bytes are never taken for the next request and a
/// client is never surprised by a connection that silently goes away. Bodies of refused requests
/// are not drained: a client without a valid token cannot make the server read a megabyte.
fn refused_unread(headers: &HeaderMap, mut response: Response) -> Response {
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .map(|v| v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) != Some(0))
        .unwrap_or(false);
    if declared || headers.contains_key(axum::http::header::TRANSFER_ENCODING) {
        response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    }
    response
}

async fn handle(state: AppState, route: &'static Route, req: Request) -> Outcome {
    let (parts, body) = req.into_parts();
    let bearer = bearer(&parts.headers);
    if route.access != Public && bodiless(&body) {
        return handle_bodiless(state, route, parts, bearer).await;
    }
    let limit = body_limit(&state, route);
    if route.access != Public && route.path.starts_with("/api/v1/agent/") && small(&parts.headers, limit.1) {
        return handle_small(state, route, parts, body, bearer, limit).await;
    }
    let who = match route.access {
        Public => None,
        Authenticated | Need(_) => {
            let s = state.clone();
            let who = blocking(move || authenticate(&s, &*s.pooled()?, bearer)).await.map_err(|error| Refusal {
                error,
                actor: None,
                body_unread: true,
            })?;
            if let Err(e) = authorize(route, &who) {
                return Err(Refusal { error: e, actor: Some(who.actor()), body_unread: true });
            }
            Some(who)
        }
    };
    let actor = who.as_ref().map(Identity::actor);
    let body = read_body(body, &parts.headers, limit).await.map_err(|error| Refusal {
        error,
        actor: actor.clone(),
        body_unread: true,
    })?;
    let params = path_params(&parts.uri, route.path);
    let query = query_of(&parts.uri);
    if let Some(e) = unknown_parameter(route, &query).or_else(|| nul_parameter(&params, &query)) {
        return Err(Refusal { error: e, actor, body_unread: false });
    }
    let method = parts.method.clone();
    let headers = parts.headers;
    let a = actor.clone();
    blocking(move || {
        let store = state.pooled()?;
        let mut ctx = Ctx { state, who, params, query, headers, body, method, store };
        (route.handler)(&mut ctx)
    })
    .await
    .map(|reply| (reply, a))
    .map_err(|error| Refusal { error, actor, body_unread: false })
}

/// A route's body limit: its name in `limits` and its bytes.
fn body_limit(state: &AppState, route: &Route) -> (&'static str, usize) {
    if route.body == "archive" {
        ("archive_bytes", state.0.limits.archive_bytes)
    } else if route.body == "agent_report" {
        ("agent_report_bytes", state.0.limits.agent_report_bytes)
    } else {
        ("body_bytes", state.0.limits.body_bytes)
    }
}

/// An agent route's body read before its token is checked: small enough that a client without a
/// valid token gains nothing by sending it (the agents' claims, heartbeats and reports are a few
/// KiB; other routes check the token before reading any body).
const SMALL_BODY: usize = 64 << 10;

/// Whether a request declares a small body (`Content-Length` at most [`SMALL_BODY`] and within
/// the route's limit, no `Transfer-Encoding`).
fn small(headers: &HeaderMap, limit: usize) -> bool {
    !headers.contains_key(axum::http::header::TRANSFER_ENCODING)
        && headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<usize>().ok())
            .is_some_and(|n| n <= SMALL_BODY.min(limit))
}

/// An agent route's request with a small body (see [`small`]): the body read first, then
/// authenticated, authorized and answered in one call on a blocking thread with one store
/// connection, in the order [`handle`] takes (token, permission, query, handler). Two trips to
/// the blocking pool, each with its connection, were a good part of an agent's report or claim
/// on the server (issue [N] 2).
async fn handle_small(
    state: AppState,
    route: &'static Route,
    parts: axum::http::request::Parts,
    body: Body,
    bearer: Option<String>,
    limit: (&'static str, usize),
) -> Outcome {
    let body = read_body(body, &parts.headers, limit).await.map_err(|error| Refusal {
        error,
        actor: None,
        body_unread: true,
    })?;
    in_one(state, route, parts, bearer, Some(body)).await
}

/// Whether a request is known to have no body (most reads): over HTTP/1.1, no
/// `Transfer-Encoding` and no `Content-Length` or a zero one.
fn bodiless(body: &Body) -> bool {
    axum::body::HttpBody::size_hint(body).exact() == Some(0)
}

/// A request without a body that needs a token: authenticated, authorized and answered in one
/// call on a blocking thread with one store connection ([`in_one`]). Two trips to the blocking
/// pool, each with its connection, cost about as much as answering a small read.
async fn handle_bodiless(
    state: AppState,
    route: &'static Route,
    parts: axum::http::request::Parts,
    bearer: Option<String>,
) -> Outcome {
    in_one(state, route, parts, bearer, None).await
}

/// A request whose body is read (`Some`) or absent (`None`), answered in one call on a blocking
/// thread with one store connection, in the order [`handle`] takes (token, permission, query,
/// handler).
async fn in_one(
    state: AppState,
    route: &'static Route,
    parts: axum::http::request::Parts,
    bearer: Option<String>,
    body: Option<Vec<u8>>,
) -> Outcome {
    let params = path_params(&parts.uri, route.path);
    let query = query_of(&parts.uri);
    let (method, headers) = (parts.method, parts.headers);
    let unread = body.is_none();
    let answered = blocking(move || {
        let refused = |error, actor, body_unread| Refusal { error, actor, body_unread };
        let store = match state.pooled() {
            Ok(s) => s,
            Err(e) => return Ok(Err(refused(e.into(), None, unread))),
        };
        let who = match authenticate(&state, &*store, bearer) {
            Ok(who) => who,
            Err(e) => return Ok(Err(refused(e, None, unread))),
        };
        let actor = Some(who.actor());
        if let Err(e) = authorize(route, &who) {
            return Ok(Err(refused(e, actor, unread)));
        }
        if let Some(e) = unknown_parameter(route, &query).or_else(|| nul_parameter(&params, &query)) {
            return Ok(Err(refused(e, actor, false)));
        }
        let body = body.unwrap_or_default();
        let mut ctx = Ctx { state, who: Some(who), params, query, headers, body, method, store };
        Ok(match (route.handler)(&mut ctx) {
            Ok(reply) => Ok((reply, actor)),
            Err(e) => Err(refused(e, actor, false)),
        })
    })
    .await;
    match answered {
        Ok(outcome) => outcome,
        Err(error) => Err(Refusal { error, actor: None, body_unread: false }),
    }
}

/// A route's permission, held or not.
fn authorize(route: &Route, who: &Identity) -> Result<(), ApiError> {
    match route.access {
        Need(p) if !who.may(p) => Err(ApiError::forbidden(
            "forbidden",
            format!("roles {} do not allow `{}`", who.roles.join(", "), p.as_str()),
        )
        .with_details(json!({"needs": p.as_str(), "roles": who.roles}))),
        Public | Authenticated | Need(_) => Ok(()),
    }
}

/// The query parameters, percent-decoded.
fn query_of(uri: &axum::http::Uri) -> BTreeMap<String, String> {
    uri.query()
        .map(|q| {
            q.split('&')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (percent_decode(&k.replace('+', " ")), percent_decode(&v.replace('+', " ")))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A query parameter the route does not take.
fn unknown_parameter(route: &Route, query: &BTreeMap<String, String>) -> Option<ApiError> {
    let k = query.keys().find(|k| !route.query.contains(&k.as_str()))?;
    let allowed = if route.query.is_empty() { "none".to_string() } else { route.query.join(", ") };
    Some(ApiError::bad_request(
        "unknown_parameter",
        format!("unknown query parameter `{k}`; this route takes: {allowed}"),
    ))
}

/// A path or query parameter holding a NUL (`%00`), which no text here may hold (PostgreSQL's
/// text cannot): refused before any handler reads it, as the OpenAPI document says.
fn nul_parameter(params: &BTreeMap<String, String>, query: &BTreeMap<String, String>) -> Option<ApiError> {
    let (name, _) = params.iter().chain(query).find(|(k, v)| k.contains('\0') || v.contains('\0'))?;
    Some(ApiError::bad_request(
        "invalid_parameter",
        format!("parameter `{}` holds a NUL character (`%00`), which no text here may hold", name.replace('\0', "%00")),
    ))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, ApiError> + Send + 'static) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) => Err(ApiError::internal("a request handler panicked", &e)),
    }
}

fn authenticate(
    state: &AppState,
    store: &dyn opsgraph_store::Store,
    bearer: Option<String>,
) -> Result<Identity, ApiError> {
    let token = bearer
        .ok_or_else(|| ApiError::unauthorized("unauthenticated", "this route needs `Authorization: Bearer <token>`"))?;
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
