//! The API's envelopes and small documents, typed: the lists the `GET` routes answer with, the
//! bodies the `POST` routes take, and the short replies of mutations. Each derives `JsonSchema`,
//! and the route table names it, so the OpenAPI document describes exactly what is serialized
//! (`opsgraph_server::table`).

use opsgraph_store::{AuditRecord, EvidenceRecord, JobRecord};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dto::{
    ArtifactView, DiagnosisView, LogEntry, OperationSummary, PatchView, ResourceRow, TimelineView, TokenView,
};

/// A liveness or readiness answer: `ok` (the process is up), `ready` (the store answers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Status {
    pub status: String,
}

/// The caller (`GET /me`): its token's id, name, roles and what they allow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Me {
    pub name: String,
    /// As recorded in timelines and the audit log (`user:NAME`, `agent:NAME`, `ai-agent:NAME`).
    pub actor: String,
    /// The token's id (never its secret).
    pub token: String,
    pub roles: Vec<String>,
    pub permissions: Vec<String>,
}

/// A role and its permissions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RoleView {
    pub name: String,
    /// Built in, or defined by the server's `config.yaml`.
    pub builtin: bool,
    pub permissions: Vec<String>,
}

/// The lists the `GET` routes answer with, each an object whose one field is the list
/// (`{"jobs": [...]}`): declared here once, each with its doc, its name and its field.
macro_rules! lists {
    ($($(#[$doc:meta])* $name:ident { $field:ident: $item:ty })*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
        pub struct $name {
            pub $field: Vec<$item>,
        }
    )*};
}

lists! {
    /// `GET /roles`.
    RoleList { roles: RoleView }
    /// `GET /operations`, newest first.
    OperationList { operations: OperationItem }
    /// `GET /operations/{id}/jobs`.
    JobList { jobs: JobRecord }
    /// `GET /operations/{id}/timeline`, oldest first.
    Timeline { timeline: TimelineView }
    /// `GET /operations/{id}/evidence`.
    EvidenceList { evidence: EvidenceRecord }
    /// `GET /operations/{id}/artifacts`.
    ArtifactList { artifacts: ArtifactView }
    /// `GET /operations/{id}/patches`.
    PatchList { patches: PatchView }
    /// `GET /operations/{id}/diagnosis`: one entry per failed job.
    DiagnosisList { diagnosis: DiagnosisView }
    /// `GET /operations/{id}/logs`.
    LogList { logs: LogEntry }
    /// `GET /resources`.
    ResourceList { resources: ResourceRow }
    /// `GET /audit`, oldest first.
    AuditList { audit: AuditRecord }
    /// `GET /tokens`.
    TokenList { tokens: TokenView }
}

/// One operation of `GET /operations`: its summary, the pack it runs and the environment its
/// intent names, which the list filters by (`?pack=`, `?environment=`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OperationItem {
    #[serde(flatten)]
    pub summary: OperationSummary,
    /// `id@version` as its plan records it; the intent's `pack` when no plan is stored.
    pub pack: Option<String>,
    /// The intent's `environment`.
    pub environment: Option<String>,
}

/// `POST /operations/{id}/diagnosis`: the rules analyzer's list (as `GET`), or the AI's one
/// answer with the reviewer's verdict on its patch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AnalyzerReply {
    pub diagnosis: Vec<DiagnosisView>,
    /// The reviewer on the AI's patch (none from the rules analyzer, or without a patch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<crate::dto::ReviewView>,
}

/// `GET /operations/{id}/jobs/{job}/log?after=`: a job's latest attempt's output. While it runs,
/// its live output (masked as its final log is) from byte `after` on, of the last 256 KiB it
/// keeps; once the attempt ended, its whole final log, which replaces what was tailed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobLog {
    pub job: String,
    /// The job's state.
    pub state: opsgraph_core::model::JobState,
    /// The attempt shown; 0 before the first.
    pub attempt: u32,
    /// The attempt is still running: `text` is its live output from `from` to `next`.
    pub running: bool,
    /// The offset of `text`'s first byte in the attempt's live output: later than `after` when
    /// the live log no longer keeps what was asked for. 0 for a final log.
    pub from: u64,
    /// Where to ask from next (`after=`).
    pub next: u64,
    pub text: String,
    /// `text` is the ended attempt's whole final log (empty when it left no output).
    #[serde(rename = "final")]
    pub final_log: bool,
}

/// A token just created (`POST /tokens`): its secret is shown here once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CreatedToken {
    #[serde(flatten)]
    pub view: TokenView,
    pub token: String,
}

/// What a resource change did (`POST /resources`: `created` or `replaced`; `DELETE`: `deleted`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceChange {
    pub id: String,
    pub result: String,
}

/// A pack installed from an archive (`POST /packs`): `installed`, `replaced` or `unchanged`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PackInstalled {
    pub result: String,
    pub id: String,
    pub version: String,
    pub reference: String,
    pub digest: String,
    /// The digest it replaced.
    pub previous: Option<String>,
    pub source: String,
}

