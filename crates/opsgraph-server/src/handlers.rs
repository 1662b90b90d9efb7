//! The handlers: synchronous functions of a request context, run on a blocking thread after the
//! route's access was checked. A mutation commits its audit record with the change itself.

use std::collections::BTreeMap;

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use opsgraph_core::model::{Document, Intent, OperationState};
use opsgraph_core::plan::{render, Input, Inventory, Plan};
use opsgraph_runtime::{GateAnswer, Runtime};
use opsgraph_store::{now, AuditFilter, OperationFilter, OperationRecord, RequestRecord, Write};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use opsgraph_api::views;

use crate::auth::{self, hex, Identity};
use crate::error::ApiError;
use crate::AppState;

/// What a handler gets: the caller (checked), path and query parameters, the body (within its
/// limit) and a store connection of its own.
pub(crate) struct Ctx {
    pub(crate) state: AppState,
    pub(crate) who: Option<Identity>,
    pub(crate) params: BTreeMap<String, String>,
    pub(crate) query: BTreeMap<String, String>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
    pub(crate) method: Method,
    pub(crate) store: crate::Pooled,
}

/// A handler's answer: JSON (most routes), bytes of a media type (artifacts, metrics), or a
/// streaming response (server-sent events) that a thread of its own feeds.
pub(crate) struct Reply {
    status: StatusCode,
    body: Content,
    replayed: bool,
}

pub(crate) enum Content {
    Json(Value),
    Bytes {
        content_type: &'static str,
        bytes: Vec<u8>,
        /// `Cache-Control: no-store`: a revealed secret is not kept by caches.
        no_store: bool,
    },
    Stream(Response),
    /// A file of the web UI: served with a content security policy that allows only this
    /// origin's files (no inline script or style).
    Page {
        content_type: &'static str,
        text: &'static str,
    },
}

impl Reply {
    pub(crate) fn ok(body: Value) -> Result<Reply, ApiError> {
        Ok(Reply { status: StatusCode::OK, body: Content::Json(body), replayed: false })
    }

    /// A typed answer written straight to JSON text, without building a `Value` of it first:
    /// for the large views read most often (an operation of thousands of jobs).
    pub(crate) fn typed<T: serde::Serialize>(body: &T) -> Result<Reply, ApiError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ApiError::internal("an answer cannot be written", &e))?;
        Reply::bytes("application/json", bytes, false)
    }

    fn created(body: Value) -> Result<Reply, ApiError> {
        Ok(Reply { status: StatusCode::CREATED, body: Content::Json(body), replayed: false })
    }

    pub(crate) fn bytes(content_type: &'static str, bytes: Vec<u8>, no_store: bool) -> Result<Reply, ApiError> {
        Ok(Reply::with(StatusCode::OK, Content::Bytes { content_type, bytes, no_store }))
    }

    pub(crate) fn with(status: StatusCode, body: Content) -> Reply {
        Reply { status, body, replayed: false }
    }

    pub(crate) fn stream(response: Response) -> Reply {
        Reply::with(StatusCode::OK, Content::Stream(response))
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let mut r = match self.body {
            Content::Json(body) => (self.status, axum::Json(body)).into_response(),
            Content::Bytes { content_type, bytes, no_store } => {
                let mut r = (self.status, bytes).into_response();
                r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
                if no_store {
                    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                }
                r
            }
            Content::Stream(r) => r,
            Content::Page { content_type, text } => {
                let mut r = (self.status, text).into_response();
                let h = r.headers_mut();
                h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
                h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(crate::media::CSP));
                h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
                h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
                h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
                r
            }
        };
        if self.replayed {
            r.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
        }
        r
    }
}

impl Ctx {
    pub(crate) fn param(&self, name: &str) -> String {
        self.params.get(name).cloned().unwrap_or_default()
    }

    pub(crate) fn who(&self) -> Result<&Identity, ApiError> {
        // Routes that reach a handler using this are not public: the router authenticated them.
        self.who.as_ref().ok_or_else(|| ApiError::unauthorized("unauthenticated", "this route needs a token"))
    }

    /// The JSON body; `{}` when there is none and `optional`. A string with a NUL (`\u0000`) is
    /// refused before anything is read, on every backend: the OpenAPI document says that no
    /// string holds one, and PostgreSQL's text cannot.
    pub(crate) fn json<T: DeserializeOwned>(&self, optional: bool) -> Result<T, ApiError> {
        if crate::body::holds_nul(&self.body) {
            return Err(ApiError::bad_request(
                "invalid_json",
                "the body holds a NUL character (`\\u0000`) in a string, which no text here may hold",
            ));
        }
        self.screened_json(optional)
    }

