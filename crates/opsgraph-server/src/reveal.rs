//! Artifact content: non-secret artifacts for readers; any artifact, secret ones included, by an
//! explicit and audited reveal. Fail closed: the audit row is committed before the value leaves
//! the server, and when it cannot be, the value is not sent.

use opsgraph_core::pack::Pack;
use opsgraph_core::plan::Plan;
use opsgraph_store::{ArtifactRecord, OperationRecord, Write};
use serde_json::json;

use crate::auth;
use crate::error::ApiError;
use crate::handlers::{Ctx, Reply};
use crate::media::OCTETS;

fn record(ctx: &Ctx, op: &OperationRecord) -> Result<ArtifactRecord, ApiError> {
    let id = ctx.param("artifact");
    ctx.store
        .artifacts(&op.id)?
        .into_iter()
        .rfind(|a| a.id == id)
        .ok_or_else(|| ApiError::not_found("no_artifact", format!("operation `{}` produced no artifact `{id}`", op.id)))
}

/// The pack an operation's plan was made from, as the runtime finds it (same reference, and the
/// same digest when the plan recorded one).
fn pack_of(ctx: &Ctx, op: &OperationRecord) -> Option<Pack> {
    let plan: Plan = serde_json::from_value(ctx.store.plan(&op.plan_revision).ok()??).ok()?;
    ctx.state
        .world()
        .packs
        .iter()
        .find(|p| {
            p.reference() == plan.pack && plan.pack_digest.as_deref().is_none_or(|d| d.is_empty() || p.digest == d)
        })
        .cloned()
}

/// Who may see an artifact, as its declaration says.
enum Visibility {
    /// The declaration names roles (`visible_to_roles`) and the caller holds this one of them.
    Named(String),
    /// The declaration names no roles: what the caller's permissions allow decides.
    Unnamed(String),
}

/// The role by which the caller may see this artifact: one of its declaration's
/// `visible_to_roles`, or any of the caller's roles when the declaration names none. Fails closed
/// when the declaration cannot be found (the pack is no longer loaded, or changed).
fn visible_as(ctx: &Ctx, op: &OperationRecord, a: &ArtifactRecord) -> Result<Visibility, ApiError> {
    let who = ctx.who()?;
    let declared = pack_of(ctx, op).and_then(|p| p.artifacts.get(&a.id).cloned()).ok_or_else(|| {
        ApiError::conflict(
            "visibility_unknown",
            format!(
                "the pack that declared artifact `{}` is not loaded as it was planned, so who may see it is unknown; \
                 it is not shown",
                a.id
            ),
        )
    })?;
    if declared.visible_to_roles.is_empty() {
        return Ok(Visibility::Unnamed(who.roles.first().cloned().unwrap_or_default()));
    }
    who.roles.iter().find(|r| declared.visible_to_roles.contains(r)).cloned().map(Visibility::Named).ok_or_else(|| {
        ApiError::forbidden(
            "role_not_allowed",
            format!(
                "artifact `{}` is visible to {}; your roles: {}",
                a.id,
                declared.visible_to_roles.join(", "),
                who.roles.join(", ")
            ),
        )
    })
}

/// `GET .../artifacts/{artifact}`: the content of a non-secret artifact.
pub(crate) fn artifact_content(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    let a = record(ctx, &op)?;
    if a.sensitivity == "secret" {
        return Err(ApiError::forbidden(
            "secret_artifact",
            format!("artifact `{}` is secret: POST .../artifacts/{}/reveal (permission reveal_secrets)", a.id, a.id),
        ));
    }
    visible_as(ctx, &op, &a)?;
    let content = ctx.runtime()?.reveal_artifact(&op.id, &a.id)?;
    Reply::bytes(OCTETS, content.expose().to_vec(), false)
}

/// `POST .../artifacts/{artifact}/reveal`: the content of any artifact, after its audit row (who,
/// which artifact, the role, the reason; never the value) is committed. An artifact whose
/// declaration names `visible_to_roles` is revealed to those roles (seed §11); one that names none
/// needs the `reveal_secrets` permission. An AI identity reveals nothing.
pub(crate) fn reveal_artifact(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let who = ctx.who()?.clone();
    let actor = who.actor();
    if auth::is_ai(&who.roles) {
        return Err(ApiError::forbidden("ai_identity", format!("{actor} is an AI identity: it never reveals secrets")));
    }
    let body: opsgraph_api::RevealRequest = ctx.json(true)?;
    let op = ctx.operation_record()?;
    let a = record(ctx, &op)?;
    let role = match visible_as(ctx, &op, &a)? {
        Visibility::Named(role) => role,
        Visibility::Unnamed(_) if !who.may(auth::Permission::RevealSecrets) => {
            return Err(ApiError::forbidden(
                "reveal_secrets_needed",
                format!(
                    "artifact `{}` names no visible_to_roles: revealing it needs the reveal_secrets permission",
                    a.id
                ),
            ))
        }
        Visibility::Unnamed(role) => role,
    };
    let content = ctx.runtime()?.reveal_artifact(&op.id, &a.id)?;
    let audit = auth::audit(
        &actor,
        "artifact.reveal",
        &format!("{}/{}/{}", op.id, a.job, a.id),
        Some(&op.id),
        op.resource.as_deref(),
        json!({"job": a.job, "artifact": a.id, "sensitivity": a.sensitivity, "size": a.size, "role": role, "reason": body.reason}),
    );
    // No row, no value: `content` is dropped (and zeroized) when the commit fails.
    ctx.store.commit(&[Write::Audit(audit)])?;
    Reply::bytes(OCTETS, content.expose().to_vec(), true)
}
