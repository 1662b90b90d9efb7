//! The analyzers through the API: `POST /operations/{id}/diagnosis?analyzer=rules|ai` (ask one;
//! an AI's patch is reviewed, not proposed) and `POST /operations/{id}/patches?analyzer=ai` (the
//! AI's patch proposed as `ai-agent:planner`). The AI analyzer is the runtime's
//! (`opsgraph_runtime::ai`), the one `opsgraph diagnose --ai openai` uses: the same masked
//! context, the same strict answer check, the same reviewer, the same four-eyes rules.

use opsgraph_api::views;
use opsgraph_runtime::ai::Endpoint;
use opsgraph_store::{OperationRecord, Write};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::handlers::{Ctx, Reply};

/// The analyzer a request names: `rules` (the default) or `ai`.
fn analyzer(ctx: &Ctx) -> Result<&'static str, ApiError> {
    match ctx.query.get("analyzer").map(String::as_str) {
        None | Some("rules") => Ok("rules"),
        Some("ai") => Ok("ai"),
        Some(other) => {
            Err(ApiError::bad_request("unknown_analyzer", format!("no analyzer `{other}`: expected rules or ai")))
        }
    }
}

/// The AI endpoint of the server's `config.yaml`; 409 `ai_not_configured` without one.
fn endpoint(ctx: &Ctx) -> Result<Endpoint, ApiError> {
    ctx.state.config().ai.clone().ok_or_else(|| {
        ApiError::conflict(
            "ai_not_configured",
            "the AI analyzer is not configured on this server: `ai: {url, model, api_key_env}` in its config.yaml",
        )
    })
}

/// Counts one question to the AI analyzer against `limits.ai_requests_*` (429 `rate_limited`
/// beyond them), once the asker may ask and before anything is sent.
fn budget(ctx: &Ctx, actor: &str) -> Result<(), ApiError> {
    ctx.state.0.ai_budget.take(&ctx.state.0.limits, actor, std::time::Instant::now())
}

fn audit(actor: &str, action: &str, op: &OperationRecord, detail: Value) -> Write {
    opsgraph_runtime::audit::control(actor, action, op, detail)
}

/// `POST /operations/{id}/diagnosis[?analyzer=rules|ai]`: the rules analyzer (as `GET`), or the
/// AI's answer, recorded on the timeline with an audit row naming who asked, its patch reviewed
/// and offered only when the reviewer passes it.
pub(crate) fn diagnose(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let kind = analyzer(ctx)?;
    let op = ctx.operation_record()?;
    if kind == "rules" {
        let list: Vec<_> = ctx.runtime()?.diagnose(&op.id)?.iter().map(views::diagnosis).collect();
        return Reply::ok(json!(opsgraph_api::AnalyzerReply { diagnosis: list, review: None }));
    }
    // Asking the AI sends the failure's (masked) context off the machine, costs money and writes
    // the answer to the timeline: as proposing its patch does, it needs `patch`, not `read`. A
    // viewer reads the diagnoses others asked for. (Refused before anything is sent; audited as
    // every 403 is.)
    if !ctx.who()?.may(crate::auth::Permission::Patch) {
        return Err(ApiError::forbidden(
            "forbidden",
            "asking the AI analyzer needs the `patch` permission (a viewer reads the answers others asked for)",
        ));
    }
    let endpoint = endpoint(ctx)?;
    budget(ctx, &actor)?;
    let mut rt = ctx.runtime()?;
    // The question leaves the machine: who asked is recorded with the answer (or its refusal).
    rt.attach(vec![audit(&actor, "operation.diagnose", &op, json!({"analyzer": "ai", "model": endpoint.model()}))]);
    let found = rt.ai_diagnose(&op.id, &endpoint)?;
    let (view, review) = views::ai_diagnosis(&op.id, &found);
    Reply::ok(json!(opsgraph_api::AnalyzerReply { diagnosis: vec![view], review }))
}

/// `POST /operations/{id}/patches`: with `analyzer=ai` (and no remedy) the AI's patch, [`propose`];
/// everything else is `handlers::propose_patch`'s.
pub(crate) fn propose_patch(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    if ctx.query.get("analyzer").map(String::as_str) == Some("ai") && !ctx.query.contains_key("remedy") {
        let op = ctx.operation_record()?;
        return propose(ctx, op);
    }
    crate::handlers::propose_patch(ctx)
}

/// `POST /operations/{id}/patches?analyzer=ai`: the AI's answer, then its patch proposed as
/// `ai-agent:planner` through `propose_patch` (422 `patch_refused` with every finding when the
/// reviewer refuses it; it waits at its gate unless `ai_policy.auto_apply` covers it).
fn propose(ctx: &mut Ctx, op: OperationRecord) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let endpoint = endpoint(ctx)?;
    budget(ctx, &actor)?;
    let mut rt = ctx.runtime()?;
    rt.attach(vec![audit(&actor, "operation.diagnose", &op, json!({"analyzer": "ai", "model": endpoint.model()}))]);
    // Asked without the write lock: a slow endpoint holds no other change up.
    let answer = rt.ai_answer(&op.id, &endpoint)?;
    if answer.plan_patch.is_none() {
        return Err(ApiError::unprocessable(
            "unsupported",
            format!("nothing to propose: the analyzer's answer has no plan_patch ({})", answer.summary),
        ));
    }
    let app = ctx.state.clone();
    let _write = app.0.write.lock().unwrap_or_else(|e| e.into_inner());
    let reason = answer.plan_patch.as_ref().and_then(|p| p.reason.clone());
    rt.attach(vec![audit(&actor, "operation.patch", &op, json!({"analyzer": "ai", "reason": reason}))]);
    let proposal =
        rt.ai_propose(&op.id, &answer)?.ok_or_else(|| ApiError::unprocessable("unsupported", "nothing to propose"))?;
    let root = rt.root_of(&op.id)?;
    drop(_write);
    app.wake(&root);
    let found = opsgraph_runtime::ai::AiDiagnosis { answer, review: Some(Ok(proposal.findings.clone())) };
    let mut reply = json!(views::patch_reply(&op.id, &proposal));
    reply["diagnosis"] = json!(views::ai_diagnosis(&op.id, &found).0);
    Reply::ok(reply)
}