    /// The JSON body as [`Ctx::json`] reads it, a NUL allowed: for the agent protocol's bodies,
    /// whose text (what a host printed) the server screens and stores printable, never refuses.
    pub(crate) fn screened_json<T: DeserializeOwned>(&self, optional: bool) -> Result<T, ApiError> {
        let body: &[u8] = if self.body.iter().all(u8::is_ascii_whitespace) && optional { b"{}" } else { &self.body };
        let first = match serde_json::from_slice(body) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        // JSON Schema (the OpenAPI document's language) calls `3.0` an integer; serde does not. A
        // body written so is read with those numbers as the integers they are.
        let integral = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|mut v| crate::body::integral_floats_to_integers(&mut v).then_some(v));
        let e = match integral.map(serde_json::from_value) {
            Some(Ok(v)) => return Ok(v),
            Some(Err(e)) => e,
            None => first,
        };
        Err(ApiError::bad_request("invalid_json", format!("the body is not the JSON this route takes: {e}")))
    }

    pub(crate) fn operation_record(&self) -> Result<OperationRecord, ApiError> {
        let id = self.param("id");
        self.store.operation(&id)?.ok_or_else(|| ApiError::not_found("no_operation", format!("no operation `{id}`")))
    }

    pub(crate) fn runtime(&self) -> Result<Runtime, ApiError> {
        Ok(self.state.runtime()?)
    }

    /// The one document of `kind` the body holds (YAML or JSON), checked like `opsgraph validate`
    /// does.
    pub(crate) fn document(&self, kind: &str) -> Result<Document, ApiError> {
        let text = std::str::from_utf8(&self.body)
            .map_err(|_| ApiError::bad_request("invalid_body", "the body is not UTF-8 text"))?;
        let parsed = opsgraph_core::pack::parse_file("request", text);
        if parsed.has_errors() {
            let diags: Vec<String> = parsed.diagnostics.iter().map(ToString::to_string).collect();
            return Err(ApiError::unprocessable("invalid_document", format!("the {kind} document has problems"))
                .with_details(json!({ "diagnostics": diags })));
        }
        let mut docs = parsed.docs.into_iter().map(|d| d.doc);
        match (docs.next(), docs.next()) {
            (Some(d), None) if d.kind() == kind => Ok(d),
            _ => Err(ApiError::unprocessable(
                "expected_one_document",
                format!("the body must hold exactly one `{kind}` document"),
            )),
        }
    }

    fn intent(&self) -> Result<Intent, ApiError> {
        let text = std::str::from_utf8(&self.body)
            .map_err(|_| ApiError::bad_request("invalid_body", "the body is not UTF-8 text"))?;
        if text.trim().is_empty() {
            return Err(ApiError::bad_request("invalid_body", "the body is empty: send one `intent` document"));
        }
        let parsed = opsgraph_core::pack::parse_file("request", text);
        if parsed.has_errors() {
            let diags: Vec<String> = parsed.diagnostics.iter().map(ToString::to_string).collect();
            return Err(ApiError::unprocessable("invalid_document", "the intent document has problems")
                .with_details(json!({ "diagnostics": diags })));
        }
        let mut docs = parsed.docs.into_iter().map(|d| d.doc);
        match (docs.next(), docs.next()) {
            (Some(Document::Intent(i)), None) => Ok(i),
            _ => {
                Err(ApiError::unprocessable("expected_one_intent", "the body must hold exactly one `intent` document"))
            }
        }
    }

    /// Builds the plan with the server's packs and world, plus the resources operations recorded.
    fn plan(&self, intent: &Intent) -> Result<Plan, ApiError> {
        let w = self.state.world();
        let resources = opsgraph_runtime::manage::world_resources(&w.resources, &*self.store)?;
        let recorded = opsgraph_runtime::manage::recorded(intent, &*self.store)?;
        let inventory = Inventory::new(&resources);
        // The requester's roles ([O]): policy rules may match on them.
        let roles = self.who().map(|w| w.roles.clone()).unwrap_or_default();
        opsgraph_core::plan::build(&Input {
            intent,
            packs: &w.packs,
            inventory: &inventory,
            providers: &w.providers,
            policy: &w.policy,
            operations: &w.operations,
            recorded: recorded.as_ref(),
            roles: &roles,
        })
        .map_err(|errors| {
            // `field`: the intent's field it is about (`parameters.port`, `scopes.nodes`), for a form.
            let list: Vec<Value> = errors
                .iter()
                .map(|e| match e.field() {
                    Some(field) => json!({"code": e.code(), "message": e.to_string(), "field": field}),
                    None => json!({"code": e.code(), "message": e.to_string()}),
                })
                .collect();
            ApiError::unprocessable("plan_error", "the plan cannot be built").with_details(json!({ "errors": list }))
        })
    }
}

