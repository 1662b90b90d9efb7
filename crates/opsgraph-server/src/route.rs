//! A route of the API as data: method, path, who may call it, the types of its bodies, its
//! handler. The table of them is `table.rs`; the OpenAPI document is built from them by
//! `openapi.rs`.

use schemars::{JsonSchema, Schema, SchemaGenerator};

use crate::auth::Permission;
use crate::error::ApiError;
use crate::handlers::{Ctx, Reply};

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

pub(crate) fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// One route. `path` uses axum's syntax (`{id}`, `{*id}` for the rest of the path).
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub access: Access,
    pub summary: &'static str,
    /// The request body: `none`, `json` (an object of type `request`; `json?` when it may be
    /// empty, read as `{}`), `agent_report` (the same,
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

/// The OpenAPI path of a route: `{*id}` becomes `{id}`.
pub fn openapi_path(path: &str) -> String {
    path.replace("{*", "{")
}