/// A pack version removed (`DELETE /packs/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PackRemoved {
    pub result: String,
    pub reference: String,
    pub digest: String,
}

/// The body of a gate's answer (`POST /operations/{id}/gates/{gate}/answer`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// One of the gate's options.
    pub option: String,
    /// A typed value (a missing input's).
    #[serde(default)]
    pub value: Option<Value>,
    /// The plan revision the answer was given for; it must be the operation's current one
    /// (422 `revision_required` without it).
    #[serde(default)]
    #[schemars(required)]
    pub revision: Option<String>,
}

/// The body of pause and cancel (optional): why, for the timeline and the audit log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReasonRequest {
    #[serde(default)]
    pub reason: Option<String>,
}

/// The body of `retry` (optional): the failed jobs to run again, all when empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    #[serde(default)]
    pub jobs: Vec<String>,
}

/// The body of `POST /tokens`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    pub name: String,
    pub roles: Vec<String>,
}

/// The body of `POST /verifications`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// The resource's id (`type/name`).
    pub resource: String,
}

/// The body of `POST /packs/catalogue`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CatalogueInstallRequest {
    /// The catalogue's URL (http or https; its `index.json` beside it).
    pub from: String,
    /// `name` (the newest version) or `name@version`.
    pub pack: String,
    /// Replace the files of an installed version with other content.
    #[serde(default)]
    pub replace: bool,
}

/// The body of an artifact's reveal (optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RevealRequest {
    /// Why, for the audit log.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A pack the server loaded, in the list (`GET /packs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PackSummary {
    pub id: String,
    pub version: String,
    /// `id@version`.
    pub reference: String,
    pub title: Option<String>,
    /// `sha256:…` over its files.
    pub digest: String,
    pub resource_types: Vec<String>,
    pub actions: Vec<String>,
    pub templates: Vec<TemplateRef>,
    /// Its jobs' ids.
    pub jobs: Vec<String>,
}

/// A plan template of a pack: its id and the action it carries out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TemplateRef {
    pub id: String,
    pub action: String,
}

/// `GET /packs`: the loaded packs, and the registry's rows as `opsgraph pack list -o json` prints
/// them (`null` when the server was started with `--packs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PackList {
    pub packs: Vec<PackSummary>,
    pub registry: Option<RegistryRows>,
}

/// The registry's packs (bundled and installed, with their status) and the problems it found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RegistryRows {
    pub rows: Vec<Value>,
    pub problems: Vec<String>,
}

/// `GET /packs/{id}`: every loaded version of a pack (`id`), or one (`id@version`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PackVersions {
    /// As asked: `id` or `id@version`.
    pub id: String,
    pub versions: Vec<PackDetail>,
}

/// Everything a pack declares, as loaded. Defaults of secret parameters read `(secret)`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PackDetail {
    pub id: String,
    pub version: String,
    /// `id@version`.
    pub reference: String,
    pub title: Option<String>,
    /// `sha256:…` over its files.
    pub digest: String,
    pub resource_types: Vec<String>,
    pub actions: Vec<String>,
    pub templates: Vec<opsgraph_core::model::PlanTemplate>,
    /// Its job library, by id.
    pub jobs: std::collections::BTreeMap<String, PackJob>,
    pub manifest: opsgraph_core::model::ScenarioPack,
    pub evidence: std::collections::BTreeMap<String, opsgraph_core::model::Evidence>,
    pub artifacts: std::collections::BTreeMap<String, opsgraph_core::model::Artifact>,
    pub remedies: Vec<opsgraph_core::model::Remedy>,
    pub providers: Vec<opsgraph_core::model::Provider>,
}

/// A job as declared, with the text of the script it runs when it runs one of the pack's.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PackJob {
    #[serde(flatten)]
    pub job: opsgraph_core::model::Job,
    /// The script's text (absent for a command, or a script over 256 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_text: Option<String>,
}

/// `GET /providers`: the providers of the world documents and of the packs.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ProviderList {
    pub providers: Vec<ProviderEntry>,
}

/// A provider and where it was declared.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ProviderEntry {
    #[serde(flatten)]
    pub provider: opsgraph_core::model::Provider,
    /// `world`, or `pack:id@version`.
    pub source: String,
}

/// `GET /policies`: the capability policy and the operations policy the server plans with.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Policies {
    pub capability_policy: opsgraph_core::model::CapabilityPolicy,
    pub operations_policy: opsgraph_core::model::OperationsPolicy,
}

/// `GET /inventory`: the resources a plan is built from — the server's inventory documents and
/// the resources operations and people stored — as a form picks targets among them.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct InventoryList {
    pub resources: Vec<InventoryEntry>,
}

/// One resource of the inventory: what a person choosing it needs to see.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct InventoryEntry {
    /// `type/name`, as an intent's `targets` name it.
    pub id: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub name: String,
    pub environment: Option<String>,
    pub health: opsgraph_core::model::Health,
    pub status: Option<opsgraph_core::model::ResourceStatus>,
    pub observed_state: Option<String>,
    /// The capabilities it provides.
    pub provides: Vec<String>,
}