pub(crate) fn health(_: &mut Ctx) -> Result<Reply, ApiError> {
    Reply::ok(json!(opsgraph_api::Status { status: "ok".into() }))
}

pub(crate) fn ready(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    match ctx.store.operations(&OperationFilter { state: Some("-".into()), resource: None }) {
        Ok(_) => Reply::ok(json!(opsgraph_api::Status { status: "ready".into() })),
        Err(e) => {
            tracing::error!(error = %e, "not ready: the store does not answer");
            Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", "the store does not answer"))
        }
    }
}

pub(crate) fn me(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let who = ctx.who()?;
    Reply::ok(json!(opsgraph_api::Me {
        name: who.name.clone(),
        actor: who.actor(),
        token: who.token.clone(),
        roles: who.roles.clone(),
        permissions: who.permissions.iter().map(|p| p.as_str().to_string()).collect(),
    }))
}

pub(crate) fn roles(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let builtin: Vec<&str> = auth::BUILTIN_ROLES.iter().map(|(r, _)| *r).collect();
    let roles = ctx
        .state
        .config()
        .table()
        .into_iter()
        .map(|(name, perms)| opsgraph_api::RoleView {
            builtin: builtin.contains(&name.as_str()),
            name,
            permissions: perms.iter().map(|p| p.as_str().to_string()).collect(),
        })
        .collect();
    Reply::ok(json!(opsgraph_api::RoleList { roles }))
}

pub(crate) fn plan(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    // `?format=text`: the preview a person reads, as `opsgraph plan` prints it, beside the JSON.
    let text = match ctx.query.get("format").map(String::as_str) {
        None | Some("json") => false,
        Some("text") => true,
        Some(other) => {
            return Err(ApiError::bad_request("invalid_parameter", format!("`format` is json or text, not `{other}`")))
        }
    };
    let intent = ctx.intent()?;
    let plan = ctx.plan(&intent)?;
    let mut preview = render::preview(&plan, &ctx.state.world().packs);
    if text {
        preview.text = Some(render::text(&plan));
    }
    Reply::typed(&preview)
}

pub(crate) fn operations(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let q = |k: &str| ctx.query.get(k).cloned();
    let query = opsgraph_api::OperationQuery::new(q("state"), q("resource"), q("pack"), q("environment"))
        .map_err(|e| ApiError::bad_request("invalid_parameter", e.message))?;
    let operations = opsgraph_api::listing::operations(&*ctx.store, &query)?;
    Reply::ok(json!(opsgraph_api::OperationList { operations }))
}

pub(crate) fn jobs(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    Reply::ok(json!(opsgraph_api::JobList { jobs: ctx.store.jobs(&op.id)? }))
}

pub(crate) fn timeline(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    let timeline = ctx.store.timeline(&op.id)?.iter().map(views::timeline_entry).collect();
    Reply::ok(json!(opsgraph_api::Timeline { timeline }))
}

pub(crate) fn evidence(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    Reply::ok(json!(opsgraph_api::EvidenceList { evidence: ctx.store.evidence(&op.id)? }))
}

pub(crate) fn artifacts(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    let artifacts = ctx.store.artifacts(&op.id)?.iter().map(views::artifact).collect();
    Reply::ok(json!(opsgraph_api::ArtifactList { artifacts }))
}

/// `GET /operations/{id}/plan`: the operation's current plan revision as `plan -o json` shows it
/// (jobs with what they wait for, the capability resolution with every rejected candidate).
pub(crate) fn operation_plan(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    let stored = ctx.store.plan(&op.plan_revision)?.ok_or_else(|| {
        ApiError::not_found("no_plan", format!("operation `{}` has no stored plan {}", op.id, op.plan_revision))
    })?;
    let plan: Plan =
        serde_json::from_value(stored).map_err(|e| ApiError::internal("a stored plan cannot be read", &e))?;
    let mut preview = render::preview(&plan, &ctx.state.world().packs);
    preview.map_parameters(&views::hide_sealed);
    Reply::typed(&preview)
}

