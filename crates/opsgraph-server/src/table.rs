//! The one table of routes (method, path, access, the types of its bodies, handler); the router
//! (`routes.rs`) serves it and the OpenAPI document (`openapi.rs`) is built from it. Nothing below
//! the handlers imports it.

use opsgraph_api::*;
use serde_json::Value;

use crate::auth::Permission;
use crate::error::ApiError;
use crate::handlers::{self, Ctx, Reply};
use crate::media::*;
use crate::route::schema_of;
pub use crate::route::{openapi_path, Access, Route, SchemaFn};
use crate::{agent, analyze, catalog, manage, observe, reads, reveal, ui, verifier};

use Access::*;
use Permission::*;

/// `route!(METHOD, PATH, ACCESS, STATUS, BODY [REQUEST_TYPE], QUERY, HANDLER, SUMMARY, -> RESPONSE_TYPE)`
/// for a JSON success, or `…, SUMMARY, media MEDIA_TYPE)` for another.
macro_rules! route {
    (@schema) => { None };
    (@schema $t:ty) => { Some(schema_of::<$t> as SchemaFn) };
    (@route $method:literal, $path:literal, $access:expr, $status:literal, $body:literal $($req:ty)?, $query:expr, $handler:path, $summary:literal, $produces:expr, $response:expr) => {
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
            response: $response,
            handler: $handler,
        }
    };
    ($method:literal, $path:literal, $access:expr, $status:literal, $body:literal $($req:ty)?, $query:expr, $handler:path, $summary:literal, media $produces:expr) => {
        route!(@route $method, $path, $access, $status, $body $($req)?, $query, $handler, $summary, $produces, None)
    };
    ($method:literal, $path:literal, $access:expr, $status:literal, $body:literal $($req:ty)?, $query:expr, $handler:path, $summary:literal, -> $resp:ty) => {
        route!(@route $method, $path, $access, $status, $body $($req)?, $query, $handler, $summary, JSON, route!(@schema $resp))
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
        -> crate::openapi::Document
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
        -> opsgraph_core::plan::render::Preview
    ),
    route!(
        "GET",
        "/api/v1/operations",
        Need(Read),
        200,
        "none",
        &["state", "resource", "pack", "environment"],
        handlers::operations,
        "Operations, filtered by state, resource, pack and environment.",
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
        reads::operation,
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
        "json?" RevealRequest,
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
        -> opsgraph_core::plan::render::Preview
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
        "json?" ReasonRequest,
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
        "json?" ReasonRequest,
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
        "json?" ReasonRequest,
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
        analyze::propose_patch,
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
        "POST",
        "/api/v1/operations/{id}/diagnosis",
        Need(Read),
        200,
        "none",
        &["analyzer"],
        analyze::diagnose,
        "Ask an analyzer: `rules` (the default, as GET) or `ai` (the configured endpoint; its answer recorded and audited, its patch reviewed, not proposed).",
        -> AnalyzerReply
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
        "GET",
        "/api/v1/operations/{id}/jobs/{job}/log",
        Need(Read),
        200,
        "none",
        &["after"],
        observe::job_log,
        "A job's latest attempt's output: live while it runs (masked, from byte `after` on, the last 256 KiB kept), its final log once it ended.",
        -> JobLog
    ),
    route!(
        "POST",
        "/api/v1/operations/{id}/retry",
        Need(Intervene),
        200,
        "json?" RetryRequest,
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
        "GET",
        "/api/v1/inventory",
        Need(Read),
        200,
        "none",
        &["type"],
        catalog::inventory,
        "The resources a plan is built from (the server's inventory and the stored ones), of one `type` or all: id, health, status, capabilities.",
        -> InventoryList
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
        -> opsgraph_runtime::VerifyReport
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
        -> PackList
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
        "POST",
        "/api/v1/packs/catalogue",
        Need(ManagePacks),
        201,
        "json" CatalogueInstallRequest,
        &[],
        manage::install_from_catalogue,
        "Install a pack from a catalogue (`{\"from\": URL, \"pack\": \"name[@version]\", \"replace\": false}`, http(s) only), signed by a key of the server's `trusted_keys`, as `opsgraph pack install NAME --from URL` does; 200 when the same content is installed.",
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
        -> PackVersions
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
        -> ProviderList
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
        -> Policies
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
        "json?" agent::ClaimBody,
        &[],
        agent::claim,
        "An agent long-polls for the next tasks of its resources (`{resources, wait_ms, max_tasks?}`); `task` is null when none came, `more` holds the other tasks of a batch.",
        -> agent::ClaimReply
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
        -> agent::LeaseReply
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
        -> agent::Logged
    ),
    route!(
        "POST",
        "/api/v1/agent/report",
        Need(AgentWork),
        200,
        "agent_report" agent::LeaseBody,
        &[],
        agent::report,
        "The outcome (`{task, lease, report, text?}`; `text`, the job's last output lines, appended in the same commit), within `limits.agent_report_bytes`; audited; 409 `stale_lease` when stale.",
        -> agent::Reported
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
    Reply::typed(&crate::openapi::Document(openapi()))
}

/// The OpenAPI 3.1 document, generated from [`ROUTES`].
pub fn openapi() -> Value {
    crate::openapi::document(ROUTES)
}
