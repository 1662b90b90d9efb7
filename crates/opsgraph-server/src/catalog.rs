//! What the server was started with: packs, providers, policies (read-only).

use std::path::Path;

use opsgraph_api::{
    InventoryEntry, InventoryList, PackDetail, PackJob, PackList, PackSummary, PackVersions, Policies, ProviderEntry,
    ProviderList, TemplateRef,
};
use opsgraph_core::model::Job;
use opsgraph_core::pack::Pack;
use opsgraph_core::plan::render::SECRET;
use serde_json::json;

use crate::error::ApiError;
use crate::handlers::{Ctx, Reply};

/// Script text larger than this is not inlined (`script_text` is then absent).
const SCRIPT_BYTES: u64 = 256 * 1024;

fn summary(p: &Pack) -> PackSummary {
    PackSummary {
        id: p.id().to_string(),
        version: p.manifest.version.clone(),
        reference: p.reference(),
        title: p.manifest.title.clone(),
        digest: p.digest.clone(),
        resource_types: p.manifest.resource_types.clone(),
        actions: p.manifest.actions.clone(),
        templates: p.templates.iter().map(|t| TemplateRef { id: t.id.clone(), action: t.action.clone() }).collect(),
        jobs: p.jobs.keys().cloned().collect(),
    }
}

/// A job as declared, with the text of the script it runs when it runs one of the pack's.
fn job(root: &str, job: &Job) -> PackJob {
    let script_text = job.run.as_ref().and_then(|r| r.script.as_deref()).and_then(|script| {
        let path = Path::new(root).join(script);
        let small = std::fs::metadata(&path).is_ok_and(|m| m.len() <= SCRIPT_BYTES);
        small.then(|| std::fs::read_to_string(&path).ok()).flatten()
    });
    PackJob { job: job.clone(), script_text }
}

/// Everything a pack declares. Defaults of secret parameters are not shown.
fn detail(p: &Pack) -> PackDetail {
    let mut templates = p.templates.clone();
    for spec in templates.iter_mut().flat_map(|t| t.parameters.values_mut()) {
        if spec.secret && spec.default.is_some() {
            spec.default = Some(json!(SECRET));
        }
    }
    let s = summary(p);
    PackDetail {
        id: s.id,
        version: s.version,
        reference: s.reference,
        title: s.title,
        digest: s.digest,
        resource_types: s.resource_types,
        actions: s.actions,
        templates,
        jobs: p.jobs.iter().map(|(id, j)| (id.clone(), job(&p.root, j))).collect(),
        manifest: p.manifest.clone(),
        evidence: p.evidence.clone(),
        artifacts: p.artifacts.clone(),
        remedies: p.remedies.clone(),
        providers: p.providers.clone(),
    }
}

pub(crate) fn packs(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let packs = ctx.state.world().packs.iter().map(summary).collect();
    Reply::ok(json!(PackList { packs, registry: crate::manage::registry_rows(ctx)? }))
}

/// `{id}` is a pack id (every loaded version, highest last as loaded) or `id@version`.
pub(crate) fn pack(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let wanted = ctx.param("id");
    let versions: Vec<PackDetail> =
        ctx.state.world().packs.iter().filter(|p| p.id() == wanted || p.reference() == wanted).map(detail).collect();
    if versions.is_empty() {
        return Err(ApiError::not_found("no_pack", format!("no pack `{wanted}` is loaded; see /api/v1/packs")));
    }
    Reply::typed(&PackVersions { id: wanted, versions })
}

pub(crate) fn providers(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let w = ctx.state.world();
    let world = w.providers.iter().map(|p| ProviderEntry { provider: p.clone(), source: "world".into() });
    let packs = w.packs.iter().flat_map(|pack| {
        let source = format!("pack:{}", pack.reference());
        pack.providers.iter().map(move |p| ProviderEntry { provider: p.clone(), source: source.clone() })
    });
    Reply::typed(&ProviderList { providers: world.chain(packs).collect() })
}

pub(crate) fn policies(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let w = ctx.state.world();
    Reply::typed(&Policies { capability_policy: w.policy.clone(), operations_policy: w.operations.clone() })
}

/// `GET /inventory?type=T`: the resources a plan would be built from (of type `T`), as the
/// intent form offers them for its targets, with their health.
pub(crate) fn inventory(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let wanted = ctx.query.get("type").cloned();
    let all = opsgraph_runtime::manage::world_resources(&ctx.state.world().resources, &*ctx.store)?;
    let resources = all
        .into_iter()
        .filter(|r| wanted.as_ref().is_none_or(|t| &r.type_ == t))
        .map(|r| InventoryEntry {
            provides: r.provides.iter().map(|c| c.capability.clone()).collect(),
            id: r.id,
            type_: r.type_,
            name: r.name,
            environment: r.environment,
            health: r.health,
            status: r.status,
            observed_state: r.observed_state,
        })
        .collect();
    Reply::typed(&InventoryList { resources })
}