/// `GET /operations/{id}/patches`: every plan patch proposed for the operation, from its
/// timeline: the changes, the diff, the reviewer's findings, and its gate with the answer.
pub(crate) fn patches(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    let gates = ctx.store.gates(&op.id)?;
    let patches: Vec<opsgraph_api::PatchView> = ctx
        .store
        .timeline(&op.id)?
        .iter()
        .filter(|e| e.event == "patch_proposed")
        .map(|e| {
            let id = e.data["patch"].as_str().unwrap_or_default();
            let diff: opsgraph_core::plan::patch::Diff =
                serde_json::from_value(e.data["diff"].clone()).unwrap_or_default();
            let gate = gates.iter().find(|g| g.kind.patch() == Some(id));
            let state = match gate.map(|g| g.answer.as_deref()) {
                None => "applied",
                Some(None) => "waiting_for_approval",
                Some(Some("approve patch")) => "approved",
                Some(Some(_)) => "rejected",
            };
            opsgraph_api::PatchView {
                id: id.to_string(),
                author: e.data["author"].clone(),
                at: e.at.clone(),
                reason: e.data["reason"].clone(),
                changes: views::hide_sealed(e.data["changes"].clone()),
                diff: e.data["diff"].clone(),
                diff_text: diff.text(),
                findings: e.data["findings"].clone(),
                revision: e.data["revision"].clone(),
                gate: gate.map(|g| g.id.clone()),
                answered_by: gate.and_then(|g| g.answered_by.clone()),
                state: state.to_string(),
            }
        })
        .collect();
    Reply::ok(json!(opsgraph_api::PatchList { patches }))
}

pub(crate) fn gates(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    // Sealed values (a secret given at a missing-input gate) as references, as in the operation.
    Reply::ok(json!(views::gates(&*ctx.store, &op)?))
}

/// `POST /api/v1/operations`: intent -> plan -> a recorded operation, driven in the background.
/// With an `Idempotency-Key`, the result is recorded in the creating transaction: the same key
/// and body get the same result, the same key with another body 422.
pub(crate) fn create_operation(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let key = idempotency_key(ctx)?;
    let intent = ctx.intent()?;
    let fingerprint = {
        let mut h = Sha256::new();
        h.update(ctx.method.as_str().as_bytes());
        h.update(b" /api/v1/operations\n");
        h.update(&ctx.body);
        format!("sha256:{}", hex(&h.finalize()))
    };
    let state = ctx.state.clone();
    let _write = state.0.write.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(key) = &key {
        if let Some(done) = ctx.store.request(&actor, key)? {
            if done.fingerprint != fingerprint {
                return Err(ApiError::unprocessable(
                    "idempotency_key_reused",
                    format!("Idempotency-Key `{key}` was used at {} for a different request", done.at),
                ));
            }
            let status = StatusCode::from_u16(done.status).unwrap_or(StatusCode::OK);
            return Ok(Reply { status, body: Content::Json(done.response), replayed: true });
        }
    }
    let plan = ctx.plan(&intent)?;
    let id = opsgraph_runtime::new_operation_id();
    let response = json!(opsgraph_api::Created {
        id: id.clone(),
        plan_revision: plan.revision.hash.clone(),
        href: format!("/api/v1/operations/{id}"),
    });
    let mut attached = vec![opsgraph_runtime::audit::create(&actor, &id, &plan, key.as_deref())];
    if let Some(key) = key {
        attached.push(Write::Request(RequestRecord {
            actor: actor.clone(),
            key,
            fingerprint,
            status: StatusCode::CREATED.as_u16(),
            response: response.clone(),
            at: now(),
        }));
    }
    let mut rt = ctx.runtime()?;
    rt.attach(attached);
    rt.create_as(&id, &plan, &actor, &mut |_| {})?;
    drop(_write);
    state.wake(&id);
    Reply::created(response)
}

