//! The API's errors: `{"error": {"code": "...", "message": "..."}}` with a stable code and the
//! status that goes with it. Internal errors are 500s with a log line; their cause is not sent.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::auth::TokenError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// More structure for machines (diagnostics, the gate's answer).
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), details: None }
    }

    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, code, message)
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, code, message)
    }

    pub fn forbidden(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, code, message)
    }

    pub fn unauthorized(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, code, message)
    }

    /// An error the client cannot fix: logged with its cause, answered with a generic message.
    pub fn internal(what: &str, cause: &dyn std::error::Error) -> ApiError {
        let mut chain = cause.to_string();
        let mut source = cause.source();
        while let Some(s) = source {
            chain.push_str(": ");
            chain.push_str(&s.to_string());
            source = s.source();
        }
        tracing::error!(error = %chain, "{what}");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("{what}; see the server log"))
    }

    pub fn body(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.details {
            error["details"] = d.clone();
        }
        json!({ "error": error })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

impl From<opsgraph_store::Error> for ApiError {
    fn from(e: opsgraph_store::Error) -> ApiError {
        use opsgraph_store::Error as S;
        match &e {
            S::GateAnswered { .. } => ApiError::conflict("gate_answered", e.to_string()),
            S::Conflict { .. } => ApiError::conflict("conflict", format!("{e}; read it again and retry")),
            S::StalePlan { .. } => ApiError::conflict("stale_revision", e.to_string()),
            S::RequestRecorded { .. } => ApiError::conflict("idempotency_key_in_flight", e.to_string()),
            S::NoOperation(_) => ApiError::not_found("no_operation", e.to_string()),
            S::StaleLease { .. } => ApiError::conflict("stale_lease", e.to_string()),
            S::AgentTaskMoved { .. } => ApiError::conflict("conflict", e.to_string()),
            S::ResourceBusy { .. } => ApiError::conflict("resource_busy", e.to_string()),
            S::LeaseHeld { .. } => ApiError::conflict("operation_leased", e.to_string()),
            S::Fenced { .. } => ApiError::conflict("lease_lost", e.to_string()),
            S::Open { .. }
            | S::TooNew { .. }
            | S::Query(_)
            | S::Blob { .. }
            | S::BadBlob { .. }
            | S::Json(_)
            | S::PgOpen { .. }
            | S::Postgres(_)
            | S::LeasesUnsupported
            | S::NotDurable { .. } => ApiError::internal("store failed", &e),
        }
    }
}

impl From<opsgraph_runtime::Error> for ApiError {
    fn from(e: opsgraph_runtime::Error) -> ApiError {
        use opsgraph_runtime::Error as R;
        let message = e.to_string();
        match e {
            R::Store(s) => s.into(),
            R::Illegal(_) | R::IllegalJob(_) => ApiError::conflict("illegal_transition", message),
            R::NoOperation(_) => ApiError::not_found("no_operation", message),
            R::NoResource(_) => ApiError::not_found("no_resource", message),
            R::NoGate { .. } => ApiError::not_found("no_gate", message),
            R::Blocked(_) => ApiError::unprocessable("plan_blocked", message),
            R::Busy { .. } => ApiError::conflict("resource_busy", message),
            R::AlreadyAnswered { .. } => ApiError::conflict("gate_answered", message),
            R::GateNotOpen { .. } => ApiError::conflict("gate_not_open", message),
            R::Forbidden { .. } => ApiError::forbidden("role_not_allowed", message),
            R::SelfApproval { .. } => ApiError::forbidden("self_approval", message),
            R::BadValue { .. } => ApiError::unprocessable("invalid_gate_value", message),
            R::NoOption { .. } => ApiError::unprocessable("no_such_option", message),
            R::Unsupported(_) => ApiError::unprocessable("unsupported", message),
            // The pack the operation ran was removed since (only a finished operation's may be).
            R::NoPack(_) => ApiError::conflict("pack_missing", message),
            R::Plan(_) | R::Io { .. } => ApiError::internal("the runtime failed", &e),
            R::Secrets(_) => ApiError::internal("secrets are unavailable (master key)", &e),
            R::PackChanged { .. } => ApiError::conflict("pack_changed", message),
            R::PatchRefused(_) => ApiError::unprocessable("patch_refused", message),
            R::LeaseLost { .. } => ApiError::conflict("lease_lost", message),
            R::Ai { code: code @ ("ai_not_configured" | "ai_key_missing"), .. } => ApiError::conflict(code, message),
            R::Ai { code: code @ "ai_policy_forbids", .. } => ApiError::forbidden(code, message),
            R::Ai { code: code @ "ai_unavailable", .. } => ApiError::new(StatusCode::BAD_GATEWAY, code, message),
            R::Ai { code, .. } => ApiError::unprocessable(code, message),
        }
    }
}

impl From<TokenError> for ApiError {
    fn from(e: TokenError) -> ApiError {
        let message = e.to_string();
        match e {
            TokenError::BadName(_) | TokenError::NoRole => ApiError::unprocessable("invalid_token_request", message),
            TokenError::UnknownRole { .. } => ApiError::unprocessable("unknown_role", message),
            TokenError::MixedAi { .. } => ApiError::unprocessable("ai_role_mixed", message),
            TokenError::GrantRefused { .. } => ApiError::forbidden("grant_refused", message),
            TokenError::RevokeRefused { .. } => ApiError::forbidden("revoke_refused", message),
            TokenError::NameTaken(_) => ApiError::conflict("token_name_taken", message),
            TokenError::NoToken(_) => ApiError::not_found("no_token", message),
            TokenError::AlreadyRevoked { .. } => ApiError::conflict("token_already_revoked", message),
            TokenError::Random(_) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message),
            TokenError::Store(s) => s.into(),
        }
    }
}