fn idempotency_key(ctx: &Ctx) -> Result<Option<String>, ApiError> {
    let Some(v) = ctx.headers.get("idempotency-key") else { return Ok(None) };
    let key = v.to_str().map_err(|_| ApiError::bad_request("invalid_header", "Idempotency-Key is not ASCII"))?.trim();
    let max = ctx.state.0.limits.idempotency_key_bytes;
    if key.is_empty() {
        return Err(ApiError::bad_request("invalid_header", "Idempotency-Key is empty"));
    }
    if !key.bytes().all(|c| c == b' ' || c.is_ascii_graphic()) {
        return Err(ApiError::bad_request("invalid_header", "Idempotency-Key is printable ASCII (no tab or control)"));
    }
    if key.len() > max {
        return Err(ApiError::unprocessable(
            "limit_exceeded",
            format!("Idempotency-Key is longer than limits.idempotency_key_bytes ({max} bytes)"),
        )
        .with_details(json!({"limit": "idempotency_key_bytes", "max": max})));
    }
    Ok(Some(key.to_string()))
}

pub(crate) fn answer_gate(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let who = ctx.who()?.clone();
    let body: opsgraph_api::AnswerRequest = ctx.json(false)?;
    let op = ctx.operation_record()?;
    let gate_id = ctx.param("gate");
    let gate = ctx
        .store
        .gates(&op.id)?
        .into_iter()
        .find(|g| g.id == gate_id)
        .ok_or_else(|| ApiError::not_found("no_gate", format!("no gate `{gate_id}` in operation `{}`", op.id)))?;
    // A plan patch's gate also needs the permission to approve patches.
    if gate.kind.patch().is_some() && !who.may(auth::Permission::ApprovePatches) {
        return Err(ApiError::forbidden(
            "approve_patches_needed",
            format!("gate `{gate_id}` approves a plan patch: it needs the approve_patches permission"),
        ));
    }
    let role = if gate.required_roles.is_empty() {
        who.roles.first().cloned()
    } else {
        who.roles.iter().find(|r| gate.required_roles.contains(r)).cloned()
    };
    let Some(role) = role else {
        return Err(ApiError::forbidden(
            "role_not_allowed",
            format!(
                "gate `{gate_id}` is answered by {}; your roles: {}",
                gate.required_roles.join(" or "),
                who.roles.join(", ")
            ),
        ));
    };
    // Four eyes (the creator of the operation, the author of a patch) is the runtime's rule:
    // `opsgraph_runtime::approves`, answered 403 self_approval.
    let Some(revision) = body.revision else {
        return Err(ApiError::unprocessable(
            "revision_required",
            format!("an answer names the plan revision it approves: `\"revision\": \"{}\"`", op.plan_revision),
        ));
    };
    if revision != op.plan_revision {
        return Err(ApiError::conflict(
            "stale_revision",
            format!("the operation now runs plan revision {}; read it and answer again", op.plan_revision),
        )
        .with_details(json!({"current": op.plan_revision, "given": revision})));
    }
    if let (Some(answer), Some(by), Some(at)) = (&gate.answer, &gate.answered_by, &gate.answered_at) {
        return Err(ApiError::conflict(
            "gate_answered",
            format!("gate `{gate_id}` was already answered `{answer}` by {by} at {at}"),
        )
        .with_details(json!({"answer": answer, "answered_by": by, "answered_at": at})));
    }
    let actor = who.actor();
    let state = ctx.state.clone();
    let _write = state.0.write.lock().unwrap_or_else(|e| e.into_inner());
    let mut rt = ctx.runtime()?;
    let root = rt.root_of(&op.id)?;
    // The revision is checked again inside the answer's transaction: a plan changed since the
    // check above voids the answer.
    let guard = Write::ExpectPlan { operation: op.id.clone(), revision: revision.clone() };
    rt.attach(vec![
        guard,
        opsgraph_runtime::audit::gate_answer(
            &actor,
            &op,
            &gate_id,
            (&body.option, &role),
            &revision,
            body.value.is_some(),
        ),
    ]);
    let answer =
        GateAnswer { option: body.option.clone(), actor: actor.clone(), role: role.clone(), value: body.value };
    let next = rt.answer_gate(&op.id, &gate_id, &answer)?;
    drop(_write);
    state.wake(&root);
    Reply::ok(json!(opsgraph_api::AnswerReply {
        operation: op.id,
        gate: gate_id,
        answer: body.option,
        answered_by: actor,
        role,
        state: next.kind(),
    }))
}

/// The audit record of a control request on `op`.
fn control_audit(actor: &str, action: &str, op: &OperationRecord, detail: Value) -> Write {
    opsgraph_runtime::audit::control(actor, action, op, detail)
}

fn control_reply(id: &str, state: &opsgraph_core::model::OperationState) -> Result<Reply, ApiError> {
    Reply::ok(json!(opsgraph_api::ControlReply {
        id: id.to_string(),
        state: state.kind(),
        detail: views::detail(state)
    }))
}

pub(crate) fn pause(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    with_reason(ctx, "operation.pause", "paused by a person", |rt, id, actor, reason| rt.pause(id, actor, reason))
}

pub(crate) fn resume(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let _: opsgraph_api::ReasonRequest = ctx.json(true)?;
    let op = ctx.operation_record()?;
    let app = ctx.state.clone();
    let _write = app.0.write.lock().unwrap_or_else(|e| e.into_inner());
    let mut rt = ctx.runtime()?;
    // A running operation is only driven again (nothing changes, nothing to audit).
    let state = if matches!(op.state, opsgraph_core::model::OperationState::Running) {
        op.state.clone()
    } else {
        rt.attach(vec![control_audit(&actor, "operation.resume", &op, json!({}))]);
        rt.resume(&op.id, &actor)?
    };
    let root = rt.root_of(&op.id)?;
    drop(_write);
    app.wake(&root);
    control_reply(&op.id, &state)
}

pub(crate) fn cancel(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    with_reason(ctx, "operation.cancel", "cancelled by a person", |rt, id, actor, reason| rt.cancel(id, actor, reason))
}

/// A person's control request that gives a reason (`default` when the body names none): audited
/// as `action`, then `act`ed on the runtime with the operation's id, the actor and the reason.
fn with_reason(
    ctx: &mut Ctx,
    action: &str,
    default: &str,
    act: impl FnOnce(&mut Runtime, &str, &str, &str) -> Result<OperationState, opsgraph_runtime::Error>,
) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let body: opsgraph_api::ReasonRequest = ctx.json(true)?;
    let op = ctx.operation_record()?;
    let reason = body.reason.unwrap_or_else(|| default.into());
    let _write = ctx.state.0.write.lock().unwrap_or_else(|e| e.into_inner());
    let mut rt = ctx.runtime()?;
    rt.attach(vec![control_audit(&actor, action, &op, json!({"reason": reason}))]);
    let state = act(&mut rt, &op.id, &actor, &reason)?;
    control_reply(&op.id, &state)
}

pub(crate) fn retry(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let body: opsgraph_api::RetryRequest = ctx.json(true)?;
    let op = ctx.operation_record()?;
    let app = ctx.state.clone();
    let _write = app.0.write.lock().unwrap_or_else(|e| e.into_inner());
    let mut rt = ctx.runtime()?;
    rt.attach(vec![control_audit(&actor, "operation.retry", &op, json!({"jobs": body.jobs}))]);
    let state = rt.retry(&op.id, &body.jobs, &actor)?;
    let root = rt.root_of(&op.id)?;
    drop(_write);
    app.wake(&root);
    control_reply(&op.id, &state)
}

pub(crate) fn resources(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let resources = ctx.store.resources()?.iter().map(views::resource_row).collect();
    Reply::ok(json!(opsgraph_api::ResourceList { resources }))
}

pub(crate) fn resource(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let id = ctx.param("id");
    let r =
        ctx.store.resource(&id)?.ok_or_else(|| ApiError::not_found("no_resource", format!("no resource `{id}`")))?;
    Reply::ok(json!(views::resource(&*ctx.store, &r)?))
}

pub(crate) fn audit(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    // Any RFC 3339 time (the document's `format: date-time`), compared in the store's UTC form.
    let since = match ctx.query.get("since") {
        None => None,
        Some(s) => Some(opsgraph_store::normalize_time(s).ok_or_else(|| {
            ApiError::bad_request("invalid_parameter", "`since` is an RFC 3339 time (2026-01-31T12:00:00Z)")
        })?),
    };
    let filter = AuditFilter {
        actor: ctx.query.get("actor").cloned(),
        operation: ctx.query.get("operation").cloned(),
        resource: ctx.query.get("resource").cloned(),
        since,
    };
    Reply::ok(json!(opsgraph_api::AuditList { audit: ctx.store.audit(&filter)? }))
}

pub(crate) fn tokens(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let tokens = ctx.store.tokens()?.iter().map(views::token).collect();
    Reply::ok(json!(opsgraph_api::TokenList { tokens }))
}

pub(crate) fn create_token(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let who = ctx.who()?.clone();
    let body: opsgraph_api::TokenRequest = ctx.json(false)?;
    let state = ctx.state.clone();
    let _write = state.0.write.lock().unwrap_or_else(|e| e.into_inner());
    let (record, token) = auth::create_token(
        &mut *ctx.store,
        state.config(),
        &body.name,
        &body.roles,
        &who.actor(),
        Some(&who.permissions),
        None,
    )?;
    Reply::created(json!(opsgraph_api::CreatedToken { view: views::token(&record), token }))
}

pub(crate) fn revoke_token(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let who = ctx.who()?.clone();
    let id = ctx.param("id");
    let state = ctx.state.clone();
    let _write = state.0.write.lock().unwrap_or_else(|e| e.into_inner());
    let record = auth::revoke_token(&mut *ctx.store, state.config(), &id, &who.actor(), Some(&who.permissions))?;
    Reply::ok(json!(views::token(&record)))
}

/// `POST /operations/{id}/patches`: propose a plan patch for a failed operation.
pub(crate) fn propose_patch(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let op = ctx.operation_record()?;
    // `?remedy=ID`: the patch of one of the operation's pack remedies; `?analyzer=rules`: the
    // remedy the rules analyzer matches, proposed by the analyzer (`?analyzer=ai`: `analyze.rs`);
    // else a `plan_patch` body.
    let mut author = actor.clone();
    let patch = match (ctx.query.get("remedy").cloned(), ctx.query.get("analyzer").cloned()) {
        (Some(id), None) => {
            let rt = ctx.runtime()?;
            rt.remedy_patch(&op.id, &id)?
        }
        (None, Some(a)) if a == "rules" => {
            author = opsgraph_runtime::ANALYZER_AUTHOR.to_string();
            ctx.runtime()?.analyzer_patch(&op.id)?
        }
        (None, Some(a)) => {
            return Err(ApiError::bad_request("unknown_analyzer", format!("no analyzer `{a}`: expected rules or ai")))
        }
        // Each is a valid parameter alone (the document cannot say "not both"): 422, not 400.
        (Some(_), Some(_)) => {
            return Err(ApiError::unprocessable("invalid_query", "name a remedy or an analyzer, not both"))
        }
        (None, None) => {
            let Document::PlanPatch(p) = ctx.document("plan_patch")? else { unreachable!("kind checked") };
            p
        }
    };
    let app = ctx.state.clone();
    let _write = app.0.write.lock().unwrap_or_else(|e| e.into_inner());
    let mut rt = ctx.runtime()?;
    rt.attach(vec![control_audit(&actor, "operation.patch", &op, json!({"reason": patch.reason}))]);
    let p = rt.propose_patch(&op.id, &patch, &author)?;
    let root = rt.root_of(&op.id)?;
    drop(_write);
    app.wake(&root);
    Reply::ok(json!(views::patch_reply(&op.id, &p)))
}

/// `POST /operations/{id}/interventions`: record a manual fix and verify it.
pub(crate) fn intervene(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let Document::Intervention(iv) = ctx.document("intervention")? else { unreachable!("kind checked") };
    let op = ctx.operation_record()?;
    let app = ctx.state.clone();
    let _write = app.0.write.lock().unwrap_or_else(|e| e.into_inner());
    let mut rt = ctx.runtime()?;
    rt.attach(vec![control_audit(&actor, "operation.intervene", &op, json!({"note": iv.note}))]);
    let v = rt.intervene(&op.id, &iv, &actor)?;
    let root = rt.root_of(&op.id)?;
    drop(_write);
    app.wake(&root);
    Reply::ok(json!(views::intervention(&op.id, &v)))
}

/// `GET /operations/{id}/diagnosis`: the rules analyzer on the failed jobs.
pub(crate) fn diagnosis(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    let rt = ctx.runtime()?;
    let diagnosis = rt.diagnose(&op.id)?.iter().map(views::diagnosis).collect();
    Reply::ok(json!(opsgraph_api::DiagnosisList { diagnosis }))
}

/// `GET /operations/{id}/logs[?job=]`: each attempt's captured (masked) output.
pub(crate) fn logs(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    let job = ctx.query.get("job").cloned();
    let logs = views::logs(&*ctx.store, &*ctx.state.0.blobs, &op.id, job.as_deref())?;
    Reply::ok(json!(opsgraph_api::LogList { logs }))
}
